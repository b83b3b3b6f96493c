//! The `--json` report: the same facts as the text report in a stable document
//! (schema documented in docs/devicequery.md; bump [`SCHEMA_VERSION`] on any incompatible change).

use serde::Serialize;

use crate::checks::CheckOutcome;
use crate::cores::cores_per_sm;
use crate::cuda_error;
use crate::cuda_version::CudaVersion;
use crate::driver::LoadError;
use crate::limits::{LimitsReport, Mode};
// Re-exported at its former path; it lives with the device's UUID so that limits/ does not
// need this module.
pub use crate::probe::format_uuid;
use crate::probe::{Device, ProbeError, Report};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize)]
pub struct JsonReport {
    pub schema_version: u32,
    pub tool: &'static str,
    pub tool_version: &'static str,
    /// "PASS" or "FAIL", the same verdict as the text report's last line.
    pub result: &'static str,
    /// `null` when libcuda could not be used.
    pub driver: Option<JsonDriver>,
    /// `null` when counting failed.
    pub device_count: Option<i32>,
    pub devices: Vec<JsonDevice>,
    pub peer_access: Vec<JsonPeer>,
    pub checks: Vec<JsonCheck>,
    /// `null` on success of the probe (checks may still fail).
    pub error: Option<JsonError>,
    /// What `--check-limits` or `--allocate-mib` found; absent without them or when the probe
    /// failed (added in schema_version 1: older documents never have it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<JsonLimits>,
}

#[derive(Serialize)]
pub struct JsonLimits {
    /// The flag, e.g. `--check-limits` or `--allocate-mib 1500`.
    pub check: String,
    pub device: i32,
    /// Each variable read, `null` when unset.
    pub environment: serde_json::Map<String, serde_json::Value>,
    /// The device's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry (the lowest if several name it).
    pub mps_pinned_device_mem_limit_bytes: Option<u64>,
    pub accounted_memory_mib: Option<u64>,
    pub limit_enforced: Option<bool>,
    pub active_thread_percentage: Option<f64>,
    /// The limit `--check-limits` checked.
    pub limit_bytes: Option<u64>,
    /// As the device reports it to this process.
    pub multiprocessors: i32,
    /// cuMemGetInfo right after creating the context.
    pub memory_free_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// `--allocate-mib` only.
    pub requested_bytes: Option<u64>,
    pub hold_seconds: Option<u64>,
    /// The most allocated at once, and in how many allocations.
    pub allocated_bytes: u64,
    pub allocations: u32,
    /// The first failed allocation.
    pub refusal: Option<JsonRefusal>,
    pub passed: bool,
    pub message: String,
}

#[derive(Serialize)]
pub struct JsonRefusal {
    pub size_bytes: u64,
    pub allocated_before_bytes: u64,
    pub code: i32,
    pub name: Option<String>,
    pub message: String,
}

#[derive(Serialize)]
pub struct JsonDriver {
    /// The soname that was opened.
    pub library: &'static str,
    /// `null` when cuDriverGetVersion failed.
    pub cuda_version: Option<String>,
    pub cuda_version_number: Option<i32>,
}

