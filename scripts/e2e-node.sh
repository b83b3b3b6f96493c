#!/usr/bin/env bash
# End-to-end check of the device plugin on a real GPU node (Jetson or discrete). Not run in CI.
#
#   1. kubectl apply -f deploy/  (RuntimeClass, device plugin DaemonSets, node labeller, metrics
#      Service; skip with --no-apply) and, with --config FILE, a sharing ConfigMap (then the
#      plugin is restarted to read it). No `kubectl label`: the node labeller labels the node.
#   2. waits for the node to advertise the resource (status.allocatable), for its labels
#      (edgegpu.io/gpu from the node labeller, nvidia.com/gpu.* from the plugin's init container)
#      and for the plugin's /metrics (read through the API server's pod proxy)
#   3. runs the devicequery Job (deploy/devicequery/job.yaml) on the node, prints its log and
#      requires "Result = PASS"
#   4. contention: with N free GPUs (or time-slices), starts N pods that hold one each, then one
#      more: the N held pods must all run at once and the extra pod must stay Pending
#      (Insufficient <resource>) until a holder ends, then run. Without sharing on a one-GPU node
#      that is "the second pod waits for the first"; with time-slicing replicas both run. While
#      the holders run, the GPU series of /metrics must name them (pod label).
#   5. with --limits, on a GPU shared with limits (MPS replicas or memory units: the chart's
#      mps.enabled and a --config such as deploy/examples/mps-jetson.yaml): a pod runs
#      `devicequery --check-limits` (PASS only when its GPU memory limit holds), then two pods
#      at once: one allocates a quarter of its limit and holds it (--limits-hold), the other
#      asks for more than its limit and must fail with CUDA_ERROR_OUT_OF_MEMORY while the
#      first keeps running and then passes.
#   6. removes everything it created (pods, the Job, the --config ConfigMap) unless --keep.
#
# Usage: scripts/e2e-node.sh [options]
#   --node NAME            node to test (default: the only node that advertises the resource)
#   --kubectl CMD          kubectl command (default: $KUBECTL, else kubectl; on k3s "k3s kubectl")
#   --no-apply             do not apply deploy/ (already there, e.g. through k3s auto-deploy)
#   --config FILE          also apply this sharing ConfigMap, e.g.
#                          deploy/examples/time-slicing-jetson.yaml (removed again at the end)
#   --expect N             wait until the node advertises exactly N (e.g. 4 with replicas: 4)
#   --resource NAME        extended resource (default nvidia.com/gpu)
#   --namespace NS         namespace for the contention pods (default default)
#   --image IMAGE          image of the contention pods, needs `sleep`
#                          (default docker.io/library/busybox:1.36)
#   --runtime-class NAME   runtimeClassName for the test pods, if nvidia is not the default runtime
#   --hold SECONDS         how long each holder pod keeps its GPU (default 45)
#   --timeout SECONDS      limit for each wait (default 300)
#   --metrics-port PORT    the plugin's metrics port (default 9400)
#   --limits               also run step 5, the GPU memory limits check (with --no-apply: the
#                          chart installed with mps.enabled)
#   --limits-count N       devices each limits pod asks for (default 1: one MPS replica; for
#                          memory units e.g. --resource nvidia.com/gpu-mem --limits-count 8)
#   --limits-hold SECONDS  how long the pod under its limit holds its memory (default 60)
#   --devicequery-image IMAGE  image of the limits pods (default: the devicequery Job's)
#   --no-metrics           skip the /metrics checks (metrics turned off in the deployment)
#   --keep                 leave the test pods and the Job for inspection
#   -h, --help             this text
# Exit status: 0 when every check passed, 1 when one failed, 2 on bad usage.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
kubectl_cmd=${KUBECTL:-kubectl}
node=""
apply=1
config_file=""
expect=""
resource=nvidia.com/gpu
namespace=default
image=docker.io/library/busybox:1.36
runtime_class=""
hold=45
timeout=300
keep=0
metrics_port=9400
check_metrics=1
max_holders=16
check_limits=0
limits_count=1
limits_hold=60
devicequery_image=""
poll=${E2E_POLL_SECONDS:-2} # seconds between status reads (the script's tests shorten it)

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }
die_usage() { echo "e2e-node: $*" >&2; echo "try: $0 --help" >&2; exit 2; }
need_value() { [ "$#" -ge 2 ] && [ -n "$2" ] || die_usage "$1 needs a value"; }
is_count() { [[ $1 =~ ^[0-9]+$ ]]; }

