//! One prepare or unprepare at a time on the node, across the driver's instances. During a
//! rolling update the old and the new pod both serve the kubelet (docs/dra.md, "Rolling
//! updates"), and the kubelet may call either: a claim prepared by one is unprepared by the
//! other. Both share the checkpoint and the CDI directory, so an exclusive `flock(2)` on
//! `<plugin dir>/serialize.lock` (the name and place the kubeletplugin helper uses,
//! k8s.io/dynamic-resource-allocation v0.36.0 `kubeletplugin/draplugin.go`
//! serializeGRPCIfEnabled) is held from the first read of the checkpoint to its last write,
//! and the checkpoint is read again under it ([`crate::prepare`]). The lock goes with its
//! holder, however the holder ends, so a killed pod never blocks the other one.

use std::path::{Path, PathBuf};

use edgegpu_host::flock::{self, TryLock};

/// The lock file's name, in the driver's plugin directory.
pub const FILE_NAME: &str = "serialize.lock";

/// The lock file could not be opened or locked.
#[derive(Debug, thiserror::Error)]
#[error("cannot lock {path}: {source}")]
pub struct LockError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The lock, held until dropped.
#[must_use = "the lock is released when this is dropped"]
#[derive(Debug)]
pub struct Serialized {
    _held: flock::Held,
}

/// Takes the lock of `plugin_dir` (created when missing), waiting while another instance
/// holds it. Blocking: call it on a blocking thread, as prepare and unprepare run.
pub fn lock(plugin_dir: &Path) -> Result<Serialized, LockError> {
    let path = plugin_dir.join(FILE_NAME);
    let failed = |source| LockError {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(plugin_dir).map_err(failed)?;
    let held = match flock::try_lock(&path).map_err(failed)? {
        TryLock::Locked(held) => held,
        TryLock::Busy(file) => {
            tracing::debug!(
                "waiting for {}: another instance of the driver prepares or unprepares",
                path.display()
            );
            flock::wait(file).map_err(failed)?
        }
    };
    Ok(Serialized { _held: held })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_next_one_waits() {
        let dir = tempfile::tempdir().unwrap();
        let plugin_dir = dir.path().join("plugins/edgegpu.io");
        let first = lock(&plugin_dir).unwrap();
        assert!(plugin_dir.join(FILE_NAME).exists());
        // flock locks belong to the open file description: another open in this process
        // conflicts as another pod's would.
        assert!(matches!(
            flock::try_lock(&plugin_dir.join(FILE_NAME)).unwrap(),
            TryLock::Busy(_)
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let plugin_dir = plugin_dir.clone();
            std::thread::spawn(move || {
                let second = lock(&plugin_dir).unwrap();
                tx.send(()).unwrap();
                drop(second);
            })
        };
        drop(first);
        rx.recv().unwrap();
        waiter.join().unwrap();
    }

    #[test]
    fn an_unusable_directory_names_the_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "").unwrap();
        let e = lock(&file).unwrap_err();
        assert_eq!(e.path, file.join(FILE_NAME));
        assert!(e.to_string().starts_with("cannot lock "), "{e}");
    }
}
