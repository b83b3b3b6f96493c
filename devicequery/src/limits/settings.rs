//! What the checks read: the limits the device plugin's Allocate put in the container's
//! environment (MPS's own variables and edgegpu's), parsed with the errors naming the variable
//! and the bad part.

pub const PIPE_DIRECTORY: &str = "CUDA_MPS_PIPE_DIRECTORY";
pub const PINNED_DEVICE_MEM_LIMIT: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
pub const ACTIVE_THREAD_PERCENTAGE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
pub const MEMORY_LIMIT_MIB: &str = "EDGEGPU_GPU_MEMORY_LIMIT_MIB";
pub const MEMORY_LIMIT_ENFORCED: &str = "EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED";

/// The variables the checks read, in the order they are printed.
pub const VARIABLES: [&str; 5] = [
    PIPE_DIRECTORY,
    PINNED_DEVICE_MEM_LIMIT,
    ACTIVE_THREAD_PERCENTAGE,
    MEMORY_LIMIT_MIB,
    MEMORY_LIMIT_ENFORCED,
];

const MIB: u64 = 1 << 20;

/// The variables as found; `None` when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    pub values: Vec<(&'static str, Option<String>)>,
}

impl Environment {
    pub fn from_process() -> Environment {
        Environment::from_lookup(|name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    pub fn from_lookup(mut lookup: impl FnMut(&str) -> Option<String>) -> Environment {
        Environment {
            values: VARIABLES.iter().map(|&name| (name, lookup(name))).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// What the variables say for one device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// The lowest CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry naming the device (ordinal or UUID).
    pub mps_limit_bytes: Option<u64>,
    /// EDGEGPU_GPU_MEMORY_LIMIT_MIB: what the plugin accounted to this container.
    pub accounted_mib: Option<u64>,
    /// EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED.
    pub enforced: Option<bool>,
    /// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
    pub active_thread_percentage: Option<f64>,
}

impl Settings {
    /// The limit to check: the lower of the MPS limit and the accounted memory, since the
    /// container must stay within both.
    pub fn limit_bytes(&self) -> Option<u64> {
        let accounted = self.accounted_mib.map(|m| m.saturating_mul(MIB));
        match (self.mps_limit_bytes, accounted) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// An MPS memory size: an integer with `K`/`KB`, `M`/`MB` or `G`/`GB`, binary units (measured
/// on an H100 80GB HBM3, driver 580.159.04: `1000M` let a process reach 998 MiB, `300MB` 300 MiB).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let shift = match unit {
        "K" | "KB" => 10,
        "M" | "MB" => 20,
        "G" | "GB" => 30,
        _ => {
            return Err(format!(
                "'{text}' is not a size: expected an integer with K, KB, M, MB, G or GB, e.g. 2048M"
            ))
        }
    };
    let value: u64 = number.parse().map_err(|_| {
        format!(
            "'{text}' is not a size: expected an integer with K, KB, M, MB, G or GB, e.g. 2048M"
        )
    })?;
    value
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// The lowest limit CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (`<dev>=<size>[,...]`) gives the device
/// with `ordinal` and `uuid` (`GPU-...`); an error names the malformed entry.
pub fn mps_limit_for(list: &str, ordinal: i32, uuid: Option<&str>) -> Result<Option<u64>, String> {
    let mut lowest: Option<u64> = None;
    for entry in list.split(',') {
        let (id, size) = entry.split_once('=').ok_or_else(|| {
            format!("entry '{entry}' is not <device>=<size> (device: CUDA ordinal or GPU UUID)")
        })?;
        if id.is_empty() || id.contains(char::is_whitespace) {
            return Err(format!(
                "entry '{entry}': '{id}' is not a device (a CUDA ordinal or GPU UUID)"
            ));
        }
        let bytes = parse_size(size).map_err(|e| format!("entry '{entry}': {e}"))?;
        let names_device = if id.bytes().all(|b| b.is_ascii_digit()) {
            id.parse::<i64>().ok() == Some(i64::from(ordinal))
        } else {
            uuid.is_some_and(|u| u.eq_ignore_ascii_case(id))
        };
        if names_device {
            lowest = Some(lowest.map_or(bytes, |l| l.min(bytes)));
        }
    }
    Ok(lowest)
}

/// Reads the settings for the device; an error names the variable and its bad part.
pub fn parse_settings(
    env: &Environment,
    ordinal: i32,
    uuid: Option<&str>,
) -> Result<Settings, String> {
    let mut settings = Settings::default();
    if let Some(list) = env.get(PINNED_DEVICE_MEM_LIMIT) {
        settings.mps_limit_bytes = mps_limit_for(list, ordinal, uuid)
            .map_err(|e| format!("{PINNED_DEVICE_MEM_LIMIT}={list}: {e}"))?;
    }
    if let Some(mib) = env.get(MEMORY_LIMIT_MIB) {
        let valid = !mib.is_empty() && mib.bytes().all(|b| b.is_ascii_digit());
        match mib.parse::<u64>() {
            Ok(n) if valid && n > 0 => settings.accounted_mib = Some(n),
            _ => {
                return Err(format!(
                    "{MEMORY_LIMIT_MIB}={mib}: '{mib}' is not a positive number of MiB"
                ))
            }
        }
    }
    if let Some(enforced) = env.get(MEMORY_LIMIT_ENFORCED) {
        settings.enforced = Some(match enforced {
            "true" => true,
            "false" => false,
            _ => {
                return Err(format!(
                    "{MEMORY_LIMIT_ENFORCED}={enforced}: '{enforced}' is neither true nor false"
                ))
            }
        });
    }
    if let Some(pct) = env.get(ACTIVE_THREAD_PERCENTAGE) {
        // Digits and a point only: f64's parser would also take `inf`, `NaN` and `1e2`.
        let plain = pct.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        match pct.parse::<f64>() {
            Ok(p) if plain && p > 0.0 && p <= 100.0 => settings.active_thread_percentage = Some(p),
            _ => {
                return Err(format!(
                    "{ACTIVE_THREAD_PERCENTAGE}={pct}: '{pct}' is not a percentage in (0, 100]"
                ))
            }
        }
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "GPU-8225d642-a9b1-8191-0d08-79221b703a12";

    #[test]
    fn sizes_are_binary_units() {
        assert_eq!(parse_size("1000M"), Ok(1000 * MIB));
        assert_eq!(parse_size("300MB"), Ok(300 * MIB));
        assert_eq!(parse_size("2G"), Ok(2048 * MIB));
        assert_eq!(parse_size("2GB"), Ok(2048 * MIB));
        assert_eq!(parse_size("512K"), Ok(512 * 1024));
        assert_eq!(parse_size("512KB"), Ok(512 * 1024));
        for bad in [
            "",
            "M",
            "2048",
            "2048m",
            "2 G",
            "-1G",
            "1.5G",
            "2T",
            "99999999999999999999G",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert!(parse_size("2Q").unwrap_err().contains("'2Q' is not a size"));
    }

    #[test]
    fn the_device_is_matched_by_ordinal_or_uuid() {
        let list = format!("0=1G,1=2G,{}=512M", UUID.to_uppercase());
        assert_eq!(mps_limit_for(&list, 1, None), Ok(Some(2048 * MIB)));
        // Both its ordinal and its UUID name device 0: the lower counts.
        assert_eq!(mps_limit_for(&list, 0, Some(UUID)), Ok(Some(512 * MIB)));
        assert_eq!(mps_limit_for(&list, 2, None), Ok(None));
        assert_eq!(mps_limit_for("00=1G", 0, None), Ok(Some(1024 * MIB)));
    }

    #[test]
    fn malformed_lists_name_the_entry() {
        let err = mps_limit_for("0=1G,1:2G", 0, None).unwrap_err();
        assert!(err.contains("entry '1:2G'"), "{err}");
        let err = mps_limit_for("0=1G,", 0, None).unwrap_err();
        assert!(err.contains("entry ''"), "{err}");
        let err = mps_limit_for("=1G", 0, None).unwrap_err();
        assert!(err.contains("'' is not a device"), "{err}");
        let err = mps_limit_for("1=lots", 0, None).unwrap_err();
        assert!(
            err.contains("entry '1=lots': 'lots' is not a size"),
            "{err}"
        );
    }

    fn env(pairs: &[(&str, &str)]) -> Environment {
        Environment::from_lookup(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn settings_and_the_limit_checked() {
        let s = parse_settings(
            &env(&[
                (PINNED_DEVICE_MEM_LIMIT, "0=2048M"),
                (MEMORY_LIMIT_MIB, "1500"),
                (MEMORY_LIMIT_ENFORCED, "true"),
                (ACTIVE_THREAD_PERCENTAGE, "25"),
            ]),
            0,
            None,
        )
        .unwrap();
        assert_eq!(s.mps_limit_bytes, Some(2048 * MIB));
        assert_eq!(s.accounted_mib, Some(1500));
        assert_eq!(s.enforced, Some(true));
        assert_eq!(s.active_thread_percentage, Some(25.0));
        // The container must stay within both.
        assert_eq!(s.limit_bytes(), Some(1500 * MIB));
        assert_eq!(Settings::default().limit_bytes(), None);
    }

    #[test]
    fn malformed_variables_are_named() {
        for (name, value, part) in [
            (MEMORY_LIMIT_MIB, "2G", "'2G'"),
            (MEMORY_LIMIT_MIB, "0", "'0'"),
            (MEMORY_LIMIT_MIB, "", "''"),
            (MEMORY_LIMIT_ENFORCED, "yes", "'yes'"),
            (ACTIVE_THREAD_PERCENTAGE, "0", "'0'"),
            (ACTIVE_THREAD_PERCENTAGE, "150", "'150'"),
            (ACTIVE_THREAD_PERCENTAGE, "NaN", "'NaN'"),
            (PINNED_DEVICE_MEM_LIMIT, "0=2X", "'2X'"),
        ] {
            let err = parse_settings(&env(&[(name, value)]), 0, None).unwrap_err();
            assert!(err.starts_with(&format!("{name}={value}: ")), "{err}");
            assert!(err.contains(part), "{err}");
        }
    }
}
