//! The node's GPUs as the resources this plugin serves: discovery and health (`gpu`) wired
//! to what pods receive (`allocate`). One resource normally (`nvidia.com/gpu`); with
//! `--mig-strategy mixed` one per MIG profile as well. The kubelet side only sees the result
//! as [`Resource`]s.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::allocate::{mig, sharing, GpuResource, Unit};
use crate::config::{Config, GpuArgs, MigStrategy};
use crate::gpu::discovery::{self, Discovered};
use crate::gpu::health::{self, Advertised, HealthTable, Target};
use crate::gpu::Platform;
use crate::resource::Resource;

/// The resources of this node, and the signal that they must be rebuilt.
pub struct NodeResources {
    pub resources: Vec<Arc<GpuResource>>,
    /// Becomes `true` when the MIG geometry changed (MIG strategies only): the resources no
    /// longer describe the node and must be built again.
    pub reconfigured: watch::Receiver<bool>,
}

/// Detects the GPUs under `root` and returns the one resource to serve (`--mig-strategy
/// mixed` may need several: use [`build_gpu_resources`]).
pub async fn build_resource(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<Arc<dyn Resource>> {
    let resource: Arc<dyn Resource> = build_gpu_resource(root, resource_name, args).await?;
    Ok(resource)
}

/// [`build_resource`] with the concrete type (for callers that want to show what was found).
pub async fn build_gpu_resource(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<Arc<GpuResource>> {
    let mut node = build_gpu_resources(root, resource_name, args).await?;
    anyhow::ensure!(
        node.resources.len() == 1,
        "this node serves {} resources ({}); build them with build_gpu_resources",
        node.resources.len(),
        node.resources
            .iter()
            .map(|r| r.name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(node.resources.remove(0))
}

/// Detects the GPUs under `root` and returns every resource to serve.
pub async fn build_gpu_resources(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<NodeResources> {
    let config = args.resolve()?;
    tracing::info!(
        "Running with config: {}",
        serde_json::to_string(&config).unwrap_or_default()
    );
    tracing::info!(
        "Using device discovery strategy: {}",
        serde_json::to_string(&config.discovery)
            .unwrap_or_default()
            .trim_matches('"')
    );

    let root_owned = root.to_path_buf();
    let strategy = config.discovery;
    let with_mig = config.mig_strategy != MigStrategy::None;
    // NVML calls block; keep them off the async workers.
    let discovered =
        tokio::task::spawn_blocking(move || discovery::discover(&root_owned, strategy, with_mig))
            .await?;
    let discovered =
        match discovered {
            Ok(d) => Some(d),
            Err(e) if !config.fail_on_init_error => {
                tracing::warn!("{e}; --fail-on-init-error=false: running with zero devices");
                None
            }
            Err(e) => return Err(anyhow::Error::new(e).context(
                "GPU discovery failed (use --fail-on-init-error=false to run with zero devices)",
            )),
        };
    let Discovered {
        platform,
        gpus,
        migs,
        nvml,
    } = match discovered {
        Some(d) => {
            tracing::info!("Detected platform: {}", d.platform_name());
            d
        }
        None => {
            tracing::info!("Detected platform: none");
            Discovered {
                platform: Platform::Nvml,
                gpus: Vec::new(),
                migs: Vec::new(),
                nvml: None,
            }
        }
    };
    let platform = (!gpus.is_empty()).then_some(platform);
    let split = mig::resources(resource_name, config.mig_strategy, &gpus, &migs)
        .map_err(anyhow::Error::msg)?;

    let mut resources = Vec::new();
    for (name, units) in split {
        resources.push(resource(
            root,
            &config,
            &name,
            platform.clone(),
            &gpus,
            units,
            nvml.clone(),
        ));
    }
    let (changed, reconfigured) = watch::channel(false);
    if !config.health_checks {
        tracing::info!("health checks disabled (--health-checks=false or DP_DISABLE_HEALTHCHECKS)");
    }
    start_monitors(
        root,
        &config,
        platform.as_ref(),
        &gpus,
        nvml,
        &resources,
        changed,
    )?;
    for r in &resources {
        tracing::info!(resource = %r.name(), devices = r.table.advertised().len(), "GPU resource ready");
    }
    Ok(NodeResources {
        resources,
        reconfigured,
    })
}

/// One resource: IDs, replicas and the health table of `units` (and NVML, which its metrics
/// read).
fn resource(
    root: &Path,
    config: &Config,
    resource_name: &str,
    platform: Option<Platform>,
    gpus: &[crate::gpu::Gpu],
    units: Vec<Unit>,
    nvml: Option<Arc<nvml_wrapper::Nvml>>,
) -> Arc<GpuResource> {
    let base_ids: Vec<String> = units
        .iter()
        .map(|u| u.id(gpus, config.device_id_strategy))
        .collect();
    let (name, replication) = sharing::apply(resource_name, config.sharing.as_ref());
    let mut advertised = Vec::new();
    for (p, unit) in units.iter().enumerate() {
        let numa_node = gpus[unit.gpu].numa_node;
        match replication {
            Some(r) => advertised.extend((0..r.replicas).map(|n| Advertised {
                id: sharing::replica_id(&base_ids[p], n),
                physical: p,
                numa_node,
            })),
            None => advertised.push(Advertised {
                id: base_ids[p].clone(),
                physical: p,
                numa_node,
            }),
        }
    }
    let table = Arc::new(HealthTable::new(&name, base_ids.clone(), advertised));
    Arc::new(GpuResource {
        name,
        config: config.clone(),
        root: root.to_path_buf(),
        platform,
        gpus: gpus.to_vec(),
        units,
        base_ids,
        replication,
        table,
        allocations: Default::default(),
        nvml,
    })
}

/// Starts the health monitors of every unit of every resource, and the MIG geometry watch.
fn start_monitors(
    root: &Path,
    config: &Config,
    platform: Option<&Platform>,
    gpus: &[crate::gpu::Gpu],
    nvml: Option<Arc<nvml_wrapper::Nvml>>,
    resources: &[Arc<GpuResource>],
    changed: watch::Sender<bool>,
) -> anyhow::Result<()> {
    let slots = || {
        resources.iter().flat_map(|r| {
            r.units
                .iter()
                .enumerate()
                .map(move |(slot, unit)| (Target::new(&r.table, slot), unit))
        })
    };
    if config.health_checks {
        if let Some(Platform::Tegra { detection, .. }) = platform {
            let l4t = detection
                .l4t
                .as_deref()
                .and_then(edgegpu_platform::host::l4t_major);
            let spec = health::tegra::TegraHealthSpec::for_host(root, detection.generation, l4t);
            let targets: Vec<Target> = slots().map(|(t, _)| t).collect();
            health::tegra::spawn(root.to_path_buf(), spec, targets)?;
        }
    }
    let Some(nvml) = nvml else { return Ok(()) };
    let watched: Vec<health::nvml::Watched> = if config.health_checks {
        slots()
            .filter_map(|(target, unit)| {
                Some(health::nvml::Watched {
                    gpu_uuid: gpus[unit.gpu].nvml_uuid.clone()?,
                    mig: unit
                        .mig
                        .as_ref()
                        .map(|m| (m.uuid.clone(), m.gpu_instance, m.compute_instance)),
                    target,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let mig_watch = (config.mig_strategy != MigStrategy::None).then(|| {
        let uuids: Vec<Option<String>> = gpus.iter().map(|g| g.nvml_uuid.clone()).collect();
        health::nvml::MigWatch {
            layout: health::nvml::mig_layout(&nvml, &uuids),
            gpus: uuids,
            changed,
        }
    });
    if watched.is_empty() && mig_watch.is_none() {
        return Ok(());
    }
    let lifetime = resources.iter().map(|r| Arc::downgrade(&r.table)).collect();
    health::nvml::spawn(
        nvml,
        watched,
        lifetime,
        config.extra_ignored_xids.clone(),
        Duration::from_secs(config.health_recovery_seconds),
        mig_watch,
    )
}
