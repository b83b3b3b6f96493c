//! Restart detection: inotify on the device-plugin directory (and on the kubelet socket's
//! directory when it lives elsewhere). A kubelet that starts deletes every socket in the
//! directory and then creates `kubelet.sock`; either event ends the current generation.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

use edgegpu_kubelet_api::v1beta1::KUBELET_SOCKET_NAME;
use futures_util::{FutureExt, StreamExt};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartReason {
    /// A new `kubelet.sock` appeared: the kubelet (re)started.
    KubeletSocketCreated(PathBuf),
    /// Our own socket was deleted or renamed away.
    OwnSocketDeleted(PathBuf),
    /// The kubelet's `ListAndWatch` stream ended.
    StreamLost,
    /// The other instance we yielded to removed its socket.
    OtherInstanceGone(PathBuf),
    /// The watched directory itself went away or the event queue overflowed.
    WatchLost,
}

impl std::fmt::Display for RestartReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestartReason::KubeletSocketCreated(p) => {
                write!(f, "inotify: {} created, restarting.", p.display())
            }
            RestartReason::OwnSocketDeleted(p) => {
                write!(f, "inotify: {} deleted, restarting.", p.display())
            }
            RestartReason::StreamLost => write!(f, "ListAndWatch stream lost, restarting."),
            RestartReason::OtherInstanceGone(p) => {
                write!(
                    f,
                    "inotify: {} (other instance) deleted, restarting.",
                    p.display()
                )
            }
            RestartReason::WatchLost => {
                write!(
                    f,
                    "inotify: watch lost or event queue overflowed, restarting."
                )
            }
        }
    }
}

/// Why the directories cannot be watched (any of these ends the lifecycle). The cause is
/// part of each message and not a `source`, so `{:#}` does not print it twice.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot create {}: {error}", .dir.display())]
    CreateDir { dir: PathBuf, error: io::Error },
    #[error("inotify_init: {0}")]
    Init(io::Error),
    #[error("cannot watch {}: {error}", .dir.display())]
    Watch { dir: PathBuf, error: io::Error },
    #[error("inotify: {0}")]
    EventStream(io::Error),
    #[error("reading inotify events: {0}")]
    Read(io::Error),
    #[error("inotify event stream ended")]
    Ended,
    /// The blocking task that adds the watches did not finish.
    #[error("{0}")]
    Task(tokio::task::JoinError),
}

/// The watches, before their event stream is registered with the runtime.
struct Watched {
    inotify: Inotify,
    plugin_dir: PathBuf,
    plugin_wd: WatchDescriptor,
    kubelet_wd: WatchDescriptor,
    kubelet_dir: PathBuf,
    kubelet_name: OsString,
}

impl Watched {
    fn into_stream(self) -> Result<DirWatcher, WatchError> {
        let events = self
            .inotify
            .into_event_stream(vec![0u8; 4096])
            .map_err(WatchError::EventStream)?;
        Ok(DirWatcher {
            events,
            plugin_dir: self.plugin_dir,
            plugin_wd: self.plugin_wd,
            kubelet_wd: self.kubelet_wd,
            kubelet_dir: self.kubelet_dir,
            kubelet_name: self.kubelet_name,
        })
    }
}

/// inotify watches on the device-plugin directory (and on the kubelet socket's directory
/// when it lives elsewhere).
pub(crate) struct DirWatcher {
    events: inotify::EventStream<Vec<u8>>,
    plugin_dir: PathBuf,
    plugin_wd: WatchDescriptor,
    kubelet_wd: WatchDescriptor,
    kubelet_dir: PathBuf,
    kubelet_name: OsString,
}

