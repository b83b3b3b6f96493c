//! The node's GPUs as the one resource this plugin serves: discovery and health (`gpu`)
//! wired to what pods receive (`allocate`). The kubelet side only sees the result as a
//! [`Resource`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::allocate::sharing;
use crate::allocate::GpuResource;
use crate::config::{DeviceIdStrategy, GpuArgs};
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
        match (&platform, &nvml) {
            (Some(Platform::Tegra { detection, .. }), _) => {
                let spec = health::tegra::TegraHealthSpec::for_host(root, detection.generation);
                health::tegra::spawn(root.to_path_buf(), spec, &table, 0)?;
            }
            (Some(Platform::Nvml), Some(nvml)) => {
                let uuids = gpus.iter().map(|g| g.uuid.clone()).collect();
                health::nvml::spawn(
                    nvml.clone(),
                    uuids,
                    &table,
                    config.extra_ignored_xids.clone(),
                    Duration::from_secs(config.health_recovery_seconds),
                )?;
            }
            _ => {}
        }
    }
    tracing::info!(resource = %name, devices = table.advertised().len(), "GPU resource ready");
    Ok(Arc::new(GpuResource {
        name,
        config,
        root: root.to_path_buf(),
        platform,
        gpus,
        base_ids,
        replication,
        table,
        allocations: Default::default(),
        nvml,
    }))
}
