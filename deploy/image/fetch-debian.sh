#!/usr/bin/env bash
# Fetches Debian packages for linux/amd64 and linux/arm64 from the Debian archive (suite
# $DEBIAN_SUITE, default trixie) with apt-get download, signature-checked against
# debian-archive-keyring, and unpacks each architecture's set into OUT_DIR/debian-<arch>: the
# file source the images' root filesystems are assembled from (deploy/image/assemble-rootfs.sh).
# Nothing is installed on this machine. Writes OUT_DIR/versions (package, arch, version).
#
# Usage: deploy/image/fetch-debian.sh OUT_DIR PACKAGE...
# Needs: apt-get, dpkg-deb, debian-archive-keyring, network access to a Debian archive:
# this machine's own Debian mirror, else deb.debian.org; EDGEGPU_DEBIAN_MIRROR overrides
# (scripts/lib/debian.sh).
set -euo pipefail
case "${1:-}" in
-h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
esac
for arg in "$@"; do
    case "$arg" in -*) echo "$0: unknown option '$arg' (see --help)" >&2; exit 2 ;; esac
done

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ] || [ "$#" -lt 2 ]; then
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
    [ "$#" -ge 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ] || exit 2
    exit 0
fi
out=$1
shift
suite=${DEBIAN_SUITE:-trixie}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
apt=$out/apt

mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/lists/partial" \
    "$apt/cache/archives/partial" "$out/debs"
touch "$apt/status"
# shellcheck source=scripts/lib/debian.sh
. "$(dirname "$0")/../../scripts/lib/debian.sh"
echo "deb [arch=amd64,arm64 signed-by=$keyring] $(debian_mirror) $suite main" \
    >"$apt/etc/sources.list"
apt_opts=(
    -o "Dir::Etc=$apt/etc" -o "Dir::State=$apt" -o "Dir::State::Lists=$apt/lists"
    -o "Dir::State::status=$apt/status" -o "Dir::Cache=$apt/cache"
    -o "APT::Architectures::=amd64" -o "APT::Architectures::=arm64" -o "Acquire::Languages=none"
    -o "APT::Sandbox::User=root" -qq
)
apt-get "${apt_opts[@]}" update
wanted=()
for package in "$@"; do wanted+=("$package:amd64" "$package:arm64"); done
(cd "$out/debs" && apt-get "${apt_opts[@]}" download "${wanted[@]}")

: >"$out/versions"
for arch in amd64 arm64; do
    mkdir -p "$out/debian-$arch"
    for deb in "$out"/debs/*_"$arch".deb; do
        dpkg-deb -x "$deb" "$out/debian-$arch"
        printf '%s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$arch" "$(dpkg-deb -f "$deb" Version)" \
            >>"$out/versions"
    done
done
