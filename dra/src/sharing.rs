//! The opaque configuration claims and DeviceClasses carry for this driver
//! (`opaque.driver: edgegpu.io`), versioned like a Kubernetes object:
//!
//! ```yaml
//! apiVersion: edgegpu.io/v1alpha1
//! kind: GpuConfig
//! sharing:
//!   strategy: MPS            # or TimeSlicing
//!   mps:
//!     activeThreadPercentage: 50
//!     pinnedMemoryLimit: 4Gi
//! ```
//!
//! The shape follows NVIDIA's DRA driver's `GpuConfig.sharing` (`api/nvidia.com/resource/
//! v1beta1/sharing.go`: `strategy: TimeSlicing | MPS`, `mpsConfig.defaultActiveThreadPercentage`,
//! `defaultPinnedDeviceMemoryLimit`), with shorter names and without a per-device map.
//! Parsing is strict: an unknown field, a wrong `apiVersion` or `kind`, a wrong type or a
//! value out of range is an error naming the field's path.
//!
//! What each setting does for a container, and where it is enforced:
//! - `TimeSlicing` (also the default without config): nothing is added; the GPU's own
//!   time-slicing shares it between the claims that hold it. It lets a device be prepared
//!   for several claims at once.
//! - `MPS`: the container joins the node's MPS control daemon, which this driver asks the MPS
//!   companion (`edgegpu-device-plugin mps-control-daemon`) for with `--mps`
//!   ([`crate::mps_daemon`]): `CUDA_MPS_PIPE_DIRECTORY` and bind mounts of the pipe
//!   directory and of the daemon's shm directory as `/dev/shm` (the plugin's
//!   [`ClientSetup`], the same the device plugin's Allocate gives). The claim fails to
//!   prepare, with the daemon's state and what to do, until the companion reports the daemon
//!   ready ([`MpsHost::ready`]).
//!   `activeThreadPercentage` becomes `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and
//!   `pinnedMemoryLimit` `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<device>=<MiB>M` (whole MiB,
//!   rounded down). These are client-side settings read by the CUDA runtime when the client
//!   connects: they can only lower what the daemon's `set_default_*` allow, never raise it
//!   (CUDA MPS documentation, "Client-side limits"); the daemon asked for has no defaults,
//!   so each claim's own are its limits. A device shared through MPS may be prepared for
//!   several claims.
//!
//! A DeviceClass's config is the cluster admin's limit for the devices of the class: a claim's
//! config may only tighten it ([`resolve`], [`GpuConfig::within`]).
//!
//! A memory share (a GPU published with `--memory-shares`, what the allocation consumed of its
//! `memory`) reaches the container through [`client_edits`]: as its MPS limit where the node
//! enforces shares with MPS ([`ShareLimits::Mps`]), else told to it and marked not enforced,
//! as the device plugin's memory units are ([`ShareLimits::Accounted`]).

use std::path::{Path, PathBuf};

use edgegpu_host::cdi::spec::Mount;
pub use edgegpu_node::mps::plan::ClientLimit;
use edgegpu_node::mps::plan::ClientSetup;
use edgegpu_node::mps::status::{self, ReadError, State};
use edgegpu_node::mps::MpsPaths;
use edgegpu_node::quantity::QuantityError;
use serde_json::{Map, Value};

/// The `apiVersion` of this driver's configuration objects.
pub const API_VERSION: &str = "edgegpu.io/v1alpha1";
/// The kind of a GPU's (or MIG device's) configuration.
pub const GPU_CONFIG: &str = "GpuConfig";

/// Why an opaque `GpuConfig` is refused by [`parse`]: each names the field's path (e.g.
/// `opaque.parameters.sharing.strategy`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: must be an object")]
    NotAnObject { path: String },
    #[error("{path}.{field}: unknown field (known: {})", .known.join(", "))]
    UnknownField {
        path: String,
        field: String,
        known: &'static [&'static str],
    },
    #[error("{path}.{field}: must be a string")]
    NotAString { path: String, field: &'static str },
    #[error("{path}.apiVersion: missing ({API_VERSION})")]
    MissingApiVersion { path: String },
    #[error("{path}.apiVersion: {found:?} is not supported (only {API_VERSION})")]
    ApiVersion { path: String, found: String },
    #[error("{path}.kind: missing ({GPU_CONFIG})")]
    MissingKind { path: String },
    #[error("{path}.kind: {found:?} is not a kind of {API_VERSION} (only {GPU_CONFIG})")]
    Kind { path: String, found: String },
    #[error("{path}.strategy: missing (TimeSlicing or MPS)")]
    MissingStrategy { path: String },
    #[error("{path}.strategy: {found:?} is not a strategy (TimeSlicing, MPS)")]
    Strategy { path: String, found: String },
    /// `mps` settings under a strategy other than MPS.
    #[error("{path}.mps: only with strategy MPS")]
    MpsWithoutMps { path: String },
    #[error("{path}.activeThreadPercentage: must be an integer from 1 to 100, not {found}")]
    ActiveThreadPercentage { path: String, found: Value },
    #[error("{path}.pinnedMemoryLimit: must be a quantity")]
    PinnedMemoryLimitType { path: String },
    #[error("{path}.pinnedMemoryLimit: {source}")]
    PinnedMemoryLimit {
        path: String,
        #[source]
        source: QuantityError,
    },
    /// A quantity (text) below the MPS limits' unit.
    #[error("{path}.pinnedMemoryLimit: {found:?} is less than 1Mi (MPS limits are in MiB)")]
    PinnedMemoryLimitBelowMib { path: String, found: String },
    /// A plain number that is not a whole number of bytes of at least 1 MiB.
    #[error("{path}.pinnedMemoryLimit: {found} is not a number of bytes of at least 1Mi")]
    PinnedMemoryLimitBytes {
        path: String,
        found: serde_json::Number,
    },
}

