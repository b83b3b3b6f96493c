//! The node's GPUs as the resources this plugin serves: discovery and health (`gpu`) wired
//! to what pods receive (`allocate`). One resource normally (`nvidia.com/gpu`); with
//! `--mig-strategy mixed` one per MIG profile as well. The kubelet side only sees the result
//! as [`Resource`]s.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::allocate::device_specs::{Candidates, DeviceNodes, GpuNodes};
use crate::allocate::{mig, sharing, GpuResource, Unit};
use crate::config::{Config, GpuArgs, Imex, MigStrategy};
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
    // Reading the config file and the host's device files blocks: not on the runtime thread.
    let config = {
        let (args, root) = (args.clone(), root.to_path_buf());
        tokio::task::spawn_blocking(move || -> anyhow::Result<Config> {
            let config = args.resolve()?;
            check_imex(&root, &config.imex)?;
            Ok(config)
        })
        .await??
    };
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

    let device_nodes = match (&platform, config.pass_device_specs) {
        (Some(platform), true) => {
            let candidates = device_node_candidates(platform, &gpus, &split);
            Some(Arc::new(
                DeviceNodes::watch(root.to_path_buf(), candidates).await?,
            ))
        }
        _ => None,
    };

    let mut resources = Vec::new();
    for (name, units) in split {
        resources.push(resource(
            root,
            &config,
            &name,
            platform.clone(),
            &gpus,
            units,
            device_nodes.clone(),
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
    )
    .await?;
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
#[allow(clippy::too_many_arguments)]
fn resource(
    root: &Path,
    config: &Config,
    resource_name: &str,
    platform: Option<Platform>,
    gpus: &[crate::gpu::Gpu],
    units: Vec<Unit>,
    device_nodes: Option<Arc<DeviceNodes>>,
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
        device_nodes,
        allocations: Default::default(),
        nvml,
    })
}

/// The `/dev` nodes the node's resources may hand out (`--pass-device-specs`): the GPUs'
/// and, for MIG devices, their `/dev/nvidia-caps` nodes.
fn device_node_candidates(
    platform: &Platform,
    gpus: &[crate::gpu::Gpu],
    resources: &mig::ResourceUnits,
) -> Candidates {
    let gpu_nodes = match platform {
        Platform::Tegra { detection, .. } => GpuNodes::Tegra(detection.generation),
        Platform::Nvml => GpuNodes::Discrete(gpus.iter().map(|g| g.device_minor()).collect()),
    };
    let mig = resources
        .iter()
        .flat_map(|(_, units)| units)
        .filter_map(|u| u.mig_instance(gpus))
        .collect();
    Candidates {
        gpus: gpu_nodes,
        mig,
    }
}

/// Starts the health monitors of every unit of every resource, and the MIG geometry watch.
/// Host files and NVML are read on the blocking pool.
async fn start_monitors(
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
            let (root, generation) = (root.to_path_buf(), detection.generation);
            let spec = tokio::task::spawn_blocking({
                let root = root.clone();
                move || health::tegra::TegraHealthSpec::for_host(&root, generation, l4t)
            })
            .await?;
            let targets: Vec<Target> = slots().map(|(t, _)| t).collect();
            let monitor = Arc::new(health::tegra::spawn(root, spec, targets).await?);
            for r in resources {
                r.table.keep_monitor(Arc::clone(&monitor));
            }
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
    let mig_watch = if config.mig_strategy != MigStrategy::None {
        let uuids: Vec<Option<String>> = gpus.iter().map(|g| g.nvml_uuid.clone()).collect();
        // NVML calls block.
        let (nvml, gpus) = (Arc::clone(&nvml), uuids.clone());
        let layout =
            tokio::task::spawn_blocking(move || health::nvml::mig_layout(&nvml, &gpus)).await?;
        Some(health::nvml::MigWatch {
            layout,
            gpus: uuids,
            changed,
        })
    } else {
        None
    };
    if watched.is_empty() && mig_watch.is_none() {
        // Dropping the last handle calls nvmlShutdown, which blocks (the resources keep
        // theirs, for metrics, until they are dropped: see GpuResource's Drop).
        tokio::task::spawn_blocking(move || drop(nvml));
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

/// Where an IMEX channel's device node lives (NVIDIA's `internal/imex`).
const IMEX_CHANNEL_DIR: &str = "/dev/nvidia-caps-imex-channels";

/// `imex.channelIDs` with NVIDIA's rules for a channel that is not there: skipped with a
/// warning, or an error when `imex.required`. A channel that *is* there would have to be
/// handed to every GPU container, which edgegpu does not do (docs/platforms/README.md): the
/// plugin then refuses to start rather than run without it.
fn check_imex(root: &Path, imex: &Imex) -> anyhow::Result<()> {
    for id in &imex.channel_ids {
        let host_path = format!("{IMEX_CHANNEL_DIR}/channel{id}");
        let path = crate::gpu::under_root(root, &host_path);
        let is_channel = std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_char_device());
        match (is_channel, imex.required) {
            (true, _) => anyhow::bail!(
                "config file: imex.channelIDs [{id}]: IMEX channel {host_path} exists on this \
                 node, and edgegpu does not inject IMEX channels into containers; remove the \
                 `imex` section (see docs/platforms/README.md)"
            ),
            (false, true) => anyhow::bail!(
                "config file: requested IMEX channel channel{id} does not exist ({host_path}) and \
                 imex.required is true"
            ),
            (false, false) => tracing::warn!(
                "Ignoring requested IMEX channel channel{id} ({host_path} does not exist)"
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DiscoveryStrategy;
    use edgegpu_testkit::host::{Board, FakeHost};

    /// inotify instances open in this process (no other unit test of the crate opens one).
    fn inotify_instances() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().contains("inotify"))
            })
            .count()
    }

    /// A SIGHUP or MIG rebuild drops the node's resources; their watches (Tegra health, device
    /// nodes) must end then, not at an event that may never come in a quiet `/dev` or sysfs.
    #[tokio::test]
    async fn dropped_resources_leave_no_watch_behind() {
        let host = FakeHost::jetson(Board::Orin);
        let args = GpuArgs {
            discovery: Some(DiscoveryStrategy::Tegra),
            pass_device_specs: Some(true),
            ..GpuArgs::default()
        };
        let before = inotify_instances();
        for _ in 0..3 {
            let node = build_gpu_resources(host.root(), "nvidia.com/gpu", &args)
                .await
                .unwrap();
            assert_eq!(
                inotify_instances(),
                before + 2,
                "health and device-node watches"
            );
            drop(node);
            // Aborted tasks drop their inotify streams when the runtime next runs them.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while inotify_instances() != before {
                assert!(std::time::Instant::now() < deadline, "watches left behind");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}
