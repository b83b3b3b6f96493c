#!/usr/bin/env python3
"""Structural checks of meta-edgegpu that need no bitbake.

What bitbake would only tell us at parse, fetch or package time (or never, for a layer that
"works" but ships the wrong thing) is checked here against the repository itself:

- layer.conf: every required variable, compat series, LAYERDEPENDS, BBFILES/BBFILES_DYNAMIC
  globs that match files, and every recipe/bbappend reachable through one of them;
- README / SECURITY content that yocto-check-layer looks for;
- the edgegpu recipe: LICENSE and LIC_FILES_CHKSUM (md5 of the real file), SRC_URI/SRCREV
  policy, PV against Cargo.toml, the cargo --bin selection against the workspace's binaries,
  PACKAGES/FILES, SYSTEMD_SERVICE names against the unit files shipped, PACKAGECONFIG;
- the k3s node-label recipe: machine-specific, common-licence md5, the drop-in it renders (run
  with sh for each label value) against the label values the DaemonSets in deploy/k3s select;
- the packagegroup, the rootfs class and the bbappends;
- Cargo.lock: version 3 (scarthgap's cargo cannot read v4), only crates.io or path sources,
  a single lock in the tree (bitbake's update_crates task reads every Cargo.lock under ${S});
- the units with `systemd-analyze verify`, in a scratch root holding stub executables.

Variables are read with oelint-parser (the parser behind oelint-adv); every finding names the
file and line. Exit status 1 on any error.
"""

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

