#!/usr/bin/env bash
# Builds the three container images from the release binaries (scripts/build-release.sh DIST_DIR)
# for linux/amd64 and linux/arm64 WITHOUT a container daemon: Debian's buildah with the vfs
# storage driver and chroot isolation (as root), in a private storage under a temporary directory.
#
#   edgegpu-device-plugin   deploy/device-plugin/Containerfile   target <= 9 MB uncompressed
#   devicequery             deploy/devicequery/Containerfile     target <= 10 MB uncompressed
#   edgegpu-node-setup      deploy/node-setup/Containerfile
#
# Each image is the tree deploy/image/assemble-rootfs.sh builds (the script the Containerfiles
# run) from the binary and Debian trixie's packages (deploy/image/fetch-debian.sh), in one layer,
# with its Containerfile's ENTRYPOINT/USER/ENV/LABELs (deploy/image/image-config.py) plus the OCI
# labels version, revision and created. Output: DIST_DIR/images/<image>.oci.tar, an OCI layout
# archive holding one multi-arch index tagged with the version (ref.name) and named for
# containerd (io.containerd.image.name), e.g.
#   skopeo copy --all oci-archive:dist/images/devicequery.oci.tar:0.1.0 docker://ghcr.io/...
#   k3s ctr images import dist/images/devicequery.oci.tar
# DIST_DIR/images/debian-packages.txt (the Debian packages in them: package, arch, version),
# and a table of each image's size per architecture: the regular files, the uncompressed layer
# and the gzip-compressed layer (what a registry stores), with the manifest digests.
#
# Reproducible: the same binaries and Debian packages give the same digests and the same archive
# bytes. Every timestamp is SOURCE_DATE_EPOCH (default: the commit time of HEAD), the layer's files
# are sorted with fixed owner, the tool's identity label is left out, and the archive is written
# with sorted entries and fixed times.
#
# Usage: scripts/build-images.sh [--smoke] [--reproducible] [DIST_DIR]   (DIST_DIR default: dist)
#   --smoke          run the amd64 images: --help of each, devicequery's exit-1 path without a
#                    driver, the plugin's start against a simulated Jetson
#                    (deploy/device-plugin/smoke-test.sh) and the node-setup pod script against
#                    a simulated k3s host (deploy/node-setup/smoke-test.sh)
#   --reproducible   build everything a second time, in a fresh storage, and fail unless every
#                    digest and every archive byte is the same
# Needs: root (it re-runs itself with sudo), buildah (scripts/setup.sh installs it), network
# access to a Debian archive (this machine's own mirror, else deb.debian.org: scripts/lib/debian.sh). Env: SOURCE_DATE_EPOCH, IMAGE_REVISION (default: git),
# IMAGE_REGISTRY (default ghcr.io/edgegpu: the name containerd gives the imported images).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }
smoke=0 reproducible=0 dist=
for arg in "$@"; do
    case "$arg" in
        -h | --help) usage; exit 0 ;;
        --smoke) smoke=1 ;;
        --reproducible) reproducible=1 ;;
        -*) echo "$0: unknown option '$arg' (try --help)" >&2; exit 2 ;;
        *)
            [ -z "$dist" ] || { echo "$0: one DIST_DIR only" >&2; exit 2; }
            dist=$arg
            ;;
    esac
done
dist=${dist:-dist}

IMAGES=(edgegpu-device-plugin devicequery edgegpu-node-setup)
ARCHES=(amd64 arm64)
REGISTRY=${IMAGE_REGISTRY:-}
REGISTRY=${REGISTRY:-ghcr.io/edgegpu}
declare -A CONTAINERFILE=([edgegpu-device-plugin]=deploy/device-plugin/Containerfile
    [devicequery]=deploy/devicequery/Containerfile [edgegpu-node-setup]=deploy/node-setup/Containerfile)
# The dist/ binary each image is built from (the plugin image: the multi-call binary).
declare -A BINARY=([edgegpu-device-plugin]=edgegpu [devicequery]=devicequery [edgegpu-node-setup]=edgegpu-node-setup)
declare -A RUST_TARGET=([edgegpu-device-plugin:amd64]=x86_64-unknown-linux-gnu
    [edgegpu-device-plugin:arm64]=aarch64-unknown-linux-gnu [devicequery:amd64]=x86_64-unknown-linux-gnu
    [devicequery:arm64]=aarch64-unknown-linux-gnu [edgegpu-node-setup:amd64]=x86_64-unknown-linux-musl
    [edgegpu-node-setup:arm64]=aarch64-unknown-linux-musl)

log() { printf '==> %s\n' "$*"; }

