//! The node side of NodePrepareResources / NodeUnprepareResources: [`NodeDriver`], the
//! [`kubelet::Driver`] the kubelet side calls.
//!
//! Preparing a claim ([`NodeDriver::prepare_allocation`], after [`claims::fetch`] read what
//! the scheduler allocated):
//! 0. the claim UID must be a UUID ([`cdi::check_uid`]) before anything else: it names the
//!    claim's spec file and checkpoint entry (so does [`NodeDriver::unprepare_claim`]);
//! 1. a claim already `PrepareCompleted` in the checkpoint gets its stored devices back
//!    (the kubelet calls again after restarts and on retries);
//! 2. every device must be this node's (pool), in the inventory and healthy;
//! 3. the opaque configs are validated ([`sharing`]); for each device, the last DeviceClass
//!    config and the last claim config that name its request (or name no request) are found
//!    (`applying`), and the class's is a ceiling the claim's may only tighten
//!    ([`sharing::resolve`]: same strategy, MPS limits at most the class's; anything else
//!    is refused); a `GpuConfig` with `sharing` that names a DLA or PVA request is refused,
//!    one that names no request passes over the claim's engines;
//! 4. a device held exclusively by another prepared claim is busy; a device is held
//!    exclusively unless the request has `adminAccess` (which holds nothing), the allocation
//!    has a `shareID`, or a `GpuConfig` shares it (TimeSlicing or MPS — then it is busy
//!    only for an exclusive claim);
//! 5. checkpoint `PrepareStarted` → the claim's CDI spec ([`cdi`]) → `PrepareCompleted`.
//!
//! Each step is a function of its own, called in this order by `Node::prepare`. One lock on
//! the driver's state (a `std::sync::Mutex`: the inventory and the checkpoint) is held from
//! step 1 to step 5, so that for concurrent prepares the busy check and the entry that holds
//! the devices are one step. Since steps 1 and 5 write files under that lock, the kubelet
//! side's async calls ([`kubelet::Driver::prepare`], [`kubelet::Driver::unprepare`]) run
//! them on a blocking thread (`tokio::task::spawn_blocking`), not on the runtime that serves
//! the kubelet; in a build that unwinds (tests), a panic there is an error for that claim
//! ([`PrepareError::Stopped`]); release builds abort on a panic by design (`panic = "abort"`).
//!
//! Across the driver's instances (the two pods of a rolling update, docs/dra.md "Rolling
//! updates") the same steps are one step too: each prepare and unprepare first takes the
//! node-wide lock of [`serialize`], then reads the checkpoint again (the other pod may have
//! prepared or unprepared a claim since), and keeps the lock to its last write. Start-up's
//! recovery ([`NodeDriver::new`]) runs under it as well, so a claim it finds `PrepareStarted`
//! is no other pod's preparation in progress but an abandoned one. The lock comes before the
//! state's mutex, never after it: waiting for the other pod never holds up the health
//! updates that take the mutex on the runtime.
//!
//! A pod's GPU claim and DLA claim are separate claims with a spec file each; each spec
//! carries the node's common edits (driver libraries, hooks) so it works alone, and when a
//! container gets both, the CDI library's edit application replaces device nodes and mounts
//! of the same path (`pkg/cdi/container-edits.go`, `Apply`), so each lands once. DLA cores of
//! one claim share one `EDGEGPU_DLA_CORES` list; two claims with DLA cores in one container
//! would each set it (the runtime keeps one value): ask for several cores in one claim.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use edgegpu_apiclient::ApiServer;
use edgegpu_host::cdi::spec::Spec;
use serde_json::Value;
use tokio::sync::watch;

use crate::cdi::{self, CdiError, ClaimDevice, InvalidClaimUid};
use crate::checkpoint::{Checkpoint, CheckpointError, ClaimEntry, ClaimState};
use crate::claims::{self, AllocatedDevice, ClaimAllocation, ConfigSource, FetchError};
use crate::inventory::{DeviceType, Inventory, InventoryDevice};
use crate::kubelet::{self, ClaimRef, DeviceHealth, DriverError, Health, PreparedDevice};
use crate::serialize::{self, LockError, Serialized};
use crate::sharing::{
    self, ClassCeilingError, Client, ClientLimit, ConfigError, GpuConfig, MpsHost, NoMpsDaemon,
    ShareLimits, Strategy,
};

