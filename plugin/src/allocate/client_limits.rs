//! What a container on a resource with limits gets: [`GpuResource`]'s memory limit and MPS
//! client setup, computed from the types in [`super::limits`]. A module apart from
//! limits.rs, whose types `mod.rs` holds, so that limits.rs does not need `mod.rs` in turn.

use super::{AllocateError, GpuResource};
use edgegpu_node::mps::plan::{ClientLimit, ClientSetup};
use edgegpu_node::serving::limits::{LimitKind, MemoryLimit};

const MIB: u64 = 1 << 20;

impl GpuResource {
    /// The GPU memory limit of a container holding `device_ids` of this resource; `None`
    /// when the resource sets none (whole GPUs, time-slicing) or the IDs are not ours.
    pub fn memory_limit(&self, device_ids: &[String]) -> Option<MemoryLimit> {
        let limits = self.limits.as_ref()?;
        let physical: Vec<usize> = device_ids
            .iter()
            .map(|id| self.physical_of(id))
            .collect::<Option<_>>()?;
        let mib = match &limits.kind {
            LimitKind::Replicas { mib, .. } => {
                // One MPS client per GPU: replicas of one GPU share that client's cap.
                let mut gpus = physical.clone();
                gpus.sort_unstable();
                gpus.dedup();
                gpus.iter()
                    .map(|p| mib.get(*p).copied().flatten())
                    .sum::<Option<u64>>()?
            }
            LimitKind::Memory { unit_mib } => unit_mib * physical.len() as u64,
        };
        Some(MemoryLimit {
            bytes: mib * MIB,
            enforced: limits.mps.is_some(),
        })
    }

    /// What `Allocate` adds for limits to a container given `ids` (on units `physical`), or
    /// an error where the request cannot be served with limits.
    pub(crate) fn client_setup(
        &self,
        physical: &[usize],
        ids: &[String],
    ) -> Result<Option<ClientSetup>, AllocateError> {
        let Some(limits) = &self.limits else {
            return Ok(None);
        };
        let device = |p: usize| {
            let gpu = &self.gpus[self.units[p].gpu];
            if gpu.uuid.starts_with("GPU-") {
                gpu.uuid.clone()
            } else {
                // A Jetson: its one GPU is CUDA device 0.
                "0".to_string()
            }
        };
        let (client_limits, pct) = match &limits.kind {
            LimitKind::Replicas {
                mib,
                active_thread_percentage,
            } => (
                physical
                    .iter()
                    .map(|p| ClientLimit {
                        device: device(*p),
                        mib: mib.get(*p).copied().flatten(),
                    })
                    .collect(),
                Some(*active_thread_percentage),
            ),
            LimitKind::Memory { unit_mib } => {
                if physical.len() > 1 {
                    let units_per_gpu = physical
                        .iter()
                        .map(|p| {
                            let n = ids
                                .iter()
                                .filter(|id| self.physical_of(id) == Some(*p))
                                .count();
                            (self.base_ids[*p].clone(), n)
                        })
                        .collect();
                    return Err(AllocateError::UnitsOfSeveralGpus {
                        resource: self.name.clone(),
                        units_per_gpu,
                    });
                }
                (
                    vec![ClientLimit {
                        device: device(physical[0]),
                        mib: Some(unit_mib * ids.len() as u64),
                    }],
                    None,
                )
            }
        };
        Ok(Some(ClientSetup {
            mps: limits.mps.clone(),
            not_enforced: limits.not_enforced.clone(),
            limits: client_limits,
            active_thread_percentage: pct,
        }))
    }
}