from oelint_parser.cls_item import FlagAssignment, Function, Inherit, Variable
from oelint_parser.cls_stash import Stash

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_generator():
    """scripts/gen-crates-inc.py (not importable by name): the one Cargo.lock reader."""
    import importlib.util

    path = os.path.join(REPO_ROOT, "scripts", "gen-crates-inc.py")
    spec = importlib.util.spec_from_file_location("gen_crates_inc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_generator = _load_generator()
crates_io_packages = _generator.crates_io_packages
LockError = _generator.LockError

LAYER_REL = os.path.join("yocto", "meta-edgegpu")

COLLECTION = "edgegpu"
# scarthgap (Rust 1.75 = our MSRV) through the current release, plus Wind River's "wrl".
REQUIRED_SERIES = ["scarthgap", "styhead", "walnascar", "whinlatter", "wrynose", "wrl"]
KNOWN_SERIES = set(REQUIRED_SERIES) | {"kirkstone", "langdale", "mickledore", "nanbield", "blacksail"}
# Layers the dynamic-layers/ directories may name (meta-virtualization, meta-tegra).
KNOWN_DYNAMIC_COLLECTIONS = {"virtualization-layer", "tegra"}
RECIPE = os.path.join("recipes-containers", "edgegpu", "edgegpu_git.bb")
NODE_LABEL_RECIPE = os.path.join("recipes-containers", "edgegpu", "edgegpu-k3s-node-label_1.0.bb")
# The label the device-plugin DaemonSets select on, and the value each kind of machine gets:
# the Jetson DaemonSet for meta-tegra machines (MACHINEOVERRIDES has "tegra"), else discrete.
NODE_LABEL_KEY = "edgegpu.io/gpu"
NODE_LABEL_TEGRA = "jetson"
NODE_LABEL_OTHER = "discrete"
NODE_LABEL_HOST = "host"
# Where k3s (server and agent) reads config drop-ins, merged in name order; "+:" appends.
NODE_LABEL_DROPIN = "${sysconfdir}/rancher/k3s/config.yaml.d/50-edgegpu-node-label.yaml"
NODE_LABEL_HEADER = "# Installed by meta-edgegpu: lets the edgegpu device-plugin DaemonSet select this node."
# md5 of oe-core's meta/files/common-licenses/<name> (what LIC_FILES_CHKSUM of a recipe with
# no licence file of its own must name).
COMMON_LICENSE_MD5 = {"Apache-2.0": "89aea4e17d99a7cacdbeed46a0096b10"}
PACKAGEGROUP = os.path.join("recipes-core", "packagegroups", "packagegroup-edgegpu.bb")
ROOTFS_CLASS = os.path.join("classes", "edgegpu_node_setup_rootfs.bbclass")
# The package each binary ships in (the issue names them).
PROGRAM_PACKAGES = {
    "edgegpu": "edgegpu-device-plugin",
    "edgegpu-node-setup": "edgegpu-node-setup",
    "devicequery": "devicequery",
}
# The multi-call binary: its programs are installed as links to it, in its package.
MULTI_CALL_BINARY = "edgegpu"
MULTI_CALL_SOURCE = os.path.join("edgegpu", "src", "main.rs")
# Workspace members that are never shipped.
TEST_ONLY_CRATES = {"edgegpu-testkit"}
AUTO_ENABLE_VALUES = {"enable", "disable", "mask", "preset"}
EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
SRCREV_RE = re.compile(r"^[0-9a-f]{40}$")


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []
        self.notes = []

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def warn(self, where, message):
        self.warnings.append(f"{where}: {message}")

    def note(self, message):
        self.notes.append(message)


class BBFile:
    """Variables, flags, functions of one metadata file (plus what it `require`s)."""

    def __init__(self, path, repo):
        self.path = path
        self.repo = repo
        self.rel = os.path.relpath(path, repo)
        stash = Stash(quiet=True)
        stash.AddFile(path)
        stash.Finalize()
        self.variables = list(stash.GetItemsFor(classifier=Variable.CLASSIFIER))
        self.flags = list(stash.GetItemsFor(classifier=FlagAssignment.CLASSIFIER))
        self.functions = list(stash.GetItemsFor(classifier=Function.CLASSIFIER))
        self.inherits = [
            cls for item in stash.GetItemsFor(classifier=Inherit.CLASSIFIER) for cls in item.get_items()
        ]
        self.text = read_text(path)

    def where(self, item):
        """file:line of a parsed item (which may come from a required file)."""
        return f"{os.path.relpath(item.Origin, self.repo)}:{item.InFileLine}"

    def loc(self, name, override=""):
        """file:line of the last assignment to `name` (just the file when there is none)."""
        found = self.assignments(name, override)
        return self.where(found[-1]) if found else self.rel

    def line_of(self, regex):
        """file:line of the first line of this file matching `regex` (the file when none does)."""
        for number, line in enumerate(self.text.splitlines(), start=1):
            if re.search(regex, line):
                return f"{self.rel}:{number}"
        return self.rel

    def assignments(self, name, override=""):
        # layer.conf's BBFILE_PATTERN_edgegpu parses as BBFILE_PATTERN + override "edgegpu".
        complete = f"{name}:{override}" if override else name
        return [
            v
            for v in self.variables
            if (v.VarName == name and v.SubItem == override) or v.VarNameComplete == complete
        ]

    def value(self, name, override=""):
        """Raw value of the last plain assignment (continuations joined), or None."""
        found = self.assignments(name, override)
        if not found:
            return None
        return clean(found[-1].VarValueStripped)

    def items(self, name, override=""):
        """All whitespace-separated words assigned or appended to `name`."""
        words = []
        for item in self.assignments(name, override):
            words.extend(clean(item.VarValueStripped).split())
        return words

    def flag(self, name, flag):
        for item in self.flags:
            if item.VarName == name and item.Flag == flag:
                return item
        return None

    def function_body(self, name, override=""):
        return "\n".join(
            f.FuncBodyRaw if hasattr(f, "FuncBodyRaw") else f.FuncBody
            for f in self.functions
            if f.FuncName == name and f.SubItem == override
        )


def clean(value):
    # oelint-parser marks line continuations with ESC; a continuation is just whitespace.
    return value.replace("\x1b", " ").strip()


def read_text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def md5_of(path):
    with open(path, "rb") as handle:
        return hashlib.md5(handle.read()).hexdigest()


def parse_url(url):
    """('scheme://rest', {param: value}) of a bitbake fetcher URL."""
    head, *params = url.split(";")
    parsed = {}
    for param in params:
        key, _, value = param.partition("=")
        parsed[key] = value
    return head, parsed


def read_toml(path, repo, report):
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as err:
        # TOMLDecodeError messages carry "(at line L, column C)".
        report.error(os.path.relpath(path, repo), f"cannot read: {err}")
        return None


# ----------------------------------------------------------------------------- workspace


class Workspace:
    def __init__(self, repo, report):
        self.repo = repo
        manifest = read_toml(os.path.join(repo, "Cargo.toml"), repo, report) or {}
        workspace = manifest.get("workspace", {})
        package = workspace.get("package", {})
        self.is_workspace = bool(workspace)
        self.version = package.get("version")
        self.license = package.get("license")
        self.repository = package.get("repository")
        self.members = workspace.get("members", [])
        self.binaries = {}  # bin name -> crate name
        self.crates = {}  # crate name -> member dir
        for member in self.members:
            member_manifest = read_toml(os.path.join(repo, member, "Cargo.toml"), repo, report)
            if member_manifest is None:
                continue
            crate = member_manifest.get("package", {}).get("name", member)
            self.crates[crate] = member
            bins = [b.get("name") for b in member_manifest.get("bin", [])]
            autobins = member_manifest.get("package", {}).get("autobins", True)
            if not bins and autobins and os.path.exists(os.path.join(repo, member, "src", "main.rs")):
                bins = [crate]
            for name in bins:
                self.binaries[name] = crate


# ----------------------------------------------------------------------------- layer.conf


def check_layer_conf(layer, repo, report):
    path = os.path.join(layer, "conf", "layer.conf")
    if not os.path.isfile(path):
        report.error(os.path.relpath(path, repo), "missing")
        return
    conf = BBFile(path, repo)

    if "${LAYERDIR}" not in " ".join(conf.items("BBPATH")):
        report.error(conf.loc("BBPATH"), 'BBPATH must add "${LAYERDIR}"')
    collections = conf.items("BBFILE_COLLECTIONS")
    if collections != [COLLECTION]:
        report.error(
            conf.loc("BBFILE_COLLECTIONS"), f'BBFILE_COLLECTIONS must be "{COLLECTION}", found {collections}'
        )
    if conf.value(f"BBFILE_PATTERN_{COLLECTION}") != "^${LAYERDIR}/":
        report.error(
            conf.loc(f"BBFILE_PATTERN_{COLLECTION}"), f'BBFILE_PATTERN_{COLLECTION} must be "^${{LAYERDIR}}/"'
        )
    for name in (f"BBFILE_PRIORITY_{COLLECTION}", f"LAYERVERSION_{COLLECTION}"):
        value = conf.value(name)
        if value is None or not value.isdigit():
            report.error(conf.loc(name), f"{name} must be set to an integer, found {value!r}")
    depends = conf.items(f"LAYERDEPENDS_{COLLECTION}")
    if depends != ["core"]:
        report.error(
            conf.loc(f"LAYERDEPENDS_{COLLECTION}"),
            f'LAYERDEPENDS_{COLLECTION} must be "core" only, found {depends}',
        )
    compat = conf.items(f"LAYERSERIES_COMPAT_{COLLECTION}")
    missing = [s for s in REQUIRED_SERIES if s not in compat]
    if missing:
        report.error(
            conf.loc(f"LAYERSERIES_COMPAT_{COLLECTION}"),
            f"LAYERSERIES_COMPAT_{COLLECTION} lacks {' '.join(missing)}",
        )
    unknown = [s for s in compat if s not in KNOWN_SERIES]
    if unknown:
        report.error(
            conf.loc(f"LAYERSERIES_COMPAT_{COLLECTION}"),
            f"LAYERSERIES_COMPAT_{COLLECTION} has unknown series {' '.join(unknown)}",
        )

    # Every recipe and bbappend must be reachable through BBFILES or BBFILES_DYNAMIC (a typo in a
    # glob silently drops recipes).
    where = conf.loc("BBFILES_DYNAMIC")
    static_globs = conf.items("BBFILES")
    dynamic = []
    for entry in conf.items("BBFILES_DYNAMIC"):
        collection, sep, pattern = entry.partition(":")
        collection = collection.lstrip("!")
        if not sep or not collection or not pattern:
            report.error(where, f"malformed BBFILES_DYNAMIC entry {entry!r} (want <collection>:<glob>)")
            continue
        if collection not in KNOWN_DYNAMIC_COLLECTIONS:
            report.error(where, f"BBFILES_DYNAMIC names unknown collection {collection!r}")
        expected_dir = f"${{LAYERDIR}}/dynamic-layers/{collection}/"
        if not pattern.startswith(expected_dir):
            report.error(where, f"BBFILES_DYNAMIC glob for {collection} must live under {expected_dir}")
        dynamic.append(pattern)
    if not any(p.endswith("/*.bb") for p in static_globs):
        report.error(
            conf.loc("BBFILES"), "BBFILES must add the layer's recipes (${LAYERDIR}/recipes-*/*/*.bb)"
        )
    matched = set()
    for pattern in static_globs + dynamic:
        matched.update(os.path.abspath(f) for f in glob.glob(pattern.replace("${LAYERDIR}", layer)))
    for suffix in ("bb", "bbappend"):
        for path in glob.glob(os.path.join(layer, "**", f"*.{suffix}"), recursive=True):
            if os.path.abspath(path) not in matched:
                report.error(
                    os.path.relpath(path, repo),
                    "not matched by BBFILES or BBFILES_DYNAMIC: bitbake would never parse it",
                )
    for directory in glob.glob(os.path.join(layer, "dynamic-layers", "*")):
        if os.path.basename(directory) not in KNOWN_DYNAMIC_COLLECTIONS:
            report.error(os.path.relpath(directory, repo), "unknown dynamic layer")


# ----------------------------------------------------------------------------- docs


def check_docs(layer, repo, report):
    readmes = [
        p for p in glob.glob(os.path.join(layer, "*")) if os.path.basename(p).upper().startswith("README")
    ]
    if not readmes:
        report.error(os.path.relpath(layer, repo), "no README in the layer")
    for path in readmes:
        text = read_text(path)
        where = os.path.relpath(path, repo)
        # yocto-check-layer: non-empty, mentions maintainers, patches and an e-mail address;
        # it skips those tests when the text contains the word README, so keep it out.
        if "README" in text:
            report.error(where, "contains the word 'README': yocto-check-layer would skip its README tests")
        lowered = text.lower()
        for word in ("maintainer", "patch"):
            if word not in lowered:
                report.error(where, f"must mention '{word}' (yocto-check-layer)")
        if not EMAIL_RE.search(text):
            report.error(where, "must contain a contact e-mail address (yocto-check-layer)")
        for needle in ("bitbake-layers add-layer", "CUSTOMER_RECIPES", "setup.sh", "Dependencies"):
            if needle not in text:
                report.error(where, f"must document {needle!r}")
    security = [
        p for top in (layer, repo) for p in glob.glob(os.path.join(top, "SECURITY*")) if os.path.isfile(p)
    ]
    if not security:
        report.error(os.path.relpath(layer, repo), "no SECURITY file in the layer or repository top")
    for path in security:
        text = read_text(path)
        if not text.strip() or not EMAIL_RE.search(text):
            report.error(
                os.path.relpath(path, repo), "must say where to report vulnerabilities (an e-mail address)"
            )


# ----------------------------------------------------------------------------- the recipe


class RecipeFacts:
    """What other checks need to know about the edgegpu recipe."""

    def __init__(self):
        self.pn = None
        self.packages = set()
        self.files = {}
        self.bins = []
        self.links = []  # the multi-call binary's programs, links to it
        self.native_bins = []
        self.native = False
        self.units = {}  # unit file name -> package
        self.rdepends = {}  # package -> RDEPENDS

    def package_of(self, name):
        """The package a binary, or a link of the multi-call binary, ships in."""
        if name in self.links:
            name = MULTI_CALL_BINARY
        return PROGRAM_PACKAGES.get(name)


def check_recipe(layer, repo, workspace, report, strict_srcrev=False):
    facts = RecipeFacts()
    path = os.path.join(layer, RECIPE)
    if not os.path.isfile(path):
        report.error(os.path.relpath(path, repo), "missing")
        return facts
    recipe = BBFile(path, repo)
    where = recipe.rel
    recipe_dir = os.path.dirname(path)
    facts.pn = os.path.basename(path).split("_")[0]

    # --- licence
    license_value = recipe.value("LICENSE")
    if license_value != workspace.license:
        report.error(
            recipe.loc("LICENSE"), f"LICENSE is {license_value!r}, Cargo.toml says {workspace.license!r}"
        )
    chksums = recipe.items("LIC_FILES_CHKSUM")
    if not chksums:
        report.error(where, "LIC_FILES_CHKSUM is not set")
    where = recipe.loc("LIC_FILES_CHKSUM")
    for entry in chksums:
        url, params = parse_url(entry)
        if not url.startswith("file://") or "md5" not in params:
            report.error(where, f"LIC_FILES_CHKSUM entry {entry!r} must be file://<path>;md5=<sum>")
            continue
        if "beginline" in params or "endline" in params:
            report.error(where, f"{entry}: beginline/endline are not supported by this check")
            continue
        license_file = os.path.join(repo, url[len("file://") :])
        if not os.path.isfile(license_file):
            report.error(where, f"LIC_FILES_CHKSUM names {url}, which does not exist in the repository")
            continue
        actual = md5_of(license_file)
        if actual != params["md5"]:
            report.error(where, f"LIC_FILES_CHKSUM md5 for {url} is {params['md5']}, the file's is {actual}")

    # --- sources
    where = recipe.loc("SRC_URI")
    src_uri = recipe.items("SRC_URI")
    local_files = [u for u in src_uri if u.startswith("file://")]
    git = [u for u in src_uri if u.startswith(("git://", "gitsm://"))]
    others = [u for u in src_uri if u not in local_files and u not in git and not u.startswith("crate://")]
    if others:
        report.error(where, f"unexpected SRC_URI entries {others}")
    destsuffix = None
    if len(git) != 1:
        report.error(where, f"SRC_URI must have exactly one git:// entry (the project), found {len(git)}")
    else:
        url, params = parse_url(git[0])
        expected = None
        if workspace.repository:
            expected = re.sub(r"^https://", "git://", workspace.repository.rstrip("/"))
            if not expected.endswith(".git"):
                expected += ".git"
        if expected and url != expected:
            report.error(where, f"git SRC_URI is {url}, Cargo.toml's repository gives {expected}")
        if params.get("protocol") != "https":
            report.error(where, "git SRC_URI must set protocol=https")
        if not params.get("branch"):
            report.error(where, "git SRC_URI must name its branch (branch=...)")
        destsuffix = params.get("destsuffix")
        if not destsuffix:
            report.error(
                where, "git SRC_URI must set destsuffix (S must not depend on the release's default)"
            )
        srcrev = recipe.value("SRCREV")
        where = recipe.loc("SRCREV")
        if srcrev is None or not SRCREV_RE.match(srcrev):
            report.error(where, f"SRCREV must pin a full 40-hex commit, found {srcrev!r} (no AUTOREV)")
        else:
            check_srcrev(repo, where, srcrev, report, strict_srcrev)
    s_value = recipe.value("S")
    if destsuffix and (s_value is None or not s_value.endswith(f"/{destsuffix.rstrip('/')}")):
        report.error(recipe.loc("S"), f"S ({s_value!r}) must point at the git destsuffix {destsuffix!r}")
    file_dirs = [os.path.join(recipe_dir, d) for d in ("files", facts.pn)]
    install_body = " ".join(f.FuncBody for f in recipe.functions if f.FuncName == "do_install")
    where = recipe.loc("SRC_URI")
    for entry in local_files:
        name = parse_url(entry)[0][len("file://") :]
        if not any(os.path.isfile(os.path.join(d, name)) for d in file_dirs):
            report.error(where, f"SRC_URI {entry}: no such file next to the recipe (files/)")
        if f"/{name} " not in install_body + " ":
            report.error(where, f"{name} is fetched but do_install never installs it")

    # --- version
    pv = recipe.value("PV")
    if workspace.version and pv != f"{workspace.version}+git":
        report.error(
            recipe.loc("PV"),
            f'PV is {pv!r}; Cargo.toml says version {workspace.version}: want "{workspace.version}+git"',
        )

    # --- classes and crates
    for cls in ("cargo", "cargo-update-recipe-crates", "systemd"):
        if cls not in recipe.inherits:
            report.error(recipe.line_of(r"^inherit\s"), f"must inherit {cls}")
    raw_requires = re.findall(r"^require\s+(\S+)", recipe.text, re.M)
    if "${BPN}-crates.inc" not in raw_requires:
        report.error(recipe.rel, "must `require ${BPN}-crates.inc`")
    elif not os.path.isfile(os.path.join(recipe_dir, f"{facts.pn}-crates.inc")):
        report.error(
            recipe.line_of(r"^require\s+\$\{BPN\}-crates\.inc"),
            f"{facts.pn}-crates.inc is missing (scripts/gen-crates-inc.py --output ...)",
        )
    if recipe.value("CARGO_SRC_DIR") not in ("", None):
        report.error(
            recipe.loc("CARGO_SRC_DIR"), "CARGO_SRC_DIR must be empty: the manifest is the workspace root"
        )
    if not workspace.is_workspace:
        report.error("Cargo.toml", "is not a workspace manifest")

    # --- which programs get built (and only those)
    facts.bins = recipe.items("EDGEGPU_BINS")
    facts.native_bins = recipe.items("EDGEGPU_BINS", "class-native")
    shipped = {b for b, crate in workspace.binaries.items() if crate not in TEST_ONLY_CRATES}
    if set(facts.bins) != shipped:
        report.error(
            recipe.loc("EDGEGPU_BINS"),
            f"EDGEGPU_BINS is {sorted(facts.bins)}, the workspace's shipped binaries are {sorted(shipped)}",
        )
    for name in facts.bins:
        if workspace.binaries.get(name) in TEST_ONLY_CRATES:
            report.error(
                recipe.loc("EDGEGPU_BINS"), f"{name} comes from a test-only crate and must not be built"
            )
    # oelint-parser hides inline python, so read the raw line.
    flag_lines = re.findall(r"^CARGO_BUILD_FLAGS\s*\+=\s*(.*)$", recipe.text, re.M)
    if not any("--bin " in line and "EDGEGPU_BINS" in line for line in flag_lines):
        report.error(
            recipe.line_of(r"^CARGO_BUILD_FLAGS"),
            "CARGO_BUILD_FLAGS += must select the programs with --bin (from EDGEGPU_BINS)",
        )
    if "CARGO_PROFILE_RELEASE_STRIP" not in recipe.text:
        report.error(
            recipe.rel, 'must export CARGO_PROFILE_RELEASE_STRIP = "false" (the release profile strips)'
        )

    # --- packages and files
    facts.packages = set(recipe.items("PACKAGES"))
    for name, package in PROGRAM_PACKAGES.items():
        if package not in facts.packages:
            report.error(recipe.loc("PACKAGES"), f"PACKAGES lacks {package}")
    for item in recipe.variables:
        if item.VarName == "FILES" and item.SubItem:
            facts.files.setdefault(item.SubItem, []).extend(clean(item.VarValueStripped).split())
            if item.SubItem not in facts.packages and item.SubItem != "${PN}":
                report.error(recipe.where(item), f"FILES:{item.SubItem} for a package not in PACKAGES")
    allow_empty = {v.SubItem for v in recipe.variables if v.VarName == "ALLOW_EMPTY"}
    for package in facts.packages:
        if package not in facts.files and package not in allow_empty:
            report.error(
                recipe.loc("PACKAGES"), f"package {package} has no FILES (it would never be created)"
            )
    # The multi-call binary's programs: exactly the names it dispatches on, as links.
    facts.links = recipe.items("EDGEGPU_MULTI_CALL_PROGRAMS")
    dispatched = set(re.findall(r'installed_as: "([^"]+)"', read_text(os.path.join(repo, MULTI_CALL_SOURCE))))
    if set(facts.links) != dispatched:
        report.error(
            recipe.loc("EDGEGPU_MULTI_CALL_PROGRAMS"),
            f"EDGEGPU_MULTI_CALL_PROGRAMS is {sorted(facts.links)}, {MULTI_CALL_SOURCE} dispatches on "
            f"{sorted(dispatched)}",
        )
    if facts.links and not re.search(r"ln -s %s \$\{D\}\$\{bindir\}/\$program" % MULTI_CALL_BINARY, recipe.text):
        report.error(recipe.rel, f"must install EDGEGPU_MULTI_CALL_PROGRAMS as links to {MULTI_CALL_BINARY}")
    for name in list(facts.bins) + list(facts.links):
        owners = [p for p, files in facts.files.items() if f"${{bindir}}/{name}" in files]
        expected = facts.package_of(name)
        if owners != [expected]:
            report.error(
                recipe.loc("FILES", expected),
                f"${{bindir}}/{name} must be in FILES:{expected} only, found in {owners}",
            )

    # --- systemd
    systemd_packages = recipe.items("SYSTEMD_PACKAGES")
    units_dir = os.path.join(recipe_dir, "files")
    shipped_units = {
        os.path.basename(p)
        for pattern in UNIT_PATTERNS
        for p in glob.glob(os.path.join(units_dir, pattern))
    }
    referenced = set()
    for package in systemd_packages:
        if package not in facts.packages:
            report.error(
                recipe.loc("SYSTEMD_PACKAGES"), f"SYSTEMD_PACKAGES names {package}, which is not in PACKAGES"
            )
        services = recipe.items("SYSTEMD_SERVICE", package)
        if not services:
            report.error(recipe.loc("SYSTEMD_PACKAGES"), f"SYSTEMD_SERVICE:{package} is not set")
        for service in services:
            referenced.add(service)
            facts.units[service] = package
            if service not in shipped_units:
                report.error(
                    recipe.loc("SYSTEMD_SERVICE", package),
                    f"SYSTEMD_SERVICE:{package} names {service}, but files/{service} does not exist",
                )
            if f"file://{service}" not in src_uri:
                report.error(recipe.loc("SRC_URI"), f"{service} is not in SRC_URI")
            if f"${{systemd_system_unitdir}}/{service}" not in facts.files.get(package, []):
                report.error(
                    recipe.loc("FILES", package),
                    f"FILES:{package} lacks ${{systemd_system_unitdir}}/{service}",
                )
        auto = recipe.value("SYSTEMD_AUTO_ENABLE", package)
        if auto is not None and auto not in AUTO_ENABLE_VALUES:
            report.error(
                recipe.loc("SYSTEMD_AUTO_ENABLE", package),
                f"SYSTEMD_AUTO_ENABLE:{package} = {auto!r} is not one of {sorted(AUTO_ENABLE_VALUES)}",
            )
    for unit in sorted(shipped_units - referenced):
        report.error(os.path.relpath(os.path.join(units_dir, unit), repo), "not named by any SYSTEMD_SERVICE")

    # --- PACKAGECONFIG
    declared = {f.Flag for f in recipe.flags if f.VarName == "PACKAGECONFIG"}
    used = set(recipe.items("PACKAGECONFIG"))
    used |= set(re.findall(r"bb\.utils\.contains\('PACKAGECONFIG',\s*'([^']+)'", recipe.text))
    for option in sorted(used - declared):
        report.error(
            recipe.loc("PACKAGECONFIG"),
            f"PACKAGECONFIG option {option!r} is used but not declared (PACKAGECONFIG[{option}])",
        )
    for option in sorted(declared - used):
        report.error(recipe.rel, f"PACKAGECONFIG[{option}] is declared but nothing uses it")

    # --- native variant for the rootfs class
    facts.native = "native" in recipe.items("BBCLASSEXTEND")
    facts.rdepends = {p: recipe.items("RDEPENDS", p) for p in facts.packages}
    return facts


def check_srcrev(repo, where, srcrev, report, strict):
    def git(*args):
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)

    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        report.note(f"SRCREV {srcrev[:12]}: not verified (no git repository here)")
        return
    if git("cat-file", "-e", f"{srcrev}^{{commit}}").returncode != 0:
        if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            report.note(f"SRCREV {srcrev[:12]}: not verified (shallow clone without that commit)")
            return
        report.error(where, f"SRCREV {srcrev} is not a commit of this repository")
        return
    if git("merge-base", "--is-ancestor", srcrev, "HEAD").returncode != 0:
        report.error(where, f"SRCREV {srcrev} is not an ancestor of HEAD (not on the branch)")
    # The recipe builds SRCREV's Cargo.lock with the crates in the .inc (made from the working
    # tree's lock). A dependency change cannot bump SRCREV in the same commit, so a different
    # crate set is a warning here and an error with --strict-srcrev (release checks).
    pinned = git("show", f"{srcrev}:Cargo.lock")
    try:
        pinned_crates = (
            set(crates_io_packages("Cargo.lock@SRCREV", pinned.stdout)) if pinned.returncode == 0 else None
        )
        current_crates = set(crates_io_packages("Cargo.lock", read_text(os.path.join(repo, "Cargo.lock"))))
    except LockError as err:
        report.error(where, f"cannot compare crates with SRCREV: {err}")
        return
    if pinned_crates != current_crates:
        missing = sorted(f"{n} {v}" for n, v, _ in (pinned_crates or set()) - current_crates)
        message = (
            f"the crates of Cargo.lock at SRCREV {srcrev[:12]} differ from the working tree's "
            f"(the .inc lacks {', '.join(missing[:5]) or 'nothing'}{' ...' if len(missing) > 5 else ''}): "
            "a bitbake build of that commit would fail to fetch; bump SRCREV once the lock change is merged"
        )
        (report.error if strict else report.warn)(where, message)


