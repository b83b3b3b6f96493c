//! What survives a restart of the driver: `checkpoint.json` in the driver's plugin directory
//! (`/var/lib/kubelet/plugins/edgegpu.io/`), one entry per claim keyed by UID, with the
//! claim's reference, its state, the devices handed to the kubelet and the CDI spec file.
//! NodeUnprepareResources names a claim only by namespace, name and UID and the claim may be
//! gone from the API server by then, so what to undo must be on disk.
//!
//! As NVIDIA's DRA driver (`cmd/gpu-kubelet-plugin/checkpoint.go`, `device_state.go`): a claim
//! is recorded `PrepareStarted` before its spec is written and `PrepareCompleted` after; a
//! claim found `PrepareStarted` (a crash in between) is rolled back — its spec removed — before
//! it is prepared again. Every change is written atomically (temporary file, fsync, rename).
//! A file that does not parse is an error naming it, and it is left as it is: the driver
//! does not start over with an empty checkpoint and forget the other claims.
//!
//! The file, not this process's copy, is the truth: during a rolling update the other pod of
//! the driver changes it too, so [`crate::prepare`] reads it again ([`Checkpoint::reload`])
//! under the lock both pods take ([`crate::serialize`]) before every use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::kubelet::{ClaimRef, PreparedDevice};

/// The checkpoint's file name.
pub const FILE_NAME: &str = "checkpoint.json";
/// The format version written.
pub const VERSION: u32 = 1;

/// Why the checkpoint could not be read or written. A checkpoint that cannot be read stops
/// the driver: starting empty would forget the prepared claims.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("the checkpoint {path} is corrupt ({source}); it was left as it is: repair or remove it (removing it forgets which claims are prepared)")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the checkpoint {path} has version {found} (this driver reads {VERSION})")]
    Version { path: PathBuf, found: u32 },
    /// An entry keyed by one claim UID holds another claim.
    #[error("the checkpoint {path} is corrupt: entry {key} holds claim {uid}")]
    MisfiledEntry {
        path: PathBuf,
        key: String,
        uid: String,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the checkpoint {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where a claim is in its preparation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimState {
    PrepareStarted,
    PrepareCompleted,
}

/// One claim's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimEntry {
    pub claim: ClaimRef,
    pub state: ClaimState,
    /// What the kubelet got (empty until completed).
    pub devices: Vec<PreparedDevice>,
    /// The DRA devices held and whether exclusively: (device, exclusive).
    pub held: Vec<(String, bool)>,
    pub spec_file: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    claims: BTreeMap<String, ClaimEntry>,
}

/// The checkpoint in memory, and its file.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    claims: BTreeMap<String, ClaimEntry>,
}

impl Checkpoint {
    /// Reads `<plugin_dir>/checkpoint.json`; a missing file is an empty checkpoint.
    pub fn load(plugin_dir: &Path) -> Result<Checkpoint, CheckpointError> {
        let path = plugin_dir.join(FILE_NAME);
        let claims = read(&path)?;
        Ok(Checkpoint { path, claims })
    }

