//! Can this node's GPUs run MPS with limits? Decided from facts the plugin already has (the
//! platform table, the L4T release, MIG, NVML's compute capability), so a config asking for
//! MPS where it cannot work is refused at start with the reason. Whether the host really has
//! the control binary only the companion can see: it reports that in its status file.

use std::path::{Path, PathBuf};

use edgegpu_platform::Mps;

use crate::gpu::{under_root, Gpu, Platform};

/// Volta MPS, the first with per-client limits (NVIDIA's MPS documentation: "Volta MPS"
/// provides the execution-resource provisioning and memory limits).
const VOLTA: (u32, u32) = (7, 0);

/// Where hosts keep `nvidia-cuda-mps-control`, searched in order under the root: L4T's CUDA
/// utilities and distribution driver packages (`/usr/bin`), the driver's `.run` installer and
/// container images (`/usr/local/nvidia/bin`), CUDA toolkits (`/usr/local/cuda/bin`).
pub const CONTROL_BINARY_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/nvidia/bin",
    "/usr/local/cuda/bin",
    "/bin",
];

/// The control binary's name.
pub const CONTROL_BINARY: &str = "nvidia-cuda-mps-control";

/// Why MPS cannot serve GPUs on this node, or `Ok` where it can (the binary aside).
/// `mig`: the resource serves MIG devices. `capability`: the compute capability of the GPU at
/// a position of `gpus`, where known (NVML); GPUs without one are not refused for it.
pub fn check(
    platform: &Platform,
    gpus: &[Gpu],
    mig: bool,
    capability: impl Fn(usize) -> Option<(u32, u32)>,
) -> Result<(), String> {
    if mig {
        // NVIDIA's plugin refuses it too ("sharing using MPS is not supported for MIG
        // devices", internal/plugin/mps.go); MPS inside a MIG instance needs one daemon per
        // instance, which a replica-per-GPU design cannot express.
        return Err(
            "MPS is not supported for MIG devices (NVIDIA's plugin refuses it too); \
                    share MIG devices with time-slicing"
                .into(),
        );
    }
    match platform {
        Platform::Tegra { detection, .. } => {
            let Some(generation) = detection.generation else {
                return Err(
                    "the Jetson generation could not be determined, so whether it runs MPS is unknown"
                        .into(),
                );
            };
            match generation.mps {
                Mps::Unsupported(reason) => Err(format!("{}: {reason}", generation.name)),
                Mps::Volta { binary_since_l4t } => {
                    let release = detection.l4t.as_deref().and_then(release);
                    match (release, detection.l4t.as_deref()) {
                        (Some(r), Some(l4t)) if r < binary_since_l4t => Err(format!(
                            "L4T {l4t} ships no nvidia-cuda-mps-control: L4T's CUDA utilities carry it from R{}.{} on ({})",
                            binary_since_l4t.0,
                            binary_since_l4t.1,
                            match binary_since_l4t {
                                (36, _) => "JetPack 6.1",
                                _ => "JetPack 7",
                            }
                        )),
                        _ => Ok(()),
                    }
                }
            }
        }
        Platform::Nvml => {
            for (i, gpu) in gpus.iter().enumerate() {
                if let Some(cc) = capability(i) {
                    if cc < VOLTA {
                        return Err(format!(
                            "GPU {} ({}) has compute capability {}.{}: MPS limits need Volta (7.0) or later",
                            gpu.index, gpu.uuid, cc.0, cc.1
                        ));
                    }
                }
            }
            Ok(())
        }
    }
}

/// `36.4.3` → (36, 4).
fn release(l4t: &str) -> Option<(u32, u32)> {
    let mut parts = l4t.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// The control binary under `root`: `explicit` (a host path) if given, else the first of
/// [`CONTROL_BINARY_DIRS`] that has it. Returns the host path (as seen from `root`).
pub fn find_control_binary(root: &Path, explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        let seen = under_root(root, &path.to_string_lossy());
        return if seen.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(format!(
                "{} does not exist on the host (--mps-control-binary)",
                path.display()
            ))
        };
    }
    for dir in CONTROL_BINARY_DIRS {
        let host = format!("{dir}/{CONTROL_BINARY}");
        if under_root(root, &host).is_file() {
            return Ok(PathBuf::from(host));
        }
    }
    Err(format!(
        "the host has no {CONTROL_BINARY} (looked in {}); it comes with the NVIDIA driver \
         (discrete GPUs), L4T's nvidia-l4t-cuda-utils from JetPack 6.1 on, or meta-tegra's \
         tegra-cuda-utils on Yocto",
        CONTROL_BINARY_DIRS.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases() {
        assert_eq!(release("36.4.3"), Some((36, 4)));
        assert_eq!(release("35.4.1"), Some((35, 4)));
        assert_eq!(release("38"), Some((38, 0)));
        assert_eq!(release("r36"), None);
    }
}
