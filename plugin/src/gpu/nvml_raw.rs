//! The NVML calls MIG support needs that `nvml-wrapper` 0.13 (the newest) does not wrap:
//! the GPU / compute instance ids of a MIG device (`nvmlDeviceGetGpuInstanceId`,
//! `nvmlDeviceGetComputeInstanceId`) and the instance ids an XID event carries
//! (`nvmlEventData_t.gpuInstanceId` / `computeInstanceId`, which `EventSet::wait` drops).
//! Without them a MIG device's `/dev/nvidia-caps` nodes cannot be named and an XID cannot be
//! pinned on the MIG device it hit. And memory information on drivers before R510:
//! `Device::memory_info` calls `nvmlDeviceGetMemoryInfo_v2` only, which those drivers (R470,
//! still the branch of Kepler-era data-centre GPUs) lack; [`memory_info`] falls back to the
//! original `nvmlDeviceGetMemoryInfo`. This is the plugin's only `unsafe` code: it calls the
//! symbols through the table nvml-wrapper already loaded, on handles it created.
#![allow(unsafe_code)]

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::struct_wrappers::device::MemoryInfo;
use nvml_wrapper::{Device, EventSet, Nvml};
use nvml_wrapper_sys::bindings::{nvmlEventData_t, nvmlMemory_t};

/// NVML's "no instance" value in event data (a whole-GPU event).
const NO_INSTANCE: u32 = 0xFFFF_FFFF;

/// (GPU instance id, compute instance id) of a MIG device handle.
pub fn instance_ids(device: &Device) -> Result<(u32, u32), NvmlError> {
    let lib = device.nvml().lib();
    let gi_sym = nvml_sym(lib.nvmlDeviceGetGpuInstanceId.as_ref())?;
    let ci_sym = nvml_sym(lib.nvmlDeviceGetComputeInstanceId.as_ref())?;
    let (mut gi, mut ci) = (0u32, 0u32);
    // SAFETY: `handle()` is a live handle from this NVML instance (borrowed for the call),
    // the symbols come from the same library, and each writes one c_uint to a valid local.
    unsafe {
        let handle = device.handle();
        nvml_try(gi_sym(handle, &mut gi))?;
        nvml_try(ci_sym(handle, &mut ci))?;
    }
    Ok((gi, ci))
}

/// The device's memory: `nvmlDeviceGetMemoryInfo_v2` where the driver has it, else (drivers
/// before R510) `nvmlDeviceGetMemoryInfo`, whose `used` includes the memory the driver
/// reserves (`reserved` is then 0).
pub fn memory_info(device: &Device) -> Result<MemoryInfo, NvmlError> {
    match device.memory_info() {
        Err(NvmlError::FailedToLoadSymbol(_)) => {}
        other => return other,
    }
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetMemoryInfo.as_ref())?;
    let mut info = nvmlMemory_t {
        total: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: `handle()` is a live handle from this NVML instance (borrowed for the call), the
    // symbol comes from the same library and fills the three integers of a valid local.
    unsafe { nvml_try(sym(device.handle(), &mut info))? };
    Ok(MemoryInfo {
        free: info.free,
        reserved: 0,
        total: info.total,
        used: info.used,
        version: 1,
    })
}

/// One event from [`wait`].
pub struct RawEvent {
    /// UUID of the (physical) GPU the event is for; `None` if NVML cannot name it.
    pub gpu_uuid: Option<String>,
    pub event_type: EventTypes,
    /// The XID for a critical XID event.
    pub xid: u64,
    /// (GPU instance, compute instance) for an event on one MIG device.
    pub instance: Option<(u32, u32)>,
}

/// `nvmlEventSetWait_v2` keeping the instance ids.
pub fn wait(nvml: &Nvml, set: &EventSet, timeout_ms: u32) -> Result<RawEvent, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetWait_v2.as_ref())?;
    // SAFETY: nvmlEventData_t is a plain C struct (pointer and integers): all-zero is valid.
    let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set handle is live for the borrow of `set`; NVML fills `data`.
    unsafe { nvml_try(sym(set.handle(), &mut data, timeout_ms))? };
    // SAFETY: NVML set `data.device` to a handle of this NVML instance; the wrapper only
    // borrows it for the UUID query below.
    let device = unsafe { Device::new(data.device, nvml) };
    let instance = (data.gpuInstanceId != NO_INSTANCE && data.computeInstanceId != NO_INSTANCE)
        .then_some((data.gpuInstanceId, data.computeInstanceId));
    Ok(RawEvent {
        gpu_uuid: device.uuid().ok(),
        event_type: EventTypes::from_bits_truncate(data.eventType),
        xid: data.eventData,
        instance,
    })
}
