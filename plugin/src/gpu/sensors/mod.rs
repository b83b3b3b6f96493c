//! What the GPUs measure right now: load, clocks, temperature, power and memory, read when
//! asked (a Prometheus scrape) and never in the background.
//!
//! - [`tegra`]: a Jetson's sysfs, hwmon and thermal files, located once at start through the
//!   platform table (the way the health checks find the GPU); NVML fills in what sysfs lacks
//!   where it is loaded (Thor's utilisation).
//! - [`nvml`]: discrete GPUs through NVML.
//!
//! A value a board cannot measure is `None`, never 0: its metric is left out.

pub mod nvml;
pub mod tegra;

use std::path::Path;
use std::sync::Arc;

use super::discovery::{Gpu, Platform};

pub use nvml::NvmlSensors;
pub use tegra::TegraSensors;

/// One reading of one GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Busy time, percent.
    pub utilization_percent: Option<f64>,
    /// Graphics/SM clock, MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Memory clock (the EMC on a Jetson), MHz.
    pub memory_clock_mhz: Option<f64>,
    /// GPU temperature, degrees Celsius.
    pub temperature_celsius: Option<f64>,
    /// Power drawn by the GPU alone, watts.
    pub power_watts: Option<f64>,
    /// Dedicated GPU memory used and free, MiB (discrete GPUs).
    pub framebuffer_used_mib: Option<f64>,
    pub framebuffer_free_mib: Option<f64>,
    /// Jetson: the memory controller's load, percent.
    pub emc_utilization_percent: Option<f64>,
    /// Jetson: every labelled INA3221 rail.
    pub rails: Vec<RailReading>,
    /// Jetson: memory held by the GPU's allocator (`NvMapMemUsed`) and the memory it shares
    /// with the CPU (`MemTotal`), bytes.
    pub shared_memory_used_bytes: Option<u64>,
    pub shared_memory_total_bytes: Option<u64>,
}

/// One power rail.
#[derive(Debug, Clone, PartialEq)]
pub struct RailReading {
    pub label: String,
    pub watts: f64,
    /// The rail feeds the GPU (alone or together with other units).
    pub feeds_gpu: bool,
}

/// The sensors of this node's GPUs.
pub enum Sensors {
    Tegra(TegraSensors),
    Nvml(NvmlSensors),
    /// No GPU (running with zero devices).
    None,
}

impl Sensors {
    /// Locates the sensors of `gpus` under `root`.
    pub fn locate(
        root: &Path,
        platform: Option<&Platform>,
        gpus: &[Gpu],
        nvml: Option<Arc<::nvml_wrapper::Nvml>>,
    ) -> Sensors {
        match platform {
            Some(Platform::Tegra { detection, .. }) => {
                Sensors::Tegra(TegraSensors::locate(root, detection, nvml))
            }
            Some(Platform::Nvml) => match nvml {
                Some(nvml) => {
                    Sensors::Nvml(NvmlSensors::new(nvml, gpus.iter().map(|g| g.uuid.clone())))
                }
                None => Sensors::None,
            },
            None => Sensors::None,
        }
    }

    /// One reading per physical GPU, in discovery order. Blocks on file reads and NVML
    /// calls: run it off the async runtime.
    pub fn read(&self) -> Vec<Reading> {
        match self {
            Sensors::Tegra(t) => vec![t.read()],
            Sensors::Nvml(n) => n.read(),
            Sensors::None => Vec::new(),
        }
    }
}
