//! The node's devices as DRA devices (`resource.k8s.io/v1` `Device`), from one snapshot of the
//! node ([`Snapshot`]: discovery with the plugin's settings, [`GpuArgs`], as the labeller takes
//! them), described by the same typed facts the node labels are written from ([`NodeFacts`];
//! attributes carry the values as they are, labels their escaped form), and the
//! container edits `edgegpu-node-setup cdi generate` gives each of them
//! ([`edgegpu_host::cdi::generate`]).
//!
//! Device names (DNS labels, stable across restarts while the hardware stays):
//! - `gpu-<index>`: a whole GPU, by NVML index; a Jetson's integrated GPU is `gpu-0`.
//! - `gpu-<index>-mig-<gi>-<ci>`: a MIG device by its parent's index, GPU instance and compute
//!   instance. NVIDIA's DRA driver names MIG devices after the profile and placement
//!   (`gpu-<minor>-mig-<profile>-<giProfileId>-<start>`, `cmd/gpu-kubelet-plugin/deviceinfo.go`);
//!   discovery does not read the placement, and GI/CI ids are what the driver's capability
//!   nodes and the CDI spec (`<index>:gi<G>:ci<C>`) name the device by.
//! - `dla-<n>`, `pva-<n>`: Jetson engines ([`engines`]).
//!
//! A GPU with MIG on is also published whole (`gpu-<index>`, `migEnabled: true`: its MIG
//! devices together) where the cluster has partitionable devices (KEP-4815): one counter
//! set per such GPU (`gpu-<index>-counters`) with a counter per MIG device (`gi<G>ci<C>`);
//! each MIG device consumes its own, the whole GPU all of them, so the scheduler never
//! hands out the GPU and one of its MIG devices at once. The existing MIG layout is
//! published as it is: nothing here creates or destroys MIG devices.
//!
//! With memory shares (`--memory-shares`, KEP-5075 consumable capacity) a whole GPU that
//! is not in MIG mode is published with `allowMultipleAllocations` and a `memory` capacity
//! claims consume from in steps (`requestPolicy`): several claims share it, the scheduler
//! counts the memory, and prepare turns each claim's share into its MPS limits
//! ([`crate::prepare`]). A claim that asks for no memory consumes all of it.
//!
//! Health reaches the scheduler as a device taint (`edgegpu.io/unhealthy`, effect
//! `NoSchedule`) on unhealthy devices, as NVIDIA's DRA driver does (`device_health.go`):
//! device taints are beta in Kubernetes 1.35 behind `DRADeviceTaints`; an API server without
//! the gate drops the field and the device stays schedulable, and the driver also refuses to
//! prepare an unhealthy device. The kubelet gets the same health through
//! `DRAResourceHealth` ([`Inventory::health`]).

use std::collections::BTreeMap;
use std::path::Path;

use edgegpu_host::cdi::spec::ContainerEdits;
use edgegpu_host::root::HostRoot;
use edgegpu_node::config::{GpuArgs, MigStrategy};
use edgegpu_node::facts::NodeFacts;
use edgegpu_node::gpu::discovery::Platform;
use edgegpu_node::power::follow::Published;
use edgegpu_node::snapshot::Snapshot;
use edgegpu_platform::cdi as cdi_names;
use serde_json::{json, Map, Value};

use crate::api_versions::{Feature, Features};
use crate::kubelet::{DeviceHealth, Health};
use crate::slices::PoolContent;

/// Schema limits of `resource.k8s.io/v1` (`k8s.io/api/resource/v1/types.go`).
pub const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
pub const MAX_ID_LENGTH: usize = 32;
pub const MAX_STRING_LENGTH: usize = 64;

/// The taint key an unhealthy device carries.
pub const UNHEALTHY_TAINT: &str = "edgegpu.io/unhealthy";

/// One attribute value (`DeviceAttribute`: exactly one of int, bool, string, version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    Int(i64),
    Bool(bool),
    /// At most 64 characters (longer values are cut).
    String(String),
    /// A semantic version (`12.6.0`).
    Version(String),
}

impl Attr {
    fn string(s: &str) -> Attr {
        Attr::String(s.chars().take(MAX_STRING_LENGTH).collect())
    }

    fn to_json(&self) -> Value {
        match self {
            Attr::Int(i) => json!({ "int": i }),
            Attr::Bool(b) => json!({ "bool": b }),
            Attr::String(s) => json!({ "string": s }),
            Attr::Version(v) => json!({ "version": v }),
        }
    }
}

/// What a published device is (its `type` attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    Gpu,
    Mig,
    Dla,
    Pva,
}

