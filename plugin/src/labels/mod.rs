//! Node labels describing this node's GPUs: GPU Feature Discovery's keys (`nvidia.com/…`, with
//! real values on Jetson too, where GFD writes `unknown`) and edgegpu's own (`edgegpu.io/…`).
//!
//! Two ways to the Node (docs/labels.md): [`feature_file`] writes them for Node Feature
//! Discovery's local source; the `edgegpu-labeller` program (crate `labeller/`) patches the
//! Node itself where NFD is not installed (k3s).
//!
//! - [`value`]: what a label value may contain, and how text becomes one.

pub mod feature_file;
pub mod value;

use std::collections::BTreeMap;
use std::path::Path;

use edgegpu_platform::host::{jetpack, meminfo_bytes, MEMINFO};

use crate::allocate::{sharing, GpuResource};
use crate::config::GpuArgs;
use crate::gpu::discovery::{self, Gpu, Platform};
use crate::gpu::under_root;

/// The node kind the device-plugin DaemonSets select on (docs/deploy.md, "Node labels").
pub const GPU_KIND: &str = "edgegpu.io/gpu";

/// Every key this module writes. A key missing from a [`NodeLabels`] is one this node has no
/// value for: a labeller removes it from the Node.
pub const KEYS: &[&str] = &[
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.family",
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    GPU_KIND,
    "edgegpu.io/jetson.board",
    "edgegpu.io/jetson.module",
    "edgegpu.io/jetson.product",
    "edgegpu.io/jetson.soc",
    "edgegpu.io/jetson.l4t",
    "edgegpu.io/jetson.jetpack.major",
];

/// Label keys and valid values, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLabels(BTreeMap<&'static str, String>);

