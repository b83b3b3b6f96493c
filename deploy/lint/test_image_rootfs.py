"""Proves the root filesystem script the images share (deploy/image/assemble-rootfs.sh) builds
exactly each image's tree (the plugin and devicequery trees as they were when each had its own
copy of the script; node-setup's static binary with busybox and its pod script), that it rejects
bad input without leaving a half-built tree, that every Containerfile uses it for its own image,
and that deploy/image/measure-image-size.sh rejects bad arguments before it touches the network.

Run: python -m unittest discover -s deploy/lint -p 'test_*.py'  (scripts/validate-manifests.sh does)
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ASSEMBLE = REPO / "deploy" / "image" / "assemble-rootfs.sh"
MEASURE = REPO / "deploy" / "image" / "measure-image-size.sh"

TRIPLES = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
LOADERS = {"amd64": "ld-linux-x86-64.so.2", "arm64": "ld-linux-aarch64.so.1"}
NODE_SETUP_APPLETS = ["sh", "chroot", "sleep", "sed", "grep", "cat", "mkdir", "mv", "rm"]
GLIBC = ["libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libgcc_s.so.1"]


def expected_tree(arch, image):
    """The tree the per-image scripts produced before they were merged: 'f' file, 'd' directory,
    'l -> target' symlink."""
    triple, loader = TRIPLES[arch], LOADERS[arch]
    tree = {
        "/usr": "d", "/usr/bin": "d", "/usr/lib": "d", f"/usr/lib/{triple}": "d",
        f"/usr/bin/{image}": "f", "/lib": "l -> usr/lib",
    }
    tree.update({f"/usr/lib/{triple}/{lib}": "f" for lib in [loader] + GLIBC})
    if arch == "amd64":
        tree.update({"/usr/lib64": "d", f"/usr/lib64/{loader}": f"l -> ../lib/{triple}/{loader}",
                     "/lib64": "l -> usr/lib64"})
    else:
        tree[f"/usr/lib/{loader}"] = f"l -> {triple}/{loader}"
    if image == "edgegpu-node-setup":
        # Static: no libraries, busybox and the DaemonSet's pod script instead.
        tree = {"/usr": "d", "/usr/bin": "d", f"/usr/bin/{image}": "f", "/usr/bin/busybox": "f",
                "/bin": "l -> usr/bin", "/usr/share": "d", "/usr/share/edgegpu": "d",
                "/usr/share/edgegpu/node-setup-pod.sh": "f"}
        tree.update({f"/usr/bin/{applet}": "l -> busybox" for applet in NODE_SETUP_APPLETS})
        return tree
    if image == "edgegpu-device-plugin":
        # The multi-call binary, its three programs links to it.
        tree.update({"/host": "d", "/host/proc": "d", "/host/sys": "d",
                     "/host/proc/device-tree": "l -> ../sys/firmware/devicetree/base",
                     "/usr/bin/edgegpu": "f"})
        tree.update({f"/usr/bin/{program}": "l -> edgegpu" for program in MULTI_CALL_PROGRAMS})
    else:
        tree.update({"/etc": "d", "/etc/ld.so.conf.d": "d"})
    return tree


# The programs of the multi-call binary in the plugin image: the names its dispatch table
# (edgegpu/src/main.rs) answers to, each of which must be a link in the image.
MULTI_CALL_PROGRAMS = re.findall(r'installed_as: "([^"]+)"', (REPO / "edgegpu/src/main.rs").read_text())


def actual_tree(root):
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = "/" + str(path.relative_to(root))
            if path.is_symlink():
                tree[key] = f"l -> {os.readlink(path)}"
            elif path.is_dir():
                tree[key] = "d"
            else:
                tree[key] = "f"
    return tree


class AssembleRootfsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        self.binary = self.tmp / "binary"
        self.binary.write_bytes(b"\x7fELF fake binary")
        self.binary.chmod(0o644)
        # A fake Debian tree per architecture: every library the image needs (the loader as a
        # symlink, as Debian ships some of them, to prove the image gets a file), plus one it
        # does not need, to prove only the listed ones are copied.
        for arch, triple in TRIPLES.items():
            libdir = self.tmp / f"debian-{arch}" / "usr" / "lib" / triple
            libdir.mkdir(parents=True)
            for lib in GLIBC + ["libnss_files.so.2"]:
                (libdir / lib).write_text(f"{arch} {lib}\n")
            (libdir / f"{LOADERS[arch]}.real").write_text(f"{arch} loader\n")
            (libdir / LOADERS[arch]).symlink_to(f"{LOADERS[arch]}.real")
            (self.tmp / f"debian-{arch}" / "usr" / "bin").mkdir()
            (self.tmp / f"debian-{arch}" / "usr" / "bin" / "busybox").write_text(f"{arch} busybox\n")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def assemble(self, *args):
        return subprocess.run(["sh", str(ASSEMBLE), *map(str, args)], capture_output=True, text=True,
                              check=False)

    def test_each_image_gets_exactly_its_tree(self):
        self.assertTrue(MULTI_CALL_PROGRAMS, "no program in edgegpu/src/main.rs's dispatch table")
        for image in ["edgegpu-device-plugin", "devicequery", "edgegpu-node-setup"]:
            for arch, triple in TRIPLES.items():
                with self.subTest(image=image, arch=arch):
                    out = self.tmp / f"rootfs-{image}-{arch}"
                    result = self.assemble(arch, self.tmp / f"debian-{arch}", self.binary, out, image)
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.assertEqual(actual_tree(out), expected_tree(arch, image))
                    if image == "edgegpu-node-setup":
                        self.assertEqual((out / "usr/bin/busybox").read_text(), f"{arch} busybox\n")
                        self.assertEqual((out / "usr/share/edgegpu/node-setup-pod.sh").read_bytes(),
                                         (REPO / "deploy/node-setup/node-setup-pod.sh").read_bytes())
                    else:
                        loader = out / "usr" / "lib" / triple / LOADERS[arch]
                        self.assertEqual(loader.read_text(), f"{arch} loader\n")
                    binary = "edgegpu" if image == "edgegpu-device-plugin" else image
                    installed = out / "usr" / "bin" / binary
                    self.assertEqual(installed.read_bytes(), self.binary.read_bytes())
                    self.assertEqual(installed.stat().st_mode & 0o777, 0o755)

    def assert_rejected(self, args, status, message, out):
        result = self.assemble(*args)
        self.assertEqual(result.returncode, status, result.stderr)
        self.assertIn(message, result.stderr)
        self.assertFalse(out.exists(), "a rejected call must not leave a half-built tree")

    def test_bad_input_is_rejected_without_a_partial_tree(self):
        out = self.tmp / "rootfs"
        debian = self.tmp / "debian-amd64"
        self.assert_rejected(["amd64", debian, self.binary, out, "nvidia-smi"], 2,
                             "unknown IMAGE 'nvidia-smi'", out)
        self.assert_rejected(["riscv64", debian, self.binary, out, "devicequery"], 2,
                             "unsupported TARGETARCH 'riscv64'", out)
        self.assert_rejected(["amd64", debian, self.binary, out], 2, "usage:", out)
        # amd64's tree holds no arm64 libraries.
        self.assert_rejected(["arm64", debian, self.binary, out, "devicequery"], 1,
                             "ld-linux-aarch64.so.1 (is DEBIAN_ROOT a arm64 Debian tree?)", out)
        (debian / "usr" / "lib" / "x86_64-linux-gnu" / "librt.so.1").unlink()
        self.assert_rejected(["amd64", debian, self.binary, out, "edgegpu-device-plugin"], 1, "librt.so.1", out)
        self.assert_rejected(["arm64", self.tmp / "debian-arm64", self.tmp / "no-binary", out,
                              "devicequery"], 1, "missing binary", out)
        # The old call with separate labeller and DRA driver binaries: they are links now.
        self.assert_rejected(["arm64", self.tmp / "debian-arm64", self.binary, out, "edgegpu-device-plugin",
                              self.binary, self.binary], 2, "usage:", out)
        (self.tmp / "debian-arm64" / "usr" / "bin" / "busybox").unlink()
        self.assert_rejected(["arm64", self.tmp / "debian-arm64", self.binary, out, "edgegpu-node-setup"], 1,
                             "debian-arm64/usr/bin/busybox", out)

    def test_existing_out_dir_is_left_alone(self):
        out = self.tmp / "rootfs"
        out.mkdir()
        (out / "keep").write_text("mine")
        result = self.assemble("amd64", self.tmp / "debian-amd64", self.binary, out, "devicequery")
        self.assertEqual(result.returncode, 2)
        self.assertIn("already exists", result.stderr)
        self.assertEqual(actual_tree(out), {"/keep": "f"})


class ContainerfileTest(unittest.TestCase):
    def test_each_containerfile_assembles_its_own_image_with_the_shared_script(self):
        for directory, image in [("device-plugin", "edgegpu-device-plugin"), ("devicequery", "devicequery"),
                                 ("node-setup", "edgegpu-node-setup")]:
            with self.subTest(image=image):
                text = (REPO / "deploy" / directory / "Containerfile").read_text()
                self.assertIn("COPY deploy/image/assemble-rootfs.sh /assemble-rootfs.sh\n", text)
                call = re.search(r"sh /assemble-rootfs\.sh ((?:[^\\\n]|\\\n)*)", text)
                self.assertIsNotNone(call, "no assemble-rootfs.sh call")
                args = call.group(1).replace("\\\n", " ").split()
                # The plugin image is built from the multi-call binary (its programs are links).
                binary = "edgegpu" if image == "edgegpu-device-plugin" else image
                self.assertEqual(args[2:], [f'"/dist/{binary}-$rust_target"', "/rootfs", image])
                self.assertIn(f'ENTRYPOINT ["/usr/bin/{image}"]', text)


class MeasureImageSizeArgumentsTest(unittest.TestCase):
    def measure(self, *args):
        return subprocess.run(["bash", str(MEASURE), *args], capture_output=True, text=True, check=False,
                              timeout=30)

    def test_help_prints_the_usage(self):
        result = self.measure("--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("Usage: deploy/image/measure-image-size.sh IMAGE [--smoke] [DIST_DIR]", result.stdout)
        self.assertIn("devicequery (target <= 10 MB)", result.stdout)

    def test_bad_arguments_are_rejected(self):
        for args, message in [
            ([], "usage:"),
            (["nvidia-smi"], "unknown IMAGE 'nvidia-smi'"),
            (["devicequery", "--smoke"], "--smoke is only for edgegpu-device-plugin"),
            (["edgegpu-device-plugin", "--fast"], "unknown option '--fast'"),
            (["devicequery", "dist", "dist2"], "usage:"),
        ]:
            with self.subTest(args=args):
                result = self.measure(*args)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(message, result.stderr)


if __name__ == "__main__":
    unittest.main()
