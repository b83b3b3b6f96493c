//! One run at a time per host: `apply` and `revert` hold an exclusive `flock(2)` on a
//! lock file in the state directory while they plan and write. A run that finds the lock
//! taken says so and waits. `revert` removes the lock file with the rest of the state
//! (while holding it); a run that was waiting on the removed file notices that the path
//! now names another file (or none) and locks again.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use edgegpu_host::flock::{self, TryLock};
use nix::errno::Errno;

use crate::state;
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::fsops;
use edgegpu_host::root::HostRoot;

pub const LOCK: &str = "/var/lib/edgegpu/node-setup/lock";

/// The held lock; released when dropped (or when the process dies).
pub struct RunLock {
    file: flock::Held,
    path: PathBuf,
    /// Directories created to hold the lock file (outermost first), host-absolute.
    pub created_dirs: Vec<String>,
}

impl RunLock {
    /// Takes the lock, creating the state directory when needed. When another run holds
    /// it, `waiting` is told once (with that run's pid when known) and the call blocks.
    pub fn acquire(host: &HostRoot, waiting: &mut dyn FnMut(String)) -> Result<RunLock> {
        let path = host.path(LOCK);
        let dir = host.path(state::STATE_DIR);
        let io_err = |what: &str, e: io::Error| {
            // Before the lock nothing is written: not being root is a refusal (exit 3),
            // not a failed write.
            let advice = if e.raw_os_error() == Some(Errno::EROFS as i32) {
                // A read-only root (a Yocto image's): root cannot write here either.
                Some("the file system is read-only: run node-setup where it can write, e.g. on the image at build time with --root")
            } else if e.kind() == io::ErrorKind::PermissionDenied {
                Some("run as root")
            } else {
                None
            };
            if let Some(advice) = advice {
                return SetupError::Refused(format!(
                    "{what} {}: {e} ({advice}); nothing was written",
                    path.display()
                ));
            }
            SetupError::io(format!("{what} {}", path.display()), e)
        };
        let created =
            fsops::create_dirs(&dir).map_err(|e| io_err("creating the directory of", e))?;
        let created_dirs = created
            .iter()
            .filter_map(|d| d.strip_prefix(host.root()).ok())
            .map(|p| format!("/{}", p.display()))
            .collect();
        let mut told = false;
        loop {
            let file = match flock::try_lock(&path).map_err(|e| io_err("opening", e))? {
                TryLock::Locked(held) => held,
                TryLock::Busy(file) => {
                    if !told {
                        told = true;
                        waiting(format!(
                            "waiting for another edgegpu-node-setup run to finish (it holds the lock {})",
                            path.display()
                        ));
                    }
                    flock::wait(file).map_err(|e| io_err("locking", e))?
                }
            };
            // The file we locked must still be the one at the path (a revert may have
            // removed it while we waited).
            let ours = file.metadata().map_err(|e| io_err("inspecting", e))?;
            match std::fs::metadata(&path) {
                Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() => {
                    // Nothing is written into the file: a run that changes nothing
                    // (a refused revert) leaves every file as it was, but for what a
                    // killed run left half-written in node-setup's own state folder.
                    clean_own_state(host);
                    return Ok(RunLock {
                        file,
                        path,
                        created_dirs,
                    });
                }
                _ => continue,
            }
        }
    }

    /// After a run that wrote nothing: on a host that has no manifest (nothing applied),
    /// removes the lock file and the directories made for it, so that a refused or
    /// idle run leaves the tree as it found it. Best effort: what cannot be removed is
    /// logged and left for the next run.
    pub fn release_unused(self, host: &HostRoot) {
        if host.exists(state::MANIFEST) {
            return;
        }
        if let Err(e) = self.remove_file() {
            tracing::warn!(error = %e, "could not remove the lock file");
        }
        for d in self.created_dirs.iter().rev() {
            if let Err(e) = fsops::remove_dir_if_empty(&host.path(d)) {
                tracing::warn!(dir = d, error = %e, "could not remove a state directory");
            }
        }
    }

    /// Removes the lock file (revert, as the last part of the state), still holding it.
    pub fn remove_file(&self) -> Result<()> {
        let _held = &self.file;
        fsops::remove_if_exists(&self.path)
            .map(drop)
            .map_err(|e| SetupError::io(format!("removing {}", self.path.display()), e))
    }
}

/// Removes the temporary files a killed run left in node-setup's own state folder (the
/// manifest's and the backups'), holding the lock, so no other run is writing them. Best
/// effort: what cannot be removed is logged and left for the next run.
fn clean_own_state(host: &HostRoot) {
    for dir in [state::STATE_DIR, state::BACKUP_DIR] {
        let removed = match fsops::remove_stale_temps(&host.path(dir)) {
            Ok(removed) => removed,
            Err(e) => {
                tracing::warn!(dir, error = %e, "could not look for temporary files");
                continue;
            }
        };
        log_removed_temps(host, &removed);
    }
}

/// Logs each temporary file a killed run left and this run removed (its host path and the
/// pid in its name).
pub(crate) fn log_removed_temps(host: &HostRoot, removed: &[std::path::PathBuf]) {
    for f in removed {
        let pid = f
            .file_name()
            .and_then(|n| fsops::temp_file_pid(&n.to_string_lossy()))
            .unwrap_or_default();
        let shown = f
            .strip_prefix(host.root())
            .map_or_else(|_| f.display().to_string(), |p| format!("/{}", p.display()));
        tracing::warn!(
            "removed {shown}: a temporary file an interrupted edgegpu-node-setup run (pid {pid}) left"
        );
    }
}
