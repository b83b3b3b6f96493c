//! GPUs of the NVIDIA driver (discrete GPUs; Jetson Thor's OpenRM driver too) without NVML:
//! node-setup is a static musl binary and cannot `dlopen` `libnvidia-ml.so.1`, so it reads
//! what the kernel driver itself publishes (parsers in `edgegpu_platform::procfs`):
//! `/proc/driver/nvidia/gpus/<bus>/information` gives each GPU's UUID, bus id and device
//! minor; `/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/ci<C>` the MIG instances
//! that exist, and `/proc/driver/nvidia-caps/mig-minors` their `/dev/nvidia-caps` nodes (the
//! same files NVIDIA's device plugin reads, `internal/rm/nvml_devices.go`);
//! `/proc/driver/nvidia/version` the driver version, which names the user-space libraries.
//! GPU indices follow PCI bus order, NVML's enumeration order; a GPU the driver excludes
//! (`GPU Excluded: Yes`) is not enumerated by NVML and is skipped here too.

use std::path::Path;

use edgegpu_platform::cdi as device_name;
use edgegpu_platform::host::DRIVER_LIB_DIRS;
use edgegpu_platform::procfs::{
    parse_driver_version, parse_gpu_information, GpuInformation, MigMinors, CAPABILITIES_DIR,
    CONTROL_NODES, GPUS_DIR, MIG_MINORS, VERSION,
};

use super::edits::EditsBuilder;
use super::spec::{ContainerEdits, Device, DeviceNode};
use crate::error::{Result, SetupError};
use crate::root::HostRoot;

/// One GPU the driver serves, with its MIG devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverGpu {
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

/// The GPUs of the driver's procfs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcfsGpus {
    /// The usable GPUs in PCI bus order, NVML's enumeration order (position = NVML index).
    pub gpus: Vec<DriverGpu>,
    /// Bus ids of the GPUs the driver excludes (`GPU Excluded: Yes`): NVML does not
    /// enumerate them, so they take no index and get no device.
    pub excluded: Vec<String>,
}

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

/// The GPUs under `root`'s procfs; none when the driver's procfs is absent.
pub fn gpus(root: &HostRoot) -> Result<ProcfsGpus> {
    let dir = root.path(GPUS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ProcfsGpus::default()),
        Err(e) => return Err(SetupError::unreadable(dir.display().to_string(), e)),
    };
    let mut infos = Vec::new();
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let file = p.join("information");
        let text = std::fs::read_to_string(&file)
            .map_err(|e| SetupError::unreadable(file.display().to_string(), e))?;
        let info = parse_gpu_information(&text).map_err(|m| SetupError::invalid(&file, m))?;
        infos.push(info);
    }
    infos.sort_by(|a, b| a.bus.cmp(&b.bus));
    let minors = mig_minors(root)?;
    let mut out = ProcfsGpus::default();
    for info in infos {
        if info.excluded {
            out.excluded.push(info.bus);
            continue;
        }
        let migs = migs_of(root, info.minor, minors.as_ref())?;
        out.gpus.push(DriverGpu { info, migs });
    }
    Ok(out)
}

/// `mig-minors`, parsed; `None` when the file is absent (no MIG support).
fn mig_minors(root: &HostRoot) -> Result<Option<MigMinors>> {
    let file = root.path(MIG_MINORS);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SetupError::unreadable(file.display().to_string(), e)),
    };
    MigMinors::parse(&text)
        .map(Some)
        .map_err(|e| SetupError::Malformed {
            file,
            line: e.line,
            column: 1,
            message: e.message,
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
fn migs_of(root: &HostRoot, minor: u32, minors: Option<&MigMinors>) -> Result<Vec<DriverMig>> {
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
            let caps_nodes = minors
                .mig_nodes(minor, gi, ci)
                .map_err(|m| SetupError::invalid(root.path(MIG_MINORS), m))?;
            out.push(DriverMig {
                gpu_instance: gi,
                compute_instance: ci,
                caps_nodes,
            });
        }
    }
    Ok(out)
}

/// The driver version from procfs, if the driver publishes it.
pub fn version(root: &HostRoot) -> Option<String> {
    parse_driver_version(&std::fs::read_to_string(root.path(VERSION)).ok()?)
}

/// The control nodes of [`CONTROL_NODES`] that exist under `root`.
pub fn control_nodes(root: &HostRoot) -> Vec<String> {
    CONTROL_NODES
        .iter()
        .filter(|n| root.path(n).exists())
        .map(|n| n.to_string())
        .collect()
}

/// A device named `name` whose edits are the device nodes `paths`.
pub fn device(name: String, paths: &[String]) -> Device {
    Device {
        name,
        container_edits: ContainerEdits {
            device_nodes: paths
                .iter()
                .map(|p| DeviceNode { path: p.clone() })
                .collect(),
            ..Default::default()
        },
    }
}

