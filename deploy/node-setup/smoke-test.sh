#!/usr/bin/env bash
# Runs the node-setup image's pod script (node-setup-pod.sh) inside the image's root filesystem
# (host architecture) the way the Helm chart's nodeSetup DaemonSet does, against a fake k3s v1.30
# host mounted at /host: the real edgegpu-node-setup binary, the image's busybox, and a stand-in
# systemctl on the fake host that records its arguments and keeps a run number per unit (what
# `systemctl show` reports as InvocationID). Proves:
#   - apply writes k3s's default-runtime drop-in, runs `systemctl try-restart k3s.service` on
#     the host (through chroot) and ends with `edgegpu-node-setup check --root /host` passing;
#   - a second apply writes nothing and restarts nothing;
#   - a restart left pending by a failed pod is run by the next one, a failing systemctl
#     fails the pod (exit 4) and keeps it pending, a pending line that is not a command
#     node-setup prints is refused;
#   - a restart that kills the pod itself (as restarting docker does) is not run again by the
#     next pod, which sees the unit's new run: no restart loop;
#   - EDGEGPU_POD_RESTART=false writes but restarts nothing;
#   - `wait` ends with status 0 on SIGTERM.
#
# Usage (as root, for chroot): deploy/node-setup/smoke-test.sh ROOTFS
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }
case "${1:-}" in
-h | --help) usage; exit 0 ;;
-*) echo "$0: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
[ "$#" -eq 1 ] || { usage >&2; exit 2; }
rootfs=$1
[ -x "$rootfs/usr/bin/edgegpu-node-setup" ] || { echo "$0: no edgegpu-node-setup in $rootfs" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$0: needs root (chroot)" >&2; exit 2; }

host=$rootfs/host
# A container runtime gives every container /dev/null; the image itself has no /dev.
mkdir -p "$rootfs/dev"
[ -c "$rootfs/dev/null" ] || mknod -m 0666 "$rootfs/dev/null" c 1 3
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
# systemctl on the "host" (shell builtins only: the host has busybox as sh, no other applet).
# `show UNIT` prints the unit's run number as its InvocationID; a restart records its arguments
# and starts the next run, fails while /var/log/systemctl-fail exists and, while
# /var/log/systemctl-kill exists, then kills its caller (the pod script).
mkdir -p "$host/var/lib/fake-systemd"
cat >"$host/usr/bin/systemctl" <<'SYSTEMCTL'
#!/usr/bin/sh
runs=/var/lib/fake-systemd
if [ "$1" = show ]; then
    run=0
    [ ! -e "$runs/$3" ] || read -r run <"$runs/$3"
    echo "InvocationID=$run"
    echo "ActiveEnterTimestampMonotonic=1"
    exit 0
fi
[ ! -e /var/log/systemctl-fail ] || exit 1
echo "$*" >>/var/log/systemctl-calls
case "$1" in
    try-restart | try-reload-or-restart)
        run=0
        [ ! -e "$runs/$2" ] || read -r run <"$runs/$2"
        echo $((run + 1)) >"$runs/$2"
        [ ! -e /var/log/systemctl-kill ] || kill -KILL "$PPID"
        ;;
esac
SYSTEMCTL
chmod 0755 "$host/usr/local/bin/k3s" "$host/usr/bin/nvidia-container-runtime" "$host/usr/bin/systemctl"
: >"$calls"
# What the pod records for k3s.service now (the fake's `systemctl show` output, joined).
k3s_run() {
    local run=0
    [ ! -e "$host/var/lib/fake-systemd/k3s.service" ] || read -r run <"$host/var/lib/fake-systemd/k3s.service"
    echo "InvocationID=$run;ActiveEnterTimestampMonotonic=1"
}

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
if grep -q "node is fully configured" "$log" \
    && chroot "$rootfs" /usr/bin/edgegpu-node-setup check --root /host >/dev/null; then
    ok "apply ends with edgegpu-node-setup check passing"
