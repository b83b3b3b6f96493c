#!/usr/bin/env bash
# Builds the Debian packages, the offline bundles and the SBOMs from the release binaries and
# images already in DIST_DIR (scripts/build-release.sh, scripts/build-images.sh), then checks
# them with their real consumers. docs/packages.md describes what is built and why.
#
#   DIST_DIR/packages/  <package>_<version>-<revision>_<arch>.deb for amd64 and arm64, made by
#                       cargo-deb (--no-build, from the binaries in DIST_DIR; metadata in the
#                       crates' Cargo.toml): edgegpu-node-setup, edgegpu-devicequery,
#                       edgegpu-device-plugin (host mode: systemd units), edgegpu-k3s (k3s
#                       auto-deploy manifest + that architecture's images for the air-gap folder)
#   DIST_DIR/sbom/      CycloneDX JSON per binary (cargo-cyclonedx) and per image (its binary's
#                       crates plus the Debian packages it holds), validated against the schema
#   DIST_DIR/bundle/    edgegpu-<version>-<arch>.tar.gz: binaries, images, manifests, the Helm
#                       chart (helm package), the .debs, the SBOMs and SHA256SUMS.
#                       packages/ and bundle/ each get a SHA256SUMS too. Everything is
#                       reproducible: the same commit and inputs give the same bytes.
#
# Checks (each can fail the script):
#   - lintian (Debian 12's) on every .deb: no error or warning; the overrides that are shipped
#     in a package say why next to them
#   - in a Debian bookworm root made with debootstrap (minbase, cached under
#     .tools/debian-root), through chroot, for each architecture: apt install of the files (as
#     the README), upgrade to a copy with a higher Debian revision, remove and purge (amd64: one
#     apt purge, as the README; arm64: dpkg -r, dpkg -P); after purge the root's file list and the
#     checksums of /etc and of dpkg's status must equal the snapshot taken before install.
#     amd64 also runs the programs, `edgegpu-node-setup apply` on a fake containerd host, checks
#     that upgrade keeps what apply did, that remove is refused while a file apply wrote was
#     changed since, and that remove then reverts it (arm64: the same cycle, programs not run).
#     A negative control (a file left behind, an /etc file changed) must make the comparison fail.
#   - the k3s package's image archives imported by Debian's containerd the way k3s imports its
#     air-gap folder (namespace k8s.io, all platforms, no unpack), in a private mount namespace
#     with its own root and socket: names and platforms listed; amd64 runs devicequery (it must
#     print `Result = FAIL` and exit 1 without a driver), arm64 mounts it and checks the ELF
#   - the packages and the bundles built twice must be the same bytes
# Then prints each package (name, version, arch, bytes, sha256), each bundle and each image's
# manifest digest.
#
# Usage: scripts/build-packages.sh [--no-check] [DIST_DIR]     (DIST_DIR default: dist)
#   --no-check   build packages, SBOMs and bundles only (no lintian, dpkg, containerd)
# Needs: root (chroot, unshare, mounts), what scripts/setup.sh installs (cargo-deb and
# cyclonedx-python-lib in .tools/venv, cargo-cyclonedx in .tools/cargo-cyclonedx, lintian,
# debootstrap, containerd; helm from scripts/install-helm.sh), network access to a Debian archive (this machine's own mirror, else deb.debian.org; EDGEGPU_DEBIAN_MIRROR overrides: scripts/lib/debian.sh) the first
# time (the debootstrap root). Env: SOURCE_DATE_EPOCH (default: commit time of HEAD),
# DEB_REVISION (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }
check=1 dist=
for arg in "$@"; do
    case "$arg" in
        -h | --help) usage; exit 0 ;;
        --no-check) check=0 ;;
        -*) echo "$0: unknown option '$arg' (try --help)" >&2; exit 2 ;;
        *)
            [ -z "$dist" ] || { echo "$0: one DIST_DIR only" >&2; exit 2; }
            dist=$arg
            ;;
    esac
done
dist=${dist:-dist}
if [ "$(id -u)" != 0 ]; then exec sudo -E "$0" "$@"; fi

