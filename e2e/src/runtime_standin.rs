//! A stand-in for NVIDIA's `nvidia-container-runtime` (a test double of NVIDIA's runtime only):
//! a Python script that records its arguments and the OCI config.json it got, and, as the real
//! runtime's prestart hook would, injects the driver for the devices the container's
//! NVIDIA_VISIBLE_DEVICES names (IDs or `all`; unset, empty, `void` or `none`: nothing): each
//! device's node (a character device with the host node's numbers, added to `linux.devices`
//! and allowed in the device cgroup), the fake libcuda (testkit's fakes/cuda.c) bind-mounted at
//! /usr/local/nvidia/lib64/libcuda.so.1, and a fake driver configuration describing those
//! devices (each with `node`, so the driver sees a device only if its node is in the
//! container), with LD_LIBRARY_PATH and EDGEGPU_FAKE_CUDA_CONFIG set. Then it execs runc with
//! the same arguments.

use anyhow::Result;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One GPU as the stand-in knows it.
pub struct StandinGpu {
    /// The ID NVIDIA_VISIBLE_DEVICES names it by (the plugin's `tegra`, a UUID, an index).
    pub id: String,
    /// Its node on this machine (a real character device).
    pub host_node: PathBuf,
    /// Its node in the container.
    pub container_node: String,
    /// The fake driver's `device` block for it (testkit's rendering, with `node`).
    pub config: String,
}

/// The record of the stand-in's calls (argument lists, one JSON array a line).
pub fn calls_file(dir: &Path) -> PathBuf {
    dir.join("runtime-calls")
}

/// Writes the stand-in into `dir`.
pub fn install(dir: &Path, gpus: &[StandinGpu]) -> Result<PathBuf> {
    let lib = edgegpu_testkit::fakelib::variant_dir(edgegpu_testkit::cuda::variant::CURRENT)
        .join("libcuda.so.1");
    let table: Vec<String> = gpus
        .iter()
        .map(|g| {
            format!(
                "({:?}, {:?}, {:?}, {:?})",
                g.id,
                g.host_node.display().to_string(),
                g.container_node,
                g.config
            )
        })
        .collect();
    let script = dir.join("nvidia-container-runtime");
    std::fs::write(
        &script,
        format!(
            r#"#!/usr/bin/python3
import json, os, sys
LIB, RECORD = {lib:?}, {record:?}
GPUS = [{table}]
args = sys.argv[1:]
bundle = None
for i, a in enumerate(args):
    if a in ("--bundle", "-b") and i + 1 < len(args):
        bundle = args[i + 1]
    elif a.startswith("--bundle="):
        bundle = a.split("=", 1)[1]
with open(RECORD, "a") as rec:
    rec.write(json.dumps(args) + "\n")
if "create" in args and bundle:
    path = os.path.join(bundle, "config.json")
    spec = json.load(open(path))
    with open(RECORD + ".config.json", "a") as rec:
        rec.write(json.dumps(spec) + "\n")
    env = spec.get("process", {{}}).get("env", [])
    visible = [e.split("=", 1)[1] for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
    visible = visible[-1] if visible else ""
    ids = [] if visible in ("", "void", "none") else visible.split(",")
    chosen = [g for g in GPUS if "all" in ids or g[0] in ids]
    if chosen:
        conf = os.path.join(bundle, "edgegpu-fake-cuda.conf")
        with open(conf, "w") as f:
            f.write("driver_version 12040\n")
            for _, host, node, text in chosen:
                f.write(text)
                st = os.stat(host)
                linux = spec.setdefault("linux", {{}})
                linux.setdefault("devices", []).append({{"path": node, "type": "c",
                    "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev), "fileMode": 0o666, "uid": 0, "gid": 0}})
                linux.setdefault("resources", {{}}).setdefault("devices", []).append({{"allow": True, "type": "c",
                    "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev), "access": "rwm"}})
        os.chmod(conf, 0o644)
        for src, dst in ((LIB, "/usr/local/nvidia/lib64/libcuda.so.1"), (conf, "/etc/edgegpu-fake-cuda.conf")):
            spec.setdefault("mounts", []).append({{"destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro"]}})
        env += ["LD_LIBRARY_PATH=/usr/local/nvidia/lib64", "EDGEGPU_FAKE_CUDA_CONFIG=/etc/edgegpu-fake-cuda.conf"]
        spec["process"]["env"] = env
        json.dump(spec, open(path, "w"))
os.execv("/usr/sbin/runc", ["runc"] + args)
"#,
            lib = lib.display().to_string(),
            record = calls_file(dir).display().to_string(),
            table = table.join(", "),
        ),
    )?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(script)
}

/// The NVIDIA_VISIBLE_DEVICES value (the last one, as the runtime reads it) of every container
/// the stand-in was asked to create, from its record of the OCI configs; `None` where unset.
pub fn recorded_visible_devices(dir: &Path) -> Vec<Option<String>> {
    let text = std::fs::read_to_string(dir.join("runtime-calls.config.json")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|spec| {
            spec["process"]["env"]
                .as_array()
                .into_iter()
                .flatten()
                .rev()
                .find_map(|e| e.as_str()?.strip_prefix("NVIDIA_VISIBLE_DEVICES="))
                .map(str::to_string)
        })
        .collect()
}
