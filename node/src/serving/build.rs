//! One round's plan of the node's GPUs: discovery and health (`gpu`) wired to the served
//! resources ([`Served`]). One resource normally (`nvidia.com/gpu`); with `--mig-strategy
//! mixed` one per MIG profile as well. The device plugin serves them to the kubelet; the DRA
//! driver follows their health.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::device_specs::{Candidates, DeviceNodes, GpuNodes};
use super::plan::{GpuFacts, ResourcePlan};
use super::served::Served;
use super::unit::Unit;
use super::{mig, sharing};
use crate::config::{Config, GpuArgs, Imex, MigStrategy};
use crate::gpu::discovery::{self, Discovered, NoGpuError};
use crate::gpu::health::{self, Advertised, HealthTable, Target};
use crate::gpu::Platform;
use crate::mps;
use crate::snapshot::Snapshot;

/// The resources of this node, and the signal that they must be rebuilt.
pub struct ServedNode {
    pub resources: Vec<Arc<Served>>,
    /// Becomes `true` when the MIG geometry changed (MIG strategies only): the resources no
    /// longer describe the node and must be built again.
    pub reconfigured: watch::Receiver<bool>,
}

/// The MIG geometry does not fit `--mig-strategy` (NVIDIA's reason). While the plugin runs
/// it is what a reconfiguration passes through: see [`settle_mig_geometry`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidMigGeometry(pub String);

