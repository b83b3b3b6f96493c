//! The two files the plugin and the companion exchange under `--mps-root`, each written
//! atomically (a temporary file renamed over it, so a reader never sees half a file), each
//! in a folder only its writer can write (docs/security.md):
//! - `desired/daemons.json`, written by the plugin: the control daemons this node's config
//!   wants, with their settings ([`Desired`]); the companion runs exactly those, once they
//!   pass [`Desired::validate`];
//! - `<resource>/status.json`, written by the companion: how one daemon is doing
//!   ([`Status`]); the plugin advertises the resource's devices as healthy only while it says
//!   `ready` with the settings the plugin asked for.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::beneath::{self, Dir};
use super::plan::{DaemonSettings, InvalidSettings};

/// Largest `daemons.json` or `status.json` read (real ones are a few KiB).
const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Most daemons one `daemons.json` may ask for (a node serves a handful of resources).
pub const MAX_DAEMONS: usize = 32;

/// Why `status.json` or `daemons.json` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not a plain file beneath the root, or an I/O error (the error names the file).
    #[error("cannot read {0}")]
    Unreadable(#[source] beneath::BeneathError),
    /// The file is there but is not what it should hold (`what`: "status file", …).
    #[error("{path}: not a {what}: {source}")]
    Malformed {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

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

impl State {
    /// As the status file writes it (`starting`, `ready`, `failed`, `refused`).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Ready => "ready",
            State::Failed => "failed",
            State::Refused => "refused",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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

/// The daemons the plugin wants, `<mps-root>/desired/daemons.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    pub daemons: Vec<DaemonSettings>,
}

impl Desired {
    /// What the companion checks before acting on the plugin's file: a bounded number of
    /// daemons, each resource once, every daemon's settings valid.
    pub fn validate(&self) -> Result<(), InvalidSettings> {
        if self.daemons.len() > MAX_DAEMONS {
            return Err(InvalidSettings {
                resource: String::new(),
                why: format!(
                    "{} daemons asked for, at most {MAX_DAEMONS}",
                    self.daemons.len()
                ),
            });
        }
        for (i, d) in self.daemons.iter().enumerate() {
            d.validate()?;
            if self.daemons[..i].iter().any(|o| o.resource == d.resource) {
                return Err(InvalidSettings {
                    resource: d.resource.clone(),
                    why: "asked for twice".into(),
                });
            }
        }
        Ok(())
    }
}

pub use super::DESIRED_DIR;
/// The plugin's file in [`DESIRED_DIR`].
pub const DESIRED_FILE: &str = "daemons.json";

/// `<mps_root>/desired/daemons.json`.
pub fn desired_path(mps_root: &Path) -> PathBuf {
    mps_root.join(DESIRED_DIR).join(DESIRED_FILE)
}

/// Writes `status` to `path` atomically, creating its folder (a trusted path: tests and
/// tools; the companion writes through [`write_in`]). Blocking.
pub fn write(path: &Path, status: &Status) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let dir = Dir::open(dir).map_err(std::io::Error::other)?;
    write_in(&dir, status).map_err(std::io::Error::other)
}

/// Writes `status` as `status.json` in the resource's folder `dir`. Blocking.
pub fn write_in(dir: &Dir, status: &Status) -> Result<(), beneath::BeneathError> {
    dir.write_file(super::STATUS_FILE, &to_json(status))
}

/// Reads the status at `path`; `Ok(None)` when there is none (no companion yet). Blocking.
pub fn read(path: &Path) -> Result<Option<Status>, ReadError> {
    parse(
        path,
        beneath::read_file(path, MAX_FILE_BYTES),
        "status file",
    )
}

/// Writes the plugin's wishes to `<mps_root>/desired/daemons.json`, unless they are already
/// there (so a plugin restart does not touch the companion). Blocking.
pub fn write_desired(mps_root: &Path, desired: &Desired) -> std::io::Result<bool> {
    if read_desired(mps_root).ok().flatten().as_ref() == Some(desired) {
        return Ok(false);
    }
    let dir = mps_root.join(DESIRED_DIR);
    std::fs::create_dir_all(&dir)?;
    Dir::open(&dir)
        .and_then(|d| d.write_file(DESIRED_FILE, &to_json(desired)))
        .map_err(std::io::Error::other)?;
    Ok(true)
}

/// Reads `<mps_root>/desired/daemons.json`; `Ok(None)` when the plugin wrote none.
/// Blocking.
pub fn read_desired(mps_root: &Path) -> Result<Option<Desired>, ReadError> {
    let path = desired_path(mps_root);
    parse(
        &path,
        beneath::read_file(&path, MAX_FILE_BYTES),
        "list of MPS daemons",
    )
}

/// The companion's read of the plugin's file: beneath the MPS root it holds open, never
/// through a link, bounded, never blocking; `Ok(None)` when there is none. Not validated
/// ([`Desired::validate`]). Blocking.
pub fn read_desired_in(root: &Dir) -> Result<Option<Desired>, ReadError> {
    let path = root.path().join(DESIRED_DIR).join(DESIRED_FILE);
    let bytes = match root.open_dir(DESIRED_DIR) {
        Ok(Some(dir)) => dir.read_file(DESIRED_FILE, MAX_FILE_BYTES),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    parse(&path, bytes, "list of MPS daemons")
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("plain data serializes");
    bytes.push(b'\n');
    bytes
}

fn parse<T: for<'de> Deserialize<'de>>(
    path: &Path,
    bytes: Result<Option<Vec<u8>>, beneath::BeneathError>,
    what: &'static str,
) -> Result<Option<T>, ReadError> {
    let bytes = match bytes {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(ReadError::Unreadable(e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| ReadError::Malformed {
            path: path.to_path_buf(),
            what,
            source,
        })
}

/// Removes `status.json` from the resource's folder `dir` (the daemon is gone); a missing
/// file is fine. Blocking.
pub fn remove_in(dir: &Dir) {
    if let Err(e) = dir.remove_file(super::STATUS_FILE) {
        tracing::warn!("cannot remove the status: {e}");
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
        // Messages name a state as the file writes it.
        for state in [State::Starting, State::Ready, State::Failed, State::Refused] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::String(state.to_string())
            );
        }
        std::fs::write(&path, "{").unwrap();
        let e = read(&path).unwrap_err();
        assert!(
            matches!(&e, ReadError::Malformed { path: p, what: "status file", .. } if *p == path),
            "{e:?}"
        );
        assert!(e.to_string().contains("not a status file"), "{e}");
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
        let dir = Dir::open(path.parent().unwrap()).unwrap();
        remove_in(&dir);
        remove_in(&dir);
        assert_eq!(read(&path).unwrap(), None);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no temporary file left"
        );
        assert!(desired_path(dir.path()).ends_with("desired/daemons.json"));
    }

    fn daemon(resource: &str) -> DaemonSettings {
        DaemonSettings {
            resource: resource.into(),
            exclusive_gpus: vec![],
            active_thread_percentage: Some(50),
            pinned_memory_limits: vec![],
        }
    }

    #[test]
    fn the_plugins_file_is_bounded_and_checked() {
        let ok = Desired {
            daemons: vec![daemon("nvidia.com/gpu"), daemon("nvidia.com/gpu-mem")],
        };
        assert_eq!(ok.validate(), Ok(()));
        let twice = Desired {
            daemons: vec![daemon("nvidia.com/gpu"), daemon("nvidia.com/gpu")],
        };
        assert!(twice.validate().unwrap_err().why.contains("twice"));
        let many = Desired {
            daemons: (0..=MAX_DAEMONS)
                .map(|i| daemon(&format!("nvidia.com/gpu-{i}")))
                .collect(),
        };
        assert!(many.validate().unwrap_err().why.contains("at most 32"));
        let escape = Desired {
            daemons: vec![daemon("../x")],
        };
        assert!(escape.validate().is_err());
    }

    #[test]
    fn the_companion_reads_the_plugins_file_only_as_a_plain_file_beneath_its_root() {
        let root = tempfile::tempdir().unwrap();
        let held = Dir::open(root.path()).unwrap();
        assert_eq!(read_desired_in(&held).unwrap(), None);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join(DESIRED_FILE), "{\"daemons\": []}").unwrap();
        // A linked folder or file is refused, not followed.
        std::os::unix::fs::symlink(outside.path(), root.path().join(DESIRED_DIR)).unwrap();
        let e = read_desired_in(&held).unwrap_err();
        assert!(
            matches!(&e, ReadError::Unreadable(beneath::BeneathError::Symlink(_))),
            "{e:?}"
        );
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::remove_file(root.path().join(DESIRED_DIR)).unwrap();
        std::fs::create_dir(root.path().join(DESIRED_DIR)).unwrap();
        std::os::unix::fs::symlink(outside.path().join(DESIRED_FILE), desired_path(root.path()))
            .unwrap();
        assert!(read_desired_in(&held)
            .unwrap_err()
            .to_string()
            .contains("symbolic link"));
        std::fs::remove_file(desired_path(root.path())).unwrap();
        // A FIFO is refused at once; an oversized file is not read.
        nix::unistd::mkfifo(
            &desired_path(root.path()),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        assert!(read_desired_in(&held)
            .unwrap_err()
            .to_string()
            .contains("FIFO"));
        std::fs::remove_file(desired_path(root.path())).unwrap();
        std::fs::write(desired_path(root.path()), vec![b' '; 300 * 1024]).unwrap();
        assert!(read_desired_in(&held)
            .unwrap_err()
            .to_string()
            .contains("larger than"));
        write_desired(root.path(), &Desired::default()).unwrap();
        assert_eq!(read_desired_in(&held).unwrap(), Some(Desired::default()));
    }
}
