//! CDI specs for the Jetson DLA cores and PVA instances, one spec file per kind (a CDI spec
//! holds one kind), written next to the GPU's spec by `cdi generate`:
//!
//! - kind `nvidia.com/dla`: devices `0`, `1` (the core index, as the device plugin's
//!   `cdi-cri`/`cdi-annotations` strategies name them: `nvidia.com/dla=0`) and `all`;
//! - kind `nvidia.com/pva`: devices `pva0`, … and never `all`. JetPack's `pva-allow-2` package
//!   installs its own `/etc/cdi/nvidia-pva.yaml` of the same kind (Isaac ROS asks it for
//!   `nvidia.com/pva=all`; its device names are not known), so ours are prefixed and leave
//!   `all` to it: two specs of one kind may coexist as long as their device names differ.
//!
//! An engine is in the spec when one of its device nodes exists (the names every L4T release
//! uses, `edgegpu_platform::engines`); a host without engines gets no file, and a file an
//! earlier run wrote is removed. Node set per device: the rule the device plugin's device
//! specs and the DRA driver's claims follow too (`edgegpu_platform::engines::container_nodes`,
//! docs/engines.md section 2) — every node of every engine of the kind, so core indices keep
//! their host meaning whichever device a container names, and `/dev/nvmap` for PVA where it
//! exists. Every device of a kind, `all` included, thus carries the same nodes.

use edgegpu_platform::engines::{container_nodes, EngineKind};

use super::spec::{ContainerEdits, Device, DeviceNode, Spec};
use crate::root::HostRoot;

/// File names of the engine specs, beside the GPU's (`/var/run/cdi/edgegpu-dla.yaml`).
pub fn file_name(kind: EngineKind, json: bool) -> String {
    format!(
        "edgegpu-{}.{}",
        kind.name(),
        if json { "json" } else { "yaml" }
    )
}

/// Indices probed per kind: the most any module has (`edgegpu_platform::engines`).
fn max_index(kind: EngineKind) -> u32 {
    kind.max_per_soc(None)
}

/// Nodes of engine `index` of `kind` that exist under `root`, control node first.
fn nodes(root: &HostRoot, kind: EngineKind, index: u32) -> Vec<String> {
    kind.device_nodes(index, None)
        .into_iter()
        .filter(|n| std::fs::metadata(root.path(n)).is_ok())
        .collect()
}

/// The spec of `kind` for the host under `root`; `None` when it has no such engine.
pub fn spec(root: &HostRoot, kind: EngineKind) -> Option<Spec> {
    let found: Vec<(u32, Vec<String>)> = (0..max_index(kind))
        .map(|i| (i, nodes(root, kind, i)))
        .filter(|(_, n)| !n.is_empty())
        .collect();
    if found.is_empty() {
        return None;
    }
    let paths = container_nodes(kind, found.iter().map(|(_, n)| n.as_slice()), |n| {
        std::fs::metadata(root.path(n)).is_ok()
    });
    let edits = || ContainerEdits {
        device_nodes: paths
            .iter()
            .map(|path| DeviceNode { path: path.clone() })
            .collect(),
        ..ContainerEdits::default()
    };
    let mut devices: Vec<Device> = found
        .iter()
        .map(|(i, _)| Device {
            name: kind.cdi_device(*i),
            container_edits: edits(),
        })
        .collect();
    if kind == EngineKind::Dla {
        devices.push(Device {
            name: "all".to_string(),
            container_edits: edits(),
        });
    }
    let mut spec = Spec::new(devices, ContainerEdits::default());
    spec.kind = kind.resource_name().to_string();
    spec.cdi_version = super::spec::minimum_version(&spec).to_string();
    Some(spec)
}
