#!/usr/bin/env python3
"""Finds import cycles between the modules (source files) of each workspace crate.

For every member of the root Cargo.toml's [workspace], every target (src/lib.rs, src/main.rs,
src/bin/*.rs, tests/*.rs, benches/*.rs, examples/*.rs, build.rs) is walked from its root
through its `mod` declarations (`#[path]` included). Each source file is one node; inline
modules (`mod x { ... }`) belong to their file. A file has an edge to each module it refers to:

  * `use` trees: `use crate::a::b`, `use super::x`, `use self::y`, `use child::Item`, groups
    like `use crate::{a, b::{c, d}}`;
  * paths in code: `crate::a::f()`, `super::x::T`, `self::y::Z`, `child::f()`;
  * a path names the deepest module that exists: `crate::a::b::Item` is a/b.rs (or
    a/b/mod.rs) when that module exists, else a.rs.

A module's `mod child` declaration is not an edge; its use of `child::Item` is. A child's use
of `super::Item` is an edge to its parent. So a parent and child that use each other form a
cycle. Comments and string literals are ignored, and so are a `#[cfg(test)]` module's
references to its parent (a test module may see what it tests).

Every strongly connected component of more than one file is printed with the references
that make its edges.

Folders too: under each module, every child module is collapsed with all its descendants into
one node (`effective/` stands for effective/mod.rs and every file below it), and a reference
between files under two different children is an edge between those children. A component of
more than one child, one of them a folder (a child with files of its own below it), is a folder
cycle: `detect.rs` using `effective::k3s` while `effective/runtime.rs` uses `detect`'s types
is one even though no file cycle exists. It is printed with the references that make it.

The exit status is 1 when there is any cycle, else "no cycles in N crates".

Usage: scripts/check-module-cycles.py [--root DIR] [--exclude CRATE_DIR]... [--self-test]
"""

