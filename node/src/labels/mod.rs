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
use std::sync::Arc;

use crate::config::{GpuArgs, MigStrategy};
use crate::facts::NodeFacts;
use crate::gpu::discovery::{Gpu, MigDevice, Platform};
use crate::serving::{mig, plan, Served, Unit};
use crate::snapshot::Snapshot;

/// The node kind the device-plugin DaemonSets select on (docs/deploy.md, "Node labels").
pub const GPU_KIND: &str = "edgegpu.io/gpu";

/// A Jetson's power mode in force (`MAXN`, `MODE_30W`: nvpmodel's name), docs/power.md.
pub const POWER_MODE: &str = "edgegpu.io/jetson.power-mode";
/// Its nvpmodel id (`0`): names are per board, ids are what `nvpmodel -m` takes.
pub const POWER_MODE_ID: &str = "edgegpu.io/jetson.power-mode.id";
/// The GPU's clock ceiling under that mode, in MHz.
pub const GPU_CLOCK_MAX_MHZ: &str = "edgegpu.io/jetson.gpu-clock-max-mhz";

/// Every fixed key this module writes. A key missing from a [`NodeLabels`] is one this node
/// has no value for: a labeller removes it from the Node. Keys of MIG profiles
/// (`nvidia.com/mig-<profile>.*`, [`MIG_PROFILE_PREFIX`]) come and go with the MIG geometry.
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
    "nvidia.com/mps.capable",
    "nvidia.com/mig.strategy",
    "nvidia.com/gpu.multiprocessors",
    "nvidia.com/gpu.slices.gi",
    "nvidia.com/gpu.slices.ci",
    "nvidia.com/gpu.engines.copy",
    "nvidia.com/gpu.engines.decoder",
    "nvidia.com/gpu.engines.encoder",
    "nvidia.com/gpu.engines.jpeg",
    "nvidia.com/gpu.engines.ofa",
    GPU_KIND,
    "edgegpu.io/jetson.board",
    "edgegpu.io/jetson.module",
    "edgegpu.io/jetson.product",
    "edgegpu.io/jetson.soc",
    "edgegpu.io/jetson.l4t",
    "edgegpu.io/jetson.jetpack.major",
    POWER_MODE,
    POWER_MODE_ID,
    GPU_CLOCK_MAX_MHZ,
    "nvidia.com/dla.count",
    "nvidia.com/pva.count",
];

/// The power mode in force and the GPU's clock ceiling under it.
fn power_labels(power: &crate::power::PowerFacts, labels: &mut NodeLabels) {
    for (key, value) in power_values(&power.published()) {
        if let Some(value) = value {
            labels.set(key, value);
        }
    }
}

