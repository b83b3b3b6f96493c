#!/usr/bin/env bash
# CI checks of the Yocto / Wind River layer (yocto/meta-edgegpu) that need no bitbake:
#   1. unit tests of the crates.inc generator, of the structural checker, and of the layer's
#      recipes as bitbake's own parser expands them (yocto/tools/bitbake_expand.py; bitbake's
#      `bb` package from PyPI's bitbake-setup wheel, a model of the oe-core classes involved);
#   2. edgegpu-crates.inc is current with Cargo.lock (regenerated and diffed);
#   3. oelint-adv clean on every recipe, bbappend, class, include and conf file, for every
#      release the layer claims (scarthgap .. wrynose);
#   4. structural checks (layer.conf, licence md5, SRC_URI/SRCREV policy, packages, systemd
#      names, rootfs class) and `systemd-analyze verify` of the units.
# Installs what it needs, only when missing: a venv in .tools/yocto-venv with pinned
# oelint-adv / oelint-parser / oelint-data and bitbake-setup (bitbake's parser) from PyPI. Needs python3 (with venv), git and
# systemd-analyze with the host's units (Debian: python3-venv, systemd).
# Usage: scripts/check-yocto.sh [--strict-srcrev]
#   --strict-srcrev  also fail when the crates of Cargo.lock at the recipe's SRCREV differ
#                    from the working tree's (use on release branches, after bumping SRCREV).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/args.sh
script_args "$0" "--strict-srcrev" "$@"

LAYER=yocto/meta-edgegpu
CRATES_INC=$LAYER/recipes-containers/edgegpu/edgegpu-crates.inc
. scripts/lib/tools.sh
VENV=$(edgegpu_tools_dir)/yocto-venv
# Pinned: new oelint rules must not break CI unannounced; bump on purpose.
# tomli only on Pythons older than 3.11 (which have no tomllib).
PY_REQUIREMENTS=(oelint-adv==9.11.2 oelint-parser==8.13.2 oelint-data==1.5.26 bitbake-setup==2.19.0 'tomli>=2; python_version < "3.11"')
RELEASES=(scarthgap styhead walnascar whinlatter wrynose)
STRICT_SRCREV=()
for arg in "$@"; do
    case "$arg" in
    --strict-srcrev) STRICT_SRCREV=(--strict-srcrev) ;;
    *) echo "usage: $0 [--strict-srcrev]" >&2; exit 2 ;;
    esac
done

log() { printf '==> %s\n' "$*"; }
fail() { printf 'check-yocto: FAILED: %s\n' "$*" >&2; exit 1; }

# --- tools ---------------------------------------------------------------------------------
command -v systemd-analyze >/dev/null || fail "systemd-analyze not found (apt-get install systemd)"
stamp="$VENV/.requirements"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${PY_REQUIREMENTS[*]}" ]; then
    log "installing ${PY_REQUIREMENTS[*]} into $VENV"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_REQUIREMENTS[@]}"
    echo "${PY_REQUIREMENTS[*]}" >"$stamp"
fi
PY="$VENV/bin/python"

# --- 1. tests of the tools themselves --------------------------------------------------------
log "unit tests: crates.inc generator and layer checker"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$PY" -m unittest discover -s yocto/tools/tests >"$tmp/unittest.txt" 2>&1; then
    cat "$tmp/unittest.txt" >&2
    fail "unit tests"
fi
tail -n 3 "$tmp/unittest.txt"

# --- 2. crates.inc freshness -------------------------------------------------------------------
log "crates.inc is current with Cargo.lock"
"$PY" scripts/gen-crates-inc.py --output "$tmp/edgegpu-crates.inc" || fail "cannot generate crates.inc"
if ! diff -u "$CRATES_INC" "$tmp/edgegpu-crates.inc"; then
    fail "$CRATES_INC is stale; regenerate: scripts/gen-crates-inc.py --output $CRATES_INC"
fi

# --- 3. oelint-adv -------------------------------------------------------------------------------
mapfile -t lint_files < <(find "$LAYER" -type f \( -name '*.bb' -o -name '*.bbappend' -o -name '*.bbclass' \
    -o -name '*.inc' -o -name '*.conf' \) ! -name "$(basename "$CRATES_INC")" | sort)
# The generated crates.inc is linted through the recipe that requires it.
for release in "${RELEASES[@]}"; do
    log "oelint-adv --release $release (${#lint_files[@]} files)"
    # --suppress oelint.vars.homepageping: that rule fetches HOMEPAGE over the network, which CI
    # must not depend on (and the answer says nothing about the recipe).
    "$VENV/bin/oelint-adv" --release "$release" --mode all --quiet --exit-zero \
        --suppress oelint.vars.homepageping \
        --messageformat '{path}:{line}:{severity}:{id}:{msg}' \
        --output "$tmp/oelint.txt" "${lint_files[@]}" || fail "oelint-adv did not run"
    # The only accepted findings: the generated crates.inc opens its list with `SRC_URI += " \`
    # (oelint: inconspaces, notneededspace). That is the exact format bitbake's update_crates
    # task writes, which we keep byte-identical; it cannot carry inline suppressions.
    grep -v -E "^[^:]*/$(basename "$CRATES_INC"):4:(error|info):oelint\.vars\.(inconspaces|notneededspace):" \
        "$tmp/oelint.txt" >"$tmp/findings.txt" || true
    if [ -s "$tmp/findings.txt" ]; then
        cat "$tmp/findings.txt" >&2
        fail "oelint-adv findings for $release"
    fi
done

# --- 4. structure and systemd units --------------------------------------------------------------
log "structural checks and systemd-analyze verify"
"$PY" yocto/tools/check_layer.py "${STRICT_SRCREV[@]}" || fail "structural checks"

log "check-yocto: all checks passed"