export PATH="$PWD/.tools/venv/bin:$PWD/.tools/cargo-cyclonedx/bin:$PATH"
export LC_ALL=C
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
DEB_REVISION=${DEB_REVISION:-1}
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')
ARCHES=(amd64 arm64)
declare -A GNU=([amd64]=x86_64-unknown-linux-gnu [arm64]=aarch64-unknown-linux-gnu)
declare -A MUSL=([amd64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
IMAGES=(edgegpu-device-plugin devicequery edgegpu-node-setup)
# The programs of the multi-call binary edgegpu, installed as links to it (edgegpu/src/main.rs).
MULTI_CALL_PROGRAMS=(edgegpu-device-plugin edgegpu-dra-driver edgegpu-labeller)
K3S_SYNOPSIS="edgegpu's k3s auto-deploy manifest and air-gap container images"
. scripts/lib/tools.sh
ROOT_CACHE=$(edgegpu_tools_dir)/debian-root/bookworm-minbase
. scripts/lib/debian.sh
DEBIAN_MIRROR=$(debian_mirror)

log() { printf '==> %s\n' "$*"; }
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

for tool in cargo-deb lintian debootstrap containerd ctr cargo-cyclonedx; do
    command -v "$tool" >/dev/null || { echo "$0: $tool missing: run scripts/setup.sh" >&2; exit 1; }
done
for f in "${IMAGES[@]/#/$dist/images/}"; do
    [ -f "$f.oci.tar" ] || { echo "$0: missing $f.oci.tar (run scripts/build-images.sh $dist)" >&2; exit 1; }
done

[ -f "$dist/images/debian-packages.txt" ] ||
    { echo "$0: missing $dist/images/debian-packages.txt (run scripts/build-images.sh $dist)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$dist/packages" "$dist/sbom" "$dist/bundle"
mkdir -p "$dist/packages" "$dist/sbom" "$dist/bundle"

# ---------------------------------------------------------------------------------------------
# Packages. cargo-deb reads "target/release/<file>" assets from
# $CARGO_TARGET_DIR/<triple>/release/ with --target: the staging tree below holds the release
# binaries and, for edgegpu-k3s, the manifests and this architecture's images.
# stage ARCH TARGET_DIR
stage() {
    local arch=$1 target=$2 gnu=$2/${GNU[$1]}/release musl=$2/${MUSL[$1]}/release image
    mkdir -p "$gnu/k3s" "$musl"
    for b in edgegpu devicequery; do cp "$dist/$b-${GNU[$arch]}" "$gnu/$b"; done
    for program in "${MULTI_CALL_PROGRAMS[@]}"; do ln -s edgegpu "$gnu/$program"; done
    cp "$dist/edgegpu-node-setup-${MUSL[$arch]}" "$musl/edgegpu-node-setup"
    cp deploy/k3s/edgegpu-device-plugin.yaml deploy/k3s/edgegpu-devicequery-job.yaml "$gnu/k3s/"
    cp deploy/k3s/helmchart/edgegpu.yaml "$gnu/k3s/helmchart-edgegpu.yaml"
    for image in "${IMAGES[@]}"; do
        # edgegpu- prefix: k3s imports every *.tar in the folder, next to k3s's own archives.
        python3 deploy/image/oci-select-platform.py "$dist/images/$image.oci.tar" "$arch" \
            "$gnu/k3s/edgegpu-${image#edgegpu-}.oci.tar" >/dev/null
    done
}

# build_debs ARCH OUT_DIR REVISION
build_debs() {
    local arch=$1 out=$2 revision=$3 target=$work/target-$1
    [ -d "$target" ] || stage "$arch" "$target"
    mkdir -p "$out"
    local deb=(cargo deb --no-build --no-strip --quiet --deb-revision "$revision" --output "$out/")
    CARGO_TARGET_DIR=$target "${deb[@]}" -p edgegpu-node-setup --target "${MUSL[$arch]}" >/dev/null
    CARGO_TARGET_DIR=$target "${deb[@]}" -p edgegpu-devicequery --target "${GNU[$arch]}" >/dev/null
    CARGO_TARGET_DIR=$target "${deb[@]}" -p edgegpu --target "${GNU[$arch]}" >/dev/null
    CARGO_TARGET_DIR=$target "${deb[@]}" -p edgegpu-node-setup --variant k3s --target "${GNU[$arch]}" >/dev/null
    # The variant inherits node-setup's synopsis (cargo-deb cannot override it): put its own in.
    local k3s=$out/edgegpu-k3s_$VERSION-${revision}_$arch.deb tree=$work/k3s-tree
    rm -rf "$tree" && dpkg-deb -R "$k3s" "$tree"
    sed -i "s/^Description: .*/Description: $K3S_SYNOPSIS/" "$tree/DEBIAN/control"
    dpkg-deb --root-owner-group -Zxz -b "$tree" "$k3s" >/dev/null
    rm -rf "$tree"
}

# The Debian changelog every package ships must start at this version.
changelog_version=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' build-support/debian/changelog)
[ "${changelog_version%-*}" = "$VERSION" ] ||
    { echo "$0: build-support/debian/changelog starts at $changelog_version, the workspace is $VERSION: add an entry" >&2; exit 1; }
for arch in "${ARCHES[@]}"; do
    log "cargo-deb: $arch packages ($VERSION-$DEB_REVISION)"
    build_debs "$arch" "$dist/packages" "$DEB_REVISION"
done
ls "$dist/packages"

# ---------------------------------------------------------------------------------------------
# SBOMs. cargo-cyclonedx describes each program's crate with its dependency tree for the
# target it is built for (dev-dependencies left out). The images hold one of those programs plus
# files of Debian packages but no dpkg database, so no scanner can see the packages: their
# SBOMs are written with cyclonedx-python-lib from the program's SBOM and
# DIST_DIR/images/debian-packages.txt (scripts/build-images.sh). Every document is validated
# against CycloneDX's JSON schema (cyclonedx-python-lib's validator).
log "SBOMs (cargo-cyclonedx, cyclonedx-python-lib)"
# cargo-cyclonedx writes <bin>_bin_<triple>.cdx.json next to each crate's Cargo.toml: move ours
# out, leave no other behind.
for triple in "${GNU[@]}" "${MUSL[@]}"; do
    cargo cyclonedx --manifest-path Cargo.toml --format json --spec-version 1.5 --describe binaries \
        --target "$triple" --target-in-filename --no-build-deps --quiet
    for crate_bin in edgegpu/edgegpu devicequery/devicequery node-setup/edgegpu-node-setup; do
        case "$crate_bin:$triple" in
            node-setup/*:*-gnu | */edgegpu:*-musl | */devicequery:*-musl) ;;
            *) mv "${crate_bin}_bin_$triple.cdx.json" "$dist/sbom/${crate_bin#*/}-$triple.cdx.json" ;;
        esac
    done
    find . -maxdepth 2 -name "*_bin_$triple.cdx.json" -delete
done
python3 scripts/sbom-images.py "$dist" "$VERSION" "${ARCHES[@]}"

# ---------------------------------------------------------------------------------------------
# Bundles: one tar.gz per architecture, entries sorted, owner 0, mtime SOURCE_DATE_EPOCH,
# gzip without a name or time: the same inputs give the same bytes.
helm=$(scripts/install-helm.sh)
"$helm" package deploy/helm/edgegpu --destination "$work/helm" >/dev/null
chart=$(ls "$work/helm"/*.tgz)
# helm stamps the archive's entries with the time of packaging: repack the same files in the
# same order with mtime SOURCE_DATE_EPOCH (helm reads any gzip'd tar of the chart folder).
mkdir "$work/helm/chart"
tar -xzf "$chart" -C "$work/helm/chart"
tar -tzf "$chart" >"$work/helm/order"
tar --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --no-recursion \
    -C "$work/helm/chart" -T "$work/helm/order" -cf - | gzip -9n >"$chart.tmp"
mv "$chart.tmp" "$chart"
"$helm" lint "$chart" >/dev/null || { echo "$0: helm lint of the repacked $chart failed" >&2; exit 1; }
# make_bundle ARCH OUT_DIR
make_bundle() {
    local arch=$1 out=$2 name=edgegpu-$VERSION-$1 image
    local root=$work/bundle-$arch/$name
    rm -rf "$work/bundle-$arch"
    mkdir -p "$root/bin" "$root/images" "$root/manifests/k3s/helmchart" "$root/helm" "$root/packages" "$root/sbom"
    for b in edgegpu devicequery; do cp "$dist/$b-${GNU[$arch]}" "$root/bin/$b"; done
    for program in "${MULTI_CALL_PROGRAMS[@]}"; do ln -s edgegpu "$root/bin/$program"; done
    cp "$dist/edgegpu-node-setup-${MUSL[$arch]}" "$root/bin/edgegpu-node-setup"
    for image in "${IMAGES[@]}"; do cp "$work/target-$arch/${GNU[$arch]}/release/k3s/edgegpu-${image#edgegpu-}.oci.tar" "$root/images/"; done
    cp deploy/*.yaml "$root/manifests/"
    cp deploy/k3s/*.yaml "$root/manifests/k3s/"
    cp deploy/k3s/helmchart/*.yaml "$root/manifests/k3s/helmchart/"
    cp "$chart" "$root/helm/"
    cp "$dist/packages"/*_"$arch".deb "$root/packages/"
    cp "$dist/sbom"/*-"${GNU[$arch]}".cdx.json "$dist/sbom"/*-"${MUSL[$arch]}".cdx.json \
        "$dist/sbom"/*-linux-"$arch".cdx.json "$root/sbom/"
    (cd "$root" && find . -type f | sed 's|^\./||' | sort | xargs sha256sum) >"$work/SHA256SUMS"
    mv "$work/SHA256SUMS" "$root/SHA256SUMS"
    find "$root" -type d -exec chmod 0755 {} + && find "$root" -type f -exec chmod go-w {} +
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
        --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
        -C "$work/bundle-$arch" -cf - "$name" | gzip -9n >"$out/$name.tar.gz"
}
for arch in "${ARCHES[@]}"; do
    log "bundle $arch"
    make_bundle "$arch" "$dist/bundle"
done

(cd "$dist/packages" && sha256sum -- *.deb >SHA256SUMS)
(cd "$dist/bundle" && sha256sum -- *.tar.gz >SHA256SUMS)

if [ "$check" = 1 ]; then
    # -----------------------------------------------------------------------------------------
    log "packages and bundles are reproducible (built a second time)"
    mkdir -p "$work/bundle-again"
    for arch in "${ARCHES[@]}"; do
        build_debs "$arch" "$work/packages-again" "$DEB_REVISION"
        for deb in "$work/packages-again"/*_"$arch".deb; do
            cmp -s "$deb" "$dist/packages/$(basename "$deb")" || fail "$(basename "$deb") differs when built again"
        done
        make_bundle "$arch" "$work/bundle-again"
        cmp -s "$dist/bundle/edgegpu-$VERSION-$arch.tar.gz" "$work/bundle-again/edgegpu-$VERSION-$arch.tar.gz" ||
            fail "bundle $arch differs when built again"
    done

    # -----------------------------------------------------------------------------------------
    # lintian: the tags we do not act on are overridden inside the packages
    # (<crate>/debian/lintian-overrides...), each with its reason.
    log "lintian (Debian 12) on every package"
    if ! lintian --fail-on error,warning --display-info "$dist/packages"/*.deb; then
        fail "lintian"
    fi

    # -----------------------------------------------------------------------------------------
    # The dpkg cycle in a clean Debian root.
    in_root() { # ROOT CMD...: chroot with /proc, in a private mount namespace
        local root=$1
        shift
        # shellcheck disable=SC2016 # expanded by the inner sh
        unshare -m --propagation private sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" "$@"
    }
    if [ ! -f "$ROOT_CACHE/.edgegpu-ready" ]; then
        log "debootstrap --variant=minbase bookworm into $ROOT_CACHE (cached for the next runs)"
        rm -rf "$ROOT_CACHE" "$ROOT_CACHE.tmp"
        mkdir -p "$(dirname "$ROOT_CACHE")"
        debootstrap --variant=minbase bookworm "$ROOT_CACHE.tmp" "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1 ||
            { cat "$work/debootstrap.log" >&2; exit 1; }
        # libc6:arm64 for the arm64 packages' dependency (their programs are not run here).
        in_root "$ROOT_CACHE.tmp" dpkg --add-architecture arm64
        # (apt's complaint that it has no /dev/pts for its log is the only stderr here)
        in_root "$ROOT_CACHE.tmp" apt-get -qq update 2>"$work/apt.err" || { cat "$work/apt.err" >&2; exit 1; }
        DEBIAN_FRONTEND=noninteractive in_root "$ROOT_CACHE.tmp" apt-get -qq install -y --no-install-recommends libc6:arm64 >/dev/null
        in_root "$ROOT_CACHE.tmp" apt-get clean
        rm -rf "$ROOT_CACHE.tmp/var/lib/apt/lists"/*_* 
        touch "$ROOT_CACHE.tmp/.edgegpu-ready"
        mv "$ROOT_CACHE.tmp" "$ROOT_CACHE"
    fi

    # snapshot ROOT OUT: every path with type, mode, owner (size and link target for
    # non-directories), and sha256 of every file under /etc and of dpkg's status. Left out:
    # dpkg's own log and backup of the status file, which every dpkg run rewrites, and apt's
    # caches and logs (the install and purge go through apt, as the README's do).
    snapshot() {
        (cd "$1" && find . -xdev -path ./proc -prune -o \( -type d -printf '%p d %m %U:%G\n' \) \
            -o -printf '%p %y %m %U:%G %s %l\n' | sort |
            grep -Ev '^\./(var/log/dpkg\.log|var/lib/dpkg/status-old|var/lib/dpkg/triggers/Unincorp|proc|var/cache/apt/[^ ]*|var/log/apt/[^ ]*|var/lib/apt/extended_states) ') >"$2"
        (cd "$1" && find ./etc -type f -print0 | sort -z | xargs -0 sha256sum && sha256sum ./var/lib/dpkg/status) >>"$2"
    }

    # dpkg_cycle ARCH: install, (amd64: programs and node-setup), upgrade, remove, purge.
    dpkg_cycle() {
        local arch=$1 root=$work/root-$1 pkgs=(edgegpu-k3s edgegpu-device-plugin edgegpu-devicequery edgegpu-node-setup)
        local up=$work/upgrade-$1 conf=/etc/containerd/config.toml
        log "dpkg cycle ($arch) in a copy of $ROOT_CACHE"
        build_debs "$arch" "$up" "$DEB_REVISION+upgradetest1"
        rm -rf "$root" && cp -a "$ROOT_CACHE" "$root"
        # The host before the packages: a containerd config and an NVIDIA runtime (fakes) for
        # node-setup to configure.
        mkdir -p "$root/etc/containerd"
        printf '# the host'"'"'s own containerd config\nversion = 2\n' >"$root$conf"
        printf '#!/bin/sh\nexit 0\n' >"$root/usr/bin/nvidia-container-runtime"
        chmod 0755 "$root/usr/bin/nvidia-container-runtime"
        cp "$root$conf" "$work/conf-before"
        snapshot "$root" "$work/before-$arch"
        mkdir -p "$root/tmp/debs/v1" "$root/tmp/debs/v2"
        cp "$dist/packages"/*_"$arch".deb "$root/tmp/debs/v1/"
        cp "$up"/*_"$arch".deb "$root/tmp/debs/v2/"

        # As the README installs them: apt with the files (their Depends come from the root).
        DEBIAN_FRONTEND=noninteractive in_root "$root" sh -c 'apt-get install -y -qq /tmp/debs/v1/*.deb' \
            >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; fail "$arch: apt-get install ./*.deb"; return; }
        for f in /usr/bin/edgegpu-node-setup /usr/bin/devicequery /usr/bin/edgegpu /usr/bin/edgegpu-device-plugin \
            /usr/bin/edgegpu-labeller /usr/bin/edgegpu-dra-driver \
            /lib/systemd/system/edgegpu-device-plugin.service /lib/systemd/system/edgegpu-mps-control-daemon.service \
            /lib/systemd/system/edgegpu-node-check.path /lib/systemd/system/edgegpu-node-check.timer \
            /lib/systemd/system/edgegpu-cdi-refresh.path \
            /etc/default/edgegpu-device-plugin /var/lib/rancher/k3s/server/manifests/edgegpu-device-plugin.yaml \
            /var/lib/rancher/k3s/agent/images/edgegpu-device-plugin.oci.tar /var/lib/rancher/k3s/agent/images/edgegpu-devicequery.oci.tar \
            /var/lib/rancher/k3s/agent/images/edgegpu-node-setup.oci.tar; do
            [ -e "$root$f" ] || fail "$arch: $f missing after install"
        done
        # Enabled by the postinst (deb-systemd-helper): links to the units, as seen in the root.
        for unit in edgegpu-device-plugin.service edgegpu-mps-control-daemon.service \
            edgegpu-node-check.path edgegpu-node-check.service edgegpu-cdi-refresh.path edgegpu-cdi-refresh.service; do
            [ "$(readlink "$root/etc/systemd/system/multi-user.target.wants/$unit")" = "/lib/systemd/system/$unit" ] ||
                fail "$arch: $unit not enabled after install"
        done
        [ "$(readlink "$root/etc/systemd/system/timers.target.wants/edgegpu-node-check.timer")" = \
            /lib/systemd/system/edgegpu-node-check.timer ] || fail "$arch: edgegpu-node-check.timer not enabled after install"
        in_root "$root" dpkg-query -W -f="\${Conffiles}\n" edgegpu-device-plugin | grep -q '/etc/default/edgegpu-device-plugin' ||
            fail "$arch: /etc/default/edgegpu-device-plugin is not a conffile"
        # The admin's edit of the conffile must survive the upgrade.
        echo 'EDGEGPU_DEVICE_PLUGIN_ARGS="--log-format json"' >>"$root/etc/default/edgegpu-device-plugin"

        if [ "$arch" = amd64 ]; then
            in_root "$root" edgegpu-node-setup --version >/dev/null || fail "amd64: edgegpu-node-setup --version"
            in_root "$root" edgegpu-device-plugin --version >/dev/null || fail "amd64: edgegpu-device-plugin --version"
            in_root "$root" edgegpu-labeller --version >/dev/null || fail "amd64: edgegpu-labeller --version"
            in_root "$root" edgegpu-dra-driver --version >/dev/null || fail "amd64: edgegpu-dra-driver --version"
            # The programs are links to the one binary, as dpkg installed them.
            [ "$(readlink "$root/usr/bin/edgegpu-device-plugin")" = edgegpu ] ||
                fail "amd64: /usr/bin/edgegpu-device-plugin is not a link to edgegpu"
            local rc=0 out
            out=$(in_root "$root" devicequery 2>&1) || rc=$?
            { [ "$rc" = 1 ] && grep -q 'Result = FAIL' <<<"$out"; } || fail "amd64: devicequery without a driver: exit $rc, $out"
            in_root "$root" edgegpu-node-setup --mode containerd --no-restart apply >/dev/null || fail "amd64: node-setup apply"
            grep -q nvidia "$root$conf" || fail "amd64: apply did not configure $conf"
            [ -f "$root/var/lib/edgegpu/node-setup/manifest.json" ] || fail "amd64: no node-setup manifest after apply"
        fi

        in_root "$root" sh -c 'dpkg -i /tmp/debs/v2/*.deb' >/dev/null || { fail "$arch: upgrade (dpkg -i)"; return; }
        in_root "$root" dpkg-query -W -f="\${Version}\n" edgegpu-node-setup | grep -qx "$VERSION-$DEB_REVISION+upgradetest1" ||
            fail "$arch: upgrade did not install $VERSION-$DEB_REVISION+upgradetest1"
        grep -q -- '--log-format json' "$root/etc/default/edgegpu-device-plugin" || fail "$arch: upgrade lost the conffile edit"
        if [ "$arch" = amd64 ]; then
            grep -q nvidia "$root$conf" || fail "amd64: the upgrade reverted node-setup's apply"
            # A file apply wrote, changed since: revert refuses, so the removal must stop.
            cp "$root$conf" "$work/conf-applied"
            echo '# an edit after apply' >>"$root$conf"
            if in_root "$root" dpkg -r edgegpu-node-setup >/dev/null 2>&1; then
                fail "amd64: remove went on although revert had to refuse"
            fi
            in_root "$root" dpkg-query -W -f="\${db:Status-Status}\n" edgegpu-node-setup | grep -qx installed ||
                fail "amd64: edgegpu-node-setup not installed after the refused removal"
            cp "$work/conf-applied" "$root$conf"
        fi

        if [ "$arch" = amd64 ]; then
            # As the README uninstalls them: one apt purge (prerm reverts apply, postrm purges).
            DEBIAN_FRONTEND=noninteractive in_root "$root" apt-get purge -y -qq "${pkgs[@]}" >/dev/null 2>"$work/purge.err" ||
                { cat "$work/purge.err" >&2; fail "$arch: apt-get purge"; return; }
            cmp -s "$root$conf" "$work/conf-before" || fail "$arch: $conf is not the host's own after purge"
        else
            # dpkg's two steps: remove keeps the conffile, purge takes it.
            in_root "$root" dpkg -r "${pkgs[@]}" >/dev/null || { fail "$arch: dpkg -r"; return; }
            [ ! -e "$root/var/lib/edgegpu" ] || fail "$arch: /var/lib/edgegpu left after remove"
            [ -f "$root/etc/default/edgegpu-device-plugin" ] || fail "$arch: remove deleted the conffile (only purge may)"
            # (packages without conffiles or postrm are gone already: dpkg says so on stderr)
            in_root "$root" dpkg -P "${pkgs[@]}" >/dev/null 2>"$work/purge.err" ||
                { cat "$work/purge.err" >&2; fail "$arch: dpkg -P"; return; }
        fi
        rm -rf "$root/tmp/debs"
        snapshot "$root" "$work/after-$arch"
        if diff -u "$work/before-$arch" "$work/after-$arch" >"$work/diff-$arch"; then
            echo "   install, upgrade, remove, purge: root as before ($(wc -l <"$work/before-$arch") entries compared)"
        else
            cat "$work/diff-$arch" >&2
            fail "$arch: the root after purge is not the root before install"
        fi
        # Negative control: the comparison must see a file left behind and a changed /etc file.
        touch "$root/var/lib/edgegpu-left-behind"
        snapshot "$root" "$work/control-$arch"
        rm "$root/var/lib/edgegpu-left-behind"
        ! cmp -s "$work/before-$arch" "$work/control-$arch" || fail "$arch: the purge comparison missed a file left behind"
        echo '# changed' >>"$root/etc/hostname"
        snapshot "$root" "$work/control-$arch"
        ! cmp -s "$work/before-$arch" "$work/control-$arch" || fail "$arch: the purge comparison missed a changed /etc file"
        rm -rf "$root"
    }
    for arch in "${ARCHES[@]}"; do dpkg_cycle "$arch"; done

    # -----------------------------------------------------------------------------------------
    # k3s's air-gap import: k3s (pkg/agent/containerd/containerd.go, preloadImages and
    # preloadFile, https://github.com/k3s-io/k3s/blob/8fed810c3776d28e31efb3cdc0eda8d551f7f212/pkg/agent/containerd/containerd.go)
    # reads every file of /var/lib/rancher/k3s/agent/images in name order at start, and imports
    # each *.tar with client.Import(ctx, reader, containerd.WithAllPlatforms(true)) in the
    # k8s.io namespace, without unpacking (the CRI plugin unpacks when a pod starts).
    # `ctr images import --all-platforms --no-unpack` is the same call.
    k3s_import() { # ARCH
        local arch=$1 d=$work/k3s-$1
        log "k3s air-gap import ($arch): Debian's containerd $(containerd --version | awk '{print $3}')"
        mkdir -p "$d"
        dpkg-deb -x "$dist/packages/edgegpu-k3s_$VERSION-${DEB_REVISION}_$arch.deb" "$d/pkg"
        cat >"$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$d/containerd.sock"
EOF
        # A private mount namespace: containerd's mounts and the tmpfs on /opt (its opt plugin
        # creates /opt/containerd) and on /run (ctr's fifos, the shim's socket and runc's state
        # default to /run/containerd) vanish with it; containerd is killed at the end.
        unshare -m --propagation private bash -s "$d" "$arch" "$VERSION" <<'EOS' || fail "k3s import ($arch)"
set -euo pipefail
d=$1 arch=$2 version=$3
mount -t tmpfs tmpfs /opt
mount -t tmpfs tmpfs /run
containerd --config "$d/config.toml" >"$d/containerd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
ctr_() { ctr --address "$d/containerd.sock" -n k8s.io "$@"; }
for _ in $(seq 100); do ctr_ version >/dev/null 2>&1 && break; sleep 0.1; done
images=$d/pkg/var/lib/rancher/k3s/agent/images
for f in $(cd "$images" && ls); do ctr_ images import --all-platforms --no-unpack "$images/$f" >/dev/null; done
# (ctr's size column needs the host's platform: its complaints about the arm64 images go)
ctr_ images ls 2>/dev/null | sed 's/^/   /'
status=0
for image in edgegpu-device-plugin devicequery edgegpu-node-setup; do
    line=$(ctr_ images ls 2>/dev/null | awk -v ref="ghcr.io/edgegpu/$image:$version" '$1 == ref')
    [ -n "$line" ] || { echo "FAIL: ghcr.io/edgegpu/$image:$version not imported" >&2; status=1; continue; }
    platforms=$(awk '{print $(NF-1)}' <<<"$line")
    [ "$platforms" = "linux/$arch" ] || { echo "FAIL: $image platforms '$platforms', want linux/$arch" >&2; status=1; }
done
if [ "$arch" = amd64 ]; then
    rc=0
    out=$(ctr_ run --rm "ghcr.io/edgegpu/devicequery:$version" edgegpu-dq-check 2>&1) || rc=$?
    if [ "$rc" = 1 ] && grep -q 'Result = FAIL' <<<"$out"; then
        echo "   ctr run devicequery: exit 1, $(grep 'Result = ' <<<"$out")"
    else
        echo "FAIL: ctr run devicequery: exit $rc, $out" >&2; status=1
    fi
else
    mkdir -p "$d/mnt"
    ctr_ images mount --platform "linux/$arch" "ghcr.io/edgegpu/devicequery:$version" "$d/mnt" >/dev/null
    machine=$(readelf -h "$d/mnt/usr/bin/devicequery" | awk -F: '/Machine/ {gsub(/^ +/, "", $2); print $2}')
    ctr_ images unmount "$d/mnt" >/dev/null
    if [ "$machine" = AArch64 ]; then echo "   devicequery unpacked for linux/$arch: $machine ELF"; else
        echo "FAIL: devicequery unpacked for linux/$arch is a '$machine' ELF" >&2; status=1; fi
fi
exit $status
EOS
    }
    for arch in "${ARCHES[@]}"; do k3s_import "$arch"; done
fi

# ---------------------------------------------------------------------------------------------
echo
printf '%-26s %-24s %-6s %10s  %s\n' package version arch bytes sha256
for deb in "$dist/packages"/*.deb; do
    printf '%-26s %-24s %-6s %10d  %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
        "$(dpkg-deb -f "$deb" Architecture)" "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
done
echo
printf '%-36s %10s  %s\n' bundle bytes sha256
for b in "$dist/bundle"/*.tar.gz; do
    printf '%-36s %10d  %s\n' "$(basename "$b")" "$(stat -c %s "$b")" "$(sha256sum "$b" | cut -d' ' -f1)"
done
echo
printf '%-24s %-8s %s\n' image platform 'manifest digest'
for image in "${IMAGES[@]}"; do
    for arch in "${ARCHES[@]}"; do
        printf '%-24s %-8s %s\n' "$image" "$arch" "$(python3 deploy/image/oci-select-platform.py \
            "$dist/images/$image.oci.tar" "$arch" /dev/null)"
    done
done
[ "$failures" -eq 0 ] || { echo "$failures package check(s) failed" >&2; exit 1; }
if [ "$check" = 1 ]; then log "packages, bundles and SBOMs built and checked"; else log "packages, bundles and SBOMs built (--no-check)"; fi
