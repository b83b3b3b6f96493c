//! [`FakeHost`]: the temporary root directory and its file primitives (paths, files,
//! links, device nodes). The other files of `host` add its board, NVML and pod-state
//! methods in their own `impl FakeHost` blocks.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::board::Board;

/// A fake host root in a temporary directory (removed on drop).
pub struct FakeHost {
    dir: TempDir,
    pub(super) board: Option<Board>,
    pub(super) nvml_dir: Option<PathBuf>,
}

impl FakeHost {
    /// An empty root (no GPU, no Tegra files).
    pub fn empty() -> FakeHost {
        FakeHost {
            dir: tempfile::Builder::new()
                .prefix("edgegpu-host-")
                .tempdir()
                .expect("temp dir"),
            board: None,
            nvml_dir: None,
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn board(&self) -> Option<Board> {
        self.board
    }

    /// `host_path` (absolute, as on the host) inside this root.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.dir.path().join(host_path.trim_start_matches('/'))
    }

    /// Writes a file (creating parent directories).
    pub fn write(&self, host_path: &str, contents: impl AsRef<[u8]>) {
        let p = self.path(host_path);
        std::fs::create_dir_all(p.parent().unwrap()).expect("create parent dir");
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }

    pub fn mkdir(&self, host_path: &str) {
        std::fs::create_dir_all(self.path(host_path)).expect("mkdir");
    }

    /// A relative symlink at `link` pointing to `target` (both host paths), like sysfs's.
    pub fn symlink(&self, link: &str, target: &str) {
        let link_path = self.path(link);
        std::fs::create_dir_all(link_path.parent().unwrap()).expect("create link dir");
        let depth = link.trim_start_matches('/').matches('/').count();
        let relative = format!("{}{}", "../".repeat(depth), target.trim_start_matches('/'));
        std::os::unix::fs::symlink(relative, &link_path).expect("symlink");
    }

    /// A symlink at `link` (host path) with exactly `target` as its content.
    pub fn symlink_raw(&self, link: &str, target: &str) {
        let link_path = self.path(link);
        std::fs::create_dir_all(link_path.parent().unwrap()).expect("create link dir");
        std::os::unix::fs::symlink(target, &link_path).expect("symlink");
    }

    /// Removes a device node (a GPU "going away").
    pub fn remove_node(&self, host_path: &str) {
        std::fs::remove_file(self.path(host_path)).expect("remove node");
    }

    /// Recreates a device node.
    pub fn restore_node(&self, host_path: &str) {
        self.write(host_path, "");
    }
}