# ----------------------------------------------------------------------------- node label


def manifest_label_values(repo):
    """Values of NODE_LABEL_KEY that the deploy/k3s manifests select with operator In."""
    pattern = re.compile(
        r"\{\s*key:\s*" + re.escape(NODE_LABEL_KEY) + r"\s*,\s*operator:\s*In\s*,\s*values:\s*\[([^\]]*)\]"
    )
    values = set()
    for path in glob.glob(os.path.join(repo, "deploy", "k3s", "*.yaml")):
        for match in pattern.finditer(read_text(path)):
            values.update(v.strip().strip("'\"") for v in match.group(1).split(",") if v.strip())
    return values


def manifest_label_absent_terms(repo):
    """Whether every node selector term of the deploy/k3s manifests that does not select a
    NODE_LABEL_KEY value with In requires the key to be absent."""
    found = False
    for path in glob.glob(os.path.join(repo, "deploy", "k3s", "*.yaml")):
        for term in re.split(r"^\s*- matchExpressions:\s*$", read_text(path), flags=re.M)[1:]:
            term = term.split("\n\n", 1)[0]
            expressions = re.findall(r"^\s*- \{key: ([^,]+), operator: (\w+)", term, re.M)
            if not expressions:
                continue
            found = True
            ours = [op for key, op in expressions if key.strip() == NODE_LABEL_KEY]
            if "In" not in ours and "DoesNotExist" not in ours:
                return False
    return found


