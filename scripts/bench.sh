#!/usr/bin/env bash
# Runs every benchmark and prints its figures (targets are named next to each figure).
# Benchmarks measure; they never fail on a slow machine. Not part of scripts/test.sh.
# Usage: scripts/bench.sh [cargo bench args...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --workspace --locked "$@"
