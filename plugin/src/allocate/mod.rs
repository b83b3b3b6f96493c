//! What a pod receives: the advertised device IDs (GPUs or time-slicing replicas), the
//! answer to `Allocate` (strategies in [`strategy`], `/dev` nodes in [`device_specs`]) and to
//! `GetPreferredAllocation` ([`sharing`]). Reads the `gpu` side; the `gpu` side never reads
//! this module.

pub mod device_specs;
pub mod sharing;
pub mod strategy;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::{
    ContainerAllocateRequest, ContainerAllocateResponse, ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, DeviceSpec,
};
use tokio::sync::watch;
use tonic::Status;

use crate::config::Config;
use crate::gpu::health::{Advertised, HealthCounts, HealthTable};
use crate::gpu::{Gpu, Platform};
use crate::resource::Resource;
use sharing::Replication;

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
    pub(crate) allocations: AllocationCounts,
    /// NVML, where discovery kept it loaded (discrete GPUs; Jetsons without a sysfs load).
    pub(crate) nvml: Option<Arc<nvml_wrapper::Nvml>>,
}

/// Container allocations answered, for the plugin's metrics.
#[derive(Debug, Default)]
pub struct AllocationCounts {
    succeeded: AtomicU64,
    failed: AtomicU64,
}

impl AllocationCounts {
    /// Container allocations answered with devices.
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
    }

    /// Container allocations refused (unknown, unhealthy or too many IDs).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
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

    /// Per physical GPU, its ID under `--device-id-strategy` (`GPU-…`/`tegra`, or the index).
    pub fn base_ids(&self) -> &[String] {
        &self.base_ids
    }

    /// The advertised device IDs (GPUs or their replicas) and the physical GPU of each.
    pub fn advertised(&self) -> &[Advertised] {
        self.table.advertised()
    }

    /// Time-slicing replicas per GPU (`None`: GPUs are not shared).
    pub fn replication(&self) -> Option<Replication> {
        self.replication
    }

    /// The physical GPU behind an advertised device ID, also for a replica ID of an earlier
    /// configuration (`tegra::7` after the replica count went down): its base ID decides.
    pub fn physical_of(&self, device_id: &str) -> Option<usize> {
        if let Some(a) = self.advertised().iter().find(|a| a.id == device_id) {
            return Some(a.physical);
        }
        let base = sharing::base_id(device_id);
        self.base_ids.iter().position(|b| b == base)
    }

    /// Each physical GPU's health and transition counts.
    pub fn health(&self) -> Vec<HealthCounts> {
        self.table.counts()
    }

    /// Allocation counters.
    pub fn allocations(&self) -> &AllocationCounts {
        &self.allocations
    }

    /// The host root the GPUs were found under.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// NVML, where discovery kept it loaded.
    pub fn nvml(&self) -> Option<&Arc<nvml_wrapper::Nvml>> {
        self.nvml.as_ref()
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
        let result = allocate(self, &request.devices_ids);
        let counter = match result {
            Ok(_) => &self.allocations.succeeded,
            Err(_) => &self.allocations.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
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

/// Validates `ids` against the advertised devices; returns the physical GPU indices
/// (deduplicated, in request order).
fn resolve_ids(res: &GpuResource, ids: &[String]) -> Result<Vec<usize>, Status> {
    let name = res.name();
    let advertised = res.table.advertised();
    if ids.is_empty() {
        return Err(Status::invalid_argument(format!(
            "Allocate request for '{name}' has no device IDs"
        )));
    }
    if ids.len() > advertised.len() {
        return Err(Status::invalid_argument(format!(
            "requested {} devices for '{name}' ({}) but only {} exist",
            ids.len(),
            ids.join(", "),
            advertised.len()
        )));
    }
    let unknown: Vec<&str> = ids
        .iter()
        .filter(|id| !advertised.iter().any(|a| &a.id == *id))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(Status::invalid_argument(format!(
            "unknown device IDs for '{name}': {}",
            unknown.join(", ")
        )));
    }
    let mut seen = HashSet::new();
    let repeated: Vec<&str> = ids
        .iter()
        .filter(|id| !seen.insert(id.as_str()))
        .map(String::as_str)
        .collect();
    if !repeated.is_empty() {
        return Err(Status::invalid_argument(format!(
            "device IDs requested twice for '{name}': {}",
            repeated.join(", ")
        )));
    }
    if let Some(rep) = res.replication {
        if rep.fail_requests_greater_than_one && ids.len() > 1 {
            return Err(Status::invalid_argument(format!(
                "invalid request: maximum request size for shared resources is 1; found {}",
                ids.len()
            )));
        }
    }
    let mut physical = Vec::new();
    let mut unhealthy = Vec::new();
    for id in ids {
        let a = advertised
            .iter()
            .find(|a| &a.id == id)
            .expect("checked above");
        if let Some(reason) = res.table.unhealthy_reason(a.physical) {
            unhealthy.push(format!("{id} ({reason})"));
        }
        if !physical.contains(&a.physical) {
            physical.push(a.physical);
        }
    }
    if !unhealthy.is_empty() {
        return Err(Status::failed_precondition(format!(
            "unhealthy device IDs for '{name}': {}",
            unhealthy.join(", ")
        )));
    }
    Ok(physical)
}

/// The response for one container.
fn allocate(res: &GpuResource, ids: &[String]) -> Result<ContainerAllocateResponse, Status> {
    let physical = resolve_ids(res, ids)?;
    // IDs handed to the runtime: the GPU's ID under the ID strategy (replicas map to their GPU).
    let visible: Vec<String> = physical.iter().map(|p| res.base_ids[*p].clone()).collect();
    let mut response = ContainerAllocateResponse {
        envs: HashMap::new(),
        ..Default::default()
    };

    let cdi_ids: Vec<String> = physical.iter().map(|p| res.cdi_id(*p)).collect();
    strategy::apply(
        &res.config.device_list_strategy,
        &visible,
        &cdi_ids,
        &mut response,
    );

    if res.config.pass_device_specs {
        let paths = match &res.platform {
            Some(Platform::Tegra { detection, .. }) => {
                device_specs::tegra_device_paths(&res.root, detection.generation)
            }
            Some(Platform::Nvml) => {
                let minors: Vec<u32> = physical
                    .iter()
                    .map(|p| res.gpus[*p].minor.unwrap_or(res.gpus[*p].index))
                    .collect();
                device_specs::discrete_device_paths(&res.root, &minors)
            }
            None => Vec::new(),
        };
        response.devices = paths
            .into_iter()
            .map(|p| DeviceSpec {
                container_path: p.clone(),
                host_path: p,
                permissions: "rw".into(),
            })
            .collect();
    }
    tracing::info!(
        resource = %res.name(),
        ids = %ids.join(","),
        visible = %visible.join(","),
        device_specs = response.devices.len(),
        "Allocate"
    );
    Ok(response)
}
