//! GPUs of the NVIDIA driver (discrete GPUs; Jetson Thor's OpenRM driver too) without NVML:
//! node-setup is a static musl binary and cannot `dlopen` `libnvidia-ml.so.1`, so it reads
//! what the kernel driver itself publishes (parsers in `edgegpu_platform::procfs`):
//! `/proc/driver/nvidia/gpus/<bus>/information` gives each GPU's UUID, bus id and device
//! minor; `/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/ci<C>` the MIG instances
//! that exist, and `/proc/driver/nvidia-caps/mig-minors` their `/dev/nvidia-caps` nodes (the
//! same files NVIDIA's device plugin reads, `internal/rm/nvml_devices.go`);
//! `/proc/driver/nvidia/version` the driver version, which names the user-space libraries.
//! GPU indices follow PCI bus order, NVML's enumeration order.

use std::path::Path;

use edgegpu_platform::procfs::{
    caps_node, mig_capability_keys, parse_driver_version, parse_gpu_information, parse_mig_minors,
    GpuInformation, CAPABILITIES_DIR, GPUS_DIR, MIG_MINORS, VERSION,
};

use crate::error::{Result, SetupError};
use crate::host::HostRoot;

/// One GPU the driver serves, with its MIG devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverGpu {
    /// Position in PCI bus order (NVML's index).
    pub index: usize,
    pub info: GpuInformation,
    pub migs: Vec<DriverMig>,
}

/// One MIG device (GPU instance + compute instance) and its capability nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverMig {
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// `/dev/nvidia-caps/nvidia-cap<n>` of the GPU instance and the compute instance.
    pub caps_nodes: [String; 2],
}

impl DriverGpu {
    /// `/dev/nvidia<minor>`.
    pub fn node(&self) -> String {
        format!("/dev/nvidia{}", self.info.minor)
    }
}

/// Control nodes every GPU container needs (those that exist are used).
pub const CONTROL_NODES: [&str; 4] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// Driver libraries a CUDA (`compute`) and NVML (`utility`) container needs, by name before
/// `.so.<driver version>` (libnvidia-container `src/nvc_info.c`, `utility_libs` and
/// `compute_libs`).
pub const DRIVER_LIBS: [&str; 9] = [
    "libnvidia-ml",
    "libnvidia-cfg",
    "libcuda",
    "libcudadebugger",
    "libnvidia-opencl",
    "libnvidia-gpucomp",
    "libnvidia-ptxjitcompiler",
    "libnvidia-nvvm",
    "libnvidia-allocator",
];

/// Driver programs of the `utility` and `compute` capabilities (same source).
pub const DRIVER_BINARIES: [&str; 4] = [
    "/usr/bin/nvidia-smi",
    "/usr/bin/nvidia-debugdump",
    "/usr/bin/nvidia-persistenced",
    "/usr/bin/nvidia-cuda-mps-control",
];

/// The GPUs under `root`'s procfs, in bus order; empty when the driver's procfs is absent.
pub fn gpus(root: &HostRoot) -> Result<Vec<DriverGpu>> {
    let dir = root.path(GPUS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SetupError::io(format!("reading {}", dir.display()), e)),
    };
    let mut infos = Vec::new();
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let file = p.join("information");
        let text = std::fs::read_to_string(&file)
            .map_err(|e| SetupError::io(format!("reading {}", file.display()), e))?;
        let info = parse_gpu_information(&text).map_err(|m| SetupError::invalid(&file, m))?;
        infos.push(info);
    }
    infos.sort_by(|a, b| a.bus.cmp(&b.bus));
    let minors = mig_minors(root)?;
    let mut out = Vec::new();
    for (index, info) in infos.into_iter().enumerate() {
        let migs = migs_of(root, info.minor, minors.as_deref())?;
        out.push(DriverGpu { index, info, migs });
    }
    Ok(out)
}

/// `mig-minors`, parsed; `None` when the file is absent (no MIG support).
fn mig_minors(root: &HostRoot) -> Result<Option<Vec<(String, u32)>>> {
    let file = root.path(MIG_MINORS);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SetupError::io(format!("reading {}", file.display()), e)),
    };
    parse_mig_minors(&text).map(Some).map_err(|message| {
        // parse_mig_minors says `line N: …`; keep the line in the standard form.
        let (line, rest) = message
            .strip_prefix("line ")
            .and_then(|m| m.split_once(": "))
            .and_then(|(n, r)| Some((n.parse().ok()?, r.to_string())))
            .unwrap_or((1, message.clone()));
        SetupError::Malformed {
            file: file.clone(),
            line,
            column: 1,
            message: rest,
        }
    })
}

/// Numbers N of the `<prefix>N` entries of a directory, sorted.
fn numbered(dir: &Path, prefix: &str) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_prefix(prefix)?.parse().ok())
        .collect();
    out.sort_unstable();
    out
}

/// The MIG devices of the GPU with `minor`: each created compute instance.
fn migs_of(
    root: &HostRoot,
    minor: u32,
    minors: Option<&[(String, u32)]>,
) -> Result<Vec<DriverMig>> {
    let mig_dir = root
        .path(CAPABILITIES_DIR)
        .join(format!("gpu{minor}"))
        .join("mig");
    let mut out = Vec::new();
    for gi in numbered(&mig_dir, "gi") {
        for ci in numbered(&mig_dir.join(format!("gi{gi}")), "ci") {
            let minors = minors.ok_or_else(|| {
                SetupError::Refused(format!(
                    "{} has MIG instances but {} is missing",
                    mig_dir.display(),
                    root.path(MIG_MINORS).display()
                ))
            })?;
            let keys = mig_capability_keys(minor, gi, ci);
            let mut nodes = Vec::new();
            for key in &keys {
                let n = minors
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, n)| *n)
                    .ok_or_else(|| {
                        SetupError::invalid(root.path(MIG_MINORS), format!("no `{key}` entry"))
                    })?;
                nodes.push(caps_node(n));
            }
            let [gi_node, ci_node]: [String; 2] = nodes.try_into().expect("two keys");
            out.push(DriverMig {
                gpu_instance: gi,
                compute_instance: ci,
                caps_nodes: [gi_node, ci_node],
            });
        }
    }
    Ok(out)
}

/// The driver version from procfs, if the driver publishes it.
pub fn version(root: &HostRoot) -> Option<String> {
    parse_driver_version(&std::fs::read_to_string(root.path(VERSION)).ok()?)
}
