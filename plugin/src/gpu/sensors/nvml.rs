//! Discrete GPUs' sensors through NVML (the queries dcgm-exporter's default fields map to).
//! An NVML error (`NOT_SUPPORTED`, a lost GPU) leaves the value out.

use std::sync::Arc;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::Reading;

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
            .map(|uuid| read_device(self.nvml.device_by_uuid(uuid.as_str()), true))
            .collect()
    }
}

/// What NVML answers for `device`; `framebuffer` asks for dedicated memory too (not on an
/// integrated GPU, whose memory is the system's).
pub(super) fn read_device(device: Result<Device<'_>, NvmlError>, framebuffer: bool) -> Reading {
    let Ok(device) = device else {
        return Reading::default();
    };
    let memory = if framebuffer {
        device.memory_info().ok()
    } else {
        None
    };
    Reading {
        utilization_percent: device.utilization_rates().ok().map(|u| f64::from(u.gpu)),
        sm_clock_mhz: device.clock_info(Clock::SM).ok().map(f64::from),
        memory_clock_mhz: device.clock_info(Clock::Memory).ok().map(f64::from),
        temperature_celsius: device
            .temperature(TemperatureSensor::Gpu)
            .ok()
            .map(f64::from),
        power_watts: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        framebuffer_used_mib: memory.as_ref().map(|m| m.used as f64 / MIB),
        framebuffer_free_mib: memory.as_ref().map(|m| m.free as f64 / MIB),
        ..Reading::default()
    }
}
