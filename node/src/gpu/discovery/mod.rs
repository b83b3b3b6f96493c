//! Finding the GPUs of this host: Jetson/Tegra from files (no NVML needed) and discrete GPUs
//! through NVML; on JetPack 6+ Jetsons both (hybrid: identity from NVML where it answers,
//! device nodes and sysfs for the rest). MIG devices are enumerated through NVML when asked
//! for. Every host file is read under `--root`.

mod device;
pub mod nvml;
pub use edgegpu_host::tegra;

use std::path::Path;
use std::sync::Arc;

use edgegpu_platform::is_integrated_nvml_name;

use crate::config::DiscoveryStrategy;

pub use device::{under_root, Gpu, MigAttributes, MigDevice};
pub use tegra::TegraDetection;

/// What NVML says about a Jetson iGPU (JetPack 6+).
#[derive(Debug, Clone, PartialEq)]
pub struct NvmlIdentity {
    /// `Orin (nvgpu)`, `NVIDIA Thor`.
    pub name: String,
    pub uuid: String,
}

/// Which kind of platform the GPUs belong to.
#[derive(Debug, Clone)]
pub enum Platform {
    /// Jetson: one integrated GPU. `nvml` is set on JetPack 6+ where NVML names it
    /// (`… (nvgpu)`, `NVIDIA Thor`): hybrid discovery and health.
    Tegra {
        detection: TegraDetection,
        /// Boxed: the detection already makes this variant large.
        nvml: Option<Box<NvmlIdentity>>,
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
            Platform::Tegra { detection, nvml } => nvml
                .as_ref()
                .map(|n| n.name.as_str())
                .or(detection.generation.and_then(|g| g.cuda.device_name))
                .unwrap_or(&gpu.name),
            Platform::Nvml => &gpu.name,
        }
    }

    /// The GPU's UUID as telemetry reports it (dcgm-exporter's `UUID` label): NVML's UUID
    /// where NVML sees the GPU (hybrid Jetsons too); a Jetson without NVML is told apart by its
    /// board serial (`tegra-<serial>`), else `tegra`. The device ID stays `tegra` (NVIDIA's).
    pub fn uuid_label(&self, gpu: &Gpu) -> String {
        match self {
            Platform::Tegra { detection, .. } => match (&gpu.nvml_uuid, &detection.serial) {
                (Some(uuid), _) => uuid.clone(),
                (None, Some(serial)) => format!("{}-{serial}", gpu.uuid),
                (None, None) => gpu.uuid.clone(),
            },
            Platform::Nvml => gpu.uuid.clone(),
        }
    }
}