version=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
revision=${IMAGE_REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# buildah's chroot isolation needs root: re-run under sudo, with what git said as the user (git
# refuses a repository owned by someone else).
if [ "$(id -u)" != 0 ]; then
    exec sudo env SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" IMAGE_REVISION="$revision" \
        IMAGE_REGISTRY="${IMAGE_REGISTRY:-}" PATH="$PATH" "$0" "$@"
fi

command -v buildah >/dev/null || { echo "$0: buildah not found: run scripts/setup.sh" >&2; exit 1; }

missing=0
for key in "${!RUST_TARGET[@]}"; do
    binary=$dist/${BINARY[${key%%:*}]}-${RUST_TARGET[$key]}
    [ -f "$binary" ] || { echo "$0: missing $binary (run scripts/build-release.sh $dist)" >&2; missing=1; }
done
[ "$missing" = 0 ] || exit 1

umask 022

work=$(mktemp -d)
# shellcheck disable=SC2329 # run by the EXIT trap
cleanup() {
    # vfs layers are plain directories; buildah's own rm unmounts what it mounted.
    [ -z "${B:-}" ] || buildah "${B[@]}" rm --all >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

log "Debian trixie packages (glibc, libgcc, busybox-static) for ${ARCHES[*]}"
deploy/image/fetch-debian.sh "$work/debian" libc6 libgcc-s1 busybox-static
sed 's/^/   /' "$work/debian/versions"

# Builds every image into OUT (a directory) with a fresh buildah storage under STORE.
build_all() {
    local out=$1 store=$2 image arch rootfs container list layout
    B=(--root "$store/storage" --runroot "$store/run" --storage-driver vfs)
    export BUILDAH_ISOLATION=chroot
    mkdir -p "$out"
    for image in "${IMAGES[@]}"; do
        mapfile -t config < <(python3 deploy/image/image-config.py "${CONTAINERFILE[$image]}")
        list=localhost/$image-list:$version
        buildah "${B[@]}" manifest create "$list" >/dev/null
        for arch in "${ARCHES[@]}"; do
            rootfs=$store/rootfs-$image-$arch
            sh deploy/image/assemble-rootfs.sh "$arch" "$work/debian/debian-$arch" \
                "$dist/${BINARY[$image]}-${RUST_TARGET[$image:$arch]}" "$rootfs" "$image"
            container=$(buildah "${B[@]}" from scratch)
            buildah "${B[@]}" copy --quiet --chown 0:0 "$container" "$rootfs/" / >/dev/null
            buildah "${B[@]}" config "${config[@]}" \
                --label "org.opencontainers.image.version=$version" \
                --label "org.opencontainers.image.revision=$revision" \
                --label "org.opencontainers.image.created=$created" \
                --os linux --arch "$arch" \
                --created-by "scripts/build-images.sh: deploy/image/assemble-rootfs.sh $arch $image" "$container"
            buildah "${B[@]}" commit --quiet --timestamp "$SOURCE_DATE_EPOCH" --identity-label=false \
                --rm "$container" "localhost/$image:$version-$arch" >/dev/null
            buildah "${B[@]}" manifest add "$list" "containers-storage:localhost/$image:$version-$arch" >/dev/null
        done
        layout=$store/layout-$image
        buildah "${B[@]}" manifest push --quiet --all --format oci "$list" "oci:$layout:$version"
        # Name the index for containerd's import (k3s's air-gap image folder, ctr images import).
        python3 - "$layout/index.json" "$REGISTRY/$image:$version" <<'PY'
import json, sys
path, name = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for entry in index["manifests"]:
    entry.setdefault("annotations", {})["io.containerd.image.name"] = name
json.dump(index, open(path, "w"), separators=(",", ":"), sort_keys=True)
PY
        tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
            --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
            -C "$layout" -cf "$out/$image.oci.tar" oci-layout index.json blobs
    done
}

# Prints the size table of the archives in DIR; fails on a target missed.
report() {
    python3 - "$1" "${IMAGES[@]}" <<'PY'
import gzip, hashlib, json, os, sys, tarfile

directory, images = sys.argv[1], sys.argv[2:]
# The plugin image's three programs are one multi-call binary (docs/deploy.md, "Image sizes"):
# 9 MB, down from the 13 MB three separate binaries needed.
targets = {"edgegpu-device-plugin": 9_000_000, "devicequery": 10_000_000}
status = 0
print(f"{'image':<22} {'platform':<12} {'files':>10} {'uncompressed':>13} {'compressed':>11}  manifest digest")
for image in images:
    with tarfile.open(os.path.join(directory, f"{image}.oci.tar")) as archive:
        blob = lambda digest: archive.extractfile("blobs/sha256/" + digest.split(":")[1]).read()  # noqa: E731
        top = json.loads(archive.extractfile("index.json").read())["manifests"][0]
        index = json.loads(blob(top["digest"]))
        for entry in index["manifests"]:
            manifest = json.loads(blob(entry["digest"]))
            layers = [blob(layer["digest"]) for layer in manifest["layers"]]
            compressed = sum(len(layer) for layer in layers)
            unpacked = [gzip.decompress(layer) for layer in layers]
            uncompressed = sum(len(layer) for layer in unpacked)
            files = 0
            for layer in unpacked:
                import io
                with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
                    files += sum(m.size for m in tar.getmembers() if m.isfile())
            platform = f"{entry['platform']['os']}/{entry['platform']['architecture']}"
            mark = ""
            if image in targets and uncompressed > targets[image]:
                mark, status = f"  OVER the {targets[image] // 1_000_000} MB target", 1
            print(f"{image:<22} {platform:<12} {files:>10,} {uncompressed:>13,} {compressed:>11,}  "
                  f"{entry['digest']}{mark}")
        sha = hashlib.sha256(open(os.path.join(directory, f"{image}.oci.tar"), "rb").read()).hexdigest()
        print(f"{image:<22} {'index':<12} {'':>10} {'':>13} {'':>11}  {top['digest']}  (archive sha256:{sha[:16]}...)")
sys.exit(status)
PY
}

log "building ${IMAGES[*]} for ${ARCHES[*]} (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, revision $revision)"
rm -rf "$dist/images"
build_all "$dist/images" "$work/first"
# The Debian packages the images hold (package, arch, version): the images keep no dpkg
# database, so scripts/build-packages.sh's SBOMs take them from here.
cp "$work/debian/versions" "$dist/images/debian-packages.txt"
# Under sudo: the archives belong to whoever called it.
[ -z "${SUDO_UID:-}" ] || chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$dist/images"
echo
report "$dist/images"

status=0
if [ "$reproducible" = 1 ]; then
    echo
    log "reproducibility: the same build again, in a fresh storage"
    buildah "${B[@]}" rm --all >/dev/null 2>&1 || true
    build_all "$work/second" "$work/second-store"
    for image in "${IMAGES[@]}"; do
        if cmp -s "$dist/images/$image.oci.tar" "$work/second/$image.oci.tar"; then
            echo "   same bytes: $image.oci.tar sha256:$(sha256sum <"$work/second/$image.oci.tar" | cut -c1-64)"
        else
            echo "   DIFFERENT: $image.oci.tar" >&2
            diff <(tar -tvf "$dist/images/$image.oci.tar") <(tar -tvf "$work/second/$image.oci.tar") >&2 || true
            status=1
        fi
    done
fi

if [ "$smoke" = 1 ]; then
    echo
    log "smoke tests of the linux/amd64 images (buildah run, chroot isolation)"
    smoke_fail() { echo "   FAILED: $*" >&2; status=1; }
    for image in "${IMAGES[@]}"; do
        container=$(buildah "${B[@]}" from --quiet --arch amd64 "oci-archive:$dist/images/$image.oci.tar:$version")
        if out=$(buildah "${B[@]}" run "$container" -- "/usr/bin/$image" --help 2>&1) && grep -q "Usage" <<<"$out"; then
            echo "   ok: $image --help"
        else
            smoke_fail "$image --help: $out"
        fi
        case "$image" in
            devicequery)
                # No driver here: the exit-1 path, "cannot open libcuda.so.1", Result = FAIL
                # (the report's last line; buildah adds its own lines to stderr).
                rc=0
                out=$(buildah "${B[@]}" run "$container" -- /usr/bin/devicequery 2>"$work/stderr") || rc=$?
                # (Both streams in one string: `cat - file | grep -q` fails under pipefail
                # whenever grep has matched and exited before cat wrote the file: SIGPIPE.)
                all="$out
$(cat "$work/stderr")"
                if [ "$rc" = 1 ] && grep -q 'libcuda.so.1: cannot open shared object file' <<<"$all" \
                    && [ "$(tail -n 1 <<<"$out")" = "Result = FAIL" ]; then
                    echo "   ok: devicequery without a driver: exit 1, cannot open libcuda.so.1, Result = FAIL"
                else
                    smoke_fail "devicequery without a driver (exit $rc): $out $(cat "$work/stderr")"
                fi
                ;;
            edgegpu-device-plugin | edgegpu-node-setup)
                # The image's own tree, copied so the simulated host does not touch the image.
                copy=$work/smoke-$image
                cp -a "$(buildah "${B[@]}" mount "$container")" "$copy"
                buildah "${B[@]}" umount "$container" >/dev/null
                if [ "$image" = edgegpu-device-plugin ]; then
                    deploy/device-plugin/smoke-test.sh "$copy" || smoke_fail "plugin start on a simulated Jetson"
                else
                    deploy/node-setup/smoke-test.sh "$copy" || smoke_fail "node-setup pod script on a simulated k3s host"
                fi
                ;;
        esac
        buildah "${B[@]}" rm "$container" >/dev/null
    done
fi
exit "$status"
