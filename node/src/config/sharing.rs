//! The `sharing` section of the `--config` file: how one GPU serves several containers.
//!
//! - `timeSlicing` and `mps`: NVIDIA's `ReplicatedResources` shape (its `api/config/v1/
//!   replicas.go`, `sharing.go`), read with its rules: keys looked up exactly, `replicas` ≥ 2,
//!   `devices` other than `all` and `rename` checked then ignored with a note, `mps` wins over
//!   `timeSlicing` when both are set, and `failRequestsGreaterThanOne` defaults to `true` for
//!   MPS (`config.go`: "Preserve the historical MPS behavior").
//! - `mps` resources take two edgegpu keys NVIDIA's parser ignores (it decodes entries through
//!   a map): `activeThreadPercentage` and `pinnedDeviceMemoryLimit`, each replica's compute
//!   share and device-memory limit, by default an even split of the GPU.
//! - `gpuMemory` is edgegpu's: each GPU advertised as units of memory (gpushare's model), a
//!   container's limit being the units it holds (docs/sharing.md).

use std::collections::BTreeMap;

use serde::Serialize;

use super::read::{
    at, boolean, fail, integer, is_device_ref, opt, resource_name, seq, shown, string,
    ConfigFileError, Keys, Reader,
};
use super::yaml::{Node, Value};

/// Most MPS clients one GPU serves (Volta MPS; NVIDIA's MPS documentation, "Limitations").
pub const MAX_MPS_CLIENTS: u32 = 48;

/// `sharing.gpuMemory.unit` when not set.
pub const DEFAULT_MEMORY_UNIT: u64 = 256 << 20;

const MIB: u64 = 1 << 20;

/// `sharing.timeSlicing:` — replicas of each GPU advertised as `<id>::<n>`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeSlicing {
    pub rename_by_default: bool,
    pub fail_requests_greater_than_one: bool,
    pub resources: Vec<ReplicatedResource>,
}

/// One `sharing.timeSlicing.resources[]` entry; `name` is fully qualified.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicatedResource {
    pub name: String,
    pub replicas: u32,
}

/// `sharing.mps:` — replicas of each GPU served by an MPS control daemon, each replica one
/// MPS client with its share of the GPU's threads and memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MpsSharing {
    pub rename_by_default: bool,
    pub fail_requests_greater_than_one: bool,
    pub resources: Vec<MpsResource>,
}

/// One `sharing.mps.resources[]` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MpsResource {
    pub name: String,
    pub replicas: u32,
    /// Percent of the GPU's threads each replica may use; `None`: `100 / replicas`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_thread_percentage: Option<u32>,
    /// Device memory each replica may pin, in bytes; `None`: the GPU's memory / replicas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_device_memory_limit: Option<u64>,
}

/// `sharing.gpuMemory:` — each GPU advertised as `memory / unit` devices; a container
/// asking for N of them gets a limit of N units, all from one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuMemorySharing {
    /// Bytes per advertised device (a whole number of MiB).
    pub unit: u64,
    pub enforcement: MemoryEnforcement,
    pub resources: Vec<MemoryResource>,
}

/// How a memory limit is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryEnforcement {
    /// Through MPS where the platform runs it, else accounted only (and said so).
    Auto,
    /// Through MPS; a platform that cannot run MPS refuses the config.
    Mps,
    /// Accounted only: no MPS control daemon.
    None,
}

/// One `sharing.gpuMemory.resources[]` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryResource {
    /// The resource whose GPUs are shared (`nvidia.com/gpu`).
    pub name: String,
    /// The name the units are advertised under (`rename`, default `<name>-mem`).
    pub rename: String,
    /// Bytes of each GPU offered in units; `None`: all of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
}

/// The three subsections as read.
#[derive(Debug, Default)]
pub(super) struct FileSharing {
    pub time_slicing: Option<TimeSlicing>,
    pub mps: Option<MpsSharing>,
    pub gpu_memory: Option<GpuMemorySharing>,
}