impl DeviceType {
    /// The kind of device it is allocated as: a MIG device is a GPU's.
    pub fn kind(self) -> edgegpu_node::ownership::DeviceKind {
        use edgegpu_node::ownership::DeviceKind;
        match self {
            DeviceType::Gpu | DeviceType::Mig => DeviceKind::Gpu,
            DeviceType::Dla => DeviceKind::Dla,
            DeviceType::Pva => DeviceKind::Pva,
        }
    }

    /// The `type` attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Gpu => "gpu",
            DeviceType::Mig => "mig",
            DeviceType::Dla => "dla",
            DeviceType::Pva => "pva",
        }
    }
}

/// One published device.
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryDevice {
    /// The DRA device name (`gpu-0`).
    pub name: String,
    pub kind: DeviceType,
    /// Attributes by unqualified (driver-domain) or qualified name.
    pub attributes: BTreeMap<String, Attr>,
    /// Capacities (plain numbers: bytes, counts).
    pub capacity: BTreeMap<String, u64>,
    /// How CUDA in the container names the device: its UUID for NVML devices, `0` for a
    /// Jetson's GPU (MPS limits use it).
    pub cuda_id: String,
    /// The ID the device plugin's health table knows the device by (`--device-id-strategy
    /// uuid`: the GPU's or MIG device's UUID, `tegra` for a Jetson's GPU), to follow its
    /// health ([`crate::prepare::NodeDriver::apply_plugin_health`]); `dla0`, `pva0` for engines.
    pub plugin_id: String,
    /// The device's own container edits (from `cdi generate`'s device of the same GPU).
    pub edits: ContainerEdits,
    /// Environment the device adds for the container (e.g. `EDGEGPU_DLA_CORES`).
    pub env: Vec<(String, String)>,
    pub health: Health,
    pub health_message: String,
    /// Published only where the cluster has this feature (a MIG GPU whole needs
    /// partitionable devices).
    pub requires: Option<Feature>,
    /// The shared counters it consumes (partitionable devices).
    pub consumes: Option<CounterUse>,
    /// The devices it is made of (a MIG GPU whole: its MIG devices): a claim holding this
    /// one holds those too.
    pub includes: Vec<String>,
    /// Shared by memory, in steps of this many bytes (consumable capacity).
    pub memory_step: Option<u64>,
}

/// A pool's counter set (`sharedCounters[]`): counters by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSet {
    pub name: String,
    pub counters: BTreeMap<String, u64>,
}

/// What a device consumes from one counter set (`consumesCounters[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterUse {
    pub set: String,
    pub counters: BTreeMap<String, u64>,
}

/// How the driver shares GPUs between claims.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareOptions {
    /// Memory shares in steps of this many bytes (`--memory-shares`); `None`: off.
    pub memory_step: Option<u64>,
}

/// The node's devices.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    /// The pool (the node's name).
    pub pool: String,
    pub devices: Vec<InventoryDevice>,
    /// Edits every device of the node needs (`cdi generate`'s spec-wide edits: driver
    /// libraries, control nodes, hooks).
    pub common_edits: ContainerEdits,
    /// The engines published (for their health checks, [`Inventory::check_engines`]).
    pub engines: Vec<Engine>,
    /// The counter sets of MIG GPUs published whole.
    pub counter_sets: Vec<CounterSet>,
    /// What the cluster takes ([`crate::api_versions`]): devices and fields of a feature it
    /// lacks are neither published nor prepared.
    pub features: Features,
}

/// `4.0` → `4.0.0`, `535.104.05` → `535.104.5`: a semantic version (no leading zeros, three
/// numbers) from a dotted version of at most three numeric parts; `None` otherwise.
pub fn semver(version: &str) -> Option<String> {
    let parts: Vec<u64> = version
        .trim()
        .split('.')
        .map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                p.parse().ok()
            }
        })
        .collect::<Option<_>>()?;
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let get = |i: usize| parts.get(i).copied().unwrap_or(0);
    Some(format!("{}.{}.{}", get(0), get(1), get(2)))
}

