//! The allocation checks for a container on a shared GPU, run after the report:
//!
//! - `--check-limits`: does the memory limit the device plugin gave this container hold? It
//!   reads the limit from the environment the plugin's Allocate set, then allocates up to and
//!   past it; PASS only when the driver refused with CUDA_ERROR_OUT_OF_MEMORY before more than
//!   the limit was allocated.
//! - `--allocate-mib N`: allocate a working set and hold it (for contention checks between
//!   pods); PASS when it could be allocated.
//!
//! Under CUDA MPS a client's limit counts its context's own memory too (measured on an H100
//! 80GB HBM3, driver 580.159.04: ~514 MiB at 100 % threads, ~146 MiB at 25 %), so less than the
//! limit is allocatable; the sizes are binary units (`1000M` let a process reach 998 MiB).

use std::io::Write;
use std::time::Duration;

use crate::checks::CheckOutcome;
use crate::cuda_error;
use crate::driver::{ContextError, CuDevicePtr, Driver, PrimaryContext};
use crate::probe::format_uuid;
use crate::probe::{self, Device};

pub use settings::{
    mps_limit_for, parse_settings, parse_size, Environment, Settings, ACTIVE_THREAD_PERCENTAGE,
    MEMORY_LIMIT_ENFORCED, MEMORY_LIMIT_MIB, PINNED_DEVICE_MEM_LIMIT, PIPE_DIRECTORY, VARIABLES,
};

mod settings;

const MIB: u64 = 1 << 20;
/// The first allocations' size (at least; a 32nd of the limit for large limits).
const STEP: u64 = 64 * MIB;
/// CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: what an MPS client's thread percentage shrinks.
const MULTIPROCESSOR_COUNT: i32 = 16;

/// Which check runs after the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    CheckLimits,
    Allocate { mib: u64, hold_seconds: u64 },
}

impl Mode {
    /// The flag as the user gave it, e.g. `--allocate-mib 1500`.
    pub fn flag(self) -> String {
        match self {
            Mode::CheckLimits => "--check-limits".to_string(),
            Mode::Allocate { mib, .. } => format!("--allocate-mib {mib}"),
        }
    }
}

/// The driver's refusal of one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub size_bytes: u64,
    /// Allocated before this allocation was tried.
    pub allocated_before_bytes: u64,
    pub failure: probe::CallFailure,
}

/// What a check found (text is written while it runs; this is for JSON and the verdict).
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsReport {
    pub mode: Mode,
    pub device: i32,
    pub environment: Environment,
    /// `None` when a variable is malformed.
    pub settings: Option<Settings>,
    /// The limit `--check-limits` checked.
    pub limit_bytes: Option<u64>,
    /// As the device reports it to this process (after creating the context when it could).
    pub multiprocessors: i32,
    /// cuMemGetInfo (free, total) right after creating the context.
    pub memory_info: Option<(u64, u64)>,
    /// The most that was allocated at once.
    pub allocated_bytes: u64,
    pub allocations: u32,
    /// The first failed allocation.
    pub refusal: Option<Refusal>,
    pub passed: bool,
    /// The outcome in words.
    pub message: String,
}

impl LimitsReport {
    /// The outcome as one of the report's checks.
    pub fn outcome(&self) -> CheckOutcome {
        CheckOutcome {
            check: self.mode.flag(),
            device: Some(self.device),
            passed: self.passed,
            message: self.message.clone(),
        }
    }
}

/// `2048 MiB`, or `2048.50 MiB` when not whole.
pub fn mib(bytes: u64) -> String {
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.2} MiB", bytes as f64 / MIB as f64)
    }
}

