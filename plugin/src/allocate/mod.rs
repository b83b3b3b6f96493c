//! What a pod receives: the advertised device IDs (whole GPUs or MIG devices, or
//! time-slicing replicas of them), the answer to `Allocate` (strategies in [`strategy`],
//! `/dev` nodes in [`device_specs`]) and to `GetPreferredAllocation` ([`sharing`]). Which
//! resources the node serves under each MIG strategy is [`mig`]; the GPU memory limit a
//! container was given, [`limits`]. Reads the `gpu` side; the
//! `gpu` side never reads this module.

mod client_limits;
pub mod device_specs;
pub mod limits;
pub mod mig;
pub mod plan;
pub mod sharing;
pub mod strategy;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::{
    ContainerAllocateRequest, ContainerAllocateResponse, ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, DeviceSpec, Mount,
};
use edgegpu_platform::cdi;
use tokio::sync::watch;
use tonic::Status;

use crate::config::{Config, DeviceIdStrategy};
use crate::gpu::health::{Advertised, HealthCounts, HealthTable};
use crate::gpu::{Gpu, MigDevice, Platform};
use crate::resource::Resource;
use sharing::Replication;

/// One allocatable device: a whole GPU, or a MIG device of one.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    /// Position of the GPU (the MIG device's parent) in the node's GPU list.
    pub gpu: usize,
    pub mig: Option<MigDevice>,
}

impl Unit {
    /// A MIG device's GPU instance and compute instance on its GPU's device node.
    pub fn mig_instance(&self, gpus: &[Gpu]) -> Option<device_specs::MigInstance> {
        self.mig.as_ref().map(|m| device_specs::MigInstance {
            gpu_minor: gpus[self.gpu].device_minor(),
            gpu_instance: m.gpu_instance,
            compute_instance: m.compute_instance,
        })
    }

    /// The device's ID under `strategy`: GPU/MIG UUID (`tegra` on Jetson) or NVIDIA's index
    /// (`0`, MIG `0:1`).
    pub fn id(&self, gpus: &[Gpu], strategy: DeviceIdStrategy) -> String {
        let gpu = &gpus[self.gpu];
        match (&self.mig, strategy) {
            (None, DeviceIdStrategy::Uuid) => gpu.uuid.clone(),
            (None, DeviceIdStrategy::Index) => gpu.index.to_string(),
            (Some(m), DeviceIdStrategy::Uuid) => m.uuid.clone(),
            (Some(m), DeviceIdStrategy::Index) => m.nvidia_index(gpu),
        }
    }

    /// The device's name in the CDI spec `edgegpu-node-setup cdi generate` writes (kind
    /// `nvidia.com/gpu`): on Jetson the iGPU is `0` (as in `nvidia-ctk cdi generate
    /// --mode=csv`); a GPU its ID (UUID or index, both are in the spec); a MIG device
    /// `<gpu index>:gi<G>:ci<C>`, on Thor too (the names the driver's procfs gives exactly:
    /// nvidia-ctk's `<gpu>:<mig index>` and `MIG-…` need NVML's MIG order and UUIDs, which
    /// procfs lacks — docs/cdi.md, "Names next to nvidia-ctk's"). Every name is
    /// `edgegpu_platform::cdi`'s, which node-setup's generator uses too.
    pub fn cdi_name(
        &self,
        gpus: &[Gpu],
        platform: Option<&Platform>,
        strategy: DeviceIdStrategy,
    ) -> String {
        let gpu = &gpus[self.gpu];
        match (&self.mig, platform, strategy) {
            (Some(m), _, _) => cdi::mig_device(gpu.index, m.gpu_instance, m.compute_instance),
            (None, Some(Platform::Tegra { .. }), _) => cdi::INTEGRATED_GPU.into(),
            (None, _, DeviceIdStrategy::Uuid) => cdi::gpu_by_uuid(&gpu.uuid),
            (None, _, DeviceIdStrategy::Index) => cdi::gpu_by_index(gpu.index),
        }
    }
}

