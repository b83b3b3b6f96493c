//! The names of the CDI devices: what `edgegpu-node-setup cdi generate` defines in its spec
//! and what the device plugin's CDI strategies (`cdi-annotations`, `cdi-cri`) hand out. Both
//! take every name from here, so a container never asks for a device the spec lacks
//! (docs/cdi.md). The names follow `nvidia-ctk cdi generate` where it has one; a MIG device is
//! named after what the driver's procfs gives (docs/cdi.md, "Names next to nvidia-ctk's").

use std::fmt::Display;

/// The CDI kind (vendor/class) of every device: `nvidia.com/gpu`, as nvidia-ctk's.
pub const KIND: &str = "nvidia.com/gpu";

/// A Jetson's integrated GPU, whatever the ID strategy (`nvidia-ctk cdi generate
/// --mode=csv` names it `0`).
pub const INTEGRATED_GPU: &str = "0";

/// The device holding every GPU's nodes.
pub const ALL: &str = "all";

/// A GPU by its index (NVML's enumeration order): `0`.
pub fn gpu_by_index(index: impl Display) -> String {
    index.to_string()
}

/// A GPU by its UUID (`GPU-…`), as NVML and the driver's procfs give it.
pub fn gpu_by_uuid(uuid: &str) -> String {
    uuid.to_string()
}

/// A MIG device: its GPU's index, GPU instance and compute instance, `0:gi1:ci0`.
pub fn mig_device(gpu_index: impl Display, gpu_instance: u32, compute_instance: u32) -> String {
    format!("{gpu_index}:gi{gpu_instance}:ci{compute_instance}")
}

/// The fully qualified name a container runtime resolves: `nvidia.com/gpu=<name>`.
pub fn qualified(name: &str) -> String {
    format!("{KIND}={name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(qualified(INTEGRATED_GPU), "nvidia.com/gpu=0");
        assert_eq!(qualified(ALL), "nvidia.com/gpu=all");
        assert_eq!(gpu_by_index(1u32), "1");
        assert_eq!(gpu_by_index(1usize), "1");
        assert_eq!(gpu_by_uuid("GPU-3b7e0c2a"), "GPU-3b7e0c2a");
        assert_eq!(mig_device(0u32, 1, 0), "0:gi1:ci0");
        assert_eq!(
            qualified(&mig_device(2usize, 7, 3)),
            "nvidia.com/gpu=2:gi7:ci3"
        );
    }
}
