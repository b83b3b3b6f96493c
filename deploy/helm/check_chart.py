#!/usr/bin/env python3
"""Checks the Helm chart deploy/helm/edgegpu with a real helm 3 (scripts/install-helm.sh):

  * `helm lint --strict`, with the default values and with every values set of the matrix;
  * `helm template` over the matrix (defaults, Jetson only, discrete only, time-slicing config,
    MIG strategy and the plugin flags, nodeSetup on, MPS on (the companion DaemonSet, its
    directory, binary and node selectors, MPS and memory-unit configs), a replaced affinity, a
    custom GPU taint,
    Rancher's global values, a values file shaped like NVIDIA's chart's, another release name
    and namespace, and the values.yaml of every NVIDIA chart release, deploy/helm/nvidia-values/,
    with the keys NVIDIA has proposed since): every rendered object valid for the oldest (1.25) and newest Kubernetes
    kubernetes-validate bundles (strict: unknown fields are errors), deploy/lint/check_policy.py's
    rules on the rendered objects, and what each case changes, asserted;
  * the admission policies (Kubernetes 1.30+): rendered only where the API exists, valid, and
    their CEL evaluated (cel-python) against the requests they must admit and refuse;
  * the `helm test` Jobs: devicequery, and with MPS the limits probe (devicequery --check-limits);
  * bad values stop `helm template` with the message a user would read (schema, cross-value
    and config-file checks, NVIDIA values edgegpu cannot honour);
  * Rancher: the catalog annotations Rancher's chart tooling requires, the icon, and
    questions.yaml naming real values with exactly their defaults and only options the schema
    accepts;
  * the k3s HelmChart (deploy/k3s/helmchart/edgegpu.yaml) embeds exactly this chart: its
    chartContent, decoded and rendered by helm, gives what the chart directory gives.
  * docs/helm.md's table of what the chart installs lists every object it renders (every
    option on, the 1.30+ admission API served).
  * the DRA driver (dra.*): off by default; on, its DaemonSets never share a node with a plugin
    DaemonSet (node by node with edgegpu.io/allocator=dra, or every GPU node), its objects are
    valid for the oldest release serving their resource.k8s.io version (1.32 for v1beta1, 1.33
    for v1beta2, 1.34 for v1) and the newest, its DeviceClasses rendered in the version each
    release 1.32-1.34 serves, its admission
    policy's CEL and the DeviceClasses' and examples' selectors evaluated (cel-python) against
    sample requests and devices.

Run: python deploy/helm/check_chart.py  (scripts/validate-manifests.sh does, in its venv)
Env: HELM (default .tools/helm/bin/helm).
"""

import base64
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from xml.etree import ElementTree

import celpy
import yaml
from kubernetes_validate import utils as kubernetes_validate

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "edgegpu"
HELMCHART = REPO / "deploy" / "k3s" / "helmchart" / "edgegpu.yaml"
HELM = os.environ.get("HELM") or str(REPO / ".tools" / "helm" / "bin" / "helm")
OLDEST_KUBERNETES = "1.25"
# resource.k8s.io is served from Kubernetes 1.32 (v1beta1), v1beta2 from 1.33, v1 from 1.34.
OLDEST_DRA_KUBERNETES = "1.32"
OLDEST_RESOURCE_VERSION = {"resource.k8s.io/v1beta1": "1.32", "resource.k8s.io/v1beta2": "1.33",
                           "resource.k8s.io/v1": "1.34"}
NEWEST_KUBERNETES = kubernetes_validate.latest_version()

sys.path.insert(0, str(REPO / "deploy" / "lint"))
import check_policy  # noqa: E402

VERSION = check_policy.workspace_version(REPO)

JETSON_CONFIG = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""
DISCRETE_CONFIG = """version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: 2
"""
MPS_CONFIG = """version: v1
sharing:
  mps:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
        pinnedDeviceMemoryLimit: 2Gi
"""
GPU_MEMORY_CONFIG = """version: v1
sharing:
  gpuMemory:
    unit: 512Mi
    resources:
      - name: nvidia.com/gpu
"""
# Exactly the values Rancher adds to every chart it installs (the global.cattle block and
# global.systemDefaultRegistry of Rancher's chart install action), with a system default
# registry set as on an air-gapped Rancher.
RANCHER_REGISTRY = "registry.example.com:5000"
RANCHER_GLOBALS = {"global": {
    "cattle": {"clusterId": "c-m-7x2k9", "clusterName": "edge-fleet", "systemDefaultRegistry": RANCHER_REGISTRY,
               "systemProjectId": "p-abcde", "url": "https://rancher.example.com", "rkePathPrefix": "",
               "rkeWindowsPathPrefix": ""},
    "systemDefaultRegistry": RANCHER_REGISTRY}}
# A values file shaped like `helm get values --all` of NVIDIA's nvidia-device-plugin chart with
# its defaults (every top-level key it documents), the image already changed to edgegpu's:
# what a user migrating brings along. Written from the value names of NVIDIA's chart.
NVIDIA_TOLERATIONS = [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                      {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
NVIDIA_SHAPED_VALUES = {
    "config": {"name": "", "map": {}, "default": "", "fallbackStrategies": ["named", "single"]},
    "compatWithCPUManager": None, "migStrategy": None, "failOnInitError": None, "deviceListStrategy": None,
    "deviceIDStrategy": None, "nvidiaDriverRoot": None, "gdrcopyEnabled": None, "gdsEnabled": None,
    "mofedEnabled": None, "deviceDiscoveryStrategy": None,
    "nameOverride": "", "fullnameOverride": "", "namespaceOverride": "", "selectorLabelsOverride": {},
    "allowDefaultNamespace": False, "imagePullSecrets": [],
    "image": {"repository": "ghcr.io/edgegpu/edgegpu-device-plugin", "pullPolicy": "IfNotPresent", "tag": ""},
    "updateStrategy": {"type": "RollingUpdate"}, "podAnnotations": {}, "podSecurityContext": {},
    "securityContext": {}, "resources": {}, "nodeSelector": {},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                               "values": ["true"]}]},
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id", "operator": "In",
                               "values": ["NVIDIA"]}]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}},
    "tolerations": NVIDIA_TOLERATIONS, "priorityClassName": "system-node-critical", "runtimeClassName": None,
    "devicePlugin": {"enabled": True},
    "gfd": {"enabled": False, "nameOverride": "gpu-feature-discovery", "namespaceOverride": "", "noTimestamp": None,
            "sleepInterval": None, "securityContext": {"privileged": True}},
    "nfd": {"nameOverride": "node-feature-discovery",
            "master": {"serviceAccount": {"name": "node-feature-discovery", "create": True},
                       "config": {"extraLabelNs": ["nvidia.com"]}},
            "worker": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                        "effect": "NoSchedule"}],
                       "config": {"sources": {"pci": {"deviceClassWhitelist": ["02", "03"],
                                                      "deviceLabelFields": ["vendor"]}}}}},
    "mps": {"root": "/run/nvidia/mps", "enableHostPID": True},
    "cdi": {"nvidiaHookPath": None, "featureFlags": None},
}
# NVIDIA's chart values as its releases ship them (deploy/helm/nvidia-values/README.md).
NVIDIA_RELEASED = sorted((REPO / "deploy" / "helm" / "nvidia-values").glob("v*.yaml"),
                         key=lambda p: [int(n) for n in re.findall(r"\d+", p.stem)])
# NVIDIA's keys that change nothing here, at the values the chart accepts (docs/helm.md section
# 4 says why for each); every other key of NVIDIA's is edgegpu's too, with its meaning.
NVIDIA_NO_EFFECT = {"legacyDaemonsetAPI", "nvidiaDriverRoot", "gdrcopyEnabled", "gdsEnabled", "mofedEnabled",
                    "deviceDiscoveryStrategy", "selectorLabelsOverride", "allowDefaultNamespace",
                    "podSecurityContext", "securityContext", "gfd", "nfd", "cdi", "componentSelectorLabels"}
ORIN_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "example.com/board", "operator": "In", "values": ["orin"]}]}]}}}


