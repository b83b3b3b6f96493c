# Jetson / Tegra machines: the CUDA driver libraries devicequery and containers load, and
# meta-tegra's nvidia-container-toolkit (the runtime node-setup wires in). meta-tegra only
# has the toolkit recipe when meta-virtualization is present too, so recommend it only then.
# Machine-specific content makes the packagegroup machine-specific: packagegroup-edgegpu.bb sets
# PACKAGE_ARCH:tegra before it inherits packagegroup (here, after the inherit, it would have no
# effect). "tegra" is the SoC-family override of every meta-tegra machine (oelint has no
# meta-tegra data).
EDGEGPU_TEGRA_TOOLKIT = "${@bb.utils.contains('BBFILE_COLLECTIONS', 'virtualization-layer', 'nvidia-container-toolkit', '', d)}"
# nooelint: oelint.vars.specific - tegra comes from meta-tegra's MACHINEOVERRIDES
RRECOMMENDS:${PN}:append:tegra = " tegra-libraries-cuda ${EDGEGPU_TEGRA_TOOLKIT}"
