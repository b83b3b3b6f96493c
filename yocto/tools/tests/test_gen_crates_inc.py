"""Tests for scripts/gen-crates-inc.py: the exact cargo-update-recipe-crates format and the errors."""

import contextlib
import importlib.util
import io
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
FIXTURES = os.path.join(HERE, "fixtures")

spec = importlib.util.spec_from_file_location(
    "gen_crates_inc", os.path.join(REPO, "scripts", "gen-crates-inc.py")
)
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def run(*argv):
    """main() with captured stdout/stderr: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = gen.main(list(argv))
    return status, out.getvalue(), err.getvalue()


class Generate(unittest.TestCase):
    def tiny_args(self, *extra):
        return (
            "--lock",
            os.path.join(FIXTURES, "tiny.lock"),
            "--lock-name",
            "Cargo.lock",
            "--pn",
            "tiny",
            *extra,
        )

    def test_tiny_lock_gives_the_bitbake_format_byte_for_byte(self):
        # Crates.io packages only (the path and git packages are left out), Cargo.lock order,
        # both versions of windows-sys with distinct checksum keys.
        status, out, err = run(*self.tiny_args())
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(out, fixture("tiny-crates.inc"))

    def test_name_param_variant(self):
        status, out, _ = run(*self.tiny_args("--name-param"))
        self.assertEqual(status, 0)
        self.assertEqual(out, fixture("tiny-crates-name-param.inc"))

    def test_lock_name_defaults_to_path_relative_to_src_dir(self):
        status, out, _ = run("--lock", os.path.join(FIXTURES, "tiny.lock"), "--src-dir", HERE, "--pn", "tiny")
        self.assertEqual(status, 0)
        self.assertIn("# from fixtures/tiny.lock\n", out)

    def test_output_then_check_round_trip_and_stale_detection(self):
        with tempfile.TemporaryDirectory() as tmp:
            inc = os.path.join(tmp, "tiny-crates.inc")
            self.assertEqual(run(*self.tiny_args("--output", inc))[0], 0)
            with open(inc, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), fixture("tiny-crates.inc"))
            self.assertEqual(run(*self.tiny_args("--check", inc)), (0, "", ""))
            # Drop one crate from the committed file: --check must fail and show the diff.
            stale = fixture("tiny-crates.inc").replace("    crate://crates.io/memchr/2.8.3 \\\n", "")
            with open(inc, "w", encoding="utf-8") as handle:
                handle.write(stale)
            status, _, err = run(*self.tiny_args("--check", inc))
            self.assertEqual(status, 1)
            self.assertIn("+    crate://crates.io/memchr/2.8.3 \\", err)
            self.assertIn("is stale; regenerate it with", err)
            self.assertEqual(run(*self.tiny_args("--check", os.path.join(tmp, "missing.inc")))[0], 1)

    def test_repository_lock_is_readable(self):
        # The real lock must go through the strict parser (checksums, names, versions).
        with open(os.path.join(REPO, "Cargo.lock"), encoding="utf-8") as handle:
            text = handle.read()
        crates = gen.crates_io_packages("Cargo.lock", text)
        self.assertGreater(len(crates), 10)
        self.assertEqual(len(crates), len(set(crates)))


class Errors(unittest.TestCase):
    def parse(self, text):
        with self.assertRaises(gen.LockError) as caught:
            gen.crates_io_packages("x/Cargo.lock", text)
        return str(caught.exception)

    def test_missing_checksum_names_file_and_line(self):
        text = fixture("tiny.lock").replace(
            'checksum = "cf8baf1c55e62ffcace7a9f06f4bd9cd3f0c4beb022d3b367256b91b87513d98"\n', ""
        )
        message = self.parse(text)
        line = text.splitlines().index('name = "memchr"')  # the [[package]] header is the line above
        self.assertEqual(message, f"x/Cargo.lock:{line}: memchr 2.8.3: crates.io package without a checksum")

    def test_bad_checksum(self):
        message = self.parse(
            fixture("tiny.lock").replace(
                "c982642fa9e8606056828ee9a8505737230110bb1099153c79efe865c59d12ba", "nothex"
            )
        )
        self.assertIn("x/Cargo.lock:5: aho-corasick 1.1.5: checksum is not a sha256 hex digest", message)

    def test_invalid_toml_reports_line(self):
        message = self.parse('version = 3\n\n[[package]]\nname = "a\n')
        self.assertRegex(message, r"^x/Cargo.lock: not valid TOML: .*line 4")

    def test_no_crates_io_package(self):
        message = self.parse('version = 3\n\n[[package]]\nname = "local"\nversion = "0.1.0"\n')
        self.assertIn("Unable to find any candidate crates that use crates.io", message)

    def test_build_metadata_version_is_kept(self):
        # e.g. wasi 0.11.0+wasi-snapshot-preview1: the URL and checksum key keep the "+".
        text = fixture("tiny.lock").replace('version = "2.8.3"', 'version = "0.11.0+wasi-snapshot-preview1"')
        out = gen.render("tiny", [("Cargo.lock", gen.crates_io_packages("Cargo.lock", text))])
        self.assertIn("    crate://crates.io/memchr/0.11.0+wasi-snapshot-preview1 \\\n", out)
        self.assertIn("SRC_URI[memchr-0.11.0+wasi-snapshot-preview1.sha256sum] = ", out)

    def test_name_that_would_corrupt_the_inc(self):
        text = fixture("tiny.lock").replace('name = "memchr"', 'name = "mem chr"')
        self.assertIn("invalid name", self.parse(text))

    def test_unreadable_lock_exit_status(self):
        status, _, err = run("--lock", os.path.join(FIXTURES, "does-not-exist.lock"))
        self.assertEqual(status, 1)
        self.assertIn("does-not-exist.lock: cannot read", err)


if __name__ == "__main__":
    unittest.main()