/// Why a claim could not be prepared or unprepared. Its message is what the kubelet shows on
/// the pod's events; most name the claim (`namespace/name (uid)`).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("claim {claim}: {source}")]
    InvalidUid {
        claim: ClaimRef,
        #[source]
        source: InvalidClaimUid,
    },
    #[error("no API server to read the claim from")]
    NoApiServer,
    /// What the scheduler allocated could not be read.
    #[error("claim {claim}: {source:#}")]
    Fetch {
        claim: ClaimRef,
        #[source]
        source: FetchError,
    },
    #[error("claim {claim}: no device of {driver} is allocated")]
    NothingAllocated { claim: ClaimRef, driver: String },
    /// Opaque config `index` of the allocation does not parse.
    #[error("claim {claim}: config[{index}] (from the {}): {source}", origin_name(*.origin))]
    InvalidConfig {
        claim: ClaimRef,
        index: usize,
        origin: ConfigSource,
        #[source]
        source: ConfigError,
    },
    #[error("claim {claim}: device {pool}/{device} is not on this node (pool {node_pool})")]
    OtherNode {
        claim: ClaimRef,
        pool: String,
        device: String,
        node_pool: String,
    },
    #[error("claim {claim}: device {device} is not one of this node's devices")]
    UnknownDevice { claim: ClaimRef, device: String },
    #[error("claim {claim}: device {device} is unhealthy: {why}")]
    Unhealthy {
        claim: ClaimRef,
        device: String,
        why: String,
    },
    /// A `GpuConfig` with sharing names a request that got a DLA core or a PVA.
    #[error("claim {claim}: request {request}: a GpuConfig's sharing applies to GPUs and MIG devices, not to {device} ({kind})")]
    SharingOnEngine {
        claim: ClaimRef,
        request: String,
        device: String,
        kind: &'static str,
    },
    /// The claim's config is refused under its DeviceClass's, a ceiling it may only tighten.
    #[error("claim {claim}: request {request}: {source}")]
    ClassCeiling {
        claim: ClaimRef,
        request: String,
        #[source]
        source: ClassCeilingError,
    },
    /// Another prepared claim holds the device: exclusively, or shared while this claim
    /// wants it exclusively.
    #[error("claim {claim}: device {device} is busy: prepared {} for claim {holder}", if *.held_exclusively { "exclusively" } else { "shared" })]
    Busy {
        claim: ClaimRef,
        device: String,
        holder: ClaimRef,
        held_exclusively: bool,
    },
    /// Another prepared claim holds a MIG device of the GPU this claim wants whole, or the
    /// GPU whole while this claim wants one of its MIG devices.
    #[error("claim {claim}: device {device} is busy: {held} (part of the same GPU) is prepared for claim {holder}")]
    PartBusy {
        claim: ClaimRef,
        device: String,
        held: String,
        holder: ClaimRef,
    },
    /// MPS asked for a MIG device or a GPU in MIG mode: the node's MPS daemon serves whole GPUs.
    #[error("claim {claim}: request {request}: sharing.strategy MPS is not supported for {device}, a {what} (the node's MPS daemon serves whole GPUs not in MIG mode); share it with TimeSlicing")]
    MpsOnMig {
        claim: ClaimRef,
        request: String,
        device: String,
        what: &'static str,
    },
    #[error("claim {claim}: {source}")]
    NoMpsDaemon {
        claim: ClaimRef,
        #[source]
        source: NoMpsDaemon,
    },
    /// The claim's spec could not be written, or (unprepare) removed.
    #[error("claim {claim}: {source}")]
    Spec {
        claim: ClaimRef,
        #[source]
        source: CdiError,
    },
    /// The spec of an earlier, unfinished preparation of the claim could not be removed.
    #[error(transparent)]
    StaleSpec(CdiError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The lock shared with the driver's other instance could not be taken.
    #[error(transparent)]
    Serialize(#[from] LockError),
    /// The blocking task that prepared or unprepared the claim panicked.
    #[error("claim {claim}: {source}")]
    Stopped {
        claim: ClaimRef,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// How a config's source is named in messages.
fn origin_name(source: ConfigSource) -> &'static str {
    match source {
        ConfigSource::Class => "DeviceClass",
        ConfigSource::Claim => "claim",
    }
}

/// Why the driver's state could not be recovered at start ([`NodeDriver::new`]): the
/// checkpoint, or a spec to roll back or clean up.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Spec(#[from] CdiError),
    #[error(transparent)]
    Serialize(#[from] LockError),
}

/// Where the node side keeps its files.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The driver's plugin directory (`/var/lib/kubelet/plugins/edgegpu.io`): the checkpoint.
    pub plugin_dir: PathBuf,
    /// Where claim specs are written (`/var/run/cdi`).
    pub cdi_dir: PathBuf,
    /// The node's MPS daemon, for `sharing.strategy: MPS` and memory shares.
    pub mps: MpsHost,
    /// How a memory share without an MPS config reaches its containers.
    pub share_limits: ShareLimits,
}

struct State {
    inventory: Inventory,
    checkpoint: Checkpoint,
}

/// The node side of the driver.
pub struct NodeDriver {
    api: Option<Arc<ApiServer>>,
    /// Shared with the blocking tasks that prepare and unprepare ([`off_runtime`]).
    node: Arc<Node>,
    health: watch::Sender<Vec<DeviceHealth>>,
}

/// What preparing and unpreparing read and write: the devices and the prepared claims, under
/// one lock, and where the files go.
struct Node {
    driver: String,
    options: NodeOptions,
    state: Mutex<State>,
}

/// A validated opaque config of the claim's allocation.
struct Parsed {
    source: ConfigSource,
    requests: Vec<String>,
    config: GpuConfig,
}

/// The config of `source` that applies to a device allocated for `request` (`req` or
/// `req/sub`): the last one naming the request or its parent request, or naming no request;
/// one naming no request that shares passes over an engine (`is_gpu` false). With whether it
/// named the request.
fn applying(
    configs: &[Parsed],
    source: ConfigSource,
    request: &str,
    is_gpu: bool,
) -> Option<(bool, GpuConfig)> {
    let parent = request.split('/').next().unwrap_or(request);
    configs
        .iter()
        .rev()
        .filter(|p| p.source == source)
        .find_map(|p| {
            if p.requests.iter().any(|r| r == request || r == parent) {
                Some((true, p.config))
            } else if p.requests.is_empty() && (is_gpu || p.config.sharing.is_none()) {
                Some((false, p.config))
            } else {
                None
            }
        })
}

impl NodeDriver {
    /// Loads the checkpoint from `options.plugin_dir`, rolls back every claim found
    /// `PrepareStarted` (its spec removed, its entry dropped) and removes claim specs in
    /// `options.cdi_dir` that no claim of the checkpoint owns, all under the lock of
    /// [`serialize`]: the driver's other instance, if one runs, is between two calls then,
    /// and what it prepared is `PrepareCompleted` with its spec in place. `api` is what
    /// [`kubelet::Driver::prepare`] reads claims from; `None` (tests) makes it fail.
    /// Blocking (it may wait for the other instance's call).
    pub fn new(
        inventory: Inventory,
        options: NodeOptions,
        api: Option<Arc<ApiServer>>,
    ) -> Result<NodeDriver, RecoveryError> {
        let _serial = serialize::lock(&options.plugin_dir)?;
        let mut checkpoint = Checkpoint::load(&options.plugin_dir)?;
        let started: Vec<ClaimEntry> = checkpoint
            .entries()
            .filter(|e| e.state == ClaimState::PrepareStarted)
            .cloned()
            .collect();
        for e in started {
            tracing::info!(claim = %e.claim, "rolling back a preparation interrupted by a restart");
            cdi::remove_claim_spec(&e.spec_file, &e.claim.uid)?;
            checkpoint.remove(&e.claim.uid)?;
        }
        // Specs no claim in the checkpoint owns (a checkpoint removed by hand, a write
        // interrupted before its rename): no runtime should resolve them.
        let (specs, temps) = cdi::claim_files(&options.cdi_dir);
        for (uid, file) in specs {
            if checkpoint.get(&uid).is_none() {
                tracing::info!(file = %file.display(), "removing the CDI spec of a claim that is not prepared");
                cdi::remove(&file)?;
            }
        }
        for file in temps {
            cdi::remove(&file)?;
        }
        let (health, _) = watch::channel(inventory.health());
        Ok(NodeDriver {
            api,
            node: Arc::new(Node {
                driver: crate::DRIVER_NAME.to_string(),
                options,
                state: Mutex::new(State {
                    inventory,
                    checkpoint,
                }),
            }),
            health,
        })
    }

    /// The devices to publish (`resource.k8s.io/v1` Device objects, unhealthy ones tainted).
    pub fn slice_devices(&self) -> Vec<Value> {
        self.lock().inventory.slice_devices()
    }

    /// The pool's content under `features`.
    pub fn slice_content_for(
        &self,
        features: crate::api_versions::Features,
    ) -> crate::slices::PoolContent {
        self.lock().inventory.slice_content_for(features)
    }

    /// Publishes (and prepares) only what `features` allow; `true` if that changed what
    /// is published.
    pub fn set_features(&self, features: crate::api_versions::Features) -> bool {
        let mut state = self.lock();
        let changed = state.inventory.set_features(features);
        if changed {
            self.health.send_replace(state.inventory.health());
        }
        changed
    }

    /// What the node publishes under.
    pub fn features(&self) -> crate::api_versions::Features {
        self.lock().inventory.features
    }

    /// Sets a device's health (from the plugin's health watch); sends the new list to the
    /// kubelet's health stream when it changed. `true` if it changed (republish the slices).
    pub fn set_health(&self, device: &str, health: Health, message: &str) -> bool {
        let mut state = self.lock();
        let changed = state.inventory.set_health(device, health, message);
        if changed {
            self.health.send_replace(state.inventory.health());
        }
        changed
    }

    /// Sets the power-mode attributes after a mode change ([`Inventory::set_power`]); `true`
    /// if one changed (republish the slices).
    pub fn set_power(&self, power: &edgegpu_node::power::follow::Published) -> bool {
        self.lock().inventory.set_power(power)
    }

    /// Follows the device plugin's health table (`GpuResource::subscribe()`'s device lists,
    /// one per served resource): a device is unhealthy while the plugin reports any of its
    /// IDs (time-slicing replicas `<id>::<n>` included) unhealthy. Devices the list does not
    /// name keep their health. `true` if anything changed (republish the slices).
    pub fn apply_plugin_health(&self, devices: &[edgegpu_kubelet_api::v1beta1::Device]) -> bool {
        let mut state = self.lock();
        let mut verdicts: Vec<(String, bool)> = Vec::new();
        for d in devices {
            let id = d.id.split("::").next().unwrap_or(&d.id);
            let Some(dev) = state
                .inventory
                .devices
                .iter()
                .find(|x| !x.plugin_id.is_empty() && x.plugin_id == id)
            else {
                continue;
            };
            let healthy = d.health == edgegpu_kubelet_api::v1beta1::HEALTHY;
            match verdicts.iter_mut().find(|(n, _)| *n == dev.name) {
                Some((_, h)) => *h &= healthy,
                None => verdicts.push((dev.name.clone(), healthy)),
            }
        }
        let mut changed = false;
        for (name, healthy) in verdicts {
            let (health, message) = if healthy {
                (Health::Healthy, "healthy (device plugin health monitors)")
            } else {
                (
                    Health::Unhealthy,
                    "reported unhealthy by the device plugin's health monitors",
                )
            };
            changed |= state.inventory.set_health(&name, health, message);
        }
        if changed {
            self.health.send_replace(state.inventory.health());
        }
        changed
    }

    /// Re-runs the engines' health checks under `root` ([`Inventory::check_engines`]) and
    /// sends the new list to the kubelet when something changed; `true` then (republish the
    /// slices). Blocking (stat calls): call it from a blocking task on the plugin's inotify
    /// events or a timer.
    pub fn check_engine_health(&self, root: &std::path::Path) -> bool {
        let mut state = self.lock();
        let changed = state.inventory.check_engines(root);
        if changed {
            self.health.send_replace(state.inventory.health());
        }
        changed
    }

    /// The claims the checkpoint held when this instance last read or wrote it.
    pub fn prepared_claims(&self) -> Vec<ClaimEntry> {
        self.lock().checkpoint.entries().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.node.lock()
    }

    /// Prepares `claim` with what the scheduler allocated to it (see the module docs).
    /// Blocking (the spec and the checkpoint are written): [`kubelet::Driver::prepare`] runs
    /// it on a blocking thread.
    // A `PrepareError` carries the claim and the facts of the refusal (a few hundred bytes);
    // it is built at most once per kubelet call, where boxing would only add an allocation.
    #[allow(clippy::result_large_err)]
    pub fn prepare_allocation(
        &self,
        claim: &ClaimRef,
        allocation: &ClaimAllocation,
    ) -> Result<Vec<PreparedDevice>, PrepareError> {
        self.node.prepare(claim, allocation)
    }

    /// Undoes [`NodeDriver::prepare_allocation`]: removes the claim's spec, then its entry.
    /// A claim not in the checkpoint is `Ok`; a claim UID that is not a UUID is an error
    /// ([`cdi::check_uid`]), as in prepare. Blocking, as prepare.
    #[allow(clippy::result_large_err)] // as `prepare_allocation`
    pub fn unprepare_claim(&self, claim: &ClaimRef) -> Result<(), PrepareError> {
        self.node.unprepare(claim)
    }
}

impl Node {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node-wide lock ([`serialize`]), then the state with the checkpoint read again:
    /// what the driver's other instance wrote since counts. Blocking.
    #[allow(clippy::result_large_err)] // as `prepare_allocation`
    fn serialized(&self) -> Result<(Serialized, std::sync::MutexGuard<'_, State>), PrepareError> {
        let serial = serialize::lock(&self.options.plugin_dir)?;
        let mut state = self.lock();
        state.checkpoint.reload()?;
        Ok((serial, state))
    }

    /// The devices of `claim` if the checkpoint has it `PrepareCompleted` (the kubelet's
    /// calls again after its restarts and on retries): answered without the API server.
    #[allow(clippy::result_large_err)] // as `prepare_allocation`
    fn completed(&self, claim: &ClaimRef) -> Result<Option<Vec<PreparedDevice>>, PrepareError> {
        let (_serial, state) = self.serialized()?;
        Ok(state
            .checkpoint
            .get(&claim.uid)
            .filter(|e| e.state == ClaimState::PrepareCompleted)
            .map(|e| e.devices.clone()))
    }

    /// [`NodeDriver::prepare_allocation`]: the steps of the module docs, in their order.
    #[allow(clippy::result_large_err)] // as `prepare_allocation`
    fn prepare(
        &self,
        claim: &ClaimRef,
        allocation: &ClaimAllocation,
    ) -> Result<Vec<PreparedDevice>, PrepareError> {
        valid_uid(claim)?;
        // One lock from the first look at the checkpoint to its last write, across this
        // process's calls and the other instance's: for concurrent prepares, the busy check
        // and the entry that holds the devices are one step.
        let (_serial, mut guard) = self.serialized()?;
        let state = &mut *guard;
        if let Some(devices) = earlier_preparation(&mut state.checkpoint, claim)? {
            return Ok(devices);
        }
        if allocation.devices.is_empty() {
            return Err(PrepareError::NothingAllocated {
                claim: claim.clone(),
                driver: self.driver.clone(),
            });
        }
        let configs = parse_configs(claim, allocation)?;
        let planned = plan_devices(&state.inventory, claim, allocation, &configs)?;
        let held = held_devices(&planned);
        check_busy(&state.checkpoint, &state.inventory, claim, &held)?;
        let mut devices = device_edits(&state.inventory, claim, &planned);
        add_sharing(
            &state.inventory,
            claim,
            &planned,
            &mut devices,
            &self.options,
        )?;
        let spec = cdi::claim_spec(&claim.uid, &state.inventory.common_edits, &devices);
        let prepared = prepared_devices(&state.inventory.pool, claim, &planned);
        self.record(&mut state.checkpoint, claim, held, &spec, prepared)
    }

    /// Records the preparation: checkpoint `PrepareStarted`, the claim's spec written,
    /// `PrepareCompleted` with the devices; a spec that cannot be written is removed with
    /// the entry.
    #[allow(clippy::result_large_err)] // as `prepare_allocation`
    fn record(
        &self,
        checkpoint: &mut Checkpoint,
        claim: &ClaimRef,
        held: Vec<(String, bool)>,
        spec: &Spec,
        prepared: Vec<PreparedDevice>,
    ) -> Result<Vec<PreparedDevice>, PrepareError> {
        let spec_file = cdi::spec_path(&self.options.cdi_dir, &claim.uid);
        let mut entry = ClaimEntry {
            claim: claim.clone(),
            state: ClaimState::PrepareStarted,
            devices: Vec::new(),
            held,
            spec_file: spec_file.clone(),
        };
        checkpoint.put(entry.clone())?;
        if let Err(source) = cdi::write(&self.options.cdi_dir, &claim.uid, spec) {
            let _ = cdi::remove(&spec_file);
            let _ = checkpoint.remove(&claim.uid);
            return Err(PrepareError::Spec {
                claim: claim.clone(),
                source,
            });
        }
        entry.state = ClaimState::PrepareCompleted;
        entry.devices = prepared.clone();
        checkpoint.put(entry)?;
        Ok(prepared)
    }

    /// [`NodeDriver::unprepare_claim`].
    #[allow(clippy::result_large_err)] // as `prepare_allocation`
    fn unprepare(&self, claim: &ClaimRef) -> Result<(), PrepareError> {
        valid_uid(claim)?;
        // The other instance may have prepared the claim: its entry counts.
        let (_serial, mut state) = self.serialized()?;
        let Some(entry) = state.checkpoint.get(&claim.uid) else {
            return Ok(());
        };
        let spec = entry.spec_file.clone();
        cdi::remove_claim_spec(&spec, &claim.uid).map_err(|source| PrepareError::Spec {
            claim: claim.clone(),
            source,
        })?;
        Ok(state.checkpoint.remove(&claim.uid)?)
    }
}

/// Whether the claim UID may name a spec file and a checkpoint entry: a UUID.
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn valid_uid(claim: &ClaimRef) -> Result<(), PrepareError> {
    cdi::check_uid(&claim.uid).map_err(|source| PrepareError::InvalidUid {
        claim: claim.clone(),
        source,
    })
}

/// What an earlier preparation of the claim left: a completed one's devices (the kubelet
/// calls again), or `None` once an unfinished one (an earlier error) is rolled back.
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn earlier_preparation(
    checkpoint: &mut Checkpoint,
    claim: &ClaimRef,
) -> Result<Option<Vec<PreparedDevice>>, PrepareError> {
    let Some(e) = checkpoint.get(&claim.uid) else {
        return Ok(None);
    };
    if e.state == ClaimState::PrepareCompleted {
        return Ok(Some(e.devices.clone()));
    }
    // Started and not completed, seen under the lock every preparation holds to its end: an
    // earlier error, here or in the other instance. Start over.
    let spec = e.spec_file.clone();
    cdi::remove_claim_spec(&spec, &claim.uid).map_err(PrepareError::StaleSpec)?;
    checkpoint.remove(&claim.uid)?;
    Ok(None)
}

/// The allocation's opaque configs, each parsed and validated, in their order.
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn parse_configs(
    claim: &ClaimRef,
    allocation: &ClaimAllocation,
) -> Result<Vec<Parsed>, PrepareError> {
    allocation
        .configs
        .iter()
        .enumerate()
        .map(|(index, c)| {
            sharing::parse(&c.parameters, "opaque.parameters")
                .map(|config| Parsed {
                    source: c.source,
                    requests: c.requests.clone(),
                    config,
                })
                .map_err(|source| PrepareError::InvalidConfig {
                    claim: claim.clone(),
                    index,
                    origin: c.source,
                    source,
                })
        })
        .collect()
}

/// One device of the claim: the requests it was allocated for and the config it gets.
struct Planned {
    device: String,
    requests: Vec<String>,
    share_id: Option<String>,
    admin: bool,
    config: GpuConfig,
    /// The memory its allocations consumed of a device shared by memory (bytes).
    memory_share: Option<u64>,
}

/// The allocation's devices, each this node's and healthy, with the config it gets; one
/// entry per device (a device allocated for two requests keeps both).
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn plan_devices(
    inventory: &Inventory,
    claim: &ClaimRef,
    allocation: &ClaimAllocation,
    configs: &[Parsed],
) -> Result<Vec<Planned>, PrepareError> {
    let mut planned: Vec<Planned> = Vec::new();
    for a in &allocation.devices {
        let d = allocated_device(inventory, claim, a)?;
        let config = resolve_config(claim, a, d, configs)?;
        // Only a device published with memory shares has its memory consumed.
        let share = d
            .memory_step
            .and_then(|_| a.consumed_capacity.get("memory").copied());
        match planned.iter_mut().find(|p| p.device == a.device) {
            Some(p) => {
                p.requests.push(a.request.clone());
                p.admin &= a.admin_access;
                if let Some(bytes) = share {
                    p.memory_share = Some(p.memory_share.unwrap_or(0).saturating_add(bytes));
                }
            }
            None => planned.push(Planned {
                device: a.device.clone(),
                requests: vec![a.request.clone()],
                share_id: a.share_id.clone(),
                admin: a.admin_access,
                config,
                memory_share: share,
            }),
        }
    }
    Ok(planned)
}

/// The inventory's device allocated as `a`: refused when it is another node's, not one of
/// this node's devices, or unhealthy.
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn allocated_device<'i>(
    inventory: &'i Inventory,
    claim: &ClaimRef,
    a: &AllocatedDevice,
) -> Result<&'i InventoryDevice, PrepareError> {
    if a.pool != inventory.pool {
        return Err(PrepareError::OtherNode {
            claim: claim.clone(),
            pool: a.pool.clone(),
            device: a.device.clone(),
            node_pool: inventory.pool.clone(),
        });
    }
    let Some(d) = inventory.get(&a.device) else {
        return Err(PrepareError::UnknownDevice {
            claim: claim.clone(),
            device: a.device.clone(),
        });
    };
    if d.health == Health::Unhealthy {
        return Err(PrepareError::Unhealthy {
            claim: claim.clone(),
            device: a.device.clone(),
            why: d.health_message.clone(),
        });
    }
    Ok(d)
}

