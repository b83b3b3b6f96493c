//! The limits a container on a shared GPU gets: MPS replicas (each replica a compute share
//! and a memory cap) and memory units (N units = N × unit of GPU memory, all on one GPU).
//! Where MPS serves the resource the limits are enforced by it; elsewhere they are accounted
//! only, and the container's environment says so (docs/sharing.md).

use crate::mps::MpsPaths;

/// The GPU memory limit a container holding some advertised device IDs of a resource was
/// given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    /// MPS enforces it (else it is accounting only).
    pub enforced: bool,
}

/// How a resource's containers are limited.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub kind: LimitKind,
    /// Where MPS runs for this resource; `None`: not enforced, `not_enforced` says why.
    pub mps: Option<MpsPaths>,
    pub not_enforced: Option<String>,
}

/// The two ways of sharing with limits.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitKind {
    /// MPS replicas: a container gets its replica's share of the GPU (per unit).
    Replicas {
        /// Per unit: each replica's memory cap in MiB (`None`: the GPU's memory is unknown).
        mib: Vec<Option<u64>>,
        active_thread_percentage: u32,
    },
    /// Memory units of `unit_mib` MiB; a container's limit is the units it holds.
    Memory { unit_mib: u64 },
}
