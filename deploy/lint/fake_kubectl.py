#!/usr/bin/env python3
"""A fake `kubectl` for testing scripts/e2e-node.sh without a cluster.

It simulates one node with a device plugin and a scheduler that counts an extended resource,
keeping its state in the JSON file named by FAKE_KUBE_STATE. It understands exactly the kubectl
invocations e2e-node.sh makes (and fails loudly on anything else, so a script change that it
does not model shows up as a test failure, not as a silent pass). Time is real: pods that run
`sleep N` succeed N seconds after they start.

Knobs in the initial state: node, gpus (physical GPUs the plugin finds), component (jetson or
discrete), register_delay (s), job_log (the devicequery output), job_seconds, overcommit (a
broken scheduler that ignores the resource, to prove the contention check can fail),
labeller (false: nothing labels the node), attribution (false: the plugin's /metrics never names
a pod, as without the pod-resources mount), companion (true: the MPS companion's pod runs on the
node), gpu_memory_mib (the GPU's memory, for MPS's default split), mps_enforced (false: MPS does not
hold the limits, the negative control).

Pods that run devicequery (args, no command) act out --check-limits and --allocate-mib with the
limit the applied config gives (sharing.mps: pinnedDeviceMemoryLimit, else the GPU's memory /
replicas), printing the lines scripts/e2e-node.sh reads (docs/devicequery.md).
"""

import json
import os
import re
import sys
import time

import yaml

STATE = os.environ["FAKE_KUBE_STATE"]
RESOURCE = "nvidia.com/gpu"


def load():
    with open(STATE, encoding="utf-8") as handle:
        return json.load(handle)