/// The config device `d` gets for its request: the claim's under the DeviceClass's ceiling;
/// a sharing config that names the request of a DLA core or PVA is refused.
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn resolve_config(
    claim: &ClaimRef,
    a: &AllocatedDevice,
    d: &InventoryDevice,
    configs: &[Parsed],
) -> Result<GpuConfig, PrepareError> {
    let is_gpu = matches!(d.kind, DeviceType::Gpu | DeviceType::Mig);
    let class = applying(configs, ConfigSource::Class, &a.request, is_gpu);
    let from_claim = applying(configs, ConfigSource::Claim, &a.request, is_gpu);
    for (named, c) in class.iter().chain(&from_claim) {
        if *named && c.sharing.is_some() && !is_gpu {
            return Err(PrepareError::SharingOnEngine {
                claim: claim.clone(),
                request: a.request.clone(),
                device: d.name.clone(),
                kind: d.kind.as_str(),
            });
        }
    }
    // The DeviceClass's config is the admin's ceiling for the claim's.
    let config =
        sharing::resolve(class.map(|(_, c)| c), from_claim.map(|(_, c)| c)).map_err(|source| {
            PrepareError::ClassCeiling {
                claim: claim.clone(),
                request: a.request.clone(),
                source,
            }
        })?;
    let mig = match d.kind {
        DeviceType::Mig => Some("MIG device"),
        _ if !d.includes.is_empty() => Some("GPU in MIG mode"),
        _ => None,
    };
    if let (Some(what), Some(Strategy::Mps)) = (mig, config.sharing.map(|s| s.strategy)) {
        return Err(PrepareError::MpsOnMig {
            claim: claim.clone(),
            request: a.request.clone(),
            device: d.name.clone(),
            what,
        });
    }
    Ok(config)
}

