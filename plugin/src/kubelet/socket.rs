//! Plugin sockets: unique names per registration and removal only of what we bound.
//!
//! Why unique names: re-registering the same resource with the same socket path races with
//! the kubelet closing the previous stream and can leave the resource at allocatable 0
//! (kubernetes #127803, #121994). Why the inode check: an overlapping old instance that
//! unlinks the socket of a newer one zeroes the node's capacity (rdma-shared-dev-plugin #319).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use edgegpu_node::socket::BoundSocket;
use tokio::net::UnixListener;

/// Counter that makes socket names unique within one process even inside one second.
static SOCKET_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The socket-name prefix derived from a resource name, NVIDIA style:
/// `nvidia.com/gpu` → `nvidia-gpu`, `example.com/fpga.shared` → `example-fpga.shared`.
pub fn socket_prefix(resource_name: &str) -> String {
    let (domain, name) = resource_name
        .split_once('/')
        .unwrap_or(("edgegpu", resource_name));
    let vendor = domain.split('.').next().unwrap_or("edgegpu");
    let raw = format!("{vendor}-{name}");
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// A random tag fixed for this process: two instances started in the same second (both
/// possibly PID 1 in their containers) still never pick the same name. Inode numbers are
/// recycled at once after an unlink, so the inode check alone cannot tell a socket that
/// another process bound at *the same path* from ours; distinct names rule that out.
fn process_tag() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static TAG: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *TAG.get_or_init(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish() as u16
    })
}

/// A fresh socket file name `<prefix>-<unix-secs>-<process-tag>-<n>.sock`.
fn unique_socket_name(prefix: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let n = SOCKET_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{secs}-{:04x}-{n}.sock", process_tag())
}

/// A unix socket this process bound, identified by path *and* inode (the node library's
/// [`BoundSocket`]).
#[derive(Debug)]
pub struct OwnedSocket(BoundSocket);

impl OwnedSocket {
    /// Binds a new, uniquely named socket `<dir>/<prefix>-….sock`. An existing file of the
    /// same name is never removed: another name is tried instead. bind() and stat() are
    /// file-system calls, so they run on the blocking pool.
    pub async fn bind_unique(dir: &Path, prefix: &str) -> io::Result<(OwnedSocket, UnixListener)> {
        let (dir, prefix) = (dir.to_path_buf(), prefix.to_string());
        let (socket, listener) =
            tokio::task::spawn_blocking(move || Self::bind_unique_blocking(&dir, &prefix))
                .await
                .map_err(io::Error::other)??;
        listener.set_nonblocking(true)?;
        Ok((socket, UnixListener::from_std(listener)?))
    }

    fn bind_unique_blocking(
        dir: &Path,
        prefix: &str,
    ) -> io::Result<(OwnedSocket, std::os::unix::net::UnixListener)> {
        let mut last_err = None;
        for _ in 0..16 {
            let path = dir.join(unique_socket_name(prefix));
            match std::os::unix::net::UnixListener::bind(&path) {
                Ok(listener) => match BoundSocket::at(&path) {
                    Ok(bound) => return Ok((OwnedSocket(bound), listener)),
                    // Unlinked between bind() and stat(): a restarting kubelet is deleting
                    // every socket in the directory. Bind again under a new name.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => last_err = Some(e),
                    Err(e) => return Err(e),
                },
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot bind socket {}: {e}", path.display()),
                    ))
                }
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)))
    }

    /// Absolute (or as given) path of the socket.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The socket's file name, which is what `RegisterRequest.endpoint` carries.
    pub fn file_name(&self) -> String {
        self.path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Unlinks the path if (and only if) it still is the socket we bound. Returns whether
    /// something was removed.
    pub fn remove(&self) -> bool {
        self.0.remove_if_ours()
    }
}

impl OwnedSocket {
    /// Removes the socket (as [`OwnedSocket::remove`]) on the blocking pool.
    pub async fn remove_off_runtime(self) {
        if let Err(e) = tokio::task::spawn_blocking(move || drop(self)).await {
            tracing::warn!("socket removal task failed: {e}");
        }
    }
}

/// A last resort on error paths; the lifecycle removes its sockets with
/// [`OwnedSocket::remove_off_runtime`].
impl Drop for OwnedSocket {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegpu_node::socket::PathState;

    #[test]
    fn prefix_follows_nvidia_naming() {
        assert_eq!(socket_prefix("nvidia.com/gpu"), "nvidia-gpu");
        assert_eq!(socket_prefix("nvidia.com/gpu.shared"), "nvidia-gpu.shared");
        assert_eq!(socket_prefix("example.com/a b"), "example-a-b");
    }

    #[test]
    fn names_are_unique_within_a_second() {
        let a = unique_socket_name("x");
        let b = unique_socket_name("x");
        assert_ne!(a, b);
        assert!(a.starts_with("x-") && a.ends_with(".sock"), "{a}");
    }

    #[tokio::test]
    async fn removal_spares_a_socket_bound_by_someone_else() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, listener) = OwnedSocket::bind_unique(dir.path(), "t").await.unwrap();
        assert_eq!(ours.0.state(), PathState::Ours);
        // Someone else puts their own socket at our path (bound elsewhere, renamed over).
        let elsewhere = dir.path().join("theirs.sock");
        let _theirs = std::os::unix::net::UnixListener::bind(&elsewhere).unwrap();
        std::fs::rename(&elsewhere, ours.path()).unwrap();
        drop(listener);
        assert_eq!(ours.0.state(), PathState::Replaced);
        assert!(!ours.remove());
        assert!(ours.path().exists(), "the other socket must survive");
    }
}
