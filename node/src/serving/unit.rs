//! One allocatable device: a whole GPU or a MIG device, its IDs and its CDI name.

use edgegpu_platform::cdi;

use super::device_specs;
use crate::config::DeviceIdStrategy;
use crate::gpu::{Gpu, MigDevice, Platform};

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