def expand(value, variables, depth=0):
    """Bitbake-style ${VAR} expansion with `variables`; unknown references stay as they are."""
    if depth > 10:
        return value
    expanded = re.sub(r"\$\{(\w+)\}", lambda m: variables.get(m.group(1), m.group(0)), value)
    return expanded if expanded == value else expand(expanded, variables, depth + 1)


def render_node_label(recipe, template_dir, label):
    """Runs the recipe's do_install with sh as bitbake would for EDGEGPU_NODE_LABEL = label.

    Returns (exit status, {installed path relative to ${D}: text}, stderr)."""
    with tempfile.TemporaryDirectory(prefix="edgegpu-node-label-") as dest:
        variables = {v.VarName: clean(v.VarValueStripped) for v in recipe.variables if not v.SubItem}
        variables.update(
            {
                "D": dest,
                "sysconfdir": "/etc",
                "EDGEGPU_UNPACKDIR": template_dir,
                "EDGEGPU_NODE_LABEL": label,
            }
        )
        body = expand(recipe.function_body("do_install"), variables)
        script = 'set -e\nbbfatal() { echo "$*" >&2; exit 1; }\ndo_install() {\n' + body + "\n}\ndo_install\n"
        result = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
        installed = {}
        for top, _, files in os.walk(dest):
            for name in files:
                path = os.path.join(top, name)
                installed["/" + os.path.relpath(path, dest)] = read_text(path)
        return result.returncode, installed, result.stderr.strip()


