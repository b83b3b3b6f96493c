//! The deviceQuery text report: same labels, order, units and alignment as NVIDIA's sample
//! (the release chosen by [`SampleLayout`]), plus devicequery's own explanation lines, always
//! before the final `Result = ...` line so `tail -1` stays the verdict.

use std::fmt::Write as _;

use crate::checks::CheckOutcome;
use crate::cores::{cores_per_sm, undefined_message};
use crate::cuda_error;
use crate::cuda_version::CudaVersion;
use crate::driver::LoadError;
use crate::layout::SampleLayout;
use crate::probe::{Device, ProbeError, Report};

/// Prefix of devicequery's own lines, so nobody mistakes them for the sample's.
pub const OWN_LINE_PREFIX: &str = "devicequery: ";

/// The first lines, printed before the driver is touched.
pub fn header(argv0: &str) -> String {
    format!("{argv0} Starting...\n\n CUDA Device Query (Runtime API) version (CUDART static linking)\n\n")
}

/// Everything after the header: [`report`], then [`verdict`].
pub fn body(probe: &Result<Report, ProbeError>, checks: &[CheckOutcome]) -> String {
    let mut out = report(probe);
    out.push_str(&verdict(probe, checks));
    out
}

/// The deviceQuery report, or deviceQuery's lines for the failure and their explanation.
pub fn report(probe: &Result<Report, ProbeError>) -> String {
    let mut out = String::new();
    match probe {
        Ok(report) => write_report(&mut out, report),
        Err(error) => write_failure(&mut out, error),
    }
    out
}

/// A line for each failed check, then `Result = PASS` or `Result = FAIL`.
pub fn verdict(probe: &Result<Report, ProbeError>, checks: &[CheckOutcome]) -> String {
    let mut out = String::new();
    let failed: Vec<&CheckOutcome> = checks.iter().filter(|c| !c.passed).collect();
    if probe.is_ok() {
        for check in &failed {
            own_line(
                &mut out,
                &format!("check failed: {}: {}", check.check, check.message),
            );
        }
    }
    out.push_str(if probe.is_ok() && failed.is_empty() {
        "Result = PASS\n"
    } else {
        "Result = FAIL\n"
    });
    out
}

fn own_line(out: &mut String, text: &str) {
    let _ = writeln!(out, "{OWN_LINE_PREFIX}{text}");
}

/// One of devicequery's own lines, prefixed and ended.
pub fn own_line_text(text: &str) -> String {
    let mut out = String::new();
    own_line(&mut out, text);
    out
}

/// A labelled line: two spaces, the label padded so the value starts at column 50.
pub(crate) fn row(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "  {label:<47}{value}");
}

fn yes_no(value: i32) -> &'static str {
    if value != 0 {
        "Yes"
    } else {
        "No"
    }
}

fn detected_line(out: &mut String, count: i32) {
    if count == 0 {
        out.push_str("There are no available device(s) that support CUDA\n");
    } else {
        let _ = writeln!(out, "Detected {count} CUDA Capable device(s)");
    }
}

fn write_report(out: &mut String, report: &Report) {
    detected_line(out, report.device_count);
    let layout = SampleLayout::for_driver(report.driver_version);
    for device in &report.devices {
        write_device(out, device, report.driver_version, layout);
    }
    for peer in &report.peer_access {
        let name = |index| {
            report
                .devices
                .iter()
                .find(|d| d.index == index)
                .map_or("", |d| d.name.as_str())
        };
        let _ = writeln!(
            out,
            "> Peer access from {} (GPU{}) -> {} (GPU{}) : {}",
            name(peer.from),
            peer.from,
            name(peer.to),
            peer.to,
            if peer.supported { "Yes" } else { "No" }
        );
    }
    // deviceQuery prints the versions fetched in its last device iteration: 0.0 with no device.
    let version = if report.devices.is_empty() {
        CudaVersion(0)
    } else {
        report.driver_version
    };
    let _ = writeln!(
        out,
        "\ndeviceQuery, CUDA Driver = CUDART, CUDA Driver Version = {version}, CUDA Runtime Version = {version}, NumDevs = {}",
        report.device_count
    );
}

