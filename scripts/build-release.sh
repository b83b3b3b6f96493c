#!/usr/bin/env bash
# Release cross-builds of the programs into one folder (default: dist/):
#   edgegpu (the multi-call binary: edgegpu-device-plugin, edgegpu-dra-driver and
#   edgegpu-labeller, installed as links to it), devicequery
#                                       -> x86_64/aarch64-unknown-linux-gnu, linked against glibc 2.17
#                                          (cargo-zigbuild's `<triple>.2.17`), dynamic: they dlopen
#                                          NVIDIA's libraries, which a static binary cannot do.
#   edgegpu-node-setup                  -> x86_64/aarch64-unknown-linux-musl, fully static: it must run on
#                                          any host root, including a Yocto image being built.
# Fails when a gnu binary needs a glibc symbol version newer than 2.17, is not dynamic, or when
# node-setup is not static. Prints a size table. Needs what scripts/setup.sh installs.
# Usage: scripts/build-release.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/args.sh
script_args "$0" "" "$@"
OUT=${1:-dist}
export PATH="$PWD/.tools/venv/bin:$PATH"
GLIBC_MAX=2.17
GNU_TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
MUSL_TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
GNU_BINS=(edgegpu devicequery)
MUSL_BINS=(edgegpu-node-setup)

command -v cargo-zigbuild >/dev/null || { echo "cargo-zigbuild missing: run scripts/setup.sh" >&2; exit 1; }

gnu_args=(); for t in "${GNU_TARGETS[@]}"; do gnu_args+=(--target "$t.$GLIBC_MAX"); done
musl_args=(); for t in "${MUSL_TARGETS[@]}"; do musl_args+=(--target "$t"); done

echo "==> cargo zigbuild (glibc $GLIBC_MAX): ${GNU_BINS[*]}"
cargo zigbuild --release --locked -p edgegpu -p edgegpu-devicequery --bins \
    "${gnu_args[@]}"
echo "==> cargo zigbuild (musl, static): ${MUSL_BINS[*]}"
cargo zigbuild --release --locked -p edgegpu-node-setup --bins "${musl_args[@]}"

target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
rm -rf "$OUT" && mkdir -p "$OUT"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Highest GLIBC_x.y[.z] symbol version an ELF file references.
max_glibc() {
    readelf --dyn-syms --version-info -W "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1
}

for t in "${GNU_TARGETS[@]}"; do
    for b in "${GNU_BINS[@]}"; do
        dst="$OUT/$b-$t"
        cp "$target_dir/$t/release/$b" "$dst"
        readelf -l "$dst" | grep -q 'Requesting program interpreter' || fail "$dst is not dynamically linked"
        newest=$(max_glibc "$dst")
        if [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_MAX" | sort -V | tail -n1)" != "$GLIBC_MAX" ]; then
            fail "$dst needs GLIBC_$newest (> $GLIBC_MAX): $(readelf --dyn-syms -W "$dst" | grep "GLIBC_$newest" | awk '{print $8}' | head -3 | tr '\n' ' ')"
        fi
    done
done
for t in "${MUSL_TARGETS[@]}"; do
    for b in "${MUSL_BINS[@]}"; do
        dst="$OUT/$b-$t"
        cp "$target_dir/$t/release/$b" "$dst"
        if readelf -l "$dst" | grep -q 'Requesting program interpreter' || readelf -d "$dst" | grep -q '(NEEDED)'; then
            fail "$dst is not fully static"
        fi
    done
done
# Symbols are stripped by the release profile (strip = "symbols"); make sure no tool put them back.
for f in "$OUT"/*; do
    if readelf -S -W "$f" | grep -q '\.symtab'; then fail "$f is not stripped"; fi
done

# The aarch64 binaries must at least start under emulation.
if command -v qemu-aarch64-static >/dev/null; then
    for f in "$OUT"/*-aarch64-unknown-linux-*; do
        if ! out=$(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$f" --version 2>&1); then
            fail "$f --version under qemu: $out"
        else
            echo "qemu: $out"
        fi
    done
fi

echo
printf '%-52s %10s  %-8s %s\n' binary bytes linkage "newest glibc"
for f in "$OUT"/*; do
    if readelf -l "$f" | grep -q 'Requesting program interpreter'; then link=dynamic; glibc=$(max_glibc "$f"); else link=static; glibc=-; fi
    printf '%-52s %10d  %-8s %s\n' "$(basename "$f")" "$(stat -c %s "$f")" "$link" "$glibc"
done
[ "$failures" -eq 0 ] || { echo "$failures release check(s) failed" >&2; exit 1; }