/// What `timeSlicing` and `mps` share: NVIDIA's `ReplicatedResources`.
struct Replicated<'n> {
    rename_by_default: bool,
    fail_requests_greater_than_one: Option<bool>,
    /// Each resource with its entry's keys (for the MPS extensions).
    resources: Vec<(ReplicatedResource, BTreeMap<&'static str, &'n Node>)>,
}

impl Reader {
    pub(super) fn sharing(&mut self, node: &Node) -> Result<FileSharing, ConfigFileError> {
        let s = self.section(
            node,
            "sharing",
            &["timeSlicing", "mps", "gpuMemory"],
            Keys::AnyCase,
        )?;
        let present = |key: &str| s.get(key).filter(|n| !n.is_null()).copied();
        let mut out = FileSharing::default();
        if let Some(mem) = present("gpuMemory") {
            if present("timeSlicing").is_some() || present("mps").is_some() {
                return fail(
                    mem,
                    "sharing.gpuMemory cannot be combined with sharing.timeSlicing or sharing.mps: \
                     a GPU is shared one way"
                        .into(),
                );
            }
            out.gpu_memory = Some(self.gpu_memory(mem)?);
            return Ok(out);
        }
        if let Some(mps) = present("mps") {
            if let Some(ts) = present("timeSlicing") {
                self.note(format!(
                    "{}: `sharing.timeSlicing` is ignored because `sharing.mps` is set (NVIDIA's plugin does the same)",
                    at(ts)
                ));
            }
            out.mps = Some(self.mps(mps)?);
            return Ok(out);
        }
        if let Some(ts) = s.get("timeSlicing") {
            out.time_slicing = Some(self.time_slicing(ts)?);
        }
        Ok(out)
    }

    fn time_slicing(&mut self, node: &Node) -> Result<TimeSlicing, ConfigFileError> {
        let r = self.replicated(node, "sharing.timeSlicing", &[])?;
        Ok(TimeSlicing {
            rename_by_default: r.rename_by_default,
            fail_requests_greater_than_one: r.fail_requests_greater_than_one.unwrap_or(false),
            resources: r.resources.into_iter().map(|(res, _)| res).collect(),
        })
    }

    fn mps(&mut self, node: &Node) -> Result<MpsSharing, ConfigFileError> {
        const PATH: &str = "sharing.mps";
        let r = self.replicated(
            node,
            PATH,
            &["activeThreadPercentage", "pinnedDeviceMemoryLimit"],
        )?;
        let mut resources = Vec::new();
        for (i, (res, keys)) in r.resources.into_iter().enumerate() {
            let path = format!("{PATH}.resources[{i}]");
            if res.replicas > MAX_MPS_CLIENTS {
                return fail(
                    keys["replicas"],
                    format!(
                        "{path}.replicas: an MPS server serves at most {MAX_MPS_CLIENTS} clients per GPU (Volta MPS); found {}",
                        res.replicas
                    ),
                );
            }
            let active_thread_percentage =
                opt(
                    &keys,
                    "activeThreadPercentage",
                    &path,
                    |v, p| match integer(v, p)? {
                        None => Ok(None),
                        Some(n) if (1..=100).contains(&n) => Ok(Some(n as u32)),
                        Some(n) => fail(
                            v,
                            format!("{p}: must be a percentage from 1 to 100; found {n}"),
                        ),
                    },
                )?;
            let pinned_device_memory_limit =
                opt(&keys, "pinnedDeviceMemoryLimit", &path, memory_size)?;
            resources.push(MpsResource {
                name: res.name,
                replicas: res.replicas,
                active_thread_percentage,
                pinned_device_memory_limit,
            });
        }
        Ok(MpsSharing {
            rename_by_default: r.rename_by_default,
            fail_requests_greater_than_one: r.fail_requests_greater_than_one.unwrap_or(true),
            resources,
        })
    }