#[derive(Serialize)]
pub struct JsonDevice {
    pub index: i32,
    pub name: String,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`; absent on drivers without cuDeviceGetUuid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    pub compute_capability: String,
    pub compute_capability_major: i32,
    pub compute_capability_minor: i32,
    pub total_memory_bytes: u64,
    pub total_memory_mib: u64,
    pub multiprocessors: i32,
    pub cuda_cores_per_multiprocessor: u32,
    /// false when the capability is not in the cores table and 128 was assumed.
    pub cuda_cores_per_multiprocessor_known: bool,
    pub cuda_cores: i64,
    pub clock_rate_khz: i32,
    pub memory_clock_rate_khz: i32,
    pub memory_bus_width_bits: i32,
    pub l2_cache_bytes: i32,
    pub max_texture_1d: i32,
    pub max_texture_2d: [i32; 2],
    pub max_texture_3d: [i32; 3],
    /// [width, layers]
    pub max_texture_1d_layered: [i32; 2],
    /// [width, height, layers]
    pub max_texture_2d_layered: [i32; 3],
    pub total_constant_memory_bytes: i32,
    pub shared_memory_per_block_bytes: i32,
    pub shared_memory_per_multiprocessor_bytes: i32,
    pub registers_per_block: i32,
    pub warp_size: i32,
    pub max_threads_per_multiprocessor: i32,
    pub max_threads_per_block: i32,
    pub max_block_dim: [i32; 3],
    pub max_grid_dim: [i32; 3],
    pub max_pitch_bytes: i32,
    pub texture_alignment_bytes: i32,
    pub concurrent_copy_and_execution: bool,
    pub async_engine_count: i32,
    pub kernel_exec_timeout: bool,
    pub integrated: bool,
    pub can_map_host_memory: bool,
    pub surface_alignment: bool,
    pub ecc_enabled: bool,
    pub unified_addressing: bool,
    pub managed_memory: bool,
    pub compute_preemption: bool,
    pub cooperative_launch: bool,
    pub cooperative_multi_device_launch: bool,
    pub pci: JsonPci,
    /// "default", "exclusive_thread", "prohibited", "exclusive_process" or "unknown".
    pub compute_mode: &'static str,
}

#[derive(Serialize)]
pub struct JsonPci {
    pub domain: i32,
    pub bus: i32,
    pub device: i32,
    /// `dddd:bb:dd.0`, the form cuDeviceGetPCIBusId uses.
    pub bus_id: String,
}

#[derive(Serialize)]
pub struct JsonPeer {
    pub from: i32,
    pub to: i32,
    pub supported: bool,
}

#[derive(Serialize)]
pub struct JsonCheck {
    pub check: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    pub passed: bool,
    pub message: String,
}

#[derive(Serialize)]
pub struct JsonError {
    /// "load", "count", "query" or "device".
    pub stage: &'static str,
    /// The code deviceQuery would print (35 when libcuda is unusable).
    pub code: i32,
    /// Driver enum name, `null` for 35 (a runtime-only code) and unknown codes.
    pub name: Option<String>,
    pub message: String,
    /// The failed call, or what went wrong while loading, in words.
    pub detail: String,
}

pub fn render(
    probe: &Result<Report, ProbeError>,
    checks: &[CheckOutcome],
    limits_found: Option<&LimitsReport>,
) -> JsonReport {
    let passed = probe.is_ok() && checks.iter().all(|c| c.passed);
    let mut report = JsonReport {
        schema_version: SCHEMA_VERSION,
        tool: "devicequery",
        tool_version: env!("CARGO_PKG_VERSION"),
        result: if passed { "PASS" } else { "FAIL" },
        driver: None,
        device_count: None,
        devices: Vec::new(),
        peer_access: Vec::new(),
        checks: checks
            .iter()
            .map(|c| JsonCheck {
                check: c.check.clone(),
                device: c.device,
                passed: c.passed,
                message: c.message.clone(),
            })
            .collect(),
        error: None,
        limits: limits_found.map(limits),
    };
    let driver = |library, version: Option<CudaVersion>| {
        Some(JsonDriver {
            library,
            cuda_version: version.map(|v| v.to_string()),
            cuda_version_number: version.map(|v| v.0),
        })
    };
    match probe {
        Ok(r) => {
            report.driver = driver(r.library, Some(r.driver_version));
            report.device_count = Some(r.device_count);
            report.devices = r.devices.iter().map(device).collect();
            report.peer_access = r
                .peer_access
                .iter()
                .map(|p| JsonPeer {
                    from: p.from,
                    to: p.to,
                    supported: p.supported,
                })
                .collect();
        }
        Err(ProbeError::Load(load)) => {
            report.error = Some(JsonError {
                stage: "load",
                code: cuda_error::INSUFFICIENT_DRIVER,
                name: None,
                message: cuda_error::runtime_message(cuda_error::INSUFFICIENT_DRIVER)
                    .unwrap_or_default()
                    .to_string(),
                detail: match load {
                    LoadError::NotLoadable(attempts) => {
                        format!("{load}; {}", crate::text::not_loadable_hint(attempts))
                    }
                    LoadError::MissingSymbol { .. } => load.to_string(),
                },
            });
        }
        Err(ProbeError::Count {
            library,
            driver_version,
            failure,
        }) => {
            report.driver = driver(library, *driver_version);
            report.error = Some(JsonError {
                stage: "count",
                code: failure.code,
                name: failure.name.clone(),
                message: failure.message.clone(),
                detail: format!("{} failed", failure.call),
            });
        }
        Err(ProbeError::Query {
            library,
            driver_version,
            device_count,
            failure,
        }) => {
            report.driver = driver(library, *driver_version);
            report.device_count = Some(*device_count);
            report.error = Some(JsonError {
                stage: "query",
                code: failure.code,
                name: failure.name.clone(),
                message: failure.message.clone(),
                detail: format!("{} failed", failure.call),
            });
        }
        Err(ProbeError::NoSuchDevice {
            library,
            driver_version,
            device_count,
            requested,
        }) => {
            report.driver = driver(library, Some(*driver_version));
            report.device_count = Some(*device_count);
            report.error = Some(JsonError {
                stage: "device",
                code: 101,
                name: Some("CUDA_ERROR_INVALID_DEVICE".to_string()),
                message: "invalid device ordinal".to_string(),
                detail: format!(
                    "--device {requested}: no such device ({device_count} CUDA device(s) detected)"
                ),
            });
        }
    }
    report
}

fn limits(l: &LimitsReport) -> JsonLimits {
    let settings = l.settings.clone().unwrap_or_default();
    let (requested_bytes, hold_seconds) = match l.mode {
        Mode::CheckLimits => (None, None),
        Mode::Allocate { mib, hold_seconds } => (Some(mib << 20), Some(hold_seconds)),
    };
    JsonLimits {
        check: l.mode.flag(),
        device: l.device,
        environment: l
            .environment
            .values
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone().into()))
            .collect(),
        mps_pinned_device_mem_limit_bytes: settings.mps_limit_bytes,
        accounted_memory_mib: settings.accounted_mib,
        limit_enforced: settings.enforced,
        active_thread_percentage: settings.active_thread_percentage,
        limit_bytes: l.limit_bytes,
        multiprocessors: l.multiprocessors,
        memory_free_bytes: l.memory_info.map(|(free, _)| free),
        memory_total_bytes: l.memory_info.map(|(_, total)| total),
        requested_bytes,
        hold_seconds,
        allocated_bytes: l.allocated_bytes,
        allocations: l.allocations,
        refusal: l.refusal.as_ref().map(|r| JsonRefusal {
            size_bytes: r.size_bytes,
            allocated_before_bytes: r.allocated_before_bytes,
            code: r.failure.code,
            name: r.failure.name.clone(),
            message: r.failure.message.clone(),
        }),
        passed: l.passed,
        message: l.message.clone(),
    }
}

fn device(d: &Device) -> JsonDevice {
    let a = &d.attributes;
    let cores = cores_per_sm(a.compute_capability_major, a.compute_capability_minor);
    JsonDevice {
        index: d.index,
        name: d.name.clone(),
        uuid: d.uuid.map(|u| format_uuid(&u)),
        compute_capability: format!(
            "{}.{}",
            a.compute_capability_major, a.compute_capability_minor
        ),
        compute_capability_major: a.compute_capability_major,
        compute_capability_minor: a.compute_capability_minor,
        total_memory_bytes: d.total_memory_bytes,
        total_memory_mib: d.total_memory_bytes / 1_048_576,
        multiprocessors: a.multiprocessor_count,
        cuda_cores_per_multiprocessor: cores.cores,
        cuda_cores_per_multiprocessor_known: cores.known,
        cuda_cores: i64::from(cores.cores) * i64::from(a.multiprocessor_count),
        clock_rate_khz: a.clock_rate_khz,
        memory_clock_rate_khz: a.memory_clock_rate_khz,
        memory_bus_width_bits: a.global_memory_bus_width,
        l2_cache_bytes: a.l2_cache_size,
        max_texture_1d: a.max_texture_1d_width,
        max_texture_2d: [a.max_texture_2d_width, a.max_texture_2d_height],
        max_texture_3d: [
            a.max_texture_3d_width,
            a.max_texture_3d_height,
            a.max_texture_3d_depth,
        ],
        max_texture_1d_layered: [
            a.max_texture_1d_layered_width,
            a.max_texture_1d_layered_layers,
        ],
        max_texture_2d_layered: [
            a.max_texture_2d_layered_width,
            a.max_texture_2d_layered_height,
            a.max_texture_2d_layered_layers,
        ],
        total_constant_memory_bytes: a.total_constant_memory,
        shared_memory_per_block_bytes: a.max_shared_memory_per_block,
        shared_memory_per_multiprocessor_bytes: a.max_shared_memory_per_multiprocessor,
        registers_per_block: a.max_registers_per_block,
        warp_size: a.warp_size,
        max_threads_per_multiprocessor: a.max_threads_per_multiprocessor,
        max_threads_per_block: a.max_threads_per_block,
        max_block_dim: [a.max_block_dim_x, a.max_block_dim_y, a.max_block_dim_z],
        max_grid_dim: [a.max_grid_dim_x, a.max_grid_dim_y, a.max_grid_dim_z],
        max_pitch_bytes: a.max_pitch,
        texture_alignment_bytes: a.texture_alignment,
        concurrent_copy_and_execution: a.gpu_overlap != 0,
        async_engine_count: a.async_engine_count,
        kernel_exec_timeout: a.kernel_exec_timeout != 0,
        integrated: a.integrated != 0,
        can_map_host_memory: a.can_map_host_memory != 0,
        surface_alignment: a.surface_alignment != 0,
        ecc_enabled: a.ecc_enabled != 0,
        unified_addressing: a.unified_addressing != 0,
        managed_memory: a.managed_memory != 0,
        compute_preemption: a.compute_preemption_supported != 0,
        cooperative_launch: a.cooperative_launch != 0,
        cooperative_multi_device_launch: a.cooperative_multi_device_launch != 0,
        pci: JsonPci {
            domain: a.pci_domain_id,
            bus: a.pci_bus_id,
            device: a.pci_device_id,
            bus_id: format!(
                "{:04x}:{:02x}:{:02x}.0",
                a.pci_domain_id, a.pci_bus_id, a.pci_device_id
            ),
        },
        compute_mode: match a.compute_mode {
            0 => "default",
            1 => "exclusive_thread",
            2 => "prohibited",
            3 => "exclusive_process",
            _ => "unknown",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_like_nvidia_smi() {
        let bytes = [
            0x7d, 0x3c, 0x91, 0x4e, 0x2a, 0x10, 0x5f, 0x6b, 0x8c, 0x0d, 0x11, 0x22, 0x33, 0x44,
            0x55, 0x66,
        ];
        assert_eq!(
            format_uuid(&bytes),
            "GPU-7d3c914e-2a10-5f6b-8c0d-112233445566"
        );
    }
}
