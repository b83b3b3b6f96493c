#!/usr/bin/env python3
"""Checks the deployment's own rules, which a schema validator cannot see.

kubernetes-validate proves each object is well-formed for a Kubernetes version; it does not check
enums (a hostPath `type: Dir` passes), quantities (`cpu: lots` passes) or anything that spans
objects. This script checks what docs/deploy.md promises:

  * every device-plugin DaemonSet: kube-system, system-node-critical, nvidia.com/gpu toleration,
    no service account token, seccomp RuntimeDefault, no privilege escalation, all capabilities
    dropped and none added, read-only root filesystem, CPU and memory requests <= limits;
  * host paths: valid hostPath types that never create anything on the host; every host mount
    read-only except the kubelet's device-plugin directory; /host/dev comes with /host/dev/pts and
    /host/dev/shm masked; every mount names a volume and every volume is mounted;
  * per-pod GPU memory (docs/metrics.md 2.4): the host's whole /proc only in the device-plugin
    container (its labeller, which holds a token, gets /proc/meminfo alone); nothing of
    /sys/kernel (debugfs: a read-only bind of it is not recursive) but nvmap's
    /sys/kernel/debug/nvmap/iovmm, on the Jetson DaemonSet only; hostPID on a plugin DaemonSet
    only where the caller says the Helm value metrics.podGpuMemory.hostPID is set (never in the
    static manifests), on the discrete DaemonSet only, and with the host's /proc mounted;
  * node selection: the DaemonSets never select the same node, and label sets a user would set
    (docs/deploy.md) land on the intended DaemonSet;
  * the optional config: CONFIG_FILE and the config volume name the same ConfigMap, the example
    ConfigMaps for them exist, point CONFIG_FILE into the mounted volume and hold a valid
    `version: v1` time-slicing config;
  * the RuntimeClass `nvidia` exists; image tags and version labels match the workspace version;
  * the optional node-setup DaemonSet (Helm value nodeSetup.enabled): only its `apply` init
    container is privileged and mounts the host; every other container runs as non-root with
    no host mount at all (a read-only hostPath leaves the mounts below it writable), and it
    runs on exactly the nodes that run a plugin;
  * every flag and environment variable the DaemonSets pass exists in the plugin's clap
    definitions (plugin/src and the node library's node/src), and the discovery strategies they name are variants it accepts;
  * every host path the plugin's code for a node kind reads (string literals in node/src and in
    the platform table, platform/src) is inside a host mount of that kind's DaemonSet, at
    /host + the host path (--root /host);
  * the node labels (docs/labels.md): the labeller's service-account token reaches only the
    containers that run edgegpu-labeller (the plugin's init container `labels` mounts no more of
    the host than the plugin does), its ClusterRole grants get and patch on nodes and nothing
    else, and the node-labeller DaemonSet runs on every Linux node, unprivileged and non-root,
    mounting only /sys, which every Linux host has (no node can be stuck on a missing path);
  * the metrics (docs/metrics.md): the plugin's metrics port, its METRICS_BIND_ADDRESS, the
    prometheus.io/port annotation and the Service agree; the kubelet's pod-resources directory
    is mounted read-only, only into the plugin.
  * MPS (Helm value mps.enabled, docs/sharing.md, docs/dra.md): the plugins, and the DRA
    drivers that ask for a daemon (MPS=true), mount the MPS directory (MPS_ROOT) read-only at
    its own path and its desired/ directory (daemons.json, theirs) read-write, and nothing else
    new; the companion DaemonSet (edgegpu-mps-control-daemon) alone is privileged and in the
    host's PID namespace, runs the plugin image's `mps-control-daemon` with flags it defines,
    mounts exactly the host's / read-only at /host, the same MPS directory read-write at
    /host<MPS_ROOT> and its desired/ read-only, has a token for nothing, and runs on exactly the
    nodes that run a plugin or a DRA driver; a DRA driver whose read-write /run/edgegpu holds
    the MPS directory mounts that read-only over it.
  * the DRA driver (Helm value dra.enabled, docs/dra.md): its ClusterRole grants exactly
    resourceslices list/create/update/delete, resourceclaims get and nodes get (what dra/src
    requests); its DaemonSets run edgegpu-dra-driver with flags and variables it defines
    (dra/src), unprivileged like the plugin, mount the kubelet's plugins_registry and its own
    plugins/edgegpu.io directory, /var/run/cdi and /run/edgegpu read-write at their host path
    (a directory inside one only read-only, at its own path) and every host path the plugin's
    discovery reads read-only under /host; no node ever runs a plugin DaemonSet and a DRA
    driver DaemonSet (docs/dra.md, "The device plugin and the DRA driver on one node"); the
    plugins mount /run/edgegpu (their ownership locks) read-write.

  * the power policy (Helm value powerPolicy.enabled, docs/power.md): its DaemonSet
    (edgegpu-power-policy) runs `edgegpu-labeller power-policy` with flags it defines, on
    Jetson nodes only (edgegpu.io/gpu=jetson), privileged as uid 0 with the host's / at /host
    (type Directory: never created) and its ConfigMap's rules, the only DaemonSet besides the
    labeller's with a token, outside the host's PID, network and IPC namespaces; its ClusterRole
    grants exactly get and patch on nodes and create on events.

Usage: check_policy.py REPO_ROOT. Prints one line per problem; exit status 1 if there is any.
deploy/helm/check_chart.py runs the same rules on the Helm chart's rendered output
(check_objects).
"""

import itertools
import re
import sys
from pathlib import Path

import yaml

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# Mounted at their own path (not under /host): the kubelet's pod-resources socket (read-only)
# and Node Feature Discovery's feature-file directory (read-write, only with FEATURE_FILE set).
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"
# Per-pod GPU memory: the host's /proc (every process's cgroup), and on nvgpu Jetsons the one
# debugfs directory the plugin may mount, nvmap's (per-process GPU memory).
HOST_PROC = "/proc"
SYS_KERNEL = "/sys/kernel"
NVMAP_IOVMM_DIR = "/sys/kernel/debug/nvmap/iovmm"
NFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The per-kind ownership locks of the plugin and the DRA driver (--ownership-dir's default):
# under /run, a tmpfs, so created where missing; read-write at the same path.
OWNERSHIP_DIR = "/run/edgegpu"
# The DRA driver (dra/src/cli.rs defaults): the kubelet's plugin watcher directory, its own
# directory under the kubelet's plugins (dra.sock, checkpoint) and the CDI spec directory.
DRA_DRIVER = "edgegpu-dra-driver"
DRA_DRIVER_NAME = "edgegpu.io"
DRA_COMMAND = ["/usr/bin/edgegpu-dra-driver"]
KUBELET_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DRA_PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRA_DRIVER_NAME}"
CDI_DIR = "/var/run/cdi"
# Read-write at their host path, created where missing except the kubelet's own directory.
DRA_HOST_DIRS = {KUBELET_REGISTRY_DIR: "Directory", DRA_PLUGIN_DIR: "DirectoryOrCreate",
                 CDI_DIR: "DirectoryOrCreate", OWNERSHIP_DIR: "DirectoryOrCreate"}
# Flags colleagues are adding to the driver (docs/dra.md): accepted before dra/src defines them.
DRA_ANNOUNCED_FLAGS = {"ownership-dir", "devices"}
# What dra/src asks of the API server (edgegpu-apiclient's list/create/replace/delete/get):
# ResourceSlices listed, created, replaced and deleted (slices.rs), a ResourceClaim and the Node
# read by name (claims.rs, slices.rs). No watch.
DRA_RULES = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
     "verbs": ["create", "delete", "list", "update"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]
POWER_POLICY = "edgegpu-power-policy"
POWER_POLICY_COMMAND = ["/usr/bin/edgegpu-labeller", "power-policy"]
POWER_POLICY_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
# Host paths every Linux node has: all the node-labeller DaemonSet (on every node) may mount.
ALWAYS_PRESENT_HOST_PATHS = {"/sys"}
HOSTPATH_TYPES_NO_CREATE = {"Directory", "File", "Socket", "CharDevice", "BlockDevice"}
QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?)(m|Ki|Mi|Gi|k|M|G)?$")
SCALE = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}

problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


