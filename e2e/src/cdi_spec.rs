//! The CDI spec containerd reads in CDI mode: written by the real `edgegpu-node-setup cdi
//! generate` from the fake host root, then made usable on this machine. The generator names
//! paths as seen on the booted host (`/dev/nvmap`, `/usr/lib/...`); the test's host is a
//! directory, so every device node path and mount host path is moved under it (container
//! paths unchanged). The fake driver's own needs are added to the spec's top-level edits:
//! its configuration file (bind-mounted) and EDGEGPU_FAKE_CUDA_CONFIG, and LD_LIBRARY_PATH to
//! the folders the spec mounts libcuda into (the real spec relies on the update-ldcache hook,
//! which needs NVIDIA's hook program).

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// Generates the spec for `host_root` into `cdi_dir/nvidia.json`, adapted as described above.
pub fn generate(
    node_setup: &Path,
    host_root: &Path,
    cdi_dir: &Path,
    fake_lib: &Path,
    fake_cuda_config: &Path,
) -> Result<Value> {
    let out = Command::new(node_setup)
        .arg("--root")
        .arg(host_root)
        .args(["cdi", "generate", "--output", "-", "--format", "json"])
        .output()
        .context("edgegpu-node-setup cdi generate")?;
    ensure!(
        out.status.success(),
        "cdi generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec: Value = serde_json::from_slice(&out.stdout)?;
    let spec = adapt(spec, host_root, fake_lib, fake_cuda_config)?;
    std::fs::create_dir_all(cdi_dir)?;
    std::fs::write(
        cdi_dir.join("nvidia.json"),
        serde_json::to_vec_pretty(&spec)?,
    )?;
    Ok(spec)
}

/// Makes a spec written for the booted host under `host_root` usable here, as described
/// above: device nodes and mount sources moved under the root (nodes made real character
/// devices, libcuda replaced by `fake_lib`), the fake driver's configuration and library path
/// added to the spec-wide edits.
pub fn adapt(
    mut spec: Value,
    host_root: &Path,
    fake_lib: &Path,
    fake_cuda_config: &Path,
) -> Result<Value> {
    let root = host_root.display().to_string();
    let mut lib_dirs = Vec::new();
    let mut nodes = Vec::new();
    let mut libcuda = Vec::new();
    let mut fix = |edits: &mut Value| {
        if let Some(list) = edits.get_mut("deviceNodes").and_then(Value::as_array_mut) {
            for node in list {
                let path = node["hostPath"]
                    .as_str()
                    .or(node["path"].as_str())
                    .unwrap_or("")
                    .to_string();
                node["hostPath"] = json!(format!("{root}{path}"));
                nodes.push(format!("{root}{path}"));
            }
        }
        if let Some(list) = edits.get_mut("mounts").and_then(Value::as_array_mut) {
            for m in list {
                let host = m["hostPath"].as_str().unwrap_or("").to_string();
                m["hostPath"] = json!(format!("{root}{host}"));
                let cpath = m["containerPath"].as_str().unwrap_or("");
                if cpath.contains("/libcuda.so") {
                    libcuda.push(format!("{root}{host}"));
                    let dir = Path::new(cpath).parent().unwrap().display().to_string();
                    if !lib_dirs.contains(&dir) {
                        lib_dirs.push(dir);
                    }
                }
            }
        }
    };
    for d in spec["devices"].as_array_mut().into_iter().flatten() {
        fix(&mut d["containerEdits"]);
    }
    if spec.get("containerEdits").is_none() {
        spec["containerEdits"] = json!({});
    }
    fix(&mut spec["containerEdits"]);
    // The host's nodes as real character devices (/dev/null's numbers: containerd stats them)
    // and its libcuda as the x86_64 fake driver.
    for node in &nodes {
        make_char_device(Path::new(node))?;
    }
    for lib in &libcuda {
        std::fs::copy(fake_lib, lib).with_context(|| format!("copy the fake libcuda to {lib}"))?;
    }
    let edits = &mut spec["containerEdits"];
    if edits.get("env").is_none() {
        edits["env"] = json!([]);
    }
    let env = edits["env"].as_array_mut().unwrap();
    env.push(json!(
        "EDGEGPU_FAKE_CUDA_CONFIG=/etc/edgegpu-fake-cuda.conf"
    ));
    env.push(json!(format!("LD_LIBRARY_PATH={}", lib_dirs.join(":"))));
    if edits.get("mounts").is_none() {
        edits["mounts"] = json!([]);
    }
    edits["mounts"].as_array_mut().unwrap().push(json!({
        "hostPath": fake_cuda_config.display().to_string(),
        "containerPath": "/etc/edgegpu-fake-cuda.conf",
        "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
    }));
    Ok(spec)
}

/// Replaces `path` (a fake root's placeholder file) by a character device with /dev/null's
/// numbers, unless it already is one.
pub fn make_char_device(path: &Path) -> Result<()> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    use std::os::unix::fs::FileTypeExt;
    if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device()) {
        return Ok(());
    }
    let _ = std::fs::remove_file(path);
    std::fs::create_dir_all(path.parent().unwrap())?;
    mknod(
        path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 3),
    )
    .with_context(|| format!("mknod {}", path.display()))?;
    Ok(())
}
