SUMMARY = "NVIDIA GPU support for k3s edge nodes: device plugin, node-setup and devicequery"
DESCRIPTION = "Builds the edgegpu Rust workspace: edgegpu-device-plugin (kubelet device plugin \
               advertising nvidia.com/gpu on Jetson/Tegra and discrete-GPU nodes), \
               edgegpu-node-setup (wires the NVIDIA container runtime into k3s, containerd and \
               docker) and devicequery (CUDA probe). Each program is packaged on its own; \
               packagegroup-edgegpu pulls in the usual set."
HOMEPAGE = "https://github.com/edgegpu/edgegpu"
BUGTRACKER = "https://github.com/edgegpu/edgegpu/issues"
SECTION = "admin"
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://LICENSE;md5=3b83ef96387f14655fc854ddc3c6bd57"

# No CVEs are known for this product; the name lets cve-check find any future ones.
CVE_PRODUCT = "edgegpu"

# Keep the base in step with [workspace.package] version in Cargo.toml (checked in CI).
# From nanbield on, "+git" gets the SRCREV appended automatically.
PV = "0.1.0+git"

# Source policy: this repository over https, on branch main, at a pinned commit. No AUTOREV:
# the crates in edgegpu-crates.inc must match the Cargo.lock of exactly this commit.
# To build a local checkout instead, see docs/yocto.md ("Developing against a local checkout").
SRC_URI = "git://github.com/edgegpu/edgegpu.git;protocol=https;branch=main;destsuffix=git \
           file://edgegpu-node-setup.service \
           file://edgegpu-node-setup.default \
           file://edgegpu-device-plugin.service \
           file://edgegpu-mps-control-daemon.service \
           file://edgegpu-device-plugin.default \
           file://edgegpu-cdi-refresh.service \
           file://edgegpu-cdi-refresh.path \
           file://edgegpu-cdi.default \
           file://edgegpu-node-check.service \
           file://edgegpu-node-check.path \
           file://edgegpu-node-check.timer \
           "
SRCREV = "19fef8c35a94029727fd4135f13f0a41b4eba571"

# scarthgap unpacks into WORKDIR; styhead and later into UNPACKDIR (and wrynose forbids S
# outside it). Do not assign UNPACKDIR itself: a weak default here would win over
# bitbake.conf's and make do_unpack clean all of WORKDIR.
EDGEGPU_UNPACKDIR = "${@d.getVar('UNPACKDIR') or d.getVar('WORKDIR')}"
S = "${EDGEGPU_UNPACKDIR}/git"

inherit cargo cargo-update-recipe-crates systemd

# crate:// entries and checksums for every crates.io package in Cargo.lock; regenerate with
# scripts/gen-crates-inc.py (same output as `bitbake -c update_crates edgegpu`).
require ${BPN}-crates.inc

# k3s-manifests: the device-plugin DaemonSets, node labeller and metrics Service from deploy/k3s
#   (no RuntimeClass: k3s or edgegpu-node-setup owns it), installed where the k3s server applies
#   them on its own (auto-deploy manifests directory).
# devicequery-job: also the one-shot devicequery Job (a GPU smoke test at first boot).
PACKAGECONFIG ??= "k3s-manifests"
PACKAGECONFIG[k3s-manifests] = ""
PACKAGECONFIG[devicequery-job] = ""

# The workspace root is the cargo manifest (CARGO_SRC_DIR empty). Build only the three
# binaries (edgegpu is the multi-call binary of the device plugin, the DRA driver and the
# labeller, installed below as links named after them): a plain `cargo build` of the workspace would also build the test-only
# edgegpu-testkit crate and leave library rlibs in the target dir, and cargo_do_install
# copies every executable (and on scarthgap every *.rlib) it finds there. `--bin` makes
# cargo place nothing but these executables at the top of the target dir.
CARGO_SRC_DIR = ""
EDGEGPU_BINS = "edgegpu edgegpu-node-setup devicequery"
EDGEGPU_BINS:class-native = "edgegpu-node-setup"
CARGO_BUILD_FLAGS += "${@' '.join('--bin ' + b for b in d.getVar('EDGEGPU_BINS').split())}"

# The workspace's release profile strips symbols; leave that to bitbake, which splits what it
# strips into the -dbg package (and fails already-stripped binaries in QA).
export CARGO_PROFILE_RELEASE_STRIP = "false"

EDGEGPU_K3S_MANIFESTS_DIR ?= "${localstatedir}/lib/rancher/k3s/server/manifests"