/// The devices the claim holds, with whether exclusively: all but `adminAccess` ones,
/// exclusively unless the allocation has a `shareID` or the config shares the device.
fn held_devices(planned: &[Planned]) -> Vec<(String, bool)> {
    planned
        .iter()
        .filter(|p| !p.admin)
        .map(|p| {
            let exclusive = p.share_id.is_none() && !p.config.shared();
            (p.device.clone(), exclusive)
        })
        .collect()
}

/// Refuses a device another prepared claim holds exclusively, or holds shared while this
/// claim wants it exclusively; and a MIG GPU whole while another claim holds one of its MIG
/// devices, or the other way round, however either is shared (the scheduler's counters
/// should never allow it; the driver does not rely on them).
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn check_busy(
    checkpoint: &Checkpoint,
    inventory: &Inventory,
    claim: &ClaimRef,
    held: &[(String, bool)],
) -> Result<(), PrepareError> {
    for (device, exclusive) in held {
        for other in checkpoint.entries() {
            if other.claim.uid == claim.uid {
                continue;
            }
            if let Some((part, _)) = other
                .held
                .iter()
                .find(|(d, _)| inventory.whole_and_part(device, d))
            {
                return Err(PrepareError::PartBusy {
                    claim: claim.clone(),
                    device: device.clone(),
                    held: part.clone(),
                    holder: other.claim.clone(),
                });
            }
            if let Some((_, other_exclusive)) = other.held.iter().find(|(d, _)| d == device) {
                if *exclusive || *other_exclusive {
                    return Err(PrepareError::Busy {
                        claim: claim.clone(),
                        device: device.clone(),
                        holder: other.claim.clone(),
                        held_exclusively: *other_exclusive,
                    });
                }
            }
        }
    }
    Ok(())
}

