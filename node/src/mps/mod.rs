//! CUDA MPS: one GPU shared by several containers at once, each with a compute share and a
//! device-memory limit (docs/sharing.md).
//!
//! Two processes take part, with one source of truth, the `--config` file:
//! - the device plugin decides, per served resource, whether MPS serves it ([`plan`]: the
//!   platform's support from [`support`], the limits of each replica or memory unit), waits
//!   for the control daemon before advertising its devices as healthy ([`watch`]), and hands
//!   each container the pipe directory, `/dev/shm` and its limits in `Allocate`;
//! - the companion, `edgegpu-device-plugin mps-control-daemon` ([`daemon`]), runs the host's
//!   `nvidia-cuda-mps-control -f` for each such resource, sets the daemon's default limits
//!   ([`control`]), restarts it when it dies, stops it on SIGTERM, and reports its state in a
//!   status file ([`status`]) the plugin watches.
//!
//! The companion needs privileges the plugin does not (the GPU's device nodes, the host's
//! driver binaries, its process IDs); keeping it a separate container keeps the plugin
//! unprivileged. Nothing here uses NVML device minor numbers (a Jetson has none): GPUs are
//! named by CUDA ordinal and, where known, UUID.
//!
//! Who writes what under `--mps-root` (docs/security.md): the plugin only `desired/`; the
//! companion the rest; client pods their resource's `pipe/` and `shm/`. The companion trusts
//! none of what others can write there: it reaches every file through [`beneath`] and checks
//! `daemons.json` ([`status::Desired::validate`]) before it acts on it.

pub mod beneath;
pub mod compute_mode;
pub mod control;
pub mod daemon;
pub mod plan;
pub mod status;
pub mod support;
pub mod watch;

use std::path::{Path, PathBuf};

/// The names inside a resource's directory.
pub const PIPE_DIR: &str = "pipe";
pub const LOG_DIR: &str = "log";
pub const SHM_DIR: &str = "shm";
pub const STATUS_FILE: &str = "status.json";
/// The plugin's folder under the MPS root (`daemons.json`); the companion only reads it.
pub const DESIRED_DIR: &str = "desired";

/// Where one resource's MPS files live under `--mps-root`: the same paths in the companion,
/// the plugin and client containers (MPS needs the pipe directory identical for the daemon
/// and its clients).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsPaths {
    /// `<root>/<resource>/pipe`: the control daemon's sockets (`CUDA_MPS_PIPE_DIRECTORY`).
    pub pipe: PathBuf,
    /// `<root>/<resource>/log`: `control.log`, `server.log` (`CUDA_MPS_LOG_DIRECTORY`).
    pub log: PathBuf,
    /// `<root>/<resource>/status.json`: the companion's report.
    pub status: PathBuf,
    /// `<root>/<resource>/shm`: mounted as `/dev/shm` into the resource's daemon and every
    /// client of it (MPS clients' page-locked host memory lives there); one per resource, so
    /// a pod reaches no other resource's clients.
    pub shm: PathBuf,
}

impl MpsPaths {
    /// The paths of `resource` (e.g. `nvidia.com/gpu`, which nests) under `mps_root`.
    pub fn new(mps_root: &Path, resource: &str) -> MpsPaths {
        let dir = mps_root.join(resource);
        MpsPaths {
            pipe: dir.join(PIPE_DIR),
            log: dir.join(LOG_DIR),
            status: dir.join(STATUS_FILE),
            shm: dir.join(SHM_DIR),
        }
    }

    /// The resource's directory (holds pipe, log and the status file).
    pub fn dir(&self) -> &Path {
        self.status.parent().expect("status.json has a parent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_nest_the_resource_name() {
        let p = MpsPaths::new(Path::new("/run/edgegpu/mps"), "nvidia.com/gpu");
        assert_eq!(p.pipe, Path::new("/run/edgegpu/mps/nvidia.com/gpu/pipe"));
        assert_eq!(p.log, Path::new("/run/edgegpu/mps/nvidia.com/gpu/log"));
        assert_eq!(p.dir(), Path::new("/run/edgegpu/mps/nvidia.com/gpu"));
        assert_eq!(p.shm, Path::new("/run/edgegpu/mps/nvidia.com/gpu/shm"));
    }
}
