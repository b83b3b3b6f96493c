//! What the NVIDIA runtime copies from the runtime pods use now, so that a pod moved to it
//! keeps its cgroup driver (a missing `SystemdCgroup = true` on a systemd host gives
//! unstable pods: NVIDIA/nvidia-docker#1788) and the rest of its runtime settings.
//!
//! The runtime copied is the first of the default runtime (unless it is an NVIDIA one),
//! `runc` and `crun` whose table exists and that runs under a runc shim, as NVIDIA's
//! toolkit picks it (pkg/config/engine GetLowLevelRuntimes). The toolkit copies the table
//! whole; node-setup's runtime always runs under `io.containerd.runc.v2`, so what it
//! copies is what that shim reads (runcoptions.Options: `BinaryName`, `Root`,
//! `SystemdCgroup`, `CriuPath`, ...):
//!
//! * `io.containerd.runc.v2`, `io.containerd.runc.v1` (the same options) and an empty or
//!   missing `runtime_type` (the toolkit treats it as runc and writes runc.v2): every
//!   option but `BinaryName`, and every key of the runtime's table but `runtime_type`,
//!   `runtime_root` and `runtime_engine` — containerd 1.x refuses the last two on any
//!   other type (pkg/cri/config ValidatePluginConfig: "`runtime_root` only works for
//!   runtime io.containerd.runtime.v1.linux").
//! * `io.containerd.runtime.v1.linux` (the legacy shim of config version 1; runctypes
//!   RuncOptions `Runtime`, `RuntimeRoot`, `CriuPath`, `SystemdCgroup`): `SystemdCgroup`
//!   (or, when the runtime has none, the CRI plugin's own deprecated `systemd_cgroup`,
//!   which containerd applies to that shim only), `RuntimeRoot` (or `runtime_root`) as
//!   `Root`, `CriuPath`; `Runtime` / `runtime_engine` name the binary, which is ours.
//! * any other type (kata, gVisor, ...): its options mean nothing to runc; the next
//!   candidate is copied instead. Its `SystemdCgroup`, where it has one, still says which
//!   cgroup driver the pods use now (the kubelet's does not change with the runtime), so
//!   that one is carried, over the candidate's, or alone where there is no candidate.

use toml_edit::Value;

use super::node::Node;
use super::template::VALUE_PLACEHOLDER;

const RUNC_V2: &str = "io.containerd.runc.v2";
const RUNC_V1: &str = "io.containerd.runc.v1";
const LINUX_V1: &str = "io.containerd.runtime.v1.linux";

/// What the new runtime's table gets from the runtime pods use now.
#[derive(Debug, Clone)]
pub struct RuntimeCopy {
    /// The runtime copied.
    pub from: String,
    /// The cgroup driver copied is the default runtime's (it is the default runtime, or a
    /// stand-in for a default of another type that names its `SystemdCgroup`): pods use it
    /// now, and the new runtime must keep it even where an existing entry of the new
    /// runtime says otherwise.
    pub is_default: bool,
    /// Keys of the runtime table (not `runtime_type` or `options`).
    pub top: Vec<(String, Value)>,
    /// Keys of its `options` table (not `BinaryName`).
    pub options: Vec<(String, Value)>,
}

/// How a runtime type's options relate to runc v2's.
enum Shape {
    Runc,
    LinuxV1,
    Other,
}

fn shape(runtime: &Node<impl Clone>) -> Shape {
    match runtime.get("runtime_type").and_then(Node::as_str) {
        None | Some("" | RUNC_V2 | RUNC_V1) => Shape::Runc,
        Some(LINUX_V1) => Shape::LinuxV1,
        // A template expression: it renders runc's type in every k3s template we know.
        Some(t) if t.starts_with(VALUE_PLACEHOLDER) => Shape::Runc,
        Some(_) => Shape::Other,
    }
}

