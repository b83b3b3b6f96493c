//! The `/dev` nodes a GPU container needs (`--pass-device-specs`), per platform.
//!
//! Only nodes that exist under `--root` are returned, and they are returned with their host
//! path (the root prefix removed): the container runtime on the host opens them.
//!
//! Finding them reads directories, so it is not done inside `Allocate`: [`DeviceNodes`] keeps
//! the list current from inotify events (a node such as `/dev/nvidia-uvm` may appear after
//! the plugin started) and `Allocate` only reads that list.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use inotify::{Inotify, WatchMask, Watches};

use edgegpu_platform::csv;
use edgegpu_platform::host::CONTAINER_CSV_DIR;
use edgegpu_platform::procfs::{MigMinors, CAPS_DEV_DIR, CONTROL_NODES, MIG_MINORS};
use edgegpu_platform::{Generation, UNKNOWN_GENERATION_CONTAINER_NODES};

use crate::gpu::{next_burst, under_root, watch_dir_for, AbortOnDrop};

/// The `dev` entries of the runtime's CSV files under `root` (`edgegpu_platform::csv`; r32's
/// bare names included). Unreadable or malformed files are skipped with a warning.
fn csv_device_patterns(root: &Path) -> Vec<String> {
    let dir = under_root(root, CONTAINER_CSV_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let parsed = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|t| csv::parse(&t).map_err(|e| format!("line {}: {}", e.line, e.message)));
        match parsed {
            Ok(entries) => {
                for e in entries.into_iter().filter(|e| e.kind == csv::Kind::Dev) {
                    if !out.contains(&e.pattern) {
                        out.push(e.pattern);
                    }
                }
            }
            Err(e) => tracing::warn!(file = %file.display(), "cannot use runtime CSV file: {e}"),
        }
    }
    out
}

/// Expands a host path pattern under `root`; returns host paths (root prefix removed) of
/// existing entries that are not directories, sorted per glob component.
fn expand(root: &Path, pattern: &str) -> Vec<String> {
    let list = |dir: &str| -> Vec<String> {
        std::fs::read_dir(under_root(root, dir))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect()
    };
    csv::expand(pattern, list)
        .into_iter()
        // Follows links (e.g. /dev/dri/by-path entries); a dangling link is skipped.
        .filter(|p| std::fs::metadata(under_root(root, p)).is_ok_and(|m| !m.is_dir()))
        .collect()
}

/// Tegra: the generation's nodes (the union of all generations' when it is unknown) plus the
/// runtime CSV `dev` entries, deduplicated, existing only.
pub fn tegra_device_paths(root: &Path, generation: Option<&Generation>) -> Vec<String> {
    let nodes = generation.map_or(UNKNOWN_GENERATION_CONTAINER_NODES, |g| g.container_nodes);
    let mut patterns: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
    patterns.extend(csv_device_patterns(root));
    collect(root, &patterns)
}

/// Discrete GPU: `/dev/nvidia<minor>` for the allocated GPUs plus the control nodes present.
pub fn discrete_device_paths(root: &Path, minors: &[u32]) -> Vec<String> {
    let mut patterns: Vec<String> = CONTROL_NODES.iter().map(|s| s.to_string()).collect();
    patterns.extend(minors.iter().map(|m| format!("/dev/nvidia{m}")));
    collect(root, &patterns)
}

/// A MIG device: its GPU instance and compute instance on the GPU `/dev/nvidia<gpu_minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigInstance {
    pub gpu_minor: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// The `/dev/nvidia-caps` nodes (GPU instance and compute instance access) of each of
/// `instances`, from the driver's `mig-minors` (NVIDIA's plugin does the same,
/// `internal/rm/nvml_devices.go`), read once for all. Per instance, `Err` says what is missing.
fn mig_device_paths(root: &Path, instances: &[MigInstance]) -> Vec<Result<Vec<String>, String>> {
    if instances.is_empty() {
        return Vec::new();
    }
    let file = under_root(root, MIG_MINORS);
    let minors = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))
        .and_then(|text| {
            MigMinors::parse(&text)
                .map_err(|e| format!("{}:{}: {}", file.display(), e.line, e.message))
        });
    let nodes_of = |i: &MigInstance| -> Result<Vec<String>, String> {
        let nodes = minors
            .as_ref()
            .map_err(Clone::clone)?
            .mig_nodes(i.gpu_minor, i.gpu_instance, i.compute_instance)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        for node in &nodes {
            if std::fs::metadata(under_root(root, node)).is_err() {
                return Err(format!("{node} does not exist"));
            }
        }
        Ok(nodes.to_vec())
    };
    instances.iter().map(nodes_of).collect()
}

