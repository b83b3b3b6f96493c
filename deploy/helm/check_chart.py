#!/usr/bin/env python3
"""Checks the Helm chart deploy/helm/edgegpu with a real helm 3 (scripts/install-helm.sh):

  * `helm lint --strict`, with the default values and with every values set of the matrix;
  * `helm template` over the matrix (defaults, Jetson only, discrete only, time-slicing config,
    MIG strategy and the plugin flags, nodeSetup on, a replaced affinity, another release name
    and namespace): every rendered object valid for the oldest (1.25) and newest Kubernetes
    kubernetes-validate bundles (strict: unknown fields are errors), deploy/lint/check_policy.py's
    rules on the rendered objects, and what each case changes, asserted;
  * bad values stop `helm template` with the message a user would read (schema and cross-value
    checks);
  * Rancher: the catalog annotations Rancher's chart tooling requires, and questions.yaml naming
    real values with their defaults and only options the schema accepts;
  * the k3s HelmChart (deploy/k3s/helmchart/edgegpu.yaml) embeds exactly this chart: its
    chartContent, decoded and rendered by helm, gives what the chart directory gives.

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

import yaml
from kubernetes_validate import utils as kubernetes_validate

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "edgegpu"
HELMCHART = REPO / "deploy" / "k3s" / "helmchart" / "edgegpu.yaml"
HELM = os.environ.get("HELM") or str(REPO / ".tools" / "helm" / "bin" / "helm")
OLDEST_KUBERNETES = "1.25"
NEWEST_KUBERNETES = kubernetes_validate.latest_version()

sys.path.insert(0, str(REPO / "deploy" / "lint"))
import check_policy  # noqa: E402

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
ORIN_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "example.com/board", "operator": "In", "values": ["orin"]}]}]}}}


def helm(*args, values=None):
    """Runs helm; VALUES (a dict) is passed as a values file."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(values or {}, file)
        file.flush()
        return subprocess.run([HELM, *args, "-f", file.name], capture_output=True, text=True)


def render(values=None, release="edgegpu", namespace="kube-system", chart=CHART):
    result = helm("template", release, str(chart), "--namespace", namespace, values=values)
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


