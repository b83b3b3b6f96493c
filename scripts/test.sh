#!/usr/bin/env bash
# All the checks, as CI runs them (.ci/run calls exactly this). Installs what is missing first.
#   1. formatting, module import cycles and the crate graph (no program imports another),
#   2. clippy (deny warnings; inside the x86_64 test build: the workspace is compiled once),
#   3. the test suite (x86_64), every benchmark once in smoke mode
#   (a few iterations, figures printed, nothing asserted on time), and the docs checked against
#   the programs the tests built (scripts/check-docs.py),
#   4. release cross-builds (glibc 2.17 / static checks, size table), and the container images
#      built from them (sizes, smoke runs, reproducibility), then the CRI end-to-end test
#      (e2e/: real containerd releases run devicequery pods from dist/'s image),
#   5. Debian packages, offline bundles and SBOMs from them (scripts/build-packages.sh: lintian,
#      dpkg install/upgrade/remove/purge in a debootstrap root, k3s's air-gap import in containerd),
#   6. the test suite for aarch64 under qemu-user, built with Rust 1.75 (the MSRV, the compiler
#      Yocto 5.0 builds the layer with): that build is the MSRV check of the libraries,
#      programs and tests,
#   7. manifest and Yocto layer checks.
# Four lanes run side by side on CI's two cores (docs/development.md "CI"): the x86_64 lane
# (1-5) in the foreground; from the moment the x86_64 tests are built, when much of the CPU
# waits with the tests, the release lane (4's cross-builds, which the images and the aarch64
# lane's node-setup tests wait for), the aarch64 lane (6) and the manifest and layer lane (7,
# Python). Builds run at a lower CPU priority than tests and checks, so nothing that waits on a
# timeout (our tests, deploy/lint's simulated node) is starved by a compiler. A lane's output
# is printed when the run joins it; the run fails if any lane failed.
# Usage: scripts/test.sh [--skip-setup]
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
"" | --skip-setup) ;;
-h | --help)
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
    exit 0
    ;;
*)
    echo "scripts/test.sh: unknown option '$1' (see --help)" >&2
    exit 2
    ;;
esac
[ "${1:-}" = --skip-setup ] || scripts/setup.sh

export PATH="$PWD/.tools/venv/bin:$PATH"
export CARGO_TERM_COLOR=never
# Tests that check our output with real tools (systemd-analyze, containerd, dockerd, Go's
# text/template from .tools/venv) must not silently skip here.
export EDGEGPU_REQUIRE_REAL_TOOLS=1
MSRV=1.75
AARCH64_SYSROOT=/usr/aarch64-linux-gnu
# The aarch64 lane's own build folder: its compiler (1.75) shares no artifact with the
# x86_64 lane's, and cargo holds a build folder's lock for a whole `cargo test`, so one
# folder would make the lanes wait for each other.
AARCH64_TARGET_DIR=target/msrv-aarch64
LANES=target/ci-lanes
rm -rf "$LANES" && mkdir -p "$LANES"

# Wall-clock seconds (bash's SECONDS restarts in the lanes' subshells).
started=$(date +%s)
step() { printf '\n==> [%4ds] %s\n' $(($(date +%s) - started)) "$*"; }
# Builds yield the CPU to tests and checks.
low() { nice -n 10 "$@"; }

# --- lane: manifests and the Yocto layer (Python, no cargo) ------------------------------------
manifest_lane() {
    step "manifests: yamllint + schema validation"
    scripts/validate-manifests.sh
    step "Yocto layer checks"
    scripts/check-yocto.sh
}

