//! What the config makes of one served resource: the name it is advertised under, its
//! replicas (time-slicing, MPS) or memory units, the limits its containers get, and the MPS
//! control daemon it needs. A config this node cannot honour is refused with the reason.

use std::path::Path;

use edgegpu_platform::host::{meminfo_bytes, MEMINFO};

use super::unit::Unit;
use crate::config::{Config, MemoryEnforcement};
use crate::gpu::{under_root, Gpu, Platform};
use crate::mps::plan::{whole_mib, DaemonSettings, DeviceLimit};
use crate::mps::{support, MpsPaths};
use crate::serving::limits::{LimitKind, Limits};
use crate::serving::sharing::{self, Replication};

/// Per GPU, facts read from the host for sharing: memory and compute capability.
#[derive(Debug, Clone, Default)]
pub struct GpuFacts {
    /// Bytes of memory the GPU has (a Jetson's: the system's, `MemTotal`).
    pub memory: Vec<Option<u64>>,
    /// Compute capability where NVML tells it.
    pub capability: Vec<Option<(u32, u32)>>,
}

impl GpuFacts {
    /// Whether `config` shares GPUs with limits, the only sharing that needs these facts.
    pub fn needed(config: &Config) -> bool {
        config.mps.is_some() || config.gpu_memory.is_some()
    }

    /// Reads what the config's sharing needs (nothing when it shares without limits): each
    /// GPU's memory (a Jetson's GPU uses the system's memory, which CUDA reports as its
    /// total: `MemTotal`) and, through NVML, compute capability. Blocking.
    pub fn read(
        root: &Path,
        config: &Config,
        platform: Option<&Platform>,
        gpus: &[Gpu],
        nvml: Option<&nvml_wrapper::Nvml>,
    ) -> GpuFacts {
        if !GpuFacts::needed(config) {
            return GpuFacts::default();
        }
        let system = matches!(platform, Some(Platform::Tegra { .. }))
            .then(|| {
                std::fs::read_to_string(under_root(root, MEMINFO))
                    .ok()
                    .and_then(|m| meminfo_bytes(&m, "MemTotal"))
            })
            .flatten();
        GpuFacts {
            memory: gpus.iter().map(|g| g.memory_bytes.or(system)).collect(),
            capability: GpuFacts::capabilities(gpus, nvml),
        }
    }

    /// Each GPU's compute capability where NVML tells it (what [`support::check`] refuses
    /// discrete GPUs before Volta by). Blocking (NVML).
    pub fn capabilities(
        gpus: &[Gpu],
        nvml: Option<&nvml_wrapper::Nvml>,
    ) -> Vec<Option<(u32, u32)>> {
        gpus.iter()
            .map(|g| {
                let cc = nvml?
                    .device_by_uuid(g.nvml_uuid.as_deref()?)
                    .ok()?
                    .cuda_compute_capability()
                    .ok()?;
                Some((u32::try_from(cc.major).ok()?, u32::try_from(cc.minor).ok()?))
            })
            .collect()
    }
}

/// The plan of one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourcePlan {
    /// The advertised name (`nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/gpu-mem`).
    pub name: String,
    /// Replicas of every unit (time-slicing or MPS).
    pub replication: Option<Replication>,
    /// Memory units per unit (`sharing.gpuMemory`).
    pub memory_units: Option<Vec<u32>>,
    pub limits: Option<Limits>,
    /// The MPS control daemon this resource needs.
    pub daemon: Option<DaemonSettings>,
}

impl ResourcePlan {
    /// GPU Feature Discovery's `nvidia.com/gpu.sharing-strategy` of the resource: how
    /// processes share a GPU (memory units without MPS are time-sliced by the GPU).
    pub fn sharing_strategy(&self) -> &'static str {
        sharing_strategy(self.limits.as_ref(), self.replication)
    }

    /// Devices per GPU as GFD's `nvidia.com/gpu.replicas` counts them (the first unit's).
    pub fn replicas(&self) -> Option<u32> {
        self.devices_of(0)
    }

    /// How many devices unit `p` is advertised as.
    pub fn devices_of(&self, p: usize) -> Option<u32> {
        match (&self.memory_units, self.replication) {
            (Some(units), _) => units.get(p).copied(),
            (None, Some(r)) => Some(r.replicas),
            (None, None) => None,
        }
    }
}

