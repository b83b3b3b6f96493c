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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::kubelet::{ClaimRef, PreparedDevice};

/// The checkpoint's file name.
pub const FILE_NAME: &str = "checkpoint.json";
/// The format version written.
pub const VERSION: u32 = 1;

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
    pub fn load(plugin_dir: &Path) -> Result<Checkpoint, String> {
        let path = plugin_dir.join(FILE_NAME);
        let claims = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: File = serde_json::from_slice(&bytes).map_err(|e| {
                    format!(
                        "the checkpoint {} is corrupt ({e}); it was left as it is: repair or remove it (removing it forgets which claims are prepared)",
                        path.display()
                    )
                })?;
                if file.version != VERSION {
                    return Err(format!(
                        "the checkpoint {} has version {} (this driver reads {VERSION})",
                        path.display(),
                        file.version
                    ));
                }
                for (uid, entry) in &file.claims {
                    if *uid != entry.claim.uid {
                        return Err(format!(
                            "the checkpoint {} is corrupt: entry {uid} holds claim {}",
                            path.display(),
                            entry.claim.uid
                        ));
                    }
                }
                file.claims
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(Checkpoint { path, claims })
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
    pub fn put(&mut self, entry: ClaimEntry) -> Result<(), String> {
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
    pub fn remove(&mut self, uid: &str) -> Result<(), String> {
        let Some(old) = self.claims.remove(uid) else {
            return Ok(());
        };
        self.save().map_err(|e| {
            self.claims.insert(uid.to_string(), old);
            e
        })
    }

    fn save(&self) -> Result<(), String> {
        let file = File {
            version: VERSION,
            claims: self.claims.clone(),
        };
        let mut text = serde_json::to_vec_pretty(&file).expect("the checkpoint serialises");
        text.push(b'\n');
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        edgegpu_host::fsops::atomic_write(&self.path, &text, 0o600)
            .map_err(|e| format!("cannot write the checkpoint {}: {e}", self.path.display()))
    }
}
