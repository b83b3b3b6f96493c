SUMMARY = "edgegpu: everything a k3s node needs to advertise and run NVIDIA GPUs"
DESCRIPTION = "Pulls in edgegpu-node-setup (container runtime wiring at boot), the CDI spec \
               refresh (edgegpu-cdi), the device \
               plugin, devicequery, the k3s auto-deploy manifests and the k3s node label the \
               plugin DaemonSets select on. The host-mode plugin \
               service (edgegpu-device-plugin-host) is left out on purpose: it replaces the \
               DaemonSet."
HOMEPAGE = "https://github.com/edgegpu/edgegpu"
BUGTRACKER = "https://github.com/edgegpu/edgegpu/issues"
SECTION = "admin"
LICENSE = "Apache-2.0"

# Machine-specific on Jetson (the bbappend recommends tegra-libraries-cuda and meta-tegra's
# container toolkit there). It must be set before `inherit packagegroup`: the class fixes
# PACKAGE_ARCH_EXPANDED with `:=` at its inherit line and inherits allarch when that is "all",
# and allarch then sets PACKAGE_ARCH to "all", dropping any override set later (a bbappend's
# PACKAGE_ARCH:tegra never takes effect). "tegra" is meta-tegra's SoC-family machine override;
# without meta-tegra it never applies and the packagegroup stays allarch.
# yocto/tools/tests/test_packagegroup_arch.py proves it with bitbake's own parser.
# nooelint: oelint.vars.specific - tegra comes from meta-tegra's MACHINEOVERRIDES
PACKAGE_ARCH:tegra = "${MACHINE_ARCH}"

inherit packagegroup

# edgegpu-k3s-node-label always, not only with the k3s-manifests PACKAGECONFIG: the manifests
# take effect on the k3s server only, while the label must be on every GPU node, agents
# included, for the server's DaemonSets to schedule there. EDGEGPU_NODE_LABEL = "" empties it.
RDEPENDS:${PN} = "devicequery \
                  edgegpu-cdi \
                  edgegpu-device-plugin \
                  edgegpu-k3s-manifests \
                  edgegpu-k3s-node-label \
                  edgegpu-node-setup"