/// Writes the lines of the check to `out` as it goes (a hanging driver call still shows how
/// far it got) and returns what it found.
pub fn run(
    mode: Mode,
    driver: &Driver,
    device: &Device,
    env: &Environment,
    out: &mut dyn Write,
) -> LimitsReport {
    let mut check = Check {
        out,
        report: LimitsReport {
            mode,
            device: device.index,
            environment: env.clone(),
            settings: None,
            limit_bytes: None,
            multiprocessors: device.attributes.multiprocessor_count,
            memory_info: None,
            allocated_bytes: 0,
            allocations: 0,
            refusal: None,
            passed: false,
            message: String::new(),
        },
    };
    let title = match mode {
        Mode::CheckLimits => "Memory limit check (--check-limits)",
        Mode::Allocate { .. } => "Allocation (--allocate-mib)",
    };
    check.line(&format!(
        "\n{title} on device {}: \"{}\"",
        device.index, device.name
    ));
    for (name, value) in &env.values {
        check.row(&format!("{name}:"), value.as_deref().unwrap_or("(not set)"));
    }
    match mode {
        Mode::CheckLimits => check_limits(&mut check, driver, device, env),
        Mode::Allocate { mib, hold_seconds } => {
            allocate(&mut check, driver, device, mib, hold_seconds)
        }
    }
    let _ = check.out.flush();
    check.report
}

struct Check<'o> {
    out: &'o mut dyn Write,
    report: LimitsReport,
}

impl Check<'_> {
    fn line(&mut self, text: &str) {
        // A closed stdout is noticed when the verdict is written.
        let _ = writeln!(self.out, "{text}");
    }

    fn row(&mut self, label: &str, value: impl std::fmt::Display) {
        let mut text = String::new();
        crate::text::row(&mut text, label, value);
        let _ = self.out.write_all(text.as_bytes());
    }

    fn fail(&mut self, message: String) {
        self.report.passed = false;
        self.report.message = message;
    }

    /// Fails before the context exists: the multiprocessors are the report's.
    fn fail_early(&mut self, message: String) {
        let multiprocessors = self.report.multiprocessors;
        self.row("Multiprocessors reported:", multiprocessors);
        self.fail(message);
    }

    fn pass(&mut self, message: String) {
        self.report.passed = true;
        self.report.message = message;
    }

    /// Creates the context, reports the multiprocessors and memory the process sees.
    fn context<'d>(&mut self, driver: &'d Driver, device: &Device) -> Option<PrimaryContext<'d>> {
        let context = match driver.retain_primary_context(device.index) {
            Ok(context) => context,
            Err(ContextError::Load(e)) => {
                self.fail(e.to_string());
                return None;
            }
            Err(ContextError::Call { call, code }) => {
                let failure =
                    probe::failure(driver, format!("{call}(device {})", device.index), code);
                let mut message = format!(
                    "{} failed with {}: {}",
                    failure.call,
                    code_words(&failure),
                    failure.message
                );
                if code == cuda_error::MPS_CONNECTION_FAILED {
                    let dir = self.report.environment.get(PIPE_DIRECTORY).unwrap_or("");
                    message.push_str(&format!(
                        "; {PIPE_DIRECTORY}={dir} but no MPS control daemon answers there: the \
                         device plugin's MPS daemon is not running, or the pipe directory is not \
                         mounted into this container"
                    ));
                }
                self.fail(message);
                return None;
            }
        };
        if let Ok(count) = driver.attribute(device.index, MULTIPROCESSOR_COUNT) {
            self.report.multiprocessors = count;
        }
        let multiprocessors = self.report.multiprocessors;
        self.row("Multiprocessors reported:", multiprocessors);
        match context.memory_info() {
            Ok((free, total)) => {
                self.report.memory_info = Some((free, total));
                self.row(
                    "cuMemGetInfo after creating the context:",
                    format_args!("{} free of {}", mib(free), mib(total)),
                );
            }
            Err(code) => {
                let failure = probe::failure(driver, "cuMemGetInfo_v2".to_string(), code);
                self.fail(format!(
                    "{} failed with {}: {}",
                    failure.call,
                    code_words(&failure),
                    failure.message
                ));
                return None;
            }
        }
        Some(context)
    }
}

