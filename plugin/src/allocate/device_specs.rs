//! The `/dev` nodes a GPU container needs (`--pass-device-specs`), per platform.
//!
//! Only nodes that exist under `--root` are returned, and they are returned with their host
//! path (the root prefix removed): the container runtime on the host opens them.

use std::path::{Path, PathBuf};

use crate::gpu::discovery::{under_root, Generation};

/// Where the NVIDIA container runtime's CSV files live (reference jetson-platform.md §5).
pub const CSV_DIR: &str = "/etc/nvidia-container-runtime/host-files-for-container.d";

/// Control nodes of the discrete driver, returned when present.
pub const DISCRETE_CONTROL_NODES: &[&str] = &[
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// The nodes a CUDA container needs on each Tegra generation (reference §4). Patterns may
/// contain `*` / `?`.
pub fn tegra_nodes(generation: Option<Generation>) -> &'static [&'static str] {
    const JP4: &[&str] = &[
        "/dev/nvidiactl",
        "/dev/nvhost-ctrl",
        "/dev/nvhost-ctrl-gpu",
        "/dev/nvhost-prof-gpu",
        "/dev/nvhost-dbg-gpu",
        "/dev/nvhost-gpu",
        "/dev/nvhost-as-gpu",
        "/dev/nvhost-nvdec",
        "/dev/nvhost-vic",
        "/dev/nvmap",
        "/dev/tegra_dc_ctrl",
        "/dev/tegra_dc_0",
        "/dev/tegra_dc_1",
    ];
    const XAVIER: &[&str] = &[
        "/dev/nvidiactl",
        "/dev/nvhost-ctrl",
        "/dev/nvhost-ctrl-gpu",
        "/dev/nvhost-prof-gpu",
        "/dev/nvhost-dbg-gpu",
        "/dev/nvhost-gpu",
        "/dev/nvhost-as-gpu",
        "/dev/nvhost-nvdec",
        "/dev/nvhost-vic",
        "/dev/nvmap",
        "/dev/nvhost-nvdla0",
        "/dev/nvhost-nvdla1",
        "/dev/nvhost-ctrl-nvdla0",
        "/dev/nvhost-ctrl-nvdla1",
        "/dev/tegra_dc_ctrl",
        "/dev/tegra_dc_0",
        "/dev/tegra_dc_1",
    ];
    const ORIN: &[&str] = &[
        "/dev/nvgpu/igpu0/*",
        "/dev/nvhost-as-gpu",
        "/dev/nvhost-ctrl-gpu",
        "/dev/nvhost-ctrl-nvdla0",
        "/dev/nvhost-ctrl-nvdla1",
        "/dev/nvhost-ctrl-pva0",
        "/dev/nvhost-ctxsw-gpu",
        "/dev/nvhost-dbg-gpu",
        "/dev/nvhost-gpu",
        "/dev/nvhost-nvsched-gpu",
        "/dev/nvhost-power-gpu",
        "/dev/nvhost-prof-ctx-gpu",
        "/dev/nvhost-prof-dev-gpu",
        "/dev/nvhost-prof-gpu",
        "/dev/nvhost-sched-gpu",
        "/dev/nvhost-tsg-gpu",
        "/dev/nvmap",
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvsciipc",
        "/dev/host1x-fence",
        "/dev/dri/card*",
        "/dev/dri/renderD*",
        "/dev/fb0",
        "/dev/fb1",
        "/dev/v4l2-nvdec",
        "/dev/v4l2-nvenc",
    ];
    const THOR: &[&str] = &[
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
        "/dev/nvgpu/igpu*/*",
        "/dev/nvmap",
        "/dev/dri/card*",
        "/dev/dri/renderD*",
        "/dev/v4l2-nvdec",
        "/dev/v4l2-nvenc",
    ];
    match generation {
        Some(Generation::NanoTx1) | Some(Generation::Tx2) => JP4,
        Some(Generation::Xavier) => XAVIER,
        Some(Generation::Orin) => ORIN,
        Some(Generation::Thor) => THOR,
        // Unknown generation: the union is safe because only existing nodes are returned.
        None => &[
            "/dev/nvhost-*",
            "/dev/nvgpu/igpu*/*",
            "/dev/nvmap",
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset",
        ],
    }
}

/// The `dev` entries of the runtime's CSV files under `root` (`dev, /dev/nvmap`; old files
/// use bare names: `dev, nvhost-gpu`). Unreadable files are skipped with a warning.
pub fn csv_device_patterns(root: &Path) -> Vec<String> {
    let dir = under_root(root, CSV_DIR);
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
pub fn expand(root: &Path, pattern: &str) -> Vec<String> {
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

/// Tegra: the generation's nodes plus the runtime CSV `dev` entries, deduplicated, existing only.
pub fn tegra_device_paths(root: &Path, generation: Option<Generation>) -> Vec<String> {
    let mut patterns: Vec<String> = tegra_nodes(generation)
        .iter()
        .map(|s| s.to_string())
        .collect();
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