fn collect(root: &Path, patterns: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in patterns {
        for path in expand(root, p) {
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// Which nodes a host's GPUs may need.
#[derive(Debug, Clone)]
pub struct Candidates {
    pub gpus: GpuNodes,
    /// The MIG devices served (their `/dev/nvidia-caps` nodes).
    pub mig: Vec<MigInstance>,
}

/// The nodes of the GPUs themselves.
#[derive(Debug, Clone)]
pub enum GpuNodes {
    /// A Jetson of this generation (`None`: unknown generation).
    Tegra(Option<&'static Generation>),
    /// Discrete GPUs with these minor numbers.
    Discrete(Vec<u32>),
}

impl Candidates {
    /// The nodes present now (blocking).
    fn scan(&self, root: &Path) -> Snapshot {
        let nodes = match &self.gpus {
            GpuNodes::Tegra(generation) => tegra_device_paths(root, *generation),
            GpuNodes::Discrete(minors) => discrete_device_paths(root, minors),
        };
        let mig = self
            .mig
            .iter()
            .copied()
            .zip(mig_device_paths(root, &self.mig))
            .collect();
        Snapshot { nodes, mig }
    }

    /// Directories whose changes can change [`Candidates::scan`] (blocking). The driver's
    /// `mig-minors` (procfs, no inotify) is fixed while the driver is loaded; a reload
    /// recreates the nodes, and that is seen.
    fn watch_dirs(&self, root: &Path) -> Vec<PathBuf> {
        let mut patterns: Vec<String> = match &self.gpus {
            GpuNodes::Tegra(generation) => {
                let nodes =
                    generation.map_or(UNKNOWN_GENERATION_CONTAINER_NODES, |g| g.container_nodes);
                let mut p: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
                p.extend(csv_device_patterns(root));
                // The CSV directory itself (files added or removed change the patterns).
                p.push(format!("{CONTAINER_CSV_DIR}/*.csv"));
                p
            }
            GpuNodes::Discrete(_) => vec!["/dev/nvidiactl".to_string()],
        };
        if !self.mig.is_empty() {
            patterns.push(format!("{CAPS_DEV_DIR}/nvidia-cap*"));
        }
        patterns.sort();
        patterns.dedup();
        let mut dirs = Vec::new();
        for pattern in patterns {
            // The components before the first wildcard name a node or a directory; the
            // directory holding the match is it (or its parent), or its nearest ancestor.
            let fixed: Vec<&str> = pattern
                .split('/')
                .take_while(|c| !c.contains(['*', '?']))
                .collect();
            let below = under_root(root, &fixed.join("/")).join("-");
            if let Some(d) = watch_dir_for(root, &below) {
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
        dirs
    }
}

/// The nodes present at one moment (host paths).
#[derive(Debug, Default)]
pub struct Snapshot {
    nodes: Vec<String>,
    /// Per MIG device watched: its `/dev/nvidia-caps` nodes, or what is missing.
    mig: Vec<(MigInstance, Result<Vec<String>, String>)>,
}

impl Snapshot {
    /// Every GPU node present (a Jetson's nodes).
    pub fn all(&self) -> &[String] {
        &self.nodes
    }

    /// The nodes for discrete GPUs with `minors`: the control nodes and their own.
    pub fn discrete(&self, minors: &[u32]) -> Vec<String> {
        let own: Vec<String> = minors.iter().map(|m| format!("/dev/nvidia{m}")).collect();
        self.nodes
            .iter()
            .filter(|p| CONTROL_NODES.contains(&p.as_str()) || own.contains(p))
            .cloned()
            .collect()
    }

    /// A MIG device's `/dev/nvidia-caps` nodes; `Err` says what is missing.
    pub fn mig(&self, instance: MigInstance) -> Result<&[String], String> {
        match self.mig.iter().find(|(i, _)| *i == instance) {
            Some((_, Ok(nodes))) => Ok(nodes),
            Some((_, Err(e))) => Err(e.clone()),
            None => Err(format!("{instance:?} is not among the MIG devices watched")),
        }
    }
}

/// The device nodes present on the host, kept current by inotify. Dropping it ends the watch.
pub struct DeviceNodes {
    current: Arc<RwLock<Arc<Snapshot>>>,
    _watch: AbortOnDrop,
}

impl DeviceNodes {
    /// Scans now and starts watching.
    pub async fn watch(root: PathBuf, candidates: Candidates) -> anyhow::Result<DeviceNodes> {
        let inotify = Inotify::init()?;
        let scanner = Arc::new((root, candidates));
        let first = rescan(&scanner, inotify.watches()).await?;
        let current = Arc::new(RwLock::new(Arc::new(first)));
        let mut events = inotify.into_event_stream([0u8; 1024])?;
        let weak = Arc::downgrade(&current);
        let task = tokio::spawn(async move {
            while let Some(burst) = next_burst(&mut events).await {
                if let Err(e) = burst {
                    tracing::warn!("inotify error watching GPU device nodes: {e}; the list is no longer updated");
                    break;
                }
                let Some(current) = weak.upgrade() else { break };
                match rescan(&scanner, events.watches()).await {
                    Ok(now) => *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(now),
                    Err(e) => {
                        tracing::warn!(
                            "scanning GPU device nodes failed: {e}; the list is no longer updated"
                        );
                        break;
                    }
                }
            }
        });
        Ok(DeviceNodes {
            current,
            _watch: AbortOnDrop::new(&task),
        })
    }

    /// The nodes present now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }
}

/// (Re-)adds the watches, then scans, on the blocking pool.
async fn rescan(
    scanner: &Arc<(PathBuf, Candidates)>,
    mut watches: Watches,
) -> Result<Snapshot, tokio::task::JoinError> {
    let scanner = Arc::clone(scanner);
    tokio::task::spawn_blocking(move || {
        let (root, candidates) = &*scanner;
        let mask = WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::CLOSE_WRITE;
        for dir in candidates.watch_dirs(root) {
            if let Err(e) = watches.add(&dir, mask) {
                tracing::debug!("cannot watch {} for GPU device nodes: {e}", dir.display());
            }
        }
        candidates.scan(root)
    })
    .await
}
