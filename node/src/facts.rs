//! The node's facts as typed values, read once from what discovery found: what the labels
//! write (escaped as label values), the DRA driver publishes as attributes (as they are) and
//! the labeller puts on the Node. Nothing here is ever parsed back from a label string.

use std::path::Path;

use edgegpu_platform::host::{jetpack, meminfo_bytes, MEMINFO};

use crate::engines::{self, Engine};
use crate::gpu::discovery::{Gpu, Platform};
use crate::gpu::sysfs::GpuSysfs;
use crate::gpu::under_root;
use crate::power::PowerFacts;

/// What a node is, beyond its list of GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The memory the GPU can use: a Jetson's `MemTotal` (it shares the system's memory, what
    /// `cuDeviceTotalMem` reports there), else the first GPU's framebuffer.
    pub gpu_memory_bytes: Option<u64>,
    /// The first GPU's CUDA compute capability (major, minor).
    pub compute_capability: Option<(u32, u32)>,
    /// The CUDA version the driver supports (major, minor).
    pub cuda_driver: Option<(u32, u32)>,
    /// A Jetson's board, module and software release.
    pub jetson: Option<JetsonFacts>,
    /// A Jetson's DLA cores and PVA instances whose device nodes exist.
    pub engines: Vec<Engine>,
}

/// A Jetson's identity and software release.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JetsonFacts {
    /// The device tree's model, as written (`NVIDIA Jetson AGX Orin Developer Kit`).
    pub model: Option<String>,
    /// The module's part number (`p3701-0005`).
    pub module: Option<String>,
    /// The module's product name from the platform table (`Jetson AGX Orin 64GB`).
    pub product: Option<&'static str>,
    /// The SoC (`t234`).
    pub soc: Option<&'static str>,
    /// The L4T release (`36.4.3`).
    pub l4t: Option<String>,
    /// The JetPack major release of that L4T release.
    pub jetpack_major: Option<u32>,
    /// The power mode in force, the GPU's clock ceiling under it, the thermal zones.
    pub power: PowerFacts,
}

impl NodeFacts {
    /// The facts of the node whose GPUs discovery found on `platform` under `root` (NVML, where
    /// discovery kept it, answers a discrete GPU's capability and CUDA version). Reads
    /// `/proc/meminfo` and the engines' device nodes on a Jetson: blocking.
    pub fn read(
        root: &Path,
        platform: &Platform,
        gpus: &[Gpu],
        nvml: Option<&nvml_wrapper::Nvml>,
    ) -> NodeFacts {
        let Some(first) = gpus.first() else {
            return NodeFacts::default();
        };
        match platform {
            Platform::Tegra { detection, .. } => {
                let generation = detection.generation;
                let release = detection.l4t.as_deref().and_then(jetpack);
                let cuda = release.map(|r| r.cuda);
                let compute_capability = match (generation, cuda) {
                    (Some(g), Some(cuda)) => g.compute_capability(cuda),
                    // Without the release, the capability before any renumbering.
                    (Some(g), None) => g.cuda.capability.first().map(|c| (c.major, c.minor)),
                    _ => None,
                };
                let l4t_major = detection
                    .l4t
                    .as_deref()
                    .and_then(|v| v.split('.').next()?.parse().ok());
                NodeFacts {
                    gpu_memory_bytes: std::fs::read_to_string(under_root(root, MEMINFO))
                        .ok()
                        .and_then(|m| meminfo_bytes(&m, "MemTotal")),
                    compute_capability,
                    cuda_driver: cuda,
                    jetson: Some(JetsonFacts {
                        model: detection.model.clone(),
                        module: detection.module.clone(),
                        product: detection.module_name,
                        soc: generation.map(|g| g.soc),
                        l4t: detection.l4t.clone(),
                        jetpack_major: release.map(|r| r.major),
                        power: {
                            let sysfs = GpuSysfs::find(root, generation, l4t_major);
                            PowerFacts {
                                gpu_load: sysfs.load.clone(),
                                ..PowerFacts::read(root, sysfs.devfreq.as_deref())
                            }
                        },
                    }),
                    engines: engines::discover(root, generation, l4t_major),
                }
            }
            Platform::Nvml => {
                let device = nvml.and_then(|n| n.device_by_uuid(first.uuid.as_str()).ok());
                let compute_capability = device
                    .and_then(|d| d.cuda_compute_capability().ok())
                    .and_then(|c| {
                        Some((u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?))
                    });
                // NVML encodes CUDA 12.4 as 12040.
                let cuda_driver = nvml
                    .and_then(|n| n.sys_cuda_driver_version().ok())
                    .and_then(|v| u32::try_from(v).ok())
                    .map(|v| (v / 1000, v % 1000 / 10));
                NodeFacts {
                    gpu_memory_bytes: first.memory_bytes,
                    compute_capability,
                    cuda_driver,
                    jetson: None,
                    engines: Vec::new(),
                }
            }
        }
    }

    /// GFD's architecture family of the compute capability ([`family`]).
    pub fn family(&self) -> Option<&'static str> {
        let (major, minor) = self.compute_capability?;
        family(major, minor)
    }
}

/// GFD's architecture family of a compute capability (gpu-feature-discovery
/// `internal/lm/resource.go`); Thor's 10.1 / 11.0 is Blackwell.
pub fn family(major: u32, minor: u32) -> Option<&'static str> {
    Some(match (major, minor) {
        (1, _) => "tesla",
        (2, _) => "fermi",
        (3, _) => "kepler",
        (5, _) => "maxwell",
        (6, _) => "pascal",
        (7, 0..=4) => "volta",
        (7, _) => "turing",
        (8, 0..=8) => "ampere",
        (8, _) => "ada-lovelace",
        (9, _) => "hopper",
        (10..=12, _) => "blackwell",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(family(5, 3), Some("maxwell"));
        assert_eq!(family(6, 2), Some("pascal"));
        assert_eq!(family(7, 2), Some("volta"));
        assert_eq!(family(7, 5), Some("turing"));
        assert_eq!(family(8, 7), Some("ampere"));
        assert_eq!(family(8, 9), Some("ada-lovelace"));
        assert_eq!(family(9, 0), Some("hopper"));
        assert_eq!(family(11, 0), Some("blackwell"));
        assert_eq!(family(4, 0), None);
    }
}
