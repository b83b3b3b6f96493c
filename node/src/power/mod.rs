//! A Jetson's power mode and what limits its GPU: the board's `nvpmodel` modes, the mode in
//! force, the GPU's clock ceiling under it, whether `jetson_clocks` pinned the clocks, and the
//! thermal zones with their trip points. Read from the host root like every other fact
//! (docs/power.md names each file and where a generation differs).

pub mod clocks;
pub mod follow;
pub mod policy;
pub mod thermal;
pub mod throttle;
pub mod wanted;

use std::path::Path;

use edgegpu_host::root::HostRoot;
use edgegpu_platform::host::{NVPMODEL_CONF, NVPMODEL_STATUS};

pub use clocks::GpuClock;
// The configuration's parser is pure text work, in the platform crate (devicequery reads it
// too); `power::nvpmodel` stays its path here.
pub use edgegpu_platform::nvpmodel::{self, Ceiling, PowerMode, PowerModes};
pub use thermal::ThermalZone;

/// Where the mode in force was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeSource {
    /// nvpmodel's own record of the mode it set.
    StatusFile,
    /// No record: the configuration's boot default (what the board runs until someone
    /// changes it).
    BootDefault,
}

/// The mode in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentMode {
    pub id: u32,
    /// `None` when the configuration has no mode of that id.
    pub name: Option<String>,
    pub source: ModeSource,
}

/// A Jetson's power facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerFacts {
    /// The board's modes, or why they could not be read (`None`: no nvpmodel configuration).
    pub modes: Option<Result<PowerModes, String>>,
    pub current: Option<CurrentMode>,
    /// The GPU's devfreq directory (a host path), where discovery found it: kept so that a
    /// re-read ([`follow`]) does not scan for it again.
    pub gpu_devfreq: Option<String>,
    /// The GPU's `load` file (a host path), where it has one: the throttling sampler tells
    /// an idle GPU by it ([`throttle`]).
    pub gpu_load: Option<String>,
    /// The GPU's devfreq readings, where its devfreq directory was found.
    pub gpu_clock: Option<GpuClock>,
    pub thermal: Vec<ThermalZone>,
}

impl PowerFacts {
    /// Reads the power facts under `root`; `gpu_devfreq` is the GPU's devfreq directory
    /// (host path) where discovery found it. Blocking: a few small sysfs and /etc reads.
    pub fn read(root: &Path, gpu_devfreq: Option<&str>) -> PowerFacts {
        PowerFacts {
            thermal: thermal::zones(root),
            ..PowerFacts::read_mode(root, gpu_devfreq)
        }
    }

