//! What one round of serving metrics is about: the resources, the entities their series
//! describe (whole GPUs, MIG GPU instances) and the pods holding them. Apart from `mod.rs`
//! so that the series writers (families.rs, pod_memory.rs) depend on it and not on the
//! module that calls them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::allocate::GpuResource;
use crate::kubelet::pod_resources::DeviceHolder;
use edgegpu_node::gpu::processes::Processes;
use edgegpu_node::gpu::sensors::Sensors;
use edgegpu_node::gpu::MigDevice;

/// The resources of one round of serving, what their series are about, and their sensors.
pub(super) struct Served {
    pub(super) resources: Vec<Arc<GpuResource>>,
    /// The series' subjects: whole GPUs and MIG GPU instances, each once.
    pub(super) entities: Vec<Entity>,
    /// Per resource, per unit: the entity the unit belongs to.
    pub(super) unit_entity: Vec<Vec<usize>>,
    pub(super) sensors: Arc<Sensors>,
    /// The GPUs' processes; per entity, its MIG devices' positions in their readings (every
    /// compute instance of a GPU instance: each has its own processes).
    pub(super) processes: Arc<Processes>,
    pub(super) entity_process_migs: Vec<Vec<usize>>,
    /// The host root (the host's `/proc` for the processes' cgroups).
    pub(super) root: PathBuf,
}

/// What one set of GPU series describes, as dcgm-exporter cuts them: a whole GPU, or one GPU
/// instance of a MIG-enabled GPU (its compute instances share it).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entity {
    /// Position of the GPU (the instance's parent) in the node's GPU list.
    pub(super) gpu: usize,
    pub(super) instance: Option<Instance>,
}

/// A MIG GPU instance.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Instance {
    /// `GPU_I_ID`: the GPU instance id.
    pub(super) id: u32,
    /// `GPU_I_PROFILE`: the GPU instance's profile (`1g.10gb`).
    pub(super) profile: String,
    /// Index of its (first) MIG device in the sensors' MIG readings.
    pub(super) mig: usize,
}

/// The pod a GPU series is attributed to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Holder {
    pub(super) namespace: String,
    pub(super) pod: String,
    pub(super) container: String,
}

impl Served {
    /// The entities of `resources` and their sensors (located once per round).
    pub(super) fn new(resources: Vec<Arc<GpuResource>>) -> Served {
        let mut entities: Vec<Entity> = Vec::new();
        let mut migs: Vec<MigDevice> = Vec::new();
        let mut process_migs: Vec<MigDevice> = Vec::new();
        let mut entity_process_migs: Vec<Vec<usize>> = Vec::new();
        let mut unit_entity = Vec::new();
        for r in &resources {
            let mut of_units = Vec::new();
            for unit in r.units() {
                let gi = unit.mig.as_ref().map(|m| m.gpu_instance);
                let found = entities
                    .iter()
                    .position(|e| e.gpu == unit.gpu && e.instance.as_ref().map(|i| i.id) == gi);
                let e = found.unwrap_or_else(|| {
                    let instance = unit.mig.as_ref().map(|m| {
                        migs.push(m.clone());
                        Instance {
                            id: m.gpu_instance,
                            profile: m.gpu_instance_profile().to_string(),
                            mig: migs.len() - 1,
                        }
                    });
                    entities.push(Entity {
                        gpu: unit.gpu,
                        instance,
                    });
                    entity_process_migs.push(Vec::new());
                    entities.len() - 1
                });
                if let Some(m) = &unit.mig {
                    let p = match process_migs.iter().position(|p| p.uuid == m.uuid) {
                        Some(p) => p,
                        None => {
                            process_migs.push(m.clone());
                            process_migs.len() - 1
                        }
                    };
                    if !entity_process_migs[e].contains(&p) {
                        entity_process_migs[e].push(p);
                    }
                }
                of_units.push(e);
            }
            unit_entity.push(of_units);
        }
        let (sensors, processes, root) = match resources.first() {
            Some(r) => (
                Sensors::locate(r.root(), r.platform(), r.gpus(), &migs, r.nvml().cloned()),
                Processes::locate(
                    r.root(),
                    r.platform(),
                    r.gpus(),
                    &process_migs,
                    r.nvml().cloned(),
                ),
                r.root().to_path_buf(),
            ),
            None => (
                Sensors::locate(Path::new("/"), None, &[], &[], None),
                Processes::locate(Path::new("/"), None, &[], &[], None),
                PathBuf::from("/"),
            ),
        };
        Served {
            resources,
            entities,
            unit_entity,
            sensors: Arc::new(sensors),
            processes: Arc::new(processes),
            entity_process_migs,
            root,
        }
    }
}

impl Served {
    /// The entity an advertised device ID of resource `r` belongs to.
    pub(super) fn entity_of(&self, r: usize, device_id: &str) -> Option<usize> {
        let unit = self.resources[r].physical_of(device_id)?;
        self.unit_entity[r].get(unit).copied()
    }

    /// The position of the resource named `name`.
    pub(super) fn resource_position(&self, name: &str) -> Option<usize> {
        self.resources.iter().position(|r| r.name() == name)
    }
}

/// Per entity, the containers holding it (sorted, each once); empty lists without a list.
pub(super) fn holders_per_entity(
    served: &Served,
    list: Option<&[DeviceHolder]>,
) -> Vec<Vec<Holder>> {
    let mut per_entity = vec![Vec::new(); served.entities.len()];
    for d in list.unwrap_or_default() {
        let Some(r) = served.resource_position(&d.resource) else {
            continue;
        };
        if let Some(e) = served.entity_of(r, &d.device_id) {
            per_entity[e].push(Holder {
                namespace: d.namespace.clone(),
                pod: d.pod.clone(),
                container: d.container.clone(),
            });
        }
    }
    for list in &mut per_entity {
        list.sort();
        list.dedup();
    }
    per_entity
}
