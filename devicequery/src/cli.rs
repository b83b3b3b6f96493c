//! Command line.

use clap::Parser;

use crate::checks::{ComputeCapability, Requirements};
use crate::limits::Mode;

/// `--version`: version, git commit and target triple.
pub const VERSION: &str = env!("EDGEGPU_LONG_VERSION");

const LONG_ABOUT: &str = "\
Reports the CUDA devices of this machine or container in the format of NVIDIA's deviceQuery \
sample, so tools and people that read deviceQuery output can read this too. It needs no CUDA \
runtime: it loads the CUDA driver library (libcuda.so.1, then libcuda.so) at run time, as injected \
into a container by the NVIDIA container runtime.

The text follows the deviceQuery release that matches the driver's CUDA version: below 11.0 the \
10.x layout, 11.0-11.2 adds the shared-memory-per-multiprocessor and managed-memory lines, from \
11.3 the zero-padded multiprocessor line, from 13.0 without the MultiDevice Co-op line.

For a container on a shared GPU, two allocation checks follow the report of the probed device \
(--device, default 0): --check-limits proves the memory limit the device plugin gave the \
container holds, --allocate-mib allocates and holds a working set (a check of two pods \
sharing a GPU runs one in each).";

const AFTER_LONG_HELP: &str = "\
Output:
  stdout carries the report; its last line is `Result = PASS` or `Result = FAIL`. Lines starting
  with `devicequery: ` are this tool's own explanations (never part of NVIDIA's sample output) and
  always come before the `Result = ...` line. With --check-limits or --allocate-mib, the report
  covers the probed device only and is followed by a section of the check's findings; a failed
  check is explained in a `devicequery: check failed: ...` line.

--check-limits:
  Reads the limit for the probed device: its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry (by CUDA
  ordinal or GPU UUID) and EDGEGPU_GPU_MEMORY_LIMIT_MIB, the lower of the two if both are set.
  Creates the device's primary context, prints cuMemGetInfo, then allocates in steps (64 MiB or
  a 32nd of the limit, halved after each refusal down to 1 MiB) up to the limit plus
  max(10 %, 64 MiB), frees everything and releases the context. PASS only when an allocation
  was refused with CUDA_ERROR_OUT_OF_MEMORY, something was allocated before, and at no time
  more than the limit. FAIL when no limit is given, EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED=false
  (the limit is accounting only), a variable is malformed, the limit is not below the device's
  memory, the context cannot be created (805: no MPS daemon behind CUDA_MPS_PIPE_DIRECTORY),
  more than the limit could be allocated, or an allocation failed with another error. Under MPS
  the limit includes the context's own memory, so less than the limit is allocatable.

--allocate-mib N [--hold-seconds S]:
  Creates the primary context, allocates N MiB in one cuMemAlloc, holds it S seconds (default
  0), frees it. PASS when the allocation succeeded; FAIL names the CUDA error (a container
  asking for more than its limit gets CUDA_ERROR_OUT_OF_MEMORY).

Deviation from deviceQuery:
  `CUDA Runtime Version` has no source without the CUDA runtime library; devicequery prints the
  driver's CUDA version there, so `CUDA Driver Version / Runtime Version` reads e.g. `12.4 / 12.4`.

Exit status:
  0  Result = PASS: the driver answered and every requested check passed
  1  Result = FAIL: no usable libcuda, no device, a failed driver call or a failed check
  2  invalid command line

Environment:
  LD_LIBRARY_PATH         searched for libcuda.so.1 / libcuda.so before the ld cache
  NVIDIA_VISIBLE_DEVICES  read by the NVIDIA container runtime: which GPUs it mounts
  CUDA_VISIBLE_DEVICES    read by the CUDA driver: which of the visible GPUs it reports

Environment of a container on a shared GPU (set by the device plugin's Allocate; printed by
--check-limits and --allocate-mib, read by --check-limits):
  CUDA_MPS_PIPE_DIRECTORY            the MPS daemon's pipe directory (only where MPS serves the GPU)
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT   <dev>=<size>[,...]: dev a CUDA ordinal or GPU UUID, size an
                                     integer with K/KB, M/MB or G/GB (binary units), e.g. 0=2048M
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE  the share of the GPU's threads (the device then reports
                                     fewer multiprocessors)
  EDGEGPU_GPU_MEMORY_LIMIT_MIB       the GPU memory (MiB) the plugin accounted to this container
  EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED  true, or false where no MPS runs (accounting only)

