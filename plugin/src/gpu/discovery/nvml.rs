//! Discrete GPUs (and JetPack 6+ integrated GPUs) through NVML, loaded at run time.
//!
//! `nvml-wrapper` resolves every NVML symbol lazily, so a driver without a newer symbol
//! (e.g. `nvmlDeviceGetNumaNodeId`) still works; we fall back to sysfs for the NUMA node.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::{under_root, Gpu};

/// The soname NVIDIA's tools open (the unversioned `libnvidia-ml.so` is only in -dev packages).
const NVML_SONAME: &str = "libnvidia-ml.so.1";

/// Library directories searched under a non-`/` root, in go-nvlib's order, plus the JetPack 6
/// `nvidia/` directory and Yocto's `/usr/lib`.
const ROOT_LIB_DIRS: &[&str] = &[
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/nvidia",
    "/usr/lib",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
];

/// Where to load NVML from: the root's lib dirs first (when root is not `/`), then the soname.
fn candidates(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if root != Path::new("/") {
        for dir in ROOT_LIB_DIRS {
            let p = under_root(root, dir).join(NVML_SONAME);
            if p.exists() {
                out.push(p);
            }
        }
    }
    out.push(PathBuf::from(NVML_SONAME));
    out
}

/// Loads and initialises NVML, trying [`candidates`] in order.
fn load(root: &Path) -> anyhow::Result<(Nvml, PathBuf)> {
    let mut failures = Vec::new();
    for candidate in candidates(root) {
        match Nvml::builder().lib_path(OsStr::new(&candidate)).init() {
            Ok(nvml) => {
                tracing::info!(library = %candidate.display(), "NVML loaded");
                return Ok((nvml, candidate));
            }
            Err(e) => failures.push(format!("{}: {}", candidate.display(), describe(&e))),
        }
    }
    anyhow::bail!(
        "could not load NVML ({}); on Jetson before JetPack 6 this is expected. For discrete GPUs \
         check that the pod runs with the NVIDIA runtime (runtimeClassName: nvidia) or that --root \
         points at the host",
        failures.join("; ")
    )
}

fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => format!("cannot open the library: {inner}"),
        other => other.to_string(),
    }
}

/// NVML's bus ID `00000000:17:00.0` → sysfs name `0000:17:00.0`.
fn sysfs_bus_id(nvml_bus_id: &str) -> String {
    let lower = nvml_bus_id.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

/// NUMA node from sysfs (`-1` = none).
fn numa_from_sysfs(root: &Path, bus_id: &str) -> Option<i64> {
    let path = under_root(root, "/sys/bus/pci/devices")
        .join(sysfs_bus_id(bus_id))
        .join("numa_node");
    let n: i64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    (n >= 0).then_some(n)
}

/// Loads NVML and lists its GPUs. A GPU whose UUID cannot be read is skipped (logged).
pub fn load_and_enumerate(root: &Path) -> anyhow::Result<(Nvml, Vec<Gpu>)> {
    let (nvml, _) = load(root)?;
    let count = nvml.device_count().context("nvmlDeviceGetCount failed")?;
    let mut gpus = Vec::new();
    for index in 0..count {
        match describe_device(&nvml, root, index) {
            Ok(gpu) => gpus.push(gpu),
            Err(e) => tracing::warn!(index, "skipping GPU {index}: {e:#}"),
        }
    }
    Ok((nvml, gpus))
}

fn describe_device(nvml: &Nvml, root: &Path, index: u32) -> anyhow::Result<Gpu> {
    let device = nvml
        .device_by_index(index)
        .context("nvmlDeviceGetHandleByIndex")?;
    let uuid = device.uuid().context("nvmlDeviceGetUUID")?;
    let name = device.name().unwrap_or_else(|_| "NVIDIA GPU".into());
    // Jetson iGPUs answer NOT_SUPPORTED for memory and PCI info: optional fields.
    let memory_bytes = device.memory_info().ok().map(|m| m.total);
    let pci_bus_id = device.pci_info().ok().map(|p| p.bus_id);
    let numa_node = match device.numa_node_id() {
        Ok(n) => Some(i64::from(n)),
        Err(_) => pci_bus_id.as_deref().and_then(|b| numa_from_sysfs(root, b)),
    };
    let minor = device.minor_number().ok();
    // MIG devices are not advertised; a MIG-enabled GPU is served whole (and said so).
    if let Ok(mode) = device.mig_mode() {
        if mode.current == 1 {
            tracing::warn!(%uuid, "MIG is enabled on this GPU; MIG devices are not advertised, the whole GPU is");
        }
    }
    tracing::info!(
        index,
        %uuid,
        %name,
        memory_bytes = memory_bytes.unwrap_or(0),
        pci_bus_id = pci_bus_id.as_deref().unwrap_or("-"),
        numa_node = numa_node.unwrap_or(-1),
        "NVML GPU found"
    );
    Ok(Gpu {
        uuid,
        index,
        name,
        memory_bytes,
        pci_bus_id,
        numa_node,
        minor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_id_to_sysfs_name() {
        assert_eq!(sysfs_bus_id("00000000:17:00.0"), "0000:17:00.0");
        assert_eq!(sysfs_bus_id("0000:AF:00.0"), "0000:af:00.0");
    }
}