def helm(*args, values=None):
    """Runs helm; VALUES (a dict) is passed as a values file."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(values or {}, file)
        file.flush()
        return subprocess.run([HELM, *args, "-f", file.name], capture_output=True, text=True)


def render(values=None, release="edgegpu", namespace="kube-system", chart=CHART, extra=()):
    result = helm("template", release, str(chart), "--namespace", namespace, *extra, values=values)
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def of_kind(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def plugins(docs):
    """The device-plugin DaemonSets (not the node labeller or node setup)."""
    return {n: d for n, d in of_kind(docs, "DaemonSet").items()
            if d["metadata"]["labels"]["app.kubernetes.io/name"] == "edgegpu-device-plugin"}


def pod(ds):
    return ds["spec"]["template"]["spec"]


def env(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def images(docs):
    """Every container image of every workload, test Job included."""
    return [c["image"] for d in docs if d["kind"] in ("DaemonSet", "Job")
            for c in pod(d)["containers"] + (pod(d).get("initContainers") or [])]


def host_pid_value(values):
    """Whether VALUES set metrics.podGpuMemory.hostPID (the one value that may put a plugin in the
    host's PID namespace; check_policy forbids it otherwise)."""
    return bool(((values or {}).get("metrics") or {}).get("podGpuMemory", {}).get("hostPID"))


def mounts(container):
    """A container's mounts by path: (volume name, readOnly)."""
    return {m["mountPath"]: (m["name"], bool(m.get("readOnly"))) for m in container.get("volumeMounts") or []}


def writable(container, path):
    """Whether CONTAINER may write PATH (a path in the container): the deepest mount at or above
    it decides (the runtime mounts parents first: containerd's WithMounts sorts them by depth),
    else the container's own root filesystem."""
    covering = [m for m in container.get("volumeMounts") or []
                if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    if not covering:
        return not (container.get("securityContext") or {}).get("readOnlyRootFilesystem")
    return not max(covering, key=lambda m: len(m["mountPath"])).get("readOnly")


def writable_host_paths(ds, container, root):
    """The host paths at or inside ROOT that CONTAINER of DaemonSet DS mounts read-write."""
    paths = host_paths(ds)
    return sorted(paths[m["name"]][0] for m in container.get("volumeMounts") or []
                  if m["name"] in paths and not m.get("readOnly")
                  and (paths[m["name"]][0] == root or paths[m["name"]][0].startswith(root + "/")))


def host_paths(ds):
    """A pod's hostPath volumes by name: (path, type)."""
    return {v["name"]: (v["hostPath"]["path"], v["hostPath"].get("type")) for v in pod(ds)["volumes"] if "hostPath" in v}


def schema_errors(docs):
    errors = []
    for doc in docs:
        # The DRA driver's objects exist only on 1.32+ (the chart refuses dra.enabled below):
        # its DaemonSets use fields of that era (recursiveReadOnly, beta in 1.31); a
        # resource.k8s.io object is checked from the first release serving its version.
        dra_era = doc["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "edgegpu-dra-driver"
        oldest = OLDEST_RESOURCE_VERSION.get(
            doc["apiVersion"], OLDEST_DRA_KUBERNETES if dra_era else OLDEST_KUBERNETES)
        for version in (oldest, NEWEST_KUBERNETES):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(p) for p in error.path)
                errors.append(f"{doc['kind']}/{doc['metadata']['name']} on {version}: {path}: {error.message}")
    return errors


class Matrix(unittest.TestCase):
    """Each good values set: lint, schema-valid for both Kubernetes ends, policy, its own effect."""

    def render_checked(self, values, release="edgegpu", namespace="kube-system", documented_labels=True):
        lint = helm("lint", "--strict", str(CHART), "--namespace", namespace, values=values)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        docs = render(values, release, namespace)
        self.assertEqual(schema_errors(docs), [])
        configmaps = of_kind(docs, "ConfigMap")
        problems = check_policy.check_objects(
            REPO, [d for d in docs if "helm.sh/hook" not in d["metadata"].get("annotations", {})],
            configmaps, where=f"helm template ({values})", namespace=namespace, configmap_required=False,
            documented_labels=documented_labels, host_pid_allowed=host_pid_value(values))
        self.assertEqual(problems, [])
        return docs

    def test_defaults(self):
        # That they are the static manifests (minus Helm's own keys) is deploy/generate.py
        # --check, which generates those from this rendering.
        docs = self.render_checked({})
        self.assertEqual(sorted(of_kind(docs, "DaemonSet")),
                         ["edgegpu-device-plugin-discrete", "edgegpu-device-plugin-jetson", "edgegpu-node-labeller"])
        runtime_class = of_kind(docs, "RuntimeClass")["nvidia"]
        # helm uninstall leaves it: GPU pods name it (docs/helm.md, "The RuntimeClass").
        self.assertEqual(runtime_class["metadata"]["annotations"], {"helm.sh/resource-policy": "keep"})
        self.assertEqual(list(of_kind(docs, "Service")), ["edgegpu-metrics"])
        self.assertEqual(list(of_kind(docs, "ClusterRole")), ["edgegpu-node-labeller"])
        job = of_kind(docs, "Job")["edgegpu-devicequery"]
        self.assertEqual(job["metadata"]["annotations"]["helm.sh/hook"], "test")
        # The limits probe only with MPS (or devicequery.checkLimits).
        self.assertEqual(list(of_kind(docs, "Job")), ["edgegpu-devicequery"])
        self.assertEqual(of_kind(docs, "ConfigMap"), {})

    def test_selectors_are_those_of_the_static_manifests_for_any_release(self):
        # A selector is immutable: Helm can take over the kubectl-applied DaemonSets only if
        # its selectors are theirs (docs/helm.md, "From the static manifests").
        static = {d["metadata"]["name"]: d["spec"]["selector"]
                  for d in yaml.safe_load_all((REPO / "deploy" / "device-plugin.yaml").read_text())
                  if d and d["kind"] == "DaemonSet"}
        for release in ("edgegpu", "gpu"):
            daemonsets = of_kind(render(release=release), "DaemonSet")
            # Another release name prefixes the DaemonSets' names (gpu-edgegpu-device-plugin-jetson).
            rendered = {n if release == "edgegpu" else n.removeprefix(f"{release}-"): ds["spec"]["selector"]
                        for n, ds in daemonsets.items()}
            self.assertEqual(rendered, static, release)

    def test_jetson_only(self):
        docs = self.render_checked({"devicePlugin": {"discrete": {"enabled": False}}})
        self.assertEqual(list(plugins(docs)), ["edgegpu-device-plugin-jetson"])

    def test_discrete_only_with_runtime_class(self):
        docs = self.render_checked({"devicePlugin": {"jetson": {"enabled": False}}, "runtimeClassName": "nvidia"})
        daemonsets = plugins(docs)
        self.assertEqual(list(daemonsets), ["edgegpu-device-plugin-discrete"])
        self.assertEqual(pod(daemonsets["edgegpu-device-plugin-discrete"])["runtimeClassName"], "nvidia")

    def test_time_slicing_config_map(self):
        values = {"config": {"map": {"orin": JETSON_CONFIG, "servers": DISCRETE_CONFIG}, "default": "servers"},
                  "devicePlugin": {"jetson": {"config": "orin"}}}
        docs = self.render_checked(values)
        configmaps = of_kind(docs, "ConfigMap")
        jetson = configmaps["edgegpu-device-plugin-jetson-config"]
        discrete = configmaps["edgegpu-device-plugin-discrete-config"]
        self.assertEqual(jetson["data"]["CONFIG_FILE"], "/etc/edgegpu-device-plugin/config.yaml")
        self.assertEqual(yaml.safe_load(jetson["data"]["config.yaml"]), yaml.safe_load(JETSON_CONFIG))
        self.assertEqual(yaml.safe_load(discrete["data"]["config.yaml"]), yaml.safe_load(DISCRETE_CONFIG))
        # A changed config rolls the pods: the checksum differs per config.
        daemonsets = plugins(docs)
        checksums = {n: ds["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                     for n, ds in daemonsets.items()}
        self.assertEqual(len(set(checksums.values())), 2, checksums)

    def test_config_entries_the_plugin_accepts(self):
        """What the plugin reads with NVIDIA's rules the chart lets through: no version, keys of
        the top level, flags and sharing in any case, short resource names, every MIG strategy,
        JSON. The plugin accepts each of these (plugin/tests/config.rs, NVIDIA_SHAPED)."""
        entries = [
            "",
            "# nothing set yet\n",
            "{}",
            "version: null\n",
            "flags:\n  plugin:\n    deviceIDStrategy: index\n",
            "version: v1\nflags:\n  migStrategy: single\n",
            "version: v1\nflags:\n  migStrategy: mixed\n",
            "Version: v1\nFlags:\n  MigStrategy: mixed\n  FailOnInitError: yes\n",
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 3\n",
            "Sharing:\n  TimeSlicing:\n    resources:\n    - name: mig-1g.5gb\n      replicas: 2\n",
            '{"sharing": {"timeSlicing": {"resources": [{"name": "gpu", "replicas": 2}]}}}',
        ]
        # Two entries per render: one per plugin DaemonSet.
        for first, second in zip(entries[::2], entries[1::2] + [entries[0]]):
            values = {"config": {"map": {"a": first, "b": second}, "default": "a"},
                      "devicePlugin": {"discrete": {"config": "b"}}}
            with self.subTest(entries=(first, second)):
                result = helm("template", "edgegpu", str(CHART), values=values)
                self.assertEqual(result.returncode, 0, result.stderr)

    def test_single_config_entry_is_the_default(self):
        docs = self.render_checked({"config": {"map": {"any-name": JETSON_CONFIG}}})
        self.assertEqual(len(of_kind(docs, "ConfigMap")), 2)

    def test_mig_strategy_and_plugin_flags(self):
        values = {"migStrategy": "mixed", "failOnInitError": False, "deviceListStrategy": "envvar,cdi-cri",
                  "deviceIDStrategy": "index", "compatWithCPUManager": True}
        docs = self.render_checked(values)
        for ds in plugins(docs).values():
            variables = env(pod(ds)["containers"][0])
            # The labeller computes the labels with the same GPU flags.
            labeller = env(pod(ds)["initContainers"][0])
            self.assertEqual({k: v for k, v in labeller.items() if k in variables and k != "CONFIG_FILE"},
                             {k: v for k, v in variables.items() if k in labeller and k != "CONFIG_FILE"})
            self.assertEqual(variables["FAIL_ON_INIT_ERROR"], "false")
            self.assertEqual(variables["DEVICE_LIST_STRATEGY"], "envvar,cdi-cri")
            self.assertEqual(variables["DEVICE_ID_STRATEGY"], "index")
            self.assertEqual(variables["PASS_DEVICE_SPECS"], "true")
            self.assertEqual(variables["MIG_STRATEGY"], "mixed")
        # Unset: nothing is passed, the plugin's default (none) applies.
        for ds in of_kind(self.render_checked({}), "DaemonSet").values():
            self.assertNotIn("MIG_STRATEGY", env(pod(ds)["containers"][0]))

    def test_node_setup(self):
        values = {"nodeSetup": {"enabled": True, "mode": "k3s-default-runtime", "setAsDefault": False,
                                "restart": False}}
        docs = self.render_checked(values)
        ds = of_kind(docs, "DaemonSet")["edgegpu-node-setup"]
        spec = pod(ds)
        self.assertTrue(spec["hostPID"])
        apply, = spec["initContainers"]
        self.assertTrue(apply["securityContext"]["privileged"])
        self.assertEqual(apply["command"], ["/bin/sh", "/usr/share/edgegpu/node-setup-pod.sh", "apply"])
        self.assertEqual(env(apply), {"EDGEGPU_NODE_SETUP_MODE": "k3s-default-runtime",
                                      "EDGEGPU_RUNTIME_PATH": "/usr/bin/nvidia-container-runtime",
                                      "EDGEGPU_NO_SET_DEFAULT": "true", "EDGEGPU_POD_RESTART": "false"})
        configured, = spec["containers"]
        self.assertEqual(configured["command"], ["/bin/sh", "/usr/share/edgegpu/node-setup-pod.sh", "wait"])
        self.assertNotIn("volumeMounts", configured)
        self.assertEqual(spec["volumes"], [{"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}}])

    def test_a_custom_gpu_taint_reaches_every_pod_that_runs_on_gpu_nodes(self):
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                       {"key": "example.com/dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        docs = self.render_checked({"tolerations": tolerations, "nodeSetup": {"enabled": True}})
        workloads = [d for d in docs if d["kind"] in ("DaemonSet", "Job")
                     and d["metadata"]["name"] != "edgegpu-node-labeller"]
        self.assertEqual(len(workloads), 4)
        for workload in workloads:
            self.assertEqual(pod(workload)["tolerations"], tolerations, workload["metadata"]["name"])
        # The node labeller runs on every node whatever its taints (nodeLabels.labeller.tolerations).
        labeller = of_kind(docs, "DaemonSet")["edgegpu-node-labeller"]
        self.assertEqual(pod(labeller)["tolerations"], [{"operator": "Exists"}])
        # Their own lists still win; [] means none.
        docs = render({"nodeSetup": {"enabled": True, "tolerations": []},
                       "devicequery": {"tolerations": [{"key": "example.com/test", "operator": "Exists"}]}})
        self.assertNotIn("tolerations", pod(of_kind(docs, "DaemonSet")["edgegpu-node-setup"]))
        self.assertEqual(pod(of_kind(docs, "Job")["edgegpu-devicequery"])["tolerations"],
                         [{"key": "example.com/test", "operator": "Exists"}])

    def test_node_setup_policy_catches_privilege_and_coverage(self):
        docs = render({"nodeSetup": {"enabled": True}})
        plugin_sets = list(plugins(docs).values())
        # The labeller's identity, which the plugins' init containers run as.
        rbac = [d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
        node_setup = of_kind(docs, "DaemonSet")["edgegpu-node-setup"]

        def problems_with(change):
            changed = copy.deepcopy(node_setup)
            change(pod(changed))
            return check_policy.check_objects(REPO, plugin_sets + rbac + [changed], {}, "test", configmap_required=False,
                                              runtime_class=False)

        self.assertEqual(problems_with(lambda spec: None), [])
        where = "DaemonSet edgegpu-node-setup container configured"
        problems = problems_with(lambda spec: spec["containers"][0]["securityContext"].update(privileged=True))
        self.assertIn(f"{where}: only the init container `apply` may be privileged", problems)
        problems = problems_with(lambda spec: spec["containers"][0]["securityContext"].update(runAsUser=0))
        self.assertTrue(any(p.startswith(f"{where}: must run as non-root") for p in problems), problems)
        # A read-only host mount is not enough (it is not recursive).
        problems = problems_with(lambda spec: spec["containers"][0].update(
            volumeMounts=[{"name": "host-root", "mountPath": "/host", "readOnly": True}]))
        self.assertTrue(any(p.startswith(f"{where}: must not mount the host (/host)") for p in problems), problems)

        jetson_only = copy.deepcopy(node_setup)
        terms = pod(jetson_only)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        del terms["nodeSelectorTerms"][2:]
        problems = check_policy.check_objects(REPO, plugin_sets + [jetson_only], {}, "test", configmap_required=False,
                                              runtime_class=False)
        self.assertTrue(any("node setup skips them although they run plugin" in p for p in problems), problems)

    def test_mps(self):
        """mps.enabled: the companion DaemonSet beside the plugins, the plugins stay unprivileged."""
        values = {"mps": {"enabled": True}, "devicePlugin": {"jetson": {"config": "orin"}},
                  "config": {"map": {"orin": MPS_CONFIG, "servers": GPU_MEMORY_CONFIG}, "default": "servers"}}
        docs = self.render_checked(values)
        daemonsets = of_kind(docs, "DaemonSet")
        spec = pod(daemonsets["edgegpu-mps-control-daemon"])
        self.assertIs(spec["hostPID"], True)
        self.assertEqual(spec["terminationGracePeriodSeconds"], 20)
        self.assertEqual(spec["securityContext"], {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False})
        companion, = spec["containers"]
        self.assertEqual(companion["command"], ["/usr/bin/edgegpu-device-plugin", "mps-control-daemon"])
        self.assertEqual(companion["args"], ["--root=/host"])
        self.assertEqual(companion["image"], f"ghcr.io/edgegpu/edgegpu-device-plugin:{VERSION}")
        self.assertEqual(env(companion), {"MPS_ROOT": "/run/edgegpu/mps"})
        self.assertEqual(companion["securityContext"], {"privileged": True, "readOnlyRootFilesystem": True})
        self.assertEqual(companion["resources"], {"requests": {"cpu": "10m", "memory": "64Mi"}})
        self.assertEqual(companion["volumeMounts"], [
            {"name": "host-root", "mountPath": "/host", "readOnly": True, "mountPropagation": "HostToContainer"},
            {"name": "mps-root", "mountPath": "/host/run/edgegpu/mps"},
            {"name": "mps-desired", "mountPath": "/host/run/edgegpu/mps/desired", "readOnly": True}])
        self.assertEqual(spec["volumes"], [
            {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
            {"name": "mps-root", "hostPath": {"path": "/run/edgegpu/mps", "type": "DirectoryOrCreate"}},
            {"name": "mps-desired", "hostPath": {"path": "/run/edgegpu/mps/desired", "type": "DirectoryOrCreate"}}])
        # Exactly where a plugin runs: the two plugins' node selector terms.
        terms = [term for ds in plugins(docs).values()
                 for term in pod(ds)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                 ["nodeSelectorTerms"]]
        self.assertEqual(spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                         ["nodeSelectorTerms"], terms)
        self.assertEqual(spec["tolerations"], pod(daemonsets["edgegpu-device-plugin-jetson"])["tolerations"])
        for ds in plugins(docs).values():
            plugin_spec = pod(ds)
            self.assertNotIn("hostPID", plugin_spec)
            self.assertEqual(plugin_spec["terminationGracePeriodSeconds"], 10)
            plugin = plugin_spec["containers"][0]
            self.assertEqual(env(plugin)["MPS_ROOT"], "/run/edgegpu/mps")
            self.assertIn({"name": "mps-root", "mountPath": "/run/edgegpu/mps", "readOnly": True},
                          plugin["volumeMounts"])
            self.assertIn({"name": "mps-desired", "mountPath": "/run/edgegpu/mps/desired"}, plugin["volumeMounts"])
            self.assertIn({"name": "mps-root", "hostPath": {"path": "/run/edgegpu/mps", "type": "DirectoryOrCreate"}},
                          plugin_spec["volumes"])
            self.assertIn({"name": "mps-desired",
                           "hostPath": {"path": "/run/edgegpu/mps/desired", "type": "DirectoryOrCreate"}},
                          plugin_spec["volumes"])
            self.assertEqual(plugin["securityContext"]["capabilities"], {"drop": ["ALL"]})
            labeller, = plugin_spec["initContainers"]
            self.assertFalse({"mps-root", "mps-desired"} & {m["name"] for m in labeller["volumeMounts"]})
        # Off (the default): nothing of it anywhere.
        rendered = yaml.safe_dump_all(render({}))
        self.assertNotIn("mps", rendered.lower())

    def test_limits_probe_in_helm_test(self):
        docs = self.render_checked({"mps": {"enabled": True}})
        jobs = of_kind(docs, "Job")
        limits = jobs["edgegpu-devicequery-limits"]
        # After the devicequery Job, kept for its log until the next helm test.
        self.assertEqual(limits["metadata"]["annotations"], {"helm.sh/hook": "test", "helm.sh/hook-weight": "1",
                                                              "helm.sh/hook-delete-policy": "before-hook-creation"})
        container, = pod(limits)["containers"]
        self.assertEqual(container["args"], ["--check-limits"])
        self.assertEqual(container["resources"]["limits"], {"nvidia.com/gpu": 1})
        # The rest is the devicequery Job's: non-root, no capability, the GPU nodes' tolerations.
        plain = pod(jobs["edgegpu-devicequery"])
        for key in ("securityContext", "tolerations", "runtimeClassName", "automountServiceAccountToken"):
            self.assertEqual(pod(limits)[key], plain[key], key)
        self.assertEqual(container["securityContext"], plain["containers"][0]["securityContext"])
        self.assertEqual(plain["containers"][0]["resources"]["limits"], {"nvidia.com/gpu": 1, "memory": "256Mi"})
        # Memory units, without MPS (accounting only: the probe then fails, by design), or off.
        values = {"devicequery": {"checkLimits": True, "limitsResource": "nvidia.com/gpu-mem", "limitsCount": 8}}
        container, = pod(of_kind(render(values), "Job")["edgegpu-devicequery-limits"])["containers"]
        self.assertEqual(container["resources"]["limits"], {"nvidia.com/gpu-mem": 8})
        self.assertNotIn("edgegpu-devicequery-limits",
                         of_kind(render({"mps": {"enabled": True}, "devicequery": {"checkLimits": False}}), "Job"))
        # The static copy is this Job (deploy/generate.py --check proves it is current).
        static = yaml.safe_load((REPO / "deploy" / "devicequery" / "limits-job.yaml").read_text())
        self.assertEqual((static["metadata"]["name"], static["metadata"]["namespace"]),
                         ("edgegpu-devicequery-limits", "default"))

    def test_mps_root_control_binary_and_node_selectors(self):
        values = {"mps": {"enabled": True, "root": "/var/run/gpu-mps",
                          "controlBinary": "/usr/local/cuda-12.6/bin/nvidia-cuda-mps-control",
                          "nodeSelector": {"nvidia.com/mps.capable": "true"},
                          "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "1Gi"}}},
                  "nodeSelector": {"example.com/pool": "edge"}, "devicePlugin": {"discrete": {"enabled": False}}}
        docs = self.render_checked(values)
        spec = pod(of_kind(docs, "DaemonSet")["edgegpu-mps-control-daemon"])
        self.assertEqual(spec["nodeSelector"], {"example.com/pool": "edge", "nvidia.com/mps.capable": "true"})
        companion, = spec["containers"]
        self.assertEqual(env(companion), {"MPS_ROOT": "/var/run/gpu-mps",
                                          "MPS_CONTROL_BINARY": "/usr/local/cuda-12.6/bin/nvidia-cuda-mps-control"})
        self.assertEqual(companion["volumeMounts"][1:], [
            {"name": "mps-root", "mountPath": "/host/var/run/gpu-mps"},
            {"name": "mps-desired", "mountPath": "/host/var/run/gpu-mps/desired", "readOnly": True}])
        self.assertEqual(companion["resources"]["limits"], {"memory": "1Gi"})
        jetson = plugins(docs)["edgegpu-device-plugin-jetson"]
        self.assertEqual(spec["affinity"], pod(jetson)["affinity"])
        self.assertEqual(pod(jetson)["nodeSelector"], {"example.com/pool": "edge"})
        self.assertIn({"name": "mps-root", "mountPath": "/var/run/gpu-mps", "readOnly": True},
                      pod(jetson)["containers"][0]["volumeMounts"])
        self.assertIn({"name": "mps-desired", "mountPath": "/var/run/gpu-mps/desired"},
                      pod(jetson)["containers"][0]["volumeMounts"])
        # No plugin, no companion (and no check failing on a missing one).
        self.assertEqual(of_kind(render({"mps": {"enabled": True}, "devicePlugin": {"enabled": False}}), "DaemonSet")
                         .keys(), {"edgegpu-node-labeller"})

    def test_mps_plugin_and_companion_write_apart(self):
        """Under mps.root the plugin and the DRA driver write desired/ (daemons.json) alone and
        the companion everything but desired/ (each resource's pipe, log, shm, status.json): a
        mount of the directory's parent (the plugin's and the DRA driver's /run/edgegpu) is
        covered too."""
        for root in ("/run/edgegpu/mps", "/var/run/gpu-mps"):
            values = {"mps": {"enabled": True, "root": root}, "dra": {"enabled": True}}
            docs = self.render_checked(values)
            ours = [f"{root}/nvidia.com/gpu/status.json", f"{root}/nvidia.com/gpu/pipe/control",
                    f"{root}/nvidia.com/gpu/shm/x", f"{root}/x"]
            for name, ds in plugins(docs).items():
                plugin, labeller = pod(ds)["containers"][0], pod(ds)["initContainers"][0]
                with self.subTest(root=root, daemonset=name):
                    self.assertIs(writable(plugin, f"{root}/desired/daemons.json"), True)
                    for path in ours:
                        self.assertIs(writable(plugin, path), False, path)
                    # The host paths inside the directory that it mounts read-write.
                    self.assertEqual(writable_host_paths(ds, plugin, root), [f"{root}/desired"])
                    self.assertEqual(writable_host_paths(ds, labeller, root), [])
            companion = of_kind(docs, "DaemonSet")["edgegpu-mps-control-daemon"]
            container, = pod(companion)["containers"]
            with self.subTest(root=root, daemonset="companion"):
                self.assertIs(writable(container, f"/host{root}/desired/daemons.json"), False)
                self.assertIs(writable(container, f"/host{root}/desired"), False)
                for path in ours:
                    self.assertIs(writable(container, "/host" + path), True, path)
                self.assertEqual(writable_host_paths(companion, container, root), [root])
            for name, ds in dra_drivers(docs).items():
                driver, = pod(ds)["containers"]
                with self.subTest(root=root, daemonset=name):
                    self.assertIs(writable(driver, f"{root}/desired/daemons.json"), True)
                    for path in ours:
                        self.assertIs(writable(driver, path), False, path)
                    self.assertEqual(writable_host_paths(ds, driver, root), [f"{root}/desired"])
        # check_policy wants that cover where /run/edgegpu holds the directory, and desired/.
        docs = [d for d in render({"mps": {"enabled": True}, "dra": {"enabled": True}}) if d["kind"] != "Job"]
        driver = pod(dra_drivers(docs)["edgegpu-dra-driver-jetson"])["containers"][0]
        driver["volumeMounts"] = [m for m in driver["volumeMounts"] if m["name"] != "mps-root"]
        problems = check_policy.check_objects(REPO, docs, {}, "test", configmap_required=False)
        where = "DaemonSet edgegpu-dra-driver-jetson container dra-driver"
        self.assertIn(f"{where}: the MPS directory /run/edgegpu/mps is inside a directory the driver mounts "
                      "read-write: mount it readOnly over it, at the same path", problems)
        self.assertIn(f"{where}: MPS_ROOT is /run/edgegpu/mps, but /run/edgegpu/mps is not mounted (the driver "
                      "reads status.json and writes desired/daemons.json)", problems)
        for mount in driver["volumeMounts"]:
            if mount["name"] == "mps-desired":
                mount["readOnly"] = True
        problems = check_policy.check_objects(REPO, docs, {}, "test", configmap_required=False)
        self.assertIn(f"{where}: /run/edgegpu/mps/desired must be mounted read-write at the same path (hostPath type "
                      "DirectoryOrCreate): the driver writes only the MPS directory's desired/", problems)

    def test_mps_on_dra_nodes(self):
        """mps.enabled with dra.enabled: the companion runs on every GPU node, plugin or DRA
        (the DRA driver's tolerations added), and the driver asks it for a daemon (--mps)."""
        dra_tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                           {"key": "dra", "operator": "Exists"}]
        values = {"mps": {"enabled": True}, "dra": {"enabled": True, "tolerations": dra_tolerations}}
        docs = self.render_checked(values)
        daemonsets = of_kind(docs, "DaemonSet")
        companion = daemonsets["edgegpu-mps-control-daemon"]
        gpu_terms = [term for ds in plugins(docs).values() for term in required_terms(ds)]
        # The plugins' terms without their edgegpu.io/allocator NotIn [dra]: plugin and DRA nodes.
        for term in gpu_terms:
            term["matchExpressions"] = [r for r in term["matchExpressions"] if r["key"] != "edgegpu.io/allocator"]
        self.assertEqual(required_terms(companion), gpu_terms)
        self.assertEqual(pod(companion)["tolerations"],
                         pod(plugins(docs)["edgegpu-device-plugin-jetson"])["tolerations"]
                         + [{"key": "dra", "operator": "Exists"}])
        for name, ds in dra_drivers(docs).items():
            driver, = pod(ds)["containers"]
            with self.subTest(daemonset=name):
                self.assertEqual(env(driver)["MPS"], "true")
                self.assertEqual(env(driver)["MPS_ROOT"], "/run/edgegpu/mps")
                self.assertIn({"name": "mps-root", "mountPath": "/run/edgegpu/mps", "readOnly": True},
                              driver["volumeMounts"])
                self.assertIn({"name": "mps-desired", "mountPath": "/run/edgegpu/mps/desired"},
                              driver["volumeMounts"])
        # Every GPU node on DRA: no plugin DaemonSet, the companion still runs beside the drivers.
        values = {"mps": {"enabled": True}, "dra": {"enabled": True, "allNodes": True}}
        docs = self.render_checked(values)
        self.assertEqual(plugins(docs), {})
        companion = of_kind(docs, "DaemonSet")["edgegpu-mps-control-daemon"]
        self.assertEqual(required_terms(companion),
                         [term for ds in dra_drivers(docs).values() for term in required_terms(ds)])
        # Without mps.enabled the driver asks for nothing and mounts nothing of MPS.
        docs = self.render_checked({"dra": {"enabled": True}})
        for ds in dra_drivers(docs).values():
            driver, = pod(ds)["containers"]
            self.assertFalse({"MPS", "MPS_ROOT"} & set(env(driver)))
            self.assertFalse({"mps-root", "mps-desired"} & {m["name"] for m in driver["volumeMounts"]})
        # check_policy: a companion that skips the DRA nodes is caught.
        docs = [d for d in render({"mps": {"enabled": True}, "dra": {"enabled": True}}) if d["kind"] != "Job"]
        companion = of_kind(docs, "DaemonSet")["edgegpu-mps-control-daemon"]
        for term in required_terms(companion):
            term["matchExpressions"].append({"key": "edgegpu.io/allocator", "operator": "NotIn", "values": ["dra"]})
        problems = check_policy.check_objects(REPO, docs, {}, "test", configmap_required=False)
        self.assertTrue(any("the MPS companion skips them although they run plugin or DRA driver" in p
                            for p in problems), problems)

    def test_mps_configs_the_plugin_accepts(self):
        entries = [
            MPS_CONFIG, GPU_MEMORY_CONFIG,
            "Sharing:\n  MPS:\n    renameByDefault: true\n    resources:\n    - name: gpu\n      replicas: 48\n"
            "      activeThreadPercentage: 10\n",
            "version: v1\nsharing:\n  gpuMemory:\n    enforcement: mps\n    resources:\n    - name: nvidia.com/gpu\n"
            "      rename: aliyun.com/gpu-mem\n      memory: 24Gi\n",
            # mps wins over timeSlicing, as in NVIDIA's plugin; a null section is no section.
            "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 4}]\n  mps:\n"
            "    resources: [{name: gpu, replicas: 2}]\n",
            "version: v1\nsharing:\n  mps: null\n  gpuMemory: {resources: [{name: gpu}]}\n",
        ]
        for entry in entries:
            with self.subTest(entry=entry):
                values = {"mps": {"enabled": True}, "config": {"map": {"a": entry}}}
                result = helm("template", "edgegpu", str(CHART), values=values)
                self.assertEqual(result.returncode, 0, result.stderr)
        # Accounting only needs no companion.
        values = {"config": {"map": {"a": GPU_MEMORY_CONFIG.replace("unit: 512Mi", "enforcement: none")}}}
        self.assertEqual(helm("template", "edgegpu", str(CHART), values=values).returncode, 0)

    def test_mps_policy_catches_privilege_and_mounts(self):
        docs = render({"mps": {"enabled": True}})
        rbac = [d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
        name = "edgegpu-mps-control-daemon"

        def problems_with(change, plugin_change=None):
            changed = copy.deepcopy([d for d in docs if d["kind"] == "DaemonSet"])
            for ds in changed:
                if ds["metadata"]["name"] == name:
                    change(pod(ds))
                elif plugin_change and ds["metadata"]["name"].startswith("edgegpu-device-plugin"):
                    plugin_change(pod(ds))
            return check_policy.check_objects(REPO, [d for d in changed if d is not None] + rbac, {}, "test",
                                              configmap_required=False, runtime_class=False)

        self.assertEqual(problems_with(lambda spec: None), [])
        where = f"DaemonSet {name}"
        self.assertIn(f"{where}: needs hostPID: MPS knows its clients in other pods by their host process IDs",
                      problems_with(lambda spec: spec.pop("hostPID")))
        self.assertIn(f"{where}: needs no service account: automountServiceAccountToken false, no serviceAccountName",
                      problems_with(lambda spec: spec.update(automountServiceAccountToken=True)))
        # Another host path, or the MPS directory read-only, or the host's / writable.
        for change in (
                lambda spec: (spec["volumes"].append({"name": "etc", "hostPath": {"path": "/etc", "type": "Directory"}}),
                              spec["containers"][0]["volumeMounts"].append({"name": "etc", "mountPath": "/host-etc"})),
                lambda spec: spec["containers"][0]["volumeMounts"][1].update(readOnly=True),
                lambda spec: spec["containers"][0]["volumeMounts"][2].pop("readOnly"),
                lambda spec: spec["containers"][0]["volumeMounts"].pop(2),
                lambda spec: spec["containers"][0]["volumeMounts"][0].pop("readOnly")):
            problems = problems_with(change)
            self.assertTrue(any(p.startswith(f"{where} container mps-control-daemon: host mounts ") for p in problems),
                            problems)
        problems = problems_with(lambda spec: spec["containers"][0]["env"][0].update(value="/run/other"))
        self.assertTrue(any("MPS_ROOT /run/other but edgegpu-device-plugin-jetson has '/run/edgegpu/mps'" in p
                            for p in problems), problems)
        problems = problems_with(lambda spec: spec["containers"][0].update(args=["--root=/host", "--debug"]))
        self.assertIn(f"{where} container mps-control-daemon: argument --debug is not a flag of "
                      "edgegpu-device-plugin mps-control-daemon (plugin/src)", problems)
        # Fewer nodes than the plugins run on.
        problems = problems_with(lambda spec: spec["affinity"]["nodeAffinity"]
                                 ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].pop(0))
        self.assertTrue(any("the MPS companion skips them although they run plugin" in p for p in problems), problems)
        # The plugins: no hostPID, the MPS directory read-write at its own path, a companion beside them.
        problems = problems_with(lambda spec: None, lambda spec: spec.update(hostPID=True))
        self.assertIn("DaemonSet edgegpu-device-plugin-jetson: hostPID must not be set (only the Helm value "
                      "metrics.podGpuMemory.hostPID sets it, on the discrete DaemonSet)", problems)
        where = "DaemonSet edgegpu-device-plugin-jetson container device-plugin"
        problems = problems_with(lambda spec: None, lambda spec: next(
            m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "mps-root").pop("readOnly"))
        self.assertIn(f"{where}: the MPS directory /run/edgegpu/mps (MPS_ROOT) must be mounted readOnly at the "
                      "same path (the plugin writes only its desired/ directory; the rest is the companion's)",
                      problems)
        problems = problems_with(lambda spec: None, lambda spec: next(
            m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "mps-desired").update(readOnly=True))
        self.assertIn(f"{where}: /run/edgegpu/mps/desired must be mounted read-write at the same path (the plugin "
                      "writes daemons.json there)", problems)
        problems = problems_with(lambda spec: None, lambda spec: spec["containers"][0].update(volumeMounts=[
            m for m in spec["containers"][0]["volumeMounts"] if m["name"] != "mps-desired"]))
        self.assertIn(f"{where}: MPS_ROOT is /run/edgegpu/mps, but /run/edgegpu/mps/desired is not mounted (the "
                      "plugin writes daemons.json there)", problems)
        plugin_sets = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] != name]
        problems = check_policy.check_objects(REPO, plugin_sets + rbac, {}, "test", configmap_required=False,
                                              runtime_class=False)
        self.assertIn("test: ['edgegpu-device-plugin-discrete', 'edgegpu-device-plugin-jetson'] set MPS_ROOT but "
                      "no MPS companion DaemonSet (edgegpu-mps-control-daemon) runs beside them", problems)

    def test_replaced_affinity_with_one_plugin(self):
        values = {"devicePlugin": {"discrete": {"enabled": False}}, "affinity": ORIN_AFFINITY,
                  "nodeSetup": {"enabled": True}}
        docs = self.render_checked(values, documented_labels=False)
        for name, ds in of_kind(docs, "DaemonSet").items():
            if name != "edgegpu-node-labeller":
                self.assertEqual(pod(ds)["affinity"], ORIN_AFFINITY, name)

    def test_null_maps_render_as_absent(self):
        values = {"podAnnotations": None, "resources": None, "nodeSetup": {"enabled": True, "resources": None},
                  "devicePlugin": {"jetson": {"resources": None}}, "metrics": {"scrapeAnnotations": False}}
        docs = render(values)
        self.assertEqual(schema_errors(docs), [])
        daemonsets = of_kind(docs, "DaemonSet")
        self.assertNotIn("annotations", daemonsets["edgegpu-device-plugin-jetson"]["spec"]["template"]["metadata"])
        self.assertNotIn("resources", pod(daemonsets["edgegpu-device-plugin-jetson"])["containers"][0])
        self.assertIn("resources", pod(daemonsets["edgegpu-device-plugin-discrete"])["containers"][0])
        node_setup = pod(daemonsets["edgegpu-node-setup"])
        for container in node_setup["containers"] + node_setup["initContainers"]:
            self.assertNotIn("resources", container, container["name"])

    def test_rancher_globals_prefix_every_image_with_the_system_default_registry(self):
        docs = self.render_checked({**RANCHER_GLOBALS, "nodeSetup": {"enabled": True}})
        found = images(docs)
        # two plugins and their labels init containers, the node labeller, node setup's two
        # containers, the test
        self.assertEqual(len(found), 8, found)
        prefixed = re.compile(rf"^{re.escape(RANCHER_REGISTRY)}/ghcr\.io/edgegpu/[a-z-]+:{re.escape(VERSION)}$")
        for image in found:
            self.assertRegex(image, prefixed)
        # Only global.systemDefaultRegistry (a parent chart's), and a repository that already
        # names the registry (not prefixed twice).
        values = {"global": {"systemDefaultRegistry": "mirror.local/"},
                  "image": {"repository": "mirror.local/edgegpu/edgegpu-device-plugin"}}
        self.assertEqual(sorted(set(images(render(values)))),
                         [f"mirror.local/edgegpu/edgegpu-device-plugin:{VERSION}",
                          f"mirror.local/ghcr.io/edgegpu/devicequery:{VERSION}"])

    def test_parent_chart_globals_change_nothing(self):
        docs = self.render_checked({"global": {"imageRegistry": "", "storageClass": "fast", "cattle": {}}})
        self.assertEqual(docs, render({}))

    def test_nvidia_shaped_values_install_as_the_defaults(self):
        docs = self.render_checked(NVIDIA_SHAPED_VALUES)
        self.assertEqual(docs, render({"tolerations": NVIDIA_TOLERATIONS}))
        # NVIDIA's other accepted spellings: affinity "", an integer tag, and their
        # namespaceOverride and config.fallbackStrategies, which are honoured.
        values = {"affinity": "", "namespaceOverride": "gpu-system",
                  "config": {"map": {"only": JETSON_CONFIG}, "fallbackStrategies": ["single"]}}
        docs = self.render_checked(values, namespace="gpu-system")
        cluster_scoped = ("RuntimeClass", "ClusterRole", "ClusterRoleBinding")
        self.assertEqual({d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped},
                         {"gpu-system"})
        self.assertEqual(len(of_kind(docs, "ConfigMap")), 2)
        self.assertEqual(set(images(render({"image": {"tag": 7}}))),
                         {"ghcr.io/edgegpu/edgegpu-device-plugin:7", f"ghcr.io/edgegpu/devicequery:{VERSION}"})

    def test_other_release_and_namespace(self):
        docs = self.render_checked({}, release="gpu", namespace="gpu-system")
        self.assertEqual(sorted(of_kind(docs, "DaemonSet")),
                         ["gpu-edgegpu-device-plugin-discrete", "gpu-edgegpu-device-plugin-jetson",
                          "gpu-edgegpu-node-labeller"])
        cluster_scoped = ("RuntimeClass", "ClusterRole", "ClusterRoleBinding")
        self.assertEqual({d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped},
                         {"gpu-system"})
        # The metrics Service selects this release's plugin pods only.
        self.assertEqual(of_kind(docs, "Service")["gpu-edgegpu-metrics"]["spec"]["selector"],
                         {"app.kubernetes.io/name": "edgegpu-device-plugin", "app.kubernetes.io/instance": "gpu"})
        binding = of_kind(docs, "ClusterRoleBinding")["gpu-edgegpu-node-labeller"]
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": "gpu-edgegpu-node-labeller",
                                                "namespace": "gpu-system"}])

    def test_metrics_defaults(self):
        docs = self.render_checked({})
        for name, ds in plugins(docs).items():
            plugin = pod(ds)["containers"][0]
            self.assertEqual(env(plugin)["METRICS_BIND_ADDRESS"], ":9400")
            self.assertEqual(plugin["ports"], [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}])
            annotations = ds["spec"]["template"]["metadata"]["annotations"]
            self.assertEqual((annotations["prometheus.io/scrape"], annotations["prometheus.io/port"]), ("true", "9400"))
            self.assertIn({"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources",
                           "readOnly": True}, plugin["volumeMounts"])
            self.assertEqual(env(plugin)["FEATURE_FILE"], "")
            self.assertEqual(env(plugin)["NODE_NAME"], {"fieldRef": {"fieldPath": "spec.nodeName"}})
        self.assertNotIn("PodMonitor", {d["kind"] for d in docs})
        # The static copy (no release) selects the plugin pods by name alone.
        static = [d for d in yaml.safe_load_all((REPO / "deploy" / "device-plugin.yaml").read_text())
                  if d and d["kind"] == "Service"]
        self.assertEqual([d["spec"]["selector"] for d in static], [{"app.kubernetes.io/name": "edgegpu-device-plugin"}])

    def test_metrics_off(self):
        docs = self.render_checked({"metrics": {"enabled": False}})
        self.assertNotIn("Service", {d["kind"] for d in docs})
        for ds in plugins(docs).values():
            plugin = pod(ds)["containers"][0]
            self.assertNotIn("METRICS_BIND_ADDRESS", env(plugin))
            self.assertNotIn("ports", plugin)
            self.assertNotIn("prometheus.io/scrape", ds["spec"]["template"]["metadata"].get("annotations") or {})
            self.assertNotIn("pod-resources", [v["name"] for v in pod(ds)["volumes"]])

    def test_pod_monitor_dashboard_and_no_attribution(self):
        values = {"metrics": {"port": 9500, "podAttribution": False, "scrapeAnnotations": False,
                              "podMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
                              "grafanaDashboard": {"enabled": True}}}
        # The PodMonitor is a prometheus-operator CRD: no Kubernetes schema to validate it.
        docs = render(values)
        monitor = next(d for d in docs if d["kind"] == "PodMonitor")
        self.assertEqual(monitor["metadata"]["labels"]["release"], "prom")
        self.assertEqual(monitor["spec"]["podMetricsEndpoints"],
                         [{"port": "metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}])
        self.assertEqual(monitor["spec"]["selector"]["matchLabels"],
                         {"app.kubernetes.io/name": "edgegpu-device-plugin", "app.kubernetes.io/instance": "edgegpu"})
        rest = [d for d in docs if d["kind"] != "PodMonitor"]
        self.assertEqual(schema_errors(rest), [])
        self.assertEqual(check_policy.check_objects(REPO, [d for d in rest if d["kind"] != "Job"], {}, "test",
                                                    configmap_required=False), [])
        dashboard = of_kind(docs, "ConfigMap")["edgegpu-grafana-dashboard"]
        self.assertEqual(dashboard["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(json.loads(dashboard["data"]["edgegpu-gpus.json"]),
                         json.loads((CHART / "dashboards" / "edgegpu-gpus.json").read_text()))
        for ds in plugins(docs).values():
            plugin = pod(ds)["containers"][0]
            self.assertEqual(env(plugin)["METRICS_BIND_ADDRESS"], ":9500")
            self.assertEqual(env(plugin)["POD_RESOURCES_SOCKET"], "")
            self.assertNotIn("pod-resources", [v["name"] for v in pod(ds)["volumes"]])
        self.assertEqual(of_kind(docs, "Service")["edgegpu-metrics"]["spec"]["ports"][0]["port"], 9500)

    def test_pod_gpu_memory_defaults(self):
        """metrics.podGpuMemory.enabled (an opt-in): the host's /proc read-only at /host/proc in both
        plugin containers, /proc/meminfo alone for the Jetson labeller; no debugfs, no hostPID.
        Off by default, as in the static manifests."""
        for name, ds in plugins(self.render_checked({})).items():
            self.assertNotIn("host-proc", host_paths(ds), name)
        docs = self.render_checked({"metrics": {"podGpuMemory": {"enabled": True}}})
        daemonsets = plugins(docs)
        for name, ds in daemonsets.items():
            plugin = pod(ds)["containers"][0]
            self.assertEqual(mounts(plugin)["/host/proc"], ("host-proc", True), name)
            self.assertEqual(host_paths(ds)["host-proc"], ("/proc", "Directory"), name)
            self.assertNotIn("/host/proc/meminfo", mounts(plugin), name)
            self.assertNotIn("hostPID", pod(ds), name)
            self.assertFalse([p for p, _ in host_paths(ds).values() if p.startswith("/sys/kernel")], name)
            labeller, = pod(ds)["initContainers"]
            self.assertNotIn("/host/proc", mounts(labeller), name)
        jetson = daemonsets["edgegpu-device-plugin-jetson"]
        labeller, = pod(jetson)["initContainers"]
        self.assertEqual(mounts(labeller)["/host/proc/meminfo"], ("host-proc-meminfo", True))
        self.assertEqual(host_paths(jetson)["host-proc-meminfo"], ("/proc/meminfo", "File"))
        discrete = daemonsets["edgegpu-device-plugin-discrete"]
        self.assertNotIn("host-proc-meminfo", host_paths(discrete))
        # The static manifests are the defaults: no host /proc there.
        static = {d["metadata"]["name"]: d for d in yaml.safe_load_all((REPO / "deploy" / "device-plugin.yaml").read_text())
                  if d and d["kind"] == "DaemonSet"}
        for name in daemonsets:
            self.assertNotIn("host-proc", host_paths(static[name]), name)

    def test_pod_gpu_memory_opt_ins(self):
        values = {"metrics": {"podGpuMemory": {"enabled": True, "nvmapDebugfs": True, "hostPID": True}}}
        docs = self.render_checked(values)
        jetson, discrete = (plugins(docs)[f"edgegpu-device-plugin-{v}"] for v in ("jetson", "discrete"))
        # nvmapDebugfs: the Jetson plugin container only, read-only, type Directory.
        self.assertEqual(mounts(pod(jetson)["containers"][0])["/host/sys/kernel/debug/nvmap/iovmm"],
                         ("host-nvmap-iovmm", True))
        self.assertEqual(host_paths(jetson)["host-nvmap-iovmm"], ("/sys/kernel/debug/nvmap/iovmm", "Directory"))
        self.assertNotIn("/host/sys/kernel/debug/nvmap/iovmm", mounts(pod(jetson)["initContainers"][0]))
        self.assertNotIn("host-nvmap-iovmm", host_paths(discrete))
        # hostPID: the discrete DaemonSet only, nothing else of its security context changes.
        self.assertIs(pod(discrete)["hostPID"], True)
        self.assertNotIn("hostPID", pod(jetson))
        defaults = plugins(render({}))
        for ds in (jetson, discrete):
            name = ds["metadata"]["name"]
            self.assertEqual(pod(ds)["securityContext"], pod(defaults[name])["securityContext"])
            self.assertEqual(pod(ds)["containers"][0]["securityContext"],
                             pod(defaults[name])["containers"][0]["securityContext"])
        # check_policy allows hostPID only when told the value is set.
        problems = check_policy.check_objects(REPO, [d for d in docs if d["kind"] != "Job"], {}, "test",
                                              configmap_required=False)
        self.assertIn("DaemonSet edgegpu-device-plugin-discrete: hostPID must not be set (only the Helm value "
                      "metrics.podGpuMemory.hostPID sets it, on the discrete DaemonSet)", problems)
        # Each alone.
        docs = self.render_checked({"metrics": {"podGpuMemory": {"enabled": True, "hostPID": True}}})
        self.assertNotIn("host-nvmap-iovmm", host_paths(plugins(docs)["edgegpu-device-plugin-jetson"]))
        docs = self.render_checked({"metrics": {"podGpuMemory": {"enabled": True, "nvmapDebugfs": True}}})
        self.assertNotIn("hostPID", pod(plugins(docs)["edgegpu-device-plugin-discrete"]))

    def test_pod_gpu_memory_off(self):
        """Off, or without what it needs (the metrics, their pod attribution): the mounts of before,
        and the opt-ins do nothing."""
        opt_ins = {"nvmapDebugfs": True, "hostPID": True}
        on = {"enabled": True, **opt_ins}
        for values in ({"metrics": {"podGpuMemory": {"enabled": False, **opt_ins}}},
                       {"metrics": {"podGpuMemory": opt_ins}},
                       {"metrics": {"podAttribution": False, "podGpuMemory": on}},
                       {"metrics": {"enabled": False, "podGpuMemory": on}}):
            with self.subTest(values=values):
                docs = self.render_checked(values)
                for name, ds in plugins(docs).items():
                    self.assertNotIn("hostPID", pod(ds), name)
                    self.assertNotIn("host-proc", host_paths(ds), name)
                    self.assertNotIn("host-nvmap-iovmm", host_paths(ds), name)
                jetson = plugins(docs)["edgegpu-device-plugin-jetson"]
                for container in pod(jetson)["containers"] + pod(jetson)["initContainers"]:
                    self.assertEqual(mounts(container)["/host/proc/meminfo"], ("host-proc-meminfo", True))
        # Without the labeller the Jetson pod has no /proc/meminfo volume left over.
        docs = self.render_checked({"nodeLabels": {"enabled": False}, "metrics": {"podGpuMemory": {"enabled": True}}})
        jetson = plugins(docs)["edgegpu-device-plugin-jetson"]
        self.assertNotIn("host-proc-meminfo", host_paths(jetson))
        self.assertEqual(mounts(pod(jetson)["containers"][0])["/host/proc"], ("host-proc", True))

    def test_node_labels_off_and_nfd_feature_file(self):
        docs = self.render_checked({"nodeLabels": {"enabled": False, "nfdFeatureFile": True}})
        self.assertEqual(sorted(of_kind(docs, "DaemonSet")),
                         ["edgegpu-device-plugin-discrete", "edgegpu-device-plugin-jetson"])
        self.assertFalse({"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} & {d["kind"] for d in docs})
        for ds in plugins(docs).values():
            spec = pod(ds)
            self.assertNotIn("initContainers", spec)
            self.assertNotIn("serviceAccountName", spec)
            plugin = spec["containers"][0]
            self.assertNotIn("FEATURE_FILE", env(plugin))
            self.assertIn({"name": "nfd-features", "mountPath": "/etc/kubernetes/node-feature-discovery/features.d"},
                          plugin["volumeMounts"])
            # A node without NFD (yet) must not hold the plugin pod on FailedMount.
            self.assertIn({"name": "nfd-features",
                           "hostPath": {"path": "/etc/kubernetes/node-feature-discovery/features.d",
                                        "type": "DirectoryOrCreate"}},
                          spec["volumes"])

    def test_node_labeller(self):
        docs = self.render_checked({})
        ds = of_kind(docs, "DaemonSet")["edgegpu-node-labeller"]
        spec = pod(ds)
        labeller, = spec["containers"]
        self.assertEqual(labeller["args"], ["--kind-only", "--wait", "--root=/host"])
        self.assertEqual([v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v], ["/sys"])
        self.assertEqual(spec["tolerations"], [{"operator": "Exists"}])
        role = of_kind(docs, "ClusterRole")["edgegpu-node-labeller"]
        self.assertEqual(role["rules"], [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}])
        # The plugins' init container runs as the same account; the plugin container has no token.
        for ds in plugins(docs).values():
            self.assertEqual(pod(ds)["serviceAccountName"], "edgegpu-node-labeller")
            self.assertFalse(any(m["name"] == "labeller-token" for m in pod(ds)["containers"][0]["volumeMounts"]))
            init, = pod(ds)["initContainers"]
            self.assertIn("labeller-token", [m["name"] for m in init["volumeMounts"]])
            # The init container runs the plugin's discovery (NVML on discrete nodes): the
            # plugin's resources, not the /sys-only labeller's.
            self.assertEqual(init["resources"], pod(ds)["containers"][0]["resources"])
        discrete = plugins(docs)["edgegpu-device-plugin-discrete"]
        self.assertEqual(pod(discrete)["initContainers"][0]["resources"]["limits"]["memory"], "64Mi")


# A cluster that serves ValidatingAdmissionPolicy v1 (Kubernetes 1.30+), as helm sees it.
VAP_CLUSTER = ("--kube-version", "1.30.0", "--api-versions",
               "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")


def admits(policy, username, extra, old, new):
    """What the API server decides for an UPDATE of Node OLD to NEW by USERNAME (token extras
    EXTRA) under POLICY: None when the policy does not apply, else the messages of the failed
    validations ([] = admitted). CEL evaluated by cel-python, the expressions as the chart has
    them."""
    env = celpy.Environment()
    user = {"username": username}
    if extra is not None:
        user["extra"] = extra
    activation = {"request": {"userInfo": user, "operation": "UPDATE"}, "object": new, "oldObject": old}
    activation = {k: celpy.json_to_cel(v) for k, v in activation.items()}

    def holds(expression):
        return bool(env.program(env.compile(expression)).evaluate(activation))

    if not all(holds(c["expression"]) for c in policy["spec"]["matchConditions"]):
        return None
    return [v["message"] for v in policy["spec"]["validations"] if not holds(v["expression"])]


class NvidiaReleasedValues(unittest.TestCase):
    """Every values file NVIDIA's chart releases shipped (v0.7 to v0.20 and main), and the keys
    NVIDIA has proposed since, install as a user migrating brings them."""

    render_checked = Matrix.render_checked

    def test_fixtures_cover_every_release(self):
        names = [p.stem for p in NVIDIA_RELEASED]
        self.assertEqual(names[0], "v0.7.0")  # the first release with a Helm chart
        self.assertEqual(names[-1], "v0.19.0")  # v0.19.0 to v0.20.0 and main ship the same values
        self.assertEqual(len(names), 14)

    def test_each_release_installs_with_edgegpu_image(self):
        for path in NVIDIA_RELEASED:
            values = yaml.safe_load(path.read_text())
            with self.subTest(release=path.stem):
                # As exported: NVIDIA's image is refused, with what to do.
                result = helm("template", "edgegpu", str(CHART), "--namespace", "kube-system", values=values)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn("is NVIDIA's device plugin", result.stderr)
                self.assertIn("remove image.repository", result.stderr)
                # Without the image block: valid, within policy, and the keys edgegpu does not
                # use change nothing.
                values.pop("image")
                docs = self.render_checked(values)
                used = {k: v for k, v in values.items() if k not in NVIDIA_NO_EFFECT}
                self.assertEqual(docs, render(used))
                self.assertEqual(sorted(plugins(docs)),
                                 ["edgegpu-device-plugin-discrete", "edgegpu-device-plugin-jetson"])
                self.assertEqual({d["metadata"].get("namespace") for d in docs
                                  if d["kind"] not in ("RuntimeClass", "ClusterRole", "ClusterRoleBinding")},
                                 {"kube-system"})

    def test_old_namespace_value_places_the_objects(self):
        # NVIDIA's charts up to v0.11 put their DaemonSet into `namespace` (default kube-system),
        # whatever the release's namespace: here too.
        docs = render({"namespace": "gpu-system"}, namespace="default")
        self.assertEqual(schema_errors(docs), [])
        cluster_scoped = ("RuntimeClass", "ClusterRole", "ClusterRoleBinding")
        self.assertEqual({d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped},
                         {"gpu-system"})
        self.assertEqual(docs, render({"namespaceOverride": "gpu-system"}, namespace="default"))
        # The same name twice is no conflict.
        self.assertEqual(render({"namespace": "gpu-system", "namespaceOverride": "gpu-system"}), docs)

    def test_every_released_key_is_documented(self):
        text = (REPO / "docs" / "helm.md").read_text()
        section = text.split("## 4. Migrating from NVIDIA's nvidia-device-plugin chart", 1)[1].split("\n## 5.", 1)[0]
        keys = {k for p in NVIDIA_RELEASED for k in yaml.safe_load(p.read_text())}
        keys |= {"componentSelectorLabels", "devicePlugin.containers"}
        for key in sorted(keys):
            self.assertRegex(section, rf"`{re.escape(key)}[`.]", f"docs/helm.md section 4 does not list {key}")

    def test_component_selector_labels_change_nothing(self):
        # NVIDIA's proposal (PR 1716) adds app.kubernetes.io/component to its selectors, which
        # edgegpu's always carry (deploy/device-plugin.yaml's selectors are fixed).
        for enabled in (True, False, None):
            with self.subTest(enabled=enabled):
                self.assertEqual(self.render_checked({"componentSelectorLabels": {"enabled": enabled}}), render({}))
        for ds in plugins(render({})).values():
            self.assertIn("app.kubernetes.io/component", ds["spec"]["selector"]["matchLabels"])

    def test_main_container_env(self):
        extra = [{"name": "EDGEGPU_LOG", "value": "debug"}, {"name": "NO_COLOR", "value": "1"}]
        values = {"devicePlugin": {"containers": {"init": {}, "sidecar": None, "main": {"env": extra}}}}
        docs = self.render_checked(values)
        defaults = plugins(render({}))
        for name, ds in plugins(docs).items():
            plugin = pod(ds)["containers"][0]
            self.assertEqual(plugin["name"], "device-plugin")
            self.assertEqual(plugin["env"][-2:], extra, name)
            plugin["env"] = plugin["env"][:-2]
            self.assertEqual(ds, defaults[name])
            # The init container `labels` is not NVIDIA's main container.
            self.assertNotIn("EDGEGPU_LOG", env(pod(ds)["initContainers"][0]))

    def test_null_containers_render_as_the_defaults(self):
        # The schema allows null at each level (a values file may write `main:` empty).
        for containers in (None, {"main": None}, {"main": {"env": None}}):
            with self.subTest(containers=containers):
                docs = self.render_checked({"devicePlugin": {"containers": containers}})
                self.assertEqual(plugins(docs), plugins(render({})))

    def test_chart_env_names_cover_what_the_chart_sets(self):
        helpers = (CHART / "templates" / "_helpers.tpl").read_text()
        listed = re.search(r'define "edgegpu.plugin.chartEnvNames".*?\{\{- list (.*?) \| toJson', helpers, re.S)
        reserved = set(re.findall(r'"([A-Z0-9_]+)"', listed.group(1)))
        everything = {"migStrategy": "mixed", "failOnInitError": False, "deviceListStrategy": "cdi-cri",
                      "deviceIDStrategy": "index", "compatWithCPUManager": True, "mps": {"enabled": True},
                      "metrics": {"podAttribution": False}, "config": {"map": {"a": JETSON_CONFIG}}}
        for values in (everything, {}):
            for name, ds in plugins(render(values)).items():
                self.assertLessEqual(set(env(pod(ds)["containers"][0])), reserved, name)


class AdmissionPolicy(unittest.TestCase):
    """The node labeller's ValidatingAdmissionPolicy: only where the API exists, valid, and
    its CEL allows the labeller's own patches and nothing else."""

    def test_rendered_only_where_the_api_exists(self):
        kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
        # helm template's default cluster, like Kubernetes before 1.30: not there.
        self.assertFalse(kinds & {d["kind"] for d in render({})})
        docs = render({}, extra=VAP_CLUSTER)
        self.assertEqual(kinds, kinds & {d["kind"] for d in docs})
        for value in ({"nodeLabels": {"admissionPolicy": False}}, {"nodeLabels": {"enabled": False}}):
            self.assertFalse(kinds & {d["kind"] for d in render(value, extra=VAP_CLUSTER)}, value)
        for doc in docs:
            if doc["kind"] in kinds:
                for version in ("1.30", NEWEST_KUBERNETES):
                    kubernetes_validate.validate(doc, version, strict=True)
        binding = of_kind(docs, "ValidatingAdmissionPolicyBinding")["edgegpu-node-labeller"]
        self.assertEqual(binding["spec"], {"policyName": "edgegpu-node-labeller", "validationActions": ["Deny"]})

    def test_cel_allows_own_gpu_labels_only(self):
        policy = of_kind(render({}, release="r1", namespace="gpu", extra=VAP_CLUSTER),
                         "ValidatingAdmissionPolicy")["r1-edgegpu-node-labeller"]
        self.assertEqual(policy["spec"]["failurePolicy"], "Fail")
        self.assertEqual(policy["spec"]["matchConstraints"]["resourceRules"],
                         [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}])
        me = "system:serviceaccount:gpu:r1-edgegpu-node-labeller"
        on_n1 = {"authentication.kubernetes.io/node-name": ["n1"],
                 "authentication.kubernetes.io/pod-name": ["labeller-x"]}

        def node(labels, spec=None):
            return {"metadata": {"name": "n1", "labels": labels}, "spec": spec or {"podCIDR": "10.0.0.0/24"}}

        old = node({"kubernetes.io/hostname": "n1", "nvidia.com/gpu.count": "1",
                    "nvidia.com/mig-1g.10gb.count": "7"})

        # What the init container does: change, add and remove GPU labels.
        ours = node({"kubernetes.io/hostname": "n1", "nvidia.com/gpu.count": "2", "edgegpu.io/gpu": "jetson"})
        self.assertEqual(admits(policy, me, on_n1, old, ours), [])
        # Another node's labels.
        other = copy.deepcopy(ours)
        other["metadata"]["name"] = old["metadata"]["name"] = "n2"
        self.assertEqual(len(admits(policy, me, on_n1, old, other)), 1)
        old["metadata"]["name"] = "n1"
        # A token without the node name (not bound to a pod, or before Kubernetes 1.30).
        self.assertEqual(len(admits(policy, me, None, old, ours)), 1)
        self.assertEqual(len(admits(policy, me, {}, old, ours)), 1)
        # Labels outside nvidia.com/ and edgegpu.io/: added, changed, removed.
        for labels in ({**old["metadata"]["labels"], "node-role.kubernetes.io/gpu": ""},
                       {**old["metadata"]["labels"], "kubernetes.io/hostname": "evil"},
                       {k: v for k, v in old["metadata"]["labels"].items() if k != "kubernetes.io/hostname"}):
            self.assertEqual(len(admits(policy, me, on_n1, old, node(labels))), 1, labels)
        # The spec (taints, unschedulable) stays as it was.
        tainted = node(old["metadata"]["labels"], {"podCIDR": "10.0.0.0/24", "unschedulable": True})
        self.assertEqual(admits(policy, me, on_n1, old, tainted), ["the node labeller may not change a Node's spec"])
        # Anyone else is not this policy's business.
        self.assertIsNone(admits(policy, "system:node:n1", None, old, tainted))
        self.assertIsNone(admits(policy, "system:serviceaccount:kube-system:r1-edgegpu-node-labeller",
                                 on_n1, old, tainted))

    def test_cel_allows_nothing_of_the_metadata_but_labels(self):
        """The labeller sends one JSON merge patch of metadata.labels (apiclient patch_node_labels):
        an owner reference, a finalizer or an annotation from its account is not its own."""
        policy = of_kind(render({}, release="r1", namespace="gpu", extra=VAP_CLUSTER),
                         "ValidatingAdmissionPolicy")["r1-edgegpu-node-labeller"]
        me = "system:serviceaccount:gpu:r1-edgegpu-node-labeller"
        on_n1 = {"authentication.kubernetes.io/node-name": ["n1"]}
        only_metadata = "the node labeller may change nothing of a Node's metadata but its labels"
        old = {"metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7",
                            "labels": {"kubernetes.io/hostname": "n1", "nvidia.com/gpu.count": "1"},
                            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                            "managedFields": [{"manager": "k3s", "operation": "Update"}]},
               "spec": {"podCIDR": "10.0.0.0/24"}}
        # Its own patch, as the API server hands it to admission: the labels changed, and the
        # field manager's record of the patch (managedFields).
        ours = copy.deepcopy(old)
        ours["metadata"]["labels"].update({"nvidia.com/gpu.count": "2", "edgegpu.io/gpu": "jetson"})
        ours["metadata"]["managedFields"].append({"manager": "edgegpu-labeller", "operation": "Update"})
        self.assertEqual(admits(policy, me, on_n1, old, ours), [])

        def changed(change):
            new = copy.deepcopy(ours)
            change(new["metadata"])
            return admits(policy, me, on_n1, old, new)

        owner = {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "u2", "controller": True}
        for what, change in (
                ("an owner reference", lambda m: m.update(ownerReferences=[owner])),
                ("a finalizer", lambda m: m.update(finalizers=["example.com/hold"])),
                ("an annotation added", lambda m: m["annotations"].update({"example.com/x": "1"})),
                ("an annotation changed", lambda m: m["annotations"].update({"node.alpha.kubernetes.io/ttl": "9"})),
                ("the annotations removed", lambda m: m.pop("annotations")),
                ("an annotation under nvidia.com/", lambda m: m["annotations"].update({"nvidia.com/x": "1"}))):
            with self.subTest(what=what):
                self.assertEqual(changed(change), [only_metadata])
        # Removing what was there is a change too.
        with_owner = copy.deepcopy(old)
        with_owner["metadata"]["ownerReferences"] = [owner]
        self.assertEqual(admits(policy, me, on_n1, with_owner, ours), [only_metadata])


def decide(policy, obj, operation="CREATE"):
    """What the API server decides for OBJECT under POLICY (matchConstraints aside): None when a
    match condition excludes it, else the messages of the failed validations ([] = admitted),
    each its messageExpression's where it has one. The policy's variables are evaluated in
    order, each seeing the ones before it, as the API server composes them. CEL by cel-python."""
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(obj), "request": celpy.json_to_cel({"operation": operation})}
    computed = {}

    def holds(expression):
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in computed.items()})
        return env.program(env.compile(expression)).evaluate(activation)

    for variable in policy["spec"].get("variables") or []:
        computed[variable["name"]] = holds(variable["expression"])
    if not all(holds(c["expression"]) for c in policy["spec"].get("matchConditions") or []):
        return None
    return [str(holds(v["messageExpression"])) if "messageExpression" in v else v["message"]
            for v in policy["spec"]["validations"] if not holds(v["expression"])]


class MpsAdmissionPolicy(unittest.TestCase):
    """mps.admissionPolicy: pods may not set the variables that carry their GPU limits."""

    def test_rendered_only_with_mps_where_the_api_exists(self):
        kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
        mps = {"mps": {"enabled": True}}

        def names(values, extra=VAP_CLUSTER):
            return {d["metadata"]["name"] for d in render(values, extra=extra) if d["kind"] in kinds}

        self.assertEqual(names({}), {"edgegpu-node-labeller"})
        self.assertEqual(names(mps), {"edgegpu-node-labeller", "edgegpu-mps-limits"})
        self.assertEqual(names(mps, extra=()), set())
        self.assertEqual(names({"mps": {"enabled": True, "admissionPolicy": False}}), {"edgegpu-node-labeller"})
        docs = [d for d in render(mps, release="r1", namespace="gpu", extra=VAP_CLUSTER)
                if d["kind"] in kinds and d["metadata"]["name"] == "r1-edgegpu-mps-limits"]
        self.assertEqual(len(docs), 2)
        for doc in docs:
            for version in ("1.30", NEWEST_KUBERNETES):
                kubernetes_validate.validate(doc, version, strict=True)
        binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
        self.assertEqual(binding["spec"], {"policyName": "r1-edgegpu-mps-limits", "validationActions": ["Deny"]})
        policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
        self.assertEqual(policy["spec"]["failurePolicy"], "Fail")
        self.assertEqual(policy["spec"]["matchConstraints"]["resourceRules"],
                         [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}])

    def test_cel_refuses_limits_set_by_the_pod(self):
        policy = of_kind(render({"mps": {"enabled": True}}, extra=VAP_CLUSTER),
                         "ValidatingAdmissionPolicy")["edgegpu-mps-limits"]
        units = {"limits": {"nvidia.com/gpu-mem": 4}}
        replica = {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}

        def pod_with(containers, init=None):
            spec = {"containers": containers}
            if init is not None:
                spec["initContainers"] = init
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}

        def refused(obj):
            decision = decide(policy, obj)
            self.assertIsNotNone(decision)
            return decision

        # What pods normally do: their own variables, a GPU without them, MPS variables without a GPU.
        self.assertEqual(refused(pod_with([{"name": "app", "resources": units,
                                            "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
                                                    {"name": "MPS_MODE", "value": "x"}]}])), [])
        self.assertEqual(refused(pod_with([{"name": "app", "resources": replica}])), [])
        self.assertEqual(refused(pod_with([{"name": "app", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                                            "env": [{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp/mps"}]}])), [])
        # Each variable the plugin sets, in a container or an init container that asks for a device.
        for name in ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY",
                     "CUDA_MPS_CLIENT_PRIORITY", "EDGEGPU_GPU_MEMORY_LIMIT_MIB", "EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED",
                     "EDGEGPU_GPU_MEMORY_LIMIT_NOTE"):
            with self.subTest(name=name):
                messages = refused(pod_with([{"name": "sidecar"},
                                             {"name": "app", "resources": units,
                                              "env": [{"name": "A", "value": "1"}, {"name": name, "value": "0=64G"}]}]))
                self.assertEqual(len(messages), 1)
                self.assertTrue(messages[0].startswith(f"container app sets {name} itself: on a shared GPU the device "
                                                       "plugin sets the CUDA_MPS_* and EDGEGPU_GPU_MEMORY_LIMIT* "
                                                       "variables"), messages[0])
                self.assertTrue(messages[0].endswith("and a value in the pod spec would replace them; remove it"))
                messages = refused(pod_with([{"name": "app"}], init=[{"name": "warmup", "resources": replica,
                                                                     "env": [{"name": name, "value": "1"}]}]))
                self.assertEqual(len(messages), 1)
                self.assertIn(f"container warmup sets {name} itself", messages[0])

    def test_cel_refuses_env_from_that_could_set_limits(self):
        """envFrom replaces the plugin's variables as env does: the kubelet's
        makeEnvironmentVariables takes a ConfigMap's or Secret's keys (prefix + key) before env,
        and GenerateRunContainerOptions puts both after the device manager's variables
        (pkg/kubelet/kubelet_pods.go). The keys are not in the pod spec, so any envFrom whose
        names could start with CUDA_MPS_ or EDGEGPU_GPU_MEMORY_LIMIT is refused."""
        policy = of_kind(render({"mps": {"enabled": True}}, extra=VAP_CLUSTER),
                         "ValidatingAdmissionPolicy")["edgegpu-mps-limits"]
        units = {"limits": {"nvidia.com/gpu-mem": 4}}
        replica = {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}
        settings = {"configMapRef": {"name": "settings"}}
        secret = {"secretRef": {"name": "creds", "optional": True}}
        advice = "give the envFrom a prefix such as APP_ or list the variables in env"

        def pod_with(containers, init=None):
            spec = {"containers": containers}
            if init is not None:
                spec["initContainers"] = init
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}

        def decision(obj):
            result = decide(policy, obj)
            self.assertIsNotNone(result)
            return result

        # No prefix, an empty one, one a stem starts with, one that starts with a stem.
        for env_from, source in (
                ([settings], "ConfigMap settings without a prefix"),
                ([secret], "Secret creds without a prefix"),
                ([{**settings, "prefix": ""}], "ConfigMap settings without a prefix"),
                ([{**settings, "prefix": "CUDA_MPS_"}], "ConfigMap settings with the prefix CUDA_MPS_"),
                ([{**settings, "prefix": "CUDA_MPS_PINNED_"}], "ConfigMap settings with the prefix CUDA_MPS_PINNED_"),
                ([{**settings, "prefix": "CUDA_"}], "ConfigMap settings with the prefix CUDA_"),
                ([{**secret, "prefix": "C"}], "Secret creds with the prefix C"),
                ([{**secret, "prefix": "EDGEGPU_GPU_"}], "Secret creds with the prefix EDGEGPU_GPU_"),
                ([{**settings, "prefix": "EDGEGPU_GPU_MEMORY_LIMIT_"}],
                 "ConfigMap settings with the prefix EDGEGPU_GPU_MEMORY_LIMIT_"),
                ([{**settings, "prefix": "APP_"}, secret], "Secret creds without a prefix")):
            with self.subTest(env_from=env_from):
                messages = decision(pod_with([{"name": "sidecar", "envFrom": [settings]},
                                              {"name": "app", "resources": units, "envFrom": env_from}]))
                self.assertEqual(len(messages), 1, messages)
                self.assertTrue(messages[0].startswith(f"container app takes variables from {source}: "), messages[0])
                self.assertTrue(messages[0].endswith(advice), messages[0])
                # An init container that asks for a device, the same.
                messages = decision(pod_with([{"name": "app"}],
                                             init=[{"name": "warmup", "resources": replica, "envFrom": env_from}]))
                self.assertEqual(len(messages), 1, messages)
                self.assertTrue(messages[0].startswith(f"container warmup takes variables from {source}: "),
                                messages[0])
        # Prefixes no such name can have, and envFrom in containers without a device.
        for env_from in ([{**settings, "prefix": "APP_"}], [{**secret, "prefix": "CUDA_APP_"}],
                         [{**settings, "prefix": "EDGEGPU_APP_"}, {**secret, "prefix": "MPS_"}]):
            with self.subTest(env_from=env_from):
                self.assertEqual(decision(pod_with([{"name": "app", "resources": units, "envFrom": env_from}],
                                                   init=[{"name": "warmup", "resources": replica,
                                                          "envFrom": env_from}])), [])
        self.assertEqual(decision(pod_with([{"name": "app", "resources": {"limits": {"cpu": "1"}},
                                             "envFrom": [settings, secret]},
                                            {"name": "gpu", "resources": replica}],
                                           init=[{"name": "setup", "envFrom": [settings]}])), [])
        # Both at once: each validation says its own.
        messages = decision(pod_with([{"name": "app", "resources": units, "envFrom": [settings],
                                       "env": [{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp"}]}]))
        self.assertEqual(len(messages), 2, messages)


class InstallTable(unittest.TestCase):
    """docs/helm.md's "What the chart installs" names every object the chart can render."""

    VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"

    def rows(self):
        text = (REPO / "docs" / "helm.md").read_text()
        table = text.split("What the chart installs:", 1)[1].split("**The RuntimeClass.**", 1)[0]
        rows = []
        for line in table.splitlines():
            if line.startswith("| ") and not line.startswith(("| Object", "|---")):
                cell = line.split("|")[1]
                names = [re.escape(n).replace(re.escape("<kind>"), "(jetson|discrete)")
                         for n in re.findall(r"`([^`]+)`", cell)]
                rows.append((cell, [re.compile(f"^{n}$") for n in names]))
        return rows

    @staticmethod
    def names_kind(cell, kind):
        # "ConfigMaps", "ValidatingAdmissionPolicy + Binding", "ClusterRole(Binding)".
        return kind in cell or (kind.endswith("Binding") and kind[:-len("Binding")] in cell and "Binding" in cell)

    def test_every_rendered_object_is_listed(self):
        values = {"mps": {"enabled": True}, "nodeSetup": {"enabled": True}, "dra": {"enabled": True},
                  "config": {"map": {"mps": MPS_CONFIG}},
                  "metrics": {"podMonitor": {"enabled": True}, "grafanaDashboard": {"enabled": True}}}
        docs = render(values, extra=("--api-versions", self.VAP, "--api-versions", "monitoring.coreos.com/v1"))
        kinds = {d["kind"] for d in docs}
        # Every kind the templates can make is in this rendering.
        for kind in ("DaemonSet", "ConfigMap", "RuntimeClass", "Job", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                     "Service", "PodMonitor", "DeviceClass"):
            self.assertIn(kind, kinds)
        rows = self.rows()
        for doc in docs:
            kind, name = doc["kind"], doc["metadata"]["name"]
            # Cluster-wide names of their own: the RuntimeClass, the DRA driver's DeviceClasses.
            documented = name if kind in ("RuntimeClass", "DeviceClass") else "<release>-" + name.removeprefix("edgegpu-")
            with self.subTest(object=f"{kind}/{name}"):
                self.assertTrue(any(self.names_kind(cell, kind) and any(p.match(documented) for p in names)
                                    for cell, names in rows),
                                f"{kind} `{documented}` is not in docs/helm.md's table of what the chart installs")


POWER_POLICY_ON = {"powerPolicy": {"enabled": True, "rules": [
    {"nodeSelector": {"fleet": "robots"}, "mode": "MAXN", "jetsonClocks": True},
    {"mode": 2, "allowReboot": True}]}}


class PowerPolicy(unittest.TestCase):
    """powerPolicy (docs/power.md, "Policy"): off by default; on, a privileged DaemonSet on
    Jetson nodes with its rules as the program reads them, its RBAC and admission policy."""

    def test_off_by_default_and_on(self):
        self.assertNotIn("edgegpu-power-policy", of_kind(render({}), "DaemonSet"))
        docs = Matrix.render_checked(self, POWER_POLICY_ON)
        ds = of_kind(docs, "DaemonSet")["edgegpu-power-policy"]
        spec = pod(ds)
        self.assertEqual(spec["nodeSelector"], {"edgegpu.io/gpu": "jetson", "kubernetes.io/os": "linux"})
        self.assertEqual(spec["containers"][0]["command"], ["/usr/bin/edgegpu-labeller", "power-policy"])
        # The rules as the policy file the program reads: a mode written as a number is text.
        rules = json.loads(of_kind(docs, "ConfigMap")["edgegpu-power-policy"]["data"]["rules.json"])
        self.assertEqual(rules, {"rules": [
            {"nodeSelector": {"fleet": "robots"}, "mode": "MAXN", "jetsonClocks": True},
            {"mode": "2", "allowReboot": True}]})
        self.assertEqual(of_kind(docs, "ClusterRole")["edgegpu-power-policy"]["rules"],
                         [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                          {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}])
        # A node selector of the operator's narrows the Jetson nodes, never widens them.
        docs = render({"powerPolicy": {"enabled": True, "nodeSelector": {"edgegpu.io/gpu": "discrete", "a": "b"}}})
        self.assertEqual(pod(of_kind(docs, "DaemonSet")["edgegpu-power-policy"])["nodeSelector"],
                         {"a": "b", "edgegpu.io/gpu": "jetson", "kubernetes.io/os": "linux"})

    def test_bad_rules_are_refused_by_the_schema(self):
        for rules, message in (([{"mode": "MAXN; reboot"}], "does not match pattern"),
                               ([{"nodeSelector": {"a": "b"}}], "missing property 'mode'"),
                               ([{"mode": "MAXN", "clocks": True}], "additional properties 'clocks' not allowed")):
            result = helm("template", str(CHART), values={"powerPolicy": {"enabled": True, "rules": rules}})
            self.assertNotEqual(result.returncode, 0, rules)
            self.assertIn(message, result.stderr, rules)

    def test_policy_catches_what_the_power_policy_must_not_have(self):
        docs = [d for d in render(POWER_POLICY_ON) if d["kind"] != "Job"]

        def problems_with(change):
            changed = copy.deepcopy(docs)
            change(changed)
            return check_policy.check_objects(REPO, changed, {}, "test", configmap_required=False)

        self.assertEqual(problems_with(lambda d: None), [])
        ds = lambda objects: next(o for o in objects if o["kind"] == "DaemonSet"  # noqa: E731
                                  and o["metadata"]["name"] == "edgegpu-power-policy")
        where = "DaemonSet edgegpu-power-policy"
        self.assertIn(f"{where}: hostPID must not be set", problems_with(lambda d: pod(ds(d)).update(hostPID=True)))
        self.assertIn(f"{where}: must run on Jetson nodes only (nodeSelector edgegpu.io/gpu=jetson)",
                      problems_with(lambda d: pod(ds(d))["nodeSelector"].pop("edgegpu.io/gpu")))
        problems = problems_with(lambda d: pod(ds(d))["containers"][0]["args"].append("--debug"))
        self.assertIn(f"{where} container power-policy: argument --debug is not a flag of "
                      "edgegpu-labeller power-policy (labeller/src)", problems)
        problems = problems_with(lambda d: next(o for o in d if o["kind"] == "ClusterRole"
                                                and o["metadata"]["name"] == "edgegpu-power-policy")
                                 ["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}))
        self.assertTrue(any(p.startswith("ClusterRole edgegpu-power-policy: grants") for p in problems), problems)

    def test_admission_policy(self):
        docs = render(POWER_POLICY_ON, release="r1", namespace="gpu",
                      extra=("--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"))
        policy = of_kind(docs, "ValidatingAdmissionPolicy")["r1-edgegpu-power-policy"]
        for version in (OLDEST_DRA_KUBERNETES, NEWEST_KUBERNETES):
            kubernetes_validate.validate(policy, version, strict=True)
        self.assertNotIn("ValidatingAdmissionPolicy", {d["kind"] for d in render(POWER_POLICY_ON)})
        me = "system:serviceaccount:gpu:r1-edgegpu-power-policy"
        on_n1 = {"authentication.kubernetes.io/node-name": ["n1"]}

        def node(name="n1", **labels):
            return {"metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", **labels}},
                    "spec": {"podCIDR": "10.0.0.0/24"}}

        before = node(**{"edgegpu.io/jetson.power-mode": "MODE_30W"})
        after = node(**{"edgegpu.io/jetson.power-mode": "MAXN", "edgegpu.io/jetson.power-mode.pending": "MAXN"})
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", before, after), [])
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", after, before), [])
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", node("n2"), node("n2", **{
            "edgegpu.io/jetson.power-mode": "MAXN"})),
            ["the power policy may only change the Node its pod runs on"])
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", before, node(**{
            "edgegpu.io/jetson.power-mode": "MODE_30W", "edgegpu.io/gpu": "jetson"})),
            ["the power policy may only change the power-mode labels"])
        tainted = node(**{"edgegpu.io/jetson.power-mode": "MODE_30W"})
        tainted["spec"]["unschedulable"] = True
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", before, tainted),
                         ["the power policy may not change a Node's spec"])
        self.assertIsNone(decide_write(policy, "system:serviceaccount:gpu:other", on_n1, "UPDATE", before, after))


class Dashboard(unittest.TestCase):
    """The Grafana dashboard queries only series that edgegpu or dcgm-exporter serve, with the
    labels they carry (docs/metrics.md lists every series)."""

    def test_framebuffer_per_gpu_instance(self):
        # A MIG GPU's framebuffer series differ per GPU instance: grouping by GPU alone would
        # show only the fullest instance.
        dashboard = json.loads((CHART / "dashboards" / "edgegpu-gpus.json").read_text())
        fb = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])
              if "DCGM_FI_DEV_FB_" in t["expr"]]
        self.assertEqual(len(fb), 3)
        for title, expr in fb:
            self.assertIn("GPU_I_ID", re.search(r"by \(([^)]*)\)", expr).group(1), expr)
        self.assertIn("Framebuffer memory used and free", [t for t, _ in fb])

    def test_queries_name_documented_series(self):
        dashboard = json.loads((CHART / "dashboards" / "edgegpu-gpus.json").read_text())
        documented = set(re.findall(r"`((?:DCGM_FI_DEV|edgegpu)_[A-Za-z0-9_]+)`",
                                    (REPO / "docs" / "metrics.md").read_text()))
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        self.assertGreater(len(exprs), 10)
        for expr in exprs:
            for name in re.findall(r"\b((?:DCGM_FI_DEV|edgegpu)_[A-Za-z0-9_]+)", expr):
                self.assertIn(name, documented, expr)
            self.assertNotIn("exported_", expr)
        # Per-node panels work with dcgm-exporter alone: each DCGM panel uses DCGM series only,
        # except under a row marked "(edgegpu only)", whose panels need edgegpu anyway (the
        # power-mode row sets the SM clock against the mode's ceilings).
        row, dcgm_panels = "", []
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                row = panel["title"]
            elif any("DCGM_FI_DEV" in t["expr"] for t in panel.get("targets", [])):
                dcgm_panels.append((row, panel))
        self.assertGreater(len(dcgm_panels), 8)
        for row, panel in dcgm_panels:
            if "(edgegpu only)" in row:
                continue
            for target in panel["targets"]:
                self.assertNotIn("edgegpu_", target["expr"], panel["title"])
        mixed = [p["title"] for row, p in dcgm_panels if any("edgegpu_" in t["expr"] for t in p["targets"])]
        self.assertEqual(mixed, ["GPU clock against its ceilings"])