fn code_words(failure: &probe::CallFailure) -> String {
    match &failure.name {
        Some(name) => format!("{} ({name})", failure.code),
        None => failure.code.to_string(),
    }
}

fn check_limits(check: &mut Check, driver: &Driver, device: &Device, env: &Environment) {
    let uuid = device.uuid.map(|u| format_uuid(&u));
    let settings = match parse_settings(env, device.index, uuid.as_deref()) {
        Ok(settings) => settings,
        Err(e) => return check.fail_early(e),
    };
    // The thread percentage is in its variable's row; its effect is the multiprocessor count.
    check.report.settings = Some(settings.clone());
    let Some(limit) = settings.limit_bytes() else {
        return check.fail_early(format!(
            "no memory limit was given for device {}: neither {PINNED_DEVICE_MEM_LIMIT} (an entry \
             for ordinal {}{}) nor {MEMORY_LIMIT_MIB} is set",
            device.index,
            device.index,
            uuid.as_deref()
                .map(|u| format!(" or {u}"))
                .unwrap_or_default()
        ));
    };
    check.report.limit_bytes = Some(limit);
    check.row(
        "Memory limit checked:",
        format_args!("{} ({limit} bytes)", mib(limit)),
    );
    if settings.enforced == Some(false) {
        return check.fail_early(format!(
            "{MEMORY_LIMIT_ENFORCED}=false: the {} limit is accounting only, not enforced: no MPS \
             serves this GPU, so nothing stops this container from allocating more",
            mib(limit)
        ));
    }
    if limit >= device.total_memory_bytes {
        return check.fail_early(format!(
            "the {} limit is not below the {} of device {}: a refusal could not tell the limit \
             from a full GPU",
            mib(limit),
            mib(device.total_memory_bytes),
            device.index
        ));
    }
    let Some(context) = check.context(driver, device) else {
        return;
    };
    probe_allocations(check, driver, &context, device.index, limit);
    // The verdict is in; a failing release changes nothing about it.
    let _ = context.release();
}

/// Allocates up to and past `limit` in steps, halving the step after each refusal, until a
/// 1 MiB allocation is refused, another error comes, or the total reached the limit plus a
/// margin (max(10 %, 64 MiB)).
fn probe_allocations(
    check: &mut Check,
    driver: &Driver,
    context: &PrimaryContext,
    device: i32,
    limit: u64,
) {
    let stop_at = limit.saturating_add((limit / 10).max(STEP));
    let mut step = (limit / 32 / MIB * MIB).max(STEP);
    let first_step = step;
    let mut pointers: Vec<CuDevicePtr> = Vec::new();
    let mut total = 0u64;
    let mut exceeded = false;
    let mut other_error: Option<(u64, probe::CallFailure)> = None;
    while total < stop_at {
        let size = step.min(stop_at - total);
        match context.alloc(size) {
            Ok(ptr) => {
                pointers.push(ptr);
                total += size;
                exceeded |= total > limit;
            }
            Err(code) => {
                let failure = probe::failure(driver, format!("cuMemAlloc_v2({size} bytes)"), code);
                if check.report.refusal.is_none() {
                    check.report.refusal = Some(Refusal {
                        size_bytes: size,
                        allocated_before_bytes: total,
                        failure: failure.clone(),
                    });
                }
                if code != cuda_error::OUT_OF_MEMORY {
                    other_error = Some((size, failure));
                    break;
                }
                if size <= MIB {
                    break;
                }
                step = (size / 2 / MIB * MIB).max(MIB);
            }
        }
    }
    check.report.allocated_bytes = total;
    check.report.allocations = pointers.len() as u32;
    match &check.report.refusal {
        Some(refusal) => {
            let refusal = refusal.clone();
            check.row(
                "Allocated until the first refusal:",
                format_args!(
                    "{} in steps of {}",
                    mib(refusal.allocated_before_bytes),
                    mib(first_step)
                ),
            );
            check.row(
                "First refusal:",
                format_args!(
                    "{}: {} {}",
                    mib(refusal.size_bytes),
                    code_words(&refusal.failure),
                    refusal.failure.message
                ),
            );
        }
        None => check.row("Refusals:", "none"),
    }
    check.row(
        "Allocated at most:",
        format_args!("{} in {} allocation(s)", mib(total), pointers.len()),
    );
    if let Ok((free, total_memory)) = context.memory_info() {
        check.row(
            "cuMemGetInfo at the most allocated:",
            format_args!("{} free of {}", mib(free), mib(total_memory)),
        );
    }
    // Freed one by one, not left to the context's release: a pod that runs other work after
    // the check must get its memory back either way.
    for ptr in pointers {
        let _ = context.free(ptr);
    }

    let refusal = check.report.refusal.clone();
    // The loop only ends without a refusal past the limit; `is_none` is for completeness.
    if exceeded || refusal.is_none() {
        return check.fail(format!(
            "the limit is not enforced: {} could be allocated on device {device}, more than the {} \
             limit",
            mib(total),
            mib(limit)
        ));
    }
    if let Some((size, failure)) = other_error {
        return check.fail(format!(
            "an allocation of {} on device {device} failed with {}: {}, not \
             CUDA_ERROR_OUT_OF_MEMORY: the refusal does not show the limit",
            mib(size),
            code_words(&failure),
            failure.message
        ));
    }
    match refusal {
        None => {}
        Some(_) if total == 0 => check.fail(format!(
            "nothing could be allocated on device {device} under the {} limit: even 1 MiB was \
             refused (the context may use more than the limit, or the GPU is full)",
            mib(limit)
        )),
        Some(r) => check.pass(format!(
            "device {device} refused an allocation of {} with CUDA_ERROR_OUT_OF_MEMORY after {}; \
             at most {} could be allocated, within the {} limit",
            mib(r.size_bytes),
            mib(r.allocated_before_bytes),
            mib(total),
            mib(limit)
        )),
    }
}

