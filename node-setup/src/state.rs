//! What `apply` did, kept under `<root>/var/lib/edgegpu/node-setup/` so that `revert` can
//! undo exactly that: a manifest plus a backup of every original file.
//!
//! Paths in the manifest are host-absolute, so a tree configured at image-build time
//! (`--root $IMAGE_ROOTFS`) can be reverted on the booted device.

use serde::{Deserialize, Serialize};

use crate::restart::Service;
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

pub const STATE_DIR: &str = "/var/lib/edgegpu/node-setup";
pub const MANIFEST: &str = "/var/lib/edgegpu/node-setup/manifest.json";
pub const BACKUP_DIR: &str = "/var/lib/edgegpu/node-setup/backups";

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    /// Format of this file.
    pub format: u32,
    /// Tool version that wrote it.
    pub tool: String,
    pub entries: Vec<Entry>,
    /// Directories `apply` created (outermost first); removed by revert when empty.
    pub created_dirs: Vec<String>,
    /// Services to restart after a revert.
    pub services: Vec<Service>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// Host-absolute path of the file that was replaced (symlinks followed).
    pub path: String,
    /// Backup of the original, host-absolute; `None`: the file did not exist.
    pub backup: Option<String>,
    /// Digest of what apply wrote last, to notice later edits by someone else.
    pub written: String,
    /// What reads this file ([`Service::Docker`]: it is dockerd's daemon.json), so that
    /// revert can tell whether a reload undoes the change. Absent in manifests of older
    /// releases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
}

impl Manifest {
    pub fn load(host: &HostRoot) -> Result<Option<Manifest>> {
        let Some(text) = host.read(MANIFEST)? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| SetupError::Malformed {
                file: MANIFEST.into(),
                line: e.line(),
                column: e.column(),
                message: format!("invalid manifest: {e}"),
            })
    }

    pub fn render(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("manifest serialises");
        s.push('\n');
        s
    }
}

/// Host-absolute backup path for `path`: the path with '/' spelled as '%2F' (and '%' as
/// '%25') so every original gets its own flat file name.
pub fn backup_path(path: &str) -> String {
    let name = path.replace('%', "%25").replace('/', "%2F");
    format!("{BACKUP_DIR}/{name}")
}
