"""Tests for yocto/tools/check_layer.py: the real layer passes, and each kind of breakage fails.

Each test copies the layer and the bits of the repository it reads (Cargo manifests, Cargo.lock,
LICENSE, SECURITY.md, k3s manifests) into a scratch tree, breaks one thing and expects the error
that names it. Needs oelint-parser (installed by scripts/check-yocto.sh into .tools/yocto-venv).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))

import check_layer  # noqa: E402

LAYER = os.path.join("yocto", "meta-edgegpu")
RECIPE = os.path.join(LAYER, "recipes-containers", "edgegpu", "edgegpu_git.bb")
FILES = os.path.join(LAYER, "recipes-containers", "edgegpu", "files")
NODE_LABEL = os.path.join(LAYER, "recipes-containers", "edgegpu", "edgegpu-k3s-node-label_1.0.bb")
NODE_LABEL_TEMPLATE = os.path.join(
    LAYER, "recipes-containers", "edgegpu", "edgegpu-k3s-node-label", "50-edgegpu-node-label.yaml.in"
)
PACKAGEGROUP = os.path.join(LAYER, "recipes-core", "packagegroups", "packagegroup-edgegpu.bb")

# The node affinity in the flow style of deploy/k3s/edgegpu-device-plugin.yaml.
DAEMONSET = """apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: edgegpu-device-plugin-jetson
spec:
  template:
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: edgegpu.io/gpu, operator: In, values: [jetson]}
              - matchExpressions:
                  - {key: edgegpu.io/gpu, operator: DoesNotExist}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: edgegpu-device-plugin-discrete
spec:
  template:
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: edgegpu.io/gpu, operator: In, values: [discrete]}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: nvidia
handler: nvidia
"""
JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: devicequery
"""


class ScratchRepo:
    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="check-layer-test-")
        self.root = self.tmp.name
        shutil.copytree(os.path.join(REPO, LAYER), os.path.join(self.root, LAYER))
        for name in ("Cargo.toml", "Cargo.lock", "LICENSE", "SECURITY.md"):
            shutil.copy(os.path.join(REPO, name), os.path.join(self.root, name))
        workspace = check_layer.read_toml(os.path.join(REPO, "Cargo.toml"), REPO, check_layer.Report())
        for member in workspace["workspace"]["members"]:
            os.makedirs(os.path.join(self.root, member, "src"))
            shutil.copy(
                os.path.join(REPO, member, "Cargo.toml"), os.path.join(self.root, member, "Cargo.toml")
            )
        # The multi-call binary's dispatch table (the programs the recipe links to it).
        shutil.copy(os.path.join(REPO, check_layer.MULTI_CALL_SOURCE),
                    os.path.join(self.root, check_layer.MULTI_CALL_SOURCE))
        os.makedirs(os.path.join(self.root, "deploy", "k3s"))
        self.write("deploy/k3s/device-plugin.yaml", DAEMONSET)
        self.write("deploy/k3s/devicequery-job.yaml", JOB)

    def path(self, rel):
        return os.path.join(self.root, rel)

    def read(self, rel):
        with open(self.path(rel), encoding="utf-8") as handle:
            return handle.read()

    def write(self, rel, text):
        with open(self.path(rel), "w", encoding="utf-8") as handle:
            handle.write(text)

    def replace(self, rel, old, new, count=1):
        text = self.read(rel)
        if old not in text:
            raise AssertionError(f"{old!r} not in {rel}")
        self.write(rel, text.replace(old, new, count))

    def check(self, verify=False):
        report = check_layer.run_checks(self.root, self.path(LAYER), run_verify=verify)
        return report.errors


