#!/bin/sh
# Assembles the whole root filesystem of one of the project's FROM-scratch images into OUT_DIR:
# the binary plus only the glibc pieces a dynamic Rust binary (and the NVIDIA library it
# dlopens: libnvidia-ml.so.1 for the plugin, libcuda.so.1 for devicequery) needs. Used by both
# Containerfiles (so each image is exactly this tree) and by measure-image-size.sh (so the size
# we record is the size of exactly this tree). POSIX sh: it runs in debian:trixie-slim.
#
# Usage: assemble-rootfs.sh TARGETARCH DEBIAN_ROOT BINARY OUT_DIR IMAGE
#   TARGETARCH   amd64 | arm64 (BuildKit's names)
#   DEBIAN_ROOT  a directory holding the TARGET architecture's Debian /usr/lib (a target-arch
#                image's filesystem, or libc6 + libgcc-s1 unpacked with dpkg-deb -x)
#   BINARY       the image's binary for that architecture
#   OUT_DIR      created; must not exist yet
#   IMAGE        edgegpu-device-plugin | devicequery: the binary's name in /usr/bin and the
#                image's own extras (plugin: /host/proc/device-tree link; devicequery:
#                /etc/ld.so.conf.d for the NVIDIA runtime's ldconfig)
set -eu

if [ "$#" -ne 5 ]; then
    echo "usage: $0 TARGETARCH DEBIAN_ROOT BINARY OUT_DIR IMAGE" >&2
    exit 2
fi
arch=$1 debian_root=$2 binary=$3 out=$4 image=$5

case "$arch" in
    amd64) triple=x86_64-linux-gnu; loader=ld-linux-x86-64.so.2 ;;
    arm64) triple=aarch64-linux-gnu; loader=ld-linux-aarch64.so.1 ;;
    *) echo "$0: unsupported TARGETARCH '$arch' (amd64 or arm64)" >&2; exit 2 ;;
esac
case "$image" in
    edgegpu-device-plugin | devicequery) ;;
    *) echo "$0: unknown IMAGE '$image' (edgegpu-device-plugin or devicequery)" >&2; exit 2 ;;
esac

# The binaries are cross-built against glibc 2.17 (cargo-zigbuild), whose libpthread, libdl, librt
# and libm were separate libraries: they stay DT_NEEDED even though glibc >= 2.34 folded them into
# libc.so.6 (Debian keeps small stubs). libgcc_s is needed by Rust's std. The host's
# libnvidia-ml.so.1 and libcuda.so.1 need the same set (libc, libm, libdl, libpthread, librt).
# Nothing else: no shell, no NSS, no CA bundle.
libs="$loader libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1"

if [ -e "$out" ]; then
    echo "$0: $out already exists" >&2
    exit 2
fi
# Check every input before creating anything, so a bad call leaves no half-built OUT_DIR.
for lib in $libs; do
    if [ ! -f "$debian_root/usr/lib/$triple/$lib" ]; then
        echo "$0: missing $debian_root/usr/lib/$triple/$lib (is DEBIAN_ROOT a $arch Debian tree?)" >&2
        exit 1
    fi
done
if [ ! -f "$binary" ]; then
    echo "$0: missing BINARY $binary" >&2
    exit 1
fi
libdir=$out/usr/lib/$triple
mkdir -p "$libdir" "$out/usr/bin"
for lib in $libs; do
    # -L: copy the file, never a symlink that would dangle in the image.
    cp -L "$debian_root/usr/lib/$triple/$lib" "$libdir/$lib"
done

# Debian's merged-/usr layout, so the ELF interpreter path baked into the binary resolves and
# the NVIDIA container runtime (which injects the driver libraries into /usr/lib/<triple> when
# that directory exists) puts them where this ld.so looks, with or without an ld.so.cache.
ln -s usr/lib "$out/lib"
case "$arch" in
    amd64)
        mkdir -p "$out/usr/lib64"
        ln -s "../lib/$triple/$loader" "$out/usr/lib64/$loader"
        ln -s usr/lib64 "$out/lib64"
        ;;
    arm64)
        ln -s "$triple/$loader" "$out/usr/lib/$loader"
        ;;
esac

case "$image" in
    edgegpu-device-plugin)
        # The DaemonSets run the plugin with --root /host and mount the host's device tree
        # (/sys/firmware/devicetree/base) under /host/sys. On the host, /proc/device-tree is a
        # symlink to that directory; recreate the link here so the plugin's
        # /host/proc/device-tree/* reads work without mounting /proc/device-tree itself (a
        # hostPath that cannot exist on x86 hosts).
        mkdir -p "$out/host/proc" "$out/host/sys"
        ln -s ../sys/firmware/devicetree/base "$out/host/proc/device-tree"
        ;;
    devicequery)
        # The NVIDIA runtime's hook injects the driver libraries (on Jetson with JetPack 4/5 also
        # an /etc/ld.so.conf.d/nvidia-tegra.conf naming their directory) and then runs ldconfig,
        # which writes /etc/ld.so.cache; it needs /etc/ld.so.conf.d to exist in the image.
        mkdir -p "$out/etc/ld.so.conf.d"
        ;;
esac

cp "$binary" "$out/usr/bin/$image"
chmod 0755 "$out/usr/bin/$image"