/// The power-mode keys and their values (`None`: not set), for a program that follows a mode
/// change ([`crate::power::follow`]) and updates only these keys.
pub fn power_values(
    power: &crate::power::follow::Published,
) -> [(&'static str, Option<String>); 3] {
    [
        (POWER_MODE, power.mode_name.clone()),
        (POWER_MODE_ID, power.mode_id.map(|id| id.to_string())),
        (
            GPU_CLOCK_MAX_MHZ,
            power.gpu_ceiling_mhz.map(|mhz| mhz.to_string()),
        ),
    ]
}

/// The engine count labels, by kind (docs/engines.md).
const ENGINE_COUNT_KEYS: [(crate::engines::EngineKind, &str); 2] = [
    (crate::engines::EngineKind::Dla, "nvidia.com/dla.count"),
    (crate::engines::EngineKind::Pva, "nvidia.com/pva.count"),
];

/// The prefix of GFD's per-profile keys under `--mig-strategy mixed`
/// (`nvidia.com/mig-1g.10gb.count`).
pub const MIG_PROFILE_PREFIX: &str = "nvidia.com/mig-";

/// Whether `key` is one this module writes (a fixed key or a MIG profile's).
pub fn is_managed(key: &str) -> bool {
    KEYS.contains(&key) || key.starts_with(MIG_PROFILE_PREFIX)
}

/// Label keys and valid values, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLabels(BTreeMap<String, String>);

impl NodeLabels {
    /// Sets `key` to `text` made a valid label value; text with nothing usable sets nothing.
    fn set(&mut self, key: impl Into<String>, text: impl AsRef<str>) {
        let key = key.into();
        debug_assert!(is_managed(&key), "{key} missing from KEYS");
        if let Some(v) = value::sanitize(text.as_ref()) {
            self.0.insert(key, v);
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One resource the plugin serves: its devices, its replicas (time-slicing, MPS clients or
/// memory units per GPU) and how they share a GPU.
struct ResourceFacts {
    units: Vec<Unit>,
    replicas: Option<u32>,
    /// GFD's sharing strategy: `none`, `time-slicing`, `mps`.
    strategy: &'static str,
    /// Advertised under another name (`renameByDefault`: `<name>.shared`).
    renamed: bool,
}

impl ResourceFacts {
    /// GFD's product value (`internal/lm/resource.go`, `getProductName`): `-SHARED` appended
    /// when the resource's GPUs are time-sliced (replicas > 1) under their own name, so that a
    /// pod selecting on the product knows it gets a share.
    fn product(&self, name: String) -> String {
        if self.replicas.is_some_and(|r| r > 1) && !self.renamed {
            format!("{name}-SHARED")
        } else {
            name
        }
    }
}

/// What the labels are computed from.
struct Facts<'a> {
    platform: Option<&'a Platform>,
    gpus: &'a [Gpu],
    node: &'a NodeFacts,
    mig_strategy: MigStrategy,
    /// The resources served; empty with `invalid_mig`.
    served: Vec<ResourceFacts>,
    /// Why `--mig-strategy single` refuses this node's MIG geometry.
    invalid_mig: Option<String>,
}

/// The labels of the node `resources` (every resource the plugin serves) describe. Reads
/// `/proc/meminfo` and the engines' device nodes on Jetson: call it off the async runtime. A
/// round that took a [`Snapshot`] has those facts already: [`for_served`].
pub fn for_resources(resources: &[Arc<Served>]) -> NodeLabels {
    let Some(first) = resources.first() else {
        return NodeLabels::default();
    };
    let node = match first.platform() {
        Some(platform) => NodeFacts::read(
            first.root(),
            platform,
            first.gpus(),
            first.nvml().map(|n| &**n),
        ),
        None => NodeFacts::default(),
    };
    for_served(resources, &node)
}

/// The labels of the node `resources` (every resource the plugin serves) and the facts of
/// the round's snapshot describe. Reads nothing.
pub fn for_served(resources: &[Arc<Served>], node: &NodeFacts) -> NodeLabels {
    let Some(first) = resources.first() else {
        return NodeLabels::default();
    };
    compute(&Facts {
        platform: first.platform(),
        gpus: first.gpus(),
        node,
        mig_strategy: first.config().mig_strategy,
        served: resources
            .iter()
            .map(|r| ResourceFacts {
                units: r.units().to_vec(),
                replicas: r
                    .replication()
                    .map(|rep| rep.replicas)
                    .or_else(|| r.advertised_per_unit(0)),
                strategy: plan::sharing_strategy(r.limits(), r.replication()),
                renamed: r.name() != r.resource_name_configured(),
            })
            .collect(),
        invalid_mig: None,
    })
}

/// The labels of the node under `root`, as the plugin started with `args` would see it:
/// discovery and the config file, without health checks or serving (for the labeller).
/// No GPU found gives empty labels; a MIG geometry `--mig-strategy single` refuses gives
/// GFD's `…-MIG-INVALID` labels.
pub fn for_host(root: &Path, resource_name: &str, args: &GpuArgs) -> anyhow::Result<NodeLabels> {
    for_snapshot(root, resource_name, &Snapshot::take(root, args)?)
}

/// [`for_host`] from a snapshot taken already (the DRA driver's round): no second discovery.
pub fn for_snapshot(
    root: &Path,
    resource_name: &str,
    snapshot: &Snapshot,
) -> anyhow::Result<NodeLabels> {
    let Some(discovered) = snapshot.gpus_found() else {
        return Ok(NodeLabels::default());
    };
    let config = &snapshot.config;
    let (served, invalid_mig) = match mig::resources(
        resource_name,
        config.mig_strategy,
        &discovered.gpus,
        &discovered.migs,
    ) {
        Ok(split) => {
            let platform = Some(&discovered.platform).filter(|_| !discovered.gpus.is_empty());
            let facts = plan::GpuFacts::read(
                root,
                config,
                platform,
                &discovered.gpus,
                discovered.nvml.as_deref(),
            );
            let mut served = Vec::new();
            for (name, units) in split {
                let p = plan::plan(&name, config, platform, &discovered.gpus, &units, &facts)
                    .map_err(anyhow::Error::msg)?;
                served.push(ResourceFacts {
                    replicas: p.replicas(),
                    strategy: p.sharing_strategy(),
                    renamed: p.name != name,
                    units,
                });
            }
            (served, None)
        }
        Err(reason) => (Vec::new(), Some(reason)),
    };
    Ok(compute(&Facts {
        platform: Some(&discovered.platform),
        gpus: &discovered.gpus,
        node: &snapshot.facts,
        mig_strategy: config.mig_strategy,
        served,
        invalid_mig,
    }))
}

const MIB: u64 = 1024 * 1024;

fn compute(f: &Facts<'_>) -> NodeLabels {
    let mut labels = NodeLabels::default();
    let (Some(platform), Some(first)) = (f.platform, f.gpus.first()) else {
        return labels;
    };
    labels.set("nvidia.com/gpu.present", "true");
    labels.set("nvidia.com/gpu.count", f.gpus.len().to_string());
    // The resource serving whole GPUs, if any: GFD labels its sharing; GPUs served as MIG
    // devices carry none (replicas 0).
    let whole = f
        .served
        .iter()
        .find(|s| s.units.iter().any(|u| u.mig.is_none()));
    let whole_replicas = whole.and_then(|s| s.replicas);
    labels.set(
        "nvidia.com/gpu.replicas",
        match whole {
            Some(_) => whole_replicas.unwrap_or(1).to_string(),
            None => "0".to_string(),
        },
    );
    let strategy = whole.map_or("none", |s| s.strategy);
    labels.set("nvidia.com/gpu.sharing-strategy", strategy);
    // GFD's: true where the GPUs are shared through MPS (never for MIG devices).
    labels.set("nvidia.com/mps.capable", (strategy == "mps").to_string());
    let product = platform.model_name(first).to_string();
    labels.set(
        "nvidia.com/gpu.product",
        match whole {
            Some(served) => served.product(product),
            None => product,
        },
    );
    let node = f.node;
    match &node.jetson {
        Some(jetson) => {
            labels.set(GPU_KIND, "jetson");
            if let Some(model) = &jetson.model {
                labels.set("edgegpu.io/jetson.board", model);
            }
            if let Some(module) = &jetson.module {
                labels.set("edgegpu.io/jetson.module", module);
            }
            if let Some(product) = jetson.product {
                labels.set("edgegpu.io/jetson.product", product);
            }
            if let Some(soc) = jetson.soc {
                labels.set("edgegpu.io/jetson.soc", soc);
            }
            if let Some(l4t) = &jetson.l4t {
                labels.set("edgegpu.io/jetson.l4t", l4t);
            }
            if let Some(major) = jetson.jetpack_major {
                labels.set("edgegpu.io/jetson.jetpack.major", major.to_string());
            }
            power_labels(&jetson.power, &mut labels);
            // The DLA cores and PVA instances the host shows (`nvidia.com/dla.count`, in
            // GFD's `<resource>.count` form), only where there is at least one.
            for (kind, key) in ENGINE_COUNT_KEYS {
                let n = node.engines.iter().filter(|e| e.kind == kind).count();
                if n > 0 {
                    labels.set(key, n.to_string());
                }
            }
        }
        None => labels.set(GPU_KIND, "discrete"),
    }
    if let Some(bytes) = node.gpu_memory_bytes {
        labels.set("nvidia.com/gpu.memory", (bytes / MIB).to_string());
    }
    if let Some((major, minor)) = node.compute_capability {
        labels.set("nvidia.com/gpu.compute.major", major.to_string());
        labels.set("nvidia.com/gpu.compute.minor", minor.to_string());
    }
    if let Some(family) = node.family() {
        labels.set("nvidia.com/gpu.family", family);
    }
    if let Some((major, minor)) = node.cuda_driver {
        labels.set("nvidia.com/cuda.driver.major", major.to_string());
        labels.set("nvidia.com/cuda.driver.minor", minor.to_string());
    }
    mig_labels(f, &mut labels);
    labels
}

/// GFD's MIG labels (gpu-feature-discovery `internal/lm/mig-strategy.go`, `resource.go`):
/// `nvidia.com/mig.strategy` under single and mixed; under single the `nvidia.com/gpu.*` keys
/// describe the MIG devices served as `nvidia.com/gpu` (product `<GPU>-MIG-<profile>`, the
/// MIG device's memory and attributes), or `<GPU>-MIG-INVALID` with count, replicas and memory
/// 0 where the geometry is refused; under mixed every profile has its own
/// `nvidia.com/mig-<profile>.*` keys.
fn mig_labels(f: &Facts<'_>, labels: &mut NodeLabels) {
    let strategy = match f.mig_strategy {
        MigStrategy::None => return,
        MigStrategy::Single => "single",
        MigStrategy::Mixed => "mixed",
    };
    labels.set("nvidia.com/mig.strategy", strategy);
    let model = |gpu: usize| match f.platform {
        Some(p) => p.model_name(&f.gpus[gpu]).to_string(),
        None => f.gpus[gpu].name.clone(),
    };
    if let Some(reason) = &f.invalid_mig {
        tracing::warn!("invalid MIG configuration for --mig-strategy {strategy}: {reason}");
        if let Some(gpu) = f.gpus.iter().position(|g| g.mig_enabled) {
            labels.set(
                "nvidia.com/gpu.product",
                format!("{}-MIG-INVALID", model(gpu)),
            );
            for key in ["count", "replicas", "memory"] {
                labels.set(format!("nvidia.com/gpu.{key}"), "0");
            }
        }
        return;
    }
    for served in &f.served {
        let migs: Vec<&MigDevice> = served.units.iter().filter_map(|u| u.mig.as_ref()).collect();
        let Some(mig) = migs.first() else { continue };
        let prefix = match f.mig_strategy {
            // The resource's name (`+` written `.`), as GFD's labels of a MIG resource.
            MigStrategy::Mixed => {
                format!("{}.", mig::mixed_resource_name("nvidia.com", &mig.profile))
            }
            _ => "nvidia.com/gpu.".to_string(),
        };
        let a = mig.attributes;
        labels.set(
            format!("{prefix}product"),
            served.product(format!("{}-MIG-{}", model(mig.parent), mig.profile)),
        );
        for (key, value) in [
            ("count", migs.len() as u64),
            ("replicas", u64::from(served.replicas.unwrap_or(1))),
            ("memory", mig.memory_bytes / MIB),
            ("multiprocessors", u64::from(a.multiprocessors)),
            ("slices.gi", u64::from(a.gpu_instance_slices)),
            ("slices.ci", u64::from(a.compute_instance_slices)),
            ("engines.copy", u64::from(a.copy_engines)),
            ("engines.decoder", u64::from(a.decoders)),
            ("engines.encoder", u64::from(a.encoders)),
            ("engines.jpeg", u64::from(a.jpeg_engines)),
            ("engines.ofa", u64::from(a.ofa_engines)),
        ] {
            labels.set(format!("{prefix}{key}"), value.to_string());
        }
        if f.mig_strategy == MigStrategy::Single {
            labels.set(
                "nvidia.com/gpu.sharing-strategy",
                if served.replicas.is_some() {
                    "time-slicing"
                } else {
                    "none"
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_a_valid_label_key() {
        // prefix (a DNS subdomain) / name (63 characters, alphanumeric ends).
        for key in KEYS
            .iter()
            .copied()
            .chain(["nvidia.com/mig-1c.3g.20gb.engines.decoder"])
        {
            assert!(is_managed(key), "{key}");
            let (prefix, name) = key.split_once('/').unwrap();
            assert!(prefix.contains('.') && prefix.len() <= 253, "{key}");
            assert!(value::is_valid(name), "{key}");
        }
    }
}
