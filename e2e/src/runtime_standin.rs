//! A stand-in for NVIDIA's `nvidia-container-runtime` (a test double of NVIDIA's runtime only):
//! a Python script that records its arguments and the OCI config.json it got, and, as the real
//! runtime's prestart hook would, injects the driver into the container when the container's
//! NVIDIA_VISIBLE_DEVICES names devices (not unset, empty, `void` or `none`): it bind-mounts the
//! fake libcuda (testkit's fakes/cuda.c) at /usr/local/nvidia/lib64/libcuda.so.1 and a fake
//! driver configuration with one `device` per visible device, and sets LD_LIBRARY_PATH and
//! EDGEGPU_FAKE_CUDA_CONFIG. Then it execs runc with the same arguments.

use anyhow::Result;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Writes the stand-in into `dir`; `device_config` is the fake driver's text for ONE device
/// (testkit's `FakeCudaDevice` rendering without the header), repeated per visible device.
pub fn install(dir: &Path, device_config: &str) -> Result<PathBuf> {
    let lib = edgegpu_testkit::fakelib::variant_dir(edgegpu_testkit::cuda::variant::CURRENT)
        .join("libcuda.so.1");
    let template = dir.join("fake-cuda-device.conf");
    std::fs::write(&template, device_config)?;
    let script = dir.join("nvidia-container-runtime");
    std::fs::write(
        &script,
        format!(
            r#"#!/usr/bin/python3
import json, os, sys
LIB, TEMPLATE, RECORD = {lib:?}, {template:?}, {record:?}
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
    ids = [v for v in visible.split(",") if v and visible not in ("void", "none")]
    if ids:
        conf = os.path.join(bundle, "edgegpu-fake-cuda.conf")
        with open(conf, "w") as f:
            f.write("driver_version 12040\n")
            for _ in ids:
                f.write(open(TEMPLATE).read())
        os.chmod(conf, 0o644)
        for src, dst in ((LIB, "/usr/local/nvidia/lib64/libcuda.so.1"), (conf, "/etc/edgegpu-fake-cuda.conf")):
            spec.setdefault("mounts", []).append({{"destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro"]}})
        env += ["LD_LIBRARY_PATH=/usr/local/nvidia/lib64", "EDGEGPU_FAKE_CUDA_CONFIG=/etc/edgegpu-fake-cuda.conf"]
        spec["process"]["env"] = env
        json.dump(spec, open(path, "w"))
os.execv("/usr/sbin/runc", ["runc"] + args)
"#,
            lib = lib.display().to_string(),
            template = template.display().to_string(),
            record = dir.join("runtime-calls").display().to_string(),
        ),
    )?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(script)
}
