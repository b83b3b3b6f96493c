//! A unix socket this process bound, known by its path *and* its inode: the one check that
//! decides whether a socket file may be removed. The kubelet, an operator or a newer instance
//! of the program may delete the path or put another socket there; removing "our" path then
//! would take someone else's socket away. The device plugin's sockets and the DRA driver's
//! both go through it.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The socket file bound at a path, as `stat` saw it right after `bind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSocket {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

/// What a bound socket's path holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathState {
    /// Still the socket we bound.
    Ours,
    /// Nothing: someone deleted it.
    Missing,
    /// Another file: someone else's socket took the path.
    Replaced,
}

impl BoundSocket {
    /// The identity of the socket just bound at `path` (`symlink_metadata`: never follows a
    /// link). `NotFound` when the path was unlinked between `bind` and now.
    pub fn at(path: &Path) -> io::Result<BoundSocket> {
        let meta = std::fs::symlink_metadata(path)?;
        Ok(BoundSocket {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the path holds now. A path that cannot be read for another reason counts as
    /// ours (left alone, looked at again later), never as gone.
    pub fn state(&self) -> PathState {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => PathState::Ours,
            Ok(_) => PathState::Replaced,
            Err(e) if e.kind() == io::ErrorKind::NotFound => PathState::Missing,
            Err(_) => PathState::Ours,
        }
    }

    /// Unlinks the path if (and only if) it still is the socket we bound; whether something
    /// was removed. A failed unlink is logged.
    pub fn remove_if_ours(&self) -> bool {
        let still_ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino);
        if !still_ours {
            return false;
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("Failed to remove socket {}: {e}", self.path.display());
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_socket_we_bound_is_ours_to_remove() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ours.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let ours = BoundSocket::at(&path).unwrap();
        assert_eq!(ours.state(), PathState::Ours);
        // Someone else's socket renamed over ours.
        let elsewhere = dir.path().join("theirs.sock");
        let _theirs = std::os::unix::net::UnixListener::bind(&elsewhere).unwrap();
        std::fs::rename(&elsewhere, &path).unwrap();
        drop(listener);
        assert_eq!(ours.state(), PathState::Replaced);
        assert!(!ours.remove_if_ours());
        assert!(path.exists(), "the other socket must survive");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(ours.state(), PathState::Missing);
        assert!(!ours.remove_if_ours());
        // Ours again: removed.
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let ours = BoundSocket::at(&path).unwrap();
        assert!(ours.remove_if_ours());
        assert!(!path.exists());
    }
}
