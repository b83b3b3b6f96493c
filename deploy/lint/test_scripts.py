"""Every shell script of the repository answers --help (its usage, exit 0) and refuses an
option it does not know (exit 2) before it does anything: a wrong flag must never start a
half-hour suite, a build or a chroot."""

import subprocess
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Sourced, not run.
LIBRARIES = {"scripts/lib/tools.sh", "scripts/lib/args.sh", "scripts/lib/debian.sh"}


def scripts():
    listed = subprocess.run(["git", "ls-files", "*.sh"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    # The Yocto layer's files are installed into images, not run here.
    return [s for s in listed if s not in LIBRARIES and not s.startswith("yocto/")]


def run(script, *args):
    return subprocess.run(["bash", script, *args], cwd=REPO, capture_output=True, text=True, timeout=60)


class Scripts(unittest.TestCase):
    def test_the_list_is_not_empty(self):
        self.assertGreater(len(scripts()), 15)

    def test_help_prints_the_usage(self):
        for script in scripts():
            with self.subTest(script=script):
                out = run(script, "--help")
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertRegex(out.stdout, r"(?i)usage", out.stdout)

    def test_an_unknown_option_is_refused(self):
        for script in scripts():
            with self.subTest(script=script):
                out = run(script, "--no-such-option")
                self.assertNotEqual(out.returncode, 0, out.stdout)
                self.assertIn("--no-such-option", out.stderr + out.stdout)



def mirror(apt_dir, env=None):
    return subprocess.run(["bash", "-c", '. scripts/lib/debian.sh; debian_mirror "$1"', "-", str(apt_dir)],
                          cwd=REPO, capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", **(env or {})}).stdout.strip()


class DebianMirror(unittest.TestCase):
    """The scripts fetch Debian packages from the machine's own Debian archive (a corporate
    mirror, an air-gapped host's), not a hard-coded one."""

    def test_the_machines_own_debian_archive(self):
        import tempfile
        with tempfile.TemporaryDirectory() as apt:
            apt = Path(apt)
            self.assertEqual(mirror(apt), "http://deb.debian.org/debian", "no sources: Debian's own")
            (apt / "sources.list.d").mkdir()
            (apt / "sources.list").write_text(
                "# deb http://commented.example/debian bookworm main\n"
                "deb http://archive.ubuntu.com/ubuntu noble main\n"
                "deb [signed-by=/k.gpg] http://security.debian.org/debian-security bookworm-security main\n")
            self.assertEqual(mirror(apt), "http://deb.debian.org/debian", "Ubuntu and security are not it")
            # Third-party repositories for Debian are not it: Docker's (its own key), Chrome's
            # (another path, no main Debian suite layout).
            (apt / "sources.list.d" / "docker.list").write_text(
                "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] "
                "https://download.docker.com/linux/debian bookworm stable\n")
            (apt / "sources.list.d" / "google-chrome.list").write_text(
                "deb [arch=amd64] http://dl.google.com/linux/chrome/deb/ stable main\n")
            self.assertEqual(mirror(apt), "http://deb.debian.org/debian")
            (apt / "sources.list.d" / "corp.sources").write_text(
                "Types: deb-src\nURIs: http://src.corp.example/debian\nSuites: bookworm\nComponents: main\n\n"
                "Types: deb\nURIs: https://mirror.corp.example/debian/\nSuites: bookworm bookworm-updates\n"
                "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
            self.assertEqual(mirror(apt), "https://mirror.corp.example/debian")
            # sources.list and the deb822 files come before other *.list files.
            (apt / "sources.list.d" / "local.list").write_text("deb file:///srv/debian trixie main\n")
            self.assertEqual(mirror(apt), "https://mirror.corp.example/debian")
            (apt / "sources.list").write_text("deb http://local.example/debian bookworm main contrib\n")
            self.assertEqual(mirror(apt), "http://local.example/debian")
            self.assertEqual(mirror(apt, {"EDGEGPU_DEBIAN_MIRROR": "http://override.example/debian/"}),
                             "http://override.example/debian")


if __name__ == "__main__":
    unittest.main()
