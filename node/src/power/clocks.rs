//! The GPU's clocks as its devfreq directory reports them (Linux `sysfs-class-devfreq` ABI:
//! `cur_freq`, `min_freq`, `max_freq` and `available_frequencies`, in Hz). nvpmodel writes a
//! mode's GPU ceiling into `max_freq`; `jetson_clocks` raises `min_freq` to it, which is how
//! one can tell that it ran.

use std::path::Path;

use crate::gpu::under_root;

/// The GPU's clock readings, in Hz.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuClock {
    pub current: Option<u64>,
    /// The ceiling in force (the power mode's, or lower where something else capped it).
    pub max: Option<u64>,
    pub min: Option<u64>,
    /// The highest frequency the GPU has (`available_frequencies`): a mode without a GPU
    /// limit runs up to it.
    pub hardware_max: Option<u64>,
}

impl GpuClock {
    /// Reads the devfreq directory `devfreq` (a host path) under `root`.
    pub fn read(root: &Path, devfreq: &str) -> GpuClock {
        let dir = under_root(root, devfreq);
        let number = |name: &str| -> Option<u64> {
            std::fs::read_to_string(dir.join(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let hardware_max = std::fs::read_to_string(dir.join("available_frequencies"))
            .ok()
            .and_then(|list| {
                list.split_whitespace()
                    .filter_map(|f| f.parse::<u64>().ok())
                    .max()
            });
        GpuClock {
            current: number("cur_freq"),
            max: number("max_freq"),
            min: number("min_freq"),
            hardware_max,
        }
    }

    /// `jetson_clocks` ran: the clock's floor is its ceiling.
    pub fn pinned(&self) -> Option<bool> {
        Some(self.min? >= self.max?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_and_pinning() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sys/class/devfreq/17000000.gpu");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, value) in [
            ("cur_freq", "306000000\n"),
            ("max_freq", "624750000\n"),
            ("min_freq", "306000000\n"),
            (
                "available_frequencies",
                "306000000 408000000 624750000 1300500000\n",
            ),
        ] {
            std::fs::write(dir.join(name), value).unwrap();
        }
        let clock = GpuClock::read(root.path(), "/sys/class/devfreq/17000000.gpu");
        assert_eq!(
            clock,
            GpuClock {
                current: Some(306_000_000),
                max: Some(624_750_000),
                min: Some(306_000_000),
                hardware_max: Some(1_300_500_000),
            }
        );
        assert_eq!(clock.pinned(), Some(false));
        std::fs::write(dir.join("min_freq"), "624750000\n").unwrap();
        let clock = GpuClock::read(root.path(), "/sys/class/devfreq/17000000.gpu");
        assert_eq!(clock.pinned(), Some(true));
        let missing = GpuClock::read(root.path(), "/sys/class/devfreq/none");
        assert_eq!(missing, GpuClock::default());
        assert_eq!(missing.pinned(), None);
    }
}
