# shellcheck shell=bash
# Sourced by the scripts that fetch Debian packages (scripts/setup.sh, scripts/build-packages.sh,
# deploy/image/fetch-debian.sh).
#
# debian_mirror [APT_DIR]: prints the Debian archive to fetch from: $EDGEGPU_DEBIAN_MIRROR when
# set; else the first Debian archive this machine's own apt sources name (APT_DIR, default
# /etc/apt), so that a corporate mirror or an air-gapped host's local archive is used; else
# http://deb.debian.org/debian. A Debian archive is an entry of type deb whose URI's last path
# segment is `debian`, for a Debian suite (a codename, stable, testing, unstable, with or
# without -updates / -backports) with the `main` component, signed by Debian's keys (no
# Signed-By, or debian-archive-keyring's), and not the security archive: third-party
# repositories for Debian (Docker's, signed by their own key; Chrome's, under another path)
# are not it. sources.list and the deb822 *.sources files (Debian 12's debian.sources) are
# read before other *.list files. The mirror must carry what is fetched (arm64 too, for the
# images); else set EDGEGPU_DEBIAN_MIRROR. Proxies need nothing here: apt-get reads this
# machine's apt.conf.d and http_proxy, debootstrap http_proxy, as always.
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
entries = []  # (uri, suite, components, signed-by)


def read(path):
    try:
        return open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return ""


def one_line(path):
    for line in read(path).splitlines():
        line = line.split("#", 1)[0]
        options = " ".join(re.findall(r"\[([^]]*)\]", line))
        words = re.sub(r"\[[^]]*\]", " ", line).split()
        signed = re.search(r"signed-by=(\S+)", options)
        if len(words) >= 4 and words[0] == "deb":
            entries.append((words[1], words[2], words[3:], signed.group(1) if signed else ""))


def deb822(path):
    for stanza in re.split(r"\n\s*\n", read(path)):
        fields = {m.group(1).lower(): m.group(2).split()
                  for m in re.finditer(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M)}
        if "deb" not in fields.get("types", []) or fields.get("enabled", ["yes"])[0] == "no":
            continue
        signed = " ".join(fields.get("signed-by", []))
        entries.extend((u, s, fields.get("components", []), signed)
                       for u in fields.get("uris", []) for s in fields.get("suites", []))


def debian(uri, suite, components, signed_by):
    return (suite.split("-")[0].split("/")[0] in SUITES and "security" not in uri
            and uri.rstrip("/").rsplit("/", 1)[-1] == "debian" and "main" in components
            and (not signed_by or "debian-archive-keyring" in signed_by))


one_line(f"{apt}/sources.list")
for path in sorted(glob.glob(f"{apt}/sources.list.d/*.sources")):
    deb822(path)
for path in sorted(glob.glob(f"{apt}/sources.list.d/*.list")):
    one_line(path)
for entry in entries:
    if debian(*entry):
        print(entry[0].rstrip("/"))
        break
PY
    )
    printf '%s\n' "${found:-http://deb.debian.org/debian}"
}