/// The runtime version has no source without cudart: the driver version stands in for it.
fn write_device(out: &mut String, device: &Device, driver: CudaVersion, layout: SampleLayout) {
    let a = &device.attributes;
    let _ = writeln!(out, "\nDevice {}: \"{}\"", device.index, device.name);
    row(
        out,
        "CUDA Driver Version / Runtime Version",
        format_args!("{driver} / {driver}"),
    );
    row(
        out,
        "CUDA Capability Major/Minor version number:",
        format_args!(
            "{}.{}",
            a.compute_capability_major, a.compute_capability_minor
        ),
    );
    // `%.0f` of (float)bytes / 1048576.0f, in single precision like the sample.
    let mbytes = device.total_memory_bytes as f32 / 1_048_576.0_f32;
    row(
        out,
        "Total amount of global memory:",
        format_args!("{mbytes:.0} MBytes ({} bytes)", device.total_memory_bytes),
    );

    // helper_cuda.h looks the capability up twice (cores per SM, then the product), warning each time.
    let cores = cores_per_sm(a.compute_capability_major, a.compute_capability_minor);
    if !cores.known {
        let warning = undefined_message(
            a.compute_capability_major,
            a.compute_capability_minor,
            cores.cores,
        );
        let _ = writeln!(out, "{warning}\n{warning}");
    }
    let total_cores = i64::from(cores.cores) * i64::from(a.multiprocessor_count);
    if layout.zero_padded_sm_line {
        let _ = writeln!(
            out,
            "  ({:03}) Multiprocessors, ({:03}) CUDA Cores/MP:    {total_cores} CUDA Cores",
            a.multiprocessor_count, cores.cores
        );
    } else {
        let _ = writeln!(
            out,
            "  ({:2}) Multiprocessors, ({:3}) CUDA Cores/MP:     {total_cores} CUDA Cores",
            a.multiprocessor_count, cores.cores
        );
    }
    // Clocks are kHz; the sample scales them in float (clockRate * 1e-3f).
    let clock = a.clock_rate_khz as f32;
    row(
        out,
        "GPU Max Clock rate:",
        format_args!("{:.0} MHz ({:.2} GHz)", clock * 1e-3_f32, clock * 1e-6_f32),
    );
    row(
        out,
        "Memory Clock rate:",
        format_args!("{:.0} Mhz", a.memory_clock_rate_khz as f32 * 1e-3_f32),
    );
    row(
        out,
        "Memory Bus Width:",
        format_args!("{}-bit", a.global_memory_bus_width),
    );
    if a.l2_cache_size != 0 {
        row(
            out,
            "L2 Cache Size:",
            format_args!("{} bytes", a.l2_cache_size),
        );
    }
    row(
        out,
        "Maximum Texture Dimension Size (x,y,z)",
        format_args!(
            "1D=({}), 2D=({}, {}), 3D=({}, {}, {})",
            a.max_texture_1d_width,
            a.max_texture_2d_width,
            a.max_texture_2d_height,
            a.max_texture_3d_width,
            a.max_texture_3d_height,
            a.max_texture_3d_depth
        ),
    );
    row(
        out,
        "Maximum Layered 1D Texture Size, (num) layers",
        format_args!(
            "1D=({}), {} layers",
            a.max_texture_1d_layered_width, a.max_texture_1d_layered_layers
        ),
    );
    row(
        out,
        "Maximum Layered 2D Texture Size, (num) layers",
        format_args!(
            "2D=({}, {}), {} layers",
            a.max_texture_2d_layered_width,
            a.max_texture_2d_layered_height,
            a.max_texture_2d_layered_layers
        ),
    );
    row(
        out,
        "Total amount of constant memory:",
        format_args!("{} bytes", a.total_constant_memory),
    );
    row(
        out,
        "Total amount of shared memory per block:",
        format_args!("{} bytes", a.max_shared_memory_per_block),
    );
    if layout.shared_memory_per_sm_and_managed_memory {
        row(
            out,
            "Total shared memory per multiprocessor:",
            format_args!("{} bytes", a.max_shared_memory_per_multiprocessor),
        );
    }
    row(
        out,
        "Total number of registers available per block:",
        a.max_registers_per_block,
    );
    row(out, "Warp size:", a.warp_size);
    row(
        out,
        "Maximum number of threads per multiprocessor:",
        a.max_threads_per_multiprocessor,
    );
    row(
        out,
        "Maximum number of threads per block:",
        a.max_threads_per_block,
    );
    // These two labels are 45 characters and one space: the `(` sits at column 49, as in the sample.
    let _ = writeln!(
        out,
        "  Max dimension size of a thread block (x,y,z): ({}, {}, {})",
        a.max_block_dim_x, a.max_block_dim_y, a.max_block_dim_z
    );
    let _ = writeln!(
        out,
        "  Max dimension size of a grid size    (x,y,z): ({}, {}, {})",
        a.max_grid_dim_x, a.max_grid_dim_y, a.max_grid_dim_z
    );
    row(
        out,
        "Maximum memory pitch:",
        format_args!("{} bytes", a.max_pitch),
    );
    row(
        out,
        "Texture alignment:",
        format_args!("{} bytes", a.texture_alignment),
    );
    row(
        out,
        "Concurrent copy and kernel execution:",
        format_args!(
            "{} with {} copy engine(s)",
            yes_no(a.gpu_overlap),
            a.async_engine_count
        ),
    );
    row(
        out,
        "Run time limit on kernels:",
        yes_no(a.kernel_exec_timeout),
    );
    row(
        out,
        "Integrated GPU sharing Host Memory:",
        yes_no(a.integrated),
    );
    row(
        out,
        "Support host page-locked memory mapping:",
        yes_no(a.can_map_host_memory),
    );
    row(
        out,
        "Alignment requirement for Surfaces:",
        yes_no(a.surface_alignment),
    );
    row(
        out,
        "Device has ECC support:",
        if a.ecc_enabled != 0 {
            "Enabled"
        } else {
            "Disabled"
        },
    );
    row(
        out,
        "Device supports Unified Addressing (UVA):",
        yes_no(a.unified_addressing),
    );
    if layout.shared_memory_per_sm_and_managed_memory {
        row(
            out,
            "Device supports Managed Memory:",
            yes_no(a.managed_memory),
        );
    }
    row(
        out,
        "Device supports Compute Preemption:",
        yes_no(a.compute_preemption_supported),
    );
    row(
        out,
        "Supports Cooperative Kernel Launch:",
        yes_no(a.cooperative_launch),
    );
    if layout.multi_device_cooperative_launch {
        row(
            out,
            "Supports MultiDevice Co-op Kernel Launch:",
            yes_no(a.cooperative_multi_device_launch),
        );
    }
    row(
        out,
        "Device PCI Domain ID / Bus ID / location ID:",
        format_args!(
            "{} / {} / {}",
            a.pci_domain_id, a.pci_bus_id, a.pci_device_id
        ),
    );
    let _ = writeln!(
        out,
        "  Compute Mode:\n     < {} >",
        compute_mode_text(a.compute_mode)
    );
}