/// Why a claim's config is refused under its DeviceClass's, the cluster admin's ceiling
/// ([`GpuConfig::within`]): what the claim asked and what the class allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassCeilingError {
    #[error("the claim's sharing.strategy {} is not allowed: the DeviceClass's config sets no sharing (the device is held exclusively)", .claim.as_str())]
    SharingNotAllowed { claim: Strategy },
    #[error("the claim's config has no sharing, which would drop the DeviceClass's sharing.strategy {}", .class.as_str())]
    SharingDropped { class: Strategy },
    #[error("the claim's sharing.strategy {} differs from the DeviceClass's {}", .claim.as_str(), .class.as_str())]
    OtherStrategy { claim: Strategy, class: Strategy },
    /// An MPS limit above the class's; the values as written in a config (`8Gi`, `51`).
    #[error("the claim's sharing.mps.{field} {claim} exceeds the DeviceClass's {class}")]
    AboveLimit {
        field: &'static str,
        claim: String,
        class: String,
    },
}

/// Why a client cannot join the node's MPS control daemon now ([`MpsHost::ready`]): each
/// names the file it read and says what to do. The kubelet retries a preparation that
/// failed, so a claim refused while the daemon starts is prepared once it is ready.
#[derive(Debug, thiserror::Error)]
pub enum NoMpsDaemon {
    /// The companion is asked for no daemon of this resource: MPS is off for this driver
    /// (`--mps`), the platform cannot run it, or the driver does not hold the node's GPUs.
    #[error("no MPS control daemon is asked for on this node: {desired} does not list {resource} (the DRA driver asks for one with --mps, Helm value mps.enabled, where the platform runs MPS; its log says why it did not)")]
    NotAsked { resource: String, desired: PathBuf },
    /// The daemon was asked for but nothing reported on it: no companion runs on the node.
    #[error("the MPS control daemon for {resource} has reported no state ({status} does not exist): is the MPS companion (edgegpu-device-plugin mps-control-daemon) running on this node? With the Helm chart it runs where mps.enabled is set")]
    NoStatus { resource: String, status: PathBuf },
    /// The companion's state for the daemon is not `ready`; `reason` is the companion's.
    #[error("the MPS control daemon for {resource} is not ready: its state is {state}{} ({status}); {}", .reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default(), what_to_do(*.state))]
    NotReady {
        resource: String,
        state: State,
        reason: Option<String>,
        status: PathBuf,
    },
    /// Ready, but with settings other than the ones asked for: an earlier daemon (the device
    /// plugin's, with its limits) still serves clients.
    #[error("the MPS control daemon for {resource} is not ready: it still runs other settings than {desired} asks for (an earlier daemon that still has clients); the companion replaces it once they are gone, and the kubelet retries the preparation")]
    OtherSettings { resource: String, desired: PathBuf },
    /// Ready, but the pipe directory the claim would mount is not there.
    #[error("the MPS control daemon for {resource} reports ready but its pipe directory {pipe} does not exist")]
    NoPipe { resource: String, pipe: PathBuf },
    /// `daemons.json` or `status.json` cannot be read (the error names the file).
    #[error("the MPS control daemon's files: {0}")]
    Unreadable(#[source] ReadError),
}

/// What to do about a daemon in `state`, for [`NoMpsDaemon::NotReady`].
fn what_to_do(state: State) -> &'static str {
    match state {
        State::Starting | State::Ready => {
            "the kubelet retries the preparation, which succeeds once the daemon is ready"
        }
        State::Failed => {
            "the MPS companion restarts it (its log says why it failed), and the kubelet retries the preparation"
        }
        State::Refused => {
            "MPS cannot run on this host as it is: fix the cause and restart the MPS companion"
        }
    }
}

/// How a device is shared between claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    TimeSlicing,
    Mps,
}

/// MPS client settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MpsSettings {
    /// 1–100.
    pub active_thread_percentage: Option<u32>,
    /// Bytes (at least 1 MiB).
    pub pinned_memory_limit: Option<u64>,
}

/// `sharing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharing {
    pub strategy: Strategy,
    pub mps: Option<MpsSettings>,
}

/// A `GpuConfig`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuConfig {
    pub sharing: Option<Sharing>,
}

impl GpuConfig {
    /// Whether the device may be prepared for other claims too.
    pub fn shared(&self) -> bool {
        self.sharing.is_some()
    }