/// What each device gets before sharing: its edits and env, an engine variable listing every
/// engine of its kind in the claim (`EDGEGPU_DLA_CORES=0,1`), and the claim's UID.
fn device_edits(inventory: &Inventory, claim: &ClaimRef, planned: &[Planned]) -> Vec<ClaimDevice> {
    let mut lists: Vec<(String, Vec<String>)> = Vec::new();
    for p in planned {
        if let Some(d) = inventory.get(&p.device) {
            for (k, v) in &d.env {
                match lists.iter_mut().find(|(key, _)| key == k) {
                    Some((_, values)) => values.push(v.clone()),
                    None => lists.push((k.clone(), vec![v.clone()])),
                }
            }
        }
    }
    planned
        .iter()
        .map(|p| {
            let d = inventory.get(&p.device).expect("checked by plan_devices");
            let mut env: Vec<String> = d
                .env
                .iter()
                .map(|(k, v)| match lists.iter().find(|(key, _)| key == k) {
                    Some((_, values)) => format!("{k}={}", values.join(",")),
                    None => format!("{k}={v}"),
                })
                .collect();
            env.push(format!("EDGEGPU_DRA_CLAIM={}", claim.uid));
            ClaimDevice {
                device: p.device.clone(),
                edits: d.edits.clone(),
                env,
                mounts: Vec::new(),
            }
        })
        .collect()
}

