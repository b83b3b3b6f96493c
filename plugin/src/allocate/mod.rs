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

/// Why `Allocate` or `GetPreferredAllocation` refuses a container's request. Each names the
/// resource; the gRPC status the kubelet gets is made from it at the [`Resource`] boundary
/// (code: [`AllocateError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    #[error("Allocate request for '{resource}' has no device IDs")]
    NoIds { resource: String },
    #[error("requested {} devices for '{resource}' ({}) but only {available} exist", .ids.len(), .ids.join(", "))]
    TooMany {
        resource: String,
        ids: Vec<String>,
        available: usize,
    },
    #[error("unknown device IDs for '{resource}': {}", .ids.join(", "))]
    UnknownIds { resource: String, ids: Vec<String> },
    #[error("device IDs requested twice for '{resource}': {}", .ids.join(", "))]
    Repeated { resource: String, ids: Vec<String> },
    /// `failRequestsGreaterThanOne`: a shared resource hands out one ID per container.
    #[error("invalid request: maximum request size for shared resources is 1; found {requested}")]
    SharedRequestTooLarge { requested: usize },
    /// (ID, the health monitors' reason) of each unhealthy ID asked for.
    #[error("unhealthy device IDs for '{resource}': {}", id_reasons(.devices))]
    Unhealthy {
        resource: String,
        devices: Vec<(String, String)>,
    },
    /// A MIG device's access nodes cannot be handed out (`reason`: the node watch's).
    #[error("MIG device {mig} of '{resource}': {reason}")]
    MigNodes {
        resource: String,
        mig: String,
        reason: String,
    },
    /// Memory units of several GPUs for one container, whose limit is one GPU's: (GPU ID,
    /// units asked of it).
    #[error("every unit of '{resource}' one container asks for must come from one GPU (its memory limit is one GPU's); got units of {}: ask for at most as many units as one GPU has free, or enable GetPreferredAllocation in the kubelet", id_reasons(.units_per_gpu))]
    UnitsOfSeveralGpus {
        resource: String,
        units_per_gpu: Vec<(String, usize)>,
    },
    #[error("invalid allocation size {size}")]
    AllocationSize { size: i32 },
}

/// `a (x), b (y)`.
fn id_reasons<T: std::fmt::Display>(items: &[(String, T)]) -> String {
    items
        .iter()
        .map(|(id, why)| format!("{id} ({why})"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl AllocateError {
    /// The gRPC code the kubelet gets: the request is wrong, or (health, missing nodes) the
    /// node is not in a state to serve it.
    pub fn code(&self) -> tonic::Code {
        match self {
            AllocateError::Unhealthy { .. } | AllocateError::MigNodes { .. } => {
                tonic::Code::FailedPrecondition
            }
            _ => tonic::Code::InvalidArgument,
        }
    }
}

impl From<AllocateError> for Status {
    fn from(e: AllocateError) -> Status {
        Status::new(e.code(), e.to_string())
    }
}

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
        result.map_err(Status::from)
    }

    fn preferred_allocation(
        &self,
        request: &ContainerPreferredAllocationRequest,
    ) -> Result<ContainerPreferredAllocationResponse, tonic::Status> {
        preferred_allocation(self, request).map_err(Status::from)
    }
}

/// The preferred IDs for one container, among those the kubelet offers.
fn preferred_allocation(
    res: &GpuResource,
    request: &ContainerPreferredAllocationRequest,
) -> Result<ContainerPreferredAllocationResponse, AllocateError> {
    let advertised = res.table.advertised();
    let unknown: Vec<String> = request
        .available_device_i_ds
        .iter()
        .chain(&request.must_include_device_i_ds)
        .filter(|id| !advertised.iter().any(|a| &a.id == *id))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(AllocateError::UnknownIds {
            resource: res.name.clone(),
            ids: unknown,
        });
    }
    let size =
        usize::try_from(request.allocation_size).map_err(|_| AllocateError::AllocationSize {
            size: request.allocation_size,
        })?;
    let pick = match (&res.limits, res.replication) {
        (
            Some(limits::Limits {
                kind: limits::LimitKind::Memory { .. },
                ..
            }),
            _,
        ) => sharing::Pick::OneGpu,
        (_, Some(_)) => sharing::Pick::Replicas(res.config.shared_devices_allocation_policy),
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

/// Validates `ids` against the advertised devices; returns the physical GPU indices
/// (deduplicated, in request order).
fn resolve_ids(res: &GpuResource, ids: &[String]) -> Result<Vec<usize>, AllocateError> {
    let resource = || res.name().to_string();
    let advertised = res.table.advertised();
    if ids.is_empty() {
        return Err(AllocateError::NoIds {
            resource: resource(),
        });
    }
    if ids.len() > advertised.len() {
        return Err(AllocateError::TooMany {
            resource: resource(),
            ids: ids.to_vec(),
            available: advertised.len(),
        });
    }
    let unknown: Vec<String> = ids
        .iter()
        .filter(|id| !advertised.iter().any(|a| &a.id == *id))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(AllocateError::UnknownIds {
            resource: resource(),
            ids: unknown,
        });
    }
    let mut seen = HashSet::new();
    let repeated: Vec<String> = ids
        .iter()
        .filter(|id| !seen.insert(id.as_str()))
        .cloned()
        .collect();
    if !repeated.is_empty() {
        return Err(AllocateError::Repeated {
            resource: resource(),
            ids: repeated,
        });
    }
    if let Some(rep) = res.replication {
        if rep.fail_requests_greater_than_one && ids.len() > 1 {
            return Err(AllocateError::SharedRequestTooLarge {
                requested: ids.len(),
            });
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
            unhealthy.push((id.clone(), reason));
        }
        if !physical.contains(&a.physical) {
            physical.push(a.physical);
        }
    }
    if !unhealthy.is_empty() {
        return Err(AllocateError::Unhealthy {
            resource: resource(),
            devices: unhealthy,
        });
    }
    Ok(physical)
}

/// The response for one container.
fn allocate(res: &GpuResource, ids: &[String]) -> Result<ContainerAllocateResponse, AllocateError> {
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
                Err(reason) => {
                    return Err(AllocateError::MigNodes {
                        resource: res.name().to_string(),
                        mig: m.uuid.clone(),
                        reason,
                    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The kubelet gets the message and a code that says whose fault it is.
    #[test]
    fn refusals_become_statuses_with_their_code() {
        let unhealthy = AllocateError::Unhealthy {
            resource: "nvidia.com/gpu".into(),
            devices: vec![
                ("GPU-a".into(), "XID 79".into()),
                ("GPU-b".into(), "gone".into()),
            ],
        };
        let status = Status::from(unhealthy);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            "unhealthy device IDs for 'nvidia.com/gpu': GPU-a (XID 79), GPU-b (gone)"
        );
        let status = Status::from(AllocateError::TooMany {
            resource: "nvidia.com/gpu".into(),
            ids: vec!["0".into(), "1".into()],
            available: 1,
        });
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "requested 2 devices for 'nvidia.com/gpu' (0, 1) but only 1 exist"
        );
    }
}