DRA_ON = {"dra": {"enabled": True}}
# A cluster that serves resource.k8s.io/v1 and ValidatingAdmissionPolicy v1 (Kubernetes 1.34+).
DRA_CLUSTER = ("--kube-version", "1.34.0", "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")


def decide_write(policy, username, extra, operation, old, new):
    """What the API server decides for an OPERATION by USERNAME (token extras EXTRA) that turns
    OLD into NEW (None: absent) under POLICY: None when a match condition excludes it, else the
    messages of the failed validations ([] = admitted). CEL by cel-python."""
    env = celpy.Environment()
    user = {"username": username, **({"extra": extra} if extra is not None else {})}
    activation = {k: celpy.json_to_cel(v) for k, v in
                  {"request": {"userInfo": user, "operation": operation}, "object": new, "oldObject": old}.items()}
    holds = lambda e: bool(env.program(env.compile(e)).evaluate(activation))  # noqa: E731
    if not all(holds(c["expression"]) for c in policy["spec"]["matchConditions"]):
        return None
    # The policy's variables, each seeing those before it (as the API server evaluates them).
    variables = {}
    for variable in policy["spec"].get("variables") or []:
        activation["variables"] = celpy.celtypes.MapType(variables)
        value = env.program(env.compile(variable["expression"])).evaluate(activation)
        variables[celpy.celtypes.StringType(variable["name"])] = value
    activation["variables"] = celpy.celtypes.MapType(variables)
    return [v["message"] for v in policy["spec"]["validations"] if not holds(v["expression"])]


