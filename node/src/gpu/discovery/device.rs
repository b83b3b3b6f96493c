//! What discovery finds: a GPU, its MIG devices, and host paths under `--root`. Apart from
//! the discovery logic in `mod.rs` so that the NVML and Tegra readers it calls depend on these
//! types, not on the module that calls them.

use std::path::{Path, PathBuf};

/// `abs` (a host path such as `/etc/nv_tegra_release`) as seen under `root`.
pub fn under_root(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// NVML UUID (`GPU-…`); `tegra` for a Jetson integrated GPU (NVIDIA's ID for it).
    pub uuid: String,
    /// The UUID NVML knows the GPU by, for NVML health checks: the UUID for NVML GPUs, the
    /// NVML UUID of a Jetson iGPU on JetPack 6+ (hybrid), `None` where NVML does not see it.
    pub nvml_uuid: Option<String>,
    /// NVML index; `0` for a Jetson integrated GPU.
    pub index: u32,
    pub name: String,
    pub memory_bytes: Option<u64>,
    /// PCI bus ID as NVML prints it (`00000000:17:00.0`).
    pub pci_bus_id: Option<String>,
    pub numa_node: Option<i64>,
    /// Minor number of `/dev/nvidia<minor>`.
    pub minor: Option<u32>,
    /// MIG mode is enabled (NVML `nvmlDeviceGetMigMode` current = 1).
    pub mig_enabled: bool,
}

/// One MIG device (a GPU instance + compute instance of a MIG-enabled GPU).
#[derive(Debug, Clone, PartialEq)]
pub struct MigDevice {
    /// NVML UUID, `MIG-…`.
    pub uuid: String,
    /// Position of the parent GPU in [`Discovered::gpus`].
    pub parent: usize,
    /// NVML index of the MIG device on its parent (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: u32,
    /// GPU instance and compute instance ids (name the `/dev/nvidia-caps` nodes).
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// NVIDIA's profile name, e.g. `1g.10gb` (go-nvlib's naming).
    pub profile: String,
    pub memory_bytes: u64,
    /// What the MIG device holds (`nvmlDeviceGetAttributes`), for GPU Feature Discovery's
    /// MIG labels.
    pub attributes: MigAttributes,
}

/// `nvmlDeviceGetAttributes` of a MIG device: slices, multiprocessors and shared engines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigAttributes {
    pub gpu_instance_slices: u32,
    pub compute_instance_slices: u32,
    pub multiprocessors: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg_engines: u32,
    pub ofa_engines: u32,
}

impl Gpu {
    /// The `N` of `/dev/nvidiaN`: NVML's minor number, else the index.
    pub fn device_minor(&self) -> u32 {
        self.minor.unwrap_or(self.index)
    }
}

impl MigDevice {
    /// The profile of the GPU instance the MIG device belongs to (`1c.3g.20gb` → `3g.20gb`):
    /// dcgm-exporter's `GPU_I_PROFILE`, which names GPU instances, not compute instances.
    pub fn gpu_instance_profile(&self) -> &str {
        match self.profile.split_once("c.") {
            Some((ci, rest)) if !ci.is_empty() && ci.bytes().all(|b| b.is_ascii_digit()) => rest,
            _ => &self.profile,
        }
    }

    /// NVIDIA's MIG index form `<gpu index>:<mig index>` (`--device-id-strategy index`).
    pub fn nvidia_index(&self, parent: &Gpu) -> String {
        format!("{}:{}", parent.index, self.index)
    }
}
