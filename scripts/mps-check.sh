#!/usr/bin/env bash
# MPS sharing on a real GPU, without Kubernetes: the companion runs the host's MPS control
# daemon, the plugin (with an in-process fake kubelet: the allocate_here example) hands out
# replicas and memory units, and each "container" is a process started with exactly the
# environment and mounts Allocate returned (a private mount namespace, as a runtime would).
# Then devicequery checks the limits: PASS under them, CUDA_ERROR_OUT_OF_MEMORY beyond them,
# FAIL where the limit is only accounted (the negative control).
#
# Needs root, a GPU whose platform runs MPS (docs/sharing.md), nvidia-cuda-mps-control on the
# host, util-linux (unshare, mount), and the release binaries in BIN_DIR:
#   cargo build --release -p edgegpu -p edgegpu-devicequery && cargo build --release -p edgegpu-plugin --example allocate_here
#   BIN_DIR=target/release (allocate_here is in target/release/examples: copy it next to them)
# The companion is the multi-call binary run as edgegpu-device-plugin: BIN_DIR/edgegpu-device-plugin
# when it is there (a link to edgegpu, as the images install it), else `edgegpu device-plugin`.
# Usage: scripts/mps-check.sh BIN_DIR OUT_DIR
# Exit status 0 only when every check met its expectation.
set -uo pipefail
. "$(dirname "$0")/lib/args.sh"
script_args "$0" "" "$@"
BIN=$(cd "${1:?BIN_DIR}" && pwd)
OUT=${2:?OUT_DIR}
MPS=${MPS_ROOT:-/run/edgegpu-mps-check}
PLUGIN=$BIN/edgegpu-device-plugin
DQ=$BIN/devicequery
ALLOC=$BIN/allocate_here
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ ! -e "$PLUGIN" ] && [ -x "$BIN/edgegpu" ]; then
    PLUGIN=$OUT/bin/edgegpu-device-plugin
    mkdir -p "$OUT/bin" && ln -sf "$BIN/edgegpu" "$PLUGIN"
fi
failures=0

say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }

# expect NAME EXPECTED(0|1) ACTUAL
expect() {
    if [ "$2" = "$3" ]; then say "CHECK $1: ok (exit $3)"; else say "CHECK $1: UNEXPECTED (exit $3, wanted $2)"; failures=$((failures + 1)); fi
}

# in_container DIR I LOG CMD...: runs CMD with container I's environment and mounts.
in_container() {
    local dir=$1 i=$2 log=$3
    shift 3
    local -a env=()
    while IFS= read -r line; do [ -n "$line" ] && env+=("$line"); done <"$dir/container-$i.env"
    env+=("${EXTRA_ENV[@]}")
    local binds=""
    while read -r host container; do
        [ -n "$host" ] && binds+="mount --bind '$host' '$container' && "
    done <"$dir/container-$i.mounts"
    unshare -m -- bash -c "mount --make-rprivate / && ${binds} exec env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH=\${LD_LIBRARY_PATH:-} \"\$@\"" _ \
        "${env[@]}" "$@" >"$log" 2>&1
}
EXTRA_ENV=()

# allocate NAME CONFIG COUNT SIZE: the plugin admits COUNT containers of SIZE devices each.
allocate() {
    local name=$1 config=$2 count=$3 size=$4
    local t0=$(date +%s.%N)
    "$ALLOC" --count "$count" --size "$size" --out "$OUT/$name" --wait ${ALLOCATE_WAIT:-60} -- \
        --config "$config" --mps-root="$MPS" >"$OUT/$name.alloc.txt" 2>"$OUT/$name.plugin.log"
    local rc=$?
    local t1=$(date +%s.%N)
    say "$name: plugin start -> containers allocated in $(awk "BEGIN{printf \"%.2f\", $t1-$t0}") s (rc $rc)"
    sed 's/^/    /' "$OUT/$name.alloc.txt" | tee -a "$OUT/summary.txt"
    return $rc
}

rm -rf "$MPS"
mkdir -p "$MPS"
say "== host"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader | tee -a "$OUT/summary.txt"
"$DQ" >"$OUT/devicequery-plain.txt" 2>&1
expect "devicequery without sharing" 0 $?

say "== companion"
"$PLUGIN" mps-control-daemon --root=/ --mps-root="$MPS" >"$OUT/companion.log" 2>&1 &
COMPANION=$!
sleep 1

say "== MPS replicas: 4 per GPU, 4 GiB and 25 % each"
cat >"$OUT/mps.yaml" <<'EOF'
version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
      activeThreadPercentage: 25
      pinnedDeviceMemoryLimit: 4Gi
