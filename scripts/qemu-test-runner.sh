#!/usr/bin/env bash
# Runs one aarch64 test executable under qemu-user, with a time limit: cargo's runner in
# scripts/test.sh's aarch64 lane. qemu-user 7.2 (Debian 12's, the one CI installs) can deadlock
# the forked child of a multi-threaded guest before it execs: seen once in CI, a child of
# std::process::Command stuck in a futex inside qemu, the test waiting on it for ever and CI
# with it. A run past the limit is killed with everything it started and run once more, with
# a line that says so; a second run past the limit fails. Our tests never take long: under
# qemu the slowest test executable takes about 110 s on CI's two cores.
# Usage: scripts/qemu-test-runner.sh EXECUTABLE [ARGS...]
#   QEMU_TEST_LIMIT   seconds per run (default 600)
#   AARCH64_SYSROOT   the aarch64 glibc root qemu loads libraries from (default /usr/aarch64-linux-gnu)
set -uo pipefail

case "${1:-}" in
-h | --help)
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
    exit 0
    ;;
"" | -*)
    echo "scripts/qemu-test-runner.sh: expected a test executable, got '${1:-}' (see --help)" >&2
    exit 2
    ;;
esac
limit=${QEMU_TEST_LIMIT:-600}
sysroot=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}

for attempt in 1 2; do
    # timeout signals the executable's whole process group: every child it started goes too.
    timeout --kill-after=10 "$limit" qemu-aarch64-static -L "$sysroot" "$@"
    rc=$?
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || exit "$rc"
    echo "qemu-test-runner: $(basename "$1") ran past ${limit}s (attempt $attempt of 2; a qemu-user fork deadlock, see --help) and was killed" >&2
done
exit "$rc"
