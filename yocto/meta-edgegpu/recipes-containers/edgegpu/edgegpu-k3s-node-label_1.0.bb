# nooelint: oelint.var.bbclassextend - a config file for the target's k3s: native/nativesdk variants make no sense
SUMMARY = "k3s config drop-in labelling the node edgegpu.io/gpu=jetson or =discrete"
DESCRIPTION = "Installs /etc/rancher/k3s/config.yaml.d/50-edgegpu-node-label.yaml, which makes \
               k3s (server or agent) register the node with the edgegpu.io/gpu label that the \
               edgegpu device-plugin DaemonSets select on: jetson on Tegra machines, discrete \
               otherwise. Without it the plugin pod is never scheduled until someone labels \
               the node by hand."
HOMEPAGE = "https://github.com/edgegpu/edgegpu"
BUGTRACKER = "https://github.com/edgegpu/edgegpu/issues"
SECTION = "admin"
LICENSE = "Apache-2.0"
# nooelint: oelint.var.licenseremotefile - no upstream source: the layer's own template, under the common Apache-2.0 text
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/Apache-2.0;md5=89aea4e17d99a7cacdbeed46a0096b10"

# Part of the edgegpu project (lets cve-check find any future CVEs).
CVE_PRODUCT = "edgegpu"

SRC_URI = "file://50-edgegpu-node-label.yaml.in"

# scarthgap unpacks into WORKDIR, styhead and later into UNPACKDIR (as in edgegpu_git.bb).
EDGEGPU_UNPACKDIR = "${@d.getVar('UNPACKDIR') or d.getVar('WORKDIR')}"
S = "${EDGEGPU_UNPACKDIR}"

# The label's value depends on the machine (and so does the package): never allarch.
PACKAGE_ARCH = "${MACHINE_ARCH}"

# The values the DaemonSets in deploy/k3s select on (checked against them in CI).
EDGEGPU_NODE_LABEL_VALUES = "jetson discrete"
# The value for host-mode nodes (edgegpu-device-plugin-host): no DaemonSet selects a node whose
# edgegpu.io/gpu has another value, and the node labeller never changes it, so the node never
# runs a second plugin (checked in CI against deploy/k3s).
EDGEGPU_NODE_LABEL_HOST = "host"
# Which one this image's nodes get: "jetson" where meta-tegra's MACHINEOVERRIDES contain
# "tegra", else "discrete". Set it in local.conf to override: "host" on images that install
# edgegpu-device-plugin-host; "" installs no drop-in.
EDGEGPU_NODE_LABEL ?= "${@'jetson' if 'tegra' in (d.getVar('MACHINEOVERRIDES') or '').split(':') else 'discrete'}"

EDGEGPU_K3S_CONFIG_DIR = "${sysconfdir}/rancher/k3s/config.yaml.d"
EDGEGPU_NODE_LABEL_FILE = "${EDGEGPU_K3S_CONFIG_DIR}/50-edgegpu-node-label.yaml"

# Nothing to configure or compile: do_install fills in the template.
do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    label="${EDGEGPU_NODE_LABEL}"
    [ -n "$label" ] || return 0
    case " ${EDGEGPU_NODE_LABEL_VALUES} ${EDGEGPU_NODE_LABEL_HOST} " in
    *" $label "*) ;;
    *) bbfatal "EDGEGPU_NODE_LABEL is '$label': the edgegpu DaemonSets select only on one of: ${EDGEGPU_NODE_LABEL_VALUES} (${EDGEGPU_NODE_LABEL_HOST}: a host-mode node, which none selects; empty: no label)" ;;
    esac
    # The template says node-label+: (append to the list from config.yaml and earlier
    # drop-ins, not replace it). k3s applies node labels when the node registers.
    install -d ${D}${EDGEGPU_K3S_CONFIG_DIR}
    sed -e "s/@EDGEGPU_NODE_LABEL@/$label/" ${EDGEGPU_UNPACKDIR}/50-edgegpu-node-label.yaml.in \
        >${D}${EDGEGPU_NODE_LABEL_FILE}
    chmod 0644 ${D}${EDGEGPU_NODE_LABEL_FILE}
    grep -qx "  - edgegpu.io/gpu=$label" ${D}${EDGEGPU_NODE_LABEL_FILE} ||
        bbfatal "50-edgegpu-node-label.yaml.in has no '  - edgegpu.io/gpu=@EDGEGPU_NODE_LABEL@' line"
}

FILES:${PN} += "${EDGEGPU_NODE_LABEL_FILE}"
# An edited label survives package upgrades.
CONFFILES:${PN} = "${EDGEGPU_NODE_LABEL_FILE}"
# Empty with EDGEGPU_NODE_LABEL = "", so that packagegroup-edgegpu can always depend on it.
ALLOW_EMPTY:${PN} = "1"
