//! Jetson GPU health: the device nodes CUDA needs exist and the GPU's sysfs load/frequency
//! files are readable. Watched with inotify (no polling timer), so a change reaches the
//! device list as soon as the kernel reports it; a GPU that comes back is Healthy again.
//!
//! Limitation: sysfs attribute files do not emit inotify events when their *content* or
//! readability changes without the file being replaced; such changes are seen on the next
//! event in a watched directory. Device node removal/creation (devtmpfs) is always seen.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use inotify::{Inotify, WatchMask, Watches};

use super::Target;
use edgegpu_platform::Generation;

use crate::gpu::sysfs::GpuSysfs;
use crate::gpu::{next_burst, under_root, watch_dir_for, AbortOnDrop};

/// What is checked for one Jetson GPU (host paths, root prefix removed).
#[derive(Debug, Clone, PartialEq)]
pub struct TegraHealthSpec {
    pub required_nodes: Vec<String>,
    pub sysfs_files: Vec<String>,
}

impl TegraHealthSpec {
    /// What to check on this host: the generation's required nodes (none when it is
    /// unknown: sysfs only) and the GPU's sysfs files found under `root`; `l4t_major` is the
    /// running L4T release, when known.
    pub fn for_host(root: &Path, generation: Option<&Generation>, l4t_major: Option<u32>) -> Self {
        let found = GpuSysfs::find(root, generation, l4t_major);
        let sysfs_files: Vec<String> = found.load.iter().cloned().chain(found.cur_freq()).collect();
        if sysfs_files.is_empty() {
            tracing::warn!("GPU sysfs load/frequency files not found under {}; health checks only cover device nodes", root.display());
        }
        Self {
            required_nodes: generation
                .map_or(&[][..], |g| g.required_nodes)
                .iter()
                .map(|s| s.to_string())
                .collect(),
            sysfs_files,
        }
    }

    /// One check: `Err` names the first problem found.
    pub fn check(&self, root: &Path) -> Result<(), String> {
        let missing: Vec<&str> = self
            .required_nodes
            .iter()
            .filter(|n| std::fs::metadata(under_root(root, n)).is_err())
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!("device node(s) missing: {}", missing.join(", ")));
        }
        for file in &self.sysfs_files {
            if let Err(e) = std::fs::read_to_string(under_root(root, file)) {
                return Err(format!("cannot read {file}: {e}"));
            }
        }
        Ok(())
    }

    /// The directories to watch: each path's parent, or its nearest existing ancestor.
    fn watch_dirs(&self, root: &Path) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for p in self.required_nodes.iter().chain(&self.sysfs_files) {
            if let Some(d) = watch_dir_for(root, &under_root(root, p)) {
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
        dirs
    }
}

const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF);

/// Adds a watch on each of `dirs`. A directory that cannot be watched (watch limit,
/// permissions) is logged once, and again only after a watch on it worked: changes there
/// are then seen only together with events elsewhere.
fn watch_all(watches: &mut Watches, dirs: &[PathBuf], unwatched: &mut Vec<PathBuf>) {
    for dir in dirs {
        match watches.add(dir, MASK) {
            Ok(_) => unwatched.retain(|d| d != dir),
            Err(e) if !unwatched.contains(dir) => {
                tracing::warn!(
                    "cannot watch {} for GPU health changes: {e}; they are noticed only with other events",
                    dir.display()
                );
                unwatched.push(dir.clone());
            }
            Err(_) => {}
        }
    }
}

/// Monitor name in health reasons.
const SOURCE: &str = "tegra";

/// Checks now, then re-checks on every inotify event until the returned guard is dropped or,
/// at the next event, every target's table is gone. `targets` are the slots the Jetson GPU
/// backs (one, or its MIG devices on Thor). The checks read sysfs and stat device nodes,
/// which can block (a sysfs `show` handler runs driver code), so they run on the blocking
/// pool; the runtime thread only waits for inotify events.
pub async fn spawn(
    root: PathBuf,
    spec: TegraHealthSpec,
    targets: Vec<Target>,
) -> anyhow::Result<AbortOnDrop> {
    let inotify = Inotify::init()?;
    let checker = Arc::new(Checker { root, spec });
    // The first check comes after the watches exist, so no change can fall in between.
    let (first, mut unwatched) = checker.recheck(inotify.watches(), Vec::new()).await?;
    for t in &targets {
        t.report(SOURCE, first.clone());
    }
    let mut stream = inotify.into_event_stream([0u8; 4096])?;
    tracing::info!(nodes = ?checker.spec.required_nodes, sysfs = ?checker.spec.sysfs_files, "Tegra health checks started (inotify)");
    let task = tokio::spawn(async move {
        while let Some(burst) = next_burst(&mut stream).await {
            if let Err(e) = burst {
                tracing::warn!("inotify error in Tegra health watch: {e}; health checks stopped");
                break;
            }
            if !targets.iter().any(|t| t.table.strong_count() > 0) {
                break;
            }
            match checker.recheck(stream.watches(), unwatched).await {
                Ok((outcome, still_unwatched)) => {
                    unwatched = still_unwatched;
                    for t in &targets {
                        t.report(SOURCE, outcome.clone());
                    }
                }
                Err(e) => {
                    tracing::warn!("Tegra health check failed to run: {e}; health checks stopped");
                    break;
                }
            }
        }
    });
    Ok(AbortOnDrop::new(&task))
}

/// What one health check needs, shared with the blocking pool.
struct Checker {
    root: PathBuf,
    spec: TegraHealthSpec,
}

impl Checker {
    /// (Re-)adds watches (directories may have appeared or gone), then checks, on the
    /// blocking pool. Returns the outcome and the directories still unwatched.
    async fn recheck(
        self: &Arc<Self>,
        mut watches: Watches,
        mut unwatched: Vec<PathBuf>,
    ) -> Result<(Result<(), String>, Vec<PathBuf>), tokio::task::JoinError> {
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            watch_all(
                &mut watches,
                &this.spec.watch_dirs(&this.root),
                &mut unwatched,
            );
            (this.spec.check(&this.root), unwatched)
        })
        .await
    }
}