/// NVML's `00000000:17:00.0` as the standard attribute wants it (`0000:17:00.0`, lower case,
/// `k8s.io/dynamic-resource-allocation/deviceattribute`).
pub fn pci_bus_id(nvml: &str) -> String {
    let lower = nvml.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

/// A Jetson engine (DLA core, PVA instance), as the round's snapshot found it
/// (`NodeFacts::engines`: the SoC's engines whose device nodes exist; none on an Orin Nano,
/// whose engines are fused off, nor off a Jetson).
pub use edgegpu_node::engines::{Engine, EngineKind};

const MIB: u64 = 1024 * 1024;

impl Inventory {
    /// Discovers the devices of the host under `root` as the device plugin started with
    /// `args` sees them (MIG devices where its MIG strategy enumerates them). No GPU: an
    /// empty inventory.
    pub fn discover(
        root: &Path,
        args: &GpuArgs,
        pool: &str,
        shares: ShareOptions,
    ) -> anyhow::Result<Inventory> {
        Inventory::of_snapshot(root, &Snapshot::take(root, args)?, pool, shares)
    }

    /// The devices of a round's snapshot (one discovery, shared with the round's health
    /// monitors), described by its typed facts.
    pub fn of_snapshot(
        root: &Path,
        snapshot: &Snapshot,
        pool: &str,
        shares: ShareOptions,
    ) -> anyhow::Result<Inventory> {
        let with_mig = snapshot.config.mig_strategy != MigStrategy::None;
        let mut inventory = Inventory {
            pool: pool.to_string(),
            devices: Vec::new(),
            common_edits: ContainerEdits::default(),
            engines: Vec::new(),
            counter_sets: Vec::new(),
            features: Features::ALL,
        };
        let Some(discovered) = snapshot.gpus_found() else {
            return Ok(inventory);
        };
        let host = HostRoot::new(root);
        let generated = edgegpu_host::cdi::generate(&host)
            .map_err(|e| anyhow::anyhow!("the CDI edits of this node's GPUs: {e}"))?;
        for w in &generated.warnings {
            tracing::warn!("CDI: {w}");
        }
        inventory.common_edits = generated.spec.container_edits.clone();
        let edits_of = |name: &str| -> anyhow::Result<ContainerEdits> {
            generated
                .spec
                .devices
                .iter()
                .find(|d| d.name == name)
                .map(|d| d.container_edits.clone())
                .ok_or_else(|| anyhow::anyhow!("the CDI edits have no device {name:?}"))
        };
        let driver_version = edgegpu_host::cdi::driver::version(&host);
        let facts = Facts::of(&snapshot.facts);
        let mut whole_mig_gpus = Vec::new();
        for gpu in &discovered.gpus {
            // A MIG-enabled GPU is used through its MIG devices (as the plugin's MIG
            // strategies and NVIDIA's DRA driver do), and whole only with counters (below).
            let mig_parent = with_mig && gpu.mig_enabled;
            let mut attributes = BTreeMap::new();
            let mut capacity = BTreeMap::new();
            attributes.insert("type".into(), Attr::string("gpu"));
            attributes.insert(
                "uuid".into(),
                Attr::string(&discovered.platform.uuid_label(gpu)),
            );
            attributes.insert(
                "productName".into(),
                Attr::string(discovered.platform.model_name(gpu)),
            );
            facts.add_common(&mut attributes);
            let integrated = matches!(discovered.platform, Platform::Tegra { .. });
            attributes.insert("integrated".into(), Attr::Bool(integrated));
            // On every GPU, so that a selector can tell a whole GPU from one in MIG mode
            // (`!device.attributes['edgegpu.io'].migEnabled`) without a missing key.
            attributes.insert("migEnabled".into(), Attr::Bool(mig_parent));
            let cuda_id = if integrated {
                // The shared memory the GPU can use, as the labels say (MemTotal, whole MiB).
                if let Some(mib) = facts.memory_mib {
                    capacity.insert("memory".into(), mib * MIB);
                }
                "0".to_string()
            } else {
                if let Some(bytes) = gpu.memory_bytes {
                    capacity.insert("memory".into(), bytes);
                }
                if let Some(bus) = &gpu.pci_bus_id {
                    attributes.insert(
                        "resource.kubernetes.io/pciBusID".into(),
                        Attr::string(&pci_bus_id(bus)),
                    );
                }
                if let Some(numa) = gpu.numa_node.filter(|n| *n >= 0) {
                    attributes.insert("resource.kubernetes.io/numaNode".into(), Attr::Int(numa));
                }
                if let Some(v) = driver_version.as_deref().and_then(semver) {
                    attributes.insert("driverVersion".into(), Attr::Version(v));
                }
                gpu.uuid.clone()
            };
            let edits = edits_of(&cdi_names::gpu_by_index(gpu.index))?;
            let device = InventoryDevice {
                name: format!("gpu-{}", gpu.index),
                kind: DeviceType::Gpu,
                attributes,
                capacity,
                cuda_id,
                plugin_id: gpu.uuid.clone(),
                edits,
                env: Vec::new(),
                health: Health::Healthy,
                health_message: "found by discovery".into(),
                requires: None,
                consumes: None,
                includes: Vec::new(),
                // MPS, which enforces shares, does not run on a GPU in MIG mode (whatever
                // the MIG strategy).
                memory_step: if gpu.mig_enabled {
                    None
                } else {
                    shares.memory_step
                },
            };
            if mig_parent {
                whole_mig_gpus.push(device);
            } else {
                inventory.devices.push(device);
            }
        }
        for mig in &discovered.migs {
            let parent = &discovered.gpus[mig.parent];
            let mut attributes = BTreeMap::new();
            attributes.insert("type".into(), Attr::string("mig"));
            attributes.insert("uuid".into(), Attr::string(&mig.uuid));
            // The parent's `uuid` attribute (NVML's UUID on a Jetson too, not `tegra`).
            attributes.insert(
                "parentUUID".into(),
                Attr::string(&discovered.platform.uuid_label(parent)),
            );
            attributes.insert("profile".into(), Attr::string(&mig.profile));
            attributes.insert(
                "productName".into(),
                Attr::string(discovered.platform.model_name(parent)),
            );
            facts.add_common(&mut attributes);
            attributes.insert(
                "integrated".into(),
                Attr::Bool(matches!(discovered.platform, Platform::Tegra { .. })),
            );
            if let Some(bus) = &parent.pci_bus_id {
                attributes.insert(
                    "resource.kubernetes.io/pciBusID".into(),
                    Attr::string(&pci_bus_id(bus)),
                );
            }
            if let Some(v) = driver_version.as_deref().and_then(semver) {
                attributes.insert("driverVersion".into(), Attr::Version(v));
            }
            let a = mig.attributes;
            let capacity: BTreeMap<String, u64> = [
                ("memory", mig.memory_bytes),
                ("multiprocessors", u64::from(a.multiprocessors)),
                ("copyEngines", u64::from(a.copy_engines)),
                ("decoders", u64::from(a.decoders)),
                ("encoders", u64::from(a.encoders)),
                ("jpegEngines", u64::from(a.jpeg_engines)),
                ("ofaEngines", u64::from(a.ofa_engines)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let edits = edits_of(&cdi_names::mig_device(
                parent.index,
                mig.gpu_instance,
                mig.compute_instance,
            ))?;
            inventory.devices.push(InventoryDevice {
                name: format!(
                    "gpu-{}-mig-{}-{}",
                    parent.index, mig.gpu_instance, mig.compute_instance
                ),
                kind: DeviceType::Mig,
                attributes,
                capacity,
                cuda_id: mig.uuid.clone(),
                plugin_id: mig.uuid.clone(),
                edits,
                env: Vec::new(),
                health: Health::Healthy,
                health_message: "found by discovery".into(),
                requires: None,
                consumes: None,
                includes: Vec::new(),
                memory_step: None,
            });
        }
        for whole in whole_mig_gpus {
            inventory.add_partitioned(whole);
        }
        inventory.add_engines(root, &snapshot.facts.engines);
        for d in &inventory.devices {
            check_limits(d)?;
        }
        Ok(inventory)
    }

    /// Publishes a MIG GPU whole beside its MIG devices (already in the inventory, named
    /// `<whole>-mig-<gi>-<ci>`): one counter set with a counter per MIG device, each MIG
    /// device consuming its own, the whole GPU all; the whole GPU's edits are its MIG
    /// devices' together (a container of a MIG-mode GPU reaches CUDA through MIG devices
    /// only). A GPU without MIG devices is left out: it has nothing to run on.
    fn add_partitioned(&mut self, mut whole: InventoryDevice) {
        let prefix = format!("{}-mig-", whole.name);
        let set = format!("{}-counters", whole.name);
        let mut counters = BTreeMap::new();
        let mut parts = Vec::new();
        for d in self
            .devices
            .iter_mut()
            .filter(|d| d.kind == DeviceType::Mig && d.name.starts_with(&prefix))
        {
            // `gpu-0-mig-1-0` → `gi1ci0`: a C identifier and a DNS label.
            let ids: Vec<&str> = d.name[prefix.len()..].split('-').collect();
            let counter = format!("gi{}ci{}", ids[0], ids.get(1).unwrap_or(&"0"));
            counters.insert(counter.clone(), 1);
            d.consumes = Some(CounterUse {
                set: set.clone(),
                counters: [(counter, 1)].into_iter().collect(),
            });
            parts.push(d.name.clone());
            for n in &d.edits.device_nodes {
                if !whole.edits.device_nodes.iter().any(|w| w.path == n.path) {
                    whole.edits.device_nodes.push(n.clone());
                }
            }
        }
        if parts.is_empty() {
            return;
        }
        whole.requires = Some(Feature::PartitionableDevices);
        whole.consumes = Some(CounterUse {
            set: set.clone(),
            counters: counters.clone(),
        });
        whole.includes = parts;
        self.counter_sets.push(CounterSet {
            name: set,
            counters,
        });
        self.devices.push(whole);
    }

    /// Adds Jetson engines as devices (`dla-<n>`, `pva-<n>`), with the board's attributes
    /// of the GPU, and takes their device nodes out of every other device's and the common
    /// edits: L4T's container lists give every GPU container all engine nodes, and once an
    /// engine is a device of its own, only a claim for an engine gets engine nodes. Which
    /// ones is the device plugin's rule (`edgegpu_node::engines::container_nodes`): every
    /// node of the engine's kind, and `/dev/nvmap` (under `root`) for PVA.
    pub fn add_engines(&mut self, root: &Path, engines: &[Engine]) {
        if engines.is_empty() {
            return;
        }
        let board: BTreeMap<String, Attr> = self
            .devices
            .iter()
            .find(|d| d.kind == DeviceType::Gpu || d.kind == DeviceType::Mig)
            .map(|d| {
                d.attributes
                    .iter()
                    .filter(|(k, _)| JETSON_ATTRIBUTES.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let nodes: Vec<&str> = engines
            .iter()
            .flat_map(|e| e.nodes.iter().map(String::as_str))
            .collect();
        self.common_edits
            .device_nodes
            .retain(|n| !nodes.contains(&n.path.as_str()));
        for d in &mut self.devices {
            d.edits
                .device_nodes
                .retain(|n| !nodes.contains(&n.path.as_str()));
        }
        for engine in engines {
            let mut device = engine_device(root, engines, engine);
            for (k, v) in &board {
                device.attributes.insert(k.clone(), v.clone());
            }
            self.devices.push(device);
            self.engines.push(engine.clone());
        }
    }

    /// Runs each engine's health check under `root` (node present, platform device bound:
    /// [`Engine::health`]) and records the outcome; `true` if any device's health changed.
    /// Blocking (stat calls).
    pub fn check_engines(&mut self, root: &Path) -> bool {
        let outcomes: Vec<(String, Result<(), String>)> = self
            .engines
            .iter()
            .map(|e| (engine_name(e), e.health(root)))
            .collect();
        let mut changed = false;
        for (name, outcome) in outcomes {
            changed |= match outcome {
                Ok(()) => self.set_health(
                    &name,
                    Health::Healthy,
                    "device node and platform device present",
                ),
                Err(why) => self.set_health(&name, Health::Unhealthy, &why),
            };
        }
        changed
    }

    /// Whether one of `a` and `b` is a MIG GPU whole and the other one of its MIG devices.
    pub fn whole_and_part(&self, a: &str, b: &str) -> bool {
        let includes = |whole: &str, part: &str| {
            self.devices
                .iter()
                .any(|d| d.name == whole && d.includes.iter().any(|p| p == part))
        };
        includes(a, b) || includes(b, a)
    }

    /// A MIG GPU whole is as healthy as its MIG devices (the plugin's health table names MIG
    /// devices by their UUIDs, never the GPU): unhealthy while one of them is, naming it.
    /// `true` if a whole GPU's health changed.
    fn follow_parts_health(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.devices.len() {
            if self.devices[i].includes.is_empty() {
                continue;
            }
            let sick = self.devices[i].includes.iter().find_map(|part| {
                self.devices
                    .iter()
                    .find(|d| &d.name == part && d.health == Health::Unhealthy)
                    .map(|d| format!("MIG device {} is unhealthy: {}", d.name, d.health_message))
            });
            let whole = &mut self.devices[i];
            let (health, message) = match sick {
                Some(why) => (Health::Unhealthy, why),
                None => (Health::Healthy, "its MIG devices are healthy".to_string()),
            };
            if whole.health != health
                || (health == Health::Unhealthy && whole.health_message != message)
            {
                whole.health = health;
                whole.health_message = message.chars().take(1024).collect();
                changed = true;
            }
        }
        changed
    }

    /// Whether `d` is published under [`Inventory::features`].
    fn published(&self, d: &InventoryDevice) -> bool {
        published_under(d, self.features)
    }

    /// Narrows or widens what is published to `features`; `true` if that changed it.
    pub fn set_features(&mut self, features: Features) -> bool {
        std::mem::replace(&mut self.features, features) != features
    }

    /// The published device named `name`.
    pub fn get(&self, name: &str) -> Option<&InventoryDevice> {
        self.devices
            .iter()
            .find(|d| d.name == name)
            .filter(|d| self.published(d))
    }

    /// Sets a device's health (from the plugin's health watch); `false` if there is no such
    /// device or nothing changed (a healthy device's message is not a change).
    pub fn set_health(&mut self, name: &str, health: Health, message: &str) -> bool {
        // A healthy device keeps the message it has: the kubelet and the slices only need to
        // hear of a change of health, or of why a device is unhealthy.
        let changed = match self.devices.iter_mut().find(|d| d.name == name) {
            Some(d) if d.health != health => {
                d.health = health;
                d.health_message = message.chars().take(1024).collect();
                true
            }
            Some(d) if health == Health::Unhealthy && d.health_message != message => {
                d.health_message = message.chars().take(1024).collect();
                true
            }
            _ => false,
        };
        changed | self.follow_parts_health()
    }

    /// Sets the power-mode attributes to what `power` publishes after a mode change
    /// (docs/power.md): `powerMode` and `powerModeId` on every device of the board,
    /// `gpuClockMaxMHz` on its GPUs and MIG devices, as discovery sets them. `true` if one
    /// changed (republish the slices).
    pub fn set_power(&mut self, power: &Published) -> bool {
        let mut changed = false;
        for d in &mut self.devices {
            let a = &mut d.attributes;
            changed |= set_attribute(a, "powerMode", power.mode_name.as_deref().map(Attr::string));
            changed |= set_attribute(
                a,
                "powerModeId",
                power.mode_id.map(|id| Attr::Int(id.into())),
            );
            if matches!(d.kind, DeviceType::Gpu | DeviceType::Mig) {
                let mhz = power.gpu_ceiling_mhz.and_then(|m| i64::try_from(m).ok());
                changed |= set_attribute(a, "gpuClockMaxMHz", mhz.map(Attr::Int));
            }
        }
        changed
    }

    /// The published devices as `resource.k8s.io/v1` `Device` objects and the counter sets
    /// they consume, for [`crate::slices`].
    pub fn slice_content(&self) -> PoolContent {
        self.slice_content_for(self.features)
    }

    /// What [`Inventory::slice_content`] would be under `features`.
    pub fn slice_content_for(&self, features: Features) -> PoolContent {
        PoolContent {
            devices: self
                .devices
                .iter()
                .filter(|d| published_under(d, features))
                .map(|d| device_json(d, features))
                .collect(),
            counter_sets: if features.partitionable_devices {
                self.counter_sets.iter().map(counter_set_json).collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The published devices of [`Inventory::slice_content`].
    pub fn slice_devices(&self) -> Vec<Value> {
        self.slice_content().devices
    }

    /// Every published device's health, for the kubelet's health stream.
    pub fn health(&self) -> Vec<DeviceHealth> {
        self.devices
            .iter()
            .filter(|d| self.published(d))
            .map(|d| DeviceHealth {
                pool: self.pool.clone(),
                device: d.name.clone(),
                health: d.health,
                message: d.health_message.clone(),
            })
            .collect()
    }
}

/// Whether `d` is published where the cluster has `features`.
fn published_under(d: &InventoryDevice, features: Features) -> bool {
    d.requires.map_or(true, |f| features.has(f))
}

/// Sets (`Some`) or removes (`None`) one attribute; `true` if that changed it.
fn set_attribute(attributes: &mut BTreeMap<String, Attr>, key: &str, value: Option<Attr>) -> bool {
    match value {
        Some(v) => attributes.insert(key.to_string(), v.clone()) != Some(v),
        None => attributes.remove(key).is_some(),
    }
}

/// The node-wide facts of the labels, as attributes.
struct Facts {
    architecture: Option<String>,
    capability: Option<String>,
    cuda_driver: Option<String>,
    memory_mib: Option<u64>,
    l4t: Option<String>,
    jetpack_major: Option<i64>,
    board: Option<String>,
    module: Option<String>,
    soc: Option<String>,
    power_mode: Option<String>,
    power_mode_id: Option<i64>,
    gpu_clock_max_mhz: Option<i64>,
}

impl Facts {
    /// The attributes' values: the facts as they are (a board's model keeps its spaces),
    /// never a label's escaped value.
    fn of(node: &NodeFacts) -> Facts {
        let version = |v: Option<(u32, u32)>| v.and_then(|(a, b)| semver(&format!("{a}.{b}")));
        let jetson = node.jetson.as_ref();
        // The same values a mode change sets later (`Inventory::set_power`).
        let power = jetson.map(|j| j.power.published()).unwrap_or_default();
        Facts {
            architecture: node.family().map(str::to_string),
            capability: version(node.compute_capability),
            cuda_driver: version(node.cuda_driver),
            memory_mib: node.gpu_memory_bytes.map(|b| b / MIB),
            l4t: jetson.and_then(|j| j.l4t.as_deref()).and_then(semver),
            jetpack_major: jetson.and_then(|j| j.jetpack_major).map(i64::from),
            board: jetson.and_then(|j| j.model.clone()),
            module: jetson.and_then(|j| j.module.clone()),
            soc: jetson.and_then(|j| j.soc).map(str::to_string),
            power_mode: power.mode_name,
            power_mode_id: power.mode_id.map(i64::from),
            gpu_clock_max_mhz: power.gpu_ceiling_mhz.and_then(|m| i64::try_from(m).ok()),
        }
    }

    fn add_common(&self, a: &mut BTreeMap<String, Attr>) {
        let mut string = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                a.insert(k.into(), Attr::string(v));
            }
        };
        string("architecture", &self.architecture);
        self.add_jetson(a);
        if let Some(v) = &self.capability {
            a.insert("cudaComputeCapability".into(), Attr::Version(v.clone()));
        }
        if let Some(v) = &self.cuda_driver {
            a.insert("cudaDriverVersion".into(), Attr::Version(v.clone()));
        }
        // The GPU's own: its clock ceiling under the power mode (docs/power.md).
        if let Some(v) = self.gpu_clock_max_mhz {
            a.insert("gpuClockMaxMHz".into(), Attr::Int(v));
        }
    }

    fn add_jetson(&self, a: &mut BTreeMap<String, Attr>) {
        for (k, v) in [
            ("board", &self.board),
            ("module", &self.module),
            ("soc", &self.soc),
        ] {
            if let Some(v) = v {
                a.insert(k.into(), Attr::string(v));
            }
        }
        if let Some(v) = &self.l4t {
            a.insert("l4tRelease".into(), Attr::Version(v.clone()));
        }
        if let Some(v) = self.jetpack_major {
            a.insert("jetpackMajor".into(), Attr::Int(v));
        }
        if let Some(v) = &self.power_mode {
            a.insert("powerMode".into(), Attr::string(v));
        }
        if let Some(v) = self.power_mode_id {
            a.insert("powerModeId".into(), Attr::Int(v));
        }
    }
}

/// The attributes of the board an engine shares with its Jetson's GPU.
const JETSON_ATTRIBUTES: [&str; 7] = [
    "board",
    "module",
    "soc",
    "l4tRelease",
    "jetpackMajor",
    "powerMode",
    "powerModeId",
];

impl From<EngineKind> for DeviceType {
    fn from(kind: EngineKind) -> Self {
        match kind {
            EngineKind::Dla => DeviceType::Dla,
            EngineKind::Pva => DeviceType::Pva,
        }
    }
}

/// `dla-0`, `pva-0`.
fn engine_name(engine: &Engine) -> String {
    format!("{}-{}", engine.kind.name(), engine.index)
}

/// Device `engine` of the host's `engines`. Its edits are the node library's rule for a
/// container holding it alone; a claim with two cores gets the same nodes from each device,
/// which the CDI library applies once (`pkg/cdi/container-edits.go`, `Apply`).
fn engine_device(root: &Path, engines: &[Engine], engine: &Engine) -> InventoryDevice {
    let kind = DeviceType::from(engine.kind);
    let mut attributes = BTreeMap::new();
    attributes.insert("type".into(), Attr::string(kind.as_str()));
    attributes.insert("index".into(), Attr::Int(i64::from(engine.index)));
    attributes.insert("integrated".into(), Attr::Bool(true));
    let mut edits = ContainerEdits::default();
    for path in edgegpu_node::engines::container_nodes(root, engines, &[engine]) {
        edits
            .device_nodes
            .push(edgegpu_host::cdi::spec::DeviceNode { path });
    }
    // The variable the device plugin's engine resources set (`EDGEGPU_DLA_CORES`,
    // `EDGEGPU_PVA_INSTANCES`); a claim's devices of one kind share one list (prepare.rs).
    let env = vec![(
        edgegpu_node::engines::env_var(engine.kind).to_string(),
        engine.index.to_string(),
    )];
    InventoryDevice {
        name: engine_name(engine),
        kind,
        attributes,
        capacity: BTreeMap::new(),
        cuda_id: String::new(),
        // The plugin's engine resources advertise it as `dla0`.
        plugin_id: engine.id(),
        edits,
        env,
        health: Health::Healthy,
        health_message: "found by discovery".into(),
        requires: None,
        consumes: None,
        includes: Vec::new(),
        memory_step: None,
    }
}

/// The schema's limits on a device: ≤32 attributes and capacities together, each name's
/// identifier ≤32 characters.
fn check_limits(d: &InventoryDevice) -> anyhow::Result<()> {
    let total = d.attributes.len() + d.capacity.len();
    anyhow::ensure!(
        total <= MAX_ATTRIBUTES_AND_CAPACITIES,
        "device {} has {total} attributes and capacities (at most {MAX_ATTRIBUTES_AND_CAPACITIES})",
        d.name
    );
    for name in d.attributes.keys().chain(d.capacity.keys()) {
        let id = name.rsplit_once('/').map_or(name.as_str(), |(_, id)| id);
        anyhow::ensure!(
            id.len() <= MAX_ID_LENGTH,
            "device {}: attribute name {name} is longer than {MAX_ID_LENGTH}",
            d.name
        );
    }
    Ok(())
}

/// `counters` as a `v1` counter map: `{"name": {"value": "1"}}`.
fn counters_json(counters: &BTreeMap<String, u64>) -> Value {
    counters
        .iter()
        .map(|(k, v)| (k.clone(), json!({ "value": v.to_string() })))
        .collect::<Map<String, Value>>()
        .into()
}

fn counter_set_json(set: &CounterSet) -> Value {
    json!({ "name": set.name, "counters": counters_json(&set.counters) })
}

/// The memory capacity's request policy for shares of `step` bytes out of `total`: whole
/// steps from one step up to all the steps that fit, all of them when a claim names no
/// amount (such a claim holds the GPU alone, as without shares).
fn memory_policy(total: u64, step: u64) -> Value {
    let max = total / step * step;
    json!({
        "default": max.to_string(),
        "validRange": {"min": step.to_string(), "max": max.to_string(), "step": step.to_string()},
    })
}

fn device_json(d: &InventoryDevice, features: Features) -> Value {
    let attributes: Map<String, Value> = d
        .attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.to_json()))
        .collect();
    let shared_memory = d
        .memory_step
        .filter(|_| features.consumable_capacity)
        .and_then(|step| Some((step, *d.capacity.get("memory")?)))
        .filter(|(step, total)| total >= step);
    let capacity: Map<String, Value> = d
        .capacity
        .iter()
        .map(|(k, v)| {
            let mut c = json!({ "value": v.to_string() });
            if let (Some((step, total)), "memory") = (shared_memory, k.as_str()) {
                c["requestPolicy"] = memory_policy(total, step);
            }
            (k.clone(), c)
        })
        .collect();
    let mut device = json!({
        "name": d.name,
        "attributes": attributes,
    });
    if !capacity.is_empty() {
        device["capacity"] = Value::Object(capacity);
    }
    if shared_memory.is_some() {
        device["allowMultipleAllocations"] = Value::Bool(true);
    }
    if let Some(use_) = d
        .consumes
        .as_ref()
        .filter(|_| features.partitionable_devices)
    {
        device["consumesCounters"] =
            json!([{ "counterSet": use_.set, "counters": counters_json(&use_.counters) }]);
    }
    if d.health == Health::Unhealthy && features.device_taints {
        device["taints"] = json!([{
            "key": UNHEALTHY_TAINT,
            "value": "true",
            "effect": "NoSchedule",
        }]);
    }
    device
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One allocation kind per device type: a MIG device is held with its GPU's lock, an
    /// engine's type and kind share its name.
    #[test]
    fn device_types_and_their_allocation_kinds() {
        use edgegpu_node::ownership::DeviceKind;
        assert_eq!(DeviceType::Gpu.kind(), DeviceKind::Gpu);
        assert_eq!(DeviceType::Mig.kind(), DeviceKind::Gpu);
        for engine in [EngineKind::Dla, EngineKind::Pva] {
            let t = DeviceType::from(engine);
            assert_eq!(t.as_str(), engine.name());
            assert_eq!(t.kind(), DeviceKind::from(engine));
        }
    }

    #[test]
    fn versions_become_semver() {
        assert_eq!(semver("535.104.05").as_deref(), Some("535.104.5"));
        assert_eq!(semver("12.6").as_deref(), Some("12.6.0"));
        assert_eq!(semver("36.4.3").as_deref(), Some("36.4.3"));
        assert_eq!(semver("1.2.3.4"), None);
        assert_eq!(semver("r36"), None);
        assert_eq!(semver(""), None);
    }

    #[test]
    fn pci_bus_ids_take_the_short_domain() {
        assert_eq!(pci_bus_id("00000000:17:00.0"), "0000:17:00.0");
        assert_eq!(pci_bus_id("00000000:AB:00.0"), "0000:ab:00.0");
        assert_eq!(pci_bus_id("0000:01:00.0"), "0000:01:00.0");
    }

    #[test]
    fn long_strings_are_cut() {
        let Attr::String(s) = Attr::string(&"x".repeat(100)) else {
            panic!()
        };
        assert_eq!(s.len(), MAX_STRING_LENGTH);
    }
}
