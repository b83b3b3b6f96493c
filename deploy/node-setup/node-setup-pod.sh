#!/bin/sh
# The node-setup image's work in the Helm chart's nodeSetup DaemonSet (POSIX sh: busybox in the
# image). Usage: node-setup-pod.sh apply|wait
#
#   apply  (init container, privileged, the host's root mounted at /host, host PID namespace):
#          `edgegpu-node-setup apply --root /host` writes the runtime configuration (plan,
#          backup, atomic write, as on a host). With --root other than /, node-setup restarts
#          nothing and prints the systemctl commands that would pick the change up, in
#          dependency order (systemd, containerd/docker, k3s). They are run on the host the way
#          NVIDIA's toolkit container does it, `chroot /host systemctl ...` (the pod shares the
#          host's PID namespace, so systemctl sees the host's init and talks to the host's
#          systemd). Only the command shapes node-setup prints are run. Last,
#          `edgegpu-node-setup check --root /host` must pass: the pod becomes Ready only then.
#
#          A restart can end this very container (restarting docker stops every container
#          without live-restore) or fail, so the commands are first written to a marker on the
#          host, each restart with the unit's current run (systemd's InvocationID, new on
#          every start, and ActiveEnterTimestampMonotonic). The next pod finishes what the
#          marker lists: a unit whose run changed since has been restarted (and has read the
#          new configuration, written before the marker), so it is not restarted again; a
#          restart that would end the pod again therefore cannot loop. The pod's own apply
#          then finds nothing left to write and prints no commands.
#          EDGEGPU_POD_RESTART=false: write only, print the commands, restart nothing.
#   wait   (main container, unprivileged, no host mount): stays up until SIGTERM, so the
#          DaemonSet shows per node that the init container succeeded.
#
# Exit status of apply: node-setup's own (1 check failed: not configured, 2 bad arguments,
# 3 refused: nothing written, 4 write failed) or 4 when a restart failed (the files are
# written; the next pod retries it).
# Environment: EDGEGPU_HOST_ROOT (default /host), EDGEGPU_NODE_SETUP_BIN (default
# /usr/bin/edgegpu-node-setup), and node-setup's own EDGEGPU_* variables.
set -eu

host=${EDGEGPU_HOST_ROOT:-/host}
node_setup=${EDGEGPU_NODE_SETUP_BIN:-/usr/bin/edgegpu-node-setup}
state=$host/var/lib/edgegpu/node-setup-pod
pending=$state/restart-pending
tab=$(printf '\t')

log() { echo "node-setup-pod: $*"; }

# The only systemctl arguments ever run on the host (node-setup/src/restart.rs prints these).
allowed() {
    printf '%s\n' "$1" | grep -Eqx \
        'daemon-reload|(try-restart|try-reload-or-restart) [A-Za-z0-9@._-]+\.service'
}

# The current run of UNIT on the host, one word ("" if systemd cannot say).
# shellcheck disable=SC2016 # the $ in the sed script is its last-line address
unit_run() {
    chroot "$host" systemctl show --property=InvocationID,ActiveEnterTimestampMonotonic "$1" </dev/null 2>/dev/null |
        sed -n 'H; ${x; s/\n/;/g; s/^;//; p;}' || true
}

# Copies the commands of FILE to the marker, each restart with its unit's current run.
write_pending() {
    while IFS= read -r args; do
        [ -n "$args" ] || continue
        case "$args" in
            try-restart\ * | try-reload-or-restart\ *) printf '%s\t%s\n' "$args" "$(unit_run "${args#* }")" ;;
            *) printf '%s\n' "$args" ;;
        esac
    done <"$1" >"$pending.tmp"
    mv "$pending.tmp" "$pending"
}

# Runs each line of the marker as `chroot HOST systemctl <args>`, in order; stops at the first
# failure. A restart whose unit has had another run since the marker was written is skipped.
run_restarts() {
    while IFS="$tab" read -r args run; do
        [ -n "$args" ] || continue
        if ! allowed "$args"; then
            log "refusing to run 'systemctl $args' (not a command node-setup prints)"
            return 1
        fi
        if [ -n "$run" ]; then
            now=$(unit_run "${args#* }")
            if [ -n "$now" ] && [ "$now" != "$run" ]; then
                log "${args#* } has restarted since the restart was recorded ($run, now $now): not again"
                continue
            fi
        fi
        log "on the host: systemctl $args"
        # shellcheck disable=SC2086 # $args is one of the shapes allowed() accepts: split on purpose
        if ! chroot "$host" systemctl $args </dev/null; then
            log "'systemctl $args' failed on the host; the next pod start retries it"
            return 1
        fi
    done <"$pending"
}

apply() {
    mkdir -p "$state"
    if [ -s "$pending" ]; then
        log "finishing the restart an earlier pod left pending ($pending)"
        run_restarts || exit 4
        rm -f "$pending"
    fi

    output=$state/apply.log
    status=0
    "$node_setup" apply --root "$host" >"$output" 2>&1 || status=$?
    cat "$output"
    [ "$status" -eq 0 ] || exit "$status"

    # node-setup: "not restarting services (--root is not /); to apply the change run:" and
    # one "  systemctl <args>" line per command.
    sed -n '/^not restarting services/,$ s/^  systemctl //p' "$output" >"$state/commands"
    if [ ! -s "$state/commands" ]; then
        log "nothing to restart"
    elif [ "${EDGEGPU_POD_RESTART:-true}" = false ]; then
        log "not restarting (nodeSetup.restart=false): run the systemctl commands above on the host"
    else
        write_pending "$state/commands"
        run_restarts || exit 4
        rm -f "$pending"
        log "runtime restarted"
    fi
    rm -f "$state/commands"

    status=0
    "$node_setup" check --root "$host" >"$output" 2>&1 || status=$?
    cat "$output"
    [ "$status" -eq 0 ] || exit "$status"
}

wait_for_term() {
    trap 'exit 0' TERM INT
    log "node set up when this pod started (init container apply); waiting"
    while :; do
        sleep 3600 &
        wait $! || true
    done
}

case "${1:-}" in
    apply) apply ;;
    wait) wait_for_term ;;
    -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0" ;;
    *)
        echo "usage: $0 apply|wait (got '${1:-}'; see --help)" >&2
        exit 2
        ;;
esac
