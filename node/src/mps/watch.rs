//! The plugin's side: a resource served through MPS is healthy only while its control daemon
//! is ready with the settings this config asks for. The companion's status file is watched
//! with inotify (the resource's directory, or the nearest existing parent until it exists),
//! so a daemon that dies makes its devices unhealthy at once and a restarted one heals them.

use std::path::{Path, PathBuf};

use inotify::{Inotify, WatchMask};

use super::plan::DaemonSettings;
use super::status::{self, State, Status};
use super::MpsPaths;
use crate::gpu::health::Target;
use crate::gpu::AbortOnDrop;

/// The health source name MPS reports under.
pub const SOURCE: &str = "mps";

/// What a status means for the resource's devices: `Ok` or the reason they are unhealthy.
pub fn verdict(
    status: Result<Option<Status>, String>,
    wanted: &DaemonSettings,
) -> Result<(), String> {
    let status = match status {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(
                "waiting for the MPS control daemon (no status yet: is the companion `edgegpu-device-plugin mps-control-daemon` running?)"
                    .into(),
            )
        }
        Err(e) => return Err(e),
    };
    match status.state {
        State::Ready if &status.settings == wanted => Ok(()),
        State::Ready => Err(format!(
            "the MPS control daemon runs other settings ({:?}) than this config ({:?})",
            status.settings.commands(),
            wanted.commands()
        )),
        State::Starting => Err(format!(
            "the MPS control daemon is starting{}",
            status.reason.map(|r| format!(": {r}")).unwrap_or_default()
        )),
        State::Failed => Err(format!(
            "the MPS control daemon failed ({}); the companion restarts it",
            status.reason.unwrap_or_default()
        )),
        State::Refused => Err(format!(
            "MPS cannot run on this host: {}",
            status.reason.unwrap_or_default()
        )),
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
            let read = tokio::task::spawn_blocking(move || status::read(&path))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            let now = verdict(read, &wanted);
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
        assert_eq!(verdict(Ok(Some(status(State::Ready, 50))), &want), Ok(()));
        assert!(verdict(Ok(Some(status(State::Ready, 25))), &want)
            .unwrap_err()
            .contains("other settings"));
        assert!(verdict(Ok(None), &want)
            .unwrap_err()
            .contains("mps-control-daemon"));
        assert!(verdict(Ok(Some(status(State::Refused, 50))), &want)
            .unwrap_err()
            .contains("cannot run on this host: why"));
        assert!(verdict(Ok(Some(status(State::Failed, 50))), &want)
            .unwrap_err()
            .contains("restarts it"));
        assert!(verdict(Err("bad file".into()), &want).is_err());
    }
}
