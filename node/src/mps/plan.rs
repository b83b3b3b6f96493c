//! What one MPS control daemon is told (its default limits), and what each client
//! container gets in `Allocate`: the pipe directory, `/dev/shm`, and its limits in the
//! variables MPS clients read.
//!
//! MPS facts used here (NVIDIA's MPS documentation, "Environment Variables" and the control
//! commands; the units measured on an H100 80GB HBM3 with driver 580.159.04 / CUDA 13.0):
//! - `set_default_device_pinned_mem_limit <dev> <N>M` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`
//!   take binary units: `1000M` let a client reach 998 MiB in use, `300MB` 300 MiB;
//! - a client's own variables can only lower the daemon's defaults (`0=2G` under a `1000M`
//!   default stayed at 1000 MiB), so the daemon's defaults are the cap a pod cannot lift;
//! - defaults apply to the next MPS server the daemon starts.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::MpsPaths;

const MIB: u64 = 1 << 20;

/// The container variables edgegpu sets next to MPS's own, so a pod (and devicequery's limits
/// probe) can read the limit it was given even where nothing enforces it.
pub const LIMIT_MIB_ENV: &str = "EDGEGPU_GPU_MEMORY_LIMIT_MIB";
/// `true` where MPS enforces the limit, `false` where it is accounting only.
pub const LIMIT_ENFORCED_ENV: &str = "EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED";
/// Why a limit is not enforced (only with `EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED=false`).
pub const LIMIT_NOTE_ENV: &str = "EDGEGPU_GPU_MEMORY_LIMIT_NOTE";

