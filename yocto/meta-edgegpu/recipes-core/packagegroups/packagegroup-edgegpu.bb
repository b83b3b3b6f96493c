SUMMARY = "edgegpu: everything a k3s node needs to advertise and run NVIDIA GPUs"
DESCRIPTION = "Pulls in edgegpu-node-setup (container runtime wiring at boot), the device \
               plugin, devicequery, the k3s auto-deploy manifests and the k3s node label the \
               plugin DaemonSets select on. The host-mode plugin \
               service (edgegpu-device-plugin-host) is left out on purpose: it replaces the \
               DaemonSet."
HOMEPAGE = "https://github.com/edgegpu/edgegpu"
BUGTRACKER = "https://github.com/edgegpu/edgegpu/issues"
SECTION = "admin"
LICENSE = "Apache-2.0"

inherit packagegroup

# edgegpu-k3s-node-label always, not only with the k3s-manifests PACKAGECONFIG: the manifests
# take effect on the k3s server only, while the label must be on every GPU node, agents
# included, for the server's DaemonSets to schedule there. EDGEGPU_NODE_LABEL = "" empties it.
RDEPENDS:${PN} = "devicequery \
                  edgegpu-device-plugin \
                  edgegpu-k3s-manifests \
                  edgegpu-k3s-node-label \
                  edgegpu-node-setup"