# --- lane: aarch64 ------------------------------------------------------------------------------
aarch64_lane() {
    # A test executable runs with a time limit and is run once more if qemu-user deadlocks it
    # (scripts/qemu-test-runner.sh --help); the programs the tests start run under plain qemu.
    local runner=$PWD/scripts/qemu-test-runner.sh
    export AARCH64_SYSROOT
    export CARGO_TARGET_DIR=$AARCH64_TARGET_DIR
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    export EDGEGPU_TEST_RUNNER="qemu-aarch64-static -L $AARCH64_SYSROOT"
    # Rust 1.75's own rustc, not the x86_64 lane's clippy; a folder built once, from scratch:
    # no incremental data, no line tables (panics still name file and line).
    unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
    export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=false
    # Built below the release lane's priority: the x86_64 lane waits for dist/, this lane has
    # time to spare.
    # The libraries, programs and tests: what Yocto builds and what runs here. Benchmarks and
    # examples run nowhere in this lane; the x86_64 lane builds and runs them (smoke mode), and
    # leaving them out here takes about 70 s of CPU off the lane that ends the run.
    step "cargo +$MSRV test --workspace --lib --bins --tests --no-run (aarch64; the MSRV check)"
    nice -n 15 cargo "+$MSRV" test --workspace --lib --bins --tests --locked --target aarch64-unknown-linux-gnu \
        --no-run --message-format=json-render-diagnostics >"$LANES/aarch64-artifacts.json"
    # The test executables run as `cargo test` runs them (in their package's folder, through
    # the runner), straight from the build above: a second cargo command that selects fewer
    # packages resolves other features and compiles part of the workspace again.
    # node-setup's tests start its binary a few thousand times. Under qemu-user the static
    # release binary the release lane builds for dist/ starts in a fifth of the debug binary's
    # time, so they run against it (EDGEGPU_NODE_SETUP_BINARY; the tests refuse a binary of
    # another commit). They run beside the other packages' tests: by now the lane is the last
    # one running, and one test executable under qemu-user keeps about 1.2 of CI's 2 cores
    # busy. A notch below them in priority, as the other tests wait on timeouts
    # (docs/development.md "CI").
    step "the test suite (aarch64 under qemu-user); node-setup's beside it, against dist/'s static binary"
    local node_setup_log=$LANES/aarch64-node-setup.log rc=0
    (
        renice -n 5 -p "$BASHPID" >/dev/null
        wait_for_release || exit 1
        EDGEGPU_NODE_SETUP_BINARY="$PWD/dist/edgegpu-node-setup-aarch64-unknown-linux-musl" \
            run_aarch64_tests node-setup "$runner"
    ) >"$node_setup_log" 2>&1 &
    local node_setup_pid=$!
    run_aarch64_tests other "$runner" || rc=1
    wait "$node_setup_pid" || rc=1
    step "node-setup's tests (aarch64), which ran beside the others:"
    cat "$node_setup_log"
    return "$rc"
}
# Runs the aarch64 lane's test executables of node-setup (`node-setup`) or of every other
# package (`other`) with RUNNER; every one runs, and the function fails if one failed.
run_aarch64_tests() { # WHICH RUNNER
    local dir exe count=0 failures=()
    while read -r dir exe; do
        count=$((count + 1))
        echo "     Running $exe"
        (cd "$dir" && "$2" "$exe") || failures+=("$exe")
    done < <(aarch64_test_executables "$LANES/aarch64-artifacts.json" "$1")
    # Fewer than node-setup's lib, bin and integration tests: the build's messages were not read.
    [ "$count" -ge 3 ] || { echo "only $count test executables found for '$1'" >&2; return 1; }
    [ ${#failures[@]} -eq 0 ] || { printf 'FAILED: %s\n' "${failures[@]}" >&2; return 1; }
}
# "PACKAGE_DIR EXECUTABLE" for each test executable (lib, bin and integration tests; no
# benchmark or example) in cargo's JSON build messages, of node-setup or of the other packages.
aarch64_test_executables() { # JSON WHICH
    python3 - "$1" "$2" "$PWD" <<'PY'
import json, os, sys
messages, which, workspace = sys.argv[1:]
for line in open(messages):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    # `cargo test` builds benchmarks and examples here but runs neither.
    if {"bench", "example"} & set(m["target"]["kind"]):
        continue
    package = os.path.dirname(m["target"]["src_path"])
    while not os.path.exists(os.path.join(package, "Cargo.toml")):
        package = os.path.dirname(package)
    if (os.path.relpath(package, workspace) == "node-setup") == (which == "node-setup"):
        print(package, m["executable"])
PY
}

# --- lane: release cross-builds (dist/) ---------------------------------------------------------
# Its own lane, so it builds while the x86_64 tests run; the images need it, and so does the
# aarch64 lane's node-setup run. It writes its exit status to $RELEASE_STATUS when it ends.
RELEASE_STATUS=$LANES/release.status
release_lane() {
    local rc=0
    step "release cross-builds"
    (unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS && low scripts/build-release.sh dist) || rc=$?
    echo "$rc" >"$RELEASE_STATUS"
    return "$rc"
}
wait_for_release() {
    while [ ! -s "$RELEASE_STATUS" ]; do sleep 2; done
    [ "$(cat "$RELEASE_STATUS")" = 0 ] || { echo "the release lane failed" >&2; return 1; }
}

lane_pids=() lane_names=()
start_lane() { # NAME FUNCTION
    # Its own process group (job control on for this one job), so that it can be stopped whole.
    set -m
    ("$2") >"$LANES/$1.log" 2>&1 &
    set +m
    lane_pids+=($!) lane_names+=("$1")
    step "lane '$1' started (its output follows when it ends)"
}
join_lanes() {
    local i failed=0
    trap - EXIT
    for i in "${!lane_pids[@]}"; do
        if wait "${lane_pids[$i]}"; then
            step "lane '${lane_names[$i]}' passed; its output:"
        else
            step "lane '${lane_names[$i]}' FAILED; its output:"
            failed=1
        fi
        cat "$LANES/${lane_names[$i]}.log"
    done
    return $failed
}
# A failing foreground step ends the run: stop the lanes with it, then show what they printed.
stop_lanes() {
    local pid
    for pid in "${lane_pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
    tail -n 40 "$LANES"/*.log 2>/dev/null || true
}
trap stop_lanes EXIT

step "cargo fmt --check"
cargo fmt --all -- --check

step "no import cycles between a crate's modules or its module folders (scripts/check-module-cycles.py)"
python3 scripts/check-module-cycles.py --self-test
python3 scripts/check-module-cycles.py

step "no program crate imports another (scripts/check-crate-graph.py)"
python3 scripts/check-crate-graph.py --self-test
python3 scripts/check-crate-graph.py

# Clippy runs inside the build of the tests: clippy-driver is the rustc of the workspace's own
# crates (cargo's RUSTC_WORKSPACE_WRAPPER, the mechanism `cargo clippy` itself uses) with
# `-D warnings`, so its lints fail the build and the workspace is compiled once instead of
# checked once and built again (docs/development.md "CI"). Every test-profile build of this
# lane keeps it (benchmarks are linted when the smoke step builds them); the release lane
# does not (clippy-driver turns MIR optimisations off).
export RUSTC_WORKSPACE_WRAPPER=clippy-driver
export CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

step "cargo test --workspace --no-run (x86_64), linted by clippy -D warnings"
cargo test --workspace --locked --no-run

start_lane release release_lane
start_lane aarch64 aarch64_lane
start_lane manifests manifest_lane

step "cargo test --workspace (x86_64)"
cargo test --workspace --locked

# The benchmarks run as test-profile programs next to what the step above built (only the bench
# targets themselves are compiled), each with a handful of iterations: they cannot rot, and no
# figure is judged here (scripts/bench.sh measures).
step "benchmarks in smoke mode (EDGEGPU_BENCH_SMOKE=1: a few iterations each, figures printed)"
EDGEGPU_BENCH_SMOKE=1 cargo test --workspace --locked --bench '*'

step "docs in step with the code: flags, programs, Job names, figures (scripts/check-docs.py)"
python3 scripts/check-docs.py

step "waiting for the release lane (dist/)"
wait_for_release

step "container images from dist/ (buildah, multi-arch OCI archives, smoke-run, built twice)"
scripts/build-images.sh --smoke --reproducible dist

# Needs dist/ (the release binaries and devicequery's image), hence after the images. x86_64
# only: the fake driver libraries are x86_64 and containerd cannot run under qemu-user (the
# aarch64 run skips it as `#[ignore]`d). `--workspace`: the features cargo unifies over the
# whole workspace, so the test reuses what the x86_64 step built instead of rebuilding tokio & co.
step "CRI end to end: containerd 1.6/1.7/2.1 run devicequery pods as the kubelet would (e2e/)"
EDGEGPU_E2E_DIST=$PWD/dist cargo test --workspace --locked --test cri_e2e -- --include-ignored --nocapture

step "packages, bundle, SBOM: lintian, dpkg cycle in a debootstrap root, k3s air-gap import"
scripts/build-packages.sh dist

step "waiting for the other lanes"
join_lanes
step "all checks passed"