def dra_drivers(docs):
    return {n: d for n, d in of_kind(docs, "DaemonSet").items()
            if d["metadata"]["labels"]["app.kubernetes.io/name"] == "edgegpu-dra-driver"}


def required_terms(ds):
    return pod(ds)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


class SemVer:
    """Kubernetes' CEL semver() value (k8s.io/apiserver pkg/cel/library/semverlib.go), as far as
    compareTo needs it: major, minor, patch."""

    def __init__(self, text):
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", str(text))
        if not match:
            raise ValueError(f"semver({text!r})")
        self.key = tuple(int(p) for p in match.groups())


class Quantity:
    """Kubernetes' CEL quantity() value (pkg/cel/library/quantity.go), binary and decimal suffixes."""

    SCALE = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
             "Ti": 2**40}

    def __init__(self, text):
        match = re.fullmatch(r"(\d+)(|k|M|G|T|Ki|Mi|Gi|Ti)", str(text))
        if not match:
            raise ValueError(f"quantity({text!r})")
        self.key = int(match.group(1)) * self.SCALE[match.group(2)]


def cel_compare_to(a, b):
    return celpy.celtypes.IntType((a.key > b.key) - (a.key < b.key))


def device_env(driver, attributes, capacity):
    """A DRA device as CEL sees it (k8s.io/dynamic-resource-allocation cel/compile.go): driver,
    attributes and capacity by domain. Versions and quantities become the values above."""
    def value(v):
        if "version" in v:
            return SemVer(v["version"])
        return next(iter(v.values()))
    attrs = {driver: {k: value(v) for k, v in attributes.items()}}
    caps = {driver: {k: Quantity(v) for k, v in capacity.items()}}
    return {"device": celpy.celtypes.MapType({
        celpy.celtypes.StringType("driver"): celpy.celtypes.StringType(driver),
        celpy.celtypes.StringType("attributes"): _cel_map(attrs),
        celpy.celtypes.StringType("capacity"): _cel_map(caps)})}


