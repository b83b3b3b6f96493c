//! What a pod receives: the answer to `Allocate` for a served resource (strategies in
//! [`strategy`], MPS variables and mounts in `client_limits`) and to
//! `GetPreferredAllocation`. The resource itself (units, replicas, limits, `/dev` nodes, health)
//! is the node library's plan (`edgegpu_node::serving`); this module only answers the kubelet
//! from it.

mod client_limits;
pub mod strategy;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::{
    ContainerAllocateRequest, ContainerAllocateResponse, ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, DeviceSpec, Mount,
};
use tokio::sync::watch;
use tonic::Status;

use crate::resource::Resource;
use edgegpu_node::gpu::Platform;
use edgegpu_node::serving::{limits, sharing, Served};

/// One served resource as the kubelet sees it: the node library's [`Served`] resource and the
/// answers to `Allocate`.
pub struct GpuResource {
    pub(crate) served: Arc<Served>,
    pub(crate) allocations: AllocationCounts,
}

impl GpuResource {
    pub fn new(served: Arc<Served>) -> Self {
        Self {
            served,
            allocations: AllocationCounts::default(),
        }
    }

    /// The planned resource this serves.
    pub fn served(&self) -> &Arc<Served> {
        &self.served
    }

    /// Allocation counters.
    pub fn allocations(&self) -> &AllocationCounts {
        &self.allocations
    }
}

impl std::ops::Deref for GpuResource {
    type Target = Served;

    fn deref(&self) -> &Served {
        &self.served
    }
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
