#!/usr/bin/env python3
"""Expands a meta-edgegpu recipe (with its bbappends) with bitbake's own parser and
datastore, as `bitbake -e <recipe>` would, for a chosen MACHINE, and prints the asked
variables and the inherited classes.

bitbake comes from PyPI's `bitbake-setup` wheel (which ships the `bb` package); no bitbake or
oe-core checkout is needed: bitbake-model/ holds a minimal configuration and a model of the
oe-core classes involved (bitbake-model/README.md). `--oe-core DIR` parses with a real
oe-core checkout's classes (and its `meta/lib`) instead.

Usage: bitbake_expand.py [--layer DIR] [--machine NAME] [--oe-core DIR] RECIPE.bb [VAR...]
"""
import argparse
import glob
import json
import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "bitbake-model")
DEFAULT_LAYER = os.path.join(HERE, "..", "meta-edgegpu")


def appends_for(layer, recipe):
    """The layer's bbappends for `recipe` (name_%.bbappend or name.bbappend), static and
    dynamic-layers alike (meta-tegra present)."""
    name = os.path.basename(recipe)[: -len(".bb")]
    base = name.split("_")[0]
    found = []
    for path in sorted(glob.glob(os.path.join(layer, "**", "*.bbappend"), recursive=True)):
        stem = os.path.basename(path)[: -len(".bbappend")]
        if stem == name or stem in (f"{base}_%", base):
            found.append(path)
    return found


def expand(recipe, machine, variables, layer=DEFAULT_LAYER, oe_core=None):
    """Parses `recipe` for `machine`; returns {"vars": {...}, "inherits": [...], "errors": [...]}."""
    sys.path.insert(0, os.path.join(MODEL, "stub"))
    if oe_core:
        sys.path.insert(0, os.path.join(oe_core, "meta", "lib"))
    import bb
    import bb.cookerdata
    import bb.data
    import bb.parse
    import bb.siggen
    import bb.utils

    errors = []

    class Collect(logging.Handler):
        def emit(self, record):
            errors.append(record.getMessage())

    logging.getLogger("BitBake").addHandler(Collect(level=logging.ERROR))
    d = bb.data.init()
    bbpath = [MODEL, os.path.abspath(layer)]
    if oe_core:
        # The real classes first; the model's configuration still provides bitbake.conf.
        bbpath.insert(1, os.path.join(oe_core, "meta"))
        import oe.utils  # noqa: F401  (oe-core's classes call oe.utils)
        bb.utils._context["oe"] = sys.modules["oe"]
    else:
        bbpath.insert(1, MODEL)
    d.setVar("BBPATH", ":".join(bbpath))
    d.setVar("MACHINE", machine)
    bb.parse.init_parser(d)
    d = bb.parse.handle(os.path.join(MODEL, "conf", "bitbake.conf"), d)
    d.setVar("__bbclasstype", "recipe")
    bb.parse.siggen = bb.siggen.init(d)
    appends = appends_for(layer, recipe)
    # Class event handlers (allarch's) register globally: start from none, as bitbake's
    # parser processes do for each recipe, and leave none behind.
    import bb.event

    saved = bb.event.get_handlers().copy()
    bb.event.set_handlers({})
    try:
        datastores = bb.cookerdata.CookerDataBuilder._parse_recipe(
            d.createCopy(), os.path.abspath(recipe), appends, "", "edgegpu"
        )
    finally:
        bb.event.set_handlers(saved)
    rd = datastores[""]
    inherits = sorted(
        os.path.basename(c)[: -len(".bbclass")] for c in (rd.getVar("__inherit_cache", False) or [])
    )
    return {
        "vars": {v: rd.getVar(v) for v in variables},
        "inherits": inherits,
        "appends": [os.path.relpath(a, layer) for a in appends],
        "errors": errors,
    }


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layer", default=DEFAULT_LAYER)
    parser.add_argument("--machine", default="qemuarm64")
    parser.add_argument("--oe-core", help="a real oe-core checkout whose classes to use")
    parser.add_argument("recipe")
    parser.add_argument("variables", nargs="*")
    args = parser.parse_args(argv)
    result = expand(args.recipe, args.machine, args.variables, args.layer, args.oe_core)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
