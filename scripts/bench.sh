#!/usr/bin/env bash
# Runs every benchmark and prints its figures (targets are named next to each figure).
# Benchmarks measure; they never fail on a slow machine. scripts/test.sh runs each of them only
# in smoke mode (EDGEGPU_BENCH_SMOKE=1: a few iterations, a debug build), so that they keep
# running; figures worth quoting come from here.
# Usage: scripts/bench.sh [cargo bench args...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --workspace --locked "$@"
