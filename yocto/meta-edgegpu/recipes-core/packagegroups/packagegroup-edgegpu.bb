SUMMARY = "edgegpu: everything a k3s node needs to advertise and run NVIDIA GPUs"
DESCRIPTION = "Pulls in edgegpu-node-setup (container runtime wiring at boot), the device \
               plugin, devicequery and the k3s auto-deploy manifests. The host-mode plugin \
               service (edgegpu-device-plugin-host) is left out on purpose: it replaces the \
               DaemonSet."
HOMEPAGE = "https://github.com/edgegpu/edgegpu"
BUGTRACKER = "https://github.com/edgegpu/edgegpu/issues"
SECTION = "admin"
LICENSE = "Apache-2.0"

inherit packagegroup

RDEPENDS:${PN} = "devicequery \
                  edgegpu-device-plugin \
                  edgegpu-k3s-manifests \
                  edgegpu-node-setup"
