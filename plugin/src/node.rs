//! The node's GPUs as the one resource this plugin serves: discovery and health (`gpu`)
//! wired to what pods receive (`allocate`). The kubelet side only sees the result as a
//! [`Resource`].

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::allocate::device_specs::{Candidates, DeviceNodes};
use crate::allocate::sharing;
use crate::allocate::GpuResource;
use crate::config::{Config, DeviceIdStrategy, GpuArgs, Imex};
use crate::gpu::discovery;
use crate::gpu::health::{self, Advertised, HealthTable};
use crate::gpu::Platform;
use crate::resource::Resource;

/// Detects the GPUs under `root` and returns the resource to serve.
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
    // NVML calls block; keep them off the async workers.
    let discovered =
        tokio::task::spawn_blocking(move || discovery::discover(&root_owned, strategy)).await?;
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
    let (platform, gpus, nvml) = match discovered {
        Some(d) => {
            tracing::info!("Detected platform: {}", d.platform_name());
            (Some(d.platform), d.gpus, d.nvml)
        }
        None => {
            tracing::info!("Detected platform: none");
            (None, Vec::new(), None)
        }
    };

    let base_ids: Vec<String> = gpus
        .iter()
        .map(|g| match config.device_id_strategy {
            DeviceIdStrategy::Uuid => g.uuid.clone(),
            DeviceIdStrategy::Index => g.index.to_string(),
        })
        .collect();
    let (name, replication) = sharing::apply(resource_name, config.sharing.as_ref());
    let mut advertised = Vec::new();
    for (p, gpu) in gpus.iter().enumerate() {
        match replication {
            Some(r) => advertised.extend((0..r.replicas).map(|n| Advertised {
                id: sharing::replica_id(&base_ids[p], n),
                physical: p,
                numa_node: gpu.numa_node,
            })),
            None => advertised.push(Advertised {
                id: base_ids[p].clone(),
                physical: p,
                numa_node: gpu.numa_node,
            }),
        }
    }
    let table = Arc::new(HealthTable::new(&name, base_ids.clone(), advertised));

    if !config.health_checks {
        tracing::info!("health checks disabled (--health-checks=false or DP_DISABLE_HEALTHCHECKS)");
    } else {
        match (&platform, nvml) {
            (Some(Platform::Tegra { detection, .. }), _) => {
                let (root, generation) = (root.to_path_buf(), detection.generation);
                let spec = tokio::task::spawn_blocking({
                    let root = root.clone();
                    move || health::tegra::TegraHealthSpec::for_host(&root, generation)
                })
                .await?;
                health::tegra::spawn(root, spec, &table, 0).await?;
            }
            (Some(Platform::Nvml), Some(nvml)) => {
                let uuids = gpus.iter().map(|g| g.uuid.clone()).collect();
                health::nvml::spawn(
                    nvml,
                    uuids,
                    &table,
                    config.extra_ignored_xids.clone(),
                    Duration::from_secs(config.health_recovery_seconds),
                )?;
            }
            _ => {}
        }
    }
    let device_nodes = match (&platform, config.pass_device_specs) {
        (Some(Platform::Tegra { detection, .. }), true) => {
            Some(Candidates::Tegra(detection.generation))
        }
        (Some(Platform::Nvml), true) => Some(Candidates::Discrete(
            gpus.iter().map(|g| g.minor.unwrap_or(g.index)).collect(),
        )),
        _ => None,
    };
    let device_nodes = match device_nodes {
        Some(candidates) => Some(DeviceNodes::watch(root.to_path_buf(), candidates).await?),
        None => None,
    };
    tracing::info!(resource = %name, devices = table.advertised().len(), "GPU resource ready");
    Ok(Arc::new(GpuResource {
        name,
        config,
        platform,
        gpus,
        base_ids,
        replication,
        table,
        device_nodes,
    }))
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
