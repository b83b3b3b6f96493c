//! The GPU memory limit of a container, for `edgegpu_pod_gpu_memory_limit_bytes`
//! (docs/metrics.md).

/// A GPU memory limit: its size, and whether something enforces it (or it is only what the
/// container was promised).
pub struct MemoryLimit {
    pub bytes: u64,
    pub enforced: bool,
}

impl crate::allocate::GpuResource {
    /// The GPU memory limit a container holding these advertised device IDs of this resource
    /// was given (the metrics ask per GPU or MIG GPU instance, with the IDs the container
    /// holds on it); `None`: no limit.
    pub fn memory_limit(&self, device_ids: &[String]) -> Option<MemoryLimit> {
        // Placeholder until memory-sized units are merged: no resource sets a limit yet.
        let _ = device_ids;
        None
    }
}