while [ "$#" -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --node) need_value "$@"; node=$2; shift 2 ;;
        --kubectl) need_value "$@"; kubectl_cmd=$2; shift 2 ;;
        --no-apply) apply=0; shift ;;
        --config) need_value "$@"; config_file=$2; shift 2 ;;
        --expect) need_value "$@"; expect=$2; shift 2 ;;
        --resource) need_value "$@"; resource=$2; shift 2 ;;
        --namespace) need_value "$@"; namespace=$2; shift 2 ;;
        --image) need_value "$@"; image=$2; shift 2 ;;
        --runtime-class) need_value "$@"; runtime_class=$2; shift 2 ;;
        --hold) need_value "$@"; hold=$2; shift 2 ;;
        --timeout) need_value "$@"; timeout=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --metrics-port) need_value "$@"; metrics_port=$2; shift 2 ;;
        --no-metrics) check_metrics=0; shift ;;
        --limits) check_limits=1; shift ;;
        --limits-count) need_value "$@"; limits_count=$2; shift 2 ;;
        --limits-hold) need_value "$@"; limits_hold=$2; shift 2 ;;
        --devicequery-image) need_value "$@"; devicequery_image=$2; shift 2 ;;
        *) die_usage "unknown option '$1'" ;;
    esac
done
is_count "$hold" || die_usage "--hold must be a number of seconds"
is_count "$timeout" || die_usage "--timeout must be a number of seconds"
is_count "$metrics_port" || die_usage "--metrics-port must be a port number"
is_count "$limits_count" && [ "$limits_count" -gt 0 ] || die_usage "--limits-count must be a number >= 1"
is_count "$limits_hold" || die_usage "--limits-hold must be a number of seconds"
# deploy/*.yaml has no MPS companion; applied over the chart they would replace its DaemonSets.
[ "$check_limits" = 0 ] || [ "$apply" = 0 ] ||
    die_usage "--limits needs --no-apply: MPS comes with the Helm chart (mps.enabled), not with deploy/"
[ -z "$expect" ] || is_count "$expect" || die_usage "--expect must be a number"
[ -z "$config_file" ] || [ -f "$config_file" ] || die_usage "--config: no file $config_file"

# Word-split on purpose: "k3s kubectl" is a command and its first argument.
read -r -a kubectl_words <<<"$kubectl_cmd"
k() { "${kubectl_words[@]}" "$@"; }

passed=0 failed=0
run_id=e2e-$(date +%s)
job_file=$repo/deploy/devicequery/job.yaml
job_name="" job_namespace=""
config_map="" config_map_namespace=""
plugin_ds=""

log() { printf '==> %s\n' "$*"; }
pass() { printf 'PASS %s\n' "$*"; passed=$((passed + 1)); }
fail() { printf 'FAIL %s\n' "$*" >&2; failed=$((failed + 1)); }
finish() {
    echo "e2e-node: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && exit 0 || exit 1
}
# A failed step that later steps depend on: report, clean up (EXIT trap) and stop.
abort() { fail "$*"; finish; }