else bad "apply ends with edgegpu-node-setup check passing"; fi

pod || true
if grep -q "already configured" "$log" && [ "$(ncalls)" = 1 ]; then
    ok "a second apply writes and restarts nothing"
else bad "a second apply writes and restarts nothing"; fi

mkdir -p "$(dirname "$pending")"
printf 'daemon-reload\ntry-restart k3s.service\t%s\n' "$(k3s_run)" >"$pending"
pod || true
if [ "$(sed -n '2,$p' "$calls")" = "$(printf 'daemon-reload\ntry-restart k3s.service')" ] && [ ! -e "$pending" ]; then
    ok "a restart left pending by an earlier pod (its unit not restarted since) is run, then cleared"
else bad "a restart left pending by an earlier pod (its unit not restarted since) is run, then cleared"; fi

touch "$host/var/log/systemctl-fail"
printf 'try-restart k3s.service\t%s\n' "$(k3s_run)" >"$pending"
status=0
pod || status=$?
if [ "$status" = 4 ] && [ -s "$pending" ]; then
    ok "a failing systemctl fails the pod (exit 4) and stays pending"
else bad "a failing systemctl fails the pod (exit 4) and stays pending (exit $status)"; fi
rm "$host/var/log/systemctl-fail"

echo "start evil.service; rm -rf /" >"$pending"
status=0
pod || status=$?
if [ "$status" = 4 ] && grep -q "refusing to run" "$log" && [ "$(ncalls)" = 3 ]; then
    ok "a pending line that node-setup never prints is refused, not run"
else bad "a pending line that node-setup never prints is refused, not run (exit $status)"; fi
rm -f "$pending"

chroot "$rootfs" /usr/bin/edgegpu-node-setup revert --root /host >/dev/null
pod EDGEGPU_POD_RESTART=false || true
if [ -f "$dropin" ] && [ "$(ncalls)" = 3 ] && grep -q "nodeSetup.restart=false" "$log"; then
    ok "EDGEGPU_POD_RESTART=false writes the drop-in and restarts nothing"
else bad "EDGEGPU_POD_RESTART=false writes the drop-in and restarts nothing"; fi

# A restart that ends the pod: the unit restarts (its run changes), then the caller dies, as
# when restarting docker stops every container. The next pod must not restart it again (it
# would be killed again, forever); it finds the unit's new run, skips it and finishes.
chroot "$rootfs" /usr/bin/edgegpu-node-setup revert --root /host >/dev/null
touch "$host/var/log/systemctl-kill"
status=0
{ pod || status=$?; } 2>/dev/null # bash's own "Killed" notice
if [ "$status" = 137 ] && [ "$(ncalls)" = 4 ] && [ -s "$pending" ]; then
    ok "a restart that kills the pod leaves the restart pending with the unit's run"
else bad "a restart that kills the pod leaves the restart pending with the unit's run (exit $status)"; fi
status=0
pod || status=$?
if [ "$status" = 0 ] && [ "$(ncalls)" = 4 ] && [ ! -e "$pending" ] && grep -q "has restarted since" "$log" \
    && grep -q "node is fully configured" "$log"; then
    ok "the next pod sees k3s.service restarted since, does not restart it again, and passes"
else bad "the next pod sees k3s.service restarted since, does not restart it again, and passes (exit $status)"; fi
rm "$host/var/log/systemctl-kill"

# The main container runs it as uid 65532 (the chart's `configured` container).
status=0
timeout --preserve-status -s TERM 1 chroot --userspec=65532:65532 "$rootfs" /bin/sh \
    /usr/share/edgegpu/node-setup-pod.sh wait >"$log" 2>&1 || status=$?
if [ "$status" = 0 ]; then
    ok "wait (uid 65532) ends with status 0 on SIGTERM"
else bad "wait (uid 65532) ends with status 0 on SIGTERM (exit $status)"; fi
exit "$failed"
