//! Which kind of GPU a node has, from files every Linux host has (`/sys`, and the device tree
//! under it on Arm boards): what the node-labeller DaemonSet, which runs on every node, can
//! read without mounting anything that might be missing.

use std::path::Path;

use edgegpu_plugin::gpu::discovery::TegraDetection;
use edgegpu_plugin::gpu::under_root;

/// The PCI devices (Linux `Documentation/ABI/testing/sysfs-bus-pci`).
const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// NVIDIA's PCI vendor id.
const NVIDIA_VENDOR: &str = "0x10de";
/// PCI class codes of display controllers: VGA (0x0300) and 3D (0x0302).
const DISPLAY_CLASSES: [&str; 2] = ["0x0300", "0x0302"];

/// The value of the `edgegpu.io/gpu` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Jetson,
    Discrete,
}

impl NodeKind {
    pub fn label_value(self) -> &'static str {
        match self {
            NodeKind::Jetson => "jetson",
            NodeKind::Discrete => "discrete",
        }
    }
}

/// Detects the kind under `root`. A Jetson first: Thor's integrated GPU is also an NVIDIA
/// PCI display device.
pub fn detect(root: &Path) -> Option<NodeKind> {
    let tegra = TegraDetection::probe(root);
    if tegra.is_tegra() {
        tracing::info!(
            generation = tegra.generation.map_or("unknown", |g| g.name),
            signals = tegra.signals.len(),
            "Jetson: Tegra signals matched"
        );
        return Some(NodeKind::Jetson);
    }
    let nvidia_display = nvidia_display_devices(root);
    if !nvidia_display.is_empty() {
        tracing::info!(devices = ?nvidia_display, "discrete GPU: NVIDIA PCI display controller(s)");
        return Some(NodeKind::Discrete);
    }
    tracing::info!(
        "no GPU: no Tegra signal ({}) and no NVIDIA display controller in {PCI_DEVICES}",
        tegra.looked_for.join("; ")
    );
    None
}

/// PCI addresses of NVIDIA VGA / 3D controllers.
fn nvidia_display_devices(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(under_root(root, PCI_DEVICES)) else {
        return Vec::new();
    };
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_ascii_lowercase())
            .unwrap_or_default()
    };
    let mut found: Vec<String> = entries
        .flatten()
        .filter(|e| {
            read(&e.path().join("vendor")) == NVIDIA_VENDOR
                && DISPLAY_CLASSES
                    .iter()
                    .any(|c| read(&e.path().join("class")).starts_with(c))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found
}