EOF
if allocate mps "$OUT/mps.yaml" 2 1; then
    in_container "$OUT/mps" 1 "$OUT/mps-c1-hold.txt" "$DQ" --allocate-mib 2048 --hold-seconds 20 &
    HOLD=$!
    sleep 5
    in_container "$OUT/mps" 0 "$OUT/mps-c0-check-limits.txt" "$DQ" --check-limits
    expect "replica 0: --check-limits while replica 1 holds 2 GiB" 0 $?
    in_container "$OUT/mps" 0 "$OUT/mps-c0-over.txt" "$DQ" --allocate-mib 6144
    expect "replica 0: 6 GiB beyond its 4 GiB" 1 $?
    grep -h "CUDA_ERROR" "$OUT/mps-c0-over.txt" | head -2 | sed 's/^/    /' | tee -a "$OUT/summary.txt"
    EXTRA_ENV=("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=65536M")
    in_container "$OUT/mps" 0 "$OUT/mps-c0-override.txt" "$DQ" --allocate-mib 6144
    expect "replica 0 raising its own limit variable to 64 GiB, then 6 GiB" 1 $?
    EXTRA_ENV=()
    # A process leaving MPS: on a discrete GPU the companion made it EXCLUSIVE_PROCESS, so the
    # MPS server holds the only context and this one gets none.
    nvidia-smi --query-gpu=compute_mode --format=csv,noheader | sed 's/^/    compute mode while MPS serves: /' | tee -a "$OUT/summary.txt"
    EXTRA_ENV=("CUDA_MPS_PIPE_DIRECTORY=/nonexistent")
    in_container "$OUT/mps" 0 "$OUT/mps-c0-bypass.txt" "$DQ" --allocate-mib 6144
    expect "replica 0 leaving MPS (another pipe directory), then 6 GiB" 1 $?
    grep -h "CUDA_ERROR\|check failed" "$OUT/mps-c0-bypass.txt" | head -2 | sed 's/^/    /' | tee -a "$OUT/summary.txt"
    EXTRA_ENV=()
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$OUT/mps-apps.csv" 2>&1
    sed 's/^/    /' "$OUT/mps-apps.csv" | tee -a "$OUT/summary.txt"
    wait $HOLD
    expect "replica 1 held 2 GiB under its limit" 0 $?
else
    say "CHECK MPS replicas: allocation failed"; failures=$((failures + 1))
fi

say "== memory units: 1 GiB each, enforced by MPS (the companion replaces the daemon)"
cat >"$OUT/mem.yaml" <<'EOF'
version: v1
sharing:
  gpuMemory:
    unit: 1Gi
    enforcement: mps
    resources:
    - name: nvidia.com/gpu
EOF
if allocate mem "$OUT/mem.yaml" 1 3; then
    in_container "$OUT/mem" 0 "$OUT/mem-c0-check-limits.txt" "$DQ" --check-limits
    expect "3 units: --check-limits" 0 $?
    in_container "$OUT/mem" 0 "$OUT/mem-c0-over.txt" "$DQ" --allocate-mib 4096
    expect "3 units: 4 GiB beyond the 3 GiB" 1 $?
else
    say "CHECK memory units: allocation failed"; failures=$((failures + 1))
fi

say "== negative control: memory units accounted only"
cat >"$OUT/acct.yaml" <<'EOF'
version: v1
sharing:
  gpuMemory:
    unit: 1Gi
    enforcement: none
    resources:
    - name: nvidia.com/gpu
EOF
if allocate acct "$OUT/acct.yaml" 1 2; then
    in_container "$OUT/acct" 0 "$OUT/acct-c0-check-limits.txt" "$DQ" --check-limits
    expect "accounting only: --check-limits must fail" 1 $?
else
    say "CHECK accounting only: allocation failed"; failures=$((failures + 1))
fi

say "== companion stops on SIGTERM"
kill -TERM "$COMPANION"
wait "$COMPANION"
expect "companion exit status" 0 $?
nvidia-smi --query-gpu=compute_mode --format=csv,noheader | sed 's/^/    compute mode after the companion: /' | tee -a "$OUT/summary.txt"
sleep 1
if pgrep -f nvidia-cuda-mps-control >/dev/null; then
    say "CHECK no control daemon left: UNEXPECTED"; failures=$((failures + 1))
else
    say "CHECK no control daemon left: ok"
fi
cp -r "$MPS"/*/log "$OUT/mps-logs" 2>/dev/null
say "== $failures unexpected result(s)"
[ "$failures" = 0 ]
