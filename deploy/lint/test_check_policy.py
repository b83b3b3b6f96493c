"""Proves check_policy.py catches what it claims to: the real manifests pass, and each single
mutation that breaks one promised rule is reported with the matching message.

Run: python -m unittest discover -s deploy/lint -p 'test_*.py'  (scripts/validate-manifests.sh does)
"""

import copy
import shutil
import tempfile
import unittest
from pathlib import Path

import yaml

import check_policy

REPO = Path(__file__).resolve().parents[2]


def jetson(objects):
    return next(o for o in objects if o["metadata"]["name"] == "edgegpu-device-plugin-jetson")


def discrete(objects):
    return next(o for o in objects if o["metadata"]["name"] == "edgegpu-device-plugin-discrete")


def pod(ds):
    return ds["spec"]["template"]["spec"]


def container(ds):
    return pod(ds)["containers"][0]


def mount(ds, path):
    return next(m for m in container(ds)["volumeMounts"] if m["mountPath"] == path)


def volume(ds, name):
    return next(v for v in pod(ds)["volumes"] if v["name"] == name)


def with_host_proc(objects):
    """The plugin DaemonSets as the chart renders them with metrics.podGpuMemory.enabled (off in
    the static manifests): the host's /proc read-only at /host/proc in the plugin container,
    which then reads /proc/meminfo there."""
    for ds in (jetson(objects), discrete(objects)):
        pod(ds)["volumes"].append({"name": "host-proc", "hostPath": {"path": "/proc", "type": "Directory"}})
        mounts = container(ds)["volumeMounts"]
        mounts[:] = [m for m in mounts if m["mountPath"] != "/host/proc/meminfo"]
        mounts.append({"name": "host-proc", "mountPath": "/host/proc", "readOnly": True})
    return objects


def labeller_ds(objects):
    return next(o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "edgegpu-node-labeller")


def of_kind(objects, kind):
    return next(o for o in objects if o["kind"] == kind)


class PolicyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        shutil.copy(REPO / "Cargo.toml", self.tmp / "Cargo.toml")
        shutil.copytree(REPO / "plugin" / "src", self.tmp / "plugin" / "src")
        shutil.copytree(REPO / "node" / "src", self.tmp / "node" / "src")
        shutil.copytree(REPO / "apiclient" / "src", self.tmp / "apiclient" / "src")
        shutil.copytree(REPO / "platform" / "src", self.tmp / "platform" / "src")
        shutil.copytree(REPO / "host" / "src", self.tmp / "host" / "src")
        shutil.copytree(REPO / "labeller" / "src", self.tmp / "labeller" / "src")
        (self.tmp / "deploy" / "examples").mkdir(parents=True)
        for path in list((REPO / "deploy").glob("*.yaml")) + list((REPO / "deploy" / "examples").glob("*.yaml")):
            shutil.copy(path, self.tmp / path.relative_to(REPO))
        self.plugin_file = self.tmp / "deploy" / "device-plugin.yaml"
        self.objects = [d for d in yaml.safe_load_all(self.plugin_file.read_text()) if d]
        self.example_file = self.tmp / "deploy" / "examples" / "time-slicing-jetson.yaml"
        self.example = yaml.safe_load(self.example_file.read_text())

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def problems_after(self, mutate):
        objects = copy.deepcopy(self.objects)
        example = copy.deepcopy(self.example)
        mutate(objects, example)
        self.plugin_file.write_text(yaml.safe_dump_all(objects))
        self.example_file.write_text(yaml.safe_dump(example))
        return check_policy.check(self.tmp)

    def assert_reported(self, mutate, expected):
        problems = self.problems_after(mutate)
        self.assertTrue(any(expected in p for p in problems), f"expected {expected!r} in {problems}")

    def test_real_manifests_pass(self):
        self.assertEqual(check_policy.check(REPO), [])

    def test_round_trip_of_copies_passes(self):
        self.assertEqual(self.problems_after(lambda objects, example: None), [])

    def test_hostpath_type_that_creates_on_host(self):
        def mutate(objects, _):
            volume(jetson(objects), "host-sys-class")["hostPath"]["type"] = "DirectoryOrCreate"
        self.assert_reported(mutate, "has type 'DirectoryOrCreate'")

    def test_hostpath_type_typo(self):
        def mutate(objects, _):
            volume(discrete(objects), "host-dev")["hostPath"]["type"] = "Dir"
        self.assert_reported(mutate, "has type 'Dir'")

    def test_writable_host_mount(self):
        def mutate(objects, _):
            del mount(jetson(objects), "/host/sys/devices")["readOnly"]
        self.assert_reported(mutate, "host path /sys/devices must be mounted readOnly")

    def test_host_dev_without_pts_mask(self):
        def mutate(objects, _):
            container(discrete(objects))["volumeMounts"].remove(mount(discrete(objects), "/host/dev/pts"))
        self.assert_reported(mutate, "/host/dev/pts is not masked")

    def test_missing_device_plugin_dir(self):
        def mutate(objects, _):
            mount(jetson(objects), "/var/lib/kubelet/device-plugins")["readOnly"] = True
        self.assert_reported(mutate, "must be mounted read-write")

    def test_missing_ownership_dir(self):
        # Without /run/edgegpu the plugin's locks are its own, and a DRA driver on the node
        # could serve the same GPU (docs/dra.md).
        def mutate(objects, _):
            container(jetson(objects))["volumeMounts"] = [
                m for m in container(jetson(objects))["volumeMounts"] if m["mountPath"] != "/run/edgegpu"]
            pod(jetson(objects))["volumes"] = [v for v in pod(jetson(objects))["volumes"] if v["name"] != "ownership"]
        self.assert_reported(mutate, "/run/edgegpu is not mounted")

    def test_read_only_ownership_dir(self):
        def mutate(objects, _):
            mount(discrete(objects), "/run/edgegpu")["readOnly"] = True
        self.assert_reported(mutate, "/run/edgegpu (the ownership locks) must be mounted read-write at the same path")

    def test_ownership_dir_only_for_the_plugin_container(self):
        # DirectoryOrCreate is allowed for the plugin container's lock directory only.
        def mutate(objects, _):
            init = pod(jetson(objects))["initContainers"][0]
            init["volumeMounts"].append({"name": "ownership", "mountPath": "/run/edgegpu"})
        self.assert_reported(mutate, "hostPath /run/edgegpu has type 'DirectoryOrCreate'")

    def test_bad_quantity(self):
        def mutate(objects, _):
            container(jetson(objects))["resources"]["limits"]["cpu"] = "lots"
        self.assert_reported(mutate, "cpu quantity not understood")

    def test_request_above_limit(self):
        def mutate(objects, _):
            container(discrete(objects))["resources"]["requests"]["memory"] = "128Mi"
        self.assert_reported(mutate, "memory request 128Mi exceeds limit 64Mi")

    def test_missing_limit(self):
        def mutate(objects, _):
            del container(jetson(objects))["resources"]["limits"]
        self.assert_reported(mutate, "needs both a cpu request and a cpu limit")

    def test_capabilities_not_dropped(self):
        def mutate(objects, _):
            container(jetson(objects))["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}
        self.assert_reported(mutate, "capabilities.drop must be [ALL]")

    def test_capability_added(self):
        def mutate(objects, _):
            container(jetson(objects))["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
        self.assert_reported(mutate, "adds capabilities ['SYS_ADMIN']")

    def test_writable_root_filesystem(self):
        def mutate(objects, _):
            container(discrete(objects))["securityContext"]["readOnlyRootFilesystem"] = False
        self.assert_reported(mutate, "readOnlyRootFilesystem must be true")

    def test_privilege_escalation(self):
        def mutate(objects, _):
            del container(jetson(objects))["securityContext"]["allowPrivilegeEscalation"]
        self.assert_reported(mutate, "allowPrivilegeEscalation must be false")

    def test_seccomp_unconfined(self):
        def mutate(objects, _):
            container(jetson(objects))["securityContext"]["seccompProfile"]["type"] = "Unconfined"
        self.assert_reported(mutate, "seccompProfile must be RuntimeDefault")

    def test_priority_class(self):
        def mutate(objects, _):
            del pod(discrete(objects))["priorityClassName"]
        self.assert_reported(mutate, "priorityClassName must be system-node-critical")

    def test_toleration(self):
        def mutate(objects, _):
            pod(jetson(objects))["tolerations"] = []
        self.assert_reported(mutate, "needs the toleration nvidia.com/gpu Exists")

    def test_service_account_token(self):
        def mutate(objects, _):
            del pod(jetson(objects))["automountServiceAccountToken"]
        self.assert_reported(mutate, "automountServiceAccountToken must be false")

    def test_overlapping_node_selection(self):
        def mutate(objects, _):
            terms = pod(discrete(objects))["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            terms[0]["matchExpressions"][0]["values"] = ["discrete", "jetson"]
        self.assert_reported(mutate, "would run ['edgegpu-device-plugin-jetson', 'edgegpu-device-plugin-discrete']")

    def test_jetson_label_not_selected(self):
        def mutate(objects, _):
            terms = pod(jetson(objects))["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            del terms[0]
        self.assert_reported(mutate, "expected edgegpu-device-plugin-jetson")

    def test_config_map_name_mismatch(self):
        # The other Jetson examples (MPS, memory units) fill the same ConfigMap: leave one.
        for other in ("mps-jetson.yaml", "gpu-memory-jetson.yaml"):
            (self.tmp / "deploy" / "examples" / other).unlink()

        def mutate(_, example):
            example["metadata"]["name"] = "something-else"
        self.assert_reported(mutate, "no example ConfigMap edgegpu-device-plugin-jetson-config")

    def test_config_file_outside_volume(self):
        def mutate(_, example):
            example["data"]["CONFIG_FILE"] = "/etc/elsewhere/config.yaml"
        self.assert_reported(mutate, "not a mounted file")

    def test_invalid_replicas(self):
        def mutate(_, example):
            example["data"]["config.yaml"] = example["data"]["config.yaml"].replace("replicas: 4", "replicas: 1")
        self.assert_reported(mutate, "replicas must be an integer >= 2, got 1")

    def test_mps_and_memory_unit_configs(self):
        mps = "version: v1\nsharing:\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n"
        units = "version: v1\nsharing:\n  gpuMemory:\n    resources:\n      - name: nvidia.com/gpu\n"
        cases = [
            (mps.replace("replicas: 4", "replicas: 64"), "replicas must be an integer >= 2 and <= 48, got 64"),
            (mps + "        activeThreadPercentage: 0\n", "activeThreadPercentage must be an integer from 1 to 100, got 0"),
            (mps + "        pinnedDeviceMemoryLimit: 2G\n", "pinnedDeviceMemoryLimit '2G' is not a binary quantity"),
            (units.replace("  gpuMemory:\n", "  gpuMemory:\n    unit: 1.5Gi\n"), "unit '1.5Gi' is not a binary quantity"),
            (units.replace("  gpuMemory:\n", "  gpuMemory:\n    enforcement: strict\n"), "enforcement 'strict' is not auto"),
            (mps + "  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n", "must share one way"),
            (units.replace("nvidia.com/gpu", "gpu"), "resource name 'gpu' is not nvidia.com/..."),
        ]
        for text, expected in cases:
            with self.subTest(expected=expected):
                check_policy.problems.clear()
                check_policy.check_sharing_config("example", text)
                self.assertTrue(any(expected in p for p in check_policy.problems), check_policy.problems)
        for text in (mps, units):
            check_policy.problems.clear()
            check_policy.check_sharing_config("example", text)
            self.assertEqual(check_policy.problems, [])

    def test_config_volume_not_optional(self):
        def mutate(objects, _):
            volume(jetson(objects), "config")["configMap"]["optional"] = False
        self.assert_reported(mutate, "must be optional")

    def test_image_tag_drift(self):
        def mutate(objects, _):
            container(jetson(objects))["image"] = "ghcr.io/edgegpu/edgegpu-device-plugin:latest"
        self.assert_reported(mutate, "is not tagged with the workspace version")

    def test_unknown_plugin_flag(self):
        def mutate(objects, _):
            container(jetson(objects))["args"] = ["--host-root=/host"]
        self.assert_reported(mutate, "argument --host-root is not a flag of edgegpu-device-plugin")

    def test_unknown_plugin_env(self):
        def mutate(objects, _):
            container(discrete(objects))["env"].append({"name": "DISCOVERY_STRATEGY", "value": "nvml"})
        self.assert_reported(mutate, "environment variable DISCOVERY_STRATEGY is not read")

    def test_unknown_discovery_strategy(self):
        def mutate(objects, _):
            env = container(jetson(objects))["env"]
            next(e for e in env if e["name"] == "DEVICE_DISCOVERY_STRATEGY")["value"] = "jetson"
        self.assert_reported(mutate, "DEVICE_DISCOVERY_STRATEGY='jetson' is not one of")

    def test_host_path_the_plugin_reads_must_be_mounted(self):
        def mutate(objects, _):
            ds = jetson(objects)
            container(ds)["volumeMounts"].remove(mount(ds, "/host/sys/module"))
            pod(ds)["volumes"].remove(volume(ds, "host-sys-module"))
        self.assert_reported(mutate, "reads /sys/module/tegra_fuse/parameters/tegra_chip_id (node/src, host/src, platform/src) but no host mount")

    def test_host_path_must_mirror_under_host(self):
        def mutate(objects, _):
            mount(jetson(objects), "/host/sys/class")["mountPath"] = "/host/class"
        self.assert_reported(mutate, "host path /sys/class must be mounted at /host/sys/class")

    def test_token_only_for_the_labeller(self):
        def mutate(objects, _):
            container(jetson(objects))["volumeMounts"].append(
                {"name": "labeller-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                 "readOnly": True})
        self.assert_reported(mutate, "container device-plugin: mounts the service-account token")

    def test_labeller_init_container_mounts_no_more_than_the_plugin(self):
        def mutate(objects, _):
            ds = jetson(objects)
            pod(ds)["volumes"].append({"name": "host-etc", "hostPath": {"path": "/etc", "type": "Directory"}})
            pod(ds)["initContainers"][0]["volumeMounts"].append(
                {"name": "host-etc", "mountPath": "/host/etc", "readOnly": True})
        self.assert_reported(mutate, "container labels: mounts host path /etc, which the plugin itself does not")

    def test_kubelet_directories_only_in_the_plugin(self):
        def mutate(objects, _):
            pod(discrete(objects))["initContainers"][0]["volumeMounts"].append(
                {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"})
        self.assert_reported(mutate, "/var/lib/kubelet/device-plugins is for the device-plugin container only")

    def test_unknown_labeller_flag(self):
        def mutate(objects, _):
            pod(jetson(objects))["initContainers"][0]["args"].append("--labels-only")
        self.assert_reported(mutate, "argument --labels-only is not a flag of edgegpu-labeller")

    def test_pod_resources_read_only(self):
        def mutate(objects, _):
            del mount(jetson(objects), "/var/lib/kubelet/pod-resources")["readOnly"]
        self.assert_reported(mutate, "/var/lib/kubelet/pod-resources must be mounted readOnly at the same path")

    def test_metrics_port_agrees(self):
        def mutate(objects, _):
            container(discrete(objects))["ports"][0]["containerPort"] = 9401
        self.assert_reported(mutate, "METRICS_BIND_ADDRESS :9400 but the container port named metrics is 9401")

    def test_metrics_service_reaches_the_plugins(self):
        def mutate(objects, _):
            of_kind(objects, "Service")["spec"]["selector"]["app.kubernetes.io/component"] = "jetson"
        self.assert_reported(mutate, "selects ['edgegpu-device-plugin-jetson'], not every plugin DaemonSet")

    def test_cluster_role_grants_only_node_patching(self):
        def mutate(objects, _):
            of_kind(objects, "ClusterRole")["rules"][0]["verbs"].append("delete")
        self.assert_reported(mutate, "only get and patch on nodes")

    def test_node_labeller_runs_everywhere(self):
        def mutate(objects, _):
            pod(labeller_ds(objects))["affinity"] = pod(jetson(objects))["affinity"]
        self.assert_reported(mutate, "must run on every Linux node")

    def test_node_labeller_mounts_only_what_every_host_has(self):
        def mutate(objects, _):
            ds = labeller_ds(objects)
            pod(ds)["volumes"].append({"name": "release", "hostPath": {"path": "/etc/nv_tegra_release", "type": "File"}})
            container(ds)["volumeMounts"].append(
                {"name": "release", "mountPath": "/host/etc/nv_tegra_release", "readOnly": True})
        self.assert_reported(mutate, "host path /etc/nv_tegra_release: only ['/sys']")

    def test_node_labeller_is_not_root(self):
        def mutate(objects, _):
            pod(labeller_ds(objects))["securityContext"]["runAsNonRoot"] = False
        self.assert_reported(mutate, "must run as a non-root user")

    def problems_of_objects(self, mutate, **options):
        """check_objects on the static manifests changed by MUTATE, as the chart's checks call it."""
        objects = copy.deepcopy(self.objects)
        mutate(objects)
        examples = [d for p in (REPO / "deploy" / "examples").glob("*.yaml") for d in check_policy.load(p)]
        configmaps = {d["metadata"]["name"]: d for d in examples if d.get("kind") == "ConfigMap"}
        others = [d for p in (REPO / "deploy").glob("*.yaml") if p.name != "device-plugin.yaml"
                  for d in check_policy.load(p)]
        return check_policy.check_objects(REPO, objects + others, configmaps, "test", **options)

    def test_host_pid_only_with_the_helm_value(self):
        def host_pid(pick):
            return lambda objects, _=None: pod(pick(with_host_proc(objects))).update(hostPID=True)
        # The static manifests: never (they are the chart's defaults, hostPID false).
        for pick in (discrete, jetson):
            self.assert_reported(host_pid(pick), "hostPID must not be set (only the Helm value "
                                 "metrics.podGpuMemory.hostPID sets it, on the discrete DaemonSet)")
        self.assertIn("DaemonSet edgegpu-device-plugin-discrete: hostPID must not be set (only the Helm value "
                      "metrics.podGpuMemory.hostPID sets it, on the discrete DaemonSet)",
                      self.problems_of_objects(host_pid(discrete)))
        # With the value: the discrete DaemonSet, which mounts the host's /proc, may.
        self.assertEqual(self.problems_of_objects(with_host_proc, host_pid_allowed=True), [])
        self.assertEqual(self.problems_of_objects(host_pid(discrete), host_pid_allowed=True), [])
        # The Jetson one never: nvmap's PIDs are global.
        self.assertIn("DaemonSet edgegpu-device-plugin-jetson: hostPID only on the discrete DaemonSet (NVML's "
                      "per-process GPU memory; nvmap on a Jetson prints global PIDs)",
                      self.problems_of_objects(host_pid(jetson), host_pid_allowed=True))

        def without_proc(objects):
            ds = discrete(with_host_proc(objects))
            pod(ds)["hostPID"] = True
            container(ds)["volumeMounts"].remove(mount(ds, "/host/proc"))
            pod(ds)["volumes"].remove(volume(ds, "host-proc"))
        self.assertIn("DaemonSet edgegpu-device-plugin-discrete: hostPID without the host's /proc at /host/proc: "
                      "the processes NVML lists could not be attributed to pods",
                      self.problems_of_objects(without_proc, host_pid_allowed=True))

    def test_host_proc_only_in_the_plugin_container(self):
        def mutate(objects, _):
            ds = discrete(with_host_proc(objects))
            pod(ds)["initContainers"][0]["volumeMounts"].append(
                {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True})
        self.assert_reported(mutate, "container labels: the host's /proc is for the device-plugin container only")

    def test_labeller_reads_meminfo_under_the_plugins_proc(self):
        # The Jetson labeller mounts /proc/meminfo, which the plugin reads in the host's /proc
        # (metrics.podGpuMemory.enabled), or in its own /proc/meminfo mount (the default).
        self.assertEqual(mount(jetson(self.objects), "/host/proc/meminfo")["readOnly"], True)
        self.assertEqual(self.problems_after(lambda objects, _: with_host_proc(objects)), [])
        ds = jetson(with_host_proc(copy.deepcopy(self.objects)))
        labeller_paths = [volume(ds, m["name"])["hostPath"]["path"] for m in pod(ds)["initContainers"][0]["volumeMounts"]
                          if "hostPath" in volume(ds, m["name"])]
        self.assertIn("/proc/meminfo", labeller_paths)
        self.assertNotIn("/proc", labeller_paths)
        self.assertEqual(mount(ds, "/host/proc")["readOnly"], True)

    def nvmap_mount(self, objects, pick, init=False):
        ds = pick(objects)
        pod(ds)["volumes"].append({"name": "host-nvmap-iovmm",
                                   "hostPath": {"path": "/sys/kernel/debug/nvmap/iovmm", "type": "Directory"}})
        target = pod(ds)["initContainers"][0] if init else container(ds)
        target["volumeMounts"].append({"name": "host-nvmap-iovmm", "mountPath": "/host/sys/kernel/debug/nvmap/iovmm",
                                       "readOnly": True})

    def test_nvmap_debugfs_only_for_the_jetson_plugin(self):
        self.assertEqual(self.problems_after(lambda objects, _: self.nvmap_mount(objects, jetson)), [])
        self.assert_reported(lambda objects, _: self.nvmap_mount(objects, discrete),
                             "container device-plugin: /sys/kernel/debug/nvmap/iovmm (nvmap's per-process GPU memory) "
                             "is for the Jetson device-plugin container only")

        def both(objects, _):
            self.nvmap_mount(objects, jetson)
            pod(jetson(objects))["initContainers"][0]["volumeMounts"].append(
                {"name": "host-nvmap-iovmm", "mountPath": "/host/sys/kernel/debug/nvmap/iovmm", "readOnly": True})
        self.assert_reported(both, "container labels: /sys/kernel/debug/nvmap/iovmm (nvmap's per-process GPU memory) "
                             "is for the Jetson device-plugin container only")

    def test_nothing_else_of_sys_kernel(self):
        def mutate(objects, _):
            ds = jetson(objects)
            pod(ds)["volumes"].append({"name": "debugfs", "hostPath": {"path": "/sys/kernel/debug", "type": "Directory"}})
            container(ds)["volumeMounts"].append({"name": "debugfs", "mountPath": "/host/sys/kernel/debug",
                                                  "readOnly": True})
        self.assert_reported(mutate, "host path /sys/kernel/debug: nothing of /sys/kernel (debugfs; a read-only bind "
                             "mount is not recursive) but /sys/kernel/debug/nvmap/iovmm")

    def test_runtime_class_required(self):
        (self.tmp / "deploy" / "runtimeclass.yaml").unlink()
        self.assertIn("deploy/: no RuntimeClass nvidia with handler nvidia", check_policy.check(self.tmp))


if __name__ == "__main__":
    unittest.main()
