//! The plugin's side: a resource served through MPS is healthy only while its control daemon
//! is ready with the settings this config asks for. The companion's status file is watched
//! with inotify (the resource's directory, or the nearest existing parent until it exists),
//! so a daemon that dies makes its devices unhealthy at once and a restarted one heals them.

use std::path::{Path, PathBuf};

use inotify::{Inotify, WatchMask};

use super::plan::DaemonSettings;
use super::status::{self, ReadError, State, Status};
use super::MpsPaths;
use crate::gpu::health::Target;
use crate::gpu::AbortOnDrop;

/// The health source name MPS reports under.
pub const SOURCE: &str = "mps";

/// Why a resource served through MPS is unhealthy: what the companion's status says, or
/// that there is none to read.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("waiting for the MPS control daemon (no status yet: is the companion `edgegpu-device-plugin mps-control-daemon` running?)")]
    NoStatus,
    #[error(transparent)]
    Unreadable(#[from] ReadError),
    /// Ready, with settings (as control commands) other than this config's.
    #[error(
        "the MPS control daemon runs other settings ({running:?}) than this config ({wanted:?})"
    )]
    OtherSettings {
        running: Vec<String>,
        wanted: Vec<String>,
    },
    #[error("the MPS control daemon is starting{}", .reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Starting { reason: Option<String> },
    #[error("the MPS control daemon failed ({}); the companion restarts it", .reason.as_deref().unwrap_or_default())]
    Failed { reason: Option<String> },
    #[error("MPS cannot run on this host: {}", .reason.as_deref().unwrap_or_default())]
    Refused { reason: Option<String> },
}

/// What a status means for the resource's devices: `Ok` or why they are unhealthy.
pub fn verdict(
    status: Result<Option<Status>, ReadError>,
    wanted: &DaemonSettings,
) -> Result<(), NotReady> {
    let Some(status) = status? else {
        return Err(NotReady::NoStatus);
    };
    let reason = status.reason;
    match status.state {
        State::Ready if &status.settings == wanted => Ok(()),
        State::Ready => Err(NotReady::OtherSettings {
            running: status.settings.commands(),
            wanted: wanted.commands(),
        }),
        State::Starting => Err(NotReady::Starting { reason }),
        State::Failed => Err(NotReady::Failed { reason }),
        State::Refused => Err(NotReady::Refused { reason }),
    }
}

/// Watches `paths`' status and reports to `targets` until the returned guard is dropped.
pub fn spawn(
    paths: MpsPaths,
    wanted: DaemonSettings,
    targets: Vec<Target>,
) -> std::io::Result<AbortOnDrop> {
    let inotify = Inotify::init()?;
    let mut stream = inotify.into_event_stream([0u8; 1024])?;
    let task = tokio::spawn(async move {
        let mut watched: Option<(PathBuf, inotify::WatchDescriptor)> = None;
        let mut last: Option<Result<(), String>> = None;
        loop {
            // (Re)place the watch on the deepest existing directory towards the status file,
            // until that stays the same: a directory made below the old one before the new
            // watch was in place sends it no event, so it is looked for again after.
            loop {
                let dir = crate::gpu::watch_dir_for(Path::new("/"), &paths.status);
                if watched.as_ref().map(|(d, _)| d) == dir.as_ref() {
                    break;
                }
                let mut watches = stream.watches();
                if let Some((_, wd)) = watched.take() {
                    let _ = watches.remove(wd);
                }
                let Some(d) = dir else { break };
                match watches.add(
                    &d,
                    WatchMask::MOVED_TO
                        | WatchMask::CREATE
                        | WatchMask::DELETE
                        | WatchMask::CLOSE_WRITE
                        | WatchMask::DELETE_SELF,
                ) {
                    Ok(wd) => watched = Some((d, wd)),
                    Err(e) => {
                        tracing::warn!("cannot watch {}: {e}", d.display());
                        break;
                    }
                }
            }
            let path = paths.status.clone();
            // The health table keeps reasons as text: converted here, where they go to it.
            let now = match tokio::task::spawn_blocking(move || status::read(&path)).await {
                Ok(read) => verdict(read, &wanted).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if last.as_ref() != Some(&now) {
                match &now {
                    Ok(()) => {
                        tracing::info!(resource = %wanted.resource, "MPS control daemon ready")
                    }
                    Err(why) => tracing::warn!(resource = %wanted.resource, "{why}"),
                }
                let mut alive = false;
                for t in &targets {
                    alive |= t.report(SOURCE, now.clone());
                }
                if !alive {
                    return;
                }
                last = Some(now);
            }
            match crate::gpu::next_burst(&mut stream).await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    tracing::warn!("inotify error watching the MPS status: {e}");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                None => return,
            }
        }
    });
    Ok(AbortOnDrop::new(&task))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pct: u32) -> DaemonSettings {
        DaemonSettings {
            resource: "nvidia.com/gpu".into(),
            exclusive_gpus: vec![],
            active_thread_percentage: Some(pct),
            pinned_memory_limits: vec![],
        }
    }

    fn status(state: State, pct: u32) -> Status {
        Status {
            state,
            reason: Some("why".into()),
            pid: None,
            restarts: 0,
            settings: settings(pct),
        }
    }

    #[test]
    fn ready_with_the_wanted_settings_only() {
        let want = settings(50);
        let why = |s: Result<Option<Status>, ReadError>| verdict(s, &want).unwrap_err();
        assert!(verdict(Ok(Some(status(State::Ready, 50))), &want).is_ok());
        assert!(why(Ok(Some(status(State::Ready, 25))))
            .to_string()
            .contains("other settings"));
        assert!(why(Ok(None)).to_string().contains("mps-control-daemon"));
        assert_eq!(
            why(Ok(Some(status(State::Refused, 50)))).to_string(),
            "MPS cannot run on this host: why"
        );
        assert_eq!(
            why(Ok(Some(status(State::Failed, 50)))).to_string(),
            "the MPS control daemon failed (why); the companion restarts it"
        );
        assert_eq!(
            why(Ok(Some(status(State::Starting, 50)))).to_string(),
            "the MPS control daemon is starting: why"
        );
        let mut starting = status(State::Starting, 50);
        starting.reason = None;
        assert_eq!(
            why(Ok(Some(starting))).to_string(),
            "the MPS control daemon is starting"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status.json");
        std::fs::write(&path, "{").unwrap();
        let unreadable = why(status::read(&path));
        assert!(
            matches!(
                unreadable,
                NotReady::Unreadable(ReadError::Malformed { .. })
            ),
            "{unreadable:?}"
        );
    }
}