/// GFD's sharing strategy of a resource with these limits and replicas.
pub fn sharing_strategy(limits: Option<&Limits>, replication: Option<Replication>) -> &'static str {
    match (limits, replication) {
        (Some(l), _) if l.mps.is_some() => "mps",
        (Some(_), _) | (None, Some(_)) => "time-slicing",
        (None, None) => "none",
    }
}

/// Plans `resource_name` (served as `units` of `gpus`) under `config`.
pub fn plan(
    resource_name: &str,
    config: &Config,
    platform: Option<&Platform>,
    gpus: &[Gpu],
    units: &[Unit],
    facts: &GpuFacts,
) -> Result<ResourcePlan, String> {
    let mig = units.iter().any(|u| u.mig.is_some());
    let support = || match platform {
        Some(p) => support::check(p, gpus, mig, |i| facts.capability.get(i).copied().flatten()),
        // No GPU found: nothing to share, nothing to refuse.
        None => Ok(()),
    };
    let memory_of = |unit: &Unit| facts.memory.get(unit.gpu).copied().flatten();
    let uuid_of = |unit: &Unit| {
        let uuid = &gpus[unit.gpu].uuid;
        uuid.starts_with("GPU-").then(|| uuid.clone())
    };

    if let Some(mps) = &config.mps {
        if let Some(r) = mps.resources.iter().find(|r| r.name == resource_name) {
            support().map_err(|why| format!("sharing.mps for {resource_name} refused: {why}"))?;
            let name = if mps.rename_by_default {
                format!("{resource_name}.shared")
            } else {
                resource_name.to_string()
            };
            // NVIDIA's even split: 100 / replicas, memory / replicas (mps/daemon.go).
            let pct = r.active_thread_percentage.unwrap_or(100 / r.replicas);
            let mib: Vec<Option<u64>> = units
                .iter()
                .map(|u| match r.pinned_device_memory_limit {
                    Some(bytes) => Some(whole_mib(bytes)),
                    None => memory_of(u).map(|m| whole_mib(m / u64::from(r.replicas))),
                })
                .collect();
            for (u, m) in units.iter().zip(&mib) {
                if m.is_none() {
                    tracing::warn!(
                        "GPU {}: its memory is unknown, so MPS replicas get no memory limit (set pinnedDeviceMemoryLimit)",
                        gpus[u.gpu].uuid
                    );
                }
            }
            let daemon = DaemonSettings {
                resource: name.clone(),
                exclusive_gpus: exclusive_gpus(platform, gpus, units),
                active_thread_percentage: Some(pct),
                pinned_memory_limits: units
                    .iter()
                    .zip(&mib)
                    .filter_map(|(u, m)| {
                        m.map(|mib| DeviceLimit {
                            ordinal: gpus[u.gpu].index,
                            uuid: uuid_of(u),
                            mib,
                        })
                    })
                    .collect(),
            };
            tracing::info!(resource = %name, replicas = r.replicas, active_thread_percentage = pct, "MPS sharing enabled");
            return Ok(ResourcePlan {
                name: name.clone(),
                replication: Some(Replication {
                    replicas: r.replicas,
                    fail_requests_greater_than_one: mps.fail_requests_greater_than_one,
                }),
                memory_units: None,
                limits: Some(Limits {
                    kind: LimitKind::Replicas {
                        mib,
                        active_thread_percentage: pct,
                    },
                    mps: Some(MpsPaths::new(&config.mps_root, &name)),
                    not_enforced: None,
                }),
                daemon: Some(daemon),
            });
        }
        let names: Vec<&str> = mps.resources.iter().map(|r| r.name.as_str()).collect();
        tracing::warn!(
            "sharing.mps names {names:?} but this plugin serves {resource_name}; not shared"
        );
        return Ok(unshared(resource_name));
    }

    if let Some(mem) = &config.gpu_memory {
        let Some(r) = mem.resources.iter().find(|r| r.name == resource_name) else {
            let names: Vec<&str> = mem.resources.iter().map(|r| r.name.as_str()).collect();
            tracing::warn!("sharing.gpuMemory names {names:?} but this plugin serves {resource_name}; not shared");
            return Ok(unshared(resource_name));
        };
        if mig {
            return Err(format!(
                "sharing.gpuMemory for {resource_name} refused: MIG devices already have memory of their own; share them with time-slicing"
            ));
        }
        let unit_mib = whole_mib(mem.unit);
        let mut memory_units = Vec::new();
        for u in units {
            let Some(memory) = r.memory.or_else(|| memory_of(u)) else {
                return Err(format!(
                    "sharing.gpuMemory for {resource_name}: the memory of GPU {} is unknown; set sharing.gpuMemory.resources[].memory",
                    gpus[u.gpu].uuid
                ));
            };
            let n = u32::try_from(memory / mem.unit).unwrap_or(u32::MAX);
            if n == 0 {
                return Err(format!(
                    "sharing.gpuMemory for {resource_name}: GPU {} has less memory ({} MiB) than one unit ({unit_mib} MiB)",
                    gpus[u.gpu].uuid,
                    whole_mib(memory)
                ));
            }
            memory_units.push(n);
        }
        let enforced: Result<(), String> = match mem.enforcement {
            MemoryEnforcement::None => {
                Err("sharing.gpuMemory.enforcement is none: accounting only".to_string())
            }
            MemoryEnforcement::Mps => {
                support().map_err(|why| {
                    format!(
                        "sharing.gpuMemory for {resource_name} refused (enforcement: mps): {why}"
                    )
                })?;
                Ok(())
            }
            MemoryEnforcement::Auto => support().map_err(|why| {
                format!("MPS cannot run here ({why}); the limit is accounting only")
            }),
        };
        let name = r.rename.clone();
        let (mps, not_enforced, daemon) = match enforced {
            Ok(()) => (
                Some(MpsPaths::new(&config.mps_root, &name)),
                None,
                // The daemon's cap is the memory offered in units: a pod that sets its own
                // limit variable cannot go beyond it.
                Some(DaemonSettings {
                    resource: name.clone(),
                    exclusive_gpus: exclusive_gpus(platform, gpus, units),
                    active_thread_percentage: None,
                    pinned_memory_limits: units
                        .iter()
                        .zip(&memory_units)
                        .map(|(u, n)| DeviceLimit {
                            ordinal: gpus[u.gpu].index,
                            uuid: uuid_of(u),
                            mib: unit_mib * u64::from(*n),
                        })
                        .collect(),
                }),
            ),
            Err(why) => {
                tracing::warn!(resource = %name, "GPU memory limits not enforced: {why}");
                (None, Some(why), None)
            }
        };
        tracing::info!(resource = %name, unit_mib, units = ?memory_units, enforced = mps.is_some(), "GPU memory sharing enabled");
        return Ok(ResourcePlan {
            name,
            replication: None,
            memory_units: Some(memory_units),
            limits: Some(Limits {
                kind: LimitKind::Memory { unit_mib },
                mps,
                not_enforced,
            }),
            daemon,
        });
    }

    let (name, replication) = sharing::apply(resource_name, config.sharing.as_ref());
    Ok(ResourcePlan {
        name,
        replication,
        memory_units: None,
        limits: None,
        daemon: None,
    })
}

/// The discrete GPUs of `units` (UUIDs), which the companion makes `EXCLUSIVE_PROCESS` while
/// MPS serves them; none on a Jetson (Tegra cannot change compute modes).
fn exclusive_gpus(platform: Option<&Platform>, gpus: &[Gpu], units: &[Unit]) -> Vec<String> {
    if !matches!(platform, Some(Platform::Nvml)) {
        return Vec::new();
    }
    let mut out: Vec<String> = units.iter().map(|u| gpus[u.gpu].uuid.clone()).collect();
    out.dedup();
    out
}

fn unshared(resource_name: &str) -> ResourcePlan {
    ResourcePlan {
        name: resource_name.to_string(),
        replication: None,
        memory_units: None,
        limits: None,
        daemon: None,
    }
}