import argparse
import io
import os
import re
import shutil
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
RAW_STRING = re.compile(r'b?r(#*)"')
CHAR_LITERAL = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]*\}|.)|[^\\'\n])'")
MOD_DECL = re.compile(
    r"((?:#\s*!?\s*\[[^\]]*\]\s*)*)"
    r"(?:pub\s*(?:\([^)]*\))?\s*)?mod\s+(" + IDENT + r")\s*([;{])"
)
USE_DECL = re.compile(r"\buse\s+([^;]*);")
# A path starting with crate, super or self (`$crate` in macros is the crate too).
ANCHORED_PATH = re.compile(
    r"(?<![A-Za-z0-9_])(crate|super|self)((?:\s*::\s*" + IDENT + r")+)"
)
# `name::x` not preceded by `::` or an identifier: a path starting with a plain name.
PLAIN_PATH = re.compile(r"(?<![A-Za-z0-9_:])(" + IDENT + r")((?:\s*::\s*" + IDENT + r")+)")
# `pub(in crate::a)` names a module for visibility, not a dependency.
VISIBILITY_IN = re.compile(r"pub\s*\(\s*in\s+[^)]*\)")
PATH_ATTR = re.compile(r'#\s*\[\s*path\s*=\s*"([^"]*)"\s*\]')
CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")


def is_ident_char(c):
    return c.isalnum() or c == "_"


def strip_source(text):
    """Returns (without_comments, code): both the same length as `text`, newlines kept.
    `without_comments` keeps string literals (for `#[path]`); `code` blanks them too."""
    nc = list(text)
    code = list(text)
    n = len(text)

    def blank(buffers, a, b):
        for buf in buffers:
            for k in range(a, b):
                if buf[k] != "\n":
                    buf[k] = " "

    i = 0
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank((nc, code), i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank((nc, code), i, j)
            i = j
        elif c in "rb" and (i == 0 or not is_ident_char(text[i - 1])) and RAW_STRING.match(text, i):
            m = RAW_STRING.match(text, i)
            close = '"' + m.group(1)
            end = text.find(close, m.end())
            end = n if end < 0 else end + len(close)
            blank((code,), m.end(), max(m.end(), end - len(close)))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank((code,), i + 1, min(j, n))
            i = j + 1
        elif c == "'":
            m = CHAR_LITERAL.match(text, i)
            if m:
                blank((nc, code), i + 1, m.end() - 1)
                i = m.end()
            else:
                i += 1  # a lifetime or label
        else:
            i += 1
    return "".join(nc), "".join(code)


def matching_brace(code, open_at):
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code)


def expand_use_tree(tree):
    """`a::{b, c::{self, d}}` -> [[a, b], [a, c], [a, c, d]]: `*` ends a path, `self` in a
    group is the group's prefix. Aliases must be gone (expand_use_tree_clean)."""
    tree = re.sub(r"\s+", "", tree)
    paths = []

    def walk(prefix, s):
        # split s at top-level commas
        parts, depth, start = [], 0, 0
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for part in parts:
            if not part:
                continue
            brace = part.find("{")
            if brace >= 0:
                head = [seg for seg in part[:brace].split("::") if seg]
                walk(prefix + head, part[brace + 1 : part.rfind("}")])
                continue
            segs = [seg for seg in part.split("::") if seg]
            if segs and segs[-1] == "*":
                segs = segs[:-1]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            paths.append(prefix + segs)

    walk([], tree)
    return paths


def expand_use_tree_clean(text):
    """Like expand_use_tree, but removes `as alias` first (which the whitespace squeeze would
    glue onto the name)."""
    text = re.sub(r"\s+as\s+" + IDENT, "", text)
    if text.startswith("::"):
        return []  # `use ::name`: an external crate
    return expand_use_tree(text)


class Module:
    def __init__(self, path, file, directory, cfg_test, span=None):
        self.path = path  # tuple of module names from the crate root
        self.file = file  # the source file this module's text is in
        self.directory = directory  # where its `mod x;` children live
        self.cfg_test = cfg_test
        self.span = span  # (start, end) in the file for an inline module
        self.children = {}  # name -> Module


class Target:
    """One crate target: its module tree and the references between its files."""

    def __init__(self, root_file):
        self.root_file = root_file
        self.modules = {}  # path tuple -> Module
        self.files = {}  # file -> (without_comments, code)
        self.file_modules = {}  # file -> [Module] (its file module and inline modules)
        self.problems = []
        root = Module((), root_file, os.path.dirname(root_file), False)
        self.add_file_module(root)

    def add_file_module(self, module):
        self.modules[module.path] = module
        if module.file in self.files:
            return
        try:
            with open(module.file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            self.problems.append(f"{module.file}: cannot read: {e}")
            return
        self.files[module.file] = strip_source(text)
        self.file_modules.setdefault(module.file, []).append(module)
        self.scan_mods(module, 0, len(text))

    def scan_mods(self, module, start, end):
        nc, code = self.files[module.file]
        pos = start
        while True:
            m = MOD_DECL.search(code, pos, end)
            if not m:
                return
            attrs = nc[m.start(1) : m.end(1)]
            name = m.group(2)
            cfg_test = bool(CFG_TEST.search(attrs))
            path = module.path + (name,)
            if m.group(3) == "{":
                close = matching_brace(code, m.end(3) - 1)
                child = Module(
                    path,
                    module.file,
                    os.path.join(module.directory, name),
                    cfg_test,
                    (m.end(3), close),
                )
                module.children[name] = child
                self.modules[path] = child
                self.file_modules[module.file].append(child)
                self.scan_mods(child, m.end(3), close)
                pos = close + 1
                continue
            pos = m.end()
            explicit = PATH_ATTR.search(attrs)
            if explicit:
                base = module.directory if module.span else os.path.dirname(module.file)
                candidates = [os.path.normpath(os.path.join(base, explicit.group(1)))]
            else:
                candidates = [
                    os.path.join(module.directory, name + ".rs"),
                    os.path.join(module.directory, name, "mod.rs"),
                ]
            found = next((c for c in candidates if os.path.isfile(c)), None)
            if found is None:
                self.problems.append(
                    f"{module.file}: `mod {name};` found none of {', '.join(candidates)}"
                )
                continue
            if os.path.basename(found) == "mod.rs":
                directory = os.path.dirname(found)
            else:
                directory = os.path.join(os.path.dirname(found), name)
            child = Module(path, found, directory, cfg_test)
            module.children[name] = child
            self.add_file_module(child)

    def file_module_path(self, file):
        """The module path of `file`'s own (non-inline) module."""
        return self.file_modules[file][0].path

    def folder_edges(self, edges):
        """{parent path: {(child, child): [(from_file, to_file)]}}: each file edge seen from the
        deepest module holding both files, between the two children of it that hold them. An
        edge between a module and one of its own descendants has no such pair (the file-level
        check sees it)."""
        found = {}
        for a, b in edges:
            pa, pb = self.file_module_path(a), self.file_module_path(b)
            k = 0
            while k < min(len(pa), len(pb)) and pa[k] == pb[k]:
                k += 1
            if k == len(pa) or k == len(pb):
                continue  # one holds the other
            found.setdefault(pa[:k], {}).setdefault((pa[k], pb[k]), []).append((a, b))
        return found

    def is_folder(self, path):
        """Whether module `path` has files of its own below it (not only its own file)."""
        return any(
            len(p) > len(path) and p[: len(path)] == path
            for p in (self.file_module_path(f) for f in self.files)
        )

    def module_at(self, file, offset):
        """The innermost module of `file` whose text holds `offset`."""
        best = None
        for module in self.file_modules[file]:
            if module.span is None:
                if best is None:
                    best = module
            elif module.span[0] <= offset <= module.span[1]:
                if best is None or best.span is None or module.span[0] >= best.span[0]:
                    best = module
        return best

    def resolve(self, module, segs):
        """The module path a reference from `module` names, or None (external or unknown)."""
        if not segs:
            return None
        if segs[0] == "crate":
            absolute = list(segs[1:])
        elif segs[0] in ("super", "self"):
            base = list(module.path)
            k = 0
            while k < len(segs) and segs[k] in ("super", "self"):
                if segs[k] == "super":
                    if not base:
                        return None
                    base.pop()
                k += 1
            absolute = base + list(segs[k:])
        elif segs[0] in module.children:
            absolute = list(module.path) + list(segs)
        else:
            return None
        # the deepest module that exists
        for cut in range(len(absolute), -1, -1):
            if tuple(absolute[:cut]) in self.modules:
                return tuple(absolute[:cut])
        return None

    def edges(self):
        """{(from_file, to_file): first (line, text)} over every file of the target."""
        found = {}
        for file, (nc, code) in self.files.items():
            code = VISIBILITY_IN.sub(lambda m: " " * len(m.group(0)), code)
            refs = []  # (offset, segments, text)
            use_spans = []
            for m in USE_DECL.finditer(code):
                use_spans.append((m.start(), m.end()))
                for segs in expand_use_tree_clean(m.group(1).strip()):
                    refs.append((m.start(), segs, "use " + "::".join(segs)))
            for m in ANCHORED_PATH.finditer(code):
                segs = [m.group(1)] + re.findall(IDENT, m.group(2))
                refs.append((m.start(), segs, "::".join(segs)))
            for m in PLAIN_PATH.finditer(code):
                if any(a <= m.start() < b for a, b in use_spans):
                    continue  # `use` trees are expanded above, with their prefixes
                segs = [m.group(1)] + re.findall(IDENT, m.group(2))
                refs.append((m.start(), segs, "::".join(segs)))
            for offset, segs, text in refs:
                module = self.module_at(file, offset)
                target = self.resolve(module, segs)
                if target is None:
                    continue
                if module.cfg_test and target == module.path[:-1]:
                    continue  # a test module may see its parent
                to_file = self.modules[target].file
                if to_file == file:
                    continue
                line = code.count("\n", 0, offset) + 1
                found.setdefault((file, to_file), (line, text))
        return found


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iterative; returns the components."""
    succ = {n: [] for n in nodes}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = 0
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            recurse = False
            for k in range(i, len(succ[node])):
                nxt = succ[node][k]
                if nxt not in index:
                    work.append((node, k + 1))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components


def workspace_members(root):
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\s*members\s*=\s*\[([^\]]*)\]", text, re.M)
    if not m:
        raise SystemExit(f"{root}/Cargo.toml: no [workspace] members")
    return re.findall(r'"([^"]+)"', m.group(1))


def target_roots(crate_dir):
    roots = []
    for name in ("src/lib.rs", "src/main.rs", "build.rs"):
        path = os.path.join(crate_dir, name)
        if os.path.isfile(path):
            roots.append(path)
    for sub in ("src/bin", "tests", "benches", "examples"):
        directory = os.path.join(crate_dir, sub)
        if not os.path.isdir(directory):
            continue
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            if entry.endswith(".rs") and os.path.isfile(path):
                roots.append(path)
            elif os.path.isfile(os.path.join(path, "main.rs")):
                roots.append(os.path.join(path, "main.rs"))
    return roots


def check(root, exclude=(), out=sys.stdout):
    """Prints the cycles of every member crate; returns (crates checked, file cycles, folder
    cycles, problems). A folder cycle is the list of its members: a child module's file, or
    its folder with a trailing `/`."""
    excluded = {os.path.normpath(e) for e in exclude}
    crates, cycles, folder_cycles, problems = 0, [], [], []
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    for member in workspace_members(root):
        if os.path.normpath(member) in excluded:
            continue
        crates += 1
        seen = set()
        for target_root in target_roots(os.path.join(root, member)):
            target = Target(target_root)
            problems.extend(target.problems)
            edges = target.edges()
            for component in strongly_connected(target.files, edges):
                if len(component) < 2 or tuple(component) in seen:
                    continue
                seen.add(tuple(component))
                cycles.append([rel(p) for p in component])
                print(f"cycle in crate {member}: {' <-> '.join(rel(p) for p in component)}", file=out)
                members = set(component)
                for (a, b), (line, text) in sorted(edges.items()):
                    if a in members and b in members:
                        print(f"  {rel(a)}:{line}: {text}  -> {rel(b)}", file=out)
            for parent, child_edges in sorted(target.folder_edges(edges).items()):

                def name(child, parent=parent):
                    module = target.modules[parent + (child,)]
                    if target.is_folder(module.path):
                        return rel(module.directory) + "/"
                    return rel(module.file)

                for component in strongly_connected(
                    {c for pair in child_edges for c in pair}, child_edges
                ):
                    if len(component) < 2:
                        continue
                    if not any(target.is_folder(parent + (c,)) for c in component):
                        continue  # only files: the file-level check reports it
                    names = sorted(name(c) for c in component)
                    if ("folder",) + tuple(names) in seen:
                        continue
                    seen.add(("folder",) + tuple(names))
                    folder_cycles.append(names)
                    print(f"folder cycle in crate {member}: {' <-> '.join(names)}", file=out)
                    members = set(component)
                    lines = []
                    for (ca, cb), pairs in child_edges.items():
                        if ca in members and cb in members:
                            for a, b in pairs:
                                line, text = edges[(a, b)]
                                lines.append((rel(a), line, text, rel(b)))
                    for a, line, text, b in sorted(lines):
                        print(f"  {a}:{line}: {text}  -> {b}", file=out)
    for problem in problems:
        print(f"warning: {problem}", file=out)
    if not cycles and not folder_cycles:
        print(f"no cycles in {crates} crates", file=out)
    return crates, cycles, folder_cycles, problems


SELF_TEST_TREE = {
    "Cargo.toml": '[workspace]\nmembers = ["a", "b", "c", "d"]\n',
    # a: x and y use each other (a `use` one way, a path in code the other); z only mentions
    # them in comments and strings; the parent module `outer` declares `inner`, which uses it.
    "a/src/lib.rs": "mod x;\nmod y;\nmod z;\npub mod outer;\n",
    "a/src/x.rs": "use crate::y::Thing;\npub struct X;\n",
    "a/src/y.rs": "pub struct Thing;\npub fn f() -> usize { std::mem::size_of::<crate::x::X>() }\n",
    "a/src/z.rs": (
        "// use crate::x::X;\n/* crate::y::Thing */\n"
        'pub const S: &str = "crate::x::X";\npub const C: char = \'"\';\n'
        "pub fn g() { let _ = crate::outer::P; }\n"
    ),
    "a/src/outer/mod.rs": (
        "mod inner;\npub struct P;\n"
        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"
    ),
    "a/src/outer/inner.rs": "use super::P;\npub struct I(P);\n",
    # b: a nested use group, super::super and a parent using its child's item.
    "b/src/lib.rs": "pub mod p;\npub mod q;\n",
    "b/src/p.rs": "use crate::{q::{self, Q}};\npub struct P;\n",
    "b/src/q/mod.rs": "pub mod r;\npub struct Q;\npub fn g() { r::h() }\n",
    "b/src/q/r.rs": "use super::super::p::P;\npub fn h() {}\n",
    # c: parent and child use each other; a test module sees its parent without a cycle.
    "c/src/lib.rs": "mod k;\nmod t;\n",
    "c/src/k.rs": "mod kid;\npub fn a() { kid::b() }\n",
    "c/src/k/kid.rs": "pub fn b() { super::a() }\n",
    "c/src/t.rs": "pub fn t() {}\n#[cfg(test)]\nmod tests;\n",
    "c/src/t/tests.rs": "use super::*;\nfn x() { super::t() }\n",
    # d: no file cycle, but folder cycles. detect.rs uses effective/k3s.rs, and
    # effective/runtime.rs uses detect.rs; mode.rs is used by both and uses neither. One level
    # down, formats/containerd/ and formats/unit.rs use each other through different files.
    "d/src/lib.rs": "mod detect;\nmod effective;\nmod formats;\nmod mode;\n",
    "d/src/mode.rs": "pub enum Mode { A }\n",
    "d/src/detect.rs": (
        "use crate::effective::k3s::K3s;\nuse crate::mode::Mode;\npub struct Inventory(K3s);\n"
    ),
    "d/src/effective/mod.rs": "pub mod k3s;\npub mod runtime;\n",
    "d/src/effective/k3s.rs": "pub struct K3s;\n",
    "d/src/effective/runtime.rs": (
        "use crate::mode::Mode;\npub fn f(_: &crate::detect::Inventory, _: Mode) {}\n"
    ),
    "d/src/formats/mod.rs": "pub mod containerd;\npub mod unit;\n",
    "d/src/formats/containerd/mod.rs": "pub mod edit;\npub mod toml;\n",
    "d/src/formats/containerd/edit.rs": "use super::super::unit::Unit;\n",
    "d/src/formats/containerd/toml.rs": "pub struct Toml;\n",
    "d/src/formats/unit.rs": "pub struct Unit(super::containerd::toml::Toml);\n",
}


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for name, text in SELF_TEST_TREE.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        for crate in ("a", "b", "c", "d"):
            with open(os.path.join(root, crate, "Cargo.toml"), "w", encoding="utf-8") as f:
                f.write(f'[package]\nname = "{crate}"\n')
        log = io.StringIO()
        crates, cycles, folder_cycles, problems = check(root, out=log)
        expected = [
            ["a/src/x.rs", "a/src/y.rs"],
            ["b/src/p.rs", "b/src/q/mod.rs", "b/src/q/r.rs"],
            ["c/src/k.rs", "c/src/k/kid.rs"],
        ]
        got = sorted(sorted(c) for c in cycles)
        assert crates == 4 and not problems, log.getvalue()
        assert got == expected, f"found {got}, expected {expected}\n{log.getvalue()}"
        # Folder cycles: b's file cycle crosses q/; d's are folder cycles only. a's x <-> y
        # (files only) and c's k.rs <-> k/kid.rs (a module and its own child) are not.
        expected_folders = [
            ["b/src/p.rs", "b/src/q/"],
            ["d/src/detect.rs", "d/src/effective/"],
            ["d/src/formats/containerd/", "d/src/formats/unit.rs"],
        ]
        got = sorted(folder_cycles)
        assert got == expected_folders, f"found {got}, expected {expected_folders}\n{log.getvalue()}"
        # Each is printed with the references (file:line) that make it.
        for line in (
            "folder cycle in crate d: d/src/detect.rs <-> d/src/effective/",
            "  d/src/detect.rs:1: use crate::effective::k3s::K3s  -> d/src/effective/k3s.rs",
            "  d/src/effective/runtime.rs:2: crate::detect::Inventory  -> d/src/detect.rs",
            "folder cycle in crate d: d/src/formats/containerd/ <-> d/src/formats/unit.rs",
            "  d/src/formats/containerd/edit.rs:1: use super::super::unit::Unit"
            "  -> d/src/formats/unit.rs",
            "  d/src/formats/unit.rs:1: super::containerd::toml::Toml"
            "  -> d/src/formats/containerd/toml.rs",
        ):
            assert line in log.getvalue().splitlines(), f"no {line!r} in\n{log.getvalue()}"
        assert "mode.rs" not in log.getvalue(), log.getvalue()
        log = io.StringIO()
        crates, cycles, folder_cycles, _ = check(root, exclude=["c", "b", "d"], out=log)
        assert crates == 1 and sorted(cycles[0]) == expected[0], log.getvalue()
        assert not folder_cycles, log.getvalue()
        # d without its folder cycles: runtime.rs takes what it needs from mode.rs, unit.rs
        # stops using containerd/.
        with open(os.path.join(root, "d/src/effective/runtime.rs"), "w", encoding="utf-8") as f:
            f.write("use crate::mode::Mode;\npub fn f(_: Mode) {}\n")
        with open(os.path.join(root, "d/src/formats/unit.rs"), "w", encoding="utf-8") as f:
            f.write("pub struct Unit;\n")
        log = io.StringIO()
        crates, cycles, folder_cycles, _ = check(root, exclude=["a", "b", "c"], out=log)
        assert not cycles and not folder_cycles, log.getvalue()
        assert "no cycles in 1 crates" in log.getvalue(), log.getvalue()
        # Without the cycle, nothing is left.
        shutil.rmtree(os.path.join(root, "b"))
        os.remove(os.path.join(root, "a/src/y.rs"))
        with open(os.path.join(root, "a/src/y.rs"), "w", encoding="utf-8") as f:
            f.write("pub struct Thing;\n")
        log = io.StringIO()
        crates, cycles, folder_cycles, _ = check(root, exclude=["b", "c", "d"], out=log)
        assert not cycles and not folder_cycles, log.getvalue()
        assert "no cycles in 1 crates" in log.getvalue(), log.getvalue()
    # Use-tree expansion on its own.
    assert expand_use_tree_clean("crate::{a, b::{self, c as d}, e::*}") == [
        ["crate", "a"],
        ["crate", "b"],
        ["crate", "b", "c"],
        ["crate", "e"],
    ], expand_use_tree_clean("crate::{a, b::{self, c as d}, e::*}")
    print("self-test passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        help="the workspace root (default: this script's repository)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="CRATE_DIR",
        help="skip this member (as written in Cargo.toml's members); repeatable",
    )
    parser.add_argument("--self-test", action="store_true", help="check the checker")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    _, cycles, folder_cycles, _ = check(args.root, args.exclude)
    return 1 if cycles or folder_cycles else 0


if __name__ == "__main__":
    sys.exit(main())
