//! Asking the driver for everything the report shows, in the order deviceQuery does.

use crate::cuda_error;
use crate::cuda_version::CudaVersion;
use crate::driver::{Driver, LoadError};

macro_rules! device_attributes {
    ($($field:ident = $number:literal, $name:literal;)*) => {
        /// The `cuDeviceGetAttribute` values a report needs, one field per attribute.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct DeviceAttributes {
            $(pub $field: i32,)*
        }

        impl DeviceAttributes {
            /// Queries every attribute through `get(number, name)`.
            fn query<E>(mut get: impl FnMut(i32, &'static str) -> Result<i32, E>) -> Result<Self, E> {
                Ok(DeviceAttributes { $($field: get($number, concat!("CU_DEVICE_ATTRIBUTE_", $name))?,)* })
            }
        }
    };
}

// Numbers from NVIDIA's `CUdevice_attribute` enum (all present in CUDA 10.x drivers).
device_attributes! {
    compute_capability_major = 75, "COMPUTE_CAPABILITY_MAJOR";
    compute_capability_minor = 76, "COMPUTE_CAPABILITY_MINOR";
    multiprocessor_count = 16, "MULTIPROCESSOR_COUNT";
    clock_rate_khz = 13, "CLOCK_RATE";
    memory_clock_rate_khz = 36, "MEMORY_CLOCK_RATE";
    global_memory_bus_width = 37, "GLOBAL_MEMORY_BUS_WIDTH";
    l2_cache_size = 38, "L2_CACHE_SIZE";
    max_texture_1d_width = 21, "MAXIMUM_TEXTURE1D_WIDTH";
    max_texture_2d_width = 22, "MAXIMUM_TEXTURE2D_WIDTH";
    max_texture_2d_height = 23, "MAXIMUM_TEXTURE2D_HEIGHT";
    max_texture_3d_width = 24, "MAXIMUM_TEXTURE3D_WIDTH";
    max_texture_3d_height = 25, "MAXIMUM_TEXTURE3D_HEIGHT";
    max_texture_3d_depth = 26, "MAXIMUM_TEXTURE3D_DEPTH";
    max_texture_1d_layered_width = 42, "MAXIMUM_TEXTURE1D_LAYERED_WIDTH";
    max_texture_1d_layered_layers = 43, "MAXIMUM_TEXTURE1D_LAYERED_LAYERS";
    max_texture_2d_layered_width = 27, "MAXIMUM_TEXTURE2D_LAYERED_WIDTH";
    max_texture_2d_layered_height = 28, "MAXIMUM_TEXTURE2D_LAYERED_HEIGHT";
    max_texture_2d_layered_layers = 29, "MAXIMUM_TEXTURE2D_LAYERED_LAYERS";
    total_constant_memory = 9, "TOTAL_CONSTANT_MEMORY";
    max_shared_memory_per_block = 8, "MAX_SHARED_MEMORY_PER_BLOCK";
    max_shared_memory_per_multiprocessor = 81, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR";
    max_registers_per_block = 12, "MAX_REGISTERS_PER_BLOCK";
    warp_size = 10, "WARP_SIZE";
    max_threads_per_multiprocessor = 39, "MAX_THREADS_PER_MULTIPROCESSOR";
    max_threads_per_block = 1, "MAX_THREADS_PER_BLOCK";
    max_block_dim_x = 2, "MAX_BLOCK_DIM_X";
    max_block_dim_y = 3, "MAX_BLOCK_DIM_Y";
    max_block_dim_z = 4, "MAX_BLOCK_DIM_Z";
    max_grid_dim_x = 5, "MAX_GRID_DIM_X";
    max_grid_dim_y = 6, "MAX_GRID_DIM_Y";
    max_grid_dim_z = 7, "MAX_GRID_DIM_Z";
    max_pitch = 11, "MAX_PITCH";
    texture_alignment = 14, "TEXTURE_ALIGNMENT";
    gpu_overlap = 15, "GPU_OVERLAP";
    async_engine_count = 40, "ASYNC_ENGINE_COUNT";
    kernel_exec_timeout = 17, "KERNEL_EXEC_TIMEOUT";
    integrated = 18, "INTEGRATED";
    can_map_host_memory = 19, "CAN_MAP_HOST_MEMORY";
    surface_alignment = 30, "SURFACE_ALIGNMENT";
    ecc_enabled = 32, "ECC_ENABLED";
    unified_addressing = 41, "UNIFIED_ADDRESSING";
    managed_memory = 83, "MANAGED_MEMORY";
    compute_preemption_supported = 90, "COMPUTE_PREEMPTION_SUPPORTED";
    cooperative_launch = 95, "COOPERATIVE_LAUNCH";
    cooperative_multi_device_launch = 96, "COOPERATIVE_MULTI_DEVICE_LAUNCH";
    pci_domain_id = 50, "PCI_DOMAIN_ID";
    pci_bus_id = 33, "PCI_BUS_ID";
    pci_device_id = 34, "PCI_DEVICE_ID";
    compute_mode = 20, "COMPUTE_MODE";
}