def check_node_label(layer, repo, workspace, report):
    """The recipe that labels the node for the DaemonSets; returns its package name."""
    path = os.path.join(layer, NODE_LABEL_RECIPE)
    if not os.path.isfile(path):
        report.error(os.path.relpath(path, repo), "missing")
        return None
    recipe = BBFile(path, repo)
    pn = os.path.basename(path).split("_")[0]
    recipe_dir = os.path.dirname(path)

    license_value = recipe.value("LICENSE")
    if license_value != workspace.license:
        report.error(
            recipe.loc("LICENSE"), f"LICENSE is {license_value!r}, Cargo.toml says {workspace.license!r}"
        )
    wanted = f"file://${{COMMON_LICENSE_DIR}}/{license_value};md5={COMMON_LICENSE_MD5.get(license_value)}"
    if recipe.items("LIC_FILES_CHKSUM") != [wanted]:
        report.error(recipe.loc("LIC_FILES_CHKSUM"), f'LIC_FILES_CHKSUM must be "{wanted}" (oe-core\'s text)')

    if recipe.value("PACKAGE_ARCH") != "${MACHINE_ARCH}":
        report.error(
            recipe.loc("PACKAGE_ARCH"),
            'PACKAGE_ARCH must be "${MACHINE_ARCH}": the label depends on the machine',
        )
    if "allarch" in recipe.inherits:
        report.error(
            recipe.line_of(r"^inherit\s"), "must not inherit allarch: the label depends on the machine"
        )

    # The per-machine default: weak (local.conf overrides it), jetson on tegra, else discrete.
    # oelint-parser hides inline python, so read the raw line.
    default = re.search(r"^EDGEGPU_NODE_LABEL\s*\?\??=\s*(.*)$", recipe.text, re.M)
    expected = re.compile(
        rf"'{NODE_LABEL_TEGRA}' if 'tegra' in .*MACHINEOVERRIDES.* else '{NODE_LABEL_OTHER}'"
    )
    if default is None or not expected.search(default.group(1)):
        report.error(
            recipe.line_of(r"^EDGEGPU_NODE_LABEL\s"),
            f'EDGEGPU_NODE_LABEL must default weakly (?=) to "{NODE_LABEL_TEGRA}" where MACHINEOVERRIDES '
            f'has tegra, else "{NODE_LABEL_OTHER}"',
        )

    values = set(recipe.items("EDGEGPU_NODE_LABEL_VALUES"))
    selected = manifest_label_values(repo)
    if values != selected or not {NODE_LABEL_TEGRA, NODE_LABEL_OTHER} <= values:
        report.error(
            recipe.loc("EDGEGPU_NODE_LABEL_VALUES"),
            f"EDGEGPU_NODE_LABEL_VALUES is {sorted(values)}, the deploy/k3s DaemonSets select "
            f"{NODE_LABEL_KEY} in {sorted(selected)} "
            f"(and the defaults need {NODE_LABEL_TEGRA}, {NODE_LABEL_OTHER})",
        )

    # Host mode: a value no DaemonSet selects, which keeps the NFD/GFD terms off the node too
    # (they require edgegpu.io/gpu to be absent).
    host = recipe.value("EDGEGPU_NODE_LABEL_HOST")
    if host != NODE_LABEL_HOST or host in selected:
        report.error(
            recipe.loc("EDGEGPU_NODE_LABEL_HOST"),
            f'EDGEGPU_NODE_LABEL_HOST must be "{NODE_LABEL_HOST}", a value the deploy/k3s DaemonSets '
            f"do not select (they select {sorted(selected)})",
        )
    if not manifest_label_absent_terms(repo):
        report.error(
            recipe.loc("EDGEGPU_NODE_LABEL_HOST"),
            f"the deploy/k3s DaemonSets' other node selector terms must require {NODE_LABEL_KEY} to be "
            f"absent (DoesNotExist), or a node labelled {NODE_LABEL_KEY}={NODE_LABEL_HOST} still runs a plugin",
        )

    variables = {v.VarName: clean(v.VarValueStripped) for v in recipe.variables if not v.SubItem}
    files = [expand(f, variables) for f in recipe.items("FILES", "${PN}")]
    if NODE_LABEL_DROPIN not in files:
        report.error(
            recipe.loc("FILES", "${PN}"), f"FILES:${{PN}} must hold {NODE_LABEL_DROPIN}, found {files}"
        )
    if recipe.value("ALLOW_EMPTY", "${PN}") != "1":
        report.error(
            recipe.rel, 'ALLOW_EMPTY:${PN} = "1" is needed: EDGEGPU_NODE_LABEL = "" installs nothing'
        )

    src_uri = recipe.items("SRC_URI")
    templates = []
    for entry in src_uri:
        if not entry.startswith("file://"):
            report.error(recipe.loc("SRC_URI"), f"SRC_URI {entry}: only the layer's own file:// entries")
            continue
        name = parse_url(entry)[0][len("file://") :]
        found = [
            d
            for d in (os.path.join(recipe_dir, pn), os.path.join(recipe_dir, "files"))
            if os.path.isfile(os.path.join(d, name))
        ]
        if not found:
            report.error(recipe.loc("SRC_URI"), f"SRC_URI {entry}: no such file in {pn}/ or files/")
            continue
        templates.append(found[0])
    if len(set(templates)) != 1:
        report.error(recipe.loc("SRC_URI"), "SRC_URI must fetch exactly one template of the drop-in")
        return pn

    # What the image gets: render do_install for each value and compare with the drop-in k3s
    # must see (node-label+: appends to labels set in config.yaml or earlier drop-ins).
    dropin = NODE_LABEL_DROPIN.replace("${sysconfdir}", "/etc")
    where = recipe.line_of(r"^do_install\s*\(\)")
    for label in sorted(values | {NODE_LABEL_TEGRA, NODE_LABEL_OTHER, NODE_LABEL_HOST}):
        status, installed, stderr = render_node_label(recipe, templates[0], label)
        want = {dropin: f"{NODE_LABEL_HEADER}\nnode-label+:\n  - {NODE_LABEL_KEY}={label}\n"}
        if status != 0 or installed != want:
            report.error(
                where,
                f"with EDGEGPU_NODE_LABEL = {label!r} do_install must install exactly {want}, "
                f"got exit {status}, {installed}{': ' + stderr if stderr else ''}",
            )
    status, installed, stderr = render_node_label(recipe, templates[0], "")
    if status != 0 or installed:
        report.error(
            where,
            f'with EDGEGPU_NODE_LABEL = "" do_install must install nothing, got exit {status}, {installed}',
        )
    status, installed, stderr = render_node_label(recipe, templates[0], "gpu")
    if status == 0 or "EDGEGPU_NODE_LABEL" not in stderr:
        report.error(
            where,
            "with EDGEGPU_NODE_LABEL = 'gpu' (no DaemonSet selects it) do_install must fail "
            "naming EDGEGPU_NODE_LABEL",
        )
    return pn