def save(state):
    with open(STATE + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    os.replace(STATE + ".tmp", STATE)


def unsupported(args):
    sys.stderr.write(f"fake kubectl: unsupported invocation: {args}\n")
    sys.exit(97)


def opt(args, *names, default=None):
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return default


def read_manifests(path):
    if path == "-":
        return [d for d in yaml.safe_load_all(sys.stdin.read()) if d]
    if os.path.isdir(path):
        docs = []
        for name in sorted(os.listdir(path)):
            if name.endswith((".yaml", ".yml")):
                with open(os.path.join(path, name), encoding="utf-8") as handle:
                    docs += [d for d in yaml.safe_load_all(handle) if d]
        return docs
    with open(path, encoding="utf-8") as handle:
        return [d for d in yaml.safe_load_all(handle) if d]


def advertised(state):
    if not state.get("plugin_started") or time.time() < state["plugin_started"] + state.get("register_delay", 0):
        return 0
    return state["gpus"] * state.get("replicas_at_start", 1)


def tick(state):
    """Runs the simulated kubelet and scheduler up to now."""
    now = time.time()
    for pod in state["pods"]:
        if pod["phase"] == "Running" and pod.get("seconds") is not None and now >= pod["started"] + pod["seconds"]:
            pod["phase"] = pod.get("outcome", "Succeeded")
    for job in state["jobs"].values():
        pod = next((p for p in state["pods"] if p.get("job") == job["name"]), None)
        if pod and pod["phase"] == "Succeeded":
            job["conditions"] = ["Complete"] if "Result = PASS" in state["job_log"] else ["Failed"]
    total = advertised(state)
    for pod in state["pods"]:
        if pod["phase"] != "Pending":
            continue
        used = sum(p["request"] for p in state["pods"] if p["phase"] == "Running")
        if state.get("overcommit") or pod["request"] <= total - used:
            pod.update(phase="Running", started=now, scheduled=None)
        else:
            pod["scheduled"] = f"0/1 nodes are available: 1 Insufficient {RESOURCE}."


def request_of(spec):
    limits = spec["containers"][0].get("resources", {}).get("limits", {})
    return int(limits.get(RESOURCE, 0))


def apply(state, docs):
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        ns = meta.get("namespace", "default")
        if kind == "DaemonSet":
            state["plugin_deployed"] = True
            if not state.get("plugin_started"):
                restart_plugin(state)
        elif kind == "ConfigMap":
            state["configmaps"][f"{ns}/{meta['name']}"] = doc
        elif kind == "Pod":
            spec = doc["spec"]
            assert spec["nodeSelector"]["kubernetes.io/hostname"] == state["node"], spec
            entry = {"name": meta["name"], "namespace": ns, "labels": meta.get("labels", {}),
                     "request": request_of(spec), "phase": "Pending"}
            container = spec["containers"][0]
            if "command" in container:
                entry["seconds"] = int(container["command"][1])
            else:
                entry.update(devicequery(state, [str(a) for a in container["args"]]))
            state["pods"].append(entry)
        elif kind == "Job":
            spec = doc["spec"]["template"]["spec"]
            assert spec["nodeSelector"]["kubernetes.io/hostname"] == state["node"], spec
            state["jobs"][f"{ns}/{meta['name']}"] = {"name": meta["name"], "conditions": []}
            state["pods"].append({"name": meta["name"] + "-x1", "namespace": ns, "labels": {}, "job": meta["name"],
                                  "request": max(request_of(spec), 1), "phase": "Pending",
                                  "seconds": state.get("job_seconds", 1)})
        print(f"{kind.lower()}/{meta['name']} configured")


MIB_OF = {"Mi": 1, "Gi": 1024}


def restart_plugin(state):
    state["plugin_started"] = time.time()
    replicas, limit = 1, None
    for cm in state["configmaps"].values():
        sharing = yaml.safe_load(cm["data"]["config.yaml"])["sharing"]
        resource = (sharing.get("mps") or sharing["timeSlicing"])["resources"][0]
        replicas = resource["replicas"]
        if "mps" in sharing:
            size = str(resource.get("pinnedDeviceMemoryLimit", ""))
            limit = (int(size[:-2]) * MIB_OF[size[-2:]] if size
                     else state.get("gpu_memory_mib", 16384) // replicas)
    state["replicas_at_start"] = replicas
    state["limit_mib"] = limit
    state["restarts"] = state.get("restarts", 0) + 1


def devicequery(state, args):
    """What a devicequery pod with ARGS does on the simulated GPU: how long it runs, how it ends,
    its log while it runs and at the end."""
    limit, enforced = state.get("limit_mib"), state.get("mps_enforced", True)
    head = 'deviceQuery, CUDA Driver = CUDART, NumDevs = 1\n\n'
    if "--check-limits" in args:
        head += 'Memory limit check (--check-limits) on device 0: "Orin"\n'
        if limit is None:
            end = ("  EDGEGPU_GPU_MEMORY_LIMIT_MIB:                  (not set)\n"
                   "devicequery: check failed: --check-limits: no memory limit was given for device 0: neither "
                   "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (an entry for ordinal 0) nor EDGEGPU_GPU_MEMORY_LIMIT_MIB is set\n"
                   "Result = FAIL")
            return {"seconds": 0.3, "outcome": "Failed", "log": head, "final_log": head + end}
        head += f"  Memory limit checked:                          {limit} MiB ({limit << 20} bytes)\n"
        if enforced:
            end = ("  First refusal:                                 64 MiB: 2 (CUDA_ERROR_OUT_OF_MEMORY) out of memory\n"
                   "Result = PASS")
            return {"seconds": 0.3, "outcome": "Succeeded", "log": head, "final_log": head + end}
        end = (f"devicequery: check failed: --check-limits: the limit is not enforced: {limit * 1.1:.2f} MiB could be "
               f"allocated on device 0, more than the {limit} MiB limit\nResult = FAIL")
        return {"seconds": 0.3, "outcome": "Failed", "log": head, "final_log": head + end}
    mib = int(args[args.index("--allocate-mib") + 1])
    hold = int(args[args.index("--hold-seconds") + 1]) if "--hold-seconds" in args else 0
    if enforced and limit is not None and mib > limit:
        end = (f"devicequery: check failed: --allocate-mib {mib}: allocating {mib} MiB on device 0 failed with 2 "
               "(CUDA_ERROR_OUT_OF_MEMORY): out of memory\nResult = FAIL")
        return {"seconds": 0.3, "outcome": "Failed", "log": head, "final_log": head + end}
    head += f"  Allocated:                                     {mib} MiB\n"
    if hold:
        head += f"  Holding for:                                   {hold} s\n"
    return {"seconds": max(hold, 0.3), "outcome": "Succeeded", "log": head, "final_log": head + "Result = PASS"}


def node_labels(state):
    """What the node labeller and the plugin's init container put on the node."""
    if not advertised(state) or state.get("labeller") is False:
        return {}
    return {"edgegpu.io/gpu": state["component"], "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "Orin", "nvidia.com/gpu.count": str(state["gpus"])}


def metrics_text(state):
    """The plugin's /metrics: one GPU series per running pod holding the GPU (or one unlabelled)."""
    base = 'gpu="0",UUID="tegra",device="nvidia0",modelName="Orin",Hostname="%s"' % state["node"]
    holders = [p for p in state["pods"] if p["phase"] == "Running" and p["request"] and not p.get("job")]
    if state.get("attribution") is False or not holders:
        lines = [f"DCGM_FI_DEV_GPU_UTIL{{{base}}} 40"]
    else:
        lines = [f'DCGM_FI_DEV_GPU_UTIL{{{base},pod="{p["name"]}",namespace="{p["namespace"]}",container="hold"}} 40'
                 for p in holders]
    return "\n".join(["# TYPE DCGM_FI_DEV_GPU_UTIL gauge", *lines,
                      f'edgegpu_registered{{resource="{RESOURCE}"}} 1']) + "\n"


def find_pod(state, ns, name):
    return next((p for p in state["pods"] if p["namespace"] == ns and p["name"] == name), None)


VALUE_FLAGS = {"-n", "--namespace", "-o", "-l", "-f", "-p", "--field-selector", "--type", "--raw"}


def positionals(args):
    """The words that are not flags or flag values: verb, kind, name."""
    words, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            words.append(arg)
    return words


def main(args):
    state = load()
    tick(state)
    ns = opt(args, "-n", "--namespace", default="default")
    out = opt(args, "-o")
    words = positionals(args) + ["", "", ""]
    verb = words[0]
    node = state["node"]
    key = RESOURCE.replace(".", "\\.")

    if verb == "version":
        print("Client Version: fake")
    elif verb == "get" and words[1] == "nodes" and out == "name":
        print(f"node/{node}")
    elif verb == "get" and words[1] == "node":
        name = words[2]
        if name != node:
            sys.stderr.write(f'Error from server (NotFound): nodes "{name}" not found\n')
            return 1
        if out is None:
            print(f"{node}   Ready")
        elif out.startswith("jsonpath={.status.nodeInfo"):
            print("arm64, kubelet v1.31.4+k3s1, containerd://1.7.23-k3s2", end="")
        elif out in (f"jsonpath={{.status.allocatable.{key}}}", f"jsonpath={{.status.capacity.{key}}}"):
            print(advertised(state) if state.get("plugin_deployed") else "", end="")
        elif out.startswith("jsonpath={.metadata.labels.") and out.endswith("}"):
            label = out[len("jsonpath={.metadata.labels."):-1].replace("\\.", ".")
            print(node_labels(state).get(label, ""), end="")
        else:
            unsupported(args)
    elif verb == "get" and "--raw" in args:
        path = opt(args, "--raw")
        plugin = f"edgegpu-device-plugin-{state['component']}-abcde"
        if path != f"/api/v1/namespaces/kube-system/pods/{plugin}:9400/proxy/metrics" or not advertised(state):
            sys.stderr.write(f"Error from server (NotFound): {path}\n")
            return 1
        print(metrics_text(state), end="")
    elif verb == "apply":
        apply(state, read_manifests(opt(args, "-f")))
    elif verb == "get" and "--all-namespaces" in args:
        assert f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed" in args, args
        for pod in state["pods"]:
            if pod["phase"] == "Running":  # the fake binds a pod exactly when it starts running
                print(pod["request"])
    elif verb == "get" and words[1] == "pods" and "-l" in args:
        selector = opt(args, "-l")
        if selector == "app.kubernetes.io/name=edgegpu-mps-control-daemon":
            assert opt(args, "--field-selector") == f"spec.nodeName={node}" and ns == "kube-system", args
            print("edgegpu-mps-control-daemon-x7k2p" if state.get("companion") else "", end="")
        elif selector == "app.kubernetes.io/name=edgegpu-device-plugin":
            if state.get("plugin_deployed") and out == "jsonpath={.items[0].metadata.name}":
                print(f"edgegpu-device-plugin-{state['component']}-abcde", end="")
            elif out != "jsonpath={.items[0].metadata.name}":
                unsupported(args)
        elif selector.startswith("edgegpu-e2e/run=") and out == "wide":
            print("NAME  READY  STATUS")
            for pod in state["pods"]:
                if pod["labels"].get("edgegpu-e2e/run") == selector.split("=", 1)[1]:
                    print(f"{pod['name']}  -  {pod['phase']}")
        else:
            unsupported(args)
    elif verb == "get" and words[1] == "pod":
        name = words[2]
        if ns == "kube-system" and out == "jsonpath={.metadata.labels.app\\.kubernetes\\.io/component}":
            print(state["component"], end="")
            return 0
        pod = find_pod(state, ns, name)
        if pod is None:
            sys.stderr.write(f'Error from server (NotFound): pods "{name}" not found\n')
            return 1
        if out == "jsonpath={.status.phase}":
            print(pod["phase"], end="")
        elif out.startswith('jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}'):
            if pod["phase"] == "Pending" and pod.get("scheduled"):
                print(f"Unschedulable: {pod['scheduled']}", end="")
            else:
                print(": ", end="")
        else:
            unsupported(args)
    elif verb == "get" and words[1] == "configmap":
        name = words[2]
        return 0 if f"{ns}/{name}" in state["configmaps"] else 1
    elif verb == "get" and words[1] == "job":
        job = state["jobs"].get(f"{ns}/{words[2]}")
        if job is None:
            return 1
        print(" ".join(job["conditions"]), end="")
    elif verb == "create" and "--dry-run=client" in args:
        doc = read_manifests(opt(args, "-f"))[0]
        if out == "jsonpath={.spec.template.spec.containers[0].image}":
            print(doc["spec"]["template"]["spec"]["containers"][0]["image"], end="")
        else:
            field = re.fullmatch(r"jsonpath=\{\.metadata\.(name|namespace)\}", out).group(1)
            print(doc["metadata"].get(field, ""), end="")
    elif verb == "patch" and "--local" in args:
        doc = read_manifests(opt(args, "-f"))[0]
        patch = json.loads(opt(args, "-p"))
        doc["spec"]["template"]["spec"].update(patch["spec"]["template"]["spec"])
        print(yaml.safe_dump(doc))
    elif verb == "logs":
        pod = find_pod(state, ns, words[1])
        if words[1].startswith("job/"):
            print(state["job_log"])
        elif pod is not None and "log" in pod:
            if pod["phase"] == "Pending":
                sys.stderr.write(f'Error from server (BadRequest): container "devicequery" in pod "{pod["name"]}" '
                                 "is waiting to start: ContainerCreating\n")
                return 1
            print(pod["final_log"] if pod["phase"] in ("Succeeded", "Failed") else pod["log"], end="")
        else:
            print("plugin log line")
    elif verb == "delete":
        what = words[1]
        if what == "job":
            name = words[2]
            state["jobs"].pop(f"{ns}/{name}", None)
            state["pods"] = [p for p in state["pods"] if p.get("job") != name]
        elif what == "pods":
            run = opt(args, "-l").split("=", 1)[1]
            state["pods"] = [p for p in state["pods"] if p["labels"].get("edgegpu-e2e/run") != run]
        elif what == "configmap":
            state["configmaps"].pop(f"{ns}/{words[2]}", None)
        else:
            unsupported(args)
    elif verb == "rollout" and "restart" in args:
        restart_plugin(state)
    elif verb == "rollout" and "status" in args:
        print("daemon set successfully rolled out")
    else:
        unsupported(args)
    save(state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
