# shellcheck shell=bash
# Sourced by the scripts that fetch Debian packages (scripts/setup.sh, scripts/build-packages.sh,
# deploy/image/fetch-debian.sh).
#
# debian_mirror [APT_DIR]: prints the Debian archive to fetch from: $EDGEGPU_DEBIAN_MIRROR when
# set; else the first Debian archive this machine's own apt sources name (APT_DIR, default
# /etc/apt: sources.list, sources.list.d/*.list one-line entries and *.sources deb822 files),
# so that a corporate mirror or an air-gapped host's local archive is used; else
# http://deb.debian.org/debian. A Debian archive is an entry of type deb for a Debian suite
# (a codename, stable, testing, unstable, with or without -updates / -backports), not the
# security archive. Proxies need nothing here: apt-get reads this machine's apt.conf.d and
# http_proxy, debootstrap http_proxy, as always.
debian_mirror() {
    if [ -n "${EDGEGPU_DEBIAN_MIRROR:-}" ]; then
        printf '%s\n' "${EDGEGPU_DEBIAN_MIRROR%/}"
        return
    fi
    local found
    found=$(python3 - "${1:-/etc/apt}" <<'PY'
import glob, re, sys
apt = sys.argv[1]
SUITES = {"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
          "oldoldstable", "oldstable", "stable", "testing", "unstable"}

def debian(uri, suite):
    return suite.split("-")[0].split("/")[0] in SUITES and "security" not in uri

entries = []
for path in [f"{apt}/sources.list"] + sorted(glob.glob(f"{apt}/sources.list.d/*.list")):
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        continue
    for line in lines:
        line = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
        if len(line) >= 3 and line[0] == "deb":
            entries.append((line[1], line[2]))
for path in sorted(glob.glob(f"{apt}/sources.list.d/*.sources")):
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        continue
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        for m in re.finditer(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M):
            fields[m.group(1).lower()] = m.group(2).split()
        if "deb" not in fields.get("types", []) or fields.get("enabled", ["yes"])[0] == "no":
            continue
        entries += [(u, s) for u in fields.get("uris", []) for s in fields.get("suites", [])]
for uri, suite in entries:
    if debian(uri, suite):
        print(uri.rstrip("/"))
        break
PY
    )
    printf '%s\n' "${found:-http://deb.debian.org/debian}"
}