# ----------------------------------------------------------------------------- other files


def check_packagegroup(layer, repo, facts, report, node_label_package=None):
    path = os.path.join(layer, PACKAGEGROUP)
    if not os.path.isfile(path):
        report.error(os.path.relpath(path, repo), "missing")
        return
    group = BBFile(path, repo)
    if "packagegroup" not in group.inherits:
        report.error(group.rel, "must inherit packagegroup")
    members = group.items("RDEPENDS", "${PN}")
    where = group.loc("RDEPENDS", "${PN}")
    packaged = facts.packages | ({node_label_package} if node_label_package else set())
    for member in members:
        if member not in packaged:
            report.error(where, f"RDEPENDS on {member}, which no recipe of the layer packages")
    # The label, not just the manifests: without it the DaemonSets schedule nowhere.
    wanted = list(PROGRAM_PACKAGES.values()) + ([node_label_package] if node_label_package else [])
    for package in wanted:
        if package not in members:
            report.error(where, f"must pull in {package}")
    if "edgegpu-device-plugin-host" in members:
        report.error(where, "must not pull in the host-mode plugin (it replaces the DaemonSet)")


def check_rootfs_class(layer, repo, facts, report):
    path = os.path.join(layer, ROOTFS_CLASS)
    if not os.path.isfile(path):
        report.error(os.path.relpath(path, repo), "missing")
        return
    cls = BBFile(path, repo)
    commands = [clean(v.VarValueStripped) for v in cls.assignments("ROOTFS_POSTPROCESS_COMMAND")]
    functions = []
    for command in commands:
        # "func; " is the form both the ;-separated and whitespace-separated lists accept.
        if not re.fullmatch(r"(\w+;\s*)+", command + " "):
            report.error(
                cls.loc("ROOTFS_POSTPROCESS_COMMAND"),
                f'ROOTFS_POSTPROCESS_COMMAND entry {command!r} must look like "func; "',
            )
        functions.extend(re.findall(r"(\w+);", command))
    if not functions:
        report.error(cls.rel, "must add a function to ROOTFS_POSTPROCESS_COMMAND")
    depends = cls.flag("do_rootfs", "depends")
    wanted = f"{facts.pn}-native:do_populate_sysroot"
    if depends is None or wanted not in depends.Value:
        report.error(cls.where(depends) if depends else cls.rel, f'must set do_rootfs[depends] += "{wanted}"')
    if not facts.native:
        report.error(cls.rel, f'needs {facts.pn}-native, but the recipe has no BBCLASSEXTEND = "native"')
    if "edgegpu-node-setup" not in facts.native_bins:
        report.error(
            cls.rel, "the native recipe does not build edgegpu-node-setup (EDGEGPU_BINS:class-native)"
        )
    for function in functions:
        body = "\n".join(
            line for line in cls.function_body(function).splitlines() if not line.strip().startswith("#")
        )
        if not body:
            report.error(cls.rel, f"function {function} is not defined")
            continue
        for needle in (
            "${STAGING_BINDIR_NATIVE}/edgegpu-node-setup",
            "--root ${IMAGE_ROOTFS}",
            "--no-restart",
            "apply",
        ):
            if needle not in body:
                report.error(cls.line_of(rf"^{function}\s*\(\)"), f"{function} must run {needle!r}")


