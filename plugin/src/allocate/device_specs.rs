//! The `/dev` nodes a GPU container needs (`--pass-device-specs`), per platform.
//!
//! Only nodes that exist under `--root` are returned, and they are returned with their host
//! path (the root prefix removed): the container runtime on the host opens them.

use std::path::{Path, PathBuf};

use edgegpu_platform::host::CONTAINER_CSV_DIR;
use edgegpu_platform::procfs::{caps_node, mig_capability_keys, parse_mig_minors, MIG_MINORS};
use edgegpu_platform::{Generation, UNKNOWN_GENERATION_CONTAINER_NODES};

use crate::gpu::under_root;

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

/// A MIG device's `/dev/nvidia-caps` nodes (its GPU instance and compute instance), from the
/// driver's `mig-minors` (NVIDIA's plugin does the same, `internal/rm/nvml_devices.go`). `Err`
/// says what is missing.
pub fn mig_device_paths(
    root: &Path,
    gpu_minor: u32,
    gi: u32,
    ci: u32,
) -> Result<Vec<String>, String> {
    let file = under_root(root, MIG_MINORS);
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let minors = parse_mig_minors(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut out = Vec::new();
    for key in mig_capability_keys(gpu_minor, gi, ci) {
        let minor = minors
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, m)| *m)
            .ok_or_else(|| format!("{} has no `{key}`", file.display()))?;
        let node = caps_node(minor);
        if std::fs::metadata(under_root(root, &node)).is_err() {
            return Err(format!("{node} does not exist"));
        }
        out.push(node);
    }
    Ok(out)
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
