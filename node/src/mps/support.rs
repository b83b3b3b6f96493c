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

/// Why MPS cannot serve a resource's GPUs on this node ([`check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MpsUnsupported {
    // NVIDIA's plugin refuses it too ("sharing using MPS is not supported for MIG devices",
    // internal/plugin/mps.go); MPS inside a MIG instance needs one daemon per instance, which
    // a replica-per-GPU design cannot express.
    #[error("MPS is not supported for MIG devices (NVIDIA's plugin refuses it too); share MIG devices with time-slicing")]
    Mig,
    #[error("the Jetson generation could not be determined, so whether it runs MPS is unknown")]
    UnknownJetson,
    /// The platform table says this Jetson generation cannot run MPS, and why.
    #[error("{generation}: {reason}")]
    Jetson {
        generation: &'static str,
        reason: &'static str,
    },
    /// The L4T release predates the CUDA utilities that ship the control binary.
    #[error("L4T {l4t} ships no nvidia-cuda-mps-control: L4T's CUDA utilities carry it from R{}.{} on ({})", .binary_since.0, .binary_since.1, jetpack_of(*.binary_since))]
    L4tWithoutBinary {
        l4t: String,
        binary_since: (u32, u32),
    },
    #[error("GPU {index} ({uuid}) has compute capability {}.{}: MPS limits need Volta (7.0) or later", .capability.0, .capability.1)]
    BeforeVolta {
        index: u32,
        uuid: String,
        capability: (u32, u32),
    },
}

/// The JetPack release that brought L4T release `l4t`'s CUDA utilities.
fn jetpack_of(l4t: (u32, u32)) -> &'static str {
    match l4t {
        (36, _) => "JetPack 6.1",
        _ => "JetPack 7",
    }
}

/// Why MPS cannot serve GPUs on this node, or `Ok` where it can (the binary aside).
/// `mig`: the resource serves MIG devices. `capability`: the compute capability of the GPU at
/// a position of `gpus`, where known (NVML); GPUs without one are not refused for it.
pub fn check(
    platform: &Platform,
    gpus: &[Gpu],
    mig: bool,
    capability: impl Fn(usize) -> Option<(u32, u32)>,
) -> Result<(), MpsUnsupported> {
    if mig {
        return Err(MpsUnsupported::Mig);
    }
    match platform {
        Platform::Tegra { detection, .. } => {
            let Some(generation) = detection.generation else {
                return Err(MpsUnsupported::UnknownJetson);
            };
            match generation.mps {
                Mps::Unsupported(reason) => Err(MpsUnsupported::Jetson {
                    generation: generation.name,
                    reason,
                }),
                Mps::Volta { binary_since_l4t } => {
                    let release = detection.l4t.as_deref().and_then(release);
                    match (release, detection.l4t.as_deref()) {
                        (Some(r), Some(l4t)) if r < binary_since_l4t => {
                            Err(MpsUnsupported::L4tWithoutBinary {
                                l4t: l4t.to_string(),
                                binary_since: binary_since_l4t,
                            })
                        }
                        _ => Ok(()),
                    }
                }
            }
        }
        Platform::Nvml => {
            for (i, gpu) in gpus.iter().enumerate() {
                if let Some(cc) = capability(i) {
                    if cc < VOLTA {
                        return Err(MpsUnsupported::BeforeVolta {
                            index: gpu.index,
                            uuid: gpu.uuid.clone(),
                            capability: cc,
                        });
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

/// Why the host has no control binary to run ([`find_control_binary`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoControlBinary {
    /// `--mps-control-binary` names a host path that is not a file.
    #[error("{path} does not exist on the host (--mps-control-binary)")]
    Explicit { path: PathBuf },
    /// None of [`CONTROL_BINARY_DIRS`] has it.
    #[error("the host has no {CONTROL_BINARY} (looked in {}); it comes with the NVIDIA driver (discrete GPUs), L4T's nvidia-l4t-cuda-utils from JetPack 6.1 on, or meta-tegra's tegra-cuda-utils on Yocto", CONTROL_BINARY_DIRS.join(", "))]
    NotInstalled,
}

/// The control binary under `root`: `explicit` (a host path) if given, else the first of
/// [`CONTROL_BINARY_DIRS`] that has it. Returns the host path (as seen from `root`).
pub fn find_control_binary(
    root: &Path,
    explicit: Option<&Path>,
) -> Result<PathBuf, NoControlBinary> {
    if let Some(path) = explicit {
        let seen = under_root(root, &path.to_string_lossy());
        return if seen.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(NoControlBinary::Explicit {
                path: path.to_path_buf(),
            })
        };
    }
    for dir in CONTROL_BINARY_DIRS {
        let host = format!("{dir}/{CONTROL_BINARY}");
        if under_root(root, &host).is_file() {
            return Ok(PathBuf::from(host));
        }
    }
    Err(NoControlBinary::NotInstalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_control_binary_says_where_it_was_looked_for() {
        let root = tempfile::tempdir().unwrap();
        let e = find_control_binary(root.path(), None).unwrap_err();
        assert_eq!(e, NoControlBinary::NotInstalled);
        assert!(
            e.to_string()
                .contains("(looked in /usr/bin, /usr/sbin, /usr/local/nvidia/bin"),
            "{e}"
        );
        let explicit = Path::new("/opt/mps/nvidia-cuda-mps-control");
        let e = find_control_binary(root.path(), Some(explicit)).unwrap_err();
        assert_eq!(
            e,
            NoControlBinary::Explicit {
                path: explicit.to_path_buf()
            }
        );
        std::fs::create_dir_all(root.path().join("usr/local/cuda/bin")).unwrap();
        std::fs::write(
            root.path().join("usr/local/cuda/bin").join(CONTROL_BINARY),
            "",
        )
        .unwrap();
        assert_eq!(
            find_control_binary(root.path(), None),
            Ok(PathBuf::from("/usr/local/cuda/bin/nvidia-cuda-mps-control"))
        );
    }

    #[test]
    fn mig_devices_are_refused_before_anything_else() {
        assert_eq!(
            check(&Platform::Nvml, &[], true, |_| Some((5, 0))),
            Err(MpsUnsupported::Mig)
        );
        assert_eq!(check(&Platform::Nvml, &[], false, |_| None), Ok(()));
    }

    #[test]
    fn releases() {
        assert_eq!(release("36.4.3"), Some((36, 4)));
        assert_eq!(release("35.4.1"), Some((35, 4)));
        assert_eq!(release("38"), Some((38, 0)));
        assert_eq!(release("r36"), None);
    }
}