def check_bbappends(layer, repo, report):
    own_recipes = {
        os.path.basename(p)[: -len(".bb")]
        for p in glob.glob(os.path.join(layer, "**", "*.bb"), recursive=True)
    }
    for path in glob.glob(os.path.join(layer, "**", "*.bbappend"), recursive=True):
        rel = os.path.relpath(path, repo)
        name = os.path.basename(path)[: -len(".bbappend")]
        in_dynamic = os.path.relpath(path, layer).startswith("dynamic-layers" + os.sep)
        pattern = "^" + re.escape(name).replace("%", ".*").replace(r"\%", ".*") + "$"
        targets_own = any(re.match(pattern, r) for r in own_recipes)
        if not targets_own and not in_dynamic:
            report.error(
                rel,
                "appends a recipe of another layer outside dynamic-layers/: the layer would not parse without it",
            )
        text = read_text(path)
        for inc in re.findall(r"'([\w.%-]+\.inc)'", text):
            if not os.path.isfile(os.path.join(os.path.dirname(path), inc)):
                report.error(rel, f"requires {inc}, which is not next to it")
    # yocto-check-layer (INHERIT += "yocto-check-layer") fails recipes that skip QA tests or
    # give a task other than do_fetch network access.
    for suffix in ("bb", "bbappend", "bbclass", "inc"):
        for path in glob.glob(os.path.join(layer, "**", f"*.{suffix}"), recursive=True):
            for number, line in enumerate(read_text(path).splitlines(), start=1):
                code = line.split("#", 1)[0]
                if re.match(r"\s*INSANE_SKIP\b", code) or re.search(r"\w\[network\]", code):
                    report.error(
                        f"{os.path.relpath(path, repo)}:{number}",
                        "INSANE_SKIP / [network] fail yocto-check-layer",
                    )
    for path in glob.glob(os.path.join(layer, "**", "*.patch"), recursive=True):
        if not re.search(r"^Upstream-Status: \S", read_text(path), re.M):
            report.error(os.path.relpath(path, repo), "patch without a valid Upstream-Status")


def check_cargo_lock(repo, report):
    path = os.path.join(repo, "Cargo.lock")
    lock = read_toml(path, repo, report)
    if lock is None:
        return
    if lock.get("version") != 3:
        report.error(
            "Cargo.lock", f"version = {lock.get('version')}: scarthgap's cargo 1.75 reads only version 3"
        )
    for package in lock.get("package", []):
        source = package.get("source")
        if source is not None and source != "registry+https://github.com/rust-lang/crates.io-index":
            report.error(
                "Cargo.lock",
                f"{package.get('name')} {package.get('version')} comes from {source}: the recipe fetches "
                "crates.io only (git sources need git-dependency SRC_URI entries)",
            )
    locks = lock_files(repo)
    if locks != ["Cargo.lock"]:
        report.error(
            "Cargo.lock",
            f"lock files in the tree: {locks}: `bitbake -c update_crates` reads every Cargo.lock "
            "in the source tree; keep exactly one (name test fixtures otherwise)",
        )


