//! Which processes use a GPU, and how much of its memory each holds, read when asked (a
//! Prometheus scrape) and never in the background. Per-pod GPU memory (docs/metrics.md)
//! attributes these processes to pods.
//!
//! | GPU | Source |
//! |---|---|
//! | discrete, and any GPU NVML sees on OpenRM (Thor) | NVML `nvmlDeviceGetComputeRunningProcesses_v3`: PID and used memory per process with a compute context (under MPS every client, plus the MPS server itself) |
//! | MIG device | the same query on the MIG device's handle: its own processes |
//! | Jetson on nvgpu (Nano … Orin) | the nvmap allocator's per-client sizes in debugfs (`edgegpu_platform::host::NVMAP_IOVMM_MAPS`); the release's NVML answers identity only |
//!
//! A GPU without per-process figures (NVML `NOT_SUPPORTED`, an NVML without the `_v3` query,
//! a lost GPU, debugfs not mounted or not readable) reads `None`, never an empty list: "no
//! process" and "cannot tell" stay apart. A process whose used memory NVML reports as
//! `NVML_VALUE_NOT_AVAILABLE` is kept with `None` bytes.
//!
//! PIDs: NVML reports them in the caller's PID namespace (the open kernel modules convert
//! each client's PID with `pid_vnr`, `kernel-open/nvidia/os-interface.c` `os_find_ns_pid`,
//! and leave out processes the caller cannot see, `src/nvidia/src/kernel/gpu/gpu_rmapi.c`
//! `_gpuConvertPid`), so a plugin outside the host's PID namespace sees none of the pods'
//! processes: its GPUs then read `None` (cannot tell), not an empty list, which would claim an
//! idle GPU. Whether the plugin is in the host's namespace is read from `NSpid` of
//! `<root>/proc/self/status`: the host's procfs lists one PID per namespace level from the
//! host's down (Linux `fs/proc/array.c`, `proc_pid_status`). nvmap prints the kernel's global
//! PID of the process (its thread-group leader).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use edgegpu_platform::host::{l4t_major, parse_nvmap_maps, NVMAP_IOVMM_MAPS};
use edgegpu_platform::GpuDriver;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::discovery::{Gpu, MigDevice, Platform};
use super::under_root;

/// One process on one GPU (or MIG device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcess {
    /// The process ID, as the host's `/proc` names it (see the module's note on NVML).
    pub pid: u32,
    /// GPU memory the process holds, bytes; `None`: the driver does not say.
    pub used_bytes: Option<u64>,
}

/// One reading of every GPU (in discovery order) and every MIG device asked for (in the
/// order given to [`Processes::locate`]): the processes, or `None` where the driver gives no
/// per-process figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessReadings {
    pub gpus: Vec<Option<Vec<GpuProcess>>>,
    pub migs: Vec<Option<Vec<GpuProcess>>>,
}

/// Where the GPUs' processes come from.
enum GpuSource {
    /// NVML, per GPU by UUID (`None`: NVML does not see that GPU).
    Nvml {
        nvml: Arc<Nvml>,
        uuids: Vec<Option<String>>,
    },
    /// A Jetson's one GPU: the nvmap file; NVML's device 0 only where the driver is not known
    /// (the file is then asked first).
    Nvmap {
        maps: PathBuf,
        nvml: Option<Arc<Nvml>>,
    },
    None,
}

/// Whether this process is in the host's PID namespace, from the host's procfs under `root`:
/// `NSpid` has one entry per namespace level from the procfs's down, so one entry = the
/// host's. `None` where the host's `/proc` is not there (nothing to tell by).
fn in_host_pid_namespace(root: &Path) -> Option<bool> {
    let status = std::fs::read_to_string(under_root(root, "/proc/self/status")).ok()?;
    nspid_levels(&status).map(|levels| levels == 1)
}

/// How many PIDs the `NSpid:` line of a `/proc/<pid>/status` lists.
fn nspid_levels(status: &str) -> Option<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let n = line.split_whitespace().count();
    (n > 0).then_some(n)
}

/// A MIG device: its parent's NVML UUID and its index on the parent.
struct MigTarget {
    parent: Option<String>,
    index: u32,
}

/// The process sources of this node's GPUs and of the MIG devices asked for.
pub struct Processes {
    gpus: GpuSource,
    migs: Vec<MigTarget>,
    nvml: Option<Arc<Nvml>>,
}