# jsonpath key for an extended resource name: nvidia.com/gpu -> nvidia\.com/gpu
resource_key=${resource//./\\.}

allocatable() { k get node "$node" -o "jsonpath={.status.allocatable.$resource_key}"; }
# node_label KEY: a label of the node (jsonpath needs the dots of the key escaped).
node_label() { k get node "$node" -o "jsonpath={.metadata.labels.${1//./\\.}}"; }
# The plugin pod's /metrics through the API server's pod proxy (no port-forward needed).
metrics() { k get --raw "/api/v1/namespaces/kube-system/pods/$plugin_pod:$metrics_port/proxy/metrics"; }

# Sum of the resource requested by pods that are bound to the node and not finished.
in_use() {
    k get pods --all-namespaces --field-selector "spec.nodeName=$node,status.phase!=Succeeded,status.phase!=Failed" \
        -o "jsonpath={range .items[*]}{range .spec.containers[*]}{.resources.requests.$resource_key}{\"\\n\"}{end}{end}" |
        awk '$1 ~ /^[0-9]+$/ {s += $1} END {print s + 0}'
}

# wait_until DESCRIPTION SECONDS COMMAND...: polls every $poll s until COMMAND succeeds.
wait_until() {
    local what=$1 limit=$2 start=$SECONDS
    shift 2
    until "$@"; do
        if [ $((SECONDS - start)) -ge "$limit" ]; then
            echo "   timed out after ${limit}s waiting for $what" >&2
            return 1
        fi
        sleep "$poll"
    done
}

cleanup() {
    local status=$?
    trap - EXIT
    if [ "$keep" = 1 ]; then
        log "--keep: leaving pods labelled edgegpu-e2e/run=$run_id and the Job in place"
    else
        log "cleaning up"
        k delete pods -n "$namespace" -l "edgegpu-e2e/run=$run_id" --ignore-not-found --wait=false >/dev/null 2>&1 || true
        if [ -n "$job_name" ]; then
            k delete job -n "$job_namespace" "$job_name" --ignore-not-found --cascade=foreground --wait=false \
                >/dev/null 2>&1 || true
        fi
    fi
    if [ -n "$config_map" ]; then
        log "removing ConfigMap $config_map_namespace/$config_map and restarting $plugin_ds"
        k delete configmap -n "$config_map_namespace" "$config_map" --ignore-not-found >/dev/null 2>&1 || true
        [ -z "$plugin_ds" ] || k -n kube-system rollout restart "daemonset/$plugin_ds" >/dev/null 2>&1 || true
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- 0. the cluster and the node --------------------------------------------------------------
k version >/dev/null 2>&1 || abort "cannot reach the cluster with '$kubectl_cmd' (set --kubectl or KUBECONFIG)"
if [ -z "$node" ]; then
    mapfile -t nodes < <(k get nodes -o name | sed 's|^node/||')
    if [ "${#nodes[@]}" -eq 1 ]; then
        node=${nodes[0]}
    else
        abort "the cluster has ${#nodes[@]} nodes: pick one with --node (${nodes[*]})"
    fi
fi
k get node "$node" >/dev/null || abort "no node $node"
log "node $node ($(k get node "$node" -o 'jsonpath={.status.nodeInfo.architecture}, kubelet {.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}'))"

# --- 1. deploy ----------------------------------------------------------------------------------
if [ "$apply" = 1 ]; then
    log "kubectl apply -f deploy/"
    k apply -f "$repo/deploy/"
fi
plugin_pod_on_node() {
    k get pods -n kube-system -l app.kubernetes.io/name=edgegpu-device-plugin \
        --field-selector "spec.nodeName=$node" -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null
}
plugin_pod_present() { [ -n "$(plugin_pod_on_node)" ]; }
wait_until "a device plugin pod on $node" "$timeout" plugin_pod_present ||
    abort "no device plugin pod was scheduled on $node: check its labels (docs/deploy.md, Node labels)"
plugin_pod=$(plugin_pod_on_node)
plugin_ds=edgegpu-device-plugin-$(k get pod -n kube-system "$plugin_pod" -o 'jsonpath={.metadata.labels.app\.kubernetes\.io/component}')
log "device plugin: kube-system/$plugin_pod (daemonset/$plugin_ds)"

if [ -n "$config_file" ]; then
    config_map=$(k create --dry-run=client -f "$config_file" -o 'jsonpath={.metadata.name}')
    config_map_namespace=$(k create --dry-run=client -f "$config_file" -o 'jsonpath={.metadata.namespace}')
    config_map_namespace=${config_map_namespace:-default}
    if k get configmap -n "$config_map_namespace" "$config_map" >/dev/null 2>&1; then
        existing=$config_map
        config_map="" # not ours: leave it alone when cleaning up
        abort "ConfigMap $config_map_namespace/$existing already exists; delete it first (this script removes what it applies)"
    fi
    log "applying $config_file and restarting daemonset/$plugin_ds"
    k apply -f "$config_file"
    k -n kube-system rollout restart "daemonset/$plugin_ds"
    k -n kube-system rollout status "daemonset/$plugin_ds" --timeout="${timeout}s"
fi

# --- 2. the node advertises the resource -------------------------------------------------------
advertised() {
    local count
    count=$(allocatable)
    if [ -n "$expect" ]; then [ "$count" = "$expect" ]; else is_count "$count" && [ "$count" -gt 0 ]; fi
}
if wait_until "$node to advertise $resource${expect:+ = $expect}" "$timeout" advertised; then
    total=$(allocatable)
    pass "node $node advertises $resource: $total (capacity $(k get node "$node" -o "jsonpath={.status.capacity.$resource_key}"))"
else
    echo "   device plugin log (last 30 lines):" >&2
    k logs -n kube-system "$plugin_pod" --tail=30 >&2 || true
    abort "node $node does not advertise $resource${expect:+ = $expect} (allocatable: '$(allocatable)')"
fi

# --- 2b. node labels, without kubectl label ----------------------------------------------------
labelled() { [ -n "$(node_label edgegpu.io/gpu)" ] && [ "$(node_label nvidia.com/gpu.present)" = true ]; }
if wait_until "the labels of $node" "$timeout" labelled; then
    pass "labels: $node has edgegpu.io/gpu=$(node_label edgegpu.io/gpu), nvidia.com/gpu.product=$(node_label nvidia.com/gpu.product), nvidia.com/gpu.count=$(node_label nvidia.com/gpu.count)"
else
    fail "labels: $node lacks edgegpu.io/gpu or nvidia.com/gpu.present=true (edgegpu.io/gpu='$(node_label edgegpu.io/gpu)'; see kubectl -n kube-system logs $plugin_pod -c labels, docs/labels.md)"
fi

# --- 2c. metrics --------------------------------------------------------------------------------
gpu_series() { grep -c '^DCGM_FI_DEV_' <<<"$1" || true; }
if [ "$check_metrics" = 1 ]; then
    metrics_text=$(metrics 2>&1 || true)
    if grep -q "^edgegpu_registered{resource=\"$resource\"} 1\$" <<<"$metrics_text"; then
        pass "metrics: $plugin_pod serves /metrics on :$metrics_port ($(gpu_series "$metrics_text") GPU series: $(grep -o '^DCGM_FI_DEV_[A-Z_]*' <<<"$metrics_text" | sort -u | tr '\n' ' '))"
    else
        fail "metrics: no 'edgegpu_registered{resource=\"$resource\"} 1' in $plugin_pod's /metrics on :$metrics_port: $(head -c 300 <<<"$metrics_text")"
    fi
fi

# --- 3. devicequery ------------------------------------------------------------------------------
if [ ! -f "$job_file" ]; then
    fail "devicequery: $job_file is missing"
else
    job_name=$(k create --dry-run=client -f "$job_file" -o 'jsonpath={.metadata.name}')
    job_namespace=$(k create --dry-run=client -f "$job_file" -o 'jsonpath={.metadata.namespace}')
    job_namespace=${job_namespace:-default}
    k delete job -n "$job_namespace" "$job_name" --ignore-not-found --wait=true >/dev/null
    log "running Job $job_namespace/$job_name on $node"
    # Pin it to the node under test, and give it the runtime class if one was asked for.
    patch="{\"spec\":{\"template\":{\"spec\":{\"nodeSelector\":{\"kubernetes.io/hostname\":\"$node\"}${runtime_class:+,\"runtimeClassName\":\"$runtime_class\"}}}}}"
    k patch --local --type merge -f "$job_file" -p "$patch" -o yaml | k apply -f -
    job_finished() {
        local conditions
        conditions=$(k get job -n "$job_namespace" "$job_name" -o 'jsonpath={.status.conditions[?(@.status=="True")].type}')
        [[ $conditions == *Complete* || $conditions == *Failed* ]]
    }
    wait_until "Job $job_name to finish" "$timeout" job_finished || true
    echo "----- kubectl logs job/$job_name -----"
    job_log=$(k logs -n "$job_namespace" "job/$job_name" 2>&1 || true)
    printf '%s\n' "$job_log"
    echo "--------------------------------------"
    if grep -q 'Result = PASS' <<<"$job_log"; then
        pass "devicequery: Result = PASS"
    else
        fail "devicequery: no 'Result = PASS' in the Job's log (Job status: $(k get job -n "$job_namespace" "$job_name" \
            -o 'jsonpath={.status.conditions[*].type}' 2>/dev/null))"
    fi
    # Free its GPU before the contention check counts free GPUs.
    k delete job -n "$job_namespace" "$job_name" --ignore-not-found --cascade=foreground --wait=true >/dev/null
fi

# --- 4. contention ------------------------------------------------------------------------------
pod_manifest() { # NAME SECONDS
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $namespace
  labels: {app.kubernetes.io/part-of: edgegpu-e2e, edgegpu-e2e/run: $run_id}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $node}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
${runtime_class:+  runtimeClassName: $runtime_class}
  containers:
    - name: hold
      image: $image
      command: [sleep, "$2"]
      resources: {limits: {$resource: 1}}
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF
}
phase() { k get pod -n "$namespace" "$1" -o 'jsonpath={.status.phase}' 2>/dev/null; }
unschedulable_reason() {
    k get pod -n "$namespace" "$1" \
        -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}: {.status.conditions[?(@.type=="PodScheduled")].message}'
}
all_running() {
    local pod
    for pod in "$@"; do [ "$(phase "$pod")" = Running ] || return 1; done
}
is_unschedulable() {
    [[ $(unschedulable_reason "$1") == Unschedulable:*"Insufficient $resource"* ]]
}
ran() { [[ $(phase "$1") == Running || $(phase "$1") == Succeeded ]]; }
any_holder_ended() {
    local pod
    for pod in "$@"; do [[ $(phase "$pod") == Succeeded || $(phase "$pod") == Failed ]] && return 0; done
    return 1
}

