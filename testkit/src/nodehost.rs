//! A fake host root for node-setup tests and benchmarks: a temporary directory laid out
//! like `/` (units, k3s binary, docker and containerd configs), passed with `--root`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Files under the root: content, mode and modification time, to prove that a run
/// changed nothing (or exactly what it should).
pub type Snapshot = BTreeMap<PathBuf, (Vec<u8>, u32, SystemTime)>;

pub struct NodeHost {
    dir: tempfile::TempDir,
}

impl Default for NodeHost {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeHost {
    pub fn new() -> Self {
        NodeHost {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// On-disk path of host-absolute `host_path`.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.root().join(host_path.trim_start_matches('/'))
    }

    /// Writes a file (mode 0644), creating its directories.
    pub fn write(&self, host_path: &str, contents: impl AsRef<[u8]>) -> &Self {
        let p = self.path(host_path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, contents).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        self
    }

    /// Writes an executable (mode 0755).
    pub fn executable(&self, host_path: &str, contents: impl AsRef<[u8]>) -> &Self {
        self.write(host_path, contents);
        std::fs::set_permissions(self.path(host_path), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        self
    }

    /// Creates a symlink at `host_path` pointing at `target` (taken literally).
    pub fn symlink(&self, host_path: &str, target: &str) -> &Self {
        let p = self.path(host_path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
        self
    }

    pub fn set_mode(&self, host_path: &str, mode: u32) -> &Self {
        std::fs::set_permissions(self.path(host_path), std::fs::Permissions::from_mode(mode))
            .unwrap();
        self
    }

    pub fn read(&self, host_path: &str) -> String {
        std::fs::read_to_string(self.path(host_path))
            .unwrap_or_else(|e| panic!("reading {host_path}: {e}"))
    }

    pub fn exists(&self, host_path: &str) -> bool {
        self.path(host_path).exists()
    }

    /// True when `host_path` itself is a symlink.
    pub fn is_symlink(&self, host_path: &str) -> bool {
        std::fs::symlink_metadata(self.path(host_path))
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false)
    }

    /// A stand-in k3s binary at /usr/local/bin/k3s embedding `version` the way the real
    /// one does (`v1.30.4+k3s1` among other strings), or no version string at all.
    pub fn k3s_binary(&self, version: Option<&str>) -> &Self {
        let mut body = b"\x7fELF-not-really\0go1.22.5\0".to_vec();
        body.extend(std::iter::repeat(0u8).take(4096));
        if let Some(v) = version {
            body.extend_from_slice(b"github.com/k3s-io/k3s/pkg/version.Version");
            body.extend_from_slice(v.as_bytes());
            body.extend_from_slice(b"v0.0.0-upstream");
        }
        self.executable("/usr/local/bin/k3s", body)
    }

    /// The NVIDIA runtime binary at its default path.
    pub fn nvidia_runtime(&self) -> &Self {
        self.executable("/usr/bin/nvidia-container-runtime", "#!/bin/sh\nexit 0\n")
    }

    /// Every regular file and symlink under the root with content, mode and mtime.
    pub fn snapshot(&self) -> Snapshot {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                let meta = std::fs::symlink_metadata(entry.path()).unwrap();
                let rel = entry
                    .path()
                    .strip_prefix(self.root())
                    .unwrap()
                    .to_path_buf();
                if meta.is_dir() {
                    stack.push(entry.path());
                } else if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(entry.path()).unwrap();
                    out.insert(
                        rel,
                        (
                            target.into_os_string().into_encoded_bytes(),
                            0o120000,
                            meta.modified().unwrap(),
                        ),
                    );
                } else {
                    out.insert(
                        rel,
                        (
                            std::fs::read(entry.path()).unwrap(),
                            meta.permissions().mode(),
                            meta.modified().unwrap(),
                        ),
                    );
                }
            }
        }
        out
    }
}