impl NodeLabels {
    /// Sets `key` to `text` made a valid label value; text with nothing usable sets nothing.
    fn set(&mut self, key: &'static str, text: impl AsRef<str>) {
        debug_assert!(KEYS.contains(&key), "{key} missing from KEYS");
        if let Some(v) = value::sanitize(text.as_ref()) {
            self.0.insert(key, v);
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().map(|(k, v)| (*k, v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the labels are computed from.
struct Facts<'a> {
    root: &'a Path,
    platform: Option<&'a Platform>,
    gpus: &'a [Gpu],
    replicas: Option<u32>,
    nvml: Option<&'a nvml_wrapper::Nvml>,
}

/// The labels of the node `resource` serves.
pub fn for_resource(resource: &GpuResource) -> NodeLabels {
    compute(&Facts {
        root: resource.root(),
        platform: resource.platform(),
        gpus: resource.gpus(),
        replicas: resource.replication().map(|r| r.replicas),
        nvml: resource.nvml().map(|n| &**n),
    })
}

/// The labels of the node under `root`, as the plugin started with `args` would see it:
/// discovery and the config file, without health checks or serving (for the labeller).
/// No GPU found gives empty labels.
pub fn for_host(root: &Path, resource_name: &str, args: &GpuArgs) -> anyhow::Result<NodeLabels> {
    let config = args.resolve()?;
    let discovered = match discovery::discover(root, config.discovery) {
        Ok(d) => d,
        Err(e) => {
            tracing::info!("{e}");
            return Ok(NodeLabels::default());
        }
    };
    let (_, replication) = sharing::apply(resource_name, config.sharing.as_ref());
    Ok(compute(&Facts {
        root,
        platform: Some(&discovered.platform),
        gpus: &discovered.gpus,
        replicas: replication.map(|r| r.replicas),
        nvml: discovered.nvml.as_deref(),
    }))
}

/// GFD's architecture family of a compute capability (gpu-feature-discovery
/// `internal/lm/resource.go`); Thor's 10.1 / 11.0 is Blackwell.
fn family(major: u32, minor: u32) -> Option<&'static str> {
    Some(match (major, minor) {
        (1, _) => "tesla",
        (2, _) => "fermi",
        (3, _) => "kepler",
        (5, _) => "maxwell",
        (6, _) => "pascal",
        (7, 0..=4) => "volta",
        (7, _) => "turing",
        (8, 0..=8) => "ampere",
        (8, _) => "ada-lovelace",
        (9, _) => "hopper",
        (10..=12, _) => "blackwell",
        _ => return None,
    })
}

const MIB: u64 = 1024 * 1024;

fn compute(f: &Facts<'_>) -> NodeLabels {
    let mut labels = NodeLabels::default();
    let (Some(platform), Some(first)) = (f.platform, f.gpus.first()) else {
        return labels;
    };
    labels.set("nvidia.com/gpu.present", "true");
    labels.set("nvidia.com/gpu.count", f.gpus.len().to_string());
    labels.set(
        "nvidia.com/gpu.replicas",
        f.replicas.unwrap_or(1).to_string(),
    );
    labels.set(
        "nvidia.com/gpu.sharing-strategy",
        if f.replicas.is_some() {
            "time-slicing"
        } else {
            "none"
        },
    );
    let (memory_bytes, capability, cuda) = match platform {
        Platform::Tegra { detection, .. } => {
            labels.set(GPU_KIND, "jetson");
            let generation = detection.generation;
            labels.set("nvidia.com/gpu.product", platform.model_name(first));
            if let Some(model) = &detection.model {
                labels.set("edgegpu.io/jetson.board", model);
            }
            if let Some(module) = &detection.module {
                labels.set("edgegpu.io/jetson.module", module);
            }
            if let Some(product) = detection.module_name {
                labels.set("edgegpu.io/jetson.product", product);
            }
            if let Some(g) = generation {
                labels.set("edgegpu.io/jetson.soc", g.soc);
            }
            let release = detection.l4t.as_deref().and_then(jetpack);
            if let Some(l4t) = &detection.l4t {
                labels.set("edgegpu.io/jetson.l4t", l4t);
            }
            if let Some(jp) = release {
                labels.set("edgegpu.io/jetson.jetpack.major", jp.major.to_string());
            }
            // The GPU shares the system's memory (what cuDeviceTotalMem reports on Jetson).
            let memory = std::fs::read_to_string(under_root(f.root, MEMINFO))
                .ok()
                .and_then(|m| meminfo_bytes(&m, "MemTotal"));
            let cuda = release.map(|r| r.cuda);
            let capability = match (generation, cuda) {
                (Some(g), Some(cuda)) => g.compute_capability(cuda),
                // Without the release, the capability before any renumbering.
                (Some(g), None) => g.cuda.capability.first().map(|c| (c.major, c.minor)),
                _ => None,
            };
            (memory, capability, cuda)
        }
        Platform::Nvml => {
            labels.set(GPU_KIND, "discrete");
            labels.set("nvidia.com/gpu.product", platform.model_name(first));
            let device = f
                .nvml
                .and_then(|n| n.device_by_uuid(first.uuid.as_str()).ok());
            let capability = device
                .and_then(|d| d.cuda_compute_capability().ok())
                .and_then(|c| Some((u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?)));
            // NVML encodes CUDA 12.4 as 12040.
            let cuda = f
                .nvml
                .and_then(|n| n.sys_cuda_driver_version().ok())
                .and_then(|v| u32::try_from(v).ok())
                .map(|v| (v / 1000, v % 1000 / 10));
            (first.memory_bytes, capability, cuda)
        }
    };
    if let Some(bytes) = memory_bytes {
        labels.set("nvidia.com/gpu.memory", (bytes / MIB).to_string());
    }
    if let Some((major, minor)) = capability {
        labels.set("nvidia.com/gpu.compute.major", major.to_string());
        labels.set("nvidia.com/gpu.compute.minor", minor.to_string());
        if let Some(family) = family(major, minor) {
            labels.set("nvidia.com/gpu.family", family);
        }
    }
    if let Some((major, minor)) = cuda {
        labels.set("nvidia.com/cuda.driver.major", major.to_string());
        labels.set("nvidia.com/cuda.driver.minor", minor.to_string());
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(family(5, 3), Some("maxwell"));
        assert_eq!(family(6, 2), Some("pascal"));
        assert_eq!(family(7, 2), Some("volta"));
        assert_eq!(family(7, 5), Some("turing"));
        assert_eq!(family(8, 7), Some("ampere"));
        assert_eq!(family(8, 9), Some("ada-lovelace"));
        assert_eq!(family(9, 0), Some("hopper"));
        assert_eq!(family(11, 0), Some("blackwell"));
        assert_eq!(family(4, 0), None);
    }

    #[test]
    fn every_key_is_a_valid_label_key() {
        // prefix (a DNS subdomain) / name (63 characters, alphanumeric ends).
        for key in KEYS {
            let (prefix, name) = key.split_once('/').unwrap();
            assert!(prefix.contains('.') && prefix.len() <= 253, "{key}");
            assert!(value::is_valid(name), "{key}");
        }
    }
}