def _cel_map(value):
    if isinstance(value, dict):
        return celpy.celtypes.MapType({celpy.celtypes.StringType(k): _cel_map(v) for k, v in value.items()})
    if isinstance(value, (SemVer, Quantity)):
        return value
    return celpy.json_to_cel(value)


def cel_selects(expression, device):
    env = celpy.Environment()
    functions = {"semver": SemVer, "quantity": Quantity, "compareTo": cel_compare_to}
    return bool(env.program(env.compile(expression), functions=functions).evaluate(device))


# Devices as edgegpu-dra-driver publishes them (dra/src/inventory.rs): an Orin's GPU and DLA
# core, a discrete H100, one of its MIG devices, and an older discrete T4.
ORIN_FACTS = {"board": {"string": "jetson-agx-orin-devkit"}, "l4tRelease": {"version": "36.4.3"},
              "jetpackMajor": {"int": 6}}
ORIN_GPU = ({"type": {"string": "gpu"}, "uuid": {"string": "GPU-0"}, "productName": {"string": "Orin"},
             "integrated": {"bool": True}, "migEnabled": {"bool": False}, "architecture": {"string": "ampere"},
             "cudaComputeCapability": {"version": "8.7.0"}, "cudaDriverVersion": {"version": "12.6.0"},
             **ORIN_FACTS}, {"memory": "62Gi"})