    /// Reads the file again (another instance of the driver may have changed it); on an
    /// error what was read before stays.
    pub fn reload(&mut self) -> Result<(), CheckpointError> {
        self.claims = read(&self.path)?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn get(&self, uid: &str) -> Option<&ClaimEntry> {
        self.claims.get(uid)
    }

    pub fn entries(&self) -> impl Iterator<Item = &ClaimEntry> {
        self.claims.values()
    }

    /// Records `entry` (replacing the claim's) and writes the file.
    pub fn put(&mut self, entry: ClaimEntry) -> Result<(), CheckpointError> {
        let uid = entry.claim.uid.clone();
        let old = self.claims.insert(uid.clone(), entry);
        self.save().map_err(|e| {
            match old {
                Some(o) => self.claims.insert(uid, o),
                None => self.claims.remove(&uid),
            };
            e
        })
    }

    /// Forgets claim `uid` and writes the file.
    pub fn remove(&mut self, uid: &str) -> Result<(), CheckpointError> {
        let Some(old) = self.claims.remove(uid) else {
            return Ok(());
        };
        self.save().map_err(|e| {
            self.claims.insert(uid.to_string(), old);
            e
        })
    }

    fn save(&self) -> Result<(), CheckpointError> {
        let file = File {
            version: VERSION,
            claims: self.claims.clone(),
        };
        let mut text = serde_json::to_vec_pretty(&file).expect("the checkpoint serialises");
        text.push(b'\n');
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| CheckpointError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        edgegpu_host::fsops::atomic_write(&self.path, &text, 0o600).map_err(|source| {
            CheckpointError::Write {
                path: self.path.clone(),
                source,
            }
        })
    }
}

/// The claims of the checkpoint file at `path`; a missing file has none.
fn read(path: &Path) -> Result<BTreeMap<String, ClaimEntry>, CheckpointError> {
    let path = path.to_path_buf();
    let claims = match std::fs::read(&path) {
        Ok(bytes) => {
            let file: File = match serde_json::from_slice(&bytes) {
                Ok(file) => file,
                Err(source) => return Err(CheckpointError::Corrupt { path, source }),
            };
            if file.version != VERSION {
                return Err(CheckpointError::Version {
                    path,
                    found: file.version,
                });
            }
            if let Some((key, entry)) = file.claims.iter().find(|(k, e)| **k != e.claim.uid) {
                return Err(CheckpointError::MisfiledEntry {
                    key: key.clone(),
                    uid: entry.claim.uid.clone(),
                    path,
                });
            }
            file.claims
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(source) => return Err(CheckpointError::Read { path, source }),
    };
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b1c2d3e-aaaa-bbbb-cccc-1234567890ab";

    fn entry(uid: &str) -> serde_json::Value {
        serde_json::json!({
            "claim": {"namespace": "ns", "name": "c", "uid": uid},
            "state": "PrepareCompleted",
            "devices": [],
            "held": [],
            "specFile": format!("/var/run/cdi/edgegpu.io-claim_{uid}.json"),
        })
    }

    /// Another instance's changes are seen only after a reload; a reload that fails keeps
    /// what was read before.
    #[test]
    fn a_reload_sees_what_the_other_instance_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let mut ours = Checkpoint::load(dir.path()).unwrap();
        let mut theirs = Checkpoint::load(dir.path()).unwrap();
        let entry: ClaimEntry = serde_json::from_value(entry(UID)).unwrap();
        theirs.put(entry.clone()).unwrap();
        assert!(ours.get(UID).is_none());
        ours.reload().unwrap();
        assert_eq!(ours.get(UID), Some(&entry));
        std::fs::write(dir.path().join(FILE_NAME), "{").unwrap();
        assert!(matches!(
            ours.reload(),
            Err(CheckpointError::Corrupt { .. })
        ));
        assert_eq!(ours.get(UID), Some(&entry));
    }

    /// Each way a checkpoint is refused keeps the file's path and what was wrong.
    #[test]
    fn a_checkpoint_that_cannot_be_trusted_is_refused_with_its_facts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let write = |v: serde_json::Value| std::fs::write(&path, v.to_string()).unwrap();

        write(serde_json::json!({"version": 2, "claims": {}}));
        let e = Checkpoint::load(dir.path()).unwrap_err();
        assert!(
            matches!(&e, CheckpointError::Version { path: p, found: 2 } if *p == path),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "the checkpoint {} has version 2 (this driver reads 1)",
                path.display()
            )
        );

        let other = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
        write(serde_json::json!({"version": 1, "claims": {UID: entry(other)}}));
        let e = Checkpoint::load(dir.path()).unwrap_err();
        assert!(
            matches!(&e, CheckpointError::MisfiledEntry { key, uid, .. } if key == UID && uid == other),
            "{e:?}"
        );

        write(serde_json::json!({"version": 1, "claims": {UID: entry(UID)}}));
        assert_eq!(Checkpoint::load(dir.path()).unwrap().entries().count(), 1);

        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let e = Checkpoint::load(dir.path()).unwrap_err();
        assert!(matches!(e, CheckpointError::Read { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
    }
}