/// How a planned device reaches its limits, and its memory limit (whole MiB): an MPS config
/// joins MPS (its pinned-memory limit, lowered to the device's memory share); a memory share
/// without one joins MPS where the node enforces shares with it (`limits`), and is told to
/// the container otherwise, as under TimeSlicing; anything else adds nothing (`None`).
fn client_of(p: &Planned, limits: &ShareLimits) -> Option<(Client, Option<u64>)> {
    let share_mib = p.memory_share.map(edgegpu_node::mps::plan::whole_mib);
    let sharing = p.config.sharing;
    match (sharing.map(|s| s.strategy), share_mib) {
        (Some(Strategy::Mps), _) => {
            let settings = sharing.and_then(|s| s.mps).unwrap_or_default();
            let pinned = settings
                .pinned_memory_limit
                .map(edgegpu_node::mps::plan::whole_mib);
            let mib = match (pinned, share_mib) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let client = Client::Mps {
                active_thread_percentage: settings.active_thread_percentage,
            };
            Some((client, mib))
        }
        (Some(Strategy::TimeSlicing), Some(mib)) => Some((
            Client::Accounted {
                why: "sharing.strategy TimeSlicing: the scheduler counts the memory share, \
                      nothing enforces it"
                    .into(),
            },
            Some(mib),
        )),
        (None, Some(mib)) => Some((
            match limits {
                ShareLimits::Mps => Client::Mps {
                    active_thread_percentage: None,
                },
                ShareLimits::Accounted { why } => Client::Accounted { why: why.clone() },
            },
            Some(mib),
        )),
        (_, None) => None,
    }
}

