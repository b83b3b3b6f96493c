//! The Jetson power mode and GPU clock ceiling the probe ran under: one `devicequery: ` line
//! after deviceQuery's own text and before the verdict, so the sample's output above it stays
//! byte-identical and `tail -1` stays `Result = ...` (docs/power.md).
//!
//! Read from the root (`--root`, `/` in a pod): the GPU's devfreq directory, which a pod sees
//! in its own sysfs, and nvpmodel's configuration and status, which a pod sees only where they
//! are mounted into it. Nothing is printed off Jetson (no GPU devfreq, no nvpmodel files).

use std::path::Path;

use edgegpu_host::root::HostRoot;
use edgegpu_platform::host::{NVPMODEL_CONF, NVPMODEL_STATUS};
use edgegpu_platform::nvpmodel;
use edgegpu_platform::GENERATIONS;

/// What was read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerState {
    /// The mode's id and name (`None`: the configuration is missing or lacks the id).
    pub mode: Option<(u32, Option<String>)>,
    /// Whether the id is nvpmodel's record or the configuration's boot default.
    pub boot_default: bool,
    /// The GPU's devfreq `max_freq` (the ceiling enforced) and `cur_freq`, Hz.
    pub gpu_ceiling_hz: Option<u64>,
    pub gpu_clock_hz: Option<u64>,
}

impl PowerState {
    /// Reads the power state under `root`; `None` when nothing of it is there (not a Jetson).
    pub fn read(root: &Path) -> Option<PowerState> {
        let host = HostRoot::new(root);
        let conf = host.read(NVPMODEL_CONF).ok().flatten();
        let modes = conf.as_deref().and_then(|t| nvpmodel::parse_conf(t).ok());
        let status = host.read(NVPMODEL_STATUS).ok().flatten();
        let (id, boot_default) = match status.as_deref() {
            Some(text) => (nvpmodel::parse_status(text), false),
            None => (modes.as_ref().and_then(|m| m.default), true),
        };
        let mode = id.map(|id| {
            let name = modes
                .as_ref()
                .and_then(|m| m.by_id(id))
                .map(|m| m.name.clone());
            (id, name)
        });
        let devfreq = gpu_devfreq(&host);
        let number = |file: &str| -> Option<u64> {
            let dir = devfreq.as_deref()?;
            host.read(&format!("{dir}/{file}"))
                .ok()??
                .trim()
                .parse()
                .ok()
        };
        let state = PowerState {
            mode,
            boot_default,
            gpu_ceiling_hz: number("max_freq"),
            gpu_clock_hz: number("cur_freq"),
        };
        let found = conf.is_some() || status.is_some() || devfreq.is_some();
        found.then_some(state)
    }

    /// The line (without the `devicequery: ` prefix).
    pub fn line(&self) -> String {
        let mode = match &self.mode {
            Some((id, Some(name))) => format!("Jetson power mode {name} (nvpmodel id {id})"),
            Some((id, None)) => format!("Jetson power mode id {id} (not in {NVPMODEL_CONF})"),
            None => format!(
                "Jetson power mode unknown ({NVPMODEL_STATUS} and {NVPMODEL_CONF} are not \
                 readable here)"
            ),
        };
        let default = if self.boot_default && self.mode.is_some() {
            ", the boot default"
        } else {
            ""
        };
        let mhz = |hz: u64| hz / 1_000_000;
        let clock = match (self.gpu_ceiling_hz, self.gpu_clock_hz) {
            (Some(max), Some(now)) => {
                format!("; GPU clock ceiling {} MHz, at {} MHz", mhz(max), mhz(now))
            }
            (Some(max), None) => format!("; GPU clock ceiling {} MHz", mhz(max)),
            _ => String::new(),
        };
        format!("{mode}{default}{clock}")
    }
}

/// The GPU's devfreq directory (host path): the first of the generations' devfreq names,
/// then their known directories, that has a `max_freq`.
fn gpu_devfreq(host: &HostRoot) -> Option<String> {
    let named = GENERATIONS.iter().flat_map(|g| {
        g.sysfs
            .devfreq_names
            .iter()
            .map(|n| format!("/sys/class/devfreq/{n}"))
    });
    let known = GENERATIONS
        .iter()
        .flat_map(|g| g.sysfs.known_dirs.iter().map(|d| d.devfreq.to_string()));
    named
        .chain(known)
        .find(|dir| matches!(host.read(&format!("{dir}/max_freq")), Ok(Some(_))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const CONF: &str = "< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ -1\n\
                        < POWER_MODEL ID=2 NAME=MODE_30W >\nGPU MAX_FREQ 624750000\n\
                        < PM_CONFIG DEFAULT=2 >\n";

    #[test]
    fn what_a_pod_and_a_host_see() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(PowerState::read(root.path()), None, "not a Jetson");

        // A pod: its sysfs, no nvpmodel files.
        let dir = "/sys/class/devfreq/17000000.gpu";
        write(root.path(), &format!("{dir}/max_freq"), "624750000\n");
        write(root.path(), &format!("{dir}/cur_freq"), "306000000\n");
        let pod = PowerState::read(root.path()).unwrap();
        assert_eq!(
            pod.line(),
            "Jetson power mode unknown (/var/lib/nvpmodel/status and /etc/nvpmodel.conf are \
             not readable here); GPU clock ceiling 624 MHz, at 306 MHz"
        );

        // The host (or a pod given the files): the boot default, then nvpmodel's record.
        write(root.path(), NVPMODEL_CONF, CONF);
        let host = PowerState::read(root.path()).unwrap();
        assert_eq!(
            host.line(),
            "Jetson power mode MODE_30W (nvpmodel id 2), the boot default; GPU clock ceiling \
             624 MHz, at 306 MHz"
        );
        write(root.path(), NVPMODEL_STATUS, "pmode:0000 fmode:quiet\n");
        write(root.path(), &format!("{dir}/max_freq"), "1300500000\n");
        assert_eq!(
            PowerState::read(root.path()).unwrap().line(),
            "Jetson power mode MAXN (nvpmodel id 0); GPU clock ceiling 1300 MHz, at 306 MHz"
        );
        write(root.path(), NVPMODEL_STATUS, "pmode:0007\n");
        assert!(PowerState::read(root.path())
            .unwrap()
            .line()
            .starts_with("Jetson power mode id 7 (not in /etc/nvpmodel.conf);"));
    }
}