/// The result of discovery.
pub struct Discovered {
    pub platform: Platform,
    pub gpus: Vec<Gpu>,
    /// MIG devices of MIG-enabled GPUs (only enumerated when a MIG strategy asks for them).
    pub migs: Vec<MigDevice>,
    /// Kept loaded for health checks and MIG re-enumeration (NVML GPUs, hybrid Jetsons).
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
    /// JetPack 6+, where NVML sees it; then NVML stays loaded for health and MIG).
    fn tegra(
        detection: TegraDetection,
        nvml: Option<(Arc<::nvml_wrapper::Nvml>, Gpu)>,
    ) -> Discovered {
        let identity = nvml.as_ref().map(|(_, g)| NvmlIdentity {
            name: g.name.clone(),
            uuid: g.uuid.clone(),
        });
        let mut gpu = tegra_gpu(&detection, identity.as_ref());
        if let Some((_, g)) = &nvml {
            gpu.mig_enabled = g.mig_enabled;
            gpu.pci_bus_id.clone_from(&g.pci_bus_id);
            gpu.minor = g.minor;
        }
        Discovered {
            platform: Platform::Tegra {
                detection,
                nvml: identity.map(Box::new),
            },
            gpus: vec![gpu],
            migs: Vec::new(),
            nvml: nvml.map(|(n, _)| n),
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
fn tegra_gpu(detection: &TegraDetection, nvml: Option<&NvmlIdentity>) -> Gpu {
    Gpu {
        uuid: "tegra".into(),
        nvml_uuid: nvml.map(|n| n.uuid.clone()),
        index: 0,
        name: nvml
            .map(|n| n.name.clone())
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
        mig_enabled: false,
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

/// How many times this process ran [`discover`]: a round must probe the hardware once, and
/// the tests that say so count.
static DISCOVERIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The number of discoveries this process ran so far.
pub fn discoveries() -> usize {
    DISCOVERIES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Runs discovery with `strategy`; with `with_mig` the MIG devices of MIG-enabled GPUs are
/// enumerated too. Logs what was found and why.
pub fn discover(
    root: &Path,
    strategy: DiscoveryStrategy,
    with_mig: bool,
) -> Result<Discovered, NoGpuError> {
    let n = DISCOVERIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    tracing::info!(
        "Discovering GPUs ({}{}; discovery #{n} of this process)",
        format!("{strategy:?}").to_lowercase(),
        if with_mig { ", MIG devices too" } else { "" }
    );
    let no_gpu = |reason: String| NoGpuError {
        root: root.display().to_string(),
        reason,
    };
    let nvml_reason = match strategy {
        DiscoveryStrategy::Tegra => None,
        DiscoveryStrategy::Nvml | DiscoveryStrategy::Auto => match nvml_gpus(root) {
            Ok((nvml, gpus)) => {
                let nvml = Arc::new(nvml);
                let mut discovered = if strategy == DiscoveryStrategy::Auto
                    && gpus.iter().all(|g| is_integrated_nvml_name(&g.name))
                {
                    // JetPack 6+: NVML sees the Jetson iGPU (`Orin (nvgpu)`, `NVIDIA Thor`)
                    // but answers NotSupported for most queries: serve it as Tegra (device
                    // nodes, sysfs health) with NVML's identity, and NVML health on top.
                    let detection = probe_tegra(root);
                    tracing::info!(name = %gpus[0].name, uuid = %gpus[0].uuid, "NVML reports an integrated GPU; serving it as the Tegra GPU (identity from NVML, health from device nodes, sysfs and NVML)");
                    Discovered::tegra(detection, Some((nvml, gpus[0].clone())))
                } else {
                    Discovered {
                        platform: Platform::Nvml,
                        gpus,
                        migs: Vec::new(),
                        nvml: Some(nvml),
                    }
                };
                if with_mig {
                    let nvml = discovered.nvml.clone().expect("NVML is loaded here");
                    let uuids: Vec<Option<String>> = discovered
                        .gpus
                        .iter()
                        .map(|g| g.nvml_uuid.clone())
                        .collect();
                    discovered.migs = nvml::mig_devices(&nvml, &discovered.gpus, &uuids)
                        .map_err(|e| no_gpu(format!("MIG devices cannot be listed: {e:#}")))?;
                    for m in &discovered.migs {
                        let parent = &discovered.gpus[m.parent].uuid;
                        tracing::info!(%parent, mig_uuid = %m.uuid, index = m.index, gpu_instance = m.gpu_instance, compute_instance = m.compute_instance, profile = %m.profile, "MIG device found");
                    }
                }
                return Ok(discovered);
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
    Ok(Discovered::tegra(detection, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_instance_profiles() {
        let mig = |profile: &str| MigDevice {
            uuid: "MIG-x".into(),
            parent: 0,
            index: 0,
            gpu_instance: 1,
            compute_instance: 0,
            profile: profile.into(),
            memory_bytes: 0,
            attributes: MigAttributes::default(),
        };
        assert_eq!(mig("1g.10gb").gpu_instance_profile(), "1g.10gb");
        assert_eq!(mig("1c.3g.20gb").gpu_instance_profile(), "3g.20gb");
        assert_eq!(mig("7g.80gb").gpu_instance_profile(), "7g.80gb");
    }
}