/// Adds each group's env and mounts (the claim's devices that reach their limits the same
/// way, [`client_of`]; one variable lists every device's limit) to its devices; joining MPS
/// without the node's daemon is refused.
#[allow(clippy::result_large_err)] // as `prepare_allocation`
fn add_sharing(
    inventory: &Inventory,
    claim: &ClaimRef,
    planned: &[Planned],
    devices: &mut [ClaimDevice],
    options: &NodeOptions,
) -> Result<(), PrepareError> {
    // Each way of reaching limits, with its devices: (index in `planned`, limit in MiB).
    type Members = Vec<(usize, Option<u64>)>;
    let mut groups: Vec<(Client, Members)> = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        if let Some((client, mib)) = client_of(p, &options.share_limits) {
            match groups.iter_mut().find(|(c, _)| *c == client) {
                Some((_, members)) => members.push((i, mib)),
                None => groups.push((client, vec![(i, mib)])),
            }
        }
    }
    for (client, members) in &groups {
        let limits = members
            .iter()
            .map(|&(i, mib)| ClientLimit {
                device: inventory
                    .get(&planned[i].device)
                    .map_or(String::new(), |d| d.cuda_id.clone()),
                mib,
            })
            .collect();
        let (env, mounts) =
            sharing::client_edits(client, limits, &options.mps).map_err(|source| {
                PrepareError::NoMpsDaemon {
                    claim: claim.clone(),
                    source,
                }
            })?;
        for &(i, _) in members {
            devices[i].env.extend(env.iter().cloned());
            devices[i].mounts.extend(mounts.iter().cloned());
        }
    }
    Ok(())
}

