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

use edgegpu_platform::host::CONTAINER_CSV_DIR;
use edgegpu_platform::{Generation, UNKNOWN_GENERATION_CONTAINER_NODES};

use crate::gpu::{next_burst, under_root, watch_dir_for};

/// Control nodes of the discrete driver, returned when present.
const DISCRETE_CONTROL_NODES: &[&str] = &[
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// The `dev` entries of the runtime's CSV files under `root` (`dev, /dev/nvmap`; old files
/// use bare names: `dev, nvhost-gpu`). Unreadable files are skipped with a warning.
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
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(file = %file.display(), "cannot read runtime CSV file: {e}");
                continue;
            }
        };
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((kind, path)) = line.split_once(',') else {
                continue;
            };
            if kind.trim() != "dev" {
                continue;
            }
            let path = path.trim();
            let path = if path.starts_with('/') {
                path.to_string()
            } else {
                format!("/dev/{path}")
            };
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// `*` and `?` matching of one path component.
fn component_matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// Expands a host path pattern under `root`; returns host paths (root prefix removed) of
/// existing entries that are not directories, sorted.
fn expand(root: &Path, pattern: &str) -> Vec<String> {
    let mut current: Vec<String> = vec![String::new()];
    for component in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for prefix in &current {
            if component.contains(['*', '?']) {
                let dir = under_root(root, if prefix.is_empty() { "/" } else { prefix });
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                let mut names: Vec<String> = entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect();
                names.sort();
                for name in names {
                    if component_matches(component, &name) {
                        next.push(format!("{prefix}/{name}"));
                    }
                }
            } else {
                next.push(format!("{prefix}/{component}"));
            }
        }
        current = next;
    }
    current
        .into_iter()
        .filter(|p| !p.is_empty())
        .filter(|p| {
            // Follows links (e.g. /dev/dri/by-path entries); a dangling link is skipped.
            std::fs::metadata(under_root(root, p)).is_ok_and(|m| !m.is_dir())
        })
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
    let mut patterns: Vec<String> = DISCRETE_CONTROL_NODES
        .iter()
        .map(|s| s.to_string())
        .collect();
    patterns.extend(minors.iter().map(|m| format!("/dev/nvidia{m}")));
    collect(root, &patterns)
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
pub enum Candidates {
    /// A Jetson of this generation (`None`: unknown generation).
    Tegra(Option<&'static Generation>),
    /// Discrete GPUs with these minor numbers.
    Discrete(Vec<u32>),
}

impl Candidates {
    /// The nodes present now (blocking).
    fn scan(&self, root: &Path) -> Vec<String> {
        match self {
            Candidates::Tegra(generation) => tegra_device_paths(root, *generation),
            Candidates::Discrete(minors) => discrete_device_paths(root, minors),
        }
    }

    /// Directories whose changes can change [`Candidates::scan`] (blocking).
    fn watch_dirs(&self, root: &Path) -> Vec<PathBuf> {
        let mut patterns: Vec<String> = match self {
            Candidates::Tegra(generation) => {
                let nodes =
                    generation.map_or(UNKNOWN_GENERATION_CONTAINER_NODES, |g| g.container_nodes);
                let mut p: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
                p.extend(csv_device_patterns(root));
                // The CSV directory itself (files added or removed change the patterns).
                p.push(format!("{CONTAINER_CSV_DIR}/*.csv"));
                p
            }
            Candidates::Discrete(_) => vec!["/dev/nvidiactl".to_string()],
        };
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

/// The device nodes present on the host, kept current by inotify.
pub struct DeviceNodes {
    present: RwLock<Arc<Vec<String>>>,
}

impl DeviceNodes {
    /// Scans now and starts watching; the watch ends when the returned value is dropped.
    pub async fn watch(root: PathBuf, candidates: Candidates) -> anyhow::Result<Arc<DeviceNodes>> {
        let inotify = Inotify::init()?;
        let scanner = Arc::new((root, candidates));
        let present = rescan(&scanner, inotify.watches()).await?;
        let nodes = Arc::new(DeviceNodes {
            present: RwLock::new(Arc::new(present)),
        });
        let mut events = inotify.into_event_stream([0u8; 1024])?;
        let weak = Arc::downgrade(&nodes);
        tokio::spawn(async move {
            while let Some(burst) = next_burst(&mut events).await {
                if let Err(e) = burst {
                    tracing::warn!("inotify error watching GPU device nodes: {e}; the list is no longer updated");
                    break;
                }
                let Some(nodes) = weak.upgrade() else { break };
                match rescan(&scanner, events.watches()).await {
                    Ok(present) => {
                        *nodes.present.write().unwrap_or_else(|p| p.into_inner()) =
                            Arc::new(present)
                    }
                    Err(e) => {
                        tracing::warn!(
                            "scanning GPU device nodes failed: {e}; the list is no longer updated"
                        );
                        break;
                    }
                }
            }
        });
        Ok(nodes)
    }

    /// The nodes present (host paths).
    pub fn present(&self) -> Arc<Vec<String>> {
        Arc::clone(&self.present.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The nodes for discrete GPUs with `minors`: the control nodes and their own.
    pub fn discrete(&self, minors: &[u32]) -> Vec<String> {
        let own: Vec<String> = minors.iter().map(|m| format!("/dev/nvidia{m}")).collect();
        self.present()
            .iter()
            .filter(|p| DISCRETE_CONTROL_NODES.contains(&p.as_str()) || own.contains(p))
            .cloned()
            .collect()
    }
}

/// (Re-)adds the watches, then scans, on the blocking pool.
async fn rescan(
    scanner: &Arc<(PathBuf, Candidates)>,
    mut watches: Watches,
) -> Result<Vec<String>, tokio::task::JoinError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_components() {
        assert!(component_matches("card*", "card0"));
        assert!(component_matches("igpu*", "igpu-0000:01:00.0"));
        assert!(component_matches("renderD1?8", "renderD128"));
        assert!(!component_matches("card*", "renderD128"));
        assert!(component_matches("*", "x"));
    }
}
