#!/bin/sh
# Assembles the devicequery image's whole root filesystem into OUT_DIR: the binary plus only the
# glibc pieces a dynamic Rust binary (and the libcuda.so.1 it dlopens) needs. Used by the
# Containerfile (so the image is exactly this tree) and by measure-image-size.sh (so the size we
# record is the size of exactly this tree). POSIX sh: it runs in debian:trixie-slim.
#
# Usage: assemble-rootfs.sh TARGETARCH DEBIAN_ROOT BINARY OUT_DIR
#   TARGETARCH   amd64 | arm64 (BuildKit's names)
#   DEBIAN_ROOT  a directory holding the TARGET architecture's Debian /usr/lib (a target-arch
#                image's filesystem, or libc6 + libgcc-s1 unpacked with dpkg-deb -x)
#   BINARY       the devicequery binary for that architecture
#   OUT_DIR      created; must not exist yet
set -eu

if [ "$#" -ne 4 ]; then
    echo "usage: $0 TARGETARCH DEBIAN_ROOT BINARY OUT_DIR" >&2
    exit 2
fi
arch=$1 debian_root=$2 binary=$3 out=$4

case "$arch" in
    amd64) triple=x86_64-linux-gnu; loader=ld-linux-x86-64.so.2 ;;
    arm64) triple=aarch64-linux-gnu; loader=ld-linux-aarch64.so.1 ;;
    *) echo "$0: unsupported TARGETARCH '$arch' (amd64 or arm64)" >&2; exit 2 ;;
esac

# The binaries are cross-built against glibc 2.17, whose libpthread, libdl, librt and libm were
# separate libraries: they stay DT_NEEDED even though glibc >= 2.34 folded them into libc.so.6
# (Debian keeps small stubs). libgcc_s is needed by Rust's std. The host's libcuda.so.1 needs
# the same set (libc, libm, libdl, libpthread, librt). Nothing else: no shell, no NSS, no certs.
libs="$loader libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1"

if [ -e "$out" ]; then
    echo "$0: $out already exists" >&2
    exit 2
fi
libdir=$out/usr/lib/$triple
mkdir -p "$libdir" "$out/usr/bin"
for lib in $libs; do
    src=$debian_root/usr/lib/$triple/$lib
    if [ ! -f "$src" ]; then
        echo "$0: missing $src (is DEBIAN_ROOT a $arch Debian tree?)" >&2
        exit 1
    fi
    # -L: copy the file, never a symlink that would dangle in the image.
    cp -L "$src" "$libdir/$lib"
done

# Debian's merged-/usr layout, so the ELF interpreter path baked into the binary resolves and
# the NVIDIA container runtime (which injects libcuda.so.1 into /usr/lib/<triple> when that
# directory exists, and runs ldconfig) puts the library where this ld.so looks.
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
# The NVIDIA runtime's hook injects the driver libraries (on Jetson with JetPack 4/5 also an
# /etc/ld.so.conf.d/nvidia-tegra.conf naming their directory) and then runs ldconfig, which
# writes /etc/ld.so.cache; it needs /etc/ld.so.conf.d to exist in the image.
mkdir -p "$out/etc/ld.so.conf.d"

cp "$binary" "$out/usr/bin/devicequery"
chmod 0755 "$out/usr/bin/devicequery"
