#!/usr/bin/env python3
"""Keeps the workspace's crates in layers: programs stand on libraries, never on each other.

A program crate is a workspace member with a binary target (the device plugin, the DRA driver,
the labeller, node-setup, devicequery). From `cargo metadata`:

  * no program crate depends on another program crate, in any dependency kind (normal, build
    or dev): what two programs share belongs in a library (edgegpu-node, edgegpu-host, ...);
  * no crate at all links a program crate (normal or build dependency): a library that needs a
    program's insides is a program's insides. Test crates (e2e/) may still run programs from
    their dev-dependencies.

Prints each offending edge; exit status 1 when there is any, else a one-line summary.

Usage: scripts/check-crate-graph.py [--manifest-path Cargo.toml] [--self-test]
"""

import argparse
import json
import subprocess
import sys


def members(metadata):
    """Each workspace member: (name, is_program, [(dependency, kind)] on other members)."""
    ids = set(metadata["workspace_members"])
    packages = [p for p in metadata["packages"] if p["id"] in ids]
    names = {p["name"] for p in packages}
    out = []
    for p in packages:
        is_program = any("bin" in t["kind"] for t in p["targets"])
        deps = [(d["name"], d.get("kind") or "normal") for d in p["dependencies"] if d["name"] in names]
        out.append((p["name"], is_program, deps))
    return out


def violations(metadata):
    crates = members(metadata)
    programs = {name for name, is_program, _ in crates if is_program}
    found = []
    for name, is_program, deps in crates:
        for dep, kind in deps:
            if dep not in programs or dep == name:
                continue
            if is_program:
                found.append(f"program {name} depends on program {dep} ({kind})")
            elif kind in ("normal", "build"):
                found.append(f"{name} links program {dep} ({kind})")
    return sorted(set(found)), crates


def run(manifest_path):
    text = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--manifest-path", manifest_path],
        check=True, capture_output=True, text=True).stdout
    found, crates = violations(json.loads(text))
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} edge(s) from a crate into a program crate; move what they share into a library")
        return 1
    programs = sorted(name for name, is_program, _ in crates if is_program)
    print(f"no crate imports a program crate ({len(crates)} crates; programs: {', '.join(programs)})")
    return 0


def self_test():
    def package(name, bin_target, deps):
        kinds = [["lib"]] + ([["bin"]] if bin_target else [])
        return {"id": name, "name": name, "targets": [{"kind": k} for k in kinds],
                "dependencies": [{"name": d, "kind": k} for d, k in deps]}

    def meta(*packages):
        return {"workspace_members": [p["id"] for p in packages], "packages": list(packages)}

    good = meta(package("lib", False, []),
                package("prog-a", True, [("lib", None)]),
                package("prog-b", True, [("lib", None), ("lib", "dev")]),
                package("e2e", False, [("prog-a", "dev"), ("prog-b", "dev")]),
                # not a workspace member: ignored
                )
    assert violations(good)[0] == [], violations(good)[0]
    bad = meta(package("lib", False, [("prog-a", None)]),
               package("prog-a", True, [("prog-b", None)]),
               package("prog-b", True, [("prog-a", "dev")]),
               package("e2e", False, [("prog-a", "build")]))
    assert violations(bad)[0] == [
        "e2e links program prog-a (build)",
        "lib links program prog-a (normal)",
        "program prog-a depends on program prog-b (normal)",
        "program prog-b depends on program prog-a (dev)",
    ], violations(bad)[0]
    print("self-test passed")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest-path", default="Cargo.toml")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    sys.exit(self_test() if args.self_test else run(args.manifest_path))


if __name__ == "__main__":
    main()