/// deviceQuery's `sComputeMode` strings, by `CU_DEVICE_ATTRIBUTE_COMPUTE_MODE` value.
pub fn compute_mode_text(mode: i32) -> &'static str {
    match mode {
        0 => "Default (multiple host threads can use ::cudaSetDevice() with device simultaneously)",
        1 => "Exclusive (only one host thread in one process is able to use ::cudaSetDevice() with this device)",
        2 => "Prohibited (no host thread can use ::cudaSetDevice() with this device)",
        3 => "Exclusive Process (many threads in one process is able to use ::cudaSetDevice() with this device)",
        _ => "Unknown",
    }
}

fn write_failure(out: &mut String, error: &ProbeError) {
    match error {
        ProbeError::Load(load) => {
            count_failed(
                out,
                cuda_error::INSUFFICIENT_DRIVER,
                cuda_error::runtime_message(35).unwrap_or_default(),
            );
            match load {
                LoadError::NotLoadable(attempts) => {
                    for (_, why) in attempts {
                        own_line(out, &format!("cannot load the CUDA driver: {why}"));
                    }
                    own_line(out, &not_loadable_hint(attempts));
                }
                LoadError::MissingSymbol { .. } => own_line(out, &load.to_string()),
            }
        }
        ProbeError::Count {
            library, failure, ..
        } => {
            count_failed(out, failure.code, &failure.message);
            own_line(
                out,
                &format!(
                    "{} in {library} failed with {}",
                    failure.call,
                    code_words(failure.code, &failure.name)
                ),
            );
            if let Some(hint) = hint(failure.code, library) {
                own_line(out, &hint);
            }
        }
        ProbeError::Query {
            device_count,
            failure,
            ..
        } => {
            detected_line(out, *device_count);
            own_line(
                out,
                &format!(
                    "{} failed with {}: {}",
                    failure.call,
                    code_words(failure.code, &failure.name),
                    failure.message
                ),
            );
        }
        ProbeError::NoSuchDevice {
            device_count,
            requested,
            ..
        } => {
            detected_line(out, *device_count);
            own_line(
                out,
                &format!(
                    "--device {requested}: no such device ({device_count} CUDA device(s) detected; ordinals start at 0)"
                ),
            );
        }
    }
}