    /// This config (a claim's) held to `class`'s (a DeviceClass's, for the same device) as a
    /// ceiling: the claim may only tighten what the class sets. The strategy must be the
    /// class's (no switch between MPS and TimeSlicing, no dropping the class's sharing, no
    /// sharing where the class's config has none); each MPS limit the class sets is a maximum:
    /// the claim's value is used when at or below it, refused above it, and the class's value
    /// applies when the claim leaves the limit out. A limit the class does not set is the
    /// claim's to set. The error says what the claim asked and what the class allows.
    pub fn within(self, class: GpuConfig) -> Result<GpuConfig, ClassCeilingError> {
        let sharing = match (class.sharing, self.sharing) {
            (None, None) => None,
            (None, Some(c)) => {
                return Err(ClassCeilingError::SharingNotAllowed { claim: c.strategy })
            }
            (Some(k), None) => return Err(ClassCeilingError::SharingDropped { class: k.strategy }),
            (Some(k), Some(c)) if k.strategy != c.strategy => {
                return Err(ClassCeilingError::OtherStrategy {
                    claim: c.strategy,
                    class: k.strategy,
                })
            }
            (Some(k), Some(c)) => Some(Sharing {
                strategy: k.strategy,
                mps: match (k.mps, c.mps) {
                    (Some(k), Some(c)) => Some(c.within(k)?),
                    (k, c) => c.or(k),
                },
            }),
        };
        Ok(GpuConfig { sharing })
    }
}

impl MpsSettings {
    /// [`GpuConfig::within`] for the MPS limits.
    fn within(self, class: MpsSettings) -> Result<MpsSettings, ClassCeilingError> {
        Ok(MpsSettings {
            active_thread_percentage: at_most(
                "activeThreadPercentage",
                self.active_thread_percentage,
                class.active_thread_percentage,
                |p| p.to_string(),
            )?,
            pinned_memory_limit: at_most(
                "pinnedMemoryLimit",
                self.pinned_memory_limit,
                class.pinned_memory_limit,
                format_quantity,
            )?,
        })
    }
}

/// A claim's limit under the class's maximum (see [`GpuConfig::within`]).
fn at_most<T: Ord + Copy>(
    field: &'static str,
    claim: Option<T>,
    class: Option<T>,
    show: impl Fn(T) -> String,
) -> Result<Option<T>, ClassCeilingError> {
    match (claim, class) {
        (Some(c), Some(k)) if c > k => Err(ClassCeilingError::AboveLimit {
            field,
            claim: show(c),
            class: show(k),
        }),
        (c, k) => Ok(c.or(k)),
    }
}

/// The config that applies to a device, from the DeviceClass config and the claim config
/// that apply to it (each the last of its source that names the device's request or no
/// request): a class config is a ceiling the claim's can only tighten
/// ([`GpuConfig::within`]); without a class config the claim's applies, without a claim
/// config the class's, without either none (an exclusive device). Kubernetes' generic rule
/// for opaque configs (the claim's, later, wins) would make the cluster admin's limits advice.
pub fn resolve(
    class: Option<GpuConfig>,
    claim: Option<GpuConfig>,
) -> Result<GpuConfig, ClassCeilingError> {
    match (class, claim) {
        (Some(k), Some(c)) => c.within(k),
        (k, c) => Ok(c.or(k).unwrap_or_default()),
    }
}

impl Strategy {
    /// As written in a config.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::TimeSlicing => "TimeSlicing",
            Strategy::Mps => "MPS",
        }
    }
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ConfigError> {
    v.as_object().ok_or_else(|| ConfigError::NotAnObject {
        path: path.to_string(),
    })
}

fn only_fields(
    m: &Map<String, Value>,
    path: &str,
    known: &'static [&'static str],
) -> Result<(), ConfigError> {
    match m.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ConfigError::UnknownField {
            path: path.to_string(),
            field: k.clone(),
            known,
        }),
        None => Ok(()),
    }
}

fn string<'a>(
    m: &'a Map<String, Value>,
    path: &str,
    field: &'static str,
) -> Result<Option<&'a str>, ConfigError> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ConfigError::NotAString {
            path: path.to_string(),
            field,
        }),
    }
}

/// Parses and validates `parameters` (the `opaque.parameters` object). `path` names it in
/// errors (e.g. `config[0].opaque.parameters`).
pub fn parse(parameters: &Value, path: &str) -> Result<GpuConfig, ConfigError> {
    let m = object(parameters, path)?;
    let path_string = || path.to_string();
    match string(m, path, "apiVersion")? {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(ConfigError::ApiVersion {
                path: path_string(),
                found: other.to_string(),
            })
        }
        None => {
            return Err(ConfigError::MissingApiVersion {
                path: path_string(),
            })
        }
    }
    match string(m, path, "kind")? {
        Some(GPU_CONFIG) => {}
        Some(other) => {
            return Err(ConfigError::Kind {
                path: path_string(),
                found: other.to_string(),
            })
        }
        None => {
            return Err(ConfigError::MissingKind {
                path: path_string(),
            })
        }
    }
    only_fields(m, path, &["apiVersion", "kind", "sharing"])?;
    let sharing = match m.get("sharing") {
        None | Some(Value::Null) => None,
        Some(s) => Some(parse_sharing(s, &format!("{path}.sharing"))?),
    };
    Ok(GpuConfig { sharing })
}

