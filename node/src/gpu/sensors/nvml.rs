//! Discrete GPUs' sensors through NVML (the queries dcgm-exporter's default fields map to),
//! and MIG devices' memory. An NVML error (`NOT_SUPPORTED`, a lost GPU) leaves the value out.

use std::sync::Arc;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::reading::Reading;
use crate::gpu::discovery::{Gpu, MigDevice};
use crate::gpu::nvml_raw;

const MIB: f64 = 1024.0 * 1024.0;

/// NVML and the GPUs to read, by UUID.
pub struct NvmlSensors {
    nvml: Arc<Nvml>,
    uuids: Vec<String>,
}

impl NvmlSensors {
    pub fn new(nvml: Arc<Nvml>, uuids: impl IntoIterator<Item = String>) -> Self {
        NvmlSensors {
            nvml,
            uuids: uuids.into_iter().collect(),
        }
    }

    /// One reading per GPU.
    pub fn read(&self) -> Vec<Reading> {
        self.uuids
            .iter()
            .map(|uuid| read_device(self.nvml.device_by_uuid(uuid.as_str()), Queries::ALL))
            .collect()
    }
}

/// Which NVML queries to make (a Jetson's release answers only some: the platform table's
/// `NvmlAnswers`; a discrete GPU is asked everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Queries {
    pub utilization: bool,
    pub clocks: bool,
    pub temperature: bool,
    pub power: bool,
    /// Dedicated memory (not on an integrated GPU, whose memory is the system's).
    pub framebuffer: bool,
}

impl Queries {
    pub const ALL: Queries = Queries {
        utilization: true,
        clocks: true,
        temperature: true,
        power: true,
        framebuffer: true,
    };
}

/// What NVML answers for `device` to the queries `ask` names.
pub(super) fn read_device(device: Result<Device<'_>, NvmlError>, ask: Queries) -> Reading {
    let Ok(device) = device else {
        return Reading::default();
    };
    let memory = ask
        .framebuffer
        .then(|| nvml_raw::memory_info(&device).ok())
        .flatten();
    let clock = |c: Clock| {
        ask.clocks
            .then(|| device.clock_info(c).ok().map(f64::from))
            .flatten()
    };
    Reading {
        utilization_percent: ask
            .utilization
            .then(|| device.utilization_rates().ok().map(|u| f64::from(u.gpu)))
            .flatten(),
        sm_clock_mhz: clock(Clock::SM),
        memory_clock_mhz: clock(Clock::Memory),
        temperature_celsius: ask
            .temperature
            .then(|| {
                device
                    .temperature(TemperatureSensor::Gpu)
                    .ok()
                    .map(f64::from)
            })
            .flatten(),
        power_watts: ask
            .power
            .then(|| device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0))
            .flatten(),
        framebuffer_used_mib: memory.as_ref().map(|m| m.used as f64 / MIB),
        framebuffer_free_mib: memory.as_ref().map(|m| m.free as f64 / MIB),
        ..Reading::default()
    }
}

/// One MIG device: its memory through its parent's NVML handle (`nvmlDeviceGetMemoryInfo`
/// on a MIG device answers the MIG device's own framebuffer). Utilisation, clocks,
/// temperature and power belong to the whole GPU; NVML answers NOT_SUPPORTED for them on a
/// MIG device.
pub struct MigSensor {
    nvml: Arc<Nvml>,
    /// The parent GPU's NVML UUID (`None`: NVML does not see it) and the MIG device's index.
    parent: Option<String>,
    index: u32,
}

impl MigSensor {
    pub fn new(nvml: Arc<Nvml>, parent: &Gpu, mig: &MigDevice) -> Self {
        MigSensor {
            nvml,
            parent: parent.nvml_uuid.clone(),
            index: mig.index,
        }
    }

    /// The MIG device's framebuffer used and free, where NVML answers.
    pub fn read(&self) -> Reading {
        let Some(parent) = &self.parent else {
            return Reading::default();
        };
        let memory = self
            .nvml
            .device_by_uuid(parent.as_str())
            .and_then(|d| d.mig_device_by_index(self.index))
            .and_then(|m| nvml_raw::memory_info(&m));
        match memory {
            Ok(m) => Reading {
                framebuffer_used_mib: Some(m.used as f64 / MIB),
                framebuffer_free_mib: Some(m.free as f64 / MIB),
                ..Reading::default()
            },
            Err(_) => Reading::default(),
        }
    }
}
