//! The NVML calls MIG support needs that `nvml-wrapper` 0.13 (the newest) does not wrap:
//! the GPU / compute instance ids of a MIG device (`nvmlDeviceGetGpuInstanceId`,
//! `nvmlDeviceGetComputeInstanceId`), the profile of its GPU instance
//! (`nvmlDeviceGetGpuInstanceById`, `nvmlGpuInstanceGetInfo`,
//! `nvmlDeviceGetGpuInstanceProfileInfo`) and the instance ids an XID event carries
//! (`nvmlEventData_t.gpuInstanceId` / `computeInstanceId`, which `EventSet::wait` drops).
//! Without them a MIG device's `/dev/nvidia-caps` nodes cannot be named, a `+me` profile
//! cannot be told from the plain one and an XID cannot be pinned on the MIG device it hit.
//! And memory information on drivers before R510: `Device::memory_info` calls
//! `nvmlDeviceGetMemoryInfo_v2` only, which those drivers (R470, still the branch of
//! Kepler-era data-centre GPUs) lack; [`memory_info`] falls back to the original
//! `nvmlDeviceGetMemoryInfo`. This is the plugin's only `unsafe` code: it calls the symbols
//! through the table nvml-wrapper already loaded, on handles it created.
#![allow(unsafe_code)]

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::struct_wrappers::device::MemoryInfo;
use nvml_wrapper::{Device, EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlEventData_t, nvmlGpuInstanceInfo_t, nvmlGpuInstanceProfileInfo_t, nvmlGpuInstance_t,
    nvmlMemory_t, NVML_GPU_INSTANCE_PROFILE_COUNT,
};

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

/// The `NVML_GPU_INSTANCE_PROFILE_*` constant of GPU instance `gi` of the MIG-enabled GPU
/// `parent`, found as go-nvlib does (`MigDevice.GetProfile`): the instance's profile id
/// (`nvmlGpuInstanceGetInfo`) is matched against the id of each profile constant the GPU
/// offers (`nvmlDeviceGetGpuInstanceProfileInfo`; a constant the GPU lacks answers
/// NOT_SUPPORTED or INVALID_ARGUMENT and is skipped). The ids are per GPU, not the constants.
pub fn gpu_instance_profile(parent: &Device, gi: u32) -> Result<u32, NvmlError> {
    let lib = parent.nvml().lib();
    let by_id = nvml_sym(lib.nvmlDeviceGetGpuInstanceById.as_ref())?;
    let info_sym = nvml_sym(lib.nvmlGpuInstanceGetInfo.as_ref())?;
    let profile_sym = nvml_sym(lib.nvmlDeviceGetGpuInstanceProfileInfo.as_ref())?;
    // SAFETY: `handle()` is a live handle of this NVML instance (borrowed for the calls); the
    // symbols come from the same library; each writes one handle or one plain C struct
    // (integers, a device handle) to a valid local, for which all-zero is a valid value. A
    // GPU instance handle needs no release (NVML owns it until the instance is destroyed).
    unsafe {
        let handle = parent.handle();
        let mut instance: nvmlGpuInstance_t = std::ptr::null_mut();
        nvml_try(by_id(handle, gi, &mut instance))?;
        let mut info: nvmlGpuInstanceInfo_t = std::mem::zeroed();
        nvml_try(info_sym(instance, &mut info))?;
        for profile in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
            let mut p: nvmlGpuInstanceProfileInfo_t = std::mem::zeroed();
            match nvml_try(profile_sym(handle, profile, &mut p)) {
                Ok(()) if p.id == info.profileId => return Ok(profile),
                Ok(()) | Err(NvmlError::NotSupported | NvmlError::InvalidArg) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Err(NvmlError::NotFound)
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

/// `nvmlEventSetWait_v2` keeping the instance ids. `set` must come from `nvml` (the same
/// loaded library and initialisation): the event's device handle is read through `nvml`.
/// `EventSet` does not expose its `Nvml`, so the caller keeps that promise; the health
/// thread creates its only set from the `Nvml` it passes here.
pub fn wait(nvml: &Nvml, set: &EventSet, timeout_ms: u32) -> Result<RawEvent, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetWait_v2.as_ref())?;
    // SAFETY: nvmlEventData_t is a plain C struct (pointer and integers): all-zero is valid.
    let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set handle is live for the borrow of `set`; NVML fills `data`.
    unsafe { nvml_try(sym(set.handle(), &mut data, timeout_ms))? };
    // SAFETY: NVML set `data.device` to a handle of this NVML instance (or left it null);
    // the wrapper only borrows it for the UUID query below. A null handle makes
    // nvmlDeviceGetUUID answer INVALID_ARGUMENT: `gpu_uuid` is then `None`, and the caller
    // treats the event as unattributed (it marks every device unhealthy, as NVIDIA's plugin).
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
