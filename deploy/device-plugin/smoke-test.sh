#!/usr/bin/env bash
# Runs the plugin inside an assembled image root filesystem (the output of
# deploy/image/assemble-rootfs.sh for edgegpu-device-plugin, host architecture) the way the
# Jetson DaemonSet runs it (run-confined.py: uid 0 without any capability, no_new_privs,
# read-only root): a fake Jetson AGX Orin host tree laid out
# exactly where the DaemonSet mounts the host's files (/host/sys/firmware/devicetree/base,
# /host/sys/{devices,class,module}, /host/etc/..., /host/dev), --root /host, the device-plugin
# directory at /var/lib/kubelet/device-plugins. Proves, with the real binary and only the image's
# libraries, that detection reads the device tree through the image's /host/proc/device-tree
# link, that the plugin serves its socket, and that SIGTERM ends it with status 0, socket removed.
# No kubelet: registration is retried, which is expected here.
#
# Usage (as root, for chroot): deploy/device-plugin/smoke-test.sh ROOTFS
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }
case "${1:-}" in
-h | --help) usage; exit 0 ;;
-*) echo "$0: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
[ "$#" -eq 1 ] || { usage >&2; exit 2; }
rootfs=$1
[ -x "$rootfs/usr/bin/edgegpu-device-plugin" ] || { echo "$0: no plugin in $rootfs" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$0: needs root (chroot)" >&2; exit 2; }

host=$rootfs/host
dt=$host/sys/firmware/devicetree/base
gpu="$host/sys/devices/platform/bus@0/17000000.gpu"
mkdir -p "$dt" "$host/sys/devices/soc0" "$host/sys/module/tegra_fuse/parameters" \
    "$host/etc/nvidia-container-runtime/host-files-for-container.d" "$host/dev/nvgpu/igpu0" \
    "$gpu/devfreq/17000000.gpu" "$host/sys/class/devfreq" "$rootfs/var/lib/kubelet/device-plugins"
printf 'nvidia,p3737-0000+p3701-0000\0nvidia,p3701-0000\0nvidia,tegra234\0' >"$dt/compatible"
printf 'NVIDIA Jetson AGX Orin Developer Kit\0' >"$dt/model"
printf 'tegra234-p3701-0000-p3737-0000\0' >"$dt/nvidia,dtsfilename"
echo Tegra >"$host/sys/devices/soc0/family"
echo 35 >"$host/sys/module/tegra_fuse/parameters/tegra_chip_id"
echo '# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025' \
    >"$host/etc/nv_tegra_release"
printf 'dev, /dev/nvmap\ndev, /dev/nvgpu/igpu0/ctrl\n' \
    >"$host/etc/nvidia-container-runtime/host-files-for-container.d/devices.csv"
for node in nvmap nvidia0 nvidiactl nvhost-ctrl-gpu nvhost-gpu nvhost-as-gpu nvgpu/igpu0/ctrl; do
    : >"$host/dev/$node"
done
echo 0 >"$gpu/load"
echo 306000000 >"$gpu/devfreq/17000000.gpu/cur_freq"
ln -sfn ../../devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu "$host/sys/class/devfreq/17000000.gpu"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# The kubelet creates its device-plugin directory root:root 0750.
chmod 0750 "$rootfs/var/lib/kubelet/device-plugins"
here=$(cd "$(dirname "$0")" && pwd)
timeout --preserve-status -s TERM 3 python3 "$here/run-confined.py" "$rootfs" /var/lib/kubelet/device-plugins -- \
    /usr/bin/edgegpu-device-plugin --root=/host --discovery tegra --log-format json \
    --ownership-dir=/var/lib/kubelet/device-plugins >"$log" 2>&1 || status=$?

failed=0
expect() {
    if grep -q -- "$1" "$log"; then
        echo "   ok: $2"
    else
        echo "   MISSING: $2 (no '$1' in the log)" >&2
        failed=1
    fi
}
expect 'run-confined: uid 0, no capabilities' "confined as the DaemonSet's securityContext: uid 0, no capabilities, no_new_privs, read-only /"
expect 'Detected platform: tegra' "Tegra detected"
expect 'NVIDIA Jetson AGX Orin Developer Kit' "device tree model read through /host/proc/device-tree"
expect '36\.4\.3' "L4T release read from /host/etc/nv_tegra_release"
expect 'Starting to serve' "socket served in /var/lib/kubelet/device-plugins"
if [ "$status" -ne 0 ]; then
    echo "   FAILED: exit status $status after SIGTERM (want 0)" >&2
    failed=1
fi
if compgen -G "$rootfs/var/lib/kubelet/device-plugins/*.sock" >/dev/null; then
    echo "   FAILED: socket left behind after SIGTERM" >&2
    failed=1
fi
if [ "$failed" = 1 ]; then
    echo "----- plugin log -----" >&2
    cat "$log" >&2
fi
exit "$failed"