Jetson power mode:
  On a Jetson (a GPU devfreq directory or nvpmodel's files under --root), one line before the
  verdict says the power mode and the GPU clock ceiling the probe ran under, e.g.
  `devicequery: Jetson power mode MODE_30W (nvpmodel id 2); GPU clock ceiling 624 MHz, at
  306 MHz`. A pod sees the GPU's devfreq in its sysfs; the mode only where
  /var/lib/nvpmodel/status and /etc/nvpmodel.conf are mounted into it. Text output only.

A verification pod should run `devicequery --expect-devices 1`: deviceQuery itself passes with
zero devices. See docs/devicequery.md.";

#[derive(Debug, Parser)]
#[command(name = "devicequery", version = VERSION, about, long_about = LONG_ABOUT, after_long_help = AFTER_LONG_HELP)]
pub struct Cli {
    /// Print the report as one JSON document (schema_version 1, see docs/devicequery.md)
    /// instead of deviceQuery's text. The exit status is the same.
    #[arg(long)]
    pub json: bool,

    /// Query only the device with this CUDA ordinal (0-based) [default: all devices; 0 with
    /// --check-limits or --allocate-mib]. The device count and NumDevs still count every
    /// device; the peer-access section is left out.
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,

    /// Fail unless exactly N CUDA devices are detected [default: no check].
    #[arg(long, value_name = "N")]
    pub expect_devices: Option<u32>,

    /// Fail unless every queried device has at least this compute capability, e.g. 5.3 (Nano),
    /// 7.2 (Xavier), 8.7 (Orin) [default: no check]. Fails when there is no device.
    #[arg(long, value_name = "X.Y")]
    pub min_compute_capability: Option<ComputeCapability>,

    /// Fail unless every queried device has at least N MiB (1048576 bytes) of global memory
    /// [default: no check]. Fails when there is no device.
    #[arg(long, value_name = "N")]
    pub min_memory_mib: Option<u64>,

    /// After the report of the probed device (--device, default 0), check that the GPU memory
    /// limit set for this container holds: allocate up to and past it and expect
    /// CUDA_ERROR_OUT_OF_MEMORY before more than the limit is allocated (see --help).
    #[arg(long, conflicts_with = "allocate_mib")]
    pub check_limits: bool,

    /// After the report of the probed device (--device, default 0), allocate N MiB in one
    /// allocation; FAIL names the CUDA error when it is refused.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=u64::MAX >> 20))]
    pub allocate_mib: Option<u64>,

    /// With --allocate-mib: keep the memory allocated for S seconds before freeing it.
    #[arg(long, value_name = "S", requires = "allocate_mib")]
    pub hold_seconds: Option<u64>,

    /// Where a Jetson's power files are read: /etc/nvpmodel.conf, /var/lib/nvpmodel/status
    /// and the GPU's devfreq directory under /sys (a host root mounted into the pod, or a test
    /// tree).
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub root: std::path::PathBuf,
}

impl Cli {
    /// The allocation check asked for, if any.
    pub fn mode(&self) -> Option<Mode> {
        if self.check_limits {
            return Some(Mode::CheckLimits);
        }
        self.allocate_mib.map(|mib| Mode::Allocate {
            mib,
            hold_seconds: self.hold_seconds.unwrap_or(0),
        })
    }

    /// The device to probe: with an allocation check, one device (default 0).
    pub fn probed_device(&self) -> Option<u32> {
        match self.mode() {
            Some(_) => Some(self.device.unwrap_or(0)),
            None => self.device,
        }
    }

    pub fn requirements(&self) -> Requirements {
        Requirements {
            expect_devices: self.expect_devices,
            min_compute_capability: self.min_compute_capability,
            min_memory_mib: self.min_memory_mib,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_compute_capability_is_a_usage_error_naming_the_value() {
        let err =
            Cli::try_parse_from(["devicequery", "--min-compute-capability", "eight"]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("'eight' is not a compute capability"),
            "{text}"
        );
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn allocation_checks_probe_one_device() {
        let cli = Cli::try_parse_from(["devicequery", "--check-limits"]).unwrap();
        assert_eq!(cli.mode(), Some(Mode::CheckLimits));
        assert_eq!(cli.probed_device(), Some(0));
        let cli = Cli::try_parse_from([
            "devicequery",
            "--allocate-mib",
            "1500",
            "--hold-seconds",
            "30",
            "--device",
            "1",
        ])
        .unwrap();
        assert_eq!(
            cli.mode(),
            Some(Mode::Allocate {
                mib: 1500,
                hold_seconds: 30
            })
        );
        assert_eq!(cli.probed_device(), Some(1));
        assert_eq!(
            Cli::try_parse_from(["devicequery"])
                .unwrap()
                .probed_device(),
            None
        );
    }

    #[test]
    fn allocation_flags_that_make_no_sense_are_usage_errors() {
        for args in [
            &["devicequery", "--check-limits", "--allocate-mib", "1"][..],
            &["devicequery", "--hold-seconds", "5"],
            &["devicequery", "--allocate-mib", "0"],
        ] {
            let err = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }
}
