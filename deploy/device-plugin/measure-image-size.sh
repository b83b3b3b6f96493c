#!/usr/bin/env bash
# Measures the uncompressed size of the device plugin image per architecture WITHOUT a container
# engine: it fetches the same Debian trixie packages the image's libraries come from (libc6,
# libgcc-s1) with apt-get download (signature-checked against debian-archive-keyring), assembles
# the image's root filesystem with the very script the Containerfile runs (assemble-rootfs.sh),
# and sums the bytes of the regular files in it (what the single image layer unpacks to).
# It also checks that every DT_NEEDED entry of the binary is in the image.
#
# Usage: deploy/device-plugin/measure-image-size.sh [--smoke] [DIST_DIR]   (default: dist)
#   --smoke  also run smoke-test.sh in the host architecture's assembled image (needs root)
# Binaries missing from DIST_DIR are reported; the glibc part is still measured.
# Needs: apt-get, dpkg-deb, readelf (binutils), network access to the Debian archive.
set -euo pipefail

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
    exit 0
fi
smoke=0
if [ "${1:-}" = "--smoke" ]; then
    smoke=1
    shift
fi

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dist=${1:-$repo/dist}
suite=${DEBIAN_SUITE:-trixie}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/apt/etc/sources.list.d" "$work/apt/etc/preferences.d" "$work/apt/lists/partial" \
    "$work/apt/cache/archives/partial" "$work/debs"
touch "$work/apt/status"
echo "deb [arch=amd64,arm64 signed-by=$keyring] http://deb.debian.org/debian $suite main" \
    >"$work/apt/etc/sources.list"
apt_opts=(
    -o "Dir::Etc=$work/apt/etc" -o "Dir::State=$work/apt" -o "Dir::State::Lists=$work/apt/lists"
    -o "Dir::State::status=$work/apt/status" -o "Dir::Cache=$work/apt/cache"
    -o "APT::Architectures::=amd64" -o "APT::Architectures::=arm64" -o "Acquire::Languages=none"
    -o "APT::Sandbox::User=root" -qq
)
apt-get "${apt_opts[@]}" update
(cd "$work/debs" && apt-get "${apt_opts[@]}" download libc6:amd64 libgcc-s1:amd64 libc6:arm64 libgcc-s1:arm64)

sum_files() { find "$1" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB (%.2f MB)", b / 1048576, b / 1000000}'; }

status=0
for arch in amd64 arm64; do
    case $arch in
        amd64) rust_target=x86_64-unknown-linux-gnu ;;
        arm64) rust_target=aarch64-unknown-linux-gnu ;;
    esac
    debian_root=$work/debian-$arch
    mkdir -p "$debian_root"
    for deb in "$work"/debs/*_"$arch".deb; do dpkg-deb -x "$deb" "$debian_root"; done
    echo "== linux/$arch ($(basename "$work"/debs/libc6_*_"$arch".deb .deb))"

    binary=$dist/edgegpu-device-plugin-$rust_target
    have_binary=1
    if [ ! -f "$binary" ]; then
        have_binary=0
        binary=$work/placeholder-$arch
        : >"$binary"
        echo "   $dist/edgegpu-device-plugin-$rust_target not found: measuring the glibc part only"
    fi
    rootfs=$work/rootfs-$arch
    sh "$here/assemble-rootfs.sh" "$arch" "$debian_root" "$binary" "$rootfs"

    libs_bytes=$(sum_files "$rootfs/usr/lib")
    total=$(sum_files "$rootfs")
    echo "   glibc + libgcc_s files: $libs_bytes bytes = $(mib "$libs_bytes")"
    if [ "$have_binary" = 1 ]; then
        bin_bytes=$(stat -c %s "$binary")
        echo "   binary:                 $bin_bytes bytes = $(mib "$bin_bytes")"
        echo "   image root filesystem:  $total bytes = $(mib "$total")  (target <= 12 MB)"
        if [ "$total" -gt 12000000 ]; then
            echo "   OVER the 12 MB target" >&2
            status=1
        fi
        # Every library the binary links against must be in the image.
        while read -r needed; do
            if [ ! -e "$rootfs/usr/lib/${rust_target/unknown-/}/$needed" ]; then
                echo "   MISSING in image: $needed (DT_NEEDED of the binary)" >&2
                status=1
            fi
        done < <(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
        # And it must start with ONLY the image's libraries: run --version through the image's
        # own loader (amd64 natively, arm64 under qemu-user with the image as its root prefix).
        libdir=$rootfs/usr/lib/${rust_target/unknown-/}
        if [ "$arch" = amd64 ] && [ "$(uname -m)" = x86_64 ]; then
            run=("$libdir/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$libdir" "$rootfs/usr/bin/edgegpu-device-plugin")
        elif [ "$arch" = arm64 ] && command -v qemu-aarch64-static >/dev/null; then
            run=(qemu-aarch64-static -L "$rootfs" "$rootfs/usr/bin/edgegpu-device-plugin")
        else
            run=()
        fi
        if [ "${#run[@]}" -gt 0 ]; then
            if version=$("${run[@]}" --version 2>&1); then
                echo "   runs on the image's libraries: $version"
            else
                echo "   FAILED to run on the image's libraries: $version" >&2
                status=1
            fi
        fi
        # After the size was summed: the smoke test adds a fake host tree to the root filesystem.
        if [ "$smoke" = 1 ] && [ "$arch" = amd64 ] && [ "$(uname -m)" = x86_64 ]; then
            echo "   smoke test as the Jetson DaemonSet runs it (smoke-test.sh):"
            "$here/smoke-test.sh" "$rootfs" || status=1
        fi
    fi
done
exit "$status"
