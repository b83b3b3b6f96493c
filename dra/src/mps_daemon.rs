//! The MPS control daemon this driver asks the node's MPS companion for (`--mps`): one daemon
//! for the GPUs it publishes, which claims with `sharing.strategy: MPS` join
//! ([`crate::sharing::MpsHost::ready`]).
//!
//! The companion (`edgegpu-device-plugin mps-control-daemon`) runs whatever
//! `<mps-root>/desired/daemons.json` lists, on a device-plugin node and on a DRA node alike.
//! On a DRA node this driver writes that file, and only while it holds the node's GPU kind
//! ([`edgegpu_node::ownership`]): the device plugin writes it on the nodes where it serves the
//! GPUs, and the two never serve GPUs on one node, so neither overwrites the other's list.
//!
//! The daemon differs from the plugin's in two ways, both because on a DRA node each claim
//! says how it shares its GPU:
//! - no default limits: each client's limits are its claim's, as client-side `CUDA_MPS_*`
//!   variables (a daemon default would cap every claim alike);
//! - no GPU in `EXCLUSIVE_PROCESS`: the plugin may make every GPU of an MPS resource
//!   exclusive because all its devices go through MPS, but here the same GPUs serve exclusive
//!   and time-sliced claims too, whose processes run outside MPS (and one MPS server holds a
//!   context on every GPU it sees, so one MPS claim would lock every other claim's processes
//!   out of all of them).

use std::path::{Path, PathBuf};

use edgegpu_node::gpu::discovery::Discovered;
use edgegpu_node::mps::plan::DaemonSettings;
use edgegpu_node::mps::status::{self, Desired};
use edgegpu_node::mps::support::{self, MpsUnsupported};
use edgegpu_node::serving::plan::GpuFacts;

/// Why this node gets no MPS daemon although `--mps` asks for one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoDaemon {
    /// No whole GPU is published: none found, or every one is split into MIG devices.
    #[error("this driver publishes no whole GPU (MPS does not serve MIG devices)")]
    NoWholeGpu,
    #[error("{0}")]
    Unsupported(#[from] MpsUnsupported),
}

/// `<mps-root>/desired/daemons.json` could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot tell the MPS companion which daemon to run: writing {file}: {source} (<mps-root>/desired must be writable by the DRA driver)")]
pub struct PublishError {
    pub file: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The daemon for the GPUs `discovered` holds that this driver publishes whole (with a MIG
/// strategy, a MIG-enabled GPU is published as its MIG devices), named `resource`; or why MPS
/// cannot serve them ([`support::check`]: Jetson generation and L4T release, compute
/// capability 7.0+). Blocking (NVML, for discrete GPUs' compute capability).
pub fn wanted(
    discovered: &Discovered,
    with_mig: bool,
    resource: &str,
) -> Result<DaemonSettings, NoDaemon> {
    let whole: Vec<_> = discovered
        .gpus
        .iter()
        .filter(|g| !(with_mig && g.mig_enabled))
        .cloned()
        .collect();
    if whole.is_empty() {
        return Err(NoDaemon::NoWholeGpu);
    }
    let capability = GpuFacts::capabilities(&whole, discovered.nvml.as_deref());
    support::check(&discovered.platform, &whole, false, |i| {
        capability.get(i).copied().flatten()
    })?;
    Ok(DaemonSettings {
        resource: resource.to_string(),
        active_thread_percentage: None,
        pinned_memory_limits: Vec::new(),
        exclusive_gpus: Vec::new(),
    })
}

/// Writes `daemon` as the companion's only daemon, or, without one, an empty list where a
/// list is already there (stopping a daemon no longer wanted); nothing is written when the
/// file already says so (a driver restart leaves the companion alone). `true` if written.
/// Call only while this driver holds the node's GPUs. Blocking.
pub fn publish(mps_root: &Path, daemon: Option<DaemonSettings>) -> Result<bool, PublishError> {
    let file = status::desired_path(mps_root);
    if daemon.is_none() && !file.exists() {
        return Ok(false);
    }
    let desired = Desired {
        daemons: daemon.into_iter().collect(),
    };
    status::write_desired(mps_root, &desired).map_err(|source| PublishError { file, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> DaemonSettings {
        DaemonSettings {
            resource: "nvidia.com/gpu".into(),
            active_thread_percentage: None,
            pinned_memory_limits: Vec::new(),
            exclusive_gpus: Vec::new(),
        }
    }

    #[test]
    fn the_daemon_is_written_once_and_withdrawn_only_where_one_was_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        // No daemon and no list: nothing created.
        assert!(!publish(dir.path(), None).unwrap());
        assert!(!dir.path().join("desired").exists());
        assert!(publish(dir.path(), Some(ours())).unwrap());
        assert!(!publish(dir.path(), Some(ours())).unwrap(), "unchanged");
        let read = status::read_desired(dir.path()).unwrap().unwrap();
        assert_eq!(read.daemons, [ours()]);
        assert_eq!(read.validate(), Ok(()), "what the companion accepts");
        // MPS no longer possible here: the daemon is withdrawn.
        assert!(publish(dir.path(), None).unwrap());
        assert_eq!(
            status::read_desired(dir.path()).unwrap(),
            Some(Desired::default())
        );
    }

    #[test]
    fn an_unwritable_list_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the folder should be.
        std::fs::write(dir.path().join("desired"), "").unwrap();
        let e = publish(dir.path(), Some(ours())).unwrap_err();
        assert_eq!(e.file, dir.path().join("desired/daemons.json"));
        assert!(
            e.to_string()
                .contains("<mps-root>/desired must be writable by the DRA driver"),
            "{e}"
        );
    }
}
