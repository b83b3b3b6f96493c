//! What the GPUs measure right now: load, clocks, temperature, power and memory, read when
//! asked (a Prometheus scrape) and never in the background.
//!
//! - [`tegra`]: a Jetson's sysfs, hwmon and thermal files, located once at start through the
//!   platform table (the way the health checks find the GPU); on a hybrid Jetson (JetPack 6+)
//!   NVML fills in what sysfs lacks, asked only what the table says its release answers
//!   (Thor's utilisation).
//! - [`nvml`]: discrete GPUs through NVML, and the memory of MIG devices (a MIG device's
//!   own framebuffer; everything else a MIG device shows is its GPU's).
//!
//! A value a board cannot measure is `None`, never 0: its metric is left out.

pub mod nvml;
mod reading;
pub mod tegra;

use std::path::Path;
use std::sync::Arc;

use super::discovery::{Gpu, MigDevice, Platform};

pub use nvml::NvmlSensors;
pub use reading::{RailReading, Reading};
pub use tegra::TegraSensors;

/// The sensors of this node's GPUs and MIG devices.
pub struct Sensors {
    gpus: GpuSensors,
    migs: Vec<nvml::MigSensor>,
}

/// Where the GPUs' readings come from.
enum GpuSensors {
    Tegra(TegraSensors),
    Nvml(NvmlSensors),
    /// No GPU (running with zero devices).
    None,
}

/// One reading of every GPU (in discovery order) and of every MIG device asked for (in the
/// order given to [`Sensors::locate`]; only the framebuffer values are set).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Readings {
    pub gpus: Vec<Reading>,
    pub migs: Vec<Reading>,
}

impl Sensors {
    /// Locates the sensors of `gpus` and of the MIG devices `migs` under `root`.
    pub fn locate(
        root: &Path,
        platform: Option<&Platform>,
        gpus: &[Gpu],
        migs: &[MigDevice],
        nvml: Option<Arc<::nvml_wrapper::Nvml>>,
    ) -> Sensors {
        let mig_sensors = match &nvml {
            Some(nvml) => migs
                .iter()
                .map(|m| nvml::MigSensor::new(nvml.clone(), &gpus[m.parent], m))
                .collect(),
            None => Vec::new(),
        };
        let gpu_sensors = match platform {
            Some(Platform::Tegra { detection, .. }) => {
                GpuSensors::Tegra(TegraSensors::locate(root, detection, nvml))
            }
            Some(Platform::Nvml) => match nvml {
                Some(nvml) => {
                    GpuSensors::Nvml(NvmlSensors::new(nvml, gpus.iter().map(|g| g.uuid.clone())))
                }
                None => GpuSensors::None,
            },
            None => GpuSensors::None,
        };
        Sensors {
            gpus: gpu_sensors,
            migs: mig_sensors,
        }
    }

    /// One reading per GPU and per MIG device. Blocks on file reads and NVML calls: run it
    /// off the async runtime.
    pub fn read(&self) -> Readings {
        let gpus = match &self.gpus {
            GpuSensors::Tegra(t) => vec![t.read()],
            GpuSensors::Nvml(n) => n.read(),
            GpuSensors::None => Vec::new(),
        };
        Readings {
            gpus,
            migs: self.migs.iter().map(nvml::MigSensor::read).collect(),
        }
    }
}