free=$(( $(allocatable) - $(in_use) ))
if [ "$free" -lt 1 ]; then
    fail "contention: no free $resource on $node (allocatable $(allocatable), in use $(in_use))"
else
    holders=$free
    if [ "$holders" -gt "$max_holders" ]; then
        log "contention: $free free is more than $max_holders pods: checking that 2 run at once, not exhaustion"
        holders=2
    fi
    names=()
    for i in $(seq 0 $((holders - 1))); do names+=("edgegpu-e2e-hold-$i"); done
    log "contention: $free free $resource on $node; starting ${#names[@]} pod(s) that hold one for ${hold}s"
    for pod in "${names[@]}"; do pod_manifest "$pod" "$hold" | k apply -f - >/dev/null; done
    if wait_until "${#names[@]} holder pod(s) to run" "$timeout" all_running "${names[@]}"; then
        pass "contention: ${#names[@]} pod(s) each with 1 $resource running at the same time (${names[*]})"
        if [ "$check_metrics" = 1 ]; then
            metrics_text=$(metrics 2>&1 || true)
            if [ "$(gpu_series "$metrics_text")" = 0 ]; then
                log "metrics: no GPU series on this node to attribute (docs/metrics.md lists what each board measures)"
            elif grep -q "^DCGM_FI_DEV_.*pod=\"${names[0]}\",namespace=\"$namespace\"" <<<"$metrics_text"; then
                pass "metrics: the GPU series name the pod holding the GPU (pod=\"${names[0]}\")"
            else
                fail "metrics: no GPU series with pod=\"${names[0]}\" while it holds a GPU (is /var/lib/kubelet/pod-resources mounted?)"
            fi
        fi
    else
        fail "contention: the holder pods did not all run: $(for p in "${names[@]}"; do printf '%s=%s ' "$p" "$(phase "$p")"; done)"
    fi
    if [ "$holders" = "$free" ]; then
        waiter=edgegpu-e2e-wait
        log "contention: starting $waiter, which needs one more $resource"
        pod_manifest "$waiter" 1 | k apply -f - >/dev/null
        waiter_decided() { is_unschedulable "$waiter" || ran "$waiter"; }
        if ! wait_until "$waiter to be scheduled or held back" "$timeout" waiter_decided; then
            fail "contention: $waiter was neither run nor reported unschedulable (phase $(phase "$waiter"))"
        elif ! is_unschedulable "$waiter"; then
            if any_holder_ended "${names[@]}"; then
                fail "contention: a holder ended before $waiter was seen waiting: raise --hold (now ${hold}s)"
            else
                fail "contention: $waiter was not held back: it runs while every holder still runs"
            fi
        else
            pass "contention: $waiter Pending while the others hold every $resource ($(unschedulable_reason "$waiter"))"
            if wait_until "$waiter to run after a holder ended" $((hold + timeout)) ran "$waiter"; then
                if any_holder_ended "${names[@]}"; then
                    pass "contention: $waiter ran once a holder had ended"
                else
                    fail "contention: $waiter ran while every holder was still running"
                fi
            else
                fail "contention: $waiter never ran after the holders ended"
            fi
        fi
    fi
    k get pods -n "$namespace" -l "edgegpu-e2e/run=$run_id" -o wide || true
