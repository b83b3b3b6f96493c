#!/usr/bin/env bash
# Runs the node-setup image's pod script (node-setup-pod.sh) inside the image's root filesystem
# (host architecture) the way the Helm chart's nodeSetup DaemonSet does, against a fake k3s v1.30
# host mounted at /host: the real edgegpu-node-setup binary, the image's busybox, and a stand-in
# systemctl on the fake host that records its arguments. Proves:
#   - apply writes k3s's default-runtime drop-in and runs `systemctl try-restart k3s.service`
#     on the host (through chroot), and `edgegpu-node-setup check --root /host` then passes;
#   - a second apply writes nothing and restarts nothing;
#   - a restart left pending by a killed or failed pod is run by the next one, a failing
#     systemctl fails the pod (exit 4) and keeps it pending, a pending line that is not a
#     command node-setup prints is refused;
#   - EDGEGPU_POD_RESTART=false writes but restarts nothing;
#   - `wait` ends with status 0 on SIGTERM.
#
# Usage (as root, for chroot): deploy/node-setup/smoke-test.sh ROOTFS
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[ "$#" -eq 1 ] || { usage >&2; exit 2; }
rootfs=$1
[ -x "$rootfs/usr/bin/edgegpu-node-setup" ] || { echo "$0: no edgegpu-node-setup in $rootfs" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$0: needs root (chroot)" >&2; exit 2; }

host=$rootfs/host
calls=$host/var/log/systemctl-calls
pending=$host/var/lib/edgegpu/node-setup-pod/restart-pending
dropin=$host/etc/rancher/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml

# A k3s v1.30 server host: the k3s binary carries its version string where node-setup reads it.
mkdir -p "$host/usr/local/bin" "$host/etc/systemd/system" "$host/usr/bin" "$host/var/log"
{
    printf '\177ELF-not-really\0go1.22.5\0'
    head -c 4096 /dev/zero
    printf 'github.com/k3s-io/k3s/pkg/version.Versionv1.30.4+k3s1v0.0.0-upstream'
} >"$host/usr/local/bin/k3s"
printf '[Unit]\nDescription=k3s\n[Service]\nExecStart=/usr/local/bin/k3s server\n' \
    >"$host/etc/systemd/system/k3s.service"
printf '#!/bin/sh\nexit 0\n' >"$host/usr/bin/nvidia-container-runtime"
cp "$rootfs/usr/bin/busybox" "$host/usr/bin/busybox"
ln -sf busybox "$host/usr/bin/sh"
# systemctl on the "host": records its arguments; fails while /var/log/systemctl-fail exists.
printf '#!/usr/bin/sh\n[ ! -e /var/log/systemctl-fail ] || exit 1\necho "$*" >>/var/log/systemctl-calls\n' \
    >"$host/usr/bin/systemctl"
chmod 0755 "$host/usr/local/bin/k3s" "$host/usr/bin/nvidia-container-runtime" "$host/usr/bin/systemctl"
: >"$calls"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
pod() {
    local status=0
    env "$@" chroot "$rootfs" /bin/sh /usr/share/edgegpu/node-setup-pod.sh apply >"$log" 2>&1 || status=$?
    return "$status"
}
ok() { echo "   ok: $1"; }
bad() {
    echo "   FAILED: $1" >&2
    sed 's/^/      | /' "$log" >&2
    failed=1
}
ncalls() { wc -l <"$calls"; }

pod || true
if [ -f "$dropin" ] && grep -q "default-runtime: nvidia" "$dropin"; then
    ok "apply wrote k3s's default-runtime drop-in"
else bad "apply wrote k3s's default-runtime drop-in"; fi
if [ "$(cat "$calls")" = "try-restart k3s.service" ] && [ ! -e "$pending" ]; then
    ok "apply ran 'systemctl try-restart k3s.service' on the host, nothing left pending"
else bad "apply ran 'systemctl try-restart k3s.service' on the host, nothing left pending"; fi
if chroot "$rootfs" /usr/bin/edgegpu-node-setup check --root /host >/dev/null; then
    ok "the readiness check passes"
else bad "the readiness check passes"; fi

pod || true
if grep -q "already configured" "$log" && [ "$(ncalls)" = 1 ]; then
    ok "a second apply writes and restarts nothing"
else bad "a second apply writes and restarts nothing"; fi

mkdir -p "$(dirname "$pending")"
echo "try-restart k3s.service" >"$pending"
pod || true
if [ "$(ncalls)" = 2 ] && [ ! -e "$pending" ]; then
    ok "a restart left pending by an earlier pod is run, then cleared"
else bad "a restart left pending by an earlier pod is run, then cleared"; fi

touch "$host/var/log/systemctl-fail"
echo "try-restart k3s.service" >"$pending"
status=0
pod || status=$?
if [ "$status" = 4 ] && [ -s "$pending" ]; then
    ok "a failing systemctl fails the pod (exit 4) and stays pending"
else bad "a failing systemctl fails the pod (exit 4) and stays pending (exit $status)"; fi
rm "$host/var/log/systemctl-fail"

echo "start evil.service; rm -rf /" >"$pending"
status=0
pod || status=$?
if [ "$status" = 4 ] && grep -q "refusing to run" "$log" && [ "$(ncalls)" = 2 ]; then
    ok "a pending line that node-setup never prints is refused, not run"
else bad "a pending line that node-setup never prints is refused, not run (exit $status)"; fi
rm -f "$pending"

chroot "$rootfs" /usr/bin/edgegpu-node-setup revert --root /host >/dev/null
pod EDGEGPU_POD_RESTART=false || true
if [ -f "$dropin" ] && [ "$(ncalls)" = 2 ] && grep -q "nodeSetup.restart=false" "$log"; then
    ok "EDGEGPU_POD_RESTART=false writes the drop-in and restarts nothing"
else bad "EDGEGPU_POD_RESTART=false writes the drop-in and restarts nothing"; fi

status=0
timeout --preserve-status -s TERM 1 chroot "$rootfs" /bin/sh /usr/share/edgegpu/node-setup-pod.sh wait \
    >"$log" 2>&1 || status=$?
if [ "$status" = 0 ]; then
    ok "wait ends with status 0 on SIGTERM"
else bad "wait ends with status 0 on SIGTERM (exit $status)"; fi
exit "$failed"