    /// [`PowerFacts::read`] without the thermal zones (left empty): the mode, its
    /// configuration and the GPU's clock, all that [`follow`] compares on every recheck.
    pub fn read_mode(root: &Path, gpu_devfreq: Option<&str>) -> PowerFacts {
        let host = HostRoot::new(root);
        let modes = match host.read(NVPMODEL_CONF) {
            Ok(Some(text)) => {
                Some(nvpmodel::parse_conf(&text).map_err(|e| format!("{NVPMODEL_CONF}: {e}")))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e.to_string())),
        };
        PowerFacts {
            modes,
            gpu_devfreq: gpu_devfreq.map(str::to_string),
            ..PowerFacts::default()
        }
        .with_mode_read(root)
    }

    /// These facts with the mode in force and the GPU's clock read again, the configuration
    /// kept (`nvpmodel -m` changes the mode, not the configuration): what a metrics scrape
    /// reads.
    pub fn with_mode_read(&self, root: &Path) -> PowerFacts {
        let host = HostRoot::new(root);
        let parsed = self.modes.as_ref().and_then(|m| m.as_ref().ok());
        // Only a missing record means the boot default is in force. A record that cannot be
        // read or parsed says nvpmodel set some mode we cannot name: publishing the default
        // would claim a mode the board may not be in, so no mode is published.
        let current = match host.read(NVPMODEL_STATUS) {
            Ok(Some(text)) => nvpmodel::parse_status(&text).map(|id| (id, ModeSource::StatusFile)),
            Ok(None) => parsed
                .and_then(|m| m.default)
                .map(|id| (id, ModeSource::BootDefault)),
            Err(_) => None,
        }
        .map(|(id, source)| CurrentMode {
            id,
            name: parsed.and_then(|m| m.by_id(id)).map(|m| m.name.clone()),
            source,
        });
        PowerFacts {
            current,
            gpu_clock: self.gpu_devfreq.as_deref().map(|d| GpuClock::read(root, d)),
            ..self.clone()
        }
    }

    /// The mode in force, as the configuration defines it.
    pub fn current_mode(&self) -> Option<&PowerMode> {
        let modes = self.modes.as_ref()?.as_ref().ok()?;
        modes.by_id(self.current.as_ref()?.id)
    }

    /// The GPU's clock ceiling under the mode in force, in Hz: the mode's own limit, the
    /// hardware's maximum where the mode sets none; without a configuration, the devfreq
    /// ceiling in force.
    pub fn gpu_ceiling_hz(&self) -> Option<u64> {
        self.mode_gpu_ceiling_hz()
            .or_else(|| self.gpu_clock.as_ref().and_then(|c| c.max))
    }

    /// The GPU's clock ceiling the mode in force sets (the hardware's maximum where it sets
    /// none); `None` without a configuration that defines the mode.
    pub fn mode_gpu_ceiling_hz(&self) -> Option<u64> {
        let clock = self.gpu_clock.as_ref();
        match self.current_mode()?.gpu_max? {
            Ceiling::At(hz) => Some(hz),
            Ceiling::Unlimited => clock.and_then(|c| c.hardware_max.or(c.max)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const CONF: &str = "\
< POWER_MODEL ID=0 NAME=MAXN >
GPU MAX_FREQ -1
< POWER_MODEL ID=1 NAME=MODE_15W >
GPU MAX_FREQ 420750000
< PM_CONFIG DEFAULT=1 >
";

    pub(super) fn write(root: &Path, path: &str, text: &str) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn devfreq(root: &Path) {
        write(
            root,
            "/sys/class/devfreq/17000000.gpu/max_freq",
            "420750000\n",
        );
        write(
            root,
            "/sys/class/devfreq/17000000.gpu/min_freq",
            "306000000\n",
        );
        write(
            root,
            "/sys/class/devfreq/17000000.gpu/cur_freq",
            "306000000\n",
        );
        write(
            root,
            "/sys/class/devfreq/17000000.gpu/available_frequencies",
            "306000000 420750000 1300500000\n",
        );
    }

    #[test]
    fn the_recorded_mode_then_the_boot_default() {
        let root = tempfile::tempdir().unwrap();
        // L4T links the board's file into place; the link resolves inside the root.
        write(root.path(), "/etc/nvpmodel/nvpmodel_test.conf", CONF);
        std::os::unix::fs::symlink(
            "/etc/nvpmodel/nvpmodel_test.conf",
            root.path().join("etc/nvpmodel.conf"),
        )
        .unwrap();
        devfreq(root.path());
        let gpu = Some("/sys/class/devfreq/17000000.gpu");

        let facts = PowerFacts::read(root.path(), gpu);
        assert_eq!(
            facts.current,
            Some(CurrentMode {
                id: 1,
                name: Some("MODE_15W".into()),
                source: ModeSource::BootDefault
            })
        );
        assert_eq!(facts.gpu_ceiling_hz(), Some(420_750_000));

        write(root.path(), NVPMODEL_STATUS, "pmode:0000 fmode:quiet\n");
        let facts = PowerFacts::read(root.path(), gpu);
        assert_eq!(
            facts.current.as_ref().unwrap().source,
            ModeSource::StatusFile
        );
        assert_eq!(facts.current_mode().unwrap().name, "MAXN");
        // MAXN sets no GPU limit: the hardware's highest frequency.
        assert_eq!(facts.gpu_ceiling_hz(), Some(1_300_500_000));
        assert_eq!(facts.gpu_clock.unwrap().pinned(), Some(false));
    }

    #[test]
    fn a_mode_the_file_lacks_and_a_broken_file() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), NVPMODEL_CONF, CONF);
        write(root.path(), NVPMODEL_STATUS, "pmode:0007\n");
        let facts = PowerFacts::read(root.path(), None);
        assert_eq!(facts.current.as_ref().unwrap().name, None);
        assert_eq!(facts.gpu_ceiling_hz(), None);

        write(
            root.path(),
            NVPMODEL_CONF,
            "< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ x\n",
        );
        let facts = PowerFacts::read(root.path(), None);
        let err = facts.modes.unwrap().unwrap_err();
        assert_eq!(
            err,
            "/etc/nvpmodel.conf: line 2: clock value `x` is not a number"
        );
        // The record still says which mode is in force.
        assert_eq!(facts.current.unwrap().id, 7);
    }

    #[test]
    fn a_record_that_cannot_be_read_names_no_mode() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), NVPMODEL_CONF, CONF);
        // Unparseable: nvpmodel set a mode, but which one is unknown; not the boot default.
        write(root.path(), NVPMODEL_STATUS, "garbage\n");
        let facts = PowerFacts::read(root.path(), None);
        assert_eq!(facts.current, None);
        assert!(facts.modes.unwrap().is_ok());

        // Unreadable: a directory where the record should be.
        let status = root.path().join(NVPMODEL_STATUS.trim_start_matches('/'));
        std::fs::remove_file(&status).unwrap();
        std::fs::create_dir(&status).unwrap();
        assert_eq!(PowerFacts::read(root.path(), None).current, None);
    }

    #[test]
    fn nothing_without_nvpmodel() {
        let root = tempfile::tempdir().unwrap();
        let facts = PowerFacts::read(root.path(), None);
        assert_eq!(facts, PowerFacts::default());
    }
}