def lock_files(repo):
    """Cargo.lock files a bitbake checkout of the repository would contain."""
    toplevel = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--show-toplevel"], capture_output=True, text=True
    )
    if toplevel.returncode == 0 and os.path.realpath(toplevel.stdout.strip()) == os.path.realpath(repo):
        tracked = subprocess.run(
            ["git", "-C", repo, "ls-files", "--", "Cargo.lock", "*/Cargo.lock"],
            capture_output=True,
            text=True,
        )
        return sorted(tracked.stdout.split())
    found = []
    for top, dirs, files in os.walk(repo):
        # Build output (target*) is never part of a checkout.
        dirs[:] = [d for d in dirs if d != ".git" and not d.startswith("target")]
        if "Cargo.lock" in files:
            found.append(os.path.relpath(os.path.join(top, "Cargo.lock"), repo))
    return sorted(found)


def check_manifests(repo, report):
    manifests = sorted(glob.glob(os.path.join(repo, "deploy", "k3s", "*.yaml")))
    if not manifests:
        report.error(
            "deploy/k3s", "no *.yaml manifests: the k3s-manifests PACKAGECONFIG would fail in do_install"
        )
        return
    jobs = []
    for path in manifests:
        text = read_text(path)
        kinds = re.findall(r"^kind:\s*(\S+)\s*$", text, re.M)
        if "Job" in kinds:
            jobs.append(path)
            # The recipe sorts whole files: a Job file must hold nothing else, or the other
            # objects would follow the devicequery-job option.
            if set(kinds) != {"Job"}:
                report.error(os.path.relpath(path, repo), f"holds a Job and other kinds {sorted(set(kinds))}")
    if not jobs:
        report.note("deploy/k3s has no Job manifest: PACKAGECONFIG devicequery-job installs nothing")


# ----------------------------------------------------------------------------- systemd


# The unit types the recipe ships (a .path or .timer unit triggers its service).
UNIT_PATTERNS = ("*.service", "*.path", "*.timer")


def system_unit_dir():
    for candidate in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        if os.path.isfile(os.path.join(candidate, "sysinit.target")):
            return candidate
    return None


def exec_binaries(unit_text):
    paths = []
    for line in unit_text.splitlines():
        match = re.match(r"^Exec(?:Start|StartPre|StartPost|Stop|StopPost|Reload)=\s*[-@:+!]*(\S+)", line)
        if match:
            paths.append(match.group(1))
    return paths


def check_units(layer, repo, facts, report, run_verify=True):
    units_dir = os.path.join(layer, os.path.dirname(RECIPE), "files")
    units = sorted(p for pattern in UNIT_PATTERNS for p in glob.glob(os.path.join(units_dir, pattern)))
    for path in units:
        rel = os.path.relpath(path, repo)
        text = read_text(path)
        package = facts.units.get(os.path.basename(path))
        for binary in exec_binaries(text):
            if not binary.startswith("/usr/bin/"):
                report.error(rel, f"runs {binary}: the recipe installs its programs in /usr/bin")
                continue
            name = binary[len("/usr/bin/") :]
            if name not in facts.bins and name not in facts.links:
                report.error(rel, f"runs {binary}, which the recipe does not build")
            elif package is not None:
                owner = facts.package_of(name)
                if owner != package and owner not in facts.rdepends.get(package, []):
                    report.error(
                        rel, f"runs {binary} from {owner}, but {package} neither ships nor RDEPENDS on it"
                    )
    if not run_verify or not units:
        return
    verify = shutil.which("systemd-analyze")
    host_units = system_unit_dir()
    if verify is None or host_units is None:
        report.error(
            "systemd-analyze", "not available (install the systemd package): cannot verify the units"
        )
        return
    with tempfile.TemporaryDirectory(prefix="edgegpu-units-") as root:
        # A scratch root: the host's unit directory (for sysinit.target & co.), our units, and
        # stub executables where the units expect the programs (verify checks they exist).
        unit_dir = os.path.join(root, "usr", "lib", "systemd", "system")
        shutil.copytree(host_units, unit_dir, symlinks=True)
        os.makedirs(os.path.join(root, "usr", "bin"), exist_ok=True)
        for name in facts.bins:
            stub = os.path.join(root, "usr", "bin", name)
            with open(stub, "w") as handle:
                handle.write("#!/bin/sh\nexit 0\n")
            os.chmod(stub, 0o755)
        # The multi-call binary's programs, as the recipe installs them: links to it.
        for link in facts.links:
            os.symlink(MULTI_CALL_BINARY, os.path.join(root, "usr", "bin", link))
        for path in units:
            shutil.copy(path, unit_dir)
        names = [os.path.basename(p) for p in units]
        result = subprocess.run(
            [verify, "verify", "--man=no", f"--root={root}", *names],
            capture_output=True,
            text=True,
        )
        output = (result.stdout + result.stderr).strip()
        # verify only warns (exit 0) about unknown keys and the like: any output is a finding.
        if result.returncode != 0 or output:
            report.error(
                os.path.relpath(units_dir, repo),
                f"systemd-analyze verify failed (exit {result.returncode}):\n    "
                + output.replace(root, "").replace("\n", "\n    "),
            )


# ----------------------------------------------------------------------------- main


def run_checks(repo, layer, strict_srcrev=False, run_verify=True):
    report = Report()
    workspace = Workspace(repo, report)
    check_layer_conf(layer, repo, report)
    check_docs(layer, repo, report)
    facts = check_recipe(layer, repo, workspace, report, strict_srcrev)
    node_label_package = check_node_label(layer, repo, workspace, report)
    check_packagegroup(layer, repo, facts, report, node_label_package)
    check_rootfs_class(layer, repo, facts, report)
    check_bbappends(layer, repo, report)
    check_cargo_lock(repo, report)
    check_manifests(repo, report)
    check_units(layer, repo, facts, report, run_verify)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=REPO_ROOT, help="repository root (default: %(default)s)")
    parser.add_argument("--layer", help="layer directory (default: <repo>/yocto/meta-edgegpu)")
    parser.add_argument(
        "--strict-srcrev",
        action="store_true",
        help="fail (not just warn) when Cargo.lock at SRCREV differs from the working tree's",
    )
    parser.add_argument("--no-systemd-verify", action="store_true", help="skip systemd-analyze verify")
    args = parser.parse_args(argv)
    repo = os.path.abspath(args.repo)
    layer = os.path.abspath(args.layer or os.path.join(repo, LAYER_REL))
    report = run_checks(repo, layer, args.strict_srcrev, not args.no_systemd_verify)
    for note in report.notes:
        print(f"note: {note}")
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for error in report.errors:
        print(f"error: {error}", file=sys.stderr)
    if report.errors:
        print(f"check_layer: {len(report.errors)} error(s)", file=sys.stderr)
        return 1
    print(f"check_layer: OK ({len(report.warnings)} warning(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