ORIN_DLA = ({"type": {"string": "dla"}, "index": {"int": 0}, "integrated": {"bool": True}, **ORIN_FACTS}, {})
H100 = ({"type": {"string": "gpu"}, "uuid": {"string": "GPU-1"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
         "integrated": {"bool": False}, "migEnabled": {"bool": False}, "cudaComputeCapability": {"version": "9.0.0"},
         "driverVersion": {"version": "580.65.6"}}, {"memory": "80Gi"})
# An H100 in MIG mode published whole beside its MIG devices (partitionable devices).
H100_MIG_MODE = ({**H100[0], "uuid": {"string": "GPU-2"}, "migEnabled": {"bool": True}}, {"memory": "80Gi"})
H100_MIG = ({"type": {"string": "mig"}, "uuid": {"string": "MIG-1"}, "parentUUID": {"string": "GPU-1"},
             "profile": {"string": "1g.10gb"}, "integrated": {"bool": False},
             "cudaComputeCapability": {"version": "9.0.0"}}, {"memory": "10Gi"})
T4 = ({"type": {"string": "gpu"}, "integrated": {"bool": False}, "migEnabled": {"bool": False},
       "cudaComputeCapability": {"version": "7.5.0"}}, {"memory": "15Gi"})


class Dra(unittest.TestCase):
    """dra.*: the DRA driver beside (never with) the device plugin."""

    render_checked = Matrix.render_checked

    def test_off_by_default(self):
        docs = render({}, extra=VAP_CLUSTER)
        self.assertFalse(dra_drivers(docs))
        self.assertNotIn("DeviceClass", {d["kind"] for d in docs})
        self.assertNotIn("edgegpu-dra-driver", of_kind(docs, "ClusterRole"))
        # The plugins: no allocator term, only the ownership locks' directory.
        for ds in plugins(docs).values():
            self.assertNotIn("edgegpu.io/allocator", json.dumps(pod(ds)["affinity"]))
            self.assertEqual(mounts(pod(ds)["containers"][0])["/run/edgegpu"], ("ownership", False))
            self.assertEqual(host_paths(ds)["ownership"], ("/run/edgegpu", "DirectoryOrCreate"))

    def test_node_by_node(self):
        docs = self.render_checked(DRA_ON)
        drivers = dra_drivers(docs)
        self.assertEqual(sorted(drivers), ["edgegpu-dra-driver-discrete", "edgegpu-dra-driver-jetson"])
        daemonsets = plugins(docs)
        for variant in ("jetson", "discrete"):
            plugin, driver = daemonsets[f"edgegpu-device-plugin-{variant}"], drivers[f"edgegpu-dra-driver-{variant}"]
            gpu_terms = required_terms(plugins(render({}))[f"edgegpu-device-plugin-{variant}"])
            # The same GPU nodes, split by edgegpu.io/allocator.
            self.assertEqual(required_terms(plugin), [{"matchExpressions": t["matchExpressions"] + [
                {"key": "edgegpu.io/allocator", "operator": "NotIn", "values": ["dra"]}]} for t in gpu_terms])
            self.assertEqual(required_terms(driver), [{"matchExpressions": t["matchExpressions"] + [
                {"key": "edgegpu.io/allocator", "operator": "In", "values": ["dra"]}]} for t in gpu_terms])
            spec = pod(driver)
            container, = spec["containers"]
            self.assertEqual(container["command"], ["/usr/bin/edgegpu-dra-driver"])
            self.assertEqual(container["args"], ["--root=/host"])
            self.assertEqual(container["image"], pod(plugin)["containers"][0]["image"])
            self.assertEqual(env(container)["NODE_NAME"], {"fieldRef": {"fieldPath": "spec.nodeName"}})
            self.assertEqual(spec["serviceAccountName"], "edgegpu-dra-driver")
            self.assertEqual(spec["terminationGracePeriodSeconds"], 30)
            self.assertEqual((spec["priorityClassName"], spec["tolerations"]),
                             (pod(plugin)["priorityClassName"], pod(plugin)["tolerations"]))
            found = mounts(container)
            for path, kind in (("/var/lib/kubelet/plugins_registry", "Directory"),
                               ("/var/lib/kubelet/plugins/edgegpu.io", "DirectoryOrCreate"),
                               ("/var/run/cdi", "DirectoryOrCreate"), ("/run/edgegpu", "DirectoryOrCreate")):
                name, read_only = found[path]
                self.assertFalse(read_only, path)
                self.assertEqual(host_paths(driver)[name], (path, kind))
            # The host's root, read-only and recursively so, at /host: the plugin's discovery
            # files and whatever the claims' CDI specs take from the driver's installation.
            self.assertEqual(found["/host"], ("host-root", True))
            self.assertEqual(host_paths(driver)["host-root"], ("/", "Directory"))
            root_mount, = [m for m in container["volumeMounts"] if m["mountPath"] == "/host"]
            self.assertEqual(root_mount.get("recursiveReadOnly"), "IfPossible")
            for masked in ("/host/dev/pts", "/host/dev/shm"):
                self.assertEqual(found[masked], ("empty", True))
            labeller = pod(plugin)["initContainers"][0]
            self.assertNotIn("/var/lib/kubelet/device-plugins", found)
            self.assertNotIn("/var/lib/kubelet/pod-resources", found)
            # The plugin's discovery settings, as its init container `labels` has them.
            self.assertEqual({k: v for k, v in env(container).items() if k not in ("NODE_NAME", "POD_UID")},
                             {k: v for k, v in env(labeller).items() if k not in ("NODE_NAME", "CONFIG_FILE")})
            # dra.rollingUpdate (on by default): a surge, the pod's UID naming its sockets.
            self.assertEqual(env(container)["POD_UID"], {"fieldRef": {"fieldPath": "metadata.uid"}})
            self.assertEqual(driver["spec"]["updateStrategy"],
                             {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
            self.assertEqual(driver["spec"]["minReadySeconds"], 10)
            if variant == "discrete":
                self.assertEqual(env(container)["NVIDIA_VISIBLE_DEVICES"], "all")
            else:
                self.assertNotIn("NVIDIA_VISIBLE_DEVICES", env(container))
        role = of_kind(docs, "ClusterRole")["edgegpu-dra-driver"]
        # What dra/src calls through edgegpu-apiclient, nothing more: slices listed (a GET of the
        # collection), created (POST), replaced (PUT) and deleted (slices.rs); a claim read by
        # name (claims.rs); the Node read by name (slices.rs, the owner's UID). No watch.
        self.assertEqual(role["rules"], [
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
             "verbs": ["list", "create", "update", "delete"]},
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}])
        classes = of_kind(docs, "DeviceClass")
        self.assertEqual(sorted(classes), ["dla.edgegpu.io", "gpu.edgegpu.io", "mig.edgegpu.io", "pva.edgegpu.io"])
        self.assertNotIn("extendedResourceName", classes["gpu.edgegpu.io"]["spec"])

    def test_rolling_update_off(self):
        """dra.rollingUpdate=false (kubelets before 1.33): the fixed socket names and the
        top-level updateStrategy, as the plugins."""
        values = {"dra": {"enabled": True, "rollingUpdate": False},
                  "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}}
        docs = self.render_checked(values)
        for ds in dra_drivers(docs).values():
            self.assertNotIn("POD_UID", env(pod(ds)["containers"][0]))
            self.assertEqual(ds["spec"]["updateStrategy"], values["updateStrategy"])
            self.assertNotIn("minReadySeconds", ds["spec"])

    def test_all_nodes_and_options(self):
        values = {"dra": {"enabled": True, "allNodes": True, "devices": ["gpu", "dla"],
                          "nodeSelector": {"example.com/pool": "edge"},
                          "deviceClasses": {"gpu": {"extendedResourceName": "edgegpu.io/gpu"}}},
                  "nodeSetup": {"enabled": True}, "runtimeClassName": "nvidia", "migStrategy": "mixed"}
        docs = self.render_checked(values)
        self.assertFalse(plugins(docs))
        drivers = dra_drivers(docs)
        gpu_terms = {v: required_terms(plugins(render({}))[f"edgegpu-device-plugin-{v}"]) for v in ("jetson", "discrete")}
        for variant, ds in ((v, drivers[f"edgegpu-dra-driver-{v}"]) for v in ("jetson", "discrete")):
            self.assertEqual(required_terms(ds), gpu_terms[variant])
            self.assertEqual(pod(ds)["containers"][0]["args"], ["--root=/host", "--devices=gpu,dla"])
            self.assertEqual(pod(ds)["nodeSelector"], {"example.com/pool": "edge"})
            # MIG devices are published only with a MIG strategy, the plugin's value.
            self.assertEqual(env(pod(ds)["containers"][0])["MIG_STRATEGY"], "mixed")
        self.assertEqual(pod(drivers["edgegpu-dra-driver-discrete"])["runtimeClassName"], "nvidia")
        self.assertNotIn("runtimeClassName", pod(drivers["edgegpu-dra-driver-jetson"]))
        # Node setup still sets up every GPU node (CDI is what the DRA driver's claims need).
        node_setup = of_kind(docs, "DaemonSet")["edgegpu-node-setup"]
        self.assertEqual(required_terms(node_setup), gpu_terms["jetson"] + gpu_terms["discrete"])
        self.assertEqual(of_kind(docs, "DeviceClass")["gpu.edgegpu.io"]["spec"]["extendedResourceName"],
                         "edgegpu.io/gpu")
        # No DeviceClasses on request; the MPS companion runs on every GPU node, as node setup.
        docs = render({"dra": {"enabled": True, "deviceClasses": {"create": False}}, "mps": {"enabled": True}})
        self.assertNotIn("DeviceClass", {d["kind"] for d in docs})
        companion = of_kind(docs, "DaemonSet")["edgegpu-mps-control-daemon"]
        self.assertEqual(required_terms(companion), gpu_terms["jetson"] + gpu_terms["discrete"])

    def test_policy_catches_two_allocators_and_privilege(self):
        docs = [d for d in render(DRA_ON) if d["kind"] != "Job"]

        def problems_with(change):
            changed = copy.deepcopy(docs)
            change(changed)
            return check_policy.check_objects(REPO, changed, {}, "test", configmap_required=False)

        self.assertEqual(problems_with(lambda d: None), [])
        by_name = lambda objects, name: next(o for o in objects if o["metadata"]["name"] == name)  # noqa: E731
        # A plugin without its NotIn term would share the DRA nodes.
        problems = problems_with(lambda d: [t["matchExpressions"].pop() for t in required_terms(
            by_name(d, "edgegpu-device-plugin-jetson"))])
        self.assertTrue(any("two allocators for one GPU" in p for p in problems), problems)
        where = "DaemonSet edgegpu-dra-driver-jetson"
        self.assertIn(f"{where}: hostPID must not be set",
                      problems_with(lambda d: pod(by_name(d, "edgegpu-dra-driver-jetson")).update(hostPID=True)))
        problems = problems_with(lambda d: by_name(d, "edgegpu-dra-driver-jetson")["spec"]["template"]["spec"]
                                 ["containers"][0]["volumeMounts"][2].update(readOnly=True))
        self.assertIn(f"{where} container dra-driver: /var/lib/kubelet/plugins/edgegpu.io must be mounted read-write at "
                      "the same path (the kubelet and the runtime use the host's paths)", problems)
        problems = problems_with(lambda d: by_name(d, "edgegpu-dra-driver-jetson")["spec"]["template"]["spec"]
                                 ["containers"][0]["args"].append("--debug"))
        self.assertIn(f"{where} container dra-driver: argument --debug is not a flag of edgegpu-dra-driver (dra/src)",
                      problems)
        problems = problems_with(lambda d: next(o for o in d if o["kind"] == "ClusterRole"
                                                and o["metadata"]["name"] == "edgegpu-dra-driver")
                                 ["rules"][2]["verbs"].append("update"))
        self.assertTrue(any(p.startswith("ClusterRole edgegpu-dra-driver: grants") for p in problems), problems)
        # The plugin's discovery reads the device tree: a driver without the host root is caught.
        problems = problems_with(lambda d: pod(by_name(d, "edgegpu-dra-driver-jetson"))["containers"][0]
                                 ["volumeMounts"].pop(5))
        self.assertTrue(any("but no host mount covers it" in p for p in problems), problems)
        # The host root read-only but its submounts (/proc, /sys, /dev) writable.
        problems = problems_with(lambda d: pod(by_name(d, "edgegpu-dra-driver-jetson"))["containers"][0]
                                 ["volumeMounts"][5].pop("recursiveReadOnly"))
        self.assertIn(f"{where} container dra-driver: the host root must be mounted recursiveReadOnly (Enabled or "
                      "IfPossible): its submounts would be writable", problems)
        # A plugin without the ownership locks' directory.
        problems = problems_with(lambda d: pod(by_name(d, "edgegpu-device-plugin-discrete"))["containers"][0].update(
            volumeMounts=[m for m in pod(by_name(d, "edgegpu-device-plugin-discrete"))["containers"][0]["volumeMounts"]
                          if m["mountPath"] != "/run/edgegpu"]))
        self.assertTrue(any("/run/edgegpu is not mounted" in p for p in problems), problems)

    def test_admission_policy(self):
        docs = render(DRA_ON, release="r1", namespace="gpu", extra=DRA_CLUSTER)
        policy = of_kind(docs, "ValidatingAdmissionPolicy")["r1-edgegpu-dra-driver"]
        self.assertEqual(of_kind(docs, "ValidatingAdmissionPolicyBinding")["r1-edgegpu-dra-driver"]["spec"],
                         {"policyName": "r1-edgegpu-dra-driver", "validationActions": ["Deny"]})
        for version in (OLDEST_DRA_KUBERNETES, NEWEST_KUBERNETES):
            kubernetes_validate.validate(policy, version, strict=True)
        self.assertNotIn("ValidatingAdmissionPolicy", {d["kind"] for d in render(DRA_ON)})
        self.assertNotIn("r1-edgegpu-dra-driver", of_kind(render({"dra": {"enabled": True, "admissionPolicy": False}},
                                                                 release="r1", extra=DRA_CLUSTER),
                                                          "ValidatingAdmissionPolicy"))
        me = "system:serviceaccount:gpu:r1-edgegpu-dra-driver"
        on_n1 = {"authentication.kubernetes.io/node-name": ["n1"]}

        def slice_(node="n1", driver="edgegpu.io"):
            spec = {"driver": driver, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}
            if node:
                spec["nodeName"] = node
            return {"metadata": {"name": f"{node}-x"}, "spec": spec}

        def decide(username, extra, operation, old, new):
            return decide_write(policy, username, extra, operation, old, new)

        self.assertEqual(decide(me, on_n1, "CREATE", None, slice_()), [])
        self.assertEqual(decide(me, on_n1, "UPDATE", slice_(), slice_()), [])
        self.assertEqual(decide(me, on_n1, "DELETE", slice_(), None), [])
        self.assertEqual(decide(me, on_n1, "CREATE", None, slice_("n2")),
                         ["the DRA driver may only write the ResourceSlices of the node its pod runs on"])
        self.assertEqual(len(decide(me, on_n1, "DELETE", slice_("n2"), None)), 1)
        self.assertEqual(len(decide(me, on_n1, "UPDATE", slice_("n2"), slice_())), 1)
        self.assertEqual(len(decide(me, on_n1, "CREATE", None, slice_(None))), 1)
        self.assertEqual(len(decide(me, None, "CREATE", None, slice_())), 1)
        self.assertEqual(decide(me, on_n1, "CREATE", None, slice_(driver="gpu.nvidia.com")),
                         ["the DRA driver may only write ResourceSlices of the driver edgegpu.io"])
        self.assertIsNone(decide("system:serviceaccount:gpu:other", on_n1, "CREATE", None, slice_("n2")))

    def test_admission_policy_binds_the_pool_to_the_node(self):
        """The scheduler takes a pool's devices from its slices of the highest generation: a slice
        on its own node but in another node's pool, with a higher generation, would hide that
        node's devices. The driver names its one pool after its node (dra/src/slices.rs)."""
        policy = of_kind(render(DRA_ON, release="r1", namespace="gpu", extra=DRA_CLUSTER),
                         "ValidatingAdmissionPolicy")["r1-edgegpu-dra-driver"]
        me = "system:serviceaccount:gpu:r1-edgegpu-dra-driver"
        on_n1 = {"authentication.kubernetes.io/node-name": ["n1"]}
        wrong_pool = "the DRA driver may only write ResourceSlices of the pool named after the node its pod runs on"

        def slice_(pool, generation=1):
            return {"metadata": {"name": f"00000-edgegpu.io-n1-{pool}"},
                    "spec": {"driver": "edgegpu.io", "nodeName": "n1",
                             "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1}}}

        # Its own pool: created, updated with a new generation, deleted.
        self.assertEqual(decide_write(policy, me, on_n1, "CREATE", None, slice_("n1")), [])
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", slice_("n1"), slice_("n1", 2)), [])
        self.assertEqual(decide_write(policy, me, on_n1, "DELETE", slice_("n1"), None), [])
        # Another node's pool, on its own node: created, or an own slice moved there.
        self.assertEqual(decide_write(policy, me, on_n1, "CREATE", None, slice_("n2", 99)), [wrong_pool])
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", slice_("n1"), slice_("n2", 99)), [wrong_pool])
        self.assertEqual(decide_write(policy, me, on_n1, "CREATE", None, slice_("")), [wrong_pool])
        # A slice of its node in another pool (an older scheme's, or planted) may still be
        # deleted or moved into its own pool: the driver deletes such slices (docs/dra.md).
        self.assertEqual(decide_write(policy, me, on_n1, "DELETE", slice_("n2", 99), None), [])
        self.assertEqual(decide_write(policy, me, on_n1, "UPDATE", slice_("n2", 99), slice_("n1", 100)), [])

    def test_device_class_selectors(self):
        classes = of_kind(render(DRA_ON), "DeviceClass")
        devices = {"orin-gpu": ORIN_GPU, "orin-dla": ORIN_DLA, "h100": H100, "h100-mig": H100_MIG, "t4": T4,
                   "h100-mig-mode": H100_MIG_MODE}
        expected = {"gpu.edgegpu.io": {"orin-gpu", "h100", "t4", "h100-mig-mode"}, "mig.edgegpu.io": {"h100-mig"},
                    "dla.edgegpu.io": {"orin-dla"}, "pva.edgegpu.io": set()}
        for name, device_class in classes.items():
            expression, = [s["cel"]["expression"] for s in device_class["spec"]["selectors"]]
            selected = {d for d, (attributes, capacity) in devices.items()
                        if cel_selects(expression, device_env("edgegpu.io", attributes, capacity))}
            self.assertEqual(selected, expected[name], name)
            # Another driver's device of the same type is not selected.
            self.assertFalse(cel_selects(expression, device_env("gpu.nvidia.com", *H100)), name)

    def test_example_selectors(self):
        """deploy/examples/dra-*.yaml: each request's CEL, with its class's, against the sample
        devices. semver(), quantity() and compareTo are not in cel-python: SemVer, Quantity and
        cel_compare_to above stand in for Kubernetes' CEL library."""
        classes = {n: [s["cel"]["expression"] for s in c["spec"]["selectors"]]
                   for n, c in of_kind(render(DRA_ON), "DeviceClass").items()}
        devices = {"orin-gpu": ORIN_GPU, "orin-dla": ORIN_DLA, "h100": H100, "h100-mig": H100_MIG, "t4": T4,
                   "h100-mig-mode": H100_MIG_MODE}
        gpus = {"orin-gpu", "h100", "t4", "h100-mig-mode"}
        expected = {("orin-gpu-dla", "gpu"): {"orin-gpu"}, ("orin-gpu-dla", "dla"): {"orin-dla"},
                    ("ampere-16gi", "gpu"): {"h100", "h100-mig-mode"}, ("mig-1g-10gb", "mig"): {"h100-mig"},
                    ("one-gpu", "gpu"): gpus, ("mps-gpu", "gpu"): gpus,
                    ("shared-gpu", "gpu"): gpus,
                    ("all-gpus-admin", "gpus"): gpus,
                    ("jetson-gpu-2gi", "gpu"): {"orin-gpu"},
                    ("mig-or-share", "gpu/mig"): {"h100-mig"},
                    ("mig-or-share", "gpu/share"): {"h100", "t4"}}
        found = {}
        for path in sorted((REPO / "deploy" / "examples").glob("dra-*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc or doc["kind"] not in ("ResourceClaimTemplate", "ResourceClaim"):
                    continue
                spec = doc["spec"]["spec"] if doc["kind"] == "ResourceClaimTemplate" else doc["spec"]
                for request in spec["devices"]["requests"]:
                    # A request is exactly one device request, or a prioritized list of
                    # subrequests (firstAvailable), each found as request/subrequest.
                    alternatives = [(request["name"], request["exactly"])] if "exactly" in request else [
                        (f"{request['name']}/{sub['name']}", sub) for sub in request["firstAvailable"]]
                    for name, exactly in alternatives:
                        expressions = classes[exactly["deviceClassName"]] + [
                            s["cel"]["expression"] for s in exactly.get("selectors") or []]
                        found[(doc["metadata"]["name"], name)] = {
                            d for d, (attributes, capacity) in devices.items()
                            if all(cel_selects(e, device_env("edgegpu.io", attributes, capacity)) for e in expressions)}
                for config in spec["devices"].get("config") or []:
                    parameters = config["opaque"]["parameters"]
                    self.assertEqual((config["opaque"]["driver"], parameters["apiVersion"], parameters["kind"]),
                                     ("edgegpu.io", "edgegpu.io/v1alpha1", "GpuConfig"))
                    self.assertIn(parameters["sharing"]["strategy"], ("TimeSlicing", "MPS"))
        self.assertEqual(found, expected)

    def test_helm_template_without_a_cluster_renders_the_device_classes(self):
        # helm 3.19 assumes Kubernetes 1.34 without a cluster; below 1.32 dra.enabled is refused.
        self.assertIn("DeviceClass", {d["kind"] for d in render(DRA_ON)})
        result = helm("template", "edgegpu", str(CHART), "--kube-version", "1.31.9", values=DRA_ON)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("dra.enabled on Kubernetes v1.31.9: the DRA driver needs resource.k8s.io", result.stderr)
        self.assertIn("DeviceClass", {d["kind"] for d in render(DRA_ON, extra=("--kube-version", "1.37.0"))})

    def test_device_classes_follow_the_clusters_resource_version(self):
        # Each release gets the newest version it serves, valid under its own schema; the
        # extended resource name (KEP-5004, 1.34+) only from v1 on.
        values = dict(DRA_ON, dra=dict(DRA_ON["dra"], deviceClasses={"gpu": {"extendedResourceName": "example.com/gpu"}}))
        for kube, version in (("1.32.3", "v1beta1"), ("1.33.4", "v1beta2"), ("1.34.0", "v1"), ("1.36.1", "v1")):
            docs = render(values, extra=("--kube-version", kube))
            classes = of_kind(docs, "DeviceClass")
            self.assertEqual(len(classes), 4, kube)
            for doc in classes.values():
                self.assertEqual(doc["apiVersion"], f"resource.k8s.io/{version}", kube)
                minor = ".".join(kube.split(".")[:2])
                kubernetes_validate.validate(doc, minor, strict=True)
                if doc["metadata"]["name"].startswith("gpu."):
                    self.assertEqual("extendedResourceName" in doc["spec"], version == "v1", kube)


class BadValues(unittest.TestCase):
    """Bad values stop the install with a message that names the value."""

    CASES = [
        ({"migStrategy": "some"}, "at '/migStrategy': value must be one of <nil>, 'none', 'single', 'mixed'"),
        ({"deviceListStrategy": "volume-mounts"}, "at '/deviceListStrategy': 'volume-mounts' does not match"),
        ({"deviceIDStrategy": "serial"}, "at '/deviceIDStrategy': value must be one of"),
        ({"failOnInitError": "yes"}, "at '/failOnInitError': got string, want null or boolean"),
        ({"dcgmExporter": {"enabled": True}}, "at '': additional properties 'dcgmExporter' not allowed"),
        ({"devicePlugin": {"jetson": {"enable": False}}}, "at '/devicePlugin/jetson': additional properties 'enable'"),
        ({"resources": {"limits": {"memory": "lots"}}}, "at '/resources/limits/memory': 'lots' does not match"),
        ({"tolerations": [{"key": "x", "operator": "Maybe"}]}, "at '/tolerations/0/operator': value must be one of"),
        ({"nodeSetup": {"mode": "systemd"}}, "at '/nodeSetup/mode': value must be one of 'auto'"),
        ({"nodeSetup": {"runtimePath": "nvidia-container-runtime"}}, "at '/nodeSetup/runtimePath': "),
        ({"devicequery": {"expectDevices": 0}}, "at '/devicequery/expectDevices': minimum: got 0, want 1"),
        ({"affinity": ORIN_AFFINITY},
         "affinity replaces the node affinity of both plugin DaemonSets, so a node could run two plugins"),
        ({"devicePlugin": {"jetson": {"enabled": False}, "discrete": {"enabled": False}}},
         "devicePlugin.jetson.enabled and devicePlugin.discrete.enabled are both false"),
        ({"config": {"map": {"a": JETSON_CONFIG, "b": DISCRETE_CONFIG}}},
         "config.map has 2 entries (a, b), config.default is empty and no config.fallbackStrategies entry "
         "(named, single) picks one (named: the entry \"default\", single: the only entry): set config.default"),
        ({"config": {"map": {"a": JETSON_CONFIG}, "default": "b"}},
         'the jetson plugin uses config "b", which is not in config.map (a)'),
        ({"config": {"default": "a"}}, 'config.default is "a" but config.map is empty'),
        ({"config": {"map": {"a": "version: v2\n"}}}, 'config.map.a: version must be v1'),
        ({"config": {"map": {"a": "Version: v2\n"}}}, 'config.map.a: version must be v1 (NVIDIA\'s config format) or left out, found "v2"'),
        ({"config": {"map": {"a": "Flags:\n  MigStrategy: some\n"}}},
         'config.map.a: flags.migStrategy "some" is not one of none, single, mixed'),
        ({"config": {"map": {"a": "version: v1\nflags:\n  migStrategy: some\n"}}},
         'config.map.a: flags.migStrategy "some" is not one of none, single, mixed'),
        ({"config": {"map": {"a": JETSON_CONFIG.replace("replicas: 4", "replicas: 1")}}},
         "config.map.a: sharing.timeSlicing.resources nvidia.com/gpu: replicas must be a whole number >= 2, found 1"),
        ({"config": {"map": {"a": JETSON_CONFIG.replace("replicas: 4", "replicas: 2.5")}}},
         "config.map.a: sharing.timeSlicing.resources nvidia.com/gpu: replicas must be a whole number >= 2, found 2.5"),
        ({"config": {"map": {"a": JETSON_CONFIG.replace("replicas: 4", 'replicas: "4"')}}},
         "replicas must be a whole number >= 2, found 4"),
        ({"config": {"map": {"a": "version: v1\nsharing:\n  timeSlicing:\n    resources: 5\n"}}},
         "config.map.a: sharing.timeSlicing.resources must be a list of {name, replicas}, found 5"),
        ({"config": {"map": {"a": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - replicas: 4\n"}}},
         "config.map.a: sharing.timeSlicing.resources[0] has no name"),
        ({"config": {"map": {"a": "version: v1\nsharing:\n  timeSlicing:\n    resources: [gpu]\n"}}},
         "config.map.a: sharing.timeSlicing.resources[0] must be a mapping with name and replicas"),
        ({"config": {"map": {"a": "version: v1\nsharing: time-slicing\n"}}}, "config.map.a: sharing must be a mapping"),
        ({"config": {"map": {"a": "version: v1\nsharing:\n  timeSlicing: [4]\n"}}},
         "config.map.a: sharing.timeSlicing must be a mapping"),
        ({"config": {"map": {"a": "version: v1\nflags: [none]\n"}}}, "config.map.a: flags must be a mapping"),
        ({"config": {"map": {"a": "version: v1\nsharing: [\n"}}}, "config.map.a is not YAML"),
        ({"metrics": {"port": 0}}, "at '/metrics/port': minimum: got 0, want 1"),
        ({"metrics": {"podMonitor": {"interval": "soon"}}}, "at '/metrics/podMonitor/interval': 'soon' does not match"),
        ({"metrics": {"podGpuMemory": {"hostPid": True}}}, "at '/metrics/podGpuMemory': additional properties 'hostPid'"),
        ({"metrics": {"podGpuMemory": {"nvmapDebugfs": "yes"}}},
         "at '/metrics/podGpuMemory/nvmapDebugfs': got string, want boolean"),
        ({"nodeLabels": {"labeler": {}}}, "at '/nodeLabels': additional properties 'labeler' not allowed"),
        ({"config": {"map": {"default": JETSON_CONFIG, "b": DISCRETE_CONFIG}, "fallbackStrategies": ["single"]}},
         "config.map has 2 entries (b, default), config.default is empty and no config.fallbackStrategies entry "
         "(single) picks one"),
        ({"config": {"fallbackStrategies": ["first"]}}, "at '/config/fallbackStrategies/0': value must be one of"),
        # NVIDIA's values at anything but their no-op value: refused with the reason.
        ({"image": {"repository": "nvcr.io/nvidia/k8s-device-plugin", "tag": "v0.17.0"}},
         'image.repository "nvcr.io/nvidia/k8s-device-plugin" is NVIDIA\'s device plugin'),
        ({"image": {"tag": 0.17}}, "at '/image/tag': got number, want integer or string"),
        ({"gfd": {"enabled": True}}, "gfd.enabled: this chart has no GPU feature discovery"),
        ({"nfd": {"enabled": True}}, "nfd.enabled: this chart does not install Node Feature Discovery"),
        ({"config": {"name": "plugin-configs"}}, 'config.name "plugin-configs": a ConfigMap of configs made outside'),
        ({"nvidiaDriverRoot": "/run/nvidia/driver"}, 'nvidiaDriverRoot "/run/nvidia/driver": the discrete plugin'),
        ({"deviceDiscoveryStrategy": "tegra"}, 'deviceDiscoveryStrategy "tegra": fixed per DaemonSet'),
        ({"gdsEnabled": True}, "gdsEnabled: not implemented by the edgegpu device plugin"),
        ({"securityContext": {"privileged": True}}, "securityContext: the chart sets the pods' security context"),
        ({"podSecurityContext": {"runAsUser": 1000}}, "podSecurityContext: the chart sets the pods' security context"),
        ({"selectorLabelsOverride": {"app": "gpu"}}, "selectorLabelsOverride: the DaemonSets' selectors are fixed"),
        ({"devicePlugin": {"enableHostNetwork": True}}, "devicePlugin.enableHostNetwork: the plugin serves a unix"),
        ({"cdi": {"nvidiaHookPath": "/usr/bin/nvidia-cdi-hook"}}, "cdi.nvidiaHookPath: the edgegpu plugin writes no CDI"),
        ({"allowDefaultNamespace": False, "namespaceOverride": "default"},
         "allowDefaultNamespace is false and the namespace is default"),
        ({"affinity": "nodes-with-gpus"}, "at '/affinity': "),
        # MPS.
        ({"config": {"map": {"a": MPS_CONFIG}}},
         "config.map.a uses sharing.mps, but mps.enabled is false: without the MPS companion no MPS control daemon "
         "runs and the jetson plugin keeps those GPUs unhealthy; set mps.enabled=true"),
        ({"config": {"map": {"a": GPU_MEMORY_CONFIG}}},
         "config.map.a uses sharing.gpuMemory with enforcement auto, but mps.enabled is false"),
        ({"mps": {"enabled": True}, "config": {"map": {"a": MPS_CONFIG.replace("replicas: 2", "replicas: 64")}}},
         "config.map.a: sharing.mps.resources nvidia.com/gpu: replicas must be a whole number from 2 to 48"),
        ({"mps": {"enabled": True}, "config": {"map": {"a": MPS_CONFIG + "        activeThreadPercentage: 0\n"}}},
         "config.map.a: sharing.mps.resources nvidia.com/gpu: activeThreadPercentage must be a whole number from 1"),
        ({"mps": {"enabled": True}, "config": {"map": {"a": "version: v1\nsharing:\n  mps:\n    resources:\n      - replicas: 2\n"}}},
         "config.map.a: sharing.mps.resources[0] has no name"),
        ({"mps": {"enabled": True}, "config": {"map": {"a": GPU_MEMORY_CONFIG + "    enforcement: strict\n"}}},
         'config.map.a: sharing.gpuMemory.enforcement "strict" is not one of auto, mps, none'),
        ({"mps": {"enabled": True}, "config": {"map": {"a": GPU_MEMORY_CONFIG.replace("    resources:\n      - name: nvidia.com/gpu\n", "    resources: []\n")}}},
         "config.map.a: sharing.gpuMemory.resources must be a non-empty list"),
        ({"mps": {"enabled": True}, "config": {"map": {"a": GPU_MEMORY_CONFIG + "  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n"}}},
         "config.map.a: sharing.gpuMemory cannot be combined with sharing.timeSlicing or sharing.mps"),
        ({"mps": {"enabled": True, "root": "/run/nvidia/mps"}}, "mps.root /run/nvidia/mps is NVIDIA's MPS directory"),
        ({"mps": {"enabled": True, "root": "/var/lib/kubelet/mps"}},
         "mps.root /var/lib/kubelet/mps is inside /var/lib/kubelet, which the plugin pods use"),
        ({"mps": {"enabled": True, "root": "/run/edgegpu/mps/"}}, "at '/mps/root': '/run/edgegpu/mps/' does not match"),
        ({"mps": {"enabled": True, "root": "/run/../mps"}}, "at '/mps/root': '/run/../mps' does not match"),
        ({"mps": {"enabled": True, "root": "run/mps"}}, "at '/mps/root': 'run/mps' does not match"),
        ({"mps": {"enabled": True, "controlBinary": "nvidia-cuda-mps-control"}}, "at '/mps/controlBinary': "),
        ({"mps": {"enabled": True, "enableHostPID": False}},
         "mps.enableHostPID=false: the MPS companion always runs in the host's PID namespace"),
        ({"mps": {"enableHostNetwork": True}}, "mps.enableHostNetwork: the MPS companion uses no network"),
        ({"mps": {"enabled": True, "daemon": {}}}, "at '/mps': additional properties 'daemon' not allowed"),
        ({"devicequery": {"limitsResource": "gpu-mem"}}, "at '/devicequery/limitsResource': 'gpu-mem' does not match"),
        ({"devicequery": {"limitsCount": 0}}, "at '/devicequery/limitsCount': minimum: got 0, want 1"),
        # NVIDIA's older and proposed keys.
        ({"legacyDaemonsetAPI": True}, "legacyDaemonsetAPI: extensions/v1beta1 DaemonSets were removed"),
        ({"namespace": "gpu", "namespaceOverride": "other"}, 'namespace "gpu" and namespaceOverride "other"'),
        ({"componentSelectorLabels": {"enabled": True, "labels": {}}},
         "at '/componentSelectorLabels': additional properties 'labels' not allowed"),
        ({"devicePlugin": {"containers": {"init": {"image": "x"}}}},
         "devicePlugin.containers.init: the edgegpu plugin pods have no init container of NVIDIA's"),
        ({"devicePlugin": {"containers": {"sidecar": {"resources": {}}, "main": {}}}},
         "devicePlugin.containers.sidecar: the edgegpu plugin pods have no sidecar container of NVIDIA's"),
        ({"devicePlugin": {"containers": {"main": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}}}},
         "devicePlugin.containers.main.env: NVIDIA_VISIBLE_DEVICES is read by the NVIDIA container runtime"),
        ({"devicePlugin": {"containers": {"main": {"env": [{"name": "MIG_STRATEGY", "value": "mixed"}]}}}},
         "devicePlugin.containers.main.env: MIG_STRATEGY is set by the chart"),
        ({"devicePlugin": {"containers": {"main": {"env": [{"value": "1"}]}}}},
         "at '/devicePlugin/containers/main/env/0': missing property 'name'"),
        ({"devicePlugin": {"containers": {"main": {"args": ["--x"]}}}},
         "at '/devicePlugin/containers/main': additional properties 'args' not allowed"),
        # DRA.
        ({"dra": {"allNodes": True}}, "dra.allNodes=true without dra.enabled: it would remove the device plugin"),
        ({"dra": {"enabled": True}, "devicePlugin": {"enabled": False}},
         "dra.enabled with devicePlugin.enabled=false (or both devicePlugin.jetson.enabled and "
         "devicePlugin.discrete.enabled false): those values also pick the kinds of GPU node"),
        ({"dra": {"enabled": True}, "nodeSelector": {"edgegpu.io/allocator": "dra"}},
         "nodeSelector names the node label edgegpu.io/allocator, which the chart sets on both sides itself"),
        ({"dra": {"enabled": True}, "devicePlugin": {"jetson": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "edgegpu.io/allocator", "operator": "DoesNotExist"}]}]}}}}}},
         "devicePlugin.jetson.affinity names the node label edgegpu.io/allocator"),
        ({"dra": {"enabled": True, "deviceClasses": {"gpu": {"extendedResourceName": "nvidia.com/gpu"}}}},
         "dra.deviceClasses.gpu.extendedResourceName nvidia.com/gpu while device plugins still serve nvidia.com/gpu"),
        ({"dra": {"enabled": True, "devices": ["gpu", "mig"]}}, "at '/dra/devices/1': value must be one of"),
        ({"dra": {"enabled": True, "devices": []}}, "at '/dra/devices': minItems"),
        ({"dra": {"enabled": True, "deviceClasses": {"gpu": {"extendedResourceName": "gpu"}}}},
         "at '/dra/deviceClasses/gpu/extendedResourceName': 'gpu' does not match"),
        ({"dra": {"enabled": "yes"}}, "at '/dra/enabled': got string, want boolean"),
        ({"dra": {"enabled": True, "driverName": "gpu.nvidia.com"}}, "at '/dra': additional properties 'driverName'"),
    ]

    def test_docs_give_their_number(self):
        text = (REPO / "docs" / "helm.md").read_text()
        self.assertIn(f"; {len(self.CASES)} bad values sets (", text)

    def test_each_is_rejected_with_its_message(self):
        for values, message in self.CASES:
            with self.subTest(values=values):
                result = helm("template", "edgegpu", str(CHART), values=values)
                self.assertNotEqual(result.returncode, 0, f"accepted: {values}")
                self.assertIn(message, result.stderr)


