//! Where a Jetson GPU shows up in sysfs: its device directory's `load` file and its devfreq
//! directory. Found once at start; the health checks watch these files and the metrics read
//! them when scraped.

use std::path::{Path, PathBuf};

use edgegpu_platform::host::DEVFREQ_CLASS;
use edgegpu_platform::{is_gpu_of_node_name, Generation};

use crate::gpu::under_root;

/// The GPU's sysfs files (host paths, root prefix removed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSysfs {
    /// `load`: busy time in per mille (nvgpu `os/linux/sysfs.c`); absent on OpenRM (Thor).
    pub load: Option<String>,
    /// The devfreq directory (`cur_freq`, `min_freq`, `max_freq` in Hz).
    pub devfreq: Option<String>,
}

/// Host path of `p` (which is under `root`), or None when it escaped the root.
fn host_path(root: &Path, p: &Path) -> Option<String> {
    let rel = p.strip_prefix(root).ok()?;
    Some(format!("/{}", rel.display()))
}

impl GpuSysfs {
    /// Finds the GPU's files under `root`: generic `/sys/class/devfreq/*` scan first
    /// (jetson_stats `jtop/core/gpu.py` does the same), then the generation's known paths
    /// (those of the running L4T release `l4t_major` first, when known).
    pub fn find(root: &Path, generation: Option<&Generation>, l4t_major: Option<u32>) -> Self {
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        Self::scan_devfreq(&root, generation)
            .or_else(|| Self::known_dirs(&root, generation, l4t_major))
            .unwrap_or_default()
    }

    /// `cur_freq` of the devfreq directory.
    pub fn cur_freq(&self) -> Option<String> {
        self.devfreq.as_ref().map(|d| format!("{d}/cur_freq"))
    }

    fn scan_devfreq(root: &Path, generation: Option<&Generation>) -> Option<Self> {
        let entries = std::fs::read_dir(under_root(root, DEVFREQ_CLASS)).ok()?;
        let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        entries.into_iter().find_map(|entry| {
            let name = std::fs::read(entry.join("device/of_node/name"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .trim_matches(|c: char| c == '\0' || c.is_whitespace())
                        .to_string()
                })
                .unwrap_or_default();
            if name.is_empty() || !is_gpu_of_node_name(&name) {
                return None;
            }
            let devfreq = host_path(root, &entry.canonicalize().ok()?)?;
            let device = host_path(root, &entry.join("device").canonicalize().ok()?)?;
            // An unknown generation may have a `load` file: take it when it is there.
            let load = (generation.map_or(true, |g| g.sysfs.load_file)
                && under_root(root, &device).join("load").is_file())
            .then(|| format!("{device}/load"));
            Some(GpuSysfs {
                load,
                devfreq: Some(devfreq),
            })
        })
    }

    fn known_dirs(
        root: &Path,
        generation: Option<&Generation>,
        l4t_major: Option<u32>,
    ) -> Option<Self> {
        let known = generation.map_or_else(Vec::new, |g| g.known_dirs_for(l4t_major));
        known.into_iter().find_map(|dir| {
            let freq = format!("{}/cur_freq", dir.devfreq);
            under_root(root, &freq).is_file().then(|| GpuSysfs {
                load: dir
                    .load
                    .filter(|l| under_root(root, l).is_file())
                    .map(str::to_string),
                devfreq: Some(dir.devfreq.to_string()),
            })
        })
    }
}
