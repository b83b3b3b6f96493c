//! Finding the GPUs of this host: Jetson/Tegra from files (no NVML needed) and discrete GPUs
//! (or JetPack 6+ integrated GPUs) through NVML. Every host file is read under `--root`.

pub mod nvml;
pub mod tegra;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use edgegpu_platform::is_integrated_nvml_name;

use crate::config::DiscoveryStrategy;

pub use tegra::TegraDetection;

/// `abs` (a host path such as `/etc/nv_tegra_release`) as seen under `root`.
pub fn under_root(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// NVML UUID (`GPU-…`); `tegra` for a Jetson integrated GPU (NVIDIA's ID for it).
    pub uuid: String,
    /// NVML index; `0` for a Jetson integrated GPU.
    pub index: u32,
    pub name: String,
    pub memory_bytes: Option<u64>,
    /// PCI bus ID as NVML prints it (`00000000:17:00.0`).
    pub pci_bus_id: Option<String>,
    pub numa_node: Option<i64>,
    /// Minor number of `/dev/nvidia<minor>`.
    pub minor: Option<u32>,
}

/// Which kind of platform the GPUs belong to.
#[derive(Debug, Clone)]
pub enum Platform {
    /// Jetson: one integrated GPU. `nvml` is set on JetPack 6+ where NVML names it `… (nvgpu)`.
    Tegra {
        detection: TegraDetection,
        nvml_name: Option<String>,
    },
    /// Discrete GPUs through NVML.
    Nvml,
}

impl Platform {
    /// The GPU's name as NVML or CUDA gives it (dcgm-exporter's `modelName`, GFD's
    /// `gpu.product`): NVML's where NVML sees the GPU, else on a Jetson the CUDA device name
    /// of its generation (`Orin`), else the name discovery gave it.
    pub fn model_name<'a>(&'a self, gpu: &'a Gpu) -> &'a str {
        match self {
            Platform::Tegra {
                detection,
                nvml_name,
            } => nvml_name
                .as_deref()
                .or(detection.generation.and_then(|g| g.cuda.device_name))
                .unwrap_or(&gpu.name),
            Platform::Nvml => &gpu.name,
        }
    }
}

/// The result of discovery.
pub struct Discovered {
    pub platform: Platform,
    pub gpus: Vec<Gpu>,
    /// Kept loaded for health checks ([`Platform::Nvml`]), and on a Jetson whose GPU has no
    /// sysfs `load` file (Thor, OpenRM) for its utilisation in the metrics.
    pub nvml: Option<Arc<::nvml_wrapper::Nvml>>,
}

impl std::fmt::Debug for Discovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovered")
            .field("platform", &self.platform)
            .field("gpus", &self.gpus)
            .field("nvml", &self.nvml.is_some())
            .finish()
    }
}

impl Discovered {
    /// The Jetson's one integrated GPU, found by `detection` (and named by NVML on
    /// JetPack 6+, where NVML sees it). NVML stays loaded only where sysfs cannot tell the
    /// GPU's load (the generation has no `load` file): everything else comes from sysfs.
    fn tegra(
        detection: TegraDetection,
        nvml_name: Option<String>,
        nvml: Option<::nvml_wrapper::Nvml>,
    ) -> Discovered {
        let gpu = tegra_gpu(&detection, nvml_name.as_deref());
        let sysfs_has_load = detection.generation.map_or(true, |g| g.sysfs.load_file);
        Discovered {
            platform: Platform::Tegra {
                detection,
                nvml_name,
            },
            gpus: vec![gpu],
            nvml: nvml.filter(|_| !sysfs_has_load).map(Arc::new),
        }
    }

    pub fn platform_name(&self) -> &'static str {
        match self.platform {
            Platform::Tegra { .. } => "tegra",
            Platform::Nvml => "nvml",
        }
    }
}

/// NVML found no usable GPU (or could not be loaded), and Tegra did not match either.
#[derive(Debug, thiserror::Error)]
#[error("no NVIDIA GPU found under {root}: {reason}")]
pub struct NoGpuError {
    pub root: String,
    pub reason: String,
}

/// The Jetson GPU as one device: NVIDIA's ID `tegra` (index 0).
fn tegra_gpu(detection: &TegraDetection, nvml_name: Option<&str>) -> Gpu {
    Gpu {
        uuid: "tegra".into(),
        index: 0,
        name: nvml_name
            .map(str::to_string)
            .or_else(|| {
                detection
                    .generation
                    .map(|g| format!("NVIDIA Tegra {}", g.soc))
            })
            .unwrap_or_else(|| "NVIDIA Tegra".into()),
        memory_bytes: None,
        pci_bus_id: None,
        numa_node: None,
        minor: None,
    }
}

/// Probes the Tegra signals under `root` and logs what matched (or what was looked for).
fn probe_tegra(root: &Path) -> TegraDetection {
    let detection = TegraDetection::probe(root);
    detection.log(root);
    detection
}

/// NVML's GPUs, or why there are none usable.
fn nvml_gpus(root: &Path) -> Result<(::nvml_wrapper::Nvml, Vec<Gpu>), String> {
    match nvml::load_and_enumerate(root) {
        Ok((nvml, gpus)) if !gpus.is_empty() => Ok((nvml, gpus)),
        Ok(_) => Err("NVML loaded but reports no GPUs".into()),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// Runs discovery with `strategy`. Logs what was found and why.
pub fn discover(root: &Path, strategy: DiscoveryStrategy) -> Result<Discovered, NoGpuError> {
    let no_gpu = |reason: String| NoGpuError {
        root: root.display().to_string(),
        reason,
    };
    let nvml_reason = match strategy {
        DiscoveryStrategy::Tegra => None,
        DiscoveryStrategy::Nvml | DiscoveryStrategy::Auto => match nvml_gpus(root) {
            Ok((nvml, gpus)) => {
                if strategy == DiscoveryStrategy::Auto
                    && gpus.iter().all(|g| is_integrated_nvml_name(&g.name))
                {
                    // JetPack 6+: NVML exists but sees the Jetson iGPU (`Orin (nvgpu)`,
                    // `NVIDIA Thor`); serve it as Tegra (device nodes, sysfs health).
                    let detection = probe_tegra(root);
                    tracing::info!(name = %gpus[0].name, "NVML reports an integrated GPU; treating it as the Tegra GPU");
                    return Ok(Discovered::tegra(
                        detection,
                        Some(gpus[0].name.clone()),
                        Some(nvml),
                    ));
                }
                return Ok(Discovered {
                    platform: Platform::Nvml,
                    gpus,
                    nvml: Some(Arc::new(nvml)),
                });
            }
            Err(reason) if strategy == DiscoveryStrategy::Nvml => return Err(no_gpu(reason)),
            Err(reason) => {
                tracing::info!("NVML not usable ({reason}); trying Tegra detection");
                Some(reason)
            }
        },
    };
    let detection = probe_tegra(root);
    if !detection.is_tegra() {
        let looked_for = detection.looked_for.join("; ");
        return Err(no_gpu(match nvml_reason {
            None => format!("--discovery tegra, but no Tegra signal matched ({looked_for})"),
            Some(nvml) => format!("NVML: {nvml}. Tegra: no signal matched ({looked_for})"),
        }));
    }
    Ok(Discovered::tegra(detection, None, None))
}
