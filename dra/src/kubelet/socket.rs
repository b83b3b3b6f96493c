//! The two sockets the kubelet side listens on (`dra.sock`, `<driver>-reg.sock`), kept alive
//! for as long as the driver runs.
//!
//! Names are the kubeletplugin helper's (k8s.io/dynamic-resource-allocation v0.36.0
//! `kubeletplugin/draplugin.go` Start, `endpoint.go` listen): fixed, or with the pod's UID
//! for rolling updates ([`super::rolling`]); a stale file at the path (an earlier run of the
//! driver, of the same pod with a UID) is removed before binding. A socket another pod left
//! under its own UID (a pod killed without its clean-up) is not this instance's to remove, as
//! in the helper. Unlike the helper this module also
//! - checks the path every [`CHECK_INTERVAL`] and binds it again when the file is gone (a
//!   kubelet or an operator cleaning its directory): the kubelet's plugin watcher sees the
//!   new registration socket and registers the driver again;
//! - removes a path on shutdown only while it still is the socket this process bound (dev
//!   and inode, the node library's `BoundSocket`, as the device plugin's sockets): a newer
//!   instance that took the path over keeps its socket.
//!
//! Connections from every listener that ever held the path go to one stream, so a single
//! tonic server serves the socket across re-creations. Each goes through the device
//! plugin's `:authority` shim (`edgegpu_node::authority`): the kubelet dials
//! `dra.sock` with the `unix:` scheme (authority `localhost`), but its plugin watcher dials
//! the registration socket with the bare socket path as gRPC target
//! (`pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go` dial), and a
//! client whose gRPC library puts that path into `:authority` unencoded would have every
//! call reset by h2 (`PROTOCOL_ERROR`).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use edgegpu_node::authority::AuthorityShim;
use edgegpu_node::socket::{BoundSocket, PathState};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

/// How often a served socket's path is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// The connections accepted on one served socket.
pub type Incoming = ReceiverStream<io::Result<AuthorityShim<UnixStream>>>;

/// Removes whatever is at `path` (a stale socket) and binds a fresh socket there.
fn bind_fresh(path: &Path) -> io::Result<(UnixListener, BoundSocket)> {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::debug!("Removed stale socket {}", path.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot remove stale socket {}: {e}", path.display()),
            ))
        }
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {}: {e}", path.display())))?;
    let bound = BoundSocket::at(path)?;
    listener.set_nonblocking(true)?;
    Ok((UnixListener::from_std(listener)?, bound))
}

/// Binds `path` (removing a stale file first) and keeps it served until `stop` turns true
/// (or its sender goes away). Returns the stream of accepted connections and the task that
/// owns the socket; the task removes the socket when it ends, if it still is ours.
/// `what` names the socket in logs.
pub fn serve(
    path: PathBuf,
    what: &'static str,
    stop: watch::Receiver<bool>,
) -> io::Result<(Incoming, JoinHandle<()>)> {
    let (listener, bound) = bind_fresh(&path)?;
    let (tx, rx) = mpsc::channel(16);
    let task = tokio::spawn(keep(path, what, listener, bound, tx, stop));
    Ok((ReceiverStream::new(rx), task))
}

async fn keep(
    path: PathBuf,
    what: &'static str,
    mut listener: UnixListener,
    mut bound: BoundSocket,
    tx: mpsc::Sender<io::Result<AuthorityShim<UnixStream>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut check = tokio::time::interval(CHECK_INTERVAL);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Set once another process's socket took the path: never touch it again.
    let mut replaced = false;
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if tx.send(Ok(AuthorityShim::new(stream))).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!("Accepting on the {what} socket {} failed: {e}", path.display());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = check.tick(), if !replaced => match bound.state() {
                PathState::Ours => {}
                PathState::Missing => match bind_fresh(&path) {
                    Ok((new_listener, new_bound)) => {
                        listener = new_listener;
                        bound = new_bound;
                        tracing::warn!(
                            "The {what} socket {} was deleted; created it again",
                            path.display()
                        );
                    }
                    Err(e) => tracing::error!(
                        "The {what} socket {} was deleted and cannot be created again: {e}",
                        path.display()
                    ),
                },
                PathState::Replaced => {
                    replaced = true;
                    tracing::warn!(
                        "The {what} socket {} was replaced by another process's socket; leaving it to that process",
                        path.display()
                    );
                }
            },
        }
    }
    drop(listener);
    if !replaced && bound.remove_if_ours() {
        tracing::debug!("Removed the {what} socket {}", path.display());
    }
}

/// Resolves once `stop` is true or its sender is gone.
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = stop.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_file_is_replaced_and_removed_on_stop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sock");
        std::fs::write(&path, "stale").unwrap();
        let (stop_tx, stop) = watch::channel(false);
        let (_incoming, task) = serve(path.clone(), "test", stop).unwrap();
        use std::os::unix::fs::FileTypeExt;
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(
            meta.file_type().is_socket(),
            "the stale file was not replaced"
        );
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_socket_taken_over_by_someone_else_survives_our_stop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sock");
        let (stop_tx, stop) = watch::channel(false);
        let (_incoming, task) = serve(path.clone(), "test", stop).unwrap();
        let elsewhere = dir.path().join("theirs.sock");
        let _theirs = std::os::unix::net::UnixListener::bind(&elsewhere).unwrap();
        std::fs::rename(&elsewhere, &path).unwrap();
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert!(path.exists(), "the other process's socket must stay");
    }
}
