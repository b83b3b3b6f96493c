//! `nvidia.com/dla` and `nvidia.com/pva`: one advertised device per engine found on the host
//! (IDs `dla0`, `dla1`, `pva0`), as a [`Resource`]; the engines themselves are the node
//! library's (`edgegpu_node::engines`).
//!
//! Allocate hands the container the engine's device nodes and tells the application which
//! core it got in `EDGEGPU_DLA_CORES` / `EDGEGPU_PVA_INSTANCES` (comma-separated host
//! indices): no TensorRT or cuDLA environment variable selects a core, the application passes
//! the index itself (`trtexec --useDLACore=$EDGEGPU_DLA_CORES`, `IRuntime::setDLACore`,
//! `cudlaCreateDevice(index, …)`).
//!
//! Node set: the node library's rule, which the DRA driver's claims follow too
//! (`edgegpu_node::engines::container_nodes`, docs/engines.md section 2): every node of every
//! engine of the resource's kind, on every release, so that core `N` means the same inside the
//! container as on the host whether user space opens a core's node by name or counts the
//! nodes it sees (neither is documented); PVA containers also get `/dev/nvmap` where it
//! exists. Exclusivity then rests on the scheduler, which gives each core index to one
//! container at a time, and on the application using the index it was given — the same trust
//! as NVIDIA's CSV mode, which mounts every DLA and PVA node into every GPU container.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::{
    CdiDevice, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, DeviceSpec,
};
use tokio::sync::watch;

use crate::resource::Resource;
use edgegpu_node::config::DeviceListStrategy;
use edgegpu_node::engines::{env_var, Engine, EngineKind};
use edgegpu_node::gpu::health::{Advertised, HealthTable, Target};

/// Annotation key prefix the CRI runtimes read CDI devices from (one key per resource).
const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/edgegpu-engines_";

/// One engine resource: every engine of one kind on the node, with its health.
pub struct EngineResource {
    kind: EngineKind,
    engines: Vec<Engine>,
    root: PathBuf,
    strategies: Vec<DeviceListStrategy>,
    /// Health of `engines`, slot `i` = `engines[i]`.
    pub table: Arc<HealthTable>,
}

impl EngineResource {
    /// The resource for `engines` of `kind` (others are ignored); `None` when there are none,
    /// so no empty resource is ever registered. `strategies` are the GPU resource's device
    /// list strategies: with `cdi-annotations` or `cdi-cri` the engines go as CDI names
    /// (`nvidia.com/dla=0`, specs from `edgegpu-node-setup cdi generate`), otherwise as
    /// device specs.
    pub fn new(
        root: &Path,
        kind: EngineKind,
        engines: &[Engine],
        strategies: &[DeviceListStrategy],
    ) -> Option<Self> {
        let engines = edgegpu_node::engines::of_kind(engines, kind);
        if engines.is_empty() {
            return None;
        }
        let ids: Vec<String> = engines.iter().map(Engine::id).collect();
        let advertised = ids
            .iter()
            .enumerate()
            .map(|(physical, id)| Advertised {
                id: id.clone(),
                physical,
                numa_node: None,
            })
            .collect();
        let table = Arc::new(HealthTable::new(kind.resource_name(), ids, advertised));
        Some(Self {
            kind,
            engines,
            root: root.to_path_buf(),
            strategies: strategies.to_vec(),
            table,
        })
    }

    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    pub fn engines(&self) -> &[Engine] {
        &self.engines
    }

    /// Each engine with the health slot it backs, for [`super::health::spawn`].
    pub fn health_targets(&self) -> Vec<(Engine, Target)> {
        self.engines
            .iter()
            .enumerate()
            .map(|(i, e)| (e.clone(), Target::new(&self.table, i)))
            .collect()
    }

    fn uses_cdi(&self) -> bool {
        self.strategies.iter().any(|s| {
            matches!(
                s,
                DeviceListStrategy::CdiAnnotations | DeviceListStrategy::CdiCri
            )
        })
    }

    /// The host device nodes a container holding `chosen` gets (see the module docs).
    fn nodes_for(&self, chosen: &[&Engine]) -> Vec<String> {
        edgegpu_node::engines::container_nodes(&self.root, &self.engines, chosen)
    }
}

impl Resource for EngineResource {
    fn resource_name(&self) -> &str {
        self.kind.resource_name()
    }

    fn options(&self) -> DevicePluginOptions {
        DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: false,
        }
    }

    fn devices(&self) -> watch::Receiver<Vec<Device>> {
        self.table.subscribe()
    }

    fn allocate(
        &self,
        request: &ContainerAllocateRequest,
    ) -> Result<ContainerAllocateResponse, tonic::Status> {
        let mut chosen: Vec<(usize, &Engine)> = Vec::new();
        for id in &request.devices_ids {
            let Some(slot) = self.engines.iter().position(|e| &e.id() == id) else {
                return Err(tonic::Status::invalid_argument(format!(
                    "unknown {} device {id:?} (known: {})",
                    self.kind.resource_name(),
                    self.engines
                        .iter()
                        .map(Engine::id)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            if let Some(reason) = self.table.unhealthy_reason(slot) {
                return Err(tonic::Status::failed_precondition(format!(
                    "{} device {id} is unhealthy: {reason}",
                    self.kind.resource_name()
                )));
            }
            if !chosen.iter().any(|(s, _)| *s == slot) {
                chosen.push((slot, &self.engines[slot]));
            }
        }
        chosen.sort_by_key(|(_, e)| e.index);
        let engines: Vec<&Engine> = chosen.iter().map(|(_, e)| *e).collect();
        let mut response = ContainerAllocateResponse::default();
        response.envs.insert(
            env_var(self.kind).to_string(),
            engines
                .iter()
                .map(|e| e.index.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
        if self.uses_cdi() {
            let names: Vec<String> = engines.iter().map(|e| e.kind.cdi_name(e.index)).collect();
            if self
                .strategies
                .contains(&DeviceListStrategy::CdiAnnotations)
            {
                response.annotations.insert(
                    format!("{CDI_ANNOTATION_PREFIX}{}", self.kind.name()),
                    names.join(","),
                );
            }
            if self.strategies.contains(&DeviceListStrategy::CdiCri) {
                response.cdi_devices = names.into_iter().map(|name| CdiDevice { name }).collect();
            }
        } else {
            response.devices = self
                .nodes_for(&engines)
                .into_iter()
                .map(|n| DeviceSpec {
                    container_path: n.clone(),
                    host_path: n,
                    permissions: "rw".to_string(),
                })
                .collect();
        }
        Ok(response)
    }

    fn preferred_allocation(
        &self,
        _request: &ContainerPreferredAllocationRequest,
    ) -> Result<ContainerPreferredAllocationResponse, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "engine resources have no preferred allocation",
        ))
    }
}