class CheckLayer(unittest.TestCase):
    def setUp(self):
        self.repo = ScratchRepo()
        self.addCleanup(self.repo.tmp.cleanup)

    def assertError(self, pattern, verify=False):
        errors = self.repo.check(verify)
        self.assertTrue(
            any(re.search(pattern, e) for e in errors),
            f"no error matching {pattern!r} in:\n" + "\n".join(errors),
        )

    def test_unchanged_layer_passes_including_systemd_verify(self):
        self.assertEqual(self.repo.check(verify=True), [])

    # --- layer.conf
    def test_missing_release_in_compat(self):
        self.repo.replace(f"{LAYER}/conf/layer.conf", " wrynose wrl", " wrl")
        self.assertError(r"conf/layer.conf:\d+: LAYERSERIES_COMPAT_edgegpu lacks wrynose")

    def test_layerdepends_beyond_core(self):
        self.repo.replace(
            f"{LAYER}/conf/layer.conf",
            'LAYERDEPENDS_edgegpu = "core"',
            'LAYERDEPENDS_edgegpu = "core virtualization-layer"',
        )
        self.assertError(r'LAYERDEPENDS_edgegpu must be "core" only')

    def test_unreachable_bbappend(self):
        os.makedirs(self.repo.path(f"{LAYER}/dynamic-layers/tegra/extra"))
        self.repo.write(f"{LAYER}/dynamic-layers/tegra/extra/foo.bbappend", "\n")
        self.assertError(r"foo.bbappend: not matched by BBFILES or BBFILES_DYNAMIC")

    def test_foreign_bbappend_outside_dynamic_layers(self):
        os.makedirs(self.repo.path(f"{LAYER}/recipes-containers/k3s"))
        self.repo.write(f"{LAYER}/recipes-containers/k3s/k3s_git.bbappend", "\n")
        self.assertError(r"k3s_git.bbappend: appends a recipe of another layer outside dynamic-layers/")

    # --- licence, sources, version
    def test_wrong_license_md5(self):
        self.repo.replace(
            RECIPE, "md5=3b83ef96387f14655fc854ddc3c6bd57", "md5=00000000000000000000000000000000"
        )
        # The error names the recipe line of the assignment.
        line = (
            self.repo.read(RECIPE)
            .splitlines()
            .index('LIC_FILES_CHKSUM = "file://LICENSE;md5=00000000000000000000000000000000"')
            + 1
        )
        self.assertError(
            rf"edgegpu_git.bb:{line}: LIC_FILES_CHKSUM md5 for file://LICENSE is 0{{32}}, the file's is 3b83ef96"
        )

    def test_license_file_edited(self):
        with open(self.repo.path("LICENSE"), "a", encoding="utf-8") as handle:
            handle.write("extra\n")
        self.assertError(r"LIC_FILES_CHKSUM md5 for file://LICENSE is 3b83ef96\w+, the file's is ")

    def test_autorev_rejected(self):
        srcrev = re.search(r'^SRCREV = "[0-9a-f]{40}"$', self.repo.read(RECIPE), re.M).group(0)
        self.repo.replace(RECIPE, srcrev, 'SRCREV = "${AUTOREV}"')
        self.assertError(r"SRCREV must pin a full 40-hex commit")

    def test_srcrev_must_exist_in_the_repository(self):
        # A real git repository (the scratch tree is not one): an unknown commit is an error.
        subprocess.run(["git", "init", "-q", self.repo.root], check=True)
        subprocess.run(
            [
                "git",
                "-C",
                self.repo.root,
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.org",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "init",
            ],
            check=True,
        )
        self.assertError(r"edgegpu_git.bb:\d+: SRCREV [0-9a-f]{40} is not a commit of this repository")

    def test_srcrev_lock_drift_warns_and_fails_when_strict(self):
        git = ["git", "-C", self.repo.root, "-c", "user.name=t", "-c", "user.email=t@example.org"]
        subprocess.run(["git", "init", "-q", self.repo.root], check=True)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", "all"], check=True)
        head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True)
        srcrev = re.search(r'^SRCREV = "[0-9a-f]{40}"$', self.repo.read(RECIPE), re.M).group(0)
        self.repo.replace(RECIPE, srcrev, f'SRCREV = "{head.stdout.strip()}"')
        report = check_layer.run_checks(self.repo.root, self.repo.path(LAYER), run_verify=False)
        self.assertEqual((report.errors, report.warnings), ([], []))
        # Lock edits that keep the crate set (dependency edges, layout) need no new SRCREV.
        self.repo.replace("Cargo.lock", "version = 3", "version = 3\n")
        report = check_layer.run_checks(self.repo.root, self.repo.path(LAYER), run_verify=False)
        self.assertEqual((report.errors, report.warnings), ([], []))
        # A crate upgraded after SRCREV: a warning, an error with --strict-srcrev.
        lock = self.repo.read("Cargo.lock")
        name, version = re.search(r'name = "([^"]+)"\nversion = "([^"]+)"\nsource = "registry', lock).groups()
        self.repo.replace(
            "Cargo.lock",
            f'name = "{name}"\nversion = "{version}"',
            f'name = "{name}"\nversion = "{version}9"',
        )
        report = check_layer.run_checks(self.repo.root, self.repo.path(LAYER), run_verify=False)
        self.assertEqual(report.errors, [])
        self.assertRegex(
            " ".join(report.warnings),
            rf"crates of Cargo.lock at SRCREV \w{{12}} differ .*lacks {name} {version}",
        )
        strict = check_layer.run_checks(
            self.repo.root, self.repo.path(LAYER), strict_srcrev=True, run_verify=False
        )
        self.assertRegex(
            " ".join(strict.errors),
            rf"crates of Cargo.lock at SRCREV \w{{12}} differ .*lacks {name} {version}",
        )

    def test_branch_required(self):
        self.repo.replace(RECIPE, ";branch=main", "")
        self.assertError(r"git SRC_URI must name its branch")

    def test_pv_follows_cargo_version(self):
        self.repo.replace("Cargo.toml", 'version = "0.1.0"', 'version = "0.2.0"')
        self.assertError(r"PV is \'0.1.0\+git\'; Cargo.toml says version 0.2.0")

    # --- programs, packages, units
    def test_new_workspace_binary_must_be_built(self):
        self.repo.replace(
            "devicequery/Cargo.toml",
            "[[bin]]",
            '[[bin]]\nname = "gpuinfo"\npath = "src/gpuinfo.rs"\n\n[[bin]]',
        )
        self.assertError(r"EDGEGPU_BINS is .*shipped binaries are .*gpuinfo")

    def test_every_program_of_the_multi_call_binary_is_linked(self):
        self.repo.replace(
            RECIPE,
            'EDGEGPU_MULTI_CALL_PROGRAMS = "edgegpu-device-plugin edgegpu-dra-driver edgegpu-labeller"',
            'EDGEGPU_MULTI_CALL_PROGRAMS = "edgegpu-device-plugin edgegpu-labeller"',
        )
        self.assertError(r"EDGEGPU_MULTI_CALL_PROGRAMS is .* dispatches on .*edgegpu-dra-driver")

    def test_multi_call_links_ship_with_the_binary(self):
        self.repo.replace(RECIPE, " ${bindir}/edgegpu-dra-driver", "")
        self.assertError(r"\$\{bindir\}/edgegpu-dra-driver must be in FILES:edgegpu-device-plugin only, found in \[\]")

    def test_multi_call_programs_are_installed_as_links(self):
        self.repo.replace(RECIPE, "ln -s edgegpu ${D}${bindir}/$program", "cp ${D}${bindir}/edgegpu ${D}${bindir}/$program")
        self.assertError(r"must install EDGEGPU_MULTI_CALL_PROGRAMS as links to edgegpu")

    def test_binary_in_wrong_package(self):
        self.repo.replace(
            RECIPE,
            'FILES:devicequery += "${bindir}/devicequery"',
            'FILES:devicequery += "${bindir}/devicequery ${bindir}/edgegpu-node-setup"',
        )
        self.assertError(r"\$\{bindir\}/edgegpu-node-setup must be in FILES:edgegpu-node-setup only")

    def test_systemd_service_name_without_unit_file(self):
        self.repo.replace(
            RECIPE,
            'SYSTEMD_SERVICE:edgegpu-node-setup = "edgegpu-node-setup.service ',
            'SYSTEMD_SERVICE:edgegpu-node-setup = "edgegpu-nodesetup.service ',
        )
        self.assertError(
            r"names edgegpu-nodesetup.service, but files/edgegpu-nodesetup.service does not exist"
        )
        self.assertError(r"edgegpu-node-setup.service: not named by any SYSTEMD_SERVICE")

    def test_systemd_package_not_in_packages(self):
        self.repo.replace(
            RECIPE, 'SYSTEMD_PACKAGES = "edgegpu-node-setup', 'SYSTEMD_PACKAGES = "edgegpu-setup'
        )
        self.assertError(r"SYSTEMD_PACKAGES names edgegpu-setup, which is not in PACKAGES")

    def test_bad_auto_enable(self):
        self.repo.replace(
            RECIPE,
            'SYSTEMD_AUTO_ENABLE:edgegpu-node-setup = "enable"',
            'SYSTEMD_AUTO_ENABLE:edgegpu-node-setup = "yes"',
        )
        self.assertError(r"SYSTEMD_AUTO_ENABLE:edgegpu-node-setup = 'yes' is not one of")

    def test_unit_runs_a_program_the_recipe_does_not_build(self):
        self.repo.replace(
            f"{FILES}/edgegpu-node-setup.service",
            "ExecStart=/usr/bin/edgegpu-node-setup",
            "ExecStart=/usr/bin/node-setup",
        )
        self.assertError(r"runs /usr/bin/node-setup, which the recipe does not build")

    def test_systemd_analyze_verify_catches_unknown_key(self):
        self.repo.replace(
            f"{FILES}/edgegpu-device-plugin.service", "RestartSec=5s", "RestartSec=5s\nRestartSecs=5s"
        )
        self.assertError(r"systemd-analyze verify failed .*\n.*Unknown key 'RestartSecs'", verify=True)

    def test_fetched_file_never_installed(self):
        self.repo.replace(
            RECIPE,
            "    install -m 0644 ${EDGEGPU_UNPACKDIR}/edgegpu-node-setup.default "
            "${D}${sysconfdir}/default/edgegpu-node-setup\n",
            "",
        )
        self.assertError(r"edgegpu-node-setup.default is fetched but do_install never installs it")

    def test_insane_skip_rejected(self):
        self.repo.replace(
            RECIPE,
            'BBCLASSEXTEND = "native"',
            'BBCLASSEXTEND = "native"\nINSANE_SKIP:devicequery = "ldflags"',
        )
        self.assertError(r"edgegpu_git.bb:\d+: INSANE_SKIP / \[network\] fail yocto-check-layer")

    def test_undeclared_packageconfig(self):
        self.repo.replace(RECIPE, 'PACKAGECONFIG[devicequery-job] = ""\n', "")
        self.assertError(r"PACKAGECONFIG option 'devicequery-job' is used but not declared")

    # --- packagegroup, class, docs, lock, manifests
    def test_packagegroup_names_unknown_package(self):
        self.repo.replace(PACKAGEGROUP, "devicequery \\", "devicequery-tools \\")
        self.assertError(r"RDEPENDS on devicequery-tools, which no recipe of the layer packages")

    # --- the k3s node-label recipe
    def test_packagegroup_must_pull_in_node_label(self):
        self.repo.replace(PACKAGEGROUP, "                  edgegpu-k3s-node-label \\\n", "")
        self.assertError(r"packagegroup-edgegpu.bb:\d+: must pull in edgegpu-k3s-node-label")

    def test_node_label_recipe_missing(self):
        os.unlink(self.repo.path(NODE_LABEL))
        self.assertError(r"edgegpu-k3s-node-label_1.0.bb: missing")
        # ... and the packagegroup then depends on a package nobody builds.
        self.assertError(r"RDEPENDS on edgegpu-k3s-node-label, which no recipe of the layer packages")

    def test_node_label_must_be_machine_specific(self):
        self.repo.replace(NODE_LABEL, 'PACKAGE_ARCH = "${MACHINE_ARCH}"', "inherit allarch")
        self.assertError(r'PACKAGE_ARCH must be "\$\{MACHINE_ARCH\}"')
        self.assertError(r"edgegpu-k3s-node-label_1.0.bb:\d+: must not inherit allarch")

    def test_node_label_common_license_md5(self):
        self.repo.replace(
            NODE_LABEL, "md5=89aea4e17d99a7cacdbeed46a0096b10", "md5=3b83ef96387f14655fc854ddc3c6bd57"
        )
        self.assertError(
            r"LIC_FILES_CHKSUM must be "
            r"\"file://\$\{COMMON_LICENSE_DIR\}/Apache-2.0;md5=89aea4e17d99a7cacdbeed46a0096b10\""
        )

    def test_node_label_default_follows_the_machine(self):
        self.repo.replace(NODE_LABEL, "'jetson' if 'tegra'", "'discrete' if 'tegra'")
        self.assertError(r'EDGEGPU_NODE_LABEL must default weakly \(\?=\) to "jetson" where MACHINEOVERRIDES')

    def test_node_label_default_must_be_weak(self):
        self.repo.replace(NODE_LABEL, "EDGEGPU_NODE_LABEL ?= ", "EDGEGPU_NODE_LABEL = ")
        self.assertError(r"EDGEGPU_NODE_LABEL must default weakly")

    def test_node_label_values_follow_the_daemonsets(self):
        # A DaemonSet renamed its label value: the recipe would label nodes nobody selects.
        self.repo.write(
            "deploy/k3s/device-plugin.yaml",
            DAEMONSET.replace("values: [discrete]}\n---", "values: [dgpu]}\n---"),
        )
        self.assertError(
            r"EDGEGPU_NODE_LABEL_VALUES is \['discrete', 'jetson'\], the deploy/k3s DaemonSets select "
            r"edgegpu.io/gpu in \['dgpu', 'jetson'\]"
        )

    def test_node_label_host_value_is_selected_by_no_daemonset(self):
        # Host mode: a value a DaemonSet selects would give the node a second plugin.
        self.repo.replace(NODE_LABEL, 'EDGEGPU_NODE_LABEL_HOST = "host"', 'EDGEGPU_NODE_LABEL_HOST = "jetson"')
        self.assertError(r'EDGEGPU_NODE_LABEL_HOST must be "host", a value the deploy/k3s DaemonSets do not select')

    def test_node_label_host_needs_the_other_terms_to_require_no_label(self):
        # A term that selects by NFD's labels unless edgegpu.io/gpu is jetson runs a plugin on a
        # node labelled host.
        self.repo.write(
            "deploy/k3s/device-plugin.yaml",
            DAEMONSET.replace("operator: DoesNotExist}", "operator: NotIn, values: [discrete]}"),
        )
        self.assertError(r"other node selector terms must require edgegpu.io/gpu to be absent \(DoesNotExist\)")

    def test_node_label_template_must_append(self):
        # "node-label:" would replace the labels of config.yaml instead of adding to them.
        self.repo.replace(NODE_LABEL_TEMPLATE, "node-label+:", "node-label:")
        self.assertError(
            r"with EDGEGPU_NODE_LABEL = 'discrete' do_install must install exactly .*node-label\+:"
        )
        self.assertError(r"with EDGEGPU_NODE_LABEL = 'jetson' do_install must install exactly")

    def test_node_label_dropin_path(self):
        self.repo.replace(NODE_LABEL, '/50-edgegpu-node-label.yaml"', '/edgegpu-node-label.yml"')
        self.assertError(r"FILES:\$\{PN\} must hold \$\{sysconfdir\}/rancher/k3s/config.yaml.d/50-edgegpu")
        self.assertError(r"do_install must install exactly \{'/etc/rancher/k3s/config.yaml.d/50-edgegpu")

    def test_node_label_unknown_value_must_fail_the_build(self):
        # A do_install that accepts any value: a typo would label the node for no DaemonSet.
        self.repo.replace(NODE_LABEL, 'case " ${EDGEGPU_NODE_LABEL_VALUES} ${EDGEGPU_NODE_LABEL_HOST} " in', 'case " $label " in')
        self.assertError(r"with EDGEGPU_NODE_LABEL = 'gpu' .* do_install must fail")

    def test_node_label_empty_installs_nothing(self):
        self.repo.replace(NODE_LABEL, '    [ -n "$label" ] || return 0\n', "")
        self.assertError(r'with EDGEGPU_NODE_LABEL = "" do_install must install nothing')

    def test_rootfs_class_without_no_restart(self):
        self.repo.replace(f"{LAYER}/classes/edgegpu_node_setup_rootfs.bbclass", "--no-restart \\", "\\")
        self.assertError(r"edgegpu_node_setup_rootfs must run '--no-restart'")

    def test_rootfs_class_needs_native_variant(self):
        self.repo.replace(RECIPE, 'BBCLASSEXTEND = "native"', "")
        self.assertError(r'no BBCLASSEXTEND = "native"')

    def test_readme_requirements(self):
        self.repo.replace(
            f"{LAYER}/README.md",
            "Maintainer: edgegpu maintainers <maintainers@edgegpu.dev>",
            "See the README.",
        )
        self.assertError(r"contains the word 'README'")

    def test_lockfile_v4_rejected(self):
        self.repo.replace("Cargo.lock", "version = 3", "version = 4")
        self.assertError(r"version = 4: scarthgap's cargo 1.75 reads only version 3")

    def test_git_dependency_rejected(self):
        self.repo.replace(
            "Cargo.lock",
            'source = "registry+https://github.com/rust-lang/crates.io-index"',
            'source = "git+https://example.org/x.git#0123456789abcdef0123456789abcdef01234567"',
        )
        self.assertError(r"comes from git\+https://example.org/x.git")

    def test_second_lock_file_in_tree(self):
        os.makedirs(self.repo.path("tests/fixtures"))
        shutil.copy(self.repo.path("Cargo.lock"), self.repo.path("tests/fixtures/Cargo.lock"))
        self.assertError(r"lock files in the tree: \['Cargo.lock', 'tests/fixtures/Cargo.lock'\]")

    def test_job_file_with_other_kinds(self):
        self.repo.write("deploy/k3s/devicequery-job.yaml", JOB + "---\n" + DAEMONSET)
        self.assertError(r"devicequery-job.yaml: holds a Job and other kinds")

    def test_no_manifests(self):
        for name in os.listdir(self.repo.path("deploy/k3s")):
            os.unlink(self.repo.path(f"deploy/k3s/{name}"))
        self.assertError(r"deploy/k3s: no \*.yaml manifests")


if __name__ == "__main__":
    unittest.main()
