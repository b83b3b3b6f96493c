//! Which kind of GPU a node has, from files every Linux host has (`/sys`, and the device tree
//! under it on Arm boards): what the node-labeller DaemonSet, which runs on every node, can
//! read without mounting anything that might be missing.
//!
//! A kind is labelled only where its plugin can start: with the GPU driver loaded. An NVIDIA
//! card on nouveau or without any driver would crash-loop the discrete plugin (it fails
//! without NVML under `--fail-on-init-error`), and a Tegra board without its GPU driver would
//! run a plugin that has nothing to serve.

use std::path::Path;

use edgegpu_node::gpu::discovery::TegraDetection;
use edgegpu_node::gpu::under_root;
use edgegpu_platform::{Generation, GpuDriver, GENERATIONS};

/// The PCI devices (Linux `Documentation/ABI/testing/sysfs-bus-pci`).
const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// NVIDIA's PCI vendor id.
const NVIDIA_VENDOR: &str = "0x10de";
/// PCI class codes of display controllers: VGA (0x0300) and 3D (0x0302).
const DISPLAY_CLASSES: [&str; 2] = ["0x0300", "0x0302"];
/// The NVIDIA kernel module (proprietary or open, `nvidia.ko`), loaded or built in: the
/// kernel's `/sys/module/<name>` (Linux `Documentation/ABI/testing/sysfs-module`).
const NVIDIA_MODULE: &str = "/sys/module/nvidia";
/// Tegra's nvgpu driver as a module (L4T r34 on; built into r32's kernel).
const NVGPU_MODULE: &str = "/sys/module/nvgpu";
/// The devfreq devices (Linux `Documentation/ABI/testing/sysfs-class-devfreq`).
const DEVFREQ_CLASS: &str = "/sys/class/devfreq";

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
        let generation = tegra.generation.map_or("unknown", |g| g.name);
        return match tegra_gpu_driver(root, tegra.generation) {
            Some(found) => {
                tracing::info!(
                    generation,
                    signals = tegra.signals.len(),
                    driver = %found,
                    "Jetson: Tegra signals matched, GPU driver present"
                );
                Some(NodeKind::Jetson)
            }
            None => {
                tracing::warn!(
                    generation,
                    "Tegra board without its GPU driver (no {NVGPU_MODULE}, no GPU devfreq device in {DEVFREQ_CLASS}): not labelled; load the GPU driver (L4T's nvgpu, or Thor's nvidia module)"
                );
                None
            }
        };
    }
    let nvidia_display = nvidia_display_devices(root);
    if !nvidia_display.is_empty() {
        if !under_root(root, NVIDIA_MODULE).is_dir() {
            tracing::warn!(
                devices = ?nvidia_display,
                "NVIDIA display controller(s) without the NVIDIA driver ({NVIDIA_MODULE} missing: nouveau or no driver): not labelled; install and load the NVIDIA driver"
            );
            return None;
        }
        tracing::info!(devices = ?nvidia_display, "discrete GPU: NVIDIA PCI display controller(s), NVIDIA driver loaded");
        return Some(NodeKind::Discrete);
    }
    tracing::info!(
        "no GPU: no Tegra signal ({}) and no NVIDIA display controller in {PCI_DEVICES}",
        tegra.looked_for.join("; ")
    );
    None
}

/// What shows the integrated GPU's driver loaded: the nvgpu module, the GPU's devfreq device
/// (registered when the driver probes the GPU: platform table `sysfs.devfreq_names`), or on
/// an OpenRM generation (Thor) the nvidia module. An unknown generation accepts any
/// generation's. `None`: no driver.
fn tegra_gpu_driver(root: &Path, generation: Option<&'static Generation>) -> Option<String> {
    let candidates: &[Generation] = match generation {
        Some(g) => std::slice::from_ref(g),
        None => GENERATIONS,
    };
    if under_root(root, NVGPU_MODULE).is_dir() {
        return Some(NVGPU_MODULE.to_string());
    }
    for g in candidates {
        for name in g.sysfs.devfreq_names {
            let path = format!("{DEVFREQ_CLASS}/{name}");
            if under_root(root, &path).exists() {
                return Some(path);
            }
        }
        let openrm = g
            .nvml
            .as_ref()
            .is_some_and(|n| n.releases.iter().any(|r| r.driver == GpuDriver::OpenRm));
        if openrm && under_root(root, NVIDIA_MODULE).is_dir() {
            return Some(NVIDIA_MODULE.to_string());
        }
    }
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