/// What the kubelet gets back for each planned device.
fn prepared_devices(pool: &str, claim: &ClaimRef, planned: &[Planned]) -> Vec<PreparedDevice> {
    planned
        .iter()
        .map(|p| PreparedDevice {
            requests: p.requests.clone(),
            pool: pool.to_string(),
            device: p.device.clone(),
            cdi_device_ids: vec![cdi::qualified(&claim.uid, &p.device)],
            share_id: p.share_id.clone(),
        })
        .collect()
}

/// Runs `work` (the files it writes: the spec, the checkpoint) on a blocking thread, off the
/// runtime the kubelet side's calls run on; where panics unwind, a panic in it is an error for
/// `claim` (release builds abort instead: the workspace's `panic = "abort"`).
#[allow(clippy::result_large_err)] // as `prepare_allocation`
async fn off_runtime<T: Send + 'static>(
    claim: &ClaimRef,
    work: impl FnOnce() -> Result<T, PrepareError> + Send + 'static,
) -> Result<T, PrepareError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|source| {
            Err(PrepareError::Stopped {
                claim: claim.clone(),
                source,
            })
        })
}

#[allow(clippy::result_large_err)] // the closures given to `off_runtime`
#[tonic::async_trait]
impl kubelet::Driver for NodeDriver {
    async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, DriverError> {
        // The checkpoint as it is on disk, under the node-wide lock: the other instance may
        // have prepared or unprepared the claim. Off the runtime (a file read, maybe a wait).
        let (node, owned) = (self.node.clone(), claim.clone());
        if let Some(devices) = off_runtime(claim, move || node.completed(&owned)).await? {
            return Ok(devices);
        }
        let api = self.api.as_ref().ok_or(PrepareError::NoApiServer)?;
        let allocation = claims::fetch(api, claim, &self.node.driver)
            .await
            .map_err(|source| PrepareError::Fetch {
                claim: claim.clone(),
                source,
            })?;
        let (node, owned) = (self.node.clone(), claim.clone());
        Ok(off_runtime(claim, move || node.prepare(&owned, &allocation)).await?)
    }

    async fn unprepare(&self, claim: &ClaimRef) -> Result<(), DriverError> {
        let (node, owned) = (self.node.clone(), claim.clone());
        Ok(off_runtime(claim, move || node.unprepare(&owned)).await?)
    }

    fn health(&self) -> watch::Receiver<Vec<DeviceHealth>> {
        self.health.subscribe()
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // the closures given to `off_runtime`
mod tests {
    use super::*;

    fn claim() -> ClaimRef {
        ClaimRef {
            namespace: "default".into(),
            name: "c".into(),
            uid: "c0ffee00-0000-0000-0000-000000000001".into(),
        }
    }

    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn the_work_runs_off_the_runtime_thread() {
        // `block_on` of a current-thread runtime runs its tasks on this thread.
        let runtime_thread = std::thread::current().id();
        let worker = current_thread()
            .block_on(off_runtime(&claim(), || Ok(std::thread::current().id())))
            .unwrap();
        assert_ne!(worker, runtime_thread);
    }

    #[test]
    fn a_panic_in_the_work_is_an_error_for_the_claim() {
        let e = current_thread()
            .block_on(off_runtime(&claim(), || -> Result<(), PrepareError> {
                panic!("the work panicked")
            }))
            .unwrap_err();
        assert!(
            matches!(&e, PrepareError::Stopped { claim: c, source } if *c == claim() && source.is_panic()),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("claim default/c (c0ffee00-0000-0000-0000-000000000001): "),
            "{e}"
        );
    }
}
