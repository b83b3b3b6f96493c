#!/usr/bin/env bash
# Runs every benchmark and prints its figures (targets are named next to each figure).
# Benchmarks measure; they never fail on a slow machine. scripts/test.sh runs each of them only
# in smoke mode (EDGEGPU_BENCH_SMOKE=1: a few iterations, a debug build), so that they keep
# running; figures worth quoting come from here.
# Usage: scripts/bench.sh [-p CRATE] [--bench NAME] [other cargo bench args...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/args.sh
# Every other option is cargo bench's: it refuses what it does not know here, before anything
# is built for the run (the benchmarks' build is the one the run below uses).
case "${1:-}" in -h | --help) script_usage "$0"; exit 0 ;; esac
if ! built=$(cargo bench --no-run --workspace --locked "$@" 2>&1); then
    printf '%s\n' "$built" >&2
    exit 2
fi
# The programs' footprints are measured on the release build users run: the binary `cargo bench`
# builds carries the test doubles' features too (cargo unifies them). A hard link keeps the
# page cache the linker left, as a copy would not.
# The programs are one multi-call binary; the benchmarks run it through links named after
# each program (edgegpu_testkit::process::bench_program).
cargo build --release --locked -p edgegpu --bin edgegpu
measured=target/bench-plugin
mkdir -p "$measured"
ln -f target/release/edgegpu "$measured/edgegpu"
export EDGEGPU_BENCH_BINARY="${EDGEGPU_BENCH_BINARY:-$PWD/$measured/edgegpu}"
cargo bench --workspace --locked "$@"