class Rancher(unittest.TestCase):
    def test_catalog_annotations(self):
        chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
        annotations = chart.get("annotations") or {}
        # The annotations Rancher's chart build tooling requires of a catalog chart.
        for key in ("display-name", "namespace", "release-name", "kube-version", "rancher-version",
                    "permits-os"):
            self.assertTrue(annotations.get(f"catalog.cattle.io/{key}"), key)
        self.assertIn(annotations["catalog.cattle.io/permits-os"], ("linux", "linux,windows", "windows,linux"))
        self.assertEqual(annotations["catalog.cattle.io/kube-version"], chart["kubeVersion"])
        constraint = re.compile(r"^\s*(>=|<=|>|<|=)?\s*\d+\.\d+\.\d+(-0)?(\s+(<|<=)\s*\d+\.\d+\.\d+(-0)?)?\s*$")
        for key in ("kube-version", "rancher-version"):
            self.assertRegex(annotations[f"catalog.cattle.io/{key}"], constraint)
        # The release name Rancher fixes gives the documented names (and the static manifests').
        self.assertEqual(annotations["catalog.cattle.io/release-name"], "edgegpu")

    def test_icon_is_an_svg_in_this_repository(self):
        # Rancher reads a Git repository's non-HTTP chart icon from the repository (file://).
        icon = yaml.safe_load((CHART / "Chart.yaml").read_text())["icon"]
        self.assertTrue(icon.startswith("file://"), icon)
        root = ElementTree.parse(REPO / icon.removeprefix("file://")).getroot()
        self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")

    def test_questions_match_values_and_schema(self):
        values = yaml.safe_load((CHART / "values.yaml").read_text())
        questions = yaml.safe_load((CHART / "questions.yaml").read_text())["questions"]
        flat = [q for top in questions for q in [top, *top.get("subquestions", [])]]
        self.assertGreater(len(flat), 5)
        for question in flat:
            with self.subTest(variable=question["variable"]):
                node = values
                for part in question["variable"].split("."):
                    self.assertIn(part, node, f"{question['variable']} is not in values.yaml")
                    node = node[part]
                # Exactly values.yaml's default: Rancher submits what differs from values.yaml,
                # so any other default would be set on every install through the form.
                self.assertEqual(question["default"], node)
                self.assertIn(question["type"], ("boolean", "string", "enum", "int"))
                options = question.get("options") or [question["default"]]
                for option in options:
                    setting = ["--set-string", f"{question['variable']}={option}"] if isinstance(option, str) \
                        else ["--set-json", f"{question['variable']}={json.dumps(option)}"]
                    result = helm("template", "edgegpu", str(CHART), *setting)
                    self.assertEqual(result.returncode, 0, f"{question['variable']}={option!r}: {result.stderr}")