impl DirWatcher {
    /// Watches `plugin_dir` (the device-plugin directory, created if needed) and the
    /// directory of `kubelet_socket` (file-system calls, on the blocking pool).
    pub(crate) async fn new(
        plugin_dir: &Path,
        kubelet_socket: &Path,
    ) -> Result<DirWatcher, WatchError> {
        let (plugin_dir, kubelet_socket) = (plugin_dir.to_path_buf(), kubelet_socket.to_path_buf());
        tokio::task::spawn_blocking(move || Self::watch(plugin_dir, &kubelet_socket))
            .await
            .map_err(WatchError::Task)??
            .into_stream()
    }

    fn watch(plugin_dir: PathBuf, kubelet_socket: &Path) -> Result<Watched, WatchError> {
        std::fs::create_dir_all(&plugin_dir).map_err(|error| WatchError::CreateDir {
            dir: plugin_dir.clone(),
            error,
        })?;
        let inotify = Inotify::init().map_err(WatchError::Init)?;
        let mask = WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF;
        let plugin_wd =
            inotify
                .watches()
                .add(&plugin_dir, mask)
                .map_err(|error| WatchError::Watch {
                    dir: plugin_dir.clone(),
                    error,
                })?;
        let kubelet_dir = kubelet_socket
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let kubelet_name = kubelet_socket
            .file_name()
            .map(OsStr::to_os_string)
            .unwrap_or_else(|| OsString::from(KUBELET_SOCKET_NAME));
        // Adding the same directory twice returns the same descriptor (mask replaced).
        let kubelet_wd =
            inotify
                .watches()
                .add(&kubelet_dir, mask)
                .map_err(|error| WatchError::Watch {
                    dir: kubelet_dir.clone(),
                    error,
                })?;
        Ok(Watched {
            inotify,
            plugin_dir,
            plugin_wd,
            kubelet_wd,
            kubelet_dir,
            kubelet_name,
        })
    }

    /// Waits for the next event that ends a generation whose socket is `own_name`, then
    /// drains events that are already queued so that one kubelet restart (delete all
    /// sockets, create `kubelet.sock`) costs one generation where possible.
    pub(crate) async fn next_restart(
        &mut self,
        own_name: &OsStr,
        other_instance: Option<&OsStr>,
    ) -> Result<RestartReason, WatchError> {
        let mut reason = None;
        loop {
            let next = if reason.is_none() {
                self.events.next().await
            } else {
                match self.events.next().now_or_never() {
                    Some(next) => next,
                    None => break,
                }
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(e)) => return Err(WatchError::Read(e)),
                None => return Err(WatchError::Ended),
            };
            if let Some(found) = self.classify(&event, own_name, other_instance) {
                // A kubelet restart wins over our socket's deletion: it is the event
                // after which registering makes sense.
                let keep_existing = matches!(reason, Some(RestartReason::KubeletSocketCreated(_)));
                if !keep_existing {
                    reason = Some(found);
                }
            }
        }
        Ok(reason.expect("loop only breaks with a reason"))
    }

    fn classify(
        &self,
        event: &inotify::Event<OsString>,
        own_name: &OsStr,
        other_instance: Option<&OsStr>,
    ) -> Option<RestartReason> {
        let mask = event.mask;
        if mask.intersects(
            EventMask::Q_OVERFLOW
                | EventMask::DELETE_SELF
                | EventMask::MOVE_SELF
                | EventMask::IGNORED,
        ) {
            return Some(RestartReason::WatchLost);
        }
        let name = event.name.as_deref()?;
        if event.wd == self.kubelet_wd
            && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)
            && name == self.kubelet_name
        {
            return Some(RestartReason::KubeletSocketCreated(
                self.kubelet_dir.join(name),
            ));
        }
        if event.wd == self.plugin_wd
            && mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM)
            && name == own_name
        {
            return Some(RestartReason::OwnSocketDeleted(self.plugin_dir.join(name)));
        }
        if event.wd == self.plugin_wd
            && mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM)
            && Some(name) == other_instance
        {
            return Some(RestartReason::OtherInstanceGone(self.plugin_dir.join(name)));
        }
        None
    }
}