fi

# --- 5. GPU memory limits (--limits) -------------------------------------------------------------
# A devicequery pod with $limits_count of the resource, run as the devicequery Job runs it
# (non-root, the video group for the Jetson GPU nodes): dq_pod_manifest NAME ARGS... Every one
# runs as the same uid: an MPS server serves one user at a time.
dq_pod_manifest() {
    local name=$1 arg args=""
    shift
    for arg in "$@"; do args+="${args:+, }\"$arg\""; done
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: $namespace
  labels: {app.kubernetes.io/part-of: edgegpu-e2e, edgegpu-e2e/run: $run_id}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  nodeSelector: {kubernetes.io/hostname: $node}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
${runtime_class:+  runtimeClassName: $runtime_class}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    supplementalGroups: [44]
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: devicequery
      image: $devicequery_image
      args: [$args]
      resources: {limits: {$resource: $limits_count}}
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
EOF
}
ended() { [[ $(phase "$1") == Succeeded || $(phase "$1") == Failed ]]; }
pod_log() { k logs -n "$namespace" "$1" 2>&1 || true; }
# The line that explains a devicequery failure, else its last line.
verdict_line() { grep -m1 '^devicequery: ' <<<"$1" || tail -n1 <<<"$1"; }
is_holding() { grep -q '^ *Holding for:' <<<"$(pod_log "$1")"; }
holding_or_ended() { is_holding "$1" || ended "$1"; }