impl Processes {
    /// Where the processes of `gpus` and of the MIG devices `migs` are read, under `root`.
    /// Reads nothing.
    pub fn locate(
        root: &Path,
        platform: Option<&Platform>,
        gpus: &[Gpu],
        migs: &[MigDevice],
        nvml: Option<Arc<Nvml>>,
    ) -> Processes {
        // NVML cannot see the pods' processes from another PID namespace: say nothing rather
        // than "no process".
        let nvml = match in_host_pid_namespace(root) {
            Some(false) => {
                tracing::info!("not in the host's PID namespace: NVML cannot list the GPUs' processes (per-pod GPU memory needs hostPID on discrete GPUs)");
                None
            }
            _ => nvml,
        };
        let gpu_source = match (platform, &nvml) {
            (Some(Platform::Nvml), Some(nvml)) => GpuSource::Nvml {
                nvml: nvml.clone(),
                uuids: gpus.iter().map(|g| g.nvml_uuid.clone()).collect(),
            },
            (Some(Platform::Tegra { detection, .. }), _) => {
                let driver = detection
                    .generation
                    .zip(detection.l4t.as_deref().and_then(l4t_major))
                    .and_then(|(g, l4t)| g.nvml_answers(l4t))
                    .map(|a| a.driver);
                match (driver, &nvml) {
                    // OpenRM (Thor): no nvmap; NVML lists the processes.
                    (Some(GpuDriver::OpenRm), Some(nvml)) => GpuSource::Nvml {
                        nvml: nvml.clone(),
                        uuids: gpus.iter().map(|g| g.nvml_uuid.clone()).collect(),
                    },
                    (Some(GpuDriver::OpenRm), None) => GpuSource::None,
                    // nvgpu: nvmap. Its NVML (identity only) is not asked.
                    (Some(GpuDriver::Nvgpu), _) => GpuSource::Nvmap {
                        maps: under_root(root, NVMAP_IOVMM_MAPS),
                        nvml: None,
                    },
                    (None, nvml) => GpuSource::Nvmap {
                        maps: under_root(root, NVMAP_IOVMM_MAPS),
                        nvml: nvml.clone(),
                    },
                }
            }
            _ => GpuSource::None,
        };
        let migs = migs
            .iter()
            .map(|m| MigTarget {
                parent: gpus.get(m.parent).and_then(|g| g.nvml_uuid.clone()),
                index: m.index,
            })
            .collect();
        Processes {
            gpus: gpu_source,
            migs,
            nvml,
        }
    }

    /// One reading. Blocks on NVML calls and a debugfs read: run it off the async runtime.
    pub fn read(&self) -> ProcessReadings {
        let gpus = match &self.gpus {
            GpuSource::Nvml { nvml, uuids } => uuids
                .iter()
                .map(|uuid| {
                    let uuid = uuid.as_deref()?;
                    nvml_processes(nvml.device_by_uuid(uuid))
                })
                .collect(),
            GpuSource::Nvmap { maps, nvml } => {
                let from_nvmap = read_nvmap(maps);
                let reading = match (from_nvmap, nvml) {
                    (Some(p), _) => Some(p),
                    (None, Some(nvml)) => nvml_processes(nvml.device_by_index(0)),
                    (None, None) => None,
                };
                vec![reading]
            }
            GpuSource::None => Vec::new(),
        };
        let migs = self
            .migs
            .iter()
            .map(|m| {
                let nvml = self.nvml.as_ref()?;
                let parent = m.parent.as_deref()?;
                let device = nvml
                    .device_by_uuid(parent)
                    .and_then(|d| d.mig_device_by_index(m.index));
                nvml_processes(device)
            })
            .collect();
        ProcessReadings { gpus, migs }
    }
}

/// The processes NVML lists for `device`; `None` where it answers an error.
fn nvml_processes(device: Result<Device<'_>, NvmlError>) -> Option<Vec<GpuProcess>> {
    let processes = device.ok()?.running_compute_processes().ok()?;
    Some(
        processes
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect(),
    )
}

/// The nvmap file's processes; `None` when it cannot be read (debugfs not mounted, not
/// root): then nothing is known, which is not "no process".
fn read_nvmap(maps: &Path) -> Option<Vec<GpuProcess>> {
    let text = std::fs::read_to_string(maps).ok()?;
    Some(
        parse_nvmap_maps(&text)
            .into_iter()
            .map(|(pid, bytes)| GpuProcess {
                pid,
                used_bytes: Some(bytes),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_counts_namespace_levels() {
        // The host's procfs: a process of the host, and one in a pod (host PID, pod PID).
        assert_eq!(nspid_levels("Name:\tx\nNSpid:\t4242\n"), Some(1));
        assert_eq!(nspid_levels("Name:\tx\nNSpid:\t4242\t7\n"), Some(2));
        // Kernels before 4.1 have no NSpid line.
        assert_eq!(nspid_levels("Name:\tx\nPid:\t4242\n"), None);
        let root = tempfile::tempdir().unwrap();
        assert_eq!(in_host_pid_namespace(root.path()), None);
        std::fs::create_dir_all(root.path().join("proc/self")).unwrap();
        std::fs::write(root.path().join("proc/self/status"), "NSpid:\t4242\t7\n").unwrap();
        assert_eq!(in_host_pid_namespace(root.path()), Some(false));
        std::fs::write(root.path().join("proc/self/status"), "NSpid:\t4242\n").unwrap();
        assert_eq!(in_host_pid_namespace(root.path()), Some(true));
    }
}