fn parse_sharing(v: &Value, path: &str) -> Result<Sharing, ConfigError> {
    let m = object(v, path)?;
    only_fields(m, path, &["strategy", "mps"])?;
    let path_string = || path.to_string();
    let strategy = match string(m, path, "strategy")? {
        Some("TimeSlicing") => Strategy::TimeSlicing,
        Some("MPS") => Strategy::Mps,
        Some(other) => {
            return Err(ConfigError::Strategy {
                path: path_string(),
                found: other.to_string(),
            })
        }
        None => {
            return Err(ConfigError::MissingStrategy {
                path: path_string(),
            })
        }
    };
    let mps = match m.get("mps") {
        None | Some(Value::Null) => None,
        Some(v) => {
            if strategy != Strategy::Mps {
                return Err(ConfigError::MpsWithoutMps {
                    path: path_string(),
                });
            }
            Some(parse_mps(v, &format!("{path}.mps"))?)
        }
    };
    Ok(Sharing { strategy, mps })
}

fn parse_mps(v: &Value, path: &str) -> Result<MpsSettings, ConfigError> {
    let m = object(v, path)?;
    only_fields(m, path, &["activeThreadPercentage", "pinnedMemoryLimit"])?;
    let path_string = || path.to_string();
    let active_thread_percentage = match m.get("activeThreadPercentage") {
        None | Some(Value::Null) => None,
        Some(n) => match n.as_u64() {
            Some(p @ 1..=100) => Some(p as u32),
            _ => {
                return Err(ConfigError::ActiveThreadPercentage {
                    path: path_string(),
                    found: n.clone(),
                })
            }
        },
    };
    let pinned_memory_limit = match m.get("pinnedMemoryLimit") {
        None | Some(Value::Null) => None,
        Some(Value::String(q)) => match edgegpu_node::quantity::parse_bytes(q) {
            Ok(b) if b >= MIB => Some(b),
            Ok(_) => {
                return Err(ConfigError::PinnedMemoryLimitBelowMib {
                    path: path_string(),
                    found: q.clone(),
                })
            }
            Err(source) => {
                return Err(ConfigError::PinnedMemoryLimit {
                    path: path_string(),
                    source,
                })
            }
        },
        Some(Value::Number(n)) => match n.as_u64() {
            Some(b) if b >= MIB => Some(b),
            _ => {
                return Err(ConfigError::PinnedMemoryLimitBytes {
                    path: path_string(),
                    found: n.clone(),
                })
            }
        },
        Some(_) => {
            return Err(ConfigError::PinnedMemoryLimitType {
                path: path_string(),
            })
        }
    };
    Ok(MpsSettings {
        active_thread_percentage,
        pinned_memory_limit,
    })
}

const MIB: u64 = 1024 * 1024;

/// `bytes` as a Kubernetes quantity: with the largest binary suffix (`Ki`…`Ei`) that divides
/// it, plain bytes otherwise (`4Gi`, `1536Mi`, `1000000000`).
pub fn format_quantity(bytes: u64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    for (suffix, shift) in SUFFIXES {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Where the node's MPS control daemon lives: `--mps-root` and the resource whose daemon
/// claims join (`nvidia.com/gpu`, the daemon this driver asks the companion for:
/// [`crate::mps_daemon`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsHost {
    pub mps_root: PathBuf,
    pub resource: String,
}

impl MpsHost {
    /// The daemon's pipe, log, shm and status paths.
    pub fn paths(&self) -> MpsPaths {
        MpsPaths::new(&self.mps_root, &self.resource)
    }

    /// Whether a client may join the node's MPS control daemon now, and where it is: the
    /// companion is asked for the daemon (`<root>/desired/daemons.json` lists the resource),
    /// its `<root>/<resource>/status.json` says `ready` with the settings asked for, and its
    /// pipe directory exists. Both files are read through the node library (no link followed,
    /// bounded). Every claim that joins MPS calls this before its spec is written. Blocking.
    pub fn ready(&self) -> Result<MpsPaths, NoMpsDaemon> {
        let desired = status::read_desired(&self.mps_root).map_err(NoMpsDaemon::Unreadable)?;
        let Some(wanted) =
            desired.and_then(|d| d.daemons.into_iter().find(|d| d.resource == self.resource))
        else {
            return Err(NoMpsDaemon::NotAsked {
                resource: self.resource.clone(),
                desired: status::desired_path(&self.mps_root),
            });
        };
        let paths = self.paths();
        let Some(now) = status::read(&paths.status).map_err(NoMpsDaemon::Unreadable)? else {
            return Err(NoMpsDaemon::NoStatus {
                resource: self.resource.clone(),
                status: paths.status,
            });
        };
        match now.state {
            State::Ready if now.settings == wanted => {}
            State::Ready => {
                return Err(NoMpsDaemon::OtherSettings {
                    resource: self.resource.clone(),
                    desired: status::desired_path(&self.mps_root),
                })
            }
            state => {
                return Err(NoMpsDaemon::NotReady {
                    resource: self.resource.clone(),
                    state,
                    reason: now.reason,
                    status: paths.status,
                })
            }
        }
        if !paths.pipe.is_dir() {
            return Err(NoMpsDaemon::NoPipe {
                resource: self.resource.clone(),
                pipe: paths.pipe,
            });
        }
        Ok(paths)
    }
}

/// The resource whose MPS daemon claims join: the name the device plugin gives the GPUs, so
/// the daemon's directory is the same whichever of the two serves the node.
pub const MPS_RESOURCE: &str = "nvidia.com/gpu";

impl Default for MpsHost {
    fn default() -> Self {
        MpsHost {
            mps_root: PathBuf::from("/run/edgegpu/mps"),
            resource: MPS_RESOURCE.into(),
        }
    }
}

/// How a memory share's limit reaches the containers of a claim without an MPS config
/// (`--memory-shares`): through the node's MPS daemon, or told to them only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareLimits {
    /// The containers join the node's MPS daemon with their share as their pinned-memory
    /// limit (the platform runs MPS and the driver asks the companion for a daemon).
    Mps,
    /// Nothing enforces the share here; `why` says so to the container
    /// (`EDGEGPU_GPU_MEMORY_LIMIT_NOTE`), as the device plugin's memory units do.
    Accounted { why: String },
}

