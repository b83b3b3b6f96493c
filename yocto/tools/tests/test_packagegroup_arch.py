"""packagegroup-edgegpu's PACKAGE_ARCH, expanded by bitbake's own parser (bitbake_expand.py):
machine-specific on meta-tegra machines, allarch elsewhere; and the old layout (the override
in the tegra bbappend, after `inherit packagegroup`) shown to have no effect, so the test can
fail."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bitbake_expand  # noqa: E402

LAYER = os.path.join(os.path.dirname(__file__), "..", "..", "meta-edgegpu")
RECIPE = os.path.join("recipes-core", "packagegroups", "packagegroup-edgegpu.bb")
APPEND = os.path.join(
    "dynamic-layers", "tegra", "recipes-core", "packagegroups", "packagegroup-edgegpu.bbappend"
)
VARS = ["PACKAGE_ARCH", "MACHINE_ARCH", "RRECOMMENDS:packagegroup-edgegpu"]


def expand(layer, machine):
    return bitbake_expand.expand(os.path.join(layer, RECIPE), machine, VARS, layer)


class PackagegroupArch(unittest.TestCase):
    def test_tegra_machine_is_machine_specific(self):
        r = expand(LAYER, "tegra-machine")
        self.assertEqual(r["errors"], [])
        self.assertIn(APPEND, r["appends"])
        self.assertEqual(r["vars"]["PACKAGE_ARCH"], "tegra_machine")
        self.assertEqual(r["vars"]["PACKAGE_ARCH"], r["vars"]["MACHINE_ARCH"])
        self.assertIn("packagegroup", r["inherits"])
        self.assertNotIn("allarch", r["inherits"])
        self.assertIn("tegra-libraries-cuda", r["vars"]["RRECOMMENDS:packagegroup-edgegpu"])

    def test_other_machines_stay_allarch(self):
        r = expand(LAYER, "qemuarm64")
        self.assertEqual(r["errors"], [])
        self.assertEqual(r["vars"]["PACKAGE_ARCH"], "all")
        self.assertIn("allarch", r["inherits"])
        self.assertIsNone(r["vars"]["RRECOMMENDS:packagegroup-edgegpu"])

    def test_the_override_in_the_bbappend_has_no_effect(self):
        with tempfile.TemporaryDirectory() as tmp:
            layer = os.path.join(tmp, "meta-edgegpu")
            shutil.copytree(LAYER, layer)
            recipe = os.path.join(layer, RECIPE)
            with open(recipe) as f:
                text = f.read()
            line = 'PACKAGE_ARCH:tegra = "${MACHINE_ARCH}"\n'
            self.assertIn(line, text)
            with open(recipe, "w") as f:
                f.write(text.replace(line, ""))
            with open(os.path.join(layer, APPEND), "a") as f:
                f.write(line)
            r = expand(layer, "tegra-machine")
            self.assertEqual(r["vars"]["PACKAGE_ARCH"], "all")
            self.assertIn("allarch", r["inherits"])


@unittest.skipUnless(os.environ.get("EDGEGPU_OE_CORE"), "set EDGEGPU_OE_CORE to an oe-core checkout")
class WithRealOeCore(unittest.TestCase):
    """The same with a real oe-core checkout's classes (not available in CI)."""

    def test_tegra_and_other(self):
        oe = os.environ["EDGEGPU_OE_CORE"]
        tegra = bitbake_expand.expand(os.path.join(LAYER, RECIPE), "tegra-machine", VARS, LAYER, oe)
        self.assertEqual(tegra["vars"]["PACKAGE_ARCH"], "tegra_machine")
        self.assertNotIn("allarch", tegra["inherits"])
        other = bitbake_expand.expand(os.path.join(LAYER, RECIPE), "qemuarm64", VARS, LAYER, oe)
        self.assertEqual(other["vars"]["PACKAGE_ARCH"], "all")


if __name__ == "__main__":
    unittest.main()
