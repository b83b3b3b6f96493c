#!/usr/bin/env bash
# Measures the uncompressed size of one of the project's images per architecture WITHOUT a
# container engine: it fetches the same Debian trixie packages the image's libraries come from
# (libc6, libgcc-s1) with deploy/image/fetch-debian.sh (signature-checked apt-get download),
# assembles the image's root filesystem with the very script the Containerfiles run
# (assemble-rootfs.sh), lists its files and sums the bytes of the regular ones (what the single
# image layer unpacks to) against the image's target. It also checks that every DT_NEEDED entry
# of the binary is in the image and that the binary runs on the image's own loader and
# libraries (--version; for devicequery also its dlopen of libcuda.so.1).
#
# Usage: deploy/image/measure-image-size.sh IMAGE [--smoke] [DIST_DIR]   (DIST_DIR default: dist)
#   IMAGE    edgegpu-device-plugin (target <= 9 MB) | devicequery (target <= 10 MB)
#   --smoke  edgegpu-device-plugin only: also run deploy/device-plugin/smoke-test.sh in the host
#            architecture's assembled image (needs root)
# Binaries (DIST_DIR/IMAGE-<rust target>; for edgegpu-device-plugin the multi-call
# DIST_DIR/edgegpu-<rust target>) missing from DIST_DIR are reported; the glibc part is
# still measured.
# Needs: apt-get, dpkg-deb, readelf (binutils), network access to the Debian archive;
# qemu-aarch64-static (optional) to run the arm64 binary.
set -euo pipefail

usage() {
    echo "usage: $0 edgegpu-device-plugin|devicequery [--smoke] [DIST_DIR]" >&2
    exit 2
}
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
    exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

[ "$#" -ge 1 ] || usage
image=$1
shift
case "$image" in
    edgegpu-device-plugin) target_bytes=9000000 ;;
    devicequery) target_bytes=10000000 ;;
    *) echo "$0: unknown IMAGE '$image' (edgegpu-device-plugin or devicequery)" >&2; usage ;;
esac
smoke=0 dist=
for arg in "$@"; do
    case "$arg" in
        --smoke)
            if [ "$image" != edgegpu-device-plugin ]; then
                echo "$0: --smoke is only for edgegpu-device-plugin" >&2
                usage
            fi
            smoke=1
            ;;
        -*) echo "$0: unknown option '$arg'" >&2; usage ;;
        *)
            [ -z "$dist" ] || usage
            dist=$arg
            ;;
    esac
done
dist=${dist:-$repo/dist}
target_mb=$((target_bytes / 1000000))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$here/fetch-debian.sh" "$work" libc6 libgcc-s1

sum_files() { find "$1" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB (%.2f MB)", b / 1048576, b / 1000000}'; }

status=0
for arch in amd64 arm64; do
    case $arch in
        amd64) rust_target=x86_64-unknown-linux-gnu ;;
        arm64) rust_target=aarch64-unknown-linux-gnu ;;
    esac
    debian_root=$work/debian-$arch
    echo "== $image linux/$arch ($(basename "$work"/debs/libc6_*_"$arch".deb .deb))"

    # The plugin image is built from the multi-call binary (its three programs are links).
    binary_name=$image
    [ "$image" != edgegpu-device-plugin ] || binary_name=edgegpu
    binary=$dist/$binary_name-$rust_target
    have_binary=1
    if [ ! -f "$binary" ]; then
        have_binary=0
        binary=$work/placeholder-$arch
        : >"$binary"
        echo "   $dist/$binary_name-$rust_target not found: measuring the glibc part only"
    fi
    rootfs=$work/rootfs-$arch
    sh "$here/assemble-rootfs.sh" "$arch" "$debian_root" "$binary" "$rootfs" "$image"

    echo "   files in the image:"
    (cd "$rootfs" && find . -type f -printf '     %10s  /%P\n' | sort -k2)
    libs_bytes=$(sum_files "$rootfs/usr/lib")
    total=$(sum_files "$rootfs")
    echo "   glibc + libgcc_s files: $libs_bytes bytes = $(mib "$libs_bytes")"
    if [ "$have_binary" = 0 ]; then
        continue
    fi
    bin_bytes=$(stat -c %s "$binary")
    echo "   binary:                 $bin_bytes bytes = $(mib "$bin_bytes")"
    echo "   image root filesystem:  $total bytes = $(mib "$total")  (target <= $target_mb MB)"
    if [ "$total" -gt "$target_bytes" ]; then
        echo "   OVER the $target_mb MB target" >&2
        status=1
    fi
    # Every library the binary links against must be in the image.
    libdir=$rootfs/usr/lib/${rust_target/unknown-/}
    while read -r needed; do
        if [ ! -e "$libdir/$needed" ]; then
            echo "   MISSING in image: $needed (DT_NEEDED of the binary)" >&2
            status=1
        fi
    done < <(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    # And it must start with ONLY the image's libraries: run --version through the image's own
    # loader (amd64 natively, arm64 under qemu-user with the image as its root prefix).
    if [ "$arch" = amd64 ] && [ "$(uname -m)" = x86_64 ]; then
        run=("$libdir/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$libdir" "$rootfs/usr/bin/$image")
    elif [ "$arch" = arm64 ] && command -v qemu-aarch64-static >/dev/null; then
        run=(qemu-aarch64-static -L "$rootfs" "$rootfs/usr/bin/$image")
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
        # devicequery's whole job is a dlopen: it must work on the image's libraries. Without a
        # libcuda in the image the report must be the "cannot open shared object file" failure,
        # not a crash. (The plugin run without arguments would serve, not exit: the smoke test
        # below covers it.)
        if [ "$image" = devicequery ]; then
            report=$(env -u LD_LIBRARY_PATH "${run[@]}" 2>&1) && rc=0 || rc=$?
            if [ "$rc" = 1 ] && grep -q 'libcuda.so.1: cannot open shared object file' <<<"$report" \
                && [ "$(tail -n 1 <<<"$report")" = "Result = FAIL" ]; then
                echo "   dlopen works on the image's libraries (no libcuda here: Result = FAIL, as expected)"
            else
                echo "   UNEXPECTED report without libcuda (exit $rc):" >&2
                echo "$report" >&2
                status=1
            fi
        fi
    fi
    # After the size was summed: the smoke test adds a fake host tree to the root filesystem.
    if [ "$smoke" = 1 ] && [ "$arch" = amd64 ] && [ "$(uname -m)" = x86_64 ]; then
        echo "   smoke test as the Jetson DaemonSet runs it (deploy/device-plugin/smoke-test.sh):"
        "$repo/deploy/device-plugin/smoke-test.sh" "$rootfs" || status=1
    fi
done
exit "$status"