    fn gpu_memory(&mut self, node: &Node) -> Result<GpuMemorySharing, ConfigFileError> {
        const PATH: &str = "sharing.gpuMemory";
        let g = self.section(
            node,
            PATH,
            &["unit", "enforcement", "resources"],
            Keys::Exact,
        )?;
        let unit = opt(&g, "unit", PATH, memory_size)?.unwrap_or(DEFAULT_MEMORY_UNIT);
        let enforcement = opt(&g, "enforcement", PATH, |v, p| {
            match string(v, p)?.as_deref() {
                None => Ok(None),
                Some("auto") => Ok(Some(MemoryEnforcement::Auto)),
                Some("mps") => Ok(Some(MemoryEnforcement::Mps)),
                Some("none") => Ok(Some(MemoryEnforcement::None)),
                Some(other) => fail(
                    v,
                    format!("{p}: invalid value `{other}`: expected auto, mps or none"),
                ),
            }
        })?
        .unwrap_or(MemoryEnforcement::Auto);
        let Some(list) = g.get("resources") else {
            return fail(node, format!("{PATH}: no resources specified"));
        };
        let path = format!("{PATH}.resources");
        let items = seq(list, &path)?;
        if items.is_empty() {
            return fail(list, format!("{path}: no resources specified"));
        }
        let mut resources = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("{path}[{i}]");
            let r = self.section(item, &path, &["name", "rename", "memory"], Keys::Exact)?;
            let Some(name) = r.get("name") else {
                return fail(item, format!("{path}: no resource name specified"));
            };
            let name = resource_name(name, &format!("{path}.name"))?;
            let rename = match r.get("rename") {
                Some(n) => resource_name(n, &format!("{path}.rename"))?,
                None => format!("{name}-mem"),
            };
            let memory = opt(&r, "memory", &path, memory_size)?;
            if let (Some(memory), Some(node)) = (memory, r.get("memory")) {
                if memory < unit {
                    return fail(
                        node,
                        format!(
                            "{path}.memory: {} MiB is less than one unit ({} MiB)",
                            memory / MIB,
                            unit / MIB
                        ),
                    );
                }
            }
            resources.push(MemoryResource {
                name,
                rename,
                memory,
            });
        }
        Ok(GpuMemorySharing {
            unit,
            enforcement,
            resources,
        })
    }

    /// NVIDIA's `ReplicatedResources` at `path`; `extra` keys are accepted in each resource.
    fn replicated<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        extra: &[&'static str],
    ) -> Result<Replicated<'n>, ConfigFileError> {
        let t = self.section(
            node,
            path,
            &["renameByDefault", "failRequestsGreaterThanOne", "resources"],
            Keys::Exact,
        )?;
        let Some(list) = t.get("resources") else {
            return fail(node, format!("{path}: no resources specified"));
        };
        let list_path = format!("{path}.resources");
        let items = seq(list, &list_path)?;
        if items.is_empty() {
            return fail(list, format!("{list_path}: no resources specified"));
        }
        let mut resources = Vec::new();
        for (i, item) in items.iter().enumerate() {
            resources.push(self.replicated_resource(item, &format!("{list_path}[{i}]"), extra)?);
        }
        Ok(Replicated {
            // NVIDIA decodes `renameByDefault` into a plain bool: null is refused there too.
            rename_by_default: match t.get("renameByDefault") {
                Some(v) => match boolean(v, &format!("{path}.renameByDefault"))? {
                    Some(b) => b,
                    None => {
                        return fail(
                            v,
                            format!("{path}.renameByDefault: expected true or false, found null"),
                        )
                    }
                },
                None => false,
            },
            fail_requests_greater_than_one: opt(&t, "failRequestsGreaterThanOne", path, boolean)?,
            resources,
        })
    }

    fn replicated_resource<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        extra: &[&'static str],
    ) -> Result<(ReplicatedResource, BTreeMap<&'static str, &'n Node>), ConfigFileError> {
        let mut known = vec!["name", "rename", "devices", "replicas"];
        known.extend_from_slice(extra);
        let r = self.section(node, path, &known, Keys::Exact)?;
        let Some(name) = r.get("name") else {
            return fail(node, format!("{path}: no resource name specified"));
        };
        let name = resource_name(name, &format!("{path}.name"))?;
        if let Some(devices) = r.get("devices") {
            if !self.devices_all(devices, &format!("{path}.devices"))? {
                self.note(format!(
                    "{}: customizing the 'devices' field in {path} is not supported; every GPU is shared (NVIDIA's plugin does the same)",
                    at(devices)
                ));
            }
        }
        let Some(replicas_node) = r.get("replicas") else {
            return fail(node, format!("{path}: no replicas specified"));
        };
        let replicas_path = format!("{path}.replicas");
        let Some(replicas) = integer(replicas_node, &replicas_path)? else {
            return fail(
                replicas_node,
                format!("{replicas_path}: number of replicas must be >= 2 (found null)"),
            );
        };
        if replicas < 2 {
            return fail(
                replicas_node,
                format!("{replicas_path}: number of replicas must be >= 2 (resource {name}: replicas {replicas})"),
            );
        }
        let Ok(replicas) = u32::try_from(replicas) else {
            return fail(
                replicas_node,
                format!("{replicas_path}: too many replicas: {replicas}"),
            );
        };
        if let Some(node) = r.get("rename") {
            let rename = resource_name(node, &format!("{path}.rename"))?;
            self.note(format!(
                "{}: setting the 'rename' field in {path} is not supported (`{rename}` ignored; renameByDefault names the shared resource <name>.shared), as in NVIDIA's plugin",
                at(node)
            ));
        }
        Ok((ReplicatedResource { name, replicas }, r))
    }

    /// Checks `devices` as NVIDIA does; true when it is `all`.
    fn devices_all(&mut self, node: &Node, path: &str) -> Result<bool, ConfigFileError> {
        match &node.value {
            Value::Scalar { text, plain } => {
                if text == "all" {
                    return Ok(true);
                }
                if *plain {
                    if let Ok(count) = text.parse::<i64>() {
                        if count > 0 {
                            return Ok(false);
                        }
                        return fail(node, format!("{path}: devices set as '{count}' but a count of devices must be > 0"));
                    }
                }
                fail(
                    node,
                    format!(
                        "{path}: devices set as '{text}' but the only valid string input is 'all'"
                    ),
                )
            }
            Value::Seq(items) => {
                for item in items {
                    let ok = match &item.value {
                        Value::Scalar { text, .. } => is_device_ref(text),
                        _ => false,
                    };
                    if !ok {
                        return fail(item, format!("{path}: unsupported device in devices list (expected a GPU index, a MIG index `gpu:mig` or a GPU/MIG UUID)"));
                    }
                }
                Ok(false)
            }
            Value::Map(_) => fail(
                node,
                format!("{path}: unrecognized type for devices spec: a mapping"),
            ),
        }
    }
}

/// A memory size as Kubernetes writes quantities ([`edgegpu_node::quantity`], the parser the
/// DRA driver's configs go through too). Rounded down to whole MiB (MPS takes its limits in
/// MiB: rounding down never grants more than asked), and at least 1 MiB. Null is unset.
fn memory_size(node: &Node, path: &str) -> Result<Option<u64>, ConfigFileError> {
    let Some(text) = string(node, path)? else {
        return Ok(None);
    };
    let bytes = match crate::quantity::parse_bytes(&text) {
        Ok(bytes) => bytes,
        Err(e) => {
            return fail(
                node,
                format!("{path}: invalid memory size {}: {e}", shown(node)),
            )
        }
    };
    if bytes < MIB {
        return fail(node, format!("{path}: {text} is less than 1Mi"));
    }
    Ok(Some(bytes / MIB * MIB))
}
