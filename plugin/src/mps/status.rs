//! The two files the plugin and the companion exchange under `--mps-root`, each written
//! atomically (a temporary file renamed over it, so a reader never sees half a file):
//! - `daemons.json`, written by the plugin: the control daemons this node's config wants,
//!   with their settings ([`Desired`]); the companion runs exactly those;
//! - `<resource>/status.json`, written by the companion: how one daemon is doing
//!   ([`Status`]); the plugin advertises the resource's devices as healthy only while it says
//!   `ready` with the settings the plugin asked for.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::plan::DaemonSettings;

/// The daemon's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Being started (or restarted after a failure).
    Starting,
    /// Answering, with `settings` applied.
    Ready,
    /// Died or stopped answering; the companion restarts it (`reason` says what happened).
    Failed,
    /// Cannot run on this host (`reason`: e.g. no control binary); the companion does not
    /// retry until restarted.
    Refused,
}

/// One daemon's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub state: State,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The control daemon's process ID (in the companion's PID namespace: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Restarts after failures since the companion started.
    #[serde(default)]
    pub restarts: u64,
    pub settings: DaemonSettings,
}

/// The daemons the plugin wants, `<mps-root>/daemons.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    pub daemons: Vec<DaemonSettings>,
}

/// The name of the plugin's file under `--mps-root`.
pub const DESIRED_FILE: &str = "daemons.json";

/// Writes `status` to `path` atomically. Blocking.
pub fn write(path: &Path, status: &Status) -> std::io::Result<()> {
    write_json(path, status)
}

/// Reads the status at `path`; `Ok(None)` when there is none (no companion yet). Blocking.
pub fn read(path: &Path) -> Result<Option<Status>, String> {
    read_json(path, "status file")
}

/// Writes the plugin's wishes to `<mps_root>/daemons.json`, unless they are already there
/// (so a plugin restart does not touch the companion). Blocking.
pub fn write_desired(mps_root: &Path, desired: &Desired) -> std::io::Result<bool> {
    let path = mps_root.join(DESIRED_FILE);
    if read_desired(mps_root).ok().flatten().as_ref() == Some(desired) {
        return Ok(false);
    }
    write_json(&path, desired).map(|()| true)
}

/// Reads `<mps_root>/daemons.json`; `Ok(None)` when the plugin wrote none. Blocking.
pub fn read_desired(mps_root: &Path) -> Result<Option<Desired>, String> {
    read_json(&mps_root.join(DESIRED_FILE), "list of MPS daemons")
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?)?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path, what: &str) -> Result<Option<T>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("{}: not a {what}: {e}", path.display()))
}

/// Removes the status at `path` (the daemon is gone); a missing file is fine. Blocking.
pub fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("cannot remove {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvidia.com/gpu/status.json");
        assert_eq!(read(&path).unwrap(), None);
        let status = Status {
            state: State::Ready,
            reason: None,
            pid: Some(42),
            restarts: 1,
            settings: DaemonSettings {
                resource: "nvidia.com/gpu".into(),
                exclusive_gpus: vec![],
                active_thread_percentage: Some(50),
                pinned_memory_limits: vec![],
            },
        };
        write(&path, &status).unwrap();
        assert_eq!(read(&path).unwrap(), Some(status.clone()));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"state\": \"ready\""), "{text}");
        std::fs::write(&path, "{").unwrap();
        assert!(read(&path).unwrap_err().contains("not a status file"));
        let desired = Desired {
            daemons: vec![status.settings.clone()],
        };
        assert_eq!(read_desired(dir.path()).unwrap(), None);
        assert!(write_desired(dir.path(), &desired).unwrap());
        assert!(
            !write_desired(dir.path(), &desired).unwrap(),
            "unchanged: not rewritten"
        );
        assert_eq!(read_desired(dir.path()).unwrap(), Some(desired));
        remove(&path);
        remove(&path);
        assert_eq!(read(&path).unwrap(), None);
    }
}
