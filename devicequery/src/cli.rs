//! Command line.

use clap::Parser;

use crate::checks::{ComputeCapability, Requirements};

/// `--version`: version, git commit and target triple.
pub const VERSION: &str = env!("EDGEGPU_LONG_VERSION");

const LONG_ABOUT: &str = "\
Reports the CUDA devices of this machine or container in the format of NVIDIA's deviceQuery \
sample, so tools and people that read deviceQuery output can read this too. It needs no CUDA \
runtime: it loads the CUDA driver library (libcuda.so.1, then libcuda.so) at run time, as injected \
into a container by the NVIDIA container runtime.

The text follows the deviceQuery release that matches the driver's CUDA version: below 11.0 the \
10.x layout, 11.0-11.2 adds the shared-memory-per-multiprocessor and managed-memory lines, from \
11.3 the zero-padded multiprocessor line, from 13.0 without the MultiDevice Co-op line.";

const AFTER_LONG_HELP: &str = "\
Output:
  stdout carries the report; its last line is `Result = PASS` or `Result = FAIL`. Lines starting
  with `devicequery: ` are this tool's own explanations (never part of NVIDIA's sample output) and
  always come before the `Result = ...` line.

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

A verification pod should run `devicequery --expect-devices 1`: deviceQuery itself passes with
zero devices. See docs/devicequery.md.";

#[derive(Debug, Parser)]
#[command(name = "devicequery", version = VERSION, about, long_about = LONG_ABOUT, after_long_help = AFTER_LONG_HELP)]
pub struct Cli {
    /// Print the report as one JSON document (schema_version 1, see docs/devicequery.md)
    /// instead of deviceQuery's text. The exit status is the same.
    #[arg(long)]
    pub json: bool,

    /// Query only the device with this CUDA ordinal (0-based) [default: all devices]. The
    /// device count and NumDevs still count every device; the peer-access section is left out.
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
}

impl Cli {
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
}