/// Detects the GPUs under `root` and returns every resource to serve. A MIG geometry the
/// strategy refuses is an [`InvalidMigGeometry`] error. A program's round takes its
/// [`Snapshot`] itself and calls [`served_of_discovery`], to read the rest of it too.
pub async fn build_served(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<ServedNode> {
    let snapshot = Snapshot::take_off_runtime(root, args).await?;
    served_of_discovery(root, resource_name, &snapshot.config, snapshot.discovered).await
}

/// The resources a round's snapshot makes: its `config` and what discovery found, or why
/// nothing was. Checks the IMEX channels the config names first. No GPU is an error unless
/// `--fail-on-init-error=false`, which serves zero devices.
pub async fn served_of_discovery(
    root: &Path,
    resource_name: &str,
    config: &Config,
    discovered: Result<Discovered, NoGpuError>,
) -> anyhow::Result<ServedNode> {
    {
        let (imex, root) = (config.imex.clone(), root.to_path_buf());
        tokio::task::spawn_blocking(move || check_imex(&root, &imex)).await??;
    }
    let discovered =
        match discovered {
            Ok(d) => {
                tracing::info!("Detected platform: {}", d.platform_name());
                d
            }
            Err(e) if !config.fail_on_init_error => {
                tracing::warn!("{e}; --fail-on-init-error=false: running with zero devices");
                tracing::info!("Detected platform: none");
                Discovered {
                    platform: Platform::Nvml,
                    gpus: Vec::new(),
                    migs: Vec::new(),
                    nvml: None,
                }
            }
            Err(e) => return Err(anyhow::Error::new(e).context(
                "GPU discovery failed (use --fail-on-init-error=false to run with zero devices)",
            )),
        };
    served_of(root, resource_name, config, discovered).await
}

/// The resources `config` makes of what discovery found, with their health monitors and,
/// for MIG strategies, the watch on the MIG geometry as `discovered` saw it. Tells the MPS
/// companion which control daemons they need (`<mps-root>/desired/daemons.json`).
pub async fn served_of(
    root: &Path,
    resource_name: &str,
    config: &Config,
    discovered: Discovered,
) -> anyhow::Result<ServedNode> {
    served(root, resource_name, config, discovered, true).await
}

/// [`served_of`] for a program that only follows the GPUs' health and serves none of these
/// resources (the DRA driver): it tells the MPS companion nothing, as `daemons.json` is then
/// the program's own to write, not the plan's.
pub async fn served_for_health(
    root: &Path,
    resource_name: &str,
    config: &Config,
    discovered: Discovered,
) -> anyhow::Result<ServedNode> {
    served(root, resource_name, config, discovered, false).await
}

async fn served(
    root: &Path,
    resource_name: &str,
    config: &Config,
    discovered: Discovered,
    publish_daemons: bool,
) -> anyhow::Result<ServedNode> {
    let Discovered {
        platform,
        gpus,
        migs,
        nvml,
    } = discovered;
    let platform = (!gpus.is_empty()).then_some(platform);
    let split = mig::resources(resource_name, config.mig_strategy, &gpus, &migs)
        .map_err(InvalidMigGeometry)?;
    if config.mig_strategy == MigStrategy::Mixed {
        for i in mig::gpus_without_mig_devices(&gpus, &migs) {
            tracing::warn!(
                "GPU {} ({}) has MIG enabled but no MIG devices configured; it serves nothing",
                gpus[i].index,
                gpus[i].uuid
            );
        }
    }

    let device_nodes = match (&platform, config.pass_device_specs) {
        (Some(platform), true) => {
            let candidates = device_node_candidates(platform, &gpus, &split);
            Some(Arc::new(
                DeviceNodes::watch(root.to_path_buf(), candidates).await?,
            ))
        }
        _ => None,
    };

    let facts = gpu_facts(root, config, platform.as_ref(), &gpus, nvml.clone()).await?;
    let mut resources = Vec::new();
    for (name, units) in split {
        let plan = super::plan::plan(&name, config, platform.as_ref(), &gpus, &units, &facts)
            .map_err(anyhow::Error::msg)?;
        resources.push(resource(
            root,
            config,
            &name,
            plan,
            platform.clone(),
            &gpus,
            units,
            device_nodes.clone(),
            nvml.clone(),
        ));
    }
    if publish_daemons {
        publish_mps_daemons(&config.mps_root, &resources).await?;
    }
    let (changed, reconfigured) = watch::channel(false);
    if !config.health_checks {
        tracing::info!("health checks disabled (--health-checks=false or DP_DISABLE_HEALTHCHECKS)");
    }
    start_monitors(
        root,
        config,
        platform.as_ref(),
        (&gpus, &migs),
        nvml,
        &resources,
        changed,
    )
    .await?;
    for r in &resources {
        tracing::info!(resource = %r.name(), devices = r.table.advertised().len(), "GPU resource ready");
    }
    Ok(ServedNode {
        resources,
        reconfigured,
    })
}

/// Waits until the MIG geometry under `root` is one `args`' strategy accepts and has stayed
/// the same for two ticks of the MIG watch; meanwhile nothing is served (the caller stopped
/// the old resources). `nvidia-smi mig -dci/-dgi/-cgi/-cci` sequences and mig-parted pass
/// through states NVIDIA's plugin refuses (MIG enabled without instances, two profiles under
/// `single`) and through valid states that last a moment; serving nothing until the end is
/// what NVIDIA's MIG manager arranges too (it stops the device plugin while it
/// reconfigures), and no pod is handed a MIG device that is about to go. The first refused
/// state is logged at warn, the rest at debug.
pub async fn settle_mig_geometry(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<()> {
    // The config file, NVML's loading and every NVML call block: off the runtime thread.
    let (args, root_owned) = (args.clone(), root.to_path_buf());
    let (config, nvml, gpus) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let config = args.resolve()?;
        let (nvml, gpus) = discovery::nvml::load_and_enumerate(&root_owned)?;
        Ok((config, nvml, gpus))
    })
    .await??;
    let nvml = Arc::new(nvml);
    let gpus = Arc::new(gpus);
    let mut settling = Settling::default();
    let settled = loop {
        let (nvml, gpus) = (nvml.clone(), gpus.clone());
        let (name, strategy) = (resource_name.to_string(), config.mig_strategy);
        let seen = tokio::task::spawn_blocking(move || {
            let geometry = mig_geometry(&nvml, &gpus)?;
            mig::resources(&name, strategy, &geometry.0, &geometry.1)?;
            Ok(geometry)
        })
        .await?;
        if settling.observe(seen, config.mig_strategy) {
            tracing::info!("MIG geometry valid and stable; serving it");
            break Ok(());
        }
        tokio::time::sleep(health::nvml::TICK).await;
    };
    // Dropping the last handle calls nvmlShutdown, which blocks.
    tokio::task::spawn_blocking(move || drop(nvml));
    settled
}