/// One device's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// CUDA ordinal.
    pub index: i32,
    pub name: String,
    pub total_memory_bytes: u64,
    /// From the optional `cuDeviceGetUuid(_v2)`; `None` on drivers without it.
    pub uuid: Option<[u8; 16]>,
    pub attributes: DeviceAttributes,
}

/// `cuDeviceCanAccessPeer(from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAccess {
    pub from: i32,
    pub to: i32,
    pub supported: bool,
}

/// A successful probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The soname that was loaded.
    pub library: &'static str,
    pub driver_version: CudaVersion,
    /// What `cuDeviceGetCount` returned (all devices, also with `--device`).
    pub device_count: i32,
    /// The devices queried: all of them, or the one `--device` selected.
    pub devices: Vec<Device>,
    /// Ordered pairs of P2P-capable devices (deviceQuery's section for 2+ GPUs).
    pub peer_access: Vec<PeerAccess>,
}

/// A failed driver call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailure {
    /// The call as a person would write it, e.g. `cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, device 0)`.
    pub call: String,
    pub code: i32,
    /// Driver enum name (`CUDA_ERROR_...`) when known.
    pub name: Option<String>,
    /// The runtime's text for the code (what deviceQuery prints), else the driver's.
    pub message: String,
}

/// Why there is no report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// libcuda could not be loaded or lacks a required entry point.
    Load(LoadError),
    /// `cuInit` or `cuDeviceGetCount` failed: deviceQuery's `cudaGetDeviceCount returned` path.
    Count {
        library: &'static str,
        driver_version: Option<CudaVersion>,
        failure: CallFailure,
    },
    /// A later call failed.
    Query {
        library: &'static str,
        driver_version: Option<CudaVersion>,
        device_count: i32,
        failure: CallFailure,
    },
    /// `--device N` names no device.
    NoSuchDevice {
        library: &'static str,
        driver_version: CudaVersion,
        device_count: i32,
        requested: u32,
    },
}

/// Probes the driver: all devices, or only `only_device`.
pub fn probe(only_device: Option<u32>) -> Result<Report, ProbeError> {
    load_and_probe(only_device).1
}

/// Like [`probe`], also returning the loaded driver (for the allocation checks that follow
/// the report); `None` when it could not be loaded.
pub fn load_and_probe(only_device: Option<u32>) -> (Option<Driver>, Result<Report, ProbeError>) {
    match Driver::load() {
        Ok(driver) => {
            let report = probe_loaded(&driver, only_device);
            (Some(driver), report)
        }
        Err(e) => (None, Err(ProbeError::Load(e))),
    }
}

