# Only with DISTRO_FEATURES "edgegpu": adding this layer alone must not change k3s.
# nooelint: oelint.spaces.lineend - false positive: the inline python may expand to nothing
require ${@bb.utils.contains('DISTRO_FEATURES', 'edgegpu', 'k3s-edgegpu.inc', '', d)}
