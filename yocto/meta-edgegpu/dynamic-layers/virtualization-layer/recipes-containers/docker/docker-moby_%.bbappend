# Only with DISTRO_FEATURES "edgegpu": adding this layer alone must not change docker.
# nooelint: oelint.spaces.lineend - false positive: the inline python may expand to nothing
require ${@bb.utils.contains('DISTRO_FEATURES', 'edgegpu', 'docker-moby-edgegpu.inc', '', d)}