fn allocate(check: &mut Check, driver: &Driver, device: &Device, mib_requested: u64, hold: u64) {
    // Only shown (JSON): a malformed variable is --check-limits' business, not this check's.
    let uuid = device.uuid.map(|u| format_uuid(&u));
    check.report.settings =
        parse_settings(&check.report.environment, device.index, uuid.as_deref()).ok();
    let Some(context) = check.context(driver, device) else {
        return;
    };
    let bytes = mib_requested.saturating_mul(MIB);
    match context.alloc(bytes) {
        Ok(ptr) => {
            check.report.allocated_bytes = bytes;
            check.report.allocations = 1;
            check.row("Allocated:", mib(bytes));
            if let Ok((free, total)) = context.memory_info() {
                check.row(
                    "cuMemGetInfo after allocating:",
                    format_args!("{} free of {}", mib(free), mib(total)),
                );
            }
            if hold > 0 {
                check.row("Holding for:", format_args!("{hold} s"));
                let _ = check.out.flush();
                std::thread::sleep(Duration::from_secs(hold));
            }
            let _ = context.free(ptr);
            check.pass(format!(
                "allocated {} on device {} and held it for {hold} s",
                mib(bytes),
                device.index
            ));
        }
        Err(code) => {
            let failure = probe::failure(driver, format!("cuMemAlloc_v2({bytes} bytes)"), code);
            check.row(
                "Refused:",
                format_args!("{} {}", code_words(&failure), failure.message),
            );
            check.report.refusal = Some(Refusal {
                size_bytes: bytes,
                allocated_before_bytes: 0,
                failure: failure.clone(),
            });
            check.fail(format!(
                "allocating {} on device {} failed with {}: {}",
                mib(bytes),
                device.index,
                code_words(&failure),
                failure.message
            ));
        }
    }
    let _ = context.release();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mib_shows_fractions() {
        assert_eq!(mib(2048 * MIB), "2048 MiB");
        assert_eq!(mib(MIB + MIB / 2), "1.50 MiB");
    }
}
