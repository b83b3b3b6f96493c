//! The `/dev` nodes a GPU container needs (`--pass-device-specs`), per platform.
//!
//! Only nodes that exist under `--root` are returned, and they are returned with their host
//! path (the root prefix removed): the container runtime on the host opens them.

use std::path::{Path, PathBuf};

use edgegpu_platform::csv;
use edgegpu_platform::host::CONTAINER_CSV_DIR;
use edgegpu_platform::procfs::{MigMinors, CONTROL_NODES, MIG_MINORS};
use edgegpu_platform::{Generation, UNKNOWN_GENERATION_CONTAINER_NODES};

use crate::gpu::under_root;

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
    let nodes = MigMinors::parse(&text)
        .map_err(|e| format!("{}:{}: {}", file.display(), e.line, e.message))?
        .mig_nodes(gpu_minor, gi, ci)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    for node in &nodes {
        if std::fs::metadata(under_root(root, node)).is_err() {
            return Err(format!("{node} does not exist"));
        }
    }
    Ok(nodes.to_vec())
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