/// Some devices of this node as one extended resource.
pub struct GpuResource {
    /// The advertised name.
    pub(crate) name: String,
    /// The name before sharing renamed it (`nvidia.com/gpu` for `nvidia.com/gpu.shared`).
    pub(crate) configured_name: String,
    pub(crate) config: Config,
    /// The host root the GPUs were found under (what metrics and labels read).
    pub(crate) root: PathBuf,
    /// `None` when no GPU was found and `--fail-on-init-error=false`.
    pub(crate) platform: Option<Platform>,
    /// Every GPU of the node (units refer to them by position).
    pub(crate) gpus: Vec<Gpu>,
    /// The devices this resource serves.
    pub(crate) units: Vec<Unit>,
    /// Per unit: its ID under `--device-id-strategy`.
    pub(crate) base_ids: Vec<String>,
    pub(crate) replication: Option<Replication>,
    /// MPS replicas' or memory units' limits (`None`: whole GPUs or time-slicing).
    pub(crate) limits: Option<limits::Limits>,
    /// The MPS control daemon serving this resource, as the companion must run it.
    pub(crate) mps_daemon: Option<crate::mps::plan::DaemonSettings>,
    pub(crate) table: Arc<HealthTable>,
    /// The `/dev` nodes for `--pass-device-specs` (`None` when it is off).
    /// Shared by the node's resources.
    pub(crate) device_nodes: Option<Arc<device_specs::DeviceNodes>>,
    pub(crate) allocations: AllocationCounts,
    /// NVML, where discovery kept it loaded (discrete GPUs, hybrid Jetsons).
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

impl Drop for GpuResource {
    /// A rebuild drops the old resources on the runtime thread; when theirs is the last NVML
    /// handle, dropping it calls `nvmlShutdown`, which blocks: hand it to the blocking pool.
    fn drop(&mut self) {
        if let (Some(nvml), Ok(runtime)) = (self.nvml.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn_blocking(move || drop(nvml));
        }
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

    /// Every GPU of the node.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// Per unit, its ID under `--device-id-strategy` (`GPU-…`/`MIG-…`/`tegra`, or the index).
    pub fn base_ids(&self) -> &[String] {
        &self.base_ids
    }

    /// The advertised device IDs (units or their replicas) and the unit of each.
    pub fn advertised(&self) -> &[Advertised] {
        self.table.advertised()
    }

    /// Time-slicing or MPS replicas per unit (`None`: units are not replicated).
    pub fn replication(&self) -> Option<Replication> {
        self.replication
    }

    /// The name before sharing renamed it (`nvidia.com/gpu` for `nvidia.com/gpu.shared`).
    pub fn resource_name_configured(&self) -> &str {
        &self.configured_name
    }

    /// How many devices unit `p` is advertised as, where units are shared (replicas or
    /// memory units); `None` for whole units.
    pub fn advertised_per_unit(&self, p: usize) -> Option<u32> {
        if self.replication.is_none() && self.limits.is_none() {
            return None;
        }
        Some(self.advertised().iter().filter(|a| a.physical == p).count() as u32)
    }

    /// The limits of MPS replicas or memory units (`None`: none set).
    pub fn limits(&self) -> Option<&limits::Limits> {
        self.limits.as_ref()
    }

    /// The MPS control daemon this resource needs (`None`: no MPS).
    pub fn mps_daemon(&self) -> Option<&crate::mps::plan::DaemonSettings> {
        self.mps_daemon.as_ref()
    }

    /// The unit (position in [`Self::units`]) behind an advertised device ID, also for a
    /// replica ID of an earlier configuration (`tegra::7` after the replica count went down):
    /// its base ID decides.
    pub fn physical_of(&self, device_id: &str) -> Option<usize> {
        if let Some(a) = self.advertised().iter().find(|a| a.id == device_id) {
            return Some(a.physical);
        }
        let base = sharing::base_id(device_id);
        self.base_ids.iter().position(|b| b == base)
    }

    /// Each unit's health and transition counts.
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

    /// The devices this resource serves.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// The CDI device name part of unit `physical`.
    pub(crate) fn cdi_id(&self, physical: usize) -> String {
        self.units[physical].cdi_name(
            &self.gpus,
            self.platform.as_ref(),
            self.config.device_id_strategy,
        )
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
        let pick = match (&self.limits, self.replication) {
            (
                Some(limits::Limits {
                    kind: limits::LimitKind::Memory { .. },
                    ..
                }),
                _,
            ) => sharing::Pick::OneGpu,
            (_, Some(_)) => sharing::Pick::Replicas(self.config.shared_devices_allocation_policy),
            (_, None) => sharing::Pick::Numa,
        };
        let ids = sharing::preferred(
            advertised,
            &request.available_device_i_ds,
            &request.must_include_device_i_ds,
            size,
            pick,
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
    if let Some(setup) = res.client_setup(&physical, ids)? {
        response.envs.extend(setup.env());
        response
            .mounts
            .extend(setup.mounts().into_iter().map(|m| Mount {
                container_path: m.container.to_string_lossy().into_owned(),
                host_path: m.host.to_string_lossy().into_owned(),
                read_only: false,
            }));
    }

    if let Some(nodes) = &res.device_nodes {
        // The nodes were found by the watch; Allocate reads no file.
        let present = nodes.snapshot();
        let mut paths = match &res.platform {
            Some(Platform::Tegra { .. }) => present.all().to_vec(),
            Some(Platform::Nvml) => {
                let mut minors: Vec<u32> = physical
                    .iter()
                    .map(|p| res.gpus[res.units[*p].gpu].device_minor())
                    .collect();
                minors.dedup();
                present.discrete(&minors)
            }
            None => Vec::new(),
        };
        // MIG devices: their GPU instance and compute instance access nodes.
        for p in &physical {
            let unit = &res.units[*p];
            let (Some(m), Some(instance)) = (&unit.mig, unit.mig_instance(&res.gpus)) else {
                continue;
            };
            match present.mig(instance) {
                Ok(nodes) => {
                    for n in nodes {
                        if !paths.contains(n) {
                            paths.push(n.clone());
                        }
                    }
                }
                Err(e) => {
                    return Err(Status::failed_precondition(format!(
                        "MIG device {} of '{}': {e}",
                        m.uuid,
                        res.name()
                    )))
                }
            }
        }
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