/// The runtime the new runtime `new_runtime` copies, among `runtimes` (the CRI plugin's
/// `containerd.runtimes` table), given the default runtime's name (`None`: containerd's
/// default, runc) and the CRI plugin's
/// own `systemd_cgroup` (config versions 1 and 2, containerd 1.x).
pub fn runtime_copy<A: Clone>(
    default: Option<&str>,
    runtimes: Option<&Node<A>>,
    plugin_systemd_cgroup: Option<&Value>,
    new_runtime: &str,
) -> Option<RuntimeCopy> {
    let runtimes = runtimes?;
    // containerd's own default is runc.
    let actual = default.unwrap_or("runc");
    let preferred = Some(actual).filter(|d| !d.starts_with("nvidia"));
    // The cgroup driver of the pods so far: the default runtime's, whatever its type.
    let default_driver: Option<Value> = preferred
        .filter(|d| *d != new_runtime)
        .and_then(|d| runtimes.get(d))
        .and_then(|r| r.get("options"))
        .and_then(|o| o.get("SystemdCgroup"))
        .and_then(Node::value)
        .cloned();
    let found = preferred
        .into_iter()
        .chain(["runc", "crun"])
        .filter(|n| *n != new_runtime)
        .filter_map(|n| runtimes.get(n).filter(|r| r.is_table()).map(|r| (n, r)))
        .find(|(_, r)| !matches!(shape(r), Shape::Other));
    let Some((name, runtime)) = found else {
        // No runc-like runtime to copy, but a default with a cgroup driver: that alone.
        return default_driver.map(|driver| RuntimeCopy {
            from: actual.to_string(),
            is_default: true,
            top: Vec::new(),
            options: vec![("SystemdCgroup".to_string(), driver)],
        });
    };
    let values = |node: Option<&Node<A>>| -> Vec<(String, Value)> {
        node.map(|n| {
            n.entries()
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.value()?.clone())))
                .collect()
        })
        .unwrap_or_default()
    };
    let top: Vec<(String, Value)> = values(Some(runtime))
        .into_iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "runtime_type" | "runtime_root" | "runtime_engine"
            )
        })
        .collect();
    let options = values(runtime.get("options"));
    let options = match shape(runtime) {
        Shape::Runc => options
            .into_iter()
            .filter(|(k, _)| k != "BinaryName")
            .collect(),
        Shape::LinuxV1 => {
            let option = |k: &str| options.iter().find(|(key, _)| key == k).map(|(_, v)| v);
            let mut out = Vec::new();
            if let Some(v) = option("SystemdCgroup").or(plugin_systemd_cgroup) {
                out.push(("SystemdCgroup".to_string(), v.clone()));
            }
            let root = option("RuntimeRoot")
                .or_else(|| runtime.get("runtime_root").and_then(Node::value))
                .filter(|v| v.as_str() != Some(""));
            if let Some(v) = root {
                out.push(("Root".to_string(), v.clone()));
            }
            if let Some(v) = option("CriuPath") {
                out.push(("CriuPath".to_string(), v.clone()));
            }
            out
        }
        Shape::Other => unreachable!("filtered above"),
    };
    let mut copy = RuntimeCopy {
        from: name.to_string(),
        is_default: name == actual,
        top,
        options,
    };
    if let (false, Some(driver)) = (copy.is_default, default_driver) {
        // A stand-in for a default of another type: the pods' cgroup driver is the default's.
        copy.options.retain(|(k, _)| k != "SystemdCgroup");
        copy.options.push(("SystemdCgroup".to_string(), driver));
        copy.is_default = true;
    }
    Some(copy)
}

/// [`runtime_copy`] for one CRI plugin table: its `containerd.default_runtime_name`,
/// `containerd.runtimes` and `systemd_cgroup`. With `legacy_default` (containerd 1.x),
/// a deprecated `containerd.default_runtime` table with a `runtime_type` is the default
/// runtime, named `default`, whatever `default_runtime_name` says (pkg/cri/config
/// ValidatePluginConfig).
pub fn copy_from_plugin<A: Clone>(
    plugin: Option<&Node<A>>,
    new_runtime: &str,
    legacy_default: bool,
) -> Option<RuntimeCopy> {
    let plugin = plugin?;
    let containerd = plugin.get("containerd")?;
    let mut runtimes = containerd
        .get("runtimes")
        .cloned()
        .unwrap_or_else(|| Node::empty_table(containerd.at().clone()));
    let mut default = containerd
        .get("default_runtime_name")
        .and_then(Node::as_str)
        .filter(|d| !d.starts_with(VALUE_PLACEHOLDER))
        .map(String::from);
    if let Some(legacy) = containerd.get("default_runtime").filter(|_| legacy_default) {
        if legacy_default_type(legacy).is_some() {
            runtimes.insert("default", legacy.clone());
            default = Some("default".into());
        }
    }
    runtime_copy(
        default.as_deref(),
        Some(&runtimes),
        plugin.get("systemd_cgroup").and_then(Node::value),
        new_runtime,
    )
}

/// The `runtime_type` of a deprecated `default_runtime` table when it makes that table
/// the default runtime (containerd 1.x: a non-empty type).
pub fn legacy_default_type<A: Clone>(table: &Node<A>) -> Option<&str> {
    table
        .get("runtime_type")
        .and_then(Node::as_str)
        .filter(|t| !t.is_empty())
}