limits_check() {
    local check=edgegpu-e2e-limits-check holder=edgegpu-e2e-limits-hold over=edgegpu-e2e-limits-over
    local companion free check_log bytes limit below above over_log
    if [ -z "$devicequery_image" ]; then
        devicequery_image=$(k create --dry-run=client -f "$job_file" \
            -o 'jsonpath={.spec.template.spec.containers[0].image}' 2>/dev/null || true)
    fi
    if [ -z "$devicequery_image" ]; then
        fail "limits: no devicequery image: give --devicequery-image"
        return
    fi
    companion=$(k get pods -n kube-system -l app.kubernetes.io/name=edgegpu-mps-control-daemon \
        --field-selector "spec.nodeName=$node" -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null || true)
    if [ -n "$companion" ]; then
        log "limits: MPS companion kube-system/$companion runs on $node"
    else
        log "limits: no MPS companion on $node (the chart's mps.enabled): limits can only be accounted there"
    fi
    # The contention pods still hold devices; their check is done.
    k delete pods -n "$namespace" -l "edgegpu-e2e/run=$run_id" --ignore-not-found --wait=true >/dev/null 2>&1 || true
    free=$(($(allocatable) - $(in_use)))
    if [ "$free" -lt $((2 * limits_count)) ]; then
        fail "limits: two pods of $limits_count $resource need $((2 * limits_count)) free, $node has $free"
        return
    fi

    log "limits: $check runs devicequery --check-limits with $limits_count $resource ($devicequery_image)"
    dq_pod_manifest "$check" --check-limits | k apply -f - >/dev/null
    wait_until "$check to finish" "$timeout" ended "$check" || true
    check_log=$(pod_log "$check")
    echo "----- kubectl logs $check -----"
    printf '%s\n' "$check_log"
    echo "--------------------------------------"
    if grep -q '^Result = PASS' <<<"$check_log"; then
        pass "limits: --check-limits in $check: the limit held (Result = PASS)"
    else
        fail "limits: --check-limits in $check: $(verdict_line "$check_log")"
    fi
    # "  Memory limit checked:   2048 MiB (2147483648 bytes)": the limit the probe found.
    bytes=$(sed -n 's/^ *Memory limit checked: .*(\([0-9][0-9]*\) bytes).*/\1/p' <<<"$check_log" | head -n1)
    if [ -z "$bytes" ]; then
        fail "limits: $check was given no GPU memory limit (is $resource shared with sharing.mps or sharing.gpuMemory?)"
        return
    fi
    limit=$((bytes / 1048576))
    # A quarter of it: under MPS the client's own context (~150-500 MiB on an H100) counts too.
    below=$((limit / 4 > 0 ? limit / 4 : 1))
    above=$((limit + (limit / 4 > 64 ? limit / 4 : 64)))

    log "limits: $holder allocates $below MiB of its $limit MiB and holds it for ${limits_hold}s"
    dq_pod_manifest "$holder" --allocate-mib "$below" --hold-seconds "$limits_hold" | k apply -f - >/dev/null
    wait_until "$holder to hold its memory" "$timeout" holding_or_ended "$holder" || true
    if ! is_holding "$holder"; then
        fail "limits: $holder could not take $below MiB under its $limit MiB limit: $(verdict_line "$(pod_log "$holder")")"
        return
    fi
    pass "limits: $holder holds $below MiB under its $limit MiB limit"

    log "limits: $over asks for $above MiB, more than its $limit MiB limit, while $holder holds"
    dq_pod_manifest "$over" --allocate-mib "$above" | k apply -f - >/dev/null
    wait_until "$over to finish" "$timeout" ended "$over" || true
    over_log=$(pod_log "$over")
    if [ "$(phase "$over")" = Failed ] && grep -q 'CUDA_ERROR_OUT_OF_MEMORY' <<<"$over_log"; then
        pass "limits: $over was refused $above MiB beyond its $limit MiB limit (CUDA_ERROR_OUT_OF_MEMORY)"
    elif [ "$(phase "$over")" = Succeeded ]; then
        fail "limits: $over allocated $above MiB, more than its $limit MiB limit: the limit is not enforced"
    else
        fail "limits: $over did not fail with CUDA_ERROR_OUT_OF_MEMORY (phase $(phase "$over")): $(verdict_line "$over_log")"
    fi
    case $(phase "$holder") in
        Running) pass "limits: $holder kept running with its $below MiB while $over was refused" ;;
        Succeeded) fail "limits: $holder ended before $over was decided: raise --limits-hold (now ${limits_hold}s)" ;;
        *) fail "limits: $holder did not keep running (phase $(phase "$holder")): $(verdict_line "$(pod_log "$holder")")" ;;
    esac
    wait_until "$holder to finish" $((limits_hold + timeout)) ended "$holder" || true
    if [ "$(phase "$holder")" = Succeeded ] && grep -q '^Result = PASS' <<<"$(pod_log "$holder")"; then
        pass "limits: $holder held its memory for ${limits_hold}s and freed it (Result = PASS)"
    else
        fail "limits: $holder did not end with Result = PASS (phase $(phase "$holder")): $(verdict_line "$(pod_log "$holder")")"
    fi
    k get pods -n "$namespace" -l "edgegpu-e2e/run=$run_id" -o wide || true
}
[ "$check_limits" = 0 ] || limits_check

finish
