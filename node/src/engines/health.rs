//! Engine health watched with inotify, in the manner of the Jetson GPU's monitor
//! (`gpu::health::tegra`): checked at start, then again after every burst of events in the
//! watched directories (`/dev`, each platform device directory and its host1x parent). An
//! engine whose node comes back is healthy again.
//!
//! Limitation (as for the GPU): sysfs does not emit inotify events when a driver is unbound
//! on a real kernel; such a change is seen with the next event in a watched directory.

use std::path::{Path, PathBuf};

use inotify::{Inotify, WatchMask};

use super::Engine;
use crate::gpu::health::Target;
use crate::gpu::{next_burst, under_root, watch_dir_for, AbortOnDrop};

/// Monitor name in health reasons.
pub const SOURCE: &str = "engine";

const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF);

/// The directories whose events may change `engines`' health.
fn watch_dirs(root: &Path, engines: &[Engine]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for e in engines {
        let mut paths: Vec<PathBuf> = e.nodes.iter().map(|n| under_root(root, n)).collect();
        if let Some(dev) = &e.sysfs {
            let full = under_root(root, &dev.to_string_lossy());
            paths.push(full.join("driver"));
            paths.push(full);
        }
        for p in paths {
            if let Some(d) = watch_dir_for(root, &p) {
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
    }
    dirs
}

/// Checks every engine now and reports to its target, then re-checks after every inotify
/// burst until the guard is dropped or every target's table is gone. `watched` pairs each
/// engine with the health-table slot it backs.
pub async fn spawn(root: PathBuf, watched: Vec<(Engine, Target)>) -> anyhow::Result<AbortOnDrop> {
    let inotify = Inotify::init()?;
    let engines: Vec<Engine> = watched.iter().map(|(e, _)| e.clone()).collect();
    let check = move |watches: &mut inotify::Watches, root: &Path| {
        for d in watch_dirs(root, &engines) {
            if let Err(e) = watches.add(&d, MASK) {
                tracing::debug!("cannot watch {} for engine health: {e}", d.display());
            }
        }
        engines.iter().map(|e| e.health(root)).collect::<Vec<_>>()
    };
    let mut watches = inotify.watches();
    let first = check(&mut watches, &root);
    for ((_, t), outcome) in watched.iter().zip(first) {
        t.report(SOURCE, outcome);
    }
    let mut stream = inotify.into_event_stream([0u8; 4096])?;
    tracing::info!(
        engines = ?watched.iter().map(|(e, _)| e.id()).collect::<Vec<_>>(),
        "engine health checks started (inotify)"
    );
    let task = tokio::spawn(async move {
        while let Some(burst) = next_burst(&mut stream).await {
            if let Err(e) = burst {
                tracing::warn!("inotify error in engine health watch: {e}; health checks stopped");
                break;
            }
            if !watched.iter().any(|(_, t)| t.table.strong_count() > 0) {
                break;
            }
            // Few stat calls on /dev and sysfs attribute directories: cheap enough for the
            // runtime thread, unlike the GPU's sysfs `show` handlers.
            let outcomes = check(&mut stream.watches(), &root);
            for ((_, t), outcome) in watched.iter().zip(outcomes) {
                t.report(SOURCE, outcome);
            }
        }
    });
    Ok(AbortOnDrop::new(&task))
}
