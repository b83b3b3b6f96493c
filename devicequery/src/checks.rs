//! Requirements a verification pod can put on the report (`--expect-devices`,
//! `--min-compute-capability`, `--min-memory-mib`).

use std::fmt;
use std::str::FromStr;

use crate::probe::Report;

/// A compute capability `major.minor` as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

impl FromStr for ComputeCapability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let invalid =
            || format!("'{s}' is not a compute capability: expected MAJOR.MINOR, e.g. 5.3 or 8.7");
        let (major, minor) = s.trim().split_once('.').ok_or_else(invalid)?;
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            part.parse::<u32>().map_err(|_| invalid())
        };
        Ok(ComputeCapability {
            major: number(major)?,
            minor: number(minor)?,
        })
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What the caller asked for; `None` means "not checked".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requirements {
    /// Exactly this many devices must be detected.
    pub expect_devices: Option<u32>,
    /// Every queried device must have at least this compute capability.
    pub min_compute_capability: Option<ComputeCapability>,
    /// Every queried device must have at least this much global memory (MiB = 1048576 bytes).
    pub min_memory_mib: Option<u64>,
}

/// The outcome of one check (on one device for the per-device checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutcome {
    /// The flag, e.g. `--expect-devices 1`.
    pub check: String,
    /// The device checked, for per-device checks.
    pub device: Option<i32>,
    pub passed: bool,
    /// What was found, in words.
    pub message: String,
}

/// Evaluates `requirements` against a successful probe. A per-device check with no device to
/// check fails: a verification pod that found no GPU has not verified anything.
pub fn evaluate(requirements: &Requirements, report: &Report) -> Vec<CheckOutcome> {
    let mut outcomes = Vec::new();
    if let Some(expected) = requirements.expect_devices {
        let found = report.device_count;
        outcomes.push(CheckOutcome {
            check: format!("--expect-devices {expected}"),
            device: None,
            passed: i64::from(found) == i64::from(expected),
            message: format!("expected {expected} CUDA device(s), found {found}"),
        });
    }
    if let Some(min) = requirements.min_compute_capability {
        let check = format!("--min-compute-capability {min}");
        if report.devices.is_empty() {
            outcomes.push(no_device(check.clone()));
        }
        for device in &report.devices {
            let (major, minor) = (
                device.attributes.compute_capability_major,
                device.attributes.compute_capability_minor,
            );
            let passed = (i64::from(major), i64::from(minor))
                >= (i64::from(min.major), i64::from(min.minor));
            outcomes.push(CheckOutcome {
                check: check.clone(),
                device: Some(device.index),
                passed,
                message: format!(
                    "device {} \"{}\" has compute capability {major}.{minor}, {} {min}",
                    device.index,
                    device.name,
                    if passed {
                        "at least"
                    } else {
                        "below the required"
                    }
                ),
            });
        }
    }
    if let Some(min) = requirements.min_memory_mib {
        let check = format!("--min-memory-mib {min}");
        if report.devices.is_empty() {
            outcomes.push(no_device(check.clone()));
        }
        for device in &report.devices {
            let mib = device.total_memory_bytes / 1_048_576;
            let passed = mib >= min;
            outcomes.push(CheckOutcome {
                check: check.clone(),
                device: Some(device.index),
                passed,
                message: format!(
                    "device {} \"{}\" has {mib} MiB of global memory, {} {min} MiB",
                    device.index,
                    device.name,
                    if passed {
                        "at least"
                    } else {
                        "less than the required"
                    }
                ),
            });
        }
    }
    outcomes
}

fn no_device(check: String) -> CheckOutcome {
    CheckOutcome {
        check,
        device: None,
        passed: false,
        message: "no CUDA device to check".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_compute_capability() {
        assert_eq!("8.7".parse(), Ok(ComputeCapability { major: 8, minor: 7 }));
        assert_eq!(
            "10.1".parse(),
            Ok(ComputeCapability {
                major: 10,
                minor: 1
            })
        );
        for bad in ["8", "8.", ".7", "8.7.1", "a.b", "-1.0", "8,7", ""] {
            let err = bad.parse::<ComputeCapability>().unwrap_err();
            assert!(err.contains("expected MAJOR.MINOR"), "{bad}: {err}");
        }
    }

    #[test]
    fn orders_by_major_then_minor() {
        let cc = |s: &str| s.parse::<ComputeCapability>().unwrap();
        assert!(cc("8.7") > cc("8.6"));
        assert!(cc("10.0") > cc("9.9"));
        assert!(cc("5.3") < cc("7.2"));
    }
}