/// One GPU's default pinned device-memory limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLimit {
    /// CUDA ordinal in the daemon (PCI bus order: the daemon runs with
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`, the order NVML indexes GPUs in).
    pub ordinal: u32,
    /// `GPU-…` where the GPU has one (not a Jetson without NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    pub mib: u64,
}

/// Everything the companion sets in one resource's control daemon; the status file carries
/// it back so the plugin can tell the daemon runs this config's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSettings {
    /// The advertised resource the daemon serves (`nvidia.com/gpu`, `nvidia.com/gpu-mem`).
    pub resource: String,
    /// Each client's share of the GPU's threads; `None`: all (memory units have no compute
    /// share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_thread_percentage: Option<u32>,
    /// Per GPU, each client's memory cap; empty: none.
    #[serde(default)]
    pub pinned_memory_limits: Vec<DeviceLimit>,
    /// Discrete GPUs (UUIDs) the companion puts in `EXCLUSIVE_PROCESS` compute mode while the
    /// daemon serves them, so that only the MPS server holds a context and no process
    /// escapes the limits by leaving MPS (NVIDIA's plugin does the same,
    /// `cmd/mps-control-daemon/mps/daemon.go`). Empty on Jetson: Tegra cannot change compute
    /// modes (MPS documentation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclusive_gpus: Vec<String>,
}

impl DaemonSettings {
    /// The control commands that apply the settings. Each GPU's limit is set by ordinal and
    /// then by UUID (the daemon keeps both and the last set wins; NVIDIA's plugin sets only
    /// the ordinal because UUID limits were not applied by older drivers, while the ordinal
    /// alone depends on CUDA's device order): both name the same GPU with the same value.
    pub fn commands(&self) -> Vec<String> {
        let mut out = Vec::new();
        for l in &self.pinned_memory_limits {
            out.push(format!(
                "set_default_device_pinned_mem_limit {} {}M",
                l.ordinal, l.mib
            ));
            if let Some(uuid) = &l.uuid {
                out.push(format!(
                    "set_default_device_pinned_mem_limit {uuid} {}M",
                    l.mib
                ));
            }
        }
        if let Some(pct) = self.active_thread_percentage {
            out.push(format!("set_default_active_thread_percentage {pct}"));
        }
        out
    }

    /// What the daemon must answer to `get_default_*` once the settings are applied:
    /// (query command, expected value).
    pub fn readback(&self) -> Vec<(String, Readback)> {
        let mut out = Vec::new();
        for l in &self.pinned_memory_limits {
            out.push((
                format!("get_default_device_pinned_mem_limit {}", l.ordinal),
                Readback::MemoryMib(l.mib),
            ));
        }
        if let Some(pct) = self.active_thread_percentage {
            out.push((
                "get_default_active_thread_percentage".into(),
                Readback::Percentage(pct),
            ));
        }
        out
    }
}

/// Most GPUs (CUDA ordinals) one daemon's limits may name.
const MAX_ORDINAL: u32 = 63;
/// Largest memory limit a daemon may be given, in MiB (1 PiB: beyond every GPU's memory).
const MAX_LIMIT_MIB: u64 = 1 << 30;

/// A daemon's settings the companion refuses to act on (`daemons.json` is written by the
/// less privileged plugin: each value below becomes a path or a line of a control command).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MPS daemon for {resource:?}: {why}")]
pub struct InvalidSettings {
    pub resource: String,
    pub why: String,
}

impl DaemonSettings {
    /// Checks every field before the companion uses it: the resource name (a folder under
    /// the MPS root), GPU identifiers (words of a control command), bounded numbers.
    pub fn validate(&self) -> Result<(), InvalidSettings> {
        let fail = |why: String| {
            Err(InvalidSettings {
                resource: self.resource.clone(),
                why,
            })
        };
        if let Err(why) = crate::resource_name::check(&self.resource) {
            return fail(why);
        }
        if self.resource.split('/').next() == Some(super::DESIRED_DIR) {
            return fail(format!(
                "the folder {:?} under the MPS root is the plugin's",
                super::DESIRED_DIR
            ));
        }
        if let Some(pct) = self.active_thread_percentage {
            if !(1..=100).contains(&pct) {
                return fail(format!(
                    "activeThreadPercentage must be from 1 to 100, not {pct}"
                ));
            }
        }
        for l in &self.pinned_memory_limits {
            if l.ordinal > MAX_ORDINAL {
                return fail(format!(
                    "GPU ordinal {} is out of range (0-{MAX_ORDINAL})",
                    l.ordinal
                ));
            }
            if l.mib == 0 || l.mib > MAX_LIMIT_MIB {
                return fail(format!(
                    "memory limit {} MiB is out of range (1-{MAX_LIMIT_MIB})",
                    l.mib
                ));
            }
            if let Some(uuid) = &l.uuid {
                if !is_device_uuid(uuid) {
                    return fail(format!("{uuid:?} is not a GPU or MIG device UUID"));
                }
            }
        }
        if self.pinned_memory_limits.len() > MAX_ORDINAL as usize + 1 {
            return fail("too many memory limits".into());
        }
        for uuid in &self.exclusive_gpus {
            if !(uuid.starts_with("GPU-") && is_device_uuid(uuid)) {
                return fail(format!(
                    "{uuid:?} is not a GPU UUID (only whole GPUs change compute mode)"
                ));
            }
        }
        if self.exclusive_gpus.len() > MAX_ORDINAL as usize + 1 {
            return fail("too many GPUs for EXCLUSIVE_PROCESS".into());
        }
        Ok(())
    }

    /// Every GPU or MIG UUID the settings name.
    pub fn uuids(&self) -> impl Iterator<Item = &str> {
        self.pinned_memory_limits
            .iter()
            .filter_map(|l| l.uuid.as_deref())
            .chain(self.exclusive_gpus.iter().map(String::as_str))
    }
}

/// NVML's device UUIDs: `GPU-<uuid>`, `MIG-<uuid>` (R470 on) and the older
/// `MIG-GPU-<uuid>/<gi>/<ci>`; hex digits and dashes only, so no UUID can carry a second
/// word or line into a control command.
pub fn is_device_uuid(s: &str) -> bool {
    let hex = |t: &str| {
        !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    };
    if let Some(rest) = s.strip_prefix("MIG-GPU-") {
        let mut parts = rest.split('/');
        let uuid = parts.next().unwrap_or_default();
        let ids: Vec<&str> = parts.collect();
        return hex(uuid)
            && ids.len() == 2
            && ids
                .iter()
                .all(|i| !i.is_empty() && i.len() <= 3 && i.bytes().all(|b| b.is_ascii_digit()));
    }
    match s.strip_prefix("GPU-").or_else(|| s.strip_prefix("MIG-")) {
        Some(rest) => hex(rest),
        None => false,
    }
}

/// A value read back from the daemon, compared by value: the daemon answers a limit in the
/// largest unit that keeps it whole (`4096M` set, `4G` answered; `1000M` stays) and a
/// percentage with a decimal (`25.0`) — measured, driver 580.159.04.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readback {
    MemoryMib(u64),
    Percentage(u32),
}

impl Readback {
    /// Whether the daemon's `answer` says this value.
    pub fn accepts(&self, answer: &str) -> bool {
        let answer = answer.trim();
        match self {
            Readback::MemoryMib(mib) => parse_mib(answer) == Some(*mib),
            Readback::Percentage(pct) => answer
                .parse::<f64>()
                .is_ok_and(|v| (v - f64::from(*pct)).abs() < 0.05),
        }
    }
}

impl std::fmt::Display for Readback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Readback::MemoryMib(mib) => write!(f, "{mib}M"),
            Readback::Percentage(pct) => write!(f, "{pct}"),
        }
    }
}

/// `4G`, `1000M`, `512MB`, `1T` in MiB (MPS's units are binary); `None` for anything else.
fn parse_mib(text: &str) -> Option<u64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().ok()?;
    let factor = match unit {
        "M" | "MB" => 1,
        "G" | "GB" => 1 << 10,
        "T" | "TB" => 1 << 20,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// One container's limits on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientLimit {
    /// How the container's CUDA names the GPU: its UUID, else ordinal `0` (a Jetson has one
    /// GPU).
    pub device: String,
    /// Its device-memory limit; `None`: unknown (no limit set).
    pub mib: Option<u64>,
}

/// What `Allocate` adds to a container for limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSetup {
    /// Where MPS runs: its paths (the container joins the daemon); `None`: no MPS, the
    /// limit is accounting only and `not_enforced` says why.
    pub mps: Option<MpsPaths>,
    pub not_enforced: Option<String>,
    pub limits: Vec<ClientLimit>,
    pub active_thread_percentage: Option<u32>,
}

/// A bind mount for the container (host path = container path unless noted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientMount {
    pub host: PathBuf,
    pub container: PathBuf,
}

impl ClientSetup {
    /// The container's variables: MPS's own where MPS runs, edgegpu's always.
    pub fn env(&self) -> HashMap<String, String> {
        let mut env = HashMap::new();
        let total: Option<u64> = self.limits.iter().map(|l| l.mib).sum();
        if let Some(total) = total {
            env.insert(LIMIT_MIB_ENV.to_string(), total.to_string());
        }
        match &self.mps {
            Some(paths) => {
                env.insert(
                    "CUDA_MPS_PIPE_DIRECTORY".into(),
                    paths.pipe.to_string_lossy().into_owned(),
                );
                let entries: Vec<String> = self
                    .limits
                    .iter()
                    .filter_map(|l| l.mib.map(|mib| format!("{}={mib}M", l.device)))
                    .collect();
                if !entries.is_empty() {
                    env.insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), entries.join(","));
                }
                if let Some(pct) = self.active_thread_percentage {
                    env.insert("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), pct.to_string());
                }
                if total.is_some() {
                    env.insert(LIMIT_ENFORCED_ENV.to_string(), "true".into());
                }
            }
            None => {
                if total.is_some() {
                    env.insert(LIMIT_ENFORCED_ENV.to_string(), "false".into());
                    if let Some(why) = &self.not_enforced {
                        env.insert(LIMIT_NOTE_ENV.to_string(), why.clone());
                    }
                }
            }
        }
        env
    }

    /// The container's mounts: the pipe directory, and the shared-memory directory as
    /// `/dev/shm` (the daemon sees the same one).
    pub fn mounts(&self) -> Vec<ClientMount> {
        match &self.mps {
            Some(paths) => vec![
                ClientMount {
                    host: paths.pipe.clone(),
                    container: paths.pipe.clone(),
                },
                ClientMount {
                    host: paths.shm.clone(),
                    container: PathBuf::from("/dev/shm"),
                },
            ],
            None => Vec::new(),
        }
    }
}

/// `bytes` in whole MiB, rounded down (never grant more than configured).
pub fn whole_mib(bytes: u64) -> u64 {
    bytes / MIB
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn commands_set_ordinal_then_uuid_then_threads() {
        let s = DaemonSettings {
            resource: "nvidia.com/gpu".into(),
            exclusive_gpus: vec![],
            active_thread_percentage: Some(25),
            pinned_memory_limits: vec![
                DeviceLimit {
                    ordinal: 0,
                    uuid: Some("GPU-a".into()),
                    mib: 20386,
                },
                DeviceLimit {
                    ordinal: 1,
                    uuid: None,
                    mib: 100,
                },
            ],
        };
        assert_eq!(
            s.commands(),
            [
                "set_default_device_pinned_mem_limit 0 20386M",
                "set_default_device_pinned_mem_limit GPU-a 20386M",
                "set_default_device_pinned_mem_limit 1 100M",
                "set_default_active_thread_percentage 25",
            ]
        );
        assert_eq!(
            s.readback(),
            [
                (
                    "get_default_device_pinned_mem_limit 0".to_string(),
                    Readback::MemoryMib(20386)
                ),
                (
                    "get_default_device_pinned_mem_limit 1".to_string(),
                    Readback::MemoryMib(100)
                ),
                (
                    "get_default_active_thread_percentage".to_string(),
                    Readback::Percentage(25)
                ),
            ]
        );
    }

    /// The answers an H100's daemon gave (driver 580.159.04).
    #[test]
    fn readback_compares_values_as_the_daemon_writes_them() {
        assert!(Readback::MemoryMib(4096).accepts("4G"));
        assert!(Readback::MemoryMib(80896).accepts("79G\n"));
        assert!(Readback::MemoryMib(1000).accepts("1000M"));
        assert!(Readback::MemoryMib(1 << 20).accepts("1T"));
        assert!(!Readback::MemoryMib(4096).accepts("4096"));
        assert!(!Readback::MemoryMib(4096)
            .accepts("No default pinned memory limit set for the device!"));
        assert!(Readback::Percentage(25).accepts("25.0"));
        assert!(Readback::Percentage(25).accepts("25"));
        assert!(!Readback::Percentage(25).accepts("100.0"));
    }

    fn settings(resource: &str) -> DaemonSettings {
        DaemonSettings {
            resource: resource.into(),
            exclusive_gpus: vec!["GPU-8225d642-a9b1-8191-0d08-79221b703a12".into()],
            active_thread_percentage: Some(50),
            pinned_memory_limits: vec![DeviceLimit {
                ordinal: 0,
                uuid: Some("MIG-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c".into()),
                mib: 1024,
            }],
        }
    }

    #[test]
    fn settings_that_would_escape_the_root_or_inject_a_command_are_refused() {
        assert_eq!(settings("nvidia.com/gpu").validate(), Ok(()));
        for resource in ["../x", "/abs", "nvidia.com/../../etc", "nvidia.com/a/b", ""] {
            let e = settings(resource).validate().unwrap_err();
            assert!(e.to_string().contains("resource name"), "{resource}: {e}");
        }
        let e = settings("desired/daemons.json").validate().unwrap_err();
        assert!(e.why.contains("is the plugin's"), "{e}");
        let mut s = settings("nvidia.com/gpu");
        s.pinned_memory_limits[0].uuid =
            Some("GPU-1\nset_default_active_thread_percentage 100".into());
        assert!(s
            .validate()
            .unwrap_err()
            .why
            .contains("not a GPU or MIG device UUID"));
        let mut s = settings("nvidia.com/gpu");
        s.exclusive_gpus = vec!["MIG-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c".into()];
        assert!(s.validate().unwrap_err().why.contains("only whole GPUs"));
        let mut s = settings("nvidia.com/gpu");
        s.active_thread_percentage = Some(0);
        assert!(s.validate().is_err());
        let mut s = settings("nvidia.com/gpu");
        s.pinned_memory_limits[0].ordinal = 64;
        assert!(s.validate().is_err());
        let mut s = settings("nvidia.com/gpu");
        s.pinned_memory_limits[0].mib = 0;
        assert!(s.validate().is_err());
        assert_eq!(
            settings("nvidia.com/gpu").uuids().collect::<Vec<_>>(),
            [
                "MIG-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
                "GPU-8225d642-a9b1-8191-0d08-79221b703a12"
            ]
        );
    }

    #[test]
    fn device_uuids() {
        for ok in [
            "GPU-8225d642-a9b1-8191-0d08-79221b703a12",
            "MIG-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
            "MIG-GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c/1/0",
        ] {
            assert!(is_device_uuid(ok), "{ok}");
        }
        for bad in [
            "GPU-",
            "GPU-x",
            "GPU-1 2",
            "GPU-1\n2",
            "0",
            "MIG-GPU-1/1",
            "MIG-GPU-1/1/0/0",
            "gpu-1",
        ] {
            assert!(!is_device_uuid(bad), "{bad}");
        }
    }

    #[test]
    fn client_variables_with_and_without_mps() {
        let paths = MpsPaths::new(Path::new("/run/edgegpu/mps"), "nvidia.com/gpu-mem");
        let mut setup = ClientSetup {
            mps: Some(paths),
            not_enforced: None,
            limits: vec![ClientLimit {
                device: "0".into(),
                mib: Some(768),
            }],
            active_thread_percentage: None,
        };
        let env = setup.env();
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=768M");
        assert_eq!(
            env["CUDA_MPS_PIPE_DIRECTORY"],
            "/run/edgegpu/mps/nvidia.com/gpu-mem/pipe"
        );
        assert_eq!(env[LIMIT_MIB_ENV], "768");
        assert_eq!(env[LIMIT_ENFORCED_ENV], "true");
        assert!(!env.contains_key("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
        assert_eq!(setup.mounts()[1].container, Path::new("/dev/shm"));
        assert_eq!(
            setup.mounts()[1].host,
            Path::new("/run/edgegpu/mps/nvidia.com/gpu-mem/shm")
        );

        setup.mps = None;
        setup.not_enforced = Some("no MPS on Jetson Nano".into());
        let env = setup.env();
        assert_eq!(env[LIMIT_MIB_ENV], "768");
        assert_eq!(env[LIMIT_ENFORCED_ENV], "false");
        assert_eq!(env[LIMIT_NOTE_ENV], "no MPS on Jetson Nano");
        assert!(!env.keys().any(|k| k.starts_with("CUDA_MPS_")));
        assert!(setup.mounts().is_empty());
    }
}