class K3sHelmChart(unittest.TestCase):
    def test_embeds_this_chart(self):
        resource = yaml.safe_load(HELMCHART.read_text())
        self.assertEqual((resource["apiVersion"], resource["kind"]), ("helm.cattle.io/v1", "HelmChart"))
        spec = resource["spec"]
        self.assertEqual(set(spec), {"targetNamespace", "valuesContent", "chartContent"})
        values = yaml.safe_load(spec["valuesContent"])
        self.assertIsInstance(values, dict)
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "edgegpu.tgz"
            archive.write_bytes(base64.b64decode(spec["chartContent"]))
            lint = subprocess.run([HELM, "lint", "--strict", str(archive)], capture_output=True, text=True)
            self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
            namespace = spec["targetNamespace"]
            self.assertEqual(render(values, "edgegpu", namespace, chart=archive),
                             render(values, "edgegpu", namespace))


class Versions(unittest.TestCase):
    def test_chart_follows_the_workspace_version(self):
        chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
        self.assertEqual((chart["version"], chart["appVersion"]), (VERSION, VERSION))


if __name__ == "__main__":
    if not Path(HELM).is_file():
        sys.exit(f"{HELM} not found: run scripts/install-helm.sh (or set HELM)")
    unittest.main(verbosity=1)