/// The devices of one GPU named `index`: by index and by UUID with `nodes`, and each MIG
/// device `<index>:gi<G>:ci<C>` with `nodes` and its two capability nodes. A device node
/// that does not exist is an error: a spec naming it would fail every container asking for it.
pub fn gpu_devices(
    root: &HostRoot,
    index: usize,
    gpu: &DriverGpu,
    nodes: &[String],
) -> Result<Vec<Device>> {
    let own = gpu.node();
    if nodes.contains(&own) && !root.path(&own).exists() {
        return Err(SetupError::Refused(format!(
            "{} does not exist for GPU {index} ({}): create it (nvidia-modprobe -c {}) and generate again",
            root.path(&own).display(),
            gpu.info.bus,
            gpu.info.minor
        )));
    }
    let mut out = vec![device(device_name::gpu_by_index(index), nodes)];
    if let Some(uuid) = &gpu.info.uuid {
        out.push(device(device_name::gpu_by_uuid(uuid), nodes));
    }
    for mig in &gpu.migs {
        for caps in &mig.caps_nodes {
            if !root.path(caps).exists() {
                return Err(SetupError::Refused(format!(
                    "{} does not exist for MIG device gi{} ci{} of GPU {index}: create it (nvidia-modprobe -f …) and generate again",
                    root.path(caps).display(),
                    mig.gpu_instance,
                    mig.compute_instance,
                )));
            }
        }
        let mut paths = nodes.to_vec();
        paths.extend(mig.caps_nodes.iter().cloned());
        out.push(device(
            device_name::mig_device(index, mig.gpu_instance, mig.compute_instance),
            &paths,
        ));
    }
    Ok(out)
}

/// The device `all`: every node of `devices`, once, in order (MIG capability nodes
/// included, so that `all` can use every MIG device, as nvidia-ctk's merged device does).
pub fn all_device(devices: &[Device]) -> Device {
    let mut nodes: Vec<String> = Vec::new();
    for d in devices {
        for n in &d.container_edits.device_nodes {
            if !nodes.contains(&n.path) {
                nodes.push(n.path.clone());
            }
        }
    }
    device(device_name::ALL.into(), &nodes)
}

/// A host with the NVIDIA driver and no L4T lists (discrete GPUs): the GPUs' devices and
/// `all`; spec-wide the control nodes and the driver's files.
pub fn devices(
    root: &HostRoot,
    procfs: &ProcfsGpus,
    edits: &mut EditsBuilder,
    notes: &mut Vec<String>,
) -> Result<Vec<Device>> {
    for node in control_nodes(root) {
        edits.add_node(&node);
    }
    if !edits.nodes.iter().any(|n| n.path == CONTROL_NODES[0]) {
        return Err(SetupError::Refused(format!(
            "{} does not exist: the NVIDIA driver's control node is missing (is the driver loaded? nvidia-modprobe creates the nodes)",
            root.path(CONTROL_NODES[0]).display()
        )));
    }
    let mut devices = Vec::new();
    for (index, gpu) in procfs.gpus.iter().enumerate() {
        devices.extend(gpu_devices(root, index, gpu, &[gpu.node()])?);
    }
    devices.push(all_device(&devices));
    match version(root) {
        Some(version) => add_driver_files(root, edits, &version, notes),
        None => notes.push(format!(
            "{} is missing or unreadable: no driver libraries mounted",
            root.path(VERSION).display()
        )),
    }
    Ok(devices)
}

/// The driver's libraries of `version` (and their soname links), programs and firmware.
fn add_driver_files(
    root: &HostRoot,
    edits: &mut EditsBuilder,
    version: &str,
    notes: &mut Vec<String>,
) {
    let mut ignored = Vec::new();
    let mut libs = 0;
    for dir in DRIVER_LIB_DIRS {
        for lib in DRIVER_LIBS {
            let file = format!("{dir}/{lib}.so.{version}");
            if !root.path(&file).is_file() {
                continue;
            }
            edits.add_path(root, &file, &mut ignored);
            libs += 1;
            let soname = format!("{dir}/{lib}.so.1");
            if root.is_symlink(&soname) {
                edits.add_path(root, &soname, &mut ignored);
            }
        }
    }
    if libs == 0 {
        notes.push(format!(
            "no driver library of version {version} found in {}",
            DRIVER_LIB_DIRS.join(", ")
        ));
    }
    for program in DRIVER_BINARIES {
        if root.path(program).is_file() {
            edits.add_path(root, program, &mut ignored);
        }
    }
    let firmware = format!("/lib/firmware/nvidia/{version}");
    if root.path(&firmware).is_dir() {
        edits.add_path(root, &firmware, &mut ignored);
    }
}