def load(path):
    with open(path, encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def quantity(value):
    match = QUANTITY.match(str(value))
    if not match:
        return None
    return float(match.group(1)) * SCALE[match.group(3)]


def workspace_version(repo):
    text = (repo / "Cargo.toml").read_text(encoding="utf-8")
    section = text.split("[workspace.package]", 1)[1]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)


def check_container(where, container):
    sc = container.get("securityContext") or {}
    if sc.get("allowPrivilegeEscalation") is not False:
        problem(where, "allowPrivilegeEscalation must be false")
    if sc.get("readOnlyRootFilesystem") is not True:
        problem(where, "readOnlyRootFilesystem must be true")
    if sc.get("privileged"):
        problem(where, "must not be privileged")
    caps = sc.get("capabilities") or {}
    if caps.get("drop") != ["ALL"]:
        problem(where, "capabilities.drop must be [ALL]")
    if caps.get("add"):
        problem(where, f"adds capabilities {caps['add']}")
    resources = container.get("resources") or {}
    for resource in ("cpu", "memory"):
        request = (resources.get("requests") or {}).get(resource)
        limit = (resources.get("limits") or {}).get(resource)
        if request is None or limit is None:
            problem(where, f"needs both a {resource} request and a {resource} limit")
            continue
        if quantity(request) is None or quantity(limit) is None:
            problem(where, f"{resource} quantity not understood: {request!r} / {limit!r}")
        elif quantity(request) > quantity(limit):
            problem(where, f"{resource} request {request} exceeds limit {limit}")


def check_volumes_used(where, pod):
    mounted_names = {m["name"] for c in pod["containers"] + (pod.get("initContainers") or [])
                     for m in c.get("volumeMounts") or []}
    for name in (v["name"] for v in pod.get("volumes") or []):
        if name not in mounted_names:
            problem(where, f"volume {name} is never mounted")


def is_token_volume(volume):
    return any("serviceAccountToken" in source for source in (volume.get("projected") or {}).get("sources") or [])