/// The GPUs (MIG mode as of now) and their MIG devices.
type Geometry = (Vec<crate::gpu::Gpu>, Vec<crate::gpu::MigDevice>);

fn mig_geometry(nvml: &nvml_wrapper::Nvml, gpus: &[crate::gpu::Gpu]) -> Result<Geometry, String> {
    let uuids: Vec<Option<String>> = gpus.iter().map(|g| g.nvml_uuid.clone()).collect();
    let modes = discovery::nvml::mig_modes(nvml, &uuids);
    let gpus: Vec<crate::gpu::Gpu> = gpus
        .iter()
        .zip(modes)
        .map(|(g, mig_enabled)| crate::gpu::Gpu {
            mig_enabled,
            ..g.clone()
        })
        .collect();
    let migs = discovery::nvml::mig_devices(nvml, &gpus, &uuids).map_err(|e| format!("{e:#}"))?;
    Ok((gpus, migs))
}

/// The rule of [`settle_mig_geometry`]: done when the same accepted geometry is seen twice
/// in a row; a refused one starts over (and is logged at warn the first time).
#[derive(Default)]
struct Settling {
    previous: Option<Geometry>,
    warned: bool,
}

impl Settling {
    fn observe(&mut self, seen: Result<Geometry, String>, strategy: MigStrategy) -> bool {
        match seen {
            Ok(geometry) => {
                let stable = self.previous.as_ref() == Some(&geometry);
                self.previous = Some(geometry);
                stable
            }
            Err(reason) => {
                if self.warned {
                    tracing::debug!("MIG geometry still refused: {reason}");
                } else {
                    tracing::warn!(
                        "MIG geometry refused for --mig-strategy {} ({reason}); serving nothing until it is valid and stable (a reconfiguration in progress?)",
                        format!("{strategy:?}").to_lowercase()
                    );
                    self.warned = true;
                }
                self.previous = None;
                false
            }
        }
    }
}

/// [`GpuFacts::read`] on the blocking pool; nothing to read (and no task) unless the config
/// shares GPUs with limits.
async fn gpu_facts(
    root: &Path,
    config: &Config,
    platform: Option<&Platform>,
    gpus: &[crate::gpu::Gpu],
    nvml: Option<Arc<nvml_wrapper::Nvml>>,
) -> anyhow::Result<GpuFacts> {
    if !GpuFacts::needed(config) {
        return Ok(GpuFacts::default());
    }
    let (root, config, platform, gpus) = (
        root.to_path_buf(),
        config.clone(),
        platform.cloned(),
        gpus.to_vec(),
    );
    Ok(tokio::task::spawn_blocking(move || {
        GpuFacts::read(&root, &config, platform.as_ref(), &gpus, nvml.as_deref())
    })
    .await?)
}

/// Tells the MPS companion which control daemons this node's resources need
/// (`<mps-root>/desired/daemons.json`). Written only where MPS is used or was used (to stop what is no longer
/// wanted), so nodes without MPS never get the directory.
async fn publish_mps_daemons(mps_root: &Path, resources: &[Arc<Served>]) -> anyhow::Result<()> {
    let desired = mps::status::Desired {
        daemons: resources
            .iter()
            .filter_map(|r| r.mps_daemon.clone())
            .collect(),
    };
    let mps_root = mps_root.to_path_buf();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let file = mps::status::desired_path(&mps_root);
        if desired.daemons.is_empty() && !file.exists() {
            return Ok(());
        }
        let written = mps::status::write_desired(&mps_root, &desired).map_err(|e| {
            anyhow::anyhow!(
                "cannot tell the MPS companion which daemons to run: writing {}: {e} (<mps-root>/desired must be writable by the plugin)",
                file.display()
            )
        })?;
        if written {
            tracing::info!(daemons = desired.daemons.len(), file = %file.display(), "MPS control daemons requested");
        }
        Ok(())
    })
    .await?
}

