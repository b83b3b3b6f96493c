//! Builds the advertised [`Resource`] from the host: discovery, health and sharing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use edgegpu_kubelet_api::v1beta1::{
    ContainerAllocateRequest, ContainerAllocateResponse, ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions,
};
use tokio::sync::watch;

use crate::config::{Config, DeviceIdStrategy, GpuArgs};
use crate::discovery::{self, Gpu, Platform};
use crate::health::{self, Advertised, HealthTable};
use crate::resource::Resource;
use crate::sharing::{self, Replication};

/// The GPUs of this node as one extended resource.
pub struct GpuResource {
    pub(crate) name: String,
    pub(crate) config: Config,
    pub(crate) root: PathBuf,
    /// `None` when no GPU was found and `--fail-on-init-error=false`.
    pub(crate) platform: Option<Platform>,
    pub(crate) gpus: Vec<Gpu>,
    /// Per physical GPU: its ID under `--device-id-strategy` (`GPU-…`/`tegra` or the index).
    pub(crate) base_ids: Vec<String>,
    pub(crate) replication: Option<Replication>,
    pub(crate) table: Arc<HealthTable>,
}

impl GpuResource {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The platform found (None: no GPU, running with zero devices).
    pub fn platform(&self) -> Option<&Platform> {
        self.platform.as_ref()
    }

    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// The CDI device name part for a GPU: on Tegra `nvidia-ctk cdi generate --mode=csv`
    /// names the one device `0`; on NVML hosts the ID strategy's value.
    pub(crate) fn cdi_id(&self, physical: usize) -> String {
        match self.platform {
            Some(Platform::Tegra { .. }) => "0".into(),
            _ => self.base_ids[physical].clone(),
        }
    }
}

impl Resource for GpuResource {
    fn resource_name(&self) -> &str {
        &self.name
    }

    fn options(&self) -> DevicePluginOptions {
        DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }
    }

    fn devices(&self) -> watch::Receiver<Vec<Device>> {
        self.table.subscribe()
    }

    fn allocate(
        &self,
        request: &ContainerAllocateRequest,
    ) -> Result<ContainerAllocateResponse, tonic::Status> {
        crate::allocate::allocate(self, &request.devices_ids)
    }

    fn preferred_allocation(
        &self,
        request: &ContainerPreferredAllocationRequest,
    ) -> Result<ContainerPreferredAllocationResponse, tonic::Status> {
        let advertised = self.table.advertised();
        let unknown: Vec<&str> = request
            .available_device_i_ds
            .iter()
            .chain(&request.must_include_device_i_ds)
            .filter(|id| !advertised.iter().any(|a| &a.id == *id))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(tonic::Status::invalid_argument(format!(
                "unknown device IDs for '{}': {}",
                self.name,
                unknown.join(", ")
            )));
        }
        let size = usize::try_from(request.allocation_size).map_err(|_| {
            tonic::Status::invalid_argument(format!(
                "invalid allocation size {}",
                request.allocation_size
            ))
        })?;
        let ids = sharing::preferred(
            advertised,
            &request.available_device_i_ds,
            &request.must_include_device_i_ds,
            size,
            self.replication.is_some(),
            self.config.shared_devices_allocation_policy,
        );
        Ok(ContainerPreferredAllocationResponse { device_i_ds: ids })
    }
}

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
        match (&platform, nvml) {
            (Some(Platform::Tegra { detection, .. }), _) => {
                let spec = health::tegra::TegraHealthSpec::for_host(root, detection.generation);
                health::tegra::spawn(root.to_path_buf(), spec, &table, 0)?;
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
    }))
}