def check_mounts(where, pod, container, plugin=True):
    """PLUGIN: the device-plugin container (it alone mounts the kubelet's directories)."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = container.get("volumeMounts") or []
    paths = {m["mountPath"] for m in mounts}
    feature_file = (env_map(container).get("FEATURE_FILE") or {}).get("value")
    mps_root = (env_map(container).get("MPS_ROOT") or {}).get("value")
    mps_desired = f"{mps_root}/{MPS_DESIRED}" if mps_root else None
    for mount in mounts:
        volume = volumes.get(mount["name"])
        if volume is None:
            problem(where, f"mount {mount['mountPath']} names no volume {mount['name']}")
            continue
        host_path = volume.get("hostPath")
        if host_path is None:
            continue
        kind = host_path.get("type", "")
        # NFD's features.d may be created: a directory only NFD's worker reads, and a node
        # where NFD is not (yet) installed must not hold the plugin pod back.
        if host_path["path"] == NFD_FEATURES_DIR and kind == "DirectoryOrCreate":
            pass
        # The MPS directory and its desired/: under /run, a tmpfs, they are gone at every boot,
        # and the companion fills the first; the plugin pod must not wait for it.
        elif mps_root and host_path["path"] in (mps_root, mps_desired) and kind == "DirectoryOrCreate":
            pass
        elif host_path["path"] == OWNERSHIP_DIR and kind == "DirectoryOrCreate" and plugin:
            pass
        elif kind not in HOSTPATH_TYPES_NO_CREATE:
            problem(where, f"hostPath {host_path['path']} has type {kind!r}: use one of "
                    f"{sorted(HOSTPATH_TYPES_NO_CREATE)} (others create paths on the host)")
        if host_path["path"] in (DEVICE_PLUGIN_DIR, POD_RESOURCES_DIR, NFD_FEATURES_DIR) and not plugin:
            problem(where, f"{host_path['path']} is for the device-plugin container only")
        if host_path["path"] == HOST_PROC and not plugin:
            problem(where, "the host's /proc is for the device-plugin container only (this container holds "
                    "the labeller's token and reads /proc/meminfo alone)")
        if host_path["path"] == DEVICE_PLUGIN_DIR:
            if mount["mountPath"] != DEVICE_PLUGIN_DIR or mount.get("readOnly"):
                problem(where, f"{DEVICE_PLUGIN_DIR} must be mounted read-write at the same path")
        elif host_path["path"] == POD_RESOURCES_DIR:
            if mount["mountPath"] != POD_RESOURCES_DIR or not mount.get("readOnly"):
                problem(where, f"{POD_RESOURCES_DIR} must be mounted readOnly at the same path")
        elif host_path["path"] == OWNERSHIP_DIR and plugin:
            if mount["mountPath"] != OWNERSHIP_DIR or mount.get("readOnly"):
                problem(where, f"{OWNERSHIP_DIR} (the ownership locks) must be mounted read-write at the same path")
        elif mps_root and host_path["path"] == mps_root:
            if mount["mountPath"] != mps_root or not mount.get("readOnly"):
                problem(where, f"the MPS directory {mps_root} (MPS_ROOT) must be mounted readOnly at the same path "
                        f"(the plugin writes only its {MPS_DESIRED}/ directory; the rest is the companion's)")
        elif mps_root and host_path["path"] == mps_desired:
            if mount["mountPath"] != mps_desired or mount.get("readOnly"):
                problem(where, f"{mps_desired} must be mounted read-write at the same path (the plugin writes "
                        "daemons.json there)")
        elif host_path["path"] == NFD_FEATURES_DIR:
            if mount["mountPath"] != NFD_FEATURES_DIR or mount.get("readOnly"):
                problem(where, f"{NFD_FEATURES_DIR} must be mounted read-write at the same path")
            if feature_file == "":
                problem(where, f"{NFD_FEATURES_DIR} is mounted but FEATURE_FILE is empty")
        elif not mount.get("readOnly"):
            problem(where, f"host path {host_path['path']} must be mounted readOnly")
        elif mount["mountPath"] != "/host" + host_path["path"]:
            problem(where, f"host path {host_path['path']} must be mounted at /host{host_path['path']} (--root /host)")
    if "/host/dev" in paths or "/host" in paths:
        for masked in ("/host/dev/pts", "/host/dev/shm"):
            if masked not in paths:
                problem(where, f"/host/dev is mounted but {masked} is not masked")
    if plugin and DEVICE_PLUGIN_DIR not in paths:
        problem(where, f"{DEVICE_PLUGIN_DIR} is not mounted")
    if plugin and OWNERSHIP_DIR not in paths:
        problem(where, f"{OWNERSHIP_DIR} is not mounted: the plugin's ownership locks would not be the DRA "
                "driver's, and both could serve the node's GPUs")
    if mps_root and mps_root not in paths:
        problem(where, f"MPS_ROOT is {mps_root}, but no volume is mounted there (the plugin reads status.json)")
    if mps_root and mps_desired not in paths:
        problem(where, f"MPS_ROOT is {mps_root}, but {mps_desired} is not mounted (the plugin writes daemons.json "
                "there)")
    runs_labeller = "edgegpu-labeller" in " ".join(container.get("command") or [])
    for m in mounts:
        if is_token_volume(volumes.get(m["name"], {})) and not runs_labeller:
            problem(where, "mounts the service-account token, but only edgegpu-labeller may hold it")


def env_map(container):
    return {e["name"]: e for e in container.get("env") or []}


def check_config_wiring(where, pod, container, configmaps, configmap_required=True):
    """CONFIG_FILE comes from the same optional ConfigMap that the config volume mounts.
    CONFIGMAPS: the ConfigMaps that fill it (deploy/examples/, or the chart's rendered ones);
    without CONFIGMAP_REQUIRED a DaemonSet whose optional ConfigMap is absent is fine."""
    env = env_map(container).get("CONFIG_FILE")
    volume = next((v for v in pod.get("volumes") or [] if "configMap" in v), None)
    if env is None and volume is None:
        return
    if env is None or volume is None:
        problem(where, "CONFIG_FILE and a configMap volume must come together")
        return
    ref = (env.get("valueFrom") or {}).get("configMapKeyRef") or {}
    cm_name = volume["configMap"].get("name")
    if ref.get("name") != cm_name:
        problem(where, f"CONFIG_FILE reads ConfigMap {ref.get('name')} but the volume mounts {cm_name}")
    if not ref.get("optional") or not volume["configMap"].get("optional"):
        problem(where, "the config ConfigMap must be optional (the plugin runs without one)")
    mount = next((m for m in container.get("volumeMounts") or [] if m["name"] == volume["name"]), None)
    example = configmaps.get(cm_name)
    if example is None:
        if configmap_required:
            problem(where, f"no example ConfigMap {cm_name} in deploy/examples/")
        return
    data = example.get("data") or {}
    items = volume["configMap"].get("items") or []
    files = {f"{mount['mountPath']}/{item['path']}": item["key"] for item in items} if mount else {}
    config_path = data.get(ref.get("key"))
    if config_path not in files:
        problem(where, f"example {cm_name} sets CONFIG_FILE={config_path!r}, not a mounted file {sorted(files)}")
        return
    check_sharing_config(f"ConfigMap {cm_name} key {files[config_path]}", data.get(files[config_path]))


MEMORY_SIZE = re.compile(r"^[0-9]+(Ki|Mi|Gi|Ti)$")


def check_sharing_config(where, text):
    """The subset of the config rules the plugin enforces (NVIDIA's `version: v1` for
    timeSlicing and mps, edgegpu's gpuMemory; docs/sharing.md), for the shipped examples:
    exactly one way of sharing, fully qualified names."""
    try:
        config = yaml.safe_load(text or "")
    except yaml.YAMLError as error:
        problem(where, f"not YAML: {error}")
        return
    if not isinstance(config, dict) or config.get("version") != "v1":
        problem(where, "must be a mapping with version: v1")
        return
    sharing = config.get("sharing") or {}
    ways = [k for k in ("timeSlicing", "mps", "gpuMemory") if sharing.get(k)]
    if len(ways) != 1:
        problem(where, f"must share one way (sharing.timeSlicing, .mps or .gpuMemory), found {ways}")
        return
    way = ways[0]
    resources = sharing[way].get("resources") or []
    if not resources:
        problem(where, f"sharing.{way}.resources is empty")
    for resource in resources:
        if not str(resource.get("name", "")).startswith("nvidia.com/"):
            problem(where, f"resource name {resource.get('name')!r} is not nvidia.com/...")
        if way == "gpuMemory":
            if "memory" in resource and not MEMORY_SIZE.match(str(resource["memory"])):
                problem(where, f"memory {resource['memory']!r} is not a binary quantity (e.g. 24Gi)")
            continue
        most = 48 if way == "mps" else None  # an MPS server serves at most 48 clients per GPU
        replicas = resource.get("replicas")
        if not isinstance(replicas, int) or replicas < 2 or (most and replicas > most):
            problem(where, f"replicas must be an integer >= 2{f' and <= {most}' if most else ''}, got {replicas!r}")
        if way == "mps":
            pct = resource.get("activeThreadPercentage")
            if pct is not None and (not isinstance(pct, int) or not 1 <= pct <= 100):
                problem(where, f"activeThreadPercentage must be an integer from 1 to 100, got {pct!r}")
            limit = resource.get("pinnedDeviceMemoryLimit")
            if limit is not None and not MEMORY_SIZE.match(str(limit)):
                problem(where, f"pinnedDeviceMemoryLimit {limit!r} is not a binary quantity (e.g. 2Gi)")
    if way == "gpuMemory":
        unit = sharing[way].get("unit", "256Mi")
        if not MEMORY_SIZE.match(str(unit)):
            problem(where, f"sharing.gpuMemory.unit {unit!r} is not a binary quantity (e.g. 256Mi)")
        if sharing[way].get("enforcement", "auto") not in ("auto", "mps", "none"):
            problem(where, f"sharing.gpuMemory.enforcement {sharing[way].get('enforcement')!r} is not auto, mps or none")


def requirement_matches(requirement, labels):
    key, operator = requirement["key"], requirement["operator"]
    values = requirement.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {operator} not handled by this checker")


def selects(pod, labels):
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return any(all(requirement_matches(r, labels) for r in t.get("matchExpressions") or []) for t in terms)


def label_combinations(daemonsets):
    """Every combination of: label absent, each value the selectors mention, one unrelated value."""
    keys = {}
    for ds in daemonsets.values():
        pod = ds["spec"]["template"]["spec"]
        for term in pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
            for requirement in term.get("matchExpressions") or []:
                keys.setdefault(requirement["key"], set()).update(requirement.get("values") or [])
    keys.setdefault("kubernetes.io/arch", set()).update({"amd64", "arm64"})
    names = sorted(keys)
    choices = [[None, *sorted(keys[k]), "other"] for k in names]
    for combination in itertools.product(*choices):
        yield {k: v for k, v in zip(names, combination) if v is not None}


def check_node_selection(daemonsets, documented_labels=True):
    """No node runs two plugins; with DOCUMENTED_LABELS (the built-in affinities), the labels
    docs/deploy.md lists pick the intended DaemonSet, or none where that one is not deployed."""
    for labels in label_combinations(daemonsets):
        chosen = [n for n, ds in daemonsets.items() if selects(ds["spec"]["template"]["spec"], labels)]
        if len(chosen) > 1:
            problem("node selection", f"nodes labelled {labels} would run {chosen}")
    if not documented_labels:
        return
    suffix = {ds["metadata"]["labels"]["app.kubernetes.io/component"]: n for n, ds in daemonsets.items()}
    expectations = [
        ({"edgegpu.io/gpu": "jetson", "kubernetes.io/arch": "arm64"}, "edgegpu-device-plugin-jetson"),
        ({"feature.node.kubernetes.io/cpu-model.vendor_id": "NVIDIA", "kubernetes.io/arch": "arm64"},
         "edgegpu-device-plugin-jetson"),
        ({"edgegpu.io/gpu": "jetson", "nvidia.com/gpu.present": "true", "kubernetes.io/arch": "arm64"},
         "edgegpu-device-plugin-jetson"),
        ({"edgegpu.io/gpu": "discrete", "kubernetes.io/arch": "amd64"}, "edgegpu-device-plugin-discrete"),
        ({"edgegpu.io/gpu": "discrete", "kubernetes.io/arch": "arm64"}, "edgegpu-device-plugin-discrete"),
        ({"feature.node.kubernetes.io/pci-10de.present": "true", "kubernetes.io/arch": "amd64"},
         "edgegpu-device-plugin-discrete"),
        ({"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "arm64"}, "edgegpu-device-plugin-discrete"),
        ({"kubernetes.io/arch": "amd64"}, None),
        ({"kubernetes.io/arch": "arm64"}, None),
        # Any other value of edgegpu.io/gpu (host: the plugin runs as a host service, Yocto's
        # host mode) keeps both plugins off the node, whatever NFD or the GPU Operator found.
        ({"edgegpu.io/gpu": "host", "feature.node.kubernetes.io/pci-10de.present": "true",
          "kubernetes.io/arch": "amd64"}, None),
        ({"edgegpu.io/gpu": "host", "nvidia.com/gpu.present": "true", "kubernetes.io/arch": "arm64"}, None),
        ({"edgegpu.io/gpu": "host", "feature.node.kubernetes.io/cpu-model.vendor_id": "NVIDIA",
          "kubernetes.io/arch": "arm64"}, None),
    ]
    for labels, expected in expectations:
        # The DaemonSet of that component under its rendered name (a Helm release prefixes it).
        expected = expected and suffix.get(expected.rsplit("-", 1)[1])
        chosen = [n for n, ds in daemonsets.items() if selects(ds["spec"]["template"]["spec"], labels)]
        if chosen != ([expected] if expected else []):
            problem("node selection", f"nodes labelled {labels} run {chosen}, expected {expected}")


def check_allocators_exclusive(plugins, drivers):
    """No node runs a plugin DaemonSet and a DRA driver DaemonSet, whatever its labels; no node
    runs two DRA drivers."""
    allocators = {**plugins, **drivers}
    for labels in label_combinations(allocators):
        chosen_plugins = [n for n, ds in plugins.items() if selects(ds["spec"]["template"]["spec"], labels)]
        chosen_drivers = [n for n, ds in drivers.items() if selects(ds["spec"]["template"]["spec"], labels)]
        if chosen_plugins and chosen_drivers:
            problem("node selection", f"nodes labelled {labels} would run the device plugin {chosen_plugins} and "
                    f"the DRA driver {chosen_drivers}: two allocators for one GPU")
        if len(chosen_drivers) > 1:
            problem("node selection", f"nodes labelled {labels} would run {chosen_drivers}")


def dra_cli(repo):
    """The DRA driver's flags and variables: its own (dra/src), the plugin's GPU arguments it
    takes as the labeller does (node/src/config.rs, GpuArgs: discovery, MIG strategy), the API
    flags both share (apiclient/src/args.rs, ApiArgs), and
    the flags announced for it."""
    files = sorted((repo / "dra" / "src").rglob("*.rs")) + [repo / "node" / "src" / "config.rs"] \
        + sorted((repo / "node" / "src" / "config").rglob("*.rs")) + [repo / "apiclient" / "src" / "args.rs"]
    sources = "\n".join(p.read_text(encoding="utf-8") for p in files if p.exists())
    envs, flags, strategies = plugin_cli(repo, sources)
    return envs, flags | DRA_ANNOUNCED_FLAGS, strategies


def check_dra_driver(ds, version, plugins, repo):
    """A DRA driver DaemonSet: the plugin's confinement, its own kubelet and CDI directories
    read-write, the plugin's discovery files read-only, a token for its ServiceAccount only."""
    where = f"DaemonSet {ds['metadata']['name']}"
    pod = ds["spec"]["template"]["spec"]
    component = ds["metadata"].get("labels", {}).get("app.kubernetes.io/component")
    if pod.get("automountServiceAccountToken") is not False:
        problem(where, "automountServiceAccountToken must be false (the token is a projected volume)")
    for host_ns in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host_ns):
            problem(where, f"{host_ns} must not be set")
    if pod.get("priorityClassName") != "system-node-critical":
        problem(where, "priorityClassName must be system-node-critical")
    if not any(t.get("key") == "nvidia.com/gpu" and t.get("operator") == "Exists" for t in pod.get("tolerations") or []):
        problem(where, "needs the toleration nvidia.com/gpu Exists")
    if pod.get("initContainers"):
        problem(where, "has no init containers")
    check_volumes_used(where, pod)
    if [c["name"] for c in pod["containers"]] != ["dra-driver"]:
        problem(where, "must have exactly one container, dra-driver")
        return
    container = pod["containers"][0]
    cwhere = f"{where} container dra-driver"
    check_container(cwhere, container)
    if not container.get("image", "").endswith(f":{version}"):
        problem(cwhere, f"image {container.get('image')} is not tagged with the workspace version {version}")
    plugin_images = {p["spec"]["template"]["spec"]["containers"][0]["image"] for p in plugins.values()}
    if plugin_images and plugin_images != {container.get("image")}:
        problem(cwhere, f"image {container.get('image')} is not the plugins' {sorted(plugin_images)}")
    if container.get("command") != DRA_COMMAND:
        problem(cwhere, f"command must be {DRA_COMMAND}")
    if "--root=/host" not in (container.get("args") or []):
        problem(cwhere, "must run with --root=/host (the host files are mounted under /host)")
    check_cli_alignment(cwhere, container, dra_cli(repo), "edgegpu-dra-driver (dra/src)")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    found_dirs = {}
    covers = set()
    # --mps: the driver asks the MPS companion for a daemon in desired/, as the plugin does.
    environment = env_map(container)
    mps_root = (environment.get("MPS_ROOT") or {}).get("value")
    mps_desired = f"{mps_root}/{MPS_DESIRED}" if mps_root else None
    if (environment.get("MPS") or {}).get("value") == "true" and not mps_root:
        problem(cwhere, "MPS=true without MPS_ROOT: the driver and the companion must meet in the chart's MPS "
                "directory")
    mps_found = set()
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            problem(cwhere, f"mount {mount['mountPath']} names no volume {mount['name']}")
            continue
        if is_token_volume(volume):
            if mount["mountPath"] != SERVICE_ACCOUNT_DIR or not mount.get("readOnly"):
                problem(cwhere, f"the token must be mounted readOnly at {SERVICE_ACCOUNT_DIR}")
            continue
        host_path = volume.get("hostPath")
        if host_path is None:
            continue
        path, kind = host_path["path"], host_path.get("type", "")
        if mps_root and path in (mps_root, mps_desired):
            mps_found.add(path)
            # Read-only but for desired/ (daemons.json): the rest is the companion's.
            read_only = path == mps_root
            if mount["mountPath"] != path or bool(mount.get("readOnly")) != read_only \
                    or kind != "DirectoryOrCreate":
                problem(cwhere, f"{path} must be mounted {'readOnly' if read_only else 'read-write'} at the same path "
                        f"(hostPath type DirectoryOrCreate): the driver writes only the MPS directory's "
                        f"{MPS_DESIRED}/")
            if read_only:
                covers.add(path)
            continue
        if path in DRA_HOST_DIRS:
            found_dirs[path] = kind
            if mount["mountPath"] != path or mount.get("readOnly"):
                problem(cwhere, f"{path} must be mounted read-write at the same path (the kubelet and the runtime "
                        "use the host's paths)")
            continue
        # A directory inside one of those, covered read-only (the MPS directory inside /run/edgegpu).
        if any(path.startswith(d + "/") for d in DRA_HOST_DIRS):
            covers.add(path)
            if mount["mountPath"] != path or not mount.get("readOnly") \
                    or kind not in ("DirectoryOrCreate", "Directory"):
                problem(cwhere, f"{path} is inside a directory the driver writes: only a readOnly cover at the same "
                        "path (hostPath type Directory or DirectoryOrCreate)")
            continue
        if path.startswith("/var/lib/kubelet") or path in (DEVICE_PLUGIN_DIR, POD_RESOURCES_DIR, HOST_PROC) \
                or path == SYS_KERNEL or path.startswith(SYS_KERNEL + "/"):
            problem(cwhere, f"host path {path} is not the DRA driver's")
            continue
        if kind not in HOSTPATH_TYPES_NO_CREATE:
            problem(cwhere, f"hostPath {path} has type {kind!r}: use one of {sorted(HOSTPATH_TYPES_NO_CREATE)}")
        # The host root: the claims' CDI specs need the driver's files wherever they are; read
        # only, and recursively so (its submounts /proc, /sys, /dev would otherwise stay
        # writable for a uid-0 container).
        expected = "/host" if path == "/" else "/host" + path
        if not mount.get("readOnly") or mount["mountPath"] != expected:
            problem(cwhere, f"host path {path} must be mounted readOnly at {expected} (--root /host)")
        if path == "/" and mount.get("recursiveReadOnly") not in ("Enabled", "IfPossible"):
            problem(cwhere, "the host root must be mounted recursiveReadOnly (Enabled or IfPossible): its "
                    "submounts would be writable")
    for path, kind in DRA_HOST_DIRS.items():
        if found_dirs.get(path) != kind:
            problem(cwhere, f"{path} must be mounted (hostPath type {kind}), found {found_dirs.get(path)!r}")
    for path in sorted({mps_root, mps_desired} - {None} - mps_found):
        problem(cwhere, f"MPS_ROOT is {mps_root}, but {path} is not mounted (the driver reads status.json and writes "
                "desired/daemons.json)")
    # The plugins' MPS directory: the companion's and the plugins' files, none of the driver's.
    for mps_root in sorted({(env_map(p["spec"]["template"]["spec"]["containers"][0]).get("MPS_ROOT") or {})
                            .get("value") for p in plugins.values()} - {None}):
        if any(mps_root == d or mps_root.startswith(d + "/") for d in DRA_HOST_DIRS) and mps_root not in covers:
            problem(cwhere, f"the MPS directory {mps_root} is inside a directory the driver mounts read-write: "
                    "mount it readOnly over it, at the same path")
    paths = {m["mountPath"] for m in container.get("volumeMounts") or []}
    if "/host/dev" in paths:
        for masked in ("/host/dev/pts", "/host/dev/shm"):
            if masked not in paths:
                problem(cwhere, f"/host/dev is mounted but {masked} is not masked")
    if component not in HOST_READERS:
        problem(where, f"app.kubernetes.io/component {component!r} is not one of {sorted(HOST_READERS)}")
    else:
        # The plugin's discovery runs in the driver: every host path it reads is mounted.
        check_host_path_coverage(cwhere, repo, component, pod, container)


def check_node_setup(ds, version, plugins, documented_labels):
    """The privileged node-setup DaemonSet: privileges only where they are needed."""
    where = f"DaemonSet {ds['metadata']['name']}"
    pod = ds["spec"]["template"]["spec"]
    if pod.get("automountServiceAccountToken") is not False:
        problem(where, "automountServiceAccountToken must be false (node-setup never calls the API)")
    for host_ns in ("hostNetwork", "hostIPC"):
        if pod.get(host_ns):
            problem(where, f"{host_ns} must not be set")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    pod_context = pod.get("securityContext") or {}
    for container in pod["containers"] + (pod.get("initContainers") or []):
        cwhere = f"{where} container {container['name']}"
        if not container.get("image", "").endswith(f":{version}"):
            problem(cwhere, f"image {container.get('image')} is not tagged with the workspace version {version}")
        context = {**pod_context, **(container.get("securityContext") or {})}
        is_apply = container["name"] == "apply" and container in (pod.get("initContainers") or [])
        if context.get("privileged") and not is_apply:
            problem(cwhere, "only the init container `apply` may be privileged")
        if is_apply:
            continue
        check_container(cwhere, container)
        if context.get("runAsNonRoot") is not True or not context.get("runAsUser"):
            problem(cwhere, "must run as non-root (runAsNonRoot and a non-zero runAsUser): with hostPID a "
                    "root process could act on the host's processes")
        for mount in container.get("volumeMounts") or []:
            if "hostPath" in volumes.get(mount["name"], {}):
                problem(cwhere, f"must not mount the host ({mount['mountPath']}): a read-only hostPath leaves "
                        "the mounts below it (/proc, /sys, /dev, /run, ...) writable")
    if not documented_labels or not plugins:
        return
    for labels in label_combinations(plugins):
        runs_plugin = any(selects(p["spec"]["template"]["spec"], labels) for p in plugins.values())
        if selects(pod, labels) != runs_plugin:
            problem(where, f"nodes labelled {labels}: node setup {'skips' if runs_plugin else 'runs on'} "
                    f"them although they {'run' if runs_plugin else 'run no'} plugin")


MPS_COMPANION = "edgegpu-mps-control-daemon"
# Under MPS_ROOT, the plugin's directory (daemons.json); everything else there is the companion's.
MPS_DESIRED = "desired"
MPS_COMMAND = ["/usr/bin/edgegpu-device-plugin", "mps-control-daemon"]


def check_mps_control_daemon(ds, version, plugins, drivers, cli, documented_labels):
    """The MPS companion (Helm value mps.enabled): the one privileged part of MPS, with exactly
    the host access it needs (docs/deploy.md 5), beside the plugins and DRA drivers it serves."""
    where = f"DaemonSet {ds['metadata']['name']}"
    pod = ds["spec"]["template"]["spec"]
    if pod.get("automountServiceAccountToken") is not False or pod.get("serviceAccountName"):
        problem(where, "needs no service account: automountServiceAccountToken false, no serviceAccountName")
    for host_ns in ("hostNetwork", "hostIPC"):
        if pod.get(host_ns):
            problem(where, f"{host_ns} must not be set")
    if pod.get("hostPID") is not True:
        problem(where, "needs hostPID: MPS knows its clients in other pods by their host process IDs")
    if pod.get("priorityClassName") != "system-node-critical":
        problem(where, "priorityClassName must be system-node-critical")
    if pod.get("initContainers"):
        problem(where, "has no init containers")
    check_volumes_used(where, pod)
    if [c["name"] for c in pod["containers"]] != ["mps-control-daemon"]:
        problem(where, "must have exactly one container, mps-control-daemon")
        return
    container = pod["containers"][0]
    cwhere = f"{where} container mps-control-daemon"
    if not container.get("image", "").endswith(f":{version}"):
        problem(cwhere, f"image {container.get('image')} is not tagged with the workspace version {version}")
    plugin_images = {p["spec"]["template"]["spec"]["containers"][0]["image"] for p in plugins.values()}
    if plugin_images and plugin_images != {container.get("image")}:
        problem(cwhere, f"image {container.get('image')} is not the plugins' {sorted(plugin_images)}")
    if container.get("command") != MPS_COMMAND:
        problem(cwhere, f"command must be {MPS_COMMAND}")
    if "--root=/host" not in (container.get("args") or []):
        problem(cwhere, "must run with --root=/host (it chroots into the host's /)")
    if container.get("ports"):
        problem(cwhere, "serves nothing: no ports")
    context = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    if context.get("privileged") is not True or context.get("runAsUser") != 0:
        problem(cwhere, "must be privileged as uid 0 (GPU device nodes, unshare, mount, chroot)")
    resources = container.get("resources") or {}
    for resource in ("cpu", "memory"):
        request = (resources.get("requests") or {}).get(resource)
        limit = (resources.get("limits") or {}).get(resource)
        if request is None or quantity(request) is None:
            problem(cwhere, f"needs a {resource} request")
        elif limit is not None and (quantity(limit) is None or quantity(request) > quantity(limit)):
            problem(cwhere, f"{resource} request {request} exceeds limit {limit}")
    check_cli_alignment(cwhere, container, cli, "edgegpu-device-plugin mps-control-daemon (plugin/src)")
    mps_root = (env_map(container).get("MPS_ROOT") or {}).get("value")
    if not mps_root or not mps_root.startswith("/"):
        problem(cwhere, "needs MPS_ROOT, an absolute host path")
        return
    for name, allocator in {**plugins, **drivers}.items():
        theirs = (env_map(allocator["spec"]["template"]["spec"]["containers"][0]).get("MPS_ROOT") or {}).get("value")
        if theirs != mps_root:
            problem(where, f"MPS_ROOT {mps_root} but {name} has {theirs!r}: they meet in that directory")
    # Exactly: the host's / read-only at /host, the MPS directory read-write at /host<MPS_ROOT>
    # but its desired/ (the plugin's) read-only.
    desired = f"{mps_root}/{MPS_DESIRED}"
    wanted = {"/": ("/host", True, "Directory"), mps_root: ("/host" + mps_root, False, "DirectoryOrCreate"),
              desired: ("/host" + desired, True, "DirectoryOrCreate")}
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    found = {}
    for volume in volumes.values():
        if "hostPath" not in volume:
            problem(cwhere, f"volume {volume['name']}: only the two host paths, nothing else")
    for mount in container.get("volumeMounts") or []:
        host_path = volumes.get(mount["name"], {}).get("hostPath")
        if host_path is None:
            problem(cwhere, f"mount {mount['mountPath']} names no host path volume")
            continue
        found[host_path["path"]] = (mount["mountPath"], bool(mount.get("readOnly")), host_path.get("type"))
    if found != wanted:
        problem(cwhere, f"host mounts {found}, expected exactly {wanted}")
    allocators = {**plugins, **drivers}
    if not documented_labels or not allocators:
        return
    for labels in label_combinations(allocators):
        runs = any(selects(a["spec"]["template"]["spec"], labels) for a in allocators.values())
        if selects(pod, labels) != runs:
            problem(where, f"nodes labelled {labels}: the MPS companion {'skips' if runs else 'runs on'} "
                    f"them although they {'run' if runs else 'run no'} plugin or DRA driver")


def plugin_cli(repo, sources=None):
    """Long flags, environment variables and discovery strategies the plugin's clap code defines
    (SOURCES: other Rust files instead, e.g. the labeller's with the plugin's GPU flags)."""
    if sources is None:
        files = sorted((repo / "plugin" / "src").rglob("*.rs")) + sorted((repo / "node" / "src").rglob("*.rs"))
        sources = "\n".join(p.read_text(encoding="utf-8") for p in files)
    envs = set(re.findall(r'\benv\s*=\s*"([A-Z0-9_]+)"', sources))
    # Read outside clap: EDGEGPU_LOG and NO_COLOR (logging.rs's LOG_ENV, NO_COLOR_ENV).
    envs |= set(re.findall(r'\b(?:LOG|NO_COLOR)_ENV:\s*&str\s*=\s*"([A-Z0-9_]+)"', sources))
    flags = set(re.findall(r'\b(?:long|visible_alias)\s*=\s*"([a-z0-9-]+)"', sources))
    for attrs, field in re.findall(r"#\[arg\((.*?)\)\]\s*pub\s+(\w+)\s*:", sources, re.S):
        if re.search(r"\blong\b(?!\s*=)", attrs):
            flags.add(field.replace("_", "-"))
    enum = re.search(r"enum\s+DiscoveryStrategy\s*\{([^}]*)\}", sources)
    strategies = {v.lower() for v in re.findall(r"^\s*([A-Z]\w*)\s*,", enum.group(1), re.M)} if enum else set()
    return envs, flags, strategies


def labeller_cli(repo):
    """The labeller's flags: its own (labeller/src), the node library's GPU flags and the API
    client's flags it flattens in."""
    files = (sorted((repo / "labeller" / "src").rglob("*.rs")) + [repo / "node" / "src" / "config.rs"]
             + sorted((repo / "node" / "src" / "config").rglob("*.rs")) + [repo / "apiclient" / "src" / "args.rs"])
    missing = [f for f in files if not f.exists()]
    for f in missing:
        problem(str(f.relative_to(repo)), "missing: the labeller's clap sources moved?")
    return plugin_cli(repo, "\n".join(f.read_text(encoding="utf-8") for f in files if f.exists()))


def check_cli_alignment(where, container, cli, program="edgegpu-device-plugin"):
    envs, flags, strategies = cli
    for arg in container.get("args") or []:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag[2:] not in flags:
            problem(where, f"argument {flag} is not a flag of {program}")
    for name, env in env_map(container).items():
        if name.startswith("NVIDIA_"):
            continue  # read by the NVIDIA container runtime, not by the plugin
        if name not in envs:
            problem(where, f"environment variable {name} is not read by {program}")
        if name == "DEVICE_DISCOVERY_STRATEGY" and env.get("value") not in strategies:
            problem(where, f"DEVICE_DISCOVERY_STRATEGY={env.get('value')!r} is not one of {sorted(strategies)}")


# Which sources (repository paths) hold the host paths the plugin reads for each DaemonSet
# (by its component label); the Jetson ones are partly in the platform table crate.
HOST_READERS = {
    "jetson": [
        "host/src/tegra.rs",
        "node/src/gpu/health/tegra.rs",
        "node/src/gpu/sysfs.rs",
        "node/src/gpu/sensors/tegra.rs",
        "node/src/serving/device_specs.rs",
        "platform/src/host.rs",
        "platform/src/generation.rs",
        "platform/src/lib.rs",
        "platform/src/table.rs",
    ],
    "discrete": [
        "node/src/gpu/discovery/device.rs",
        "node/src/gpu/discovery/nvml.rs",
        "node/src/gpu/health/nvml.rs",
        "node/src/serving/device_specs.rs",
    ],
}
# Read under --root on purpose but not mounted on purpose: NVML's library directories. The
# plugin tries them under the root first and then the plain soname, which the NVIDIA runtime
# injects (NVIDIA_VISIBLE_DEVICES=all); mounting the host's /usr/lib would expose far more.
NOT_MOUNTED_BY_DESIGN = ("/usr/lib", "/usr/lib64", "/lib", "/lib64",
                         # The EMC's actmon and clock files (docs/metrics.md): read when present,
                         # but /sys/kernel holds debugfs, whose recursive bind mount would not be
                         # read-only; those series are left out in a pod instead. nvmap's
                         # per-process file is mounted only as an opt-in
                         # (metrics.podGpuMemory.nvmapDebugfs, check_sys_kernel_mounts).
                         "/sys/kernel")
# Read when present but not mounted yet: nvpmodel's configuration and status (docs/power.md).
# They are missing on some images (meta-tegra packages nvpmodel on its own), and a hostPath of
# type File or Directory that is missing keeps the pod from starting, so they need optional
# mounts, which have not landed: until then a pod publishes no power-mode labels.
NOT_MOUNTED_YET = ("/etc/nvpmodel.conf", "/var/lib/nvpmodel")
# Paths in a shared source file that only the other kind of node reads.
NOT_READ_ON = {}
HOST_PATH_LITERAL = re.compile(r'"(/(?:sys|etc|dev|proc|usr|lib|lib64|run|var|opt)(?:/[^"]*)?)"')


def host_paths_read(repo, component):
    paths = set()
    for name in HOST_READERS.get(component, []):
        source = repo / name
        if not source.exists():
            problem(name, "missing: update HOST_READERS in deploy/lint/check_policy.py")
            continue
        for literal in HOST_PATH_LITERAL.findall(source.read_text(encoding="utf-8")):
            path = re.split(r"[{*]", literal)[0].rstrip("/") or "/"
            # On the host /proc/device-tree is a symlink to the device tree in sysfs; the image
            # recreates that link under /host (deploy/image/assemble-rootfs.sh).
            path = path.replace("/proc/device-tree", "/sys/firmware/devicetree/base", 1)
            paths.add(path)
    return paths - NOT_READ_ON.get(component, set())


def check_host_path_coverage(where, repo, component, pod, container):
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounted = [volumes[m["name"]]["hostPath"]["path"] for m in container.get("volumeMounts") or []
               if m["name"] in volumes and "hostPath" in volumes[m["name"]]]
    for path in sorted(host_paths_read(repo, component)):
        if any(path == d or path.startswith(d + "/") for d in NOT_MOUNTED_BY_DESIGN + NOT_MOUNTED_YET):
            continue
        if not any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounted):
            problem(where, f"the plugin reads {path} (node/src, host/src, platform/src) but no host mount covers it")


