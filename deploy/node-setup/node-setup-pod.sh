#!/bin/sh
# The node-setup image's work in the Helm chart's nodeSetup DaemonSet (POSIX sh: busybox in the
# image). The host's root is mounted at /host.
#
#   apply  (init container, privileged): `edgegpu-node-setup apply --root /host` writes the
#          runtime configuration (plan, backup, atomic write, as on a host). With --root other
#          than /, node-setup restarts nothing and prints the systemctl commands that would pick
#          the change up, in dependency order (systemd, containerd/docker, k3s). They are run
#          on the host the way NVIDIA's toolkit container does it, `chroot /host systemctl ...`
#          (the pod shares the host's PID namespace, so systemctl sees the host's init and talks
#          to the host's systemd). Only the command shapes node-setup prints are run. They are
#          first written to a marker on the host: a pod killed mid-restart (or a failed
#          restart) leaves the marker, and the next pod runs those commands again, since its
#          apply finds nothing left to write and so prints no commands.
#          EDGEGPU_POD_RESTART=false: write only, print the commands, restart nothing.
#   wait   (main container): stays up until SIGTERM; its readiness probe runs
#          `edgegpu-node-setup check --root /host`.
#
# Exit status of apply: node-setup's own (2 bad arguments, 3 refused: nothing written,
# 4 write failed) or 4 when a restart failed (the files are written; the pod retries it).
# Environment: EDGEGPU_HOST_ROOT (default /host), EDGEGPU_NODE_SETUP_BIN (default
# /usr/bin/edgegpu-node-setup), and node-setup's own EDGEGPU_* variables.
set -eu

host=${EDGEGPU_HOST_ROOT:-/host}
node_setup=${EDGEGPU_NODE_SETUP_BIN:-/usr/bin/edgegpu-node-setup}
state=$host/var/lib/edgegpu/node-setup-pod
pending=$state/restart-pending

log() { echo "node-setup-pod: $*"; }

# The only systemctl arguments ever run on the host (node-setup/src/restart.rs prints these).
allowed() {
    printf '%s\n' "$1" | grep -Eqx \
        'daemon-reload|(try-restart|try-reload-or-restart) [A-Za-z0-9@._-]+\.service'
}

# Runs each line of FILE as `chroot HOST systemctl <line>`, in order; stops at the first failure.
run_restarts() {
    while IFS= read -r args; do
        [ -n "$args" ] || continue
        if ! allowed "$args"; then
            log "refusing to run 'systemctl $args' (not a command node-setup prints)"
            return 1
        fi
        log "on the host: systemctl $args"
        # shellcheck disable=SC2086 # $args is one of the shapes allowed() accepts: split on purpose
        if ! chroot "$host" systemctl $args; then
            log "'systemctl $args' failed on the host; the next pod start retries it"
            return 1
        fi
    done <"$1"
}

apply() {
    mkdir -p "$state"
    if [ -s "$pending" ]; then
        log "finishing the restart an earlier pod left pending ($pending)"
        run_restarts "$pending" || exit 4
        rm -f "$pending"
    fi

    output=$state/apply.log
    status=0
    "$node_setup" apply --root "$host" >"$output" 2>&1 || status=$?
    cat "$output"
    [ "$status" -eq 0 ] || exit "$status"

    # node-setup: "not restarting services (--root is not /); to apply the change run:" and
    # one "  systemctl <args>" line per command.
    sed -n '/^not restarting services/,$ s/^  systemctl //p' "$output" >"$pending.tmp"
    if [ ! -s "$pending.tmp" ]; then
        rm -f "$pending.tmp"
        log "nothing to restart"
        return 0
    fi
    if [ "${EDGEGPU_POD_RESTART:-true}" = false ]; then
        rm -f "$pending.tmp"
        log "not restarting (nodeSetup.restart=false): run the systemctl commands above on the host"
        return 0
    fi
    mv "$pending.tmp" "$pending"
    run_restarts "$pending" || exit 4
    rm -f "$pending"
    log "runtime restarted"
}

wait_for_term() {
    trap 'exit 0' TERM INT
    log "waiting (readiness: edgegpu-node-setup check --root $host)"
    while :; do
        sleep 3600 &
        wait $! || true
    done
}

case "${1:-}" in
    apply) apply ;;
    wait) wait_for_term ;;
    *)
        echo "usage: $0 apply|wait" >&2
        exit 2
        ;;
esac