do_install:append() {
    # cargo_do_install copied every executable from the target dir: make sure that is
    # exactly the programs asked for (nothing from tests, examples or build scripts).
    for installed in ${D}${bindir}/*; do
        case " ${EDGEGPU_BINS} " in
        *" $(basename "$installed") "*) ;;
        *) bbfatal "cargo_do_install installed $(basename "$installed"), which is not one of: ${EDGEGPU_BINS}" ;;
        esac
    done
    for program in ${EDGEGPU_BINS}; do
        [ -x "${D}${bindir}/$program" ] || bbfatal "${bindir}/$program was not built"
    done
}

# The programs of the multi-call binary: links to it, so the units keep their commands.
EDGEGPU_MULTI_CALL_PROGRAMS = "edgegpu-device-plugin edgegpu-dra-driver edgegpu-labeller"

do_install:append:class-target() {
    for program in ${EDGEGPU_MULTI_CALL_PROGRAMS}; do
        ln -s edgegpu ${D}${bindir}/$program
    done
    install -d ${D}${systemd_system_unitdir} ${D}${sysconfdir}/default
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-node-setup.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-device-plugin.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-mps-control-daemon.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-node-setup.default ${D}${sysconfdir}/default/edgegpu-node-setup
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-device-plugin.default ${D}${sysconfdir}/default/edgegpu-device-plugin
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-cdi-refresh.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-cdi-refresh.path ${D}${systemd_system_unitdir}/
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-cdi.default ${D}${sysconfdir}/default/edgegpu-cdi
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-node-check.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-node-check.path ${D}${systemd_system_unitdir}/
    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-node-check.timer ${D}${systemd_system_unitdir}/

    # Kubernetes objects: Job manifests only with devicequery-job, all others with
    # k3s-manifests. Prefixed with "edgegpu-" so they cannot replace a k3s-owned file.
    want_manifests=${@bb.utils.contains('PACKAGECONFIG', 'k3s-manifests', 'true', 'false', d)}
    want_job=${@bb.utils.contains('PACKAGECONFIG', 'devicequery-job', 'true', 'false', d)}
    if $want_manifests || $want_job; then
        install -d ${D}${EDGEGPU_K3S_MANIFESTS_DIR}
        for manifest in ${S}/deploy/k3s/*.yaml; do
            [ -f "$manifest" ] || bbfatal "no Kubernetes manifests found in ${S}/deploy/k3s"
            if grep -q '^kind:[[:space:]]*Job[[:space:]]*$' "$manifest"; then
                $want_job || continue
            else
                $want_manifests || continue
            fi
            name=$(basename "$manifest")
            install -m 0644 "$manifest" ${D}${EDGEGPU_K3S_MANIFESTS_DIR}/edgegpu-${name#edgegpu-}
        done
    fi
}

# One package per program. ${PN} itself stays empty (and is not created); use
# packagegroup-edgegpu or name the packages below.
PACKAGES =+ "edgegpu-device-plugin edgegpu-device-plugin-host edgegpu-node-setup edgegpu-cdi devicequery edgegpu-k3s-manifests"

FILES:edgegpu-device-plugin += "${bindir}/edgegpu ${bindir}/edgegpu-device-plugin ${bindir}/edgegpu-dra-driver \
                                ${bindir}/edgegpu-labeller"
# Host mode: the plugin as a systemd service instead of the Kubernetes DaemonSet. Opt-in by
# installing this package; never together with the DaemonSet on one node.
FILES:edgegpu-device-plugin-host += "${systemd_system_unitdir}/edgegpu-device-plugin.service \
                                     ${systemd_system_unitdir}/edgegpu-mps-control-daemon.service \
                                     ${sysconfdir}/default/edgegpu-device-plugin"
# edgegpu-node-check.path: after a driver, L4T, package or k3s change, regenerate the CDI spec
# and run `edgegpu-node-setup doctor`, whose verdicts reach the journal, node exporter and NFD.
FILES:edgegpu-node-setup += "${bindir}/edgegpu-node-setup \
                             ${systemd_system_unitdir}/edgegpu-node-setup.service \
                             ${systemd_system_unitdir}/edgegpu-node-check.service \
                             ${systemd_system_unitdir}/edgegpu-node-check.path \
                             ${systemd_system_unitdir}/edgegpu-node-check.timer \
                             ${sysconfdir}/default/edgegpu-node-setup"
# The CDI spec of the GPUs, refreshed at boot and when the driver or L4T's container lists
# change (edgegpu-node-setup cdi generate), for runtimes in CDI mode.
FILES:edgegpu-cdi += "${systemd_system_unitdir}/edgegpu-cdi-refresh.service \
                      ${systemd_system_unitdir}/edgegpu-cdi-refresh.path \
                      ${sysconfdir}/default/edgegpu-cdi"
FILES:devicequery += "${bindir}/devicequery"
FILES:edgegpu-k3s-manifests += "${EDGEGPU_K3S_MANIFESTS_DIR}"

CONFFILES:edgegpu-device-plugin-host = "${sysconfdir}/default/edgegpu-device-plugin"
CONFFILES:edgegpu-node-setup = "${sysconfdir}/default/edgegpu-node-setup"
CONFFILES:edgegpu-cdi = "${sysconfdir}/default/edgegpu-cdi"

# Empty when PACKAGECONFIG has neither manifest option, so that packagegroup-edgegpu can
# always depend on it.
ALLOW_EMPTY:edgegpu-k3s-manifests = "1"

RDEPENDS:edgegpu-device-plugin-host = "edgegpu-device-plugin"
RDEPENDS:edgegpu-cdi = "edgegpu-node-setup"

SYSTEMD_PACKAGES = "edgegpu-node-setup edgegpu-device-plugin-host edgegpu-cdi"
SYSTEMD_SERVICE:edgegpu-node-setup = "edgegpu-node-setup.service edgegpu-node-check.service edgegpu-node-check.path edgegpu-node-check.timer"
SYSTEMD_SERVICE:edgegpu-device-plugin-host = "edgegpu-device-plugin.service edgegpu-mps-control-daemon.service"
SYSTEMD_AUTO_ENABLE:edgegpu-node-setup = "enable"
SYSTEMD_AUTO_ENABLE:edgegpu-device-plugin-host = "enable"
SYSTEMD_SERVICE:edgegpu-cdi = "edgegpu-cdi-refresh.service edgegpu-cdi-refresh.path"
SYSTEMD_AUTO_ENABLE:edgegpu-cdi = "enable"

# edgegpu-native provides edgegpu-node-setup for edgegpu_node_setup_rootfs.bbclass, which runs
# it against the image root inside do_rootfs.
BBCLASSEXTEND = "native"