def check_daemonset(ds, version, configmaps, cli, repo, namespace="kube-system", configmap_required=True,
                    host_pid_allowed=False):
    """HOST_PID_ALLOWED: the Helm value metrics.podGpuMemory.hostPID is set (the static manifests
    never have it)."""
    name = ds["metadata"]["name"]
    where = f"DaemonSet {name}"
    pod = ds["spec"]["template"]["spec"]
    if ds["metadata"].get("namespace") != namespace:
        problem(where, f"must be in {namespace}")
    if ds["metadata"].get("labels", {}).get("app.kubernetes.io/version") != version:
        problem(where, f"app.kubernetes.io/version label must be the workspace version {version}")
    if pod.get("priorityClassName") != "system-node-critical":
        problem(where, "priorityClassName must be system-node-critical")
    if pod.get("automountServiceAccountToken") is not False:
        problem(where, "automountServiceAccountToken must be false (only the labeller mounts a token)")
    for host_ns in ("hostNetwork", "hostIPC"):
        if pod.get(host_ns):
            problem(where, f"{host_ns} must not be set")
    component = ds["metadata"].get("labels", {}).get("app.kubernetes.io/component")
    if pod.get("hostPID"):
        check_plugin_host_pid(where, pod, component, host_pid_allowed)
    if not any(t.get("key") == "nvidia.com/gpu" and t.get("operator") == "Exists" for t in pod.get("tolerations") or []):
        problem(where, "needs the toleration nvidia.com/gpu Exists")
    check_volumes_used(where, pod)
    check_metrics_port(where, ds)
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    plugin_host_mounts = {volumes[m["name"]]["hostPath"]["path"] for m in pod["containers"][0].get("volumeMounts") or []
                          if "hostPath" in volumes.get(m["name"], {})}
    for container in pod["containers"] + (pod.get("initContainers") or []):
        check_sys_kernel_mounts(f"{where} container {container['name']}", pod, container, component,
                                plugin=container is pod["containers"][0])
    pod_seccomp = ((pod.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    for container in pod["containers"] + (pod.get("initContainers") or []):
        cwhere = f"{where} container {container['name']}"
        seccomp = ((container.get("securityContext") or {}).get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp != "RuntimeDefault":
            problem(cwhere, "seccompProfile must be RuntimeDefault")
        image = container.get("image", "")
        if not image.endswith(f":{version}"):
            problem(cwhere, f"image {image} is not tagged with the workspace version {version}")
        check_container(cwhere, container)
        if container is not pod["containers"][0]:
            # The labeller: the plugin's GPU settings, no more of the host than the plugin mounts.
            check_mounts(cwhere, pod, container, plugin=False)
            check_config_wiring(cwhere, pod, container, configmaps, configmap_required)
            if container.get("command") != ["/usr/bin/edgegpu-labeller"]:
                problem(cwhere, "the only init container is edgegpu-labeller")
            check_cli_alignment(cwhere, container, labeller_cli(repo), "edgegpu-labeller (labeller/src)")
            for m in container.get("volumeMounts") or []:
                path = volumes.get(m["name"], {}).get("hostPath", {}).get("path")
                if path and not any(path == p or path.startswith(p.rstrip("/") + "/") for p in plugin_host_mounts):
                    problem(cwhere, f"mounts host path {path}, which the plugin itself does not")
            continue
        check_mounts(cwhere, pod, container)
        check_config_wiring(cwhere, pod, container, configmaps, configmap_required)
        check_cli_alignment(cwhere, container, cli, "edgegpu-device-plugin (plugin/src)")
        if component not in HOST_READERS:
            problem(where, f"app.kubernetes.io/component {component!r} is not one of {sorted(HOST_READERS)}")
        else:
            check_host_path_coverage(cwhere, repo, component, pod, container)


def check_plugin_host_pid(where, pod, component, allowed):
    """hostPID on a plugin DaemonSet: per-pod GPU memory from NVML, which lists only the GPU
    processes of the caller's PID namespace. An opt-in (metrics.podGpuMemory.hostPID): it lets
    the plugin container, uid 0, signal every root process of the node."""
    if not allowed:
        problem(where, "hostPID must not be set (only the Helm value metrics.podGpuMemory.hostPID sets it, "
                "on the discrete DaemonSet)")
        return
    if component != "discrete":
        problem(where, "hostPID only on the discrete DaemonSet (NVML's per-process GPU memory; nvmap on a "
                "Jetson prints global PIDs)")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounted = {volumes.get(m["name"], {}).get("hostPath", {}).get("path"): m["mountPath"]
               for m in pod["containers"][0].get("volumeMounts") or []}
    if mounted.get(HOST_PROC) != "/host" + HOST_PROC:
        problem(where, "hostPID without the host's /proc at /host/proc: the processes NVML lists could not be "
                "attributed to pods")


def check_sys_kernel_mounts(where, pod, container, component, plugin):
    """Nothing of /sys/kernel, which holds debugfs and whose read-only bind would leave the
    mounts below it writable, but nvmap's iovmm directory for the Jetson plugin container."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        path = volumes.get(mount["name"], {}).get("hostPath", {}).get("path", "")
        if path != SYS_KERNEL and not path.startswith(SYS_KERNEL + "/"):
            continue
        if path != NVMAP_IOVMM_DIR:
            problem(where, f"host path {path}: nothing of {SYS_KERNEL} (debugfs; a read-only bind mount is not "
                    f"recursive) but {NVMAP_IOVMM_DIR}")
        elif component != "jetson" or not plugin:
            problem(where, f"{NVMAP_IOVMM_DIR} (nvmap's per-process GPU memory) is for the Jetson device-plugin "
                    "container only")


def check_metrics_port(where, ds):
    """The metrics port, the address the plugin binds and the scrape annotation agree."""
    pod = ds["spec"]["template"]["spec"]
    plugin = pod["containers"][0]
    bind = (env_map(plugin).get("METRICS_BIND_ADDRESS") or {}).get("value")
    ports = {p.get("name"): p.get("containerPort") for p in plugin.get("ports") or []}
    annotations = ds["spec"]["template"]["metadata"].get("annotations") or {}
    if not bind:
        if "metrics" in ports or "prometheus.io/scrape" in annotations:
            problem(where, "a metrics port or scrape annotation without METRICS_BIND_ADDRESS")
        return
    port = bind.rsplit(":", 1)[-1]
    if str(ports.get("metrics")) != port:
        problem(where, f"METRICS_BIND_ADDRESS {bind} but the container port named metrics is {ports.get('metrics')}")
    if "prometheus.io/scrape" in annotations and annotations.get("prometheus.io/port") != port:
        problem(where, f"prometheus.io/port {annotations.get('prometheus.io/port')!r} is not the metrics port {port}")


def check_node_labeller(ds, version, service_accounts):
    """The DaemonSet that labels every node: nothing it mounts can be missing on a Linux host,
    unprivileged, and its token is the labeller's."""
    where = f"DaemonSet {ds['metadata']['name']}"
    pod = ds["spec"]["template"]["spec"]
    if pod.get("nodeSelector") != {"kubernetes.io/os": "linux"} or pod.get("affinity"):
        problem(where, "must run on every Linux node: nodeSelector kubernetes.io/os=linux and no affinity")
    if not any(t.get("operator") == "Exists" and not t.get("key") for t in pod.get("tolerations") or []):
        problem(where, "must tolerate every taint (a GPU node may have any)")
    if pod.get("automountServiceAccountToken") is not False:
        problem(where, "automountServiceAccountToken must be false (the token is a projected volume)")
    if pod.get("serviceAccountName") not in service_accounts:
        problem(where, f"serviceAccountName {pod.get('serviceAccountName')!r} is not the labeller's ServiceAccount")
    security = pod.get("securityContext") or {}
    if security.get("runAsNonRoot") is not True or not security.get("runAsUser"):
        problem(where, "must run as a non-root user (it only reads /sys)")
    for host_ns in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host_ns):
            problem(where, f"{host_ns} must not be set")
    check_volumes_used(where, pod)
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for container in pod["containers"] + (pod.get("initContainers") or []):
        cwhere = f"{where} container {container['name']}"
        check_container(cwhere, container)
        if not container.get("image", "").endswith(f":{version}"):
            problem(cwhere, f"image {container.get('image')} is not tagged with the workspace version {version}")
        if "--kind-only" not in (container.get("args") or []):
            problem(cwhere, "must run edgegpu-labeller --kind-only (it mounts only /sys)")
        for m in container.get("volumeMounts") or []:
            host_path = volumes.get(m["name"], {}).get("hostPath")
            if host_path is None:
                continue
            if host_path["path"] not in ALWAYS_PRESENT_HOST_PATHS or host_path.get("type") != "Directory":
                problem(cwhere, f"host path {host_path['path']}: only {sorted(ALWAYS_PRESENT_HOST_PATHS)} "
                        "(type Directory) exist on every Linux node")
            if not m.get("readOnly") or m["mountPath"] != "/host" + host_path["path"]:
                problem(cwhere, f"host path {host_path['path']} must be mounted readOnly at /host{host_path['path']}")


def check_power_policy(ds, version, accounts, repo):
    """The power policy (Helm value powerPolicy.enabled): privileged on Jetson nodes only, with
    the host's / and its rules, nothing else (docs/power.md, docs/security.md 6)."""
    where = f"DaemonSet {ds['metadata']['name']}"
    pod = ds["spec"]["template"]["spec"]
    if (pod.get("nodeSelector") or {}).get("edgegpu.io/gpu") != "jetson":
        problem(where, "must run on Jetson nodes only (nodeSelector edgegpu.io/gpu=jetson)")
    if pod.get("automountServiceAccountToken") is not False:
        problem(where, "automountServiceAccountToken must be false (the token is a projected volume)")
    if pod.get("serviceAccountName") not in accounts:
        problem(where, f"serviceAccountName {pod.get('serviceAccountName')!r} is bound to no ClusterRole")
    for host_ns in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host_ns):
            problem(where, f"{host_ns} must not be set")
    if pod.get("initContainers"):
        problem(where, "has no init containers")
    check_volumes_used(where, pod)
    if [c["name"] for c in pod["containers"]] != ["power-policy"]:
        problem(where, "must have exactly one container, power-policy")
        return
    container = pod["containers"][0]
    cwhere = f"{where} container power-policy"
    if not container.get("image", "").endswith(f":{version}"):
        problem(cwhere, f"image {container.get('image')} is not tagged with the workspace version {version}")
    if container.get("command") != POWER_POLICY_COMMAND:
        problem(cwhere, f"command must be {POWER_POLICY_COMMAND}")
    if "--root=/host" not in (container.get("args") or []):
        problem(cwhere, "must run with --root=/host (it chroots nvpmodel into the host's /)")
    if container.get("ports"):
        problem(cwhere, "serves nothing: no ports")
    context = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    if context.get("privileged") is not True or context.get("runAsUser") != 0:
        problem(cwhere, "must be privileged as uid 0 (nvpmodel writes the host's clock and hotplug files)")
    check_cli_alignment(cwhere, container, labeller_cli(repo), "edgegpu-labeller power-policy (labeller/src)")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    host_mounts = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"], {})
        if "hostPath" in volume:
            host_mounts[volume["hostPath"]["path"]] = (mount["mountPath"], volume["hostPath"].get("type"))
        elif not (is_token_volume(volume) or "configMap" in volume):
            problem(cwhere, f"mount {mount['mountPath']}: only the host's /, its token and its rules")
    if host_mounts != {"/": ("/host", "Directory")}:
        problem(cwhere, f"host mounts {host_mounts}: exactly the host's / at /host (type Directory)")


def check_rbac(objects):
    """The labeller's ClusterRole: get and patch on nodes, nothing more; bound to its account.
    Returns the ServiceAccounts (namespace/name) it is bound to."""
    roles = {d["metadata"]["name"]: d for d in objects if d.get("kind") == "ClusterRole"}
    accounts = set()
    for role in roles.values():
        if role["metadata"].get("labels", {}).get("app.kubernetes.io/name") == POWER_POLICY:
            rules = [{**r, "verbs": sorted(r.get("verbs") or [])} for r in role.get("rules") or []]
            if rules != POWER_POLICY_RULES:
                problem(f"ClusterRole {role['metadata']['name']}", f"grants {role.get('rules')}: only {POWER_POLICY_RULES}")
            continue
        if role["metadata"].get("labels", {}).get("app.kubernetes.io/name") == DRA_DRIVER:
            rules = [{**r, "verbs": sorted(r.get("verbs") or [])} for r in role.get("rules") or []]
            if rules != DRA_RULES:
                problem(f"ClusterRole {role['metadata']['name']}", f"grants {role.get('rules')}: only {DRA_RULES}")
            continue
        for rule in role.get("rules") or []:
            if (rule.get("apiGroups") != [""] or rule.get("resources") != ["nodes"]
                    or sorted(rule.get("verbs") or []) != ["get", "patch"] or rule.get("resourceNames")):
                problem(f"ClusterRole {role['metadata']['name']}", f"grants {rule}: only get and patch on nodes")
    for kind in ("Role", "RoleBinding"):
        for doc in (d for d in objects if d.get("kind") == kind):
            problem(f"{kind} {doc['metadata']['name']}", "unexpected: the chart needs no namespaced RBAC")
    for binding in (d for d in objects if d.get("kind") == "ClusterRoleBinding"):
        if binding["roleRef"].get("name") not in roles:
            problem(f"ClusterRoleBinding {binding['metadata']['name']}", "binds a ClusterRole not defined here")
        for subject in binding.get("subjects") or []:
            if subject.get("kind") != "ServiceAccount":
                problem(f"ClusterRoleBinding {binding['metadata']['name']}", f"binds {subject}: only ServiceAccounts")
            accounts.add(subject.get("name"))
    return accounts


def check_metrics_service(objects, plugins):
    for service in (d for d in objects if d.get("kind") == "Service"):
        where = f"Service {service['metadata']['name']}"
        selector = service["spec"].get("selector") or {}
        selected = [n for n, ds in plugins.items()
                    if all(ds["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        if sorted(selected) != sorted(plugins):
            problem(where, f"selects {selected}, not every plugin DaemonSet {sorted(plugins)}")
        for port in service["spec"].get("ports") or []:
            for name in selected:
                container_ports = {p.get("name"): p.get("containerPort")
                                   for p in plugins[name]["spec"]["template"]["spec"]["containers"][0].get("ports") or []}
                if port.get("targetPort") not in container_ports or container_ports[port["targetPort"]] != port.get("port"):
                    problem(where, f"port {port.get('name')} does not reach the {port.get('targetPort')!r} port of {name}")


def check(repo):
    """Returns the list of problems found in REPO's deployment files."""
    top_level = {p: load(p) for p in sorted((repo / "deploy").glob("*.yaml"))}
    examples = {p: load(p) for p in sorted((repo / "deploy" / "examples").glob("*.yaml"))}
    configmaps = {d["metadata"]["name"]: d for docs in examples.values() for d in docs if d.get("kind") == "ConfigMap"}
    objects = [d for docs in top_level.values() for d in docs]
    check_objects(repo, objects, configmaps, where="deploy/")  # leaves its findings in `problems`
    for path, docs in examples.items():
        for doc in docs:
            if doc.get("kind") == "ConfigMap" and "config.yaml" in (doc.get("data") or {}):
                check_sharing_config(f"{path.relative_to(repo)}", doc["data"]["config.yaml"])
    return list(problems)


def check_objects(repo, objects, configmaps, where, namespace="kube-system", configmap_required=True,
                  documented_labels=True, runtime_class=True, host_pid_allowed=False):
    """Returns the problems in OBJECTS (the static manifests, or one rendering of the chart).
    CONFIGMAPS fill the plugins' optional config (configmap_required: each must have one);
    DOCUMENTED_LABELS: the affinities are the built-in ones; RUNTIME_CLASS: it must be there;
    HOST_PID_ALLOWED: rendered with metrics.podGpuMemory.hostPID=true (the discrete plugin may
    then run in the host's PID namespace)."""
    problems.clear()
    version = workspace_version(repo)
    all_daemonsets = [d for d in objects if d.get("kind") == "DaemonSet"]
    plugins = {d["metadata"]["name"]: d for d in all_daemonsets
               if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "edgegpu-device-plugin"}
    node_setup = [d for d in all_daemonsets
                  if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "edgegpu-node-setup"]
    labellers = [d for d in all_daemonsets
                 if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "edgegpu-node-labeller"]
    companions = [d for d in all_daemonsets
                  if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == MPS_COMPANION]
    drivers = {d["metadata"]["name"]: d for d in all_daemonsets
               if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == DRA_DRIVER}
    power_policies = [d for d in all_daemonsets
                      if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == POWER_POLICY]
    for ds in all_daemonsets:
        if ds["metadata"]["name"] not in plugins and ds["metadata"]["name"] not in drivers \
                and not any(ds in s for s in (node_setup, labellers, companions, power_policies)):
            problem(f"DaemonSet {ds['metadata']['name']}",
                    "is neither the device plugin, the DRA driver, node setup, the labeller, the MPS companion "
                    "nor the power policy")
    if not plugins and not node_setup and not drivers:
        problem(where, "no DaemonSet")
    cli = plugin_cli(repo)
    for ds in plugins.values():
        check_daemonset(ds, version, configmaps, cli, repo, namespace, configmap_required, host_pid_allowed)
    if plugins:
        check_node_selection(plugins, documented_labels)
    accounts = check_rbac(objects)
    for ds in plugins.values():
        account = ds["spec"]["template"]["spec"].get("serviceAccountName")
        if ds["spec"]["template"]["spec"].get("initContainers") and account not in accounts:
            problem(f"DaemonSet {ds['metadata']['name']}", f"its labeller runs as {account!r}, which no ClusterRoleBinding names")
    for ds in labellers:
        check_node_labeller(ds, version, accounts)
    for ds in drivers.values():
        check_dra_driver(ds, version, plugins, repo)
        if ds["spec"]["template"]["spec"].get("serviceAccountName") not in accounts:
            problem(f"DaemonSet {ds['metadata']['name']}", "its ServiceAccount is bound to no ClusterRole")
    if drivers:
        check_allocators_exclusive(plugins, drivers)
    check_metrics_service(objects, plugins)
    for ds in node_setup:
        check_node_setup(ds, version, {**plugins, **drivers}, documented_labels)
    for ds in companions:
        check_mps_control_daemon(ds, version, plugins, drivers, cli, documented_labels)
    for ds in power_policies:
        check_power_policy(ds, version, accounts, repo)
    with_mps = sorted(n for n, ds in {**plugins, **drivers}.items()
                      if "MPS_ROOT" in env_map(ds["spec"]["template"]["spec"]["containers"][0]))
    if with_mps and not companions:
        problem(where, f"{with_mps} set MPS_ROOT but no MPS companion DaemonSet ({MPS_COMPANION}) runs beside them")

    runtime_classes = [d for d in objects if d.get("kind") == "RuntimeClass"]
    if runtime_class and not any(rc["metadata"]["name"] == "nvidia" and rc.get("handler") == "nvidia"
                                 for rc in runtime_classes):
        problem(where, "no RuntimeClass nvidia with handler nvidia")
    for doc in objects:
        if doc.get("kind") == "ConfigMap" and "config.yaml" in (doc.get("data") or {}):
            check_sharing_config(f"ConfigMap {doc['metadata']['name']}", doc["data"]["config.yaml"])
    return list(problems)


def main(repo):
    found = check(repo)
    for line in found:
        print(f"policy: {line}")
    print(f"policy: {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]).resolve()))
