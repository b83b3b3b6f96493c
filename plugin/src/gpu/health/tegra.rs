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
use edgegpu_platform::host::DEVFREQ_CLASS;
use edgegpu_platform::{is_gpu_of_node_name, Generation};

use crate::gpu::{next_burst, under_root, watch_dir_for, AbortOnDrop};

/// What is checked for one Jetson GPU (host paths, root prefix removed).
#[derive(Debug, Clone, PartialEq)]
pub struct TegraHealthSpec {
    pub required_nodes: Vec<String>,
    pub sysfs_files: Vec<String>,
}

/// Host path of `p` (which is under `root`), or None when it escaped the root.
fn host_path(root: &Path, p: &Path) -> Option<String> {
    let rel = p.strip_prefix(root).ok()?;
    Some(format!("/{}", rel.display()))
}

/// Finds the GPU's sysfs files: generic `/sys/class/devfreq/*` scan first (jetson_stats
/// `jtop/core/gpu.py` does the same), then the generation's known paths (those of the running
/// L4T release first).
fn find_sysfs_files(
    root: &Path,
    generation: Option<&Generation>,
    l4t_major: Option<u32>,
) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(under_root(&root, DEVFREQ_CLASS)) {
        let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for entry in entries {
            let name = std::fs::read(entry.join("device/of_node/name"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .trim_matches(|c: char| c == '\0' || c.is_whitespace())
                        .to_string()
                })
                .unwrap_or_default();
            if name.is_empty() || !is_gpu_of_node_name(&name) {
                continue;
            }
            let (Ok(devfreq), Ok(device)) =
                (entry.canonicalize(), entry.join("device").canonicalize())
            else {
                continue;
            };
            let (Some(devfreq), Some(device)) =
                (host_path(&root, &devfreq), host_path(&root, &device))
            else {
                continue;
            };
            // An unknown generation may have a `load` file: take it when it is there.
            if generation.map_or(true, |g| g.sysfs.load_file)
                && under_root(&root, &device).join("load").is_file()
            {
                files.push(format!("{device}/load"));
            }
            files.push(format!("{devfreq}/cur_freq"));
            break;
        }
    }
    if files.is_empty() {
        let known = generation.map_or_else(Vec::new, |g| g.known_dirs_for(l4t_major));
        for dir in known {
            let freq = format!("{}/cur_freq", dir.devfreq);
            if under_root(&root, &freq).is_file() {
                if let Some(load) = dir.load.filter(|l| under_root(&root, l).is_file()) {
                    files.push(load.to_string());
                }
                files.push(freq);
                break;
            }
        }
    }
    files
}

impl TegraHealthSpec {
    /// What to check on this host: the generation's required nodes (none when it is
    /// unknown: sysfs only) and the GPU's sysfs files found under `root`; `l4t_major` is the
    /// running L4T release, when known.
    pub fn for_host(root: &Path, generation: Option<&Generation>, l4t_major: Option<u32>) -> Self {
        let sysfs_files = find_sysfs_files(root, generation, l4t_major);
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