def schema_errors(docs):
    errors = []
    for doc in docs:
        for version in (OLDEST_KUBERNETES, NEWEST_KUBERNETES):
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
            documented_labels=documented_labels)
        self.assertEqual(problems, [])
        return docs

    def test_defaults_render_the_static_manifests_objects(self):
        docs = self.render_checked({})
        self.assertEqual(sorted(of_kind(docs, "DaemonSet")),
                         ["edgegpu-device-plugin-discrete", "edgegpu-device-plugin-jetson", "edgegpu-node-labeller"])
        self.assertEqual(list(of_kind(docs, "RuntimeClass")), ["nvidia"])
        self.assertEqual(list(of_kind(docs, "Service")), ["edgegpu-metrics"])
        self.assertEqual(list(of_kind(docs, "ClusterRole")), ["edgegpu-node-labeller"])
        job = of_kind(docs, "Job")["edgegpu-devicequery"]
        self.assertEqual(job["metadata"]["annotations"]["helm.sh/hook"], "test")
        self.assertEqual(of_kind(docs, "ConfigMap"), {})
        # The static manifests are generated from this rendering (deploy/generate.py --check
        # proves the files are current); here: same objects, minus what only Helm adds.
        static = [d for f in ("runtimeclass.yaml", "device-plugin.yaml")
                  for d in yaml.safe_load_all((REPO / "deploy" / f).read_text()) if d]
        sys.path.insert(0, str(REPO / "deploy"))
        import generate
        rendered = [generate.without_release_keys(d) for d in docs if d["kind"] != "Job"]
        key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
        self.assertEqual(sorted(rendered, key=key), sorted(static, key=key))

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

    def test_single_config_entry_is_the_default(self):
        docs = self.render_checked({"config": {"map": {"any-name": JETSON_CONFIG}}})
        self.assertEqual(len(of_kind(docs, "ConfigMap")), 2)

    def test_mig_strategy_none_and_plugin_flags(self):
        values = {"migStrategy": "none", "failOnInitError": False, "deviceListStrategy": "envvar,cdi-cri",
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
            # The plugin has no MIG flag: "none" is its only behaviour, nothing to pass.
            self.assertFalse(any("MIG" in name for name in variables), variables)

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
        check, = spec["containers"]
        self.assertEqual(check["readinessProbe"]["exec"]["command"],
                         ["/usr/bin/edgegpu-node-setup", "check", "--root", "/host"])
        self.assertEqual(spec["volumes"], [{"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}}])

    def test_node_setup_policy_catches_privilege_and_coverage(self):
        docs = render({"nodeSetup": {"enabled": True}})
        plugin_sets = list(plugins(docs).values())
        node_setup = of_kind(docs, "DaemonSet")["edgegpu-node-setup"]

        privileged = copy.deepcopy(node_setup)
        pod(privileged)["containers"][0]["securityContext"]["privileged"] = True
        problems = check_policy.check_objects(REPO, plugin_sets + [privileged], {}, "test", configmap_required=False,
                                              runtime_class=False)
        self.assertIn("DaemonSet edgegpu-node-setup container check: only the init container `apply` may be "
                      "privileged", problems)

        jetson_only = copy.deepcopy(node_setup)
        terms = pod(jetson_only)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        del terms["nodeSelectorTerms"][2:]
        problems = check_policy.check_objects(REPO, plugin_sets + [jetson_only], {}, "test", configmap_required=False,
                                              runtime_class=False)
        self.assertTrue(any("node setup skips them although they run plugin" in p for p in problems), problems)

    def test_replaced_affinity_with_one_plugin(self):
        values = {"devicePlugin": {"discrete": {"enabled": False}}, "affinity": ORIN_AFFINITY,
                  "nodeSetup": {"enabled": True}}
        docs = self.render_checked(values, documented_labels=False)
        for name, ds in of_kind(docs, "DaemonSet").items():
            if name != "edgegpu-node-labeller":
                self.assertEqual(pod(ds)["affinity"], ORIN_AFFINITY, name)

    def test_other_release_and_namespace(self):
        docs = self.render_checked({}, release="gpu", namespace="gpu-system")
        self.assertEqual(sorted(of_kind(docs, "DaemonSet")),
                         ["gpu-edgegpu-device-plugin-discrete", "gpu-edgegpu-device-plugin-jetson",
                          "gpu-edgegpu-node-labeller"])
        cluster_scoped = ("RuntimeClass", "ClusterRole", "ClusterRoleBinding")
        self.assertEqual({d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped},
                         {"gpu-system"})
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


class Dashboard(unittest.TestCase):
    """The Grafana dashboard queries only series that edgegpu or dcgm-exporter serve, with the
    labels they carry (docs/metrics.md lists every series)."""

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
        # Per-node panels work with dcgm-exporter alone: each DCGM panel uses DCGM series only.
        dcgm_panels = [p for p in dashboard["panels"] if any("DCGM_FI_DEV" in t["expr"] for t in p.get("targets", []))]
        self.assertGreater(len(dcgm_panels), 8)
        for panel in dcgm_panels:
            for target in panel["targets"]:
                self.assertNotIn("edgegpu_", target["expr"], panel["title"])


class BadValues(unittest.TestCase):
    """Bad values stop the install with a message that names the value."""

    CASES = [
        ({"migStrategy": "single"}, "at '/migStrategy': value must be one of <nil>, 'none'"),
        ({"deviceListStrategy": "volume-mounts"}, "at '/deviceListStrategy': 'volume-mounts' does not match"),
        ({"deviceIDStrategy": "serial"}, "at '/deviceIDStrategy': value must be one of"),
        ({"failOnInitError": "yes"}, "at '/failOnInitError': got string, want null or boolean"),
        ({"gfd": {"enabled": True}}, "at '': additional properties 'gfd' not allowed"),
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
         'config.map has 2 entries (a, b) and none is named "default": set config.default'),
        ({"config": {"map": {"a": JETSON_CONFIG}, "default": "b"}},
         'the jetson plugin uses config "b", which is not in config.map (a)'),
        ({"config": {"default": "a"}}, 'config.default is "a" but config.map is empty'),
        ({"config": {"map": {"a": "version: v2\n"}}}, 'config.map.a: version must be v1'),
        ({"config": {"map": {"a": "version: v1\nflags:\n  migStrategy: mixed\n"}}},
         'config.map.a: flags.migStrategy "mixed" is not supported'),
        ({"config": {"map": {"a": JETSON_CONFIG.replace("replicas: 4", "replicas: 1")}}},
         "config.map.a: sharing.timeSlicing.resources nvidia.com/gpu: replicas must be an integer >= 2"),
        ({"config": {"map": {"a": "version: v1\nsharing: [\n"}}}, "config.map.a is not YAML"),
        ({"metrics": {"port": 0}}, "at '/metrics/port': minimum: got 0, want 1"),
        ({"metrics": {"podMonitor": {"interval": "soon"}}}, "at '/metrics/podMonitor/interval': 'soon' does not match"),
        ({"nodeLabels": {"labeler": {}}}, "at '/nodeLabels': additional properties 'labeler' not allowed"),
    ]

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
                # Same default as values.yaml; where values.yaml says null (the plugin's own
                # default) the form shows that default explicitly.
                if node is not None:
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
        version = check_policy.workspace_version(REPO)
        self.assertEqual((chart["version"], chart["appVersion"]), (version, version))


if __name__ == "__main__":
    if not Path(HELM).is_file():
        sys.exit(f"{HELM} not found: run scripts/install-helm.sh (or set HELM)")
    unittest.main(verbosity=1)
