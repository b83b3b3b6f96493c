#!/bin/sh
# Assembles the whole root filesystem of one of the project's FROM-scratch images into OUT_DIR:
# the binary plus only the glibc pieces a dynamic Rust binary (and the NVIDIA library it
# dlopens: libnvidia-ml.so.1 for the plugin, libcuda.so.1 for devicequery) needs; for the
# static node-setup binary, busybox (a shell, chroot, sleep) and the DaemonSet's pod script
# instead. Used by the Containerfiles (so each image is exactly this tree), by
# scripts/build-images.sh (which builds the images from it without a container engine) and by
# measure-image-size.sh. POSIX sh: it runs in debian:trixie-slim.
#
# Usage: assemble-rootfs.sh TARGETARCH DEBIAN_ROOT BINARY OUT_DIR IMAGE
#   TARGETARCH   amd64 | arm64 (BuildKit's names)
#   DEBIAN_ROOT  a directory holding the TARGET architecture's Debian /usr/lib (a target-arch
#                image's filesystem, or libc6 + libgcc-s1 unpacked with dpkg-deb -x); for
#                edgegpu-node-setup its /usr/bin/busybox (busybox-static unpacked)
#   BINARY       the image's binary for that architecture: for edgegpu-device-plugin the
#                multi-call `edgegpu` binary (the device plugin, the DRA driver and the
#                labeller in one, docs/architecture.md)
#   OUT_DIR      created; must not exist yet
#   IMAGE        edgegpu-device-plugin | devicequery | edgegpu-node-setup: the binary's name in
#                /usr/bin and the image's own extras (plugin: /usr/bin/edgegpu with
#                edgegpu-device-plugin, edgegpu-dra-driver and edgegpu-labeller as links to it,
#                and the /host/proc/device-tree link; devicequery: /etc/ld.so.conf.d for the
#                NVIDIA runtime's ldconfig; node-setup: busybox and
#                /usr/share/edgegpu/node-setup-pod.sh, read from ../node-setup/node-setup-pod.sh
#                next to this script)
set -eu
case "${1:-}" in
-h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
esac
for arg in "$@"; do
    case "$arg" in -*) echo "$0: unknown option '$arg' (see --help)" >&2; exit 2 ;; esac
done

if [ "$#" -ne 5 ]; then
    echo "usage: $0 TARGETARCH DEBIAN_ROOT BINARY OUT_DIR IMAGE" >&2
    exit 2
fi
arch=$1 debian_root=$2 binary=$3 out=$4 image=$5
# The programs of the multi-call binary, installed as links to it (its argv[0] dispatch).
multi_call_programs="edgegpu-device-plugin edgegpu-dra-driver edgegpu-labeller"

case "$arch" in
    amd64) triple=x86_64-linux-gnu; loader=ld-linux-x86-64.so.2 ;;
    arm64) triple=aarch64-linux-gnu; loader=ld-linux-aarch64.so.1 ;;
    *) echo "$0: unsupported TARGETARCH '$arch' (amd64 or arm64)" >&2; exit 2 ;;
esac
pod_script=$(dirname "$0")/../node-setup/node-setup-pod.sh
# The busybox applets node-setup-pod.sh uses (as links, so no applet lookup depends on how
# Debian configured busybox).
applets="sh chroot sleep sed grep cat mkdir mv rm"

case "$image" in
    edgegpu-device-plugin | devicequery) ;;
    edgegpu-node-setup) ;;
    *) echo "$0: unknown IMAGE '$image' (edgegpu-device-plugin, devicequery or edgegpu-node-setup)" >&2; exit 2 ;;
esac

# The binaries are cross-built against glibc 2.17 (cargo-zigbuild), whose libpthread, libdl, librt
# and libm were separate libraries: they stay DT_NEEDED even though glibc >= 2.34 folded them into
# libc.so.6 (Debian keeps small stubs). libgcc_s is needed by Rust's std. The host's
# libnvidia-ml.so.1 and libcuda.so.1 need the same set (libc, libm, libdl, libpthread, librt).
# Nothing else: no shell, no NSS, no CA bundle.
libs="$loader libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1"
# node-setup is a static musl binary: no libraries at all.
[ "$image" != edgegpu-node-setup ] || libs=""

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
    echo "$0: missing binary $binary" >&2
    exit 1
fi
if [ "$image" = edgegpu-node-setup ]; then
    for input in "$debian_root/usr/bin/busybox" "$pod_script"; do
        if [ ! -f "$input" ]; then
            echo "$0: missing $input" >&2
            exit 1
        fi
    done
fi
libdir=$out/usr/lib/$triple
mkdir -p "$out/usr/bin"
[ -z "$libs" ] || mkdir -p "$libdir"
for lib in $libs; do
    # -L: copy the file, never a symlink that would dangle in the image.
    cp -L "$debian_root/usr/lib/$triple/$lib" "$libdir/$lib"
done

# Debian's merged-/usr layout, so the ELF interpreter path baked into the binary resolves and
# the NVIDIA container runtime (which injects the driver libraries into /usr/lib/<triple> when
# that directory exists) puts them where this ld.so looks, with or without an ld.so.cache.
if [ -n "$libs" ]; then
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
fi

case "$image" in
    edgegpu-device-plugin)
        # The DaemonSets run the plugin with --root /host and mount the host's device tree
        # (/sys/firmware/devicetree/base) under /host/sys. On the host, /proc/device-tree is a
        # symlink to that directory; recreate the link here so the plugin's
        # /host/proc/device-tree/* reads work without mounting /proc/device-tree itself (a
        # hostPath that cannot exist on x86 hosts).
        mkdir -p "$out/host/proc" "$out/host/sys"
        ln -s ../sys/firmware/devicetree/base "$out/host/proc/device-tree"
        # One binary, three programs: the DaemonSets keep running /usr/bin/<program>.
        cp "$binary" "$out/usr/bin/edgegpu"
        chmod 0755 "$out/usr/bin/edgegpu"
        for program in $multi_call_programs; do ln -s edgegpu "$out/usr/bin/$program"; done
        ;;
    devicequery)
        # The NVIDIA runtime's hook injects the driver libraries (on Jetson with JetPack 4/5 also
        # an /etc/ld.so.conf.d/nvidia-tegra.conf naming their directory) and then runs ldconfig,
        # which writes /etc/ld.so.cache; it needs /etc/ld.so.conf.d to exist in the image.
        mkdir -p "$out/etc/ld.so.conf.d"
        ;;
    edgegpu-node-setup)
        # busybox-static: the pod script's shell and the chroot that reaches the host's
        # systemctl; /bin/sh through merged-/usr's /bin link.
        cp "$debian_root/usr/bin/busybox" "$out/usr/bin/busybox"
        chmod 0755 "$out/usr/bin/busybox"
        for applet in $applets; do ln -s busybox "$out/usr/bin/$applet"; done
        ln -s usr/bin "$out/bin"
        mkdir -p "$out/usr/share/edgegpu"
        cp "$pod_script" "$out/usr/share/edgegpu/node-setup-pod.sh"
        chmod 0644 "$out/usr/share/edgegpu/node-setup-pod.sh"
        ;;
esac

if [ "$image" != edgegpu-device-plugin ]; then
    cp "$binary" "$out/usr/bin/$image"
    chmod 0755 "$out/usr/bin/$image"
fi