/// Why no libcuda could be loaded, in the words an operator needs: missing entirely (no NVIDIA
/// runtime) or present but unloadable (most often a glibc older than the driver's).
pub fn not_loadable_hint(attempts: &[(String, String)]) -> String {
    let missing = |why: &str| why.contains("No such file or directory");
    if attempts.iter().all(|(_, why)| missing(why)) {
        "the CUDA driver is not visible in this container: the pod was probably not started \
         with the NVIDIA runtime (set runtimeClassName: nvidia, or make nvidia the default \
         runtime, and request nvidia.com/gpu so NVIDIA_VISIBLE_DEVICES is set)"
            .to_string()
    } else {
        "the CUDA driver library is present but could not be loaded (see above): a \
         `GLIBC_2.xx' not found` means this image's glibc is older than the one the driver was \
         built for"
            .to_string()
    }
}

/// deviceQuery's own failure lines.
fn count_failed(out: &mut String, code: i32, message: &str) {
    let _ = writeln!(out, "cudaGetDeviceCount returned {code}\n-> {message}");
}

fn code_words(code: i32, name: &Option<String>) -> String {
    match name {
        Some(name) => format!("{code} ({name})"),
        None => code.to_string(),
    }
}

/// What to look at next, for the failures people meet in clusters.
fn hint(code: i32, library: &str) -> Option<String> {
    match code {
        cuda_error::STUB_LIBRARY => Some(format!(
            "{library} is the CUDA toolkit's stub library, not the driver: remove the toolkit's stubs \
             directory from LD_LIBRARY_PATH or the ld cache so the driver's libcuda.so.1 is found"
        )),
        cuda_error::NO_DEVICE => Some(
            "the driver is loaded but sees no GPU: check that the pod requested nvidia.com/gpu, that \
             NVIDIA_VISIBLE_DEVICES is not void/none, and that the GPU device nodes (/dev/nvidia* or, \
             on Jetson, /dev/nvhost-* and /dev/nvmap) are present in the container"
                .to_string(),
        ),
        802 => Some(
            "the driver reports the system as not yet initialized: on NVSwitch systems (HGX/DGX) \
             start nvidia-fabricmanager on the host"
                .to_string(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labelled_values_start_at_column_50() {
        let mut out = String::new();
        row(&mut out, "Warp size:", 32);
        row(
            &mut out,
            "Total number of registers available per block:",
            65536,
        );
        for line in out.lines() {
            let value_start = line.find(|c: char| c.is_ascii_digit()).unwrap();
            assert_eq!(value_start, 49, "{line:?}"); // 0-based 49 = column 50
        }
    }

    #[test]
    fn floats_round_like_printf() {
        // printf rounds the exact binary value half to even; so does Rust's formatter.
        assert_eq!(format!("{:.0}", 15388.5_f32), "15388"); // Orin NX 16 GB: 16136011776 bytes
        assert_eq!(format!("{:.0}", 1312.5_f32), "1312");
        assert_eq!(format!("{:.0}", 921.6_f32), "922");
        assert_eq!(format!("{:.2}", 921_600_f32 * 1e-6_f32), "0.92");
        assert_eq!(format!("{:.0}", 12_750_f32 * 1e-3_f32), "13"); // Nano memory clock
    }

    #[test]
    fn load_hint_tells_missing_from_unloadable() {
        let not_found = |name: &str| {
            (
                name.to_string(),
                format!("{name}: cannot open shared object file: No such file or directory"),
            )
        };
        let missing = not_loadable_hint(&[not_found("libcuda.so.1"), not_found("libcuda.so")]);
        assert!(missing.contains("runtimeClassName: nvidia"), "{missing}");
        let too_new = (
            "libcuda.so.1".to_string(),
            "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by libcuda.so.1)"
                .to_string(),
        );
        let unloadable = not_loadable_hint(&[too_new, not_found("libcuda.so")]);
        assert!(unloadable.contains("glibc is older"), "{unloadable}");
        assert!(!unloadable.contains("runtimeClassName"), "{unloadable}");
    }

    #[test]
    fn hints_for_the_failures_met_in_clusters() {
        assert!(hint(34, "libcuda.so")
            .unwrap()
            .starts_with("libcuda.so is the CUDA toolkit's stub"));
        assert!(hint(100, "libcuda.so.1")
            .unwrap()
            .contains("nvidia.com/gpu"));
        assert!(hint(802, "libcuda.so.1")
            .unwrap()
            .contains("nvidia-fabricmanager"));
        assert_eq!(hint(999, "libcuda.so.1"), None);
    }

    #[test]
    fn compute_modes() {
        assert!(compute_mode_text(0).starts_with("Default"));
        assert!(compute_mode_text(3).starts_with("Exclusive Process"));
        assert_eq!(compute_mode_text(7), "Unknown");
        assert_eq!(compute_mode_text(-1), "Unknown");
    }
}
