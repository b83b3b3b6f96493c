#!/usr/bin/env bash
# All the checks, as CI runs them (.ci/run calls exactly this). Installs what is missing first.
#   1. formatting, module import cycles and the crate graph (no program imports another), 2. clippy (deny warnings), 3. the test suite
#   (x86_64), every benchmark once in smoke mode (a few iterations, figures printed, nothing
#   asserted on time), and the docs
#   checked against the programs the tests built (scripts/check-docs.py),
#   4. MSRV: cargo +1.75 check --locked, 5. manifest and Yocto layer checks,
#   6. release cross-builds (glibc 2.17 / static checks, size table), and the container images
#      built from them (sizes, smoke runs, reproducibility), then the CRI end-to-end test
#      (e2e/: real containerd releases run devicequery pods from dist/'s image),
#   7. Debian packages, offline bundles and SBOMs from them (scripts/build-packages.sh: lintian,
#      dpkg install/upgrade/remove/purge in a debootstrap root, k3s's air-gap import in containerd),
#   8. the test suite for aarch64 under qemu-user.
# Usage: scripts/test.sh [--skip-setup]
set -euo pipefail
cd "$(dirname "$0")/.."

[ "${1:-}" = --skip-setup ] || scripts/setup.sh

export PATH="$PWD/.tools/venv/bin:$PATH"
export CARGO_TERM_COLOR=never
# Tests that check our output with real tools (systemd-analyze, containerd, dockerd, Go's
# text/template from .tools/venv) must not silently skip here.
export EDGEGPU_REQUIRE_REAL_TOOLS=1
MSRV=1.75
AARCH64_SYSROOT=/usr/aarch64-linux-gnu

started=$SECONDS
step() { printf '\n==> [%4ds] %s\n' $((SECONDS - started)) "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "no import cycles between a crate's modules (scripts/check-module-cycles.py)"
python3 scripts/check-module-cycles.py --self-test
python3 scripts/check-module-cycles.py

step "no program crate imports another (scripts/check-crate-graph.py)"
python3 scripts/check-crate-graph.py --self-test
python3 scripts/check-crate-graph.py

step "cargo clippy --workspace --all-targets -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test --workspace (x86_64)"
cargo test --workspace --locked

# The benchmarks run as test-profile programs next to what the step above built (only the bench
# targets themselves are compiled), each with a handful of iterations: they cannot rot, and no
# figure is judged here (scripts/bench.sh measures).
step "benchmarks in smoke mode (EDGEGPU_BENCH_SMOKE=1: a few iterations each, figures printed)"
EDGEGPU_BENCH_SMOKE=1 cargo test --workspace --locked --bench '*'

step "docs in step with the code: flags, programs, Job names, figures (scripts/check-docs.py)"
python3 scripts/check-docs.py

step "cargo +$MSRV check --workspace --all-targets --locked"
cargo "+$MSRV" check --workspace --all-targets --locked

step "manifests: yamllint + schema validation"
scripts/validate-manifests.sh

step "Yocto layer checks"
scripts/check-yocto.sh

step "release cross-builds"
scripts/build-release.sh dist

step "container images from dist/ (buildah, multi-arch OCI archives, smoke-run, built twice)"
scripts/build-images.sh --smoke --reproducible dist

# Needs dist/ (the release binaries and devicequery's image), hence after the images. x86_64
# only: the fake driver libraries are x86_64 and containerd cannot run under qemu-user (the
# aarch64 run below skips it as `#[ignore]`d).
step "CRI end to end: containerd 1.6/1.7/2.1 run devicequery pods as the kubelet would (e2e/)"
EDGEGPU_E2E_DIST=$PWD/dist cargo test -p edgegpu-e2e --test cri_e2e --locked -- --include-ignored --nocapture

step "packages, bundle, SBOM: lintian, dpkg cycle in a debootstrap root, k3s air-gap import"
scripts/build-packages.sh dist

step "cargo test --workspace (aarch64 under qemu-user)"
runner="qemu-aarch64-static -L $AARCH64_SYSROOT"
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" \
CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
EDGEGPU_TEST_RUNNER="$runner" \
    cargo test --workspace --locked --target aarch64-unknown-linux-gnu

step "all checks passed"