impl Default for ShareLimits {
    fn default() -> Self {
        ShareLimits::Accounted {
            why: "MPS is not enabled for the DRA driver on this node (--mps)".into(),
        }
    }
}

/// How one group of a claim's devices reaches its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client {
    /// Joins the node's MPS daemon, with this compute share.
    Mps {
        active_thread_percentage: Option<u32>,
    },
    /// Told its limits, which nothing enforces, and why.
    Accounted { why: String },
}

/// What a group of devices with `limits` (one per device: how CUDA names it, its memory
/// limit) adds to a container as `client`: MPS's variables and mounts where it joins the
/// daemon, edgegpu's limit variables always (the device plugin's [`ClientSetup`]). Fails
/// when it would join MPS and the node's MPS daemon is not ready ([`MpsHost::ready`]).
/// Blocking (reads its status).
pub fn client_edits(
    client: &Client,
    limits: Vec<ClientLimit>,
    host: &MpsHost,
) -> Result<(Vec<String>, Vec<Mount>), NoMpsDaemon> {
    let setup = match client {
        Client::Mps {
            active_thread_percentage,
        } => {
            let paths = host.ready()?;
            ClientSetup {
                mps: Some(paths),
                not_enforced: None,
                limits,
                active_thread_percentage: *active_thread_percentage,
            }
        }
        Client::Accounted { why } => ClientSetup {
            mps: None,
            not_enforced: Some(why.clone()),
            limits,
            active_thread_percentage: None,
        },
    };
    let mut env: Vec<String> = setup
        .env()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    let mounts = setup
        .mounts()
        .into_iter()
        .map(|m| Mount {
            host_path: path_string(&m.host),
            container_path: path_string(&m.container),
            // NVIDIA's DRA driver's MPS client mounts (`sharing.go`).
            options: ["rw", "nosuid", "nodev", "bind"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        })
        .collect();
    Ok((env, mounts))
}

fn path_string(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(v: Value) -> Result<GpuConfig, ConfigError> {
        parse(&v, "parameters")
    }

    #[test]
    fn a_full_mps_config() {
        let c = p(json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"activeThreadPercentage": 50, "pinnedMemoryLimit": "4Gi"}}})).unwrap();
        assert_eq!(
            c.sharing,
            Some(Sharing {
                strategy: Strategy::Mps,
                mps: Some(MpsSettings {
                    active_thread_percentage: Some(50),
                    pinned_memory_limit: Some(4 << 30)
                })
            })
        );
        assert!(c.shared());
        let none = p(json!({"apiVersion": API_VERSION, "kind": "GpuConfig"})).unwrap();
        assert!(!none.shared());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!([]), "parameters: must be an object"),
            (
                json!({"kind": "GpuConfig"}),
                "parameters.apiVersion: missing",
            ),
            (
                json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}),
                "parameters.apiVersion: \"resource.nvidia.com/v1beta1\"",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "MigDeviceConfig"}),
                "parameters.kind: \"MigDeviceConfig\"",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "shareing": {}}),
                "parameters.shareing: unknown field",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "Mps"}}),
                "parameters.sharing.strategy: \"Mps\"",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {}}),
                "parameters.sharing.strategy: missing",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "mps": {}}}),
                "parameters.sharing.mps: only with strategy MPS",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"activeThreadPercentage": 0}}}),
                "parameters.sharing.mps.activeThreadPercentage: must be an integer from 1 to 100",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"activeThreadPercentage": 101}}}),
                "activeThreadPercentage",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"pinnedMemoryLimit": "4GB"}}}),
                "parameters.sharing.mps.pinnedMemoryLimit: \"4GB\" is not a quantity",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"pinnedMemoryLimit": "1Ki"}}}),
                "less than 1Mi",
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"limit": 1}}}),
                "parameters.sharing.mps.limit: unknown field",
            ),
        ];
        for (v, want) in cases {
            let e = p(v.clone()).unwrap_err().to_string();
            assert!(e.contains(want), "{v}: {e}");
        }
        // The path and the offending value travel with the error.
        let e = p(json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"pinnedMemoryLimit": "4GB"}}})).unwrap_err();
        assert_eq!(
            e,
            ConfigError::PinnedMemoryLimit {
                path: "parameters.sharing.mps".into(),
                source: edgegpu_node::quantity::QuantityError::Malformed("4GB".into()),
            }
        );
        assert!(std::error::Error::source(&e).is_some());
    }

    fn mps(percentage: Option<u32>, pinned: Option<u64>) -> GpuConfig {
        GpuConfig {
            sharing: Some(Sharing {
                strategy: Strategy::Mps,
                mps: Some(MpsSettings {
                    active_thread_percentage: percentage,
                    pinned_memory_limit: pinned,
                }),
            }),
        }
    }

    const TIME_SLICING: GpuConfig = GpuConfig {
        sharing: Some(Sharing {
            strategy: Strategy::TimeSlicing,
            mps: None,
        }),
    };
    const MPS_NO_LIMITS: GpuConfig = GpuConfig {
        sharing: Some(Sharing {
            strategy: Strategy::Mps,
            mps: None,
        }),
    };
    const EXCLUSIVE: GpuConfig = GpuConfig { sharing: None };

    #[test]
    fn without_a_class_config_the_claims_applies_and_without_a_claim_config_the_classs() {
        assert_eq!(resolve(None, None), Ok(EXCLUSIVE));
        let m = mps(Some(90), Some(8 << 30));
        assert_eq!(resolve(None, Some(m)), Ok(m));
        assert_eq!(resolve(None, Some(TIME_SLICING)), Ok(TIME_SLICING));
        assert_eq!(resolve(Some(m), None), Ok(m));
        assert_eq!(resolve(Some(EXCLUSIVE), None), Ok(EXCLUSIVE));
    }

    #[test]
    fn a_claim_keeps_the_classs_strategy() {
        let class = mps(Some(50), Some(4 << 30));
        let cases = [
            (
                class,
                TIME_SLICING,
                "the claim's sharing.strategy TimeSlicing differs from the DeviceClass's MPS",
            ),
            (
                TIME_SLICING,
                MPS_NO_LIMITS,
                "the claim's sharing.strategy MPS differs from the DeviceClass's TimeSlicing",
            ),
            (
                class,
                EXCLUSIVE,
                "the claim's config has no sharing, which would drop the DeviceClass's sharing.strategy MPS",
            ),
            (
                TIME_SLICING,
                EXCLUSIVE,
                "would drop the DeviceClass's sharing.strategy TimeSlicing",
            ),
            (
                EXCLUSIVE,
                TIME_SLICING,
                "the claim's sharing.strategy TimeSlicing is not allowed: the DeviceClass's config sets no sharing",
            ),
            (
                EXCLUSIVE,
                mps(Some(10), None),
                "the claim's sharing.strategy MPS is not allowed",
            ),
        ];
        for (class, claim, want) in cases {
            let e = resolve(Some(class), Some(claim)).unwrap_err().to_string();
            assert!(e.contains(want), "{class:?} / {claim:?}: {e}");
        }
        assert_eq!(
            resolve(Some(TIME_SLICING), Some(TIME_SLICING)),
            Ok(TIME_SLICING)
        );
        assert_eq!(resolve(Some(EXCLUSIVE), Some(EXCLUSIVE)), Ok(EXCLUSIVE));
    }

    #[test]
    fn the_classs_mps_limits_are_maxima() {
        let class = mps(Some(50), Some(4 << 30));
        // Above: refused, naming both values.
        let e = resolve(Some(class), Some(mps(Some(51), None))).unwrap_err();
        assert_eq!(
            e,
            ClassCeilingError::AboveLimit {
                field: "activeThreadPercentage",
                claim: "51".into(),
                class: "50".into(),
            }
        );
        assert_eq!(
            e.to_string(),
            "the claim's sharing.mps.activeThreadPercentage 51 exceeds the DeviceClass's 50"
        );
        assert_eq!(
            resolve(Some(class), Some(mps(Some(20), Some(8 << 30))))
                .unwrap_err()
                .to_string(),
            "the claim's sharing.mps.pinnedMemoryLimit 8Gi exceeds the DeviceClass's 4Gi"
        );
        // At or below: the claim's.
        assert_eq!(resolve(Some(class), Some(class)), Ok(class));
        assert_eq!(
            resolve(Some(class), Some(mps(Some(20), Some(1 << 30)))),
            Ok(mps(Some(20), Some(1 << 30)))
        );
        // Left out: the class's.
        assert_eq!(
            resolve(Some(class), Some(mps(Some(20), None))),
            Ok(mps(Some(20), Some(4 << 30)))
        );
        assert_eq!(resolve(Some(class), Some(MPS_NO_LIMITS)), Ok(class));
        // Not set by the class: the claim's to set.
        let only_memory = mps(None, Some(4 << 30));
        assert_eq!(
            resolve(Some(only_memory), Some(mps(Some(100), Some(2 << 30)))),
            Ok(mps(Some(100), Some(2 << 30)))
        );
        assert_eq!(
            resolve(Some(MPS_NO_LIMITS), Some(mps(Some(100), Some(64 << 30)))),
            Ok(mps(Some(100), Some(64 << 30)))
        );
        assert_eq!(
            resolve(Some(MPS_NO_LIMITS), Some(MPS_NO_LIMITS)),
            Ok(MPS_NO_LIMITS)
        );
    }

    #[test]
    fn quantities_are_shown_with_binary_suffixes() {
        assert_eq!(format_quantity(4 << 30), "4Gi");
        assert_eq!(format_quantity(1536 << 20), "1536Mi");
        assert_eq!(format_quantity(1 << 20), "1Mi");
        assert_eq!(format_quantity(1_000_000_000), "1000000000");
        assert_eq!(format_quantity(0), "0");
    }

    /// The one table every reader of a quantity passes (the plugin's config runs it too).
    #[test]
    fn pinned_memory_limits_read_as_the_plugin_reads_them() {
        for (text, bytes) in edgegpu_node::quantity::CASES {
            let config = json!({"apiVersion": API_VERSION, "kind": "GpuConfig",
                "sharing": {"strategy": "MPS", "mps": {"pinnedMemoryLimit": text}}});
            let read = parse(&config, "parameters").map(|c| {
                c.sharing
                    .and_then(|s| s.mps)
                    .and_then(|m| m.pinned_memory_limit)
            });
            match bytes {
                Some(b) if *b >= MIB => assert_eq!(read, Ok(Some(*b)), "{text:?}"),
                Some(_) => assert!(
                    read.unwrap_err().to_string().contains("less than 1Mi"),
                    "{text:?}"
                ),
                None => assert!(read.is_err(), "{text:?}: {read:?}"),
            }
        }
    }

    use edgegpu_node::mps::plan::DaemonSettings;
    use edgegpu_node::mps::status::{Desired, Status};

    /// The daemon the driver asks for (no limits, no GPU in EXCLUSIVE_PROCESS).
    fn daemon(resource: &str) -> DaemonSettings {
        DaemonSettings {
            resource: resource.into(),
            active_thread_percentage: None,
            pinned_memory_limits: vec![],
            exclusive_gpus: vec![],
        }
    }

    fn report(host: &MpsHost, state: State, reason: Option<&str>, settings: DaemonSettings) {
        status::write(
            &host.paths().status,
            &Status {
                state,
                reason: reason.map(str::to_string),
                pid: None,
                restarts: 0,
                settings,
            },
        )
        .unwrap();
    }

    fn host(dir: &Path) -> MpsHost {
        MpsHost {
            mps_root: dir.to_path_buf(),
            resource: "nvidia.com/gpu".into(),
        }
    }

    #[test]
    fn ready_only_with_the_daemon_asked_for_reported_ready() {
        let dir = tempfile::tempdir().unwrap();
        let host = host(dir.path());
        let desired_file = dir.path().join("desired/daemons.json");
        // Nothing asked for: MPS is off for the driver.
        let e = host.ready().unwrap_err();
        assert!(
            matches!(&e, NoMpsDaemon::NotAsked { desired, .. } if *desired == desired_file),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(&format!(
                "no MPS control daemon is asked for on this node: {} does not list nvidia.com/gpu (the DRA driver asks for one with --mps",
                desired_file.display()
            )),
            "{e}"
        );
        // Another resource's daemon is not this one.
        let other = Desired {
            daemons: vec![daemon("nvidia.com/gpu.shared")],
        };
        status::write_desired(dir.path(), &other).unwrap();
        assert!(matches!(host.ready(), Err(NoMpsDaemon::NotAsked { .. })));
        // Asked for, nothing reported: no companion.
        let ours = Desired {
            daemons: vec![daemon("nvidia.com/gpu")],
        };
        status::write_desired(dir.path(), &ours).unwrap();
        let e = host.ready().unwrap_err();
        assert!(
            matches!(&e, NoMpsDaemon::NoStatus { status, .. } if *status == host.paths().status),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("is the MPS companion (edgegpu-device-plugin mps-control-daemon) running on this node?"),
            "{e}"
        );
        // Each state but ready, with the companion's reason and what to do.
        for (state, reason, says) in [
            (State::Starting, None, "its state is starting ("),
            (
                State::Failed,
                Some("the daemon exited (status 3)"),
                "its state is failed: the daemon exited (status 3) (",
            ),
            (
                State::Refused,
                Some("the host has no nvidia-cuda-mps-control"),
                "its state is refused: the host has no nvidia-cuda-mps-control (",
            ),
        ] {
            report(&host, state, reason, daemon("nvidia.com/gpu"));
            let e = host.ready().unwrap_err();
            assert!(
                matches!(&e, NoMpsDaemon::NotReady { state: s, reason: r, .. }
                    if *s == state && r.as_deref() == reason),
                "{e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with("the MPS control daemon for nvidia.com/gpu is not ready: "),
                "{text}"
            );
            assert!(text.contains(says), "{text}");
            assert!(
                text.contains(&host.paths().status.display().to_string()),
                "{text}"
            );
            assert!(text.contains(what_to_do(state)), "{text}");
        }
        // Ready with the plugin's old limits: not the daemon asked for.
        let mut limited = daemon("nvidia.com/gpu");
        limited.active_thread_percentage = Some(25);
        report(&host, State::Ready, None, limited);
        let e = host.ready().unwrap_err();
        assert!(matches!(&e, NoMpsDaemon::OtherSettings { .. }), "{e:?}");
        assert!(
            e.to_string().contains("replaces it once they are gone"),
            "{e}"
        );
        // Ready with its settings, but no pipe directory to mount.
        report(&host, State::Ready, None, daemon("nvidia.com/gpu"));
        let e = host.ready().unwrap_err();
        assert!(
            matches!(&e, NoMpsDaemon::NoPipe { pipe, .. } if *pipe == host.paths().pipe),
            "{e:?}"
        );
        std::fs::create_dir_all(host.paths().pipe).unwrap();
        assert_eq!(host.ready().unwrap(), host.paths());
    }

    #[test]
    fn unreadable_files_are_named_and_links_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let host = host(dir.path());
        std::fs::create_dir_all(dir.path().join("desired")).unwrap();
        std::fs::write(dir.path().join("desired/daemons.json"), "{").unwrap();
        let e = host.ready().unwrap_err();
        assert!(matches!(&e, NoMpsDaemon::Unreadable(_)), "{e:?}");
        assert!(
            e.to_string()
                .contains("daemons.json: not a list of MPS daemons"),
            "{e}"
        );
        let ours = Desired {
            daemons: vec![daemon("nvidia.com/gpu")],
        };
        std::fs::remove_file(dir.path().join("desired/daemons.json")).unwrap();
        status::write_desired(dir.path(), &ours).unwrap();
        // A status file linked from elsewhere (a client pod can write under the MPS root) is
        // refused, not believed.
        let elsewhere = tempfile::tempdir().unwrap();
        let planted = elsewhere.path().join("status.json");
        status::write(
            &planted,
            &Status {
                state: State::Ready,
                reason: None,
                pid: None,
                restarts: 0,
                settings: daemon("nvidia.com/gpu"),
            },
        )
        .unwrap();
        std::fs::create_dir_all(host.paths().pipe).unwrap();
        std::os::unix::fs::symlink(&planted, host.paths().status).unwrap();
        let e = host.ready().unwrap_err();
        assert!(matches!(&e, NoMpsDaemon::Unreadable(_)), "{e:?}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    #[test]
    fn mps_needs_a_ready_daemon_and_gives_env_and_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let host = host(dir.path());
        let client = Client::Mps {
            active_thread_percentage: Some(25),
        };
        let limits = || {
            vec![ClientLimit {
                device: "0".into(),
                mib: Some(edgegpu_node::mps::plan::whole_mib((1 << 30) + 5)),
            }]
        };
        let e = client_edits(&client, limits(), &host).unwrap_err();
        assert!(matches!(e, NoMpsDaemon::NotAsked { .. }), "{e:?}");
        status::write_desired(
            dir.path(),
            &Desired {
                daemons: vec![daemon("nvidia.com/gpu")],
            },
        )
        .unwrap();
        report(&host, State::Starting, None, daemon("nvidia.com/gpu"));
        std::fs::create_dir_all(dir.path().join("nvidia.com/gpu/pipe")).unwrap();
        let e = client_edits(&client, limits(), &host).unwrap_err();
        assert!(matches!(e, NoMpsDaemon::NotReady { .. }), "{e:?}");
        report(&host, State::Ready, None, daemon("nvidia.com/gpu"));
        let (env, mounts) = client_edits(&client, limits(), &host).unwrap();
        let pipe = dir.path().join("nvidia.com/gpu/pipe").display().to_string();
        assert!(
            env.contains(&format!("CUDA_MPS_PIPE_DIRECTORY={pipe}")),
            "{env:?}"
        );
        assert!(env.contains(&"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M".to_string()));
        assert!(env.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25".to_string()));
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1].container_path, "/dev/shm");
        // Told, not enforced: no daemon is read, nothing mounted.
        let accounted = Client::Accounted {
            why: "no MPS here".into(),
        };
        let empty = MpsHost {
            mps_root: dir.path().join("none"),
            resource: "nvidia.com/gpu".into(),
        };
        let (env, mounts) = client_edits(&accounted, limits(), &empty).unwrap();
        assert!(mounts.is_empty());
        assert!(
            env.contains(&"EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED=false".to_string()),
            "{env:?}"
        );
        assert!(
            env.contains(&"EDGEGPU_GPU_MEMORY_LIMIT_NOTE=no MPS here".to_string()),
            "{env:?}"
        );
        assert!(!env.iter().any(|v| v.starts_with("CUDA_MPS_")), "{env:?}");
    }
}