fn probe_loaded(driver: &Driver, only_device: Option<u32>) -> Result<Report, ProbeError> {
    let library = driver.soname();
    let fail = |call: String, code: i32| failure(driver, call, code);
    // Fetched first so a JSON report can name the driver even when counting fails.
    let version = driver.driver_version().map(CudaVersion);
    let count_failed = |call: &str, code| ProbeError::Count {
        library,
        driver_version: version.ok(),
        failure: fail(call.to_string(), code),
    };
    driver
        .init()
        .map_err(|code| count_failed("cuInit(0)", code))?;
    let device_count = driver
        .device_count()
        .map_err(|code| count_failed("cuDeviceGetCount", code))?;
    let query_failed = |call: String, code| ProbeError::Query {
        library,
        driver_version: version.ok(),
        device_count,
        failure: fail(call, code),
    };
    let driver_version =
        version.map_err(|code| query_failed("cuDriverGetVersion".to_string(), code))?;

    let ordinals: Vec<i32> = match only_device {
        None => (0..device_count).collect(),
        Some(n) if i64::from(n) < i64::from(device_count) => vec![n as i32],
        Some(requested) => {
            return Err(ProbeError::NoSuchDevice {
                library,
                driver_version,
                device_count,
                requested,
            })
        }
    };
    let mut devices = Vec::with_capacity(ordinals.len());
    let mut handles = Vec::with_capacity(ordinals.len());
    for ordinal in ordinals {
        let handle = driver
            .device(ordinal)
            .map_err(|code| query_failed(format!("cuDeviceGet({ordinal})"), code))?;
        handles.push(handle);
        let name = driver
            .name(handle)
            .map_err(|code| query_failed(format!("cuDeviceGetName(device {ordinal})"), code))?;
        let total_memory_bytes = driver
            .total_mem(handle)
            .map_err(|code| query_failed(format!("cuDeviceTotalMem_v2(device {ordinal})"), code))?;
        let attributes = DeviceAttributes::query(|number, attribute| {
            driver.attribute(handle, number).map_err(|code| {
                query_failed(
                    format!("cuDeviceGetAttribute({attribute}, device {ordinal})"),
                    code,
                )
            })
        })?;
        let uuid = driver.uuid(handle);
        devices.push(Device {
            index: ordinal,
            name,
            total_memory_bytes,
            uuid,
            attributes,
        });
    }

    // deviceQuery's P2P section: only with all devices shown, only Fermi (2.x) or newer.
    let mut peer_access = Vec::new();
    if only_device.is_none() && device_count >= 2 {
        // Here devices[i] is ordinal i.
        let capable: Vec<usize> = (0..devices.len())
            .filter(|&i| devices[i].attributes.compute_capability_major >= 2)
            .collect();
        if capable.len() >= 2 {
            for &i in &capable {
                for &j in capable.iter().filter(|&&j| j != i) {
                    let (from, to) = (devices[i].index, devices[j].index);
                    let supported =
                        driver
                            .can_access_peer(handles[i], handles[j])
                            .map_err(|code| {
                                query_failed(format!("cuDeviceCanAccessPeer({from}, {to})"), code)
                            })?;
                    peer_access.push(PeerAccess {
                        from,
                        to,
                        supported,
                    });
                }
            }
        }
    }
    Ok(Report {
        library,
        driver_version,
        device_count,
        devices,
        peer_access,
    })
}

/// A failed call in words: the code's names from devicequery's table, else the driver's.
pub fn failure(driver: &Driver, call: String, code: i32) -> CallFailure {
    let name = cuda_error::driver_name(code)
        .map(str::to_string)
        .or_else(|| driver.error_name(code));
    let message = cuda_error::runtime_message(code)
        .map(str::to_string)
        .or_else(|| driver.error_string(code))
        .unwrap_or_else(|| cuda_error::UNRECOGNIZED.to_string());
    CallFailure {
        call,
        code,
        name,
        message,
    }
}

/// nvidia-smi's form: `GPU-` and the 16 bytes as 8-4-4-4-12 lower-case hex digits.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
