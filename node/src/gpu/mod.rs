//! Everything that faces the hardware: what a GPU is ([`Gpu`], [`MigDevice`], [`Platform`]),
//! how the GPUs of this host are found ([`discovery`], per platform) and how their health is
//! watched ([`health`], per platform), where a Jetson GPU is in sysfs ([`sysfs`]), what it
//! measures right now ([`sensors`]: load, clocks, temperature, power, memory) and which
//! processes hold how much of its memory ([`processes`]). Jetson facts
//! come from one table per generation, the `edgegpu-platform` crate; [`nvml_raw`] holds the
//! NVML MIG calls nvml-wrapper lacks. Nothing here knows about the kubelet or about allocation.

pub mod discovery;
pub mod health;
pub mod nvml_raw;
pub mod processes;
pub mod sensors;
pub mod sysfs;

pub use discovery::{under_root, Gpu, MigDevice, Platform};

/// The directory to watch for changes of `full` (a path under `root`): its parent, or the
/// nearest ancestor that exists, not above `root`. Blocking (stat calls).
pub fn watch_dir_for(root: &std::path::Path, full: &std::path::Path) -> Option<std::path::PathBuf> {
    let mut dir = full.parent();
    while let Some(d) = dir {
        if d.is_dir() {
            return Some(d.to_path_buf());
        }
        if d == root {
            return None;
        }
        dir = d.parent();
    }
    None
}

/// Waits for the next inotify event and takes those already queued with it, so that a burst
/// (a driver reload touches many nodes) costs one rescan. `None`: the stream ended.
pub(crate) async fn next_burst<B>(
    events: &mut inotify::EventStream<B>,
) -> Option<std::io::Result<()>>
where
    B: AsMut<[u8]> + AsRef<[u8]> + Unpin,
{
    use futures_util::{FutureExt, StreamExt};
    if let Err(e) = events.next().await? {
        return Some(Err(e));
    }
    while let Some(Some(Ok(_))) = events.next().now_or_never() {}
    Some(Ok(()))
}

/// Aborts a background task when dropped: a watch that must end with its owner, not at its
/// next event (a SIGHUP or MIG rebuild drops the old resources while their directories stay
/// quiet).
pub struct AbortOnDrop(tokio::task::AbortHandle);

impl AbortOnDrop {
    pub fn new<T>(task: &tokio::task::JoinHandle<T>) -> Self {
        AbortOnDrop(task.abort_handle())
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