/// One resource: IDs, replicas and the health table of `units` (and NVML, which its metrics
/// read).
#[allow(clippy::too_many_arguments)]
fn resource(
    root: &Path,
    config: &Config,
    resource_name: &str,
    plan: ResourcePlan,
    platform: Option<Platform>,
    gpus: &[crate::gpu::Gpu],
    units: Vec<Unit>,
    device_nodes: Option<Arc<DeviceNodes>>,
    nvml: Option<Arc<nvml_wrapper::Nvml>>,
) -> Arc<Served> {
    let base_ids: Vec<String> = units
        .iter()
        .map(|u| u.id(gpus, config.device_id_strategy))
        .collect();
    let configured_name = resource_name.to_string();
    let mut advertised = Vec::new();
    for (p, unit) in units.iter().enumerate() {
        let numa_node = gpus[unit.gpu].numa_node;
        match plan.devices_of(p) {
            Some(n) => advertised.extend((0..n).map(|n| Advertised {
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
    let ResourcePlan {
        name,
        replication,
        limits,
        daemon,
        ..
    } = plan;
    let table = Arc::new(HealthTable::new(&name, base_ids.clone(), advertised));
    Arc::new(Served {
        name,
        configured_name,
        config: config.clone(),
        root: root.to_path_buf(),
        platform,
        gpus: gpus.to_vec(),
        units,
        base_ids,
        replication,
        limits,
        mps_daemon: daemon,
        table,
        device_nodes,
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
    (gpus, migs): (&[crate::gpu::Gpu], &[crate::gpu::MigDevice]),
    nvml: Option<Arc<nvml_wrapper::Nvml>>,
    resources: &[Arc<Served>],
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
    // MPS: devices are healthy only while their control daemon is ready (health checks or
    // not: without the daemon no client can start).
    for r in resources {
        let (Some(daemon), Some(paths)) = (
            r.mps_daemon.clone(),
            r.limits.as_ref().and_then(|l| l.mps.clone()),
        ) else {
            continue;
        };
        let targets = (0..r.units.len())
            .map(|slot| Target::new(&r.table, slot))
            .collect();
        let guard = mps::watch::spawn(paths, daemon, targets)?;
        r.table.keep_monitor(Arc::new(guard));
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
    // The baseline is what discovery saw (not a second query, which would miss a change
    // made in between): the resources describe that geometry.
    let mig_watch = (config.mig_strategy != MigStrategy::None)
        .then(|| health::nvml::MigWatch::of_discovery(gpus, migs, changed));
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
    use crate::gpu::{Gpu, MigDevice};
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
            let node = build_served(host.root(), "nvidia.com/gpu", &args)
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

    fn geometry(migs: &[&str]) -> Geometry {
        let gpu = Gpu {
            uuid: "GPU-0".into(),
            nvml_uuid: Some("GPU-0".into()),
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_bytes: None,
            pci_bus_id: None,
            numa_node: None,
            minor: Some(0),
            mig_enabled: true,
        };
        let migs = migs
            .iter()
            .enumerate()
            .map(|(i, uuid)| MigDevice {
                uuid: uuid.to_string(),
                parent: 0,
                index: i as u32,
                gpu_instance: i as u32 + 1,
                compute_instance: 0,
                profile: "1g.10gb".into(),
                memory_bytes: 0,
                attributes: Default::default(),
            })
            .collect();
        (vec![gpu], migs)
    }

    #[test]
    fn settles_on_an_accepted_geometry_seen_twice_in_a_row() {
        let mut s = Settling::default();
        let refused = || Err::<Geometry, _>("no MIG devices".to_string());
        assert!(!s.observe(refused(), MigStrategy::Single));
        assert!(s.warned);
        assert!(!s.observe(Ok(geometry(&["MIG-a"])), MigStrategy::Single));
        // Another accepted geometry: not stable yet.
        assert!(!s.observe(Ok(geometry(&["MIG-a", "MIG-b"])), MigStrategy::Single));
        // A refused one in between starts over.
        assert!(!s.observe(refused(), MigStrategy::Single));
        assert!(!s.observe(Ok(geometry(&["MIG-a", "MIG-b"])), MigStrategy::Single));
        assert!(s.observe(Ok(geometry(&["MIG-a", "MIG-b"])), MigStrategy::Single));
    }
}
