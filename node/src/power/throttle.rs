//! Throttling: how long a busy Jetson GPU ran below its hardware's highest clock, and why.
//!
//! No kernel counter says this (devfreq's `trans_stat` counts time per frequency, not why),
//! so the GPU is looked at once per period and the period is charged to the reason seen. A
//! look reads devfreq's `cur_freq`, `max_freq` and `min_freq`, the GPU's `load`, and the
//! temperature of each thermal zone that has a passive trip point: a handful of small sysfs
//! files. The reasons, in the order they are told apart:
//!
//! - `thermal`: a zone reached a passive trip point (the kernel lowers clocks there);
//! - `power_mode`: the GPU runs at the ceiling in force, and that is the power mode's own
//!   GPU limit, below the hardware's highest clock (`nvpmodel -m` to a faster mode lifts it);
//! - `clocks_not_pinned`: the GPU runs below the ceiling in force and `jetson_clocks` has not
//!   pinned the clocks: devfreq's governor chose the lower clock (jetson_clocks holds it at
//!   the ceiling);
//! - `other`: below the ceiling with the clocks pinned, or at a ceiling lower than the mode's
//!   (something other than nvpmodel lowered devfreq's `max_freq`).
//!
//! An idle GPU (`load` 0) is not throttled: the governor lowers the clock of a GPU with no
//! work, and nothing runs slower for it. Where no `load` file exists (Thor's OpenRM driver),
//! every look counts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::gpu::under_root;

use super::{GpuClock, PowerFacts, ThermalZone};

/// Why the GPU runs below its hardware's highest clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Thermal,
    PowerMode,
    ClocksNotPinned,
    Other,
}

impl Reason {
    pub const ALL: [Reason; 4] = [
        Reason::Thermal,
        Reason::PowerMode,
        Reason::ClocksNotPinned,
        Reason::Other,
    ];

    /// The metric label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Thermal => "thermal",
            Reason::PowerMode => "power_mode",
            Reason::ClocksNotPinned => "clocks_not_pinned",
            Reason::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One look at the GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Look {
    pub clock: GpuClock,
    /// `Some(false)`: the GPU had no work; `None`: no `load` file to tell.
    pub busy: Option<bool>,
    /// A thermal zone at or above a passive trip point.
    pub thermal: bool,
    /// The power mode's own GPU ceiling ([`PowerFacts::mode_gpu_ceiling_hz`]); `None`
    /// without an nvpmodel configuration (a cap is then never put down to the mode).
    pub mode_ceiling_hz: Option<u64>,
}

impl Look {
    /// Why the GPU runs below its highest clock, or `None` where it does not (or is idle, or
    /// its clocks cannot be read).
    pub fn reason(&self) -> Option<Reason> {
        if self.busy == Some(false) {
            return None;
        }
        let current = self.clock.current?;
        if current >= self.clock.hardware_max? {
            return None;
        }
        if self.thermal {
            return Some(Reason::Thermal);
        }
        match self.clock.max {
            Some(limit) if current >= limit => match self.mode_ceiling_hz {
                // At the ceiling in force, which is the mode's own (nvpmodel wrote it).
                Some(mode) if limit >= mode => Some(Reason::PowerMode),
                _ => Some(Reason::Other),
            },
            _ if self.clock.pinned() == Some(true) => Some(Reason::Other),
            _ => Some(Reason::ClocksNotPinned),
        }
    }
}

/// Seconds charged to each reason since the process started: counters, shared between the
/// sampler that adds and the scrapes that read.
#[derive(Debug, Default)]
pub struct ThrottleSeconds {
    micros: [AtomicU64; 4],
}

impl ThrottleSeconds {
    pub fn add(&self, reason: Reason, period: Duration) {
        let micros = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
        self.micros[reason.index()].fetch_add(micros, Ordering::Relaxed);
    }

    pub fn seconds(&self, reason: Reason) -> f64 {
        self.micros[reason.index()].load(Ordering::Relaxed) as f64 / 1e6
    }
}

/// What a look reads: the files found once, at discovery.
#[derive(Debug, Clone)]
pub struct Sampler {
    root: PathBuf,
    devfreq: String,
    load: Option<PathBuf>,
    /// The zones with a passive trip point (the others cannot throttle).
    passive: Vec<ThermalZone>,
    mode_ceiling_hz: Option<u64>,
    hardware_max: Option<u64>,
    /// The GPU's frequencies, ascending (devfreq `available_frequencies`).
    available: Vec<u64>,
}

impl Sampler {
    /// A sampler of the GPU `facts` describe; `None` without a GPU devfreq directory.
    pub fn new(root: &Path, facts: &PowerFacts) -> Option<Sampler> {
        let devfreq = facts.gpu_devfreq.clone()?;
        let mut available: Vec<u64> =
            std::fs::read_to_string(under_root(root, &devfreq).join("available_frequencies"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
        available.sort_unstable();
        let mut sampler = Sampler {
            root: root.to_path_buf(),
            load: facts.gpu_load.as_deref().map(|l| under_root(root, l)),
            passive: facts
                .thermal
                .iter()
                .filter(|z| z.trips.iter().any(|t| t.kind == "passive"))
                .cloned()
                .collect(),
            mode_ceiling_hz: None,
            hardware_max: facts.gpu_clock.and_then(|c| c.hardware_max),
            available,
            devfreq,
        };
        sampler.follow(facts);
        Some(sampler)
    }

    /// The power mode changed: its ceiling is the one a look compares with from now on,
    /// as devfreq enforces it: the highest frequency of the GPU's table at or below the
    /// mode's value (Nano's 5W mode says 640 MHz; devfreq runs it at 614.4).
    pub fn follow(&mut self, facts: &PowerFacts) {
        self.mode_ceiling_hz = facts.mode_gpu_ceiling_hz().map(|hz| {
            self.available
                .iter()
                .rev()
                .find(|f| **f <= hz)
                .copied()
                .unwrap_or(hz)
        });
    }

    /// Reads the GPU's clocks, load and the passive zones' temperatures.
    pub fn look(&self) -> Look {
        let dir = under_root(&self.root, &self.devfreq);
        let number = |path: &Path| -> Option<u64> {
            std::fs::read_to_string(path).ok()?.trim().parse().ok()
        };
        Look {
            clock: GpuClock {
                current: number(&dir.join("cur_freq")),
                max: number(&dir.join("max_freq")),
                min: number(&dir.join("min_freq")),
                // The board's frequency table does not change while it runs.
                hardware_max: self.hardware_max,
            },
            busy: self.load.as_deref().and_then(number).map(|l| l > 0),
            thermal: self
                .passive
                .iter()
                .any(|z| z.reread(&self.root).throttling()),
            mode_ceiling_hz: self.mode_ceiling_hz,
        }
    }
}

/// Looks at the GPU every `every` and charges the time since the last look to the reason it
/// saw then; the mode's ceiling is read again every `recheck`. Never returns: the caller
/// aborts it.
pub async fn count(
    mut sampler: Sampler,
    seconds: Arc<ThrottleSeconds>,
    every: Duration,
    recheck: Duration,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last, mut seen, mut checked) = (Instant::now(), None, Instant::now());
    loop {
        ticks.tick().await;
        let now = Instant::now();
        if let Some(reason) = seen {
            seconds.add(reason, now - last);
        }
        if now - checked >= recheck {
            let devfreq = Some(sampler.devfreq.as_str());
            let facts = PowerFacts::read_mode(&sampler.root, devfreq);
            sampler.follow(&facts);
            checked = now;
        }
        seen = sampler.look().reason();
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::power::tests::{write, CONF};
    use crate::power::thermal::Trip;

    const MHZ: u64 = 1_000_000;

    fn look(current: u64, max: u64, min: u64, ceiling: u64) -> Look {
        Look {
            clock: GpuClock {
                current: Some(current * MHZ),
                max: Some(max * MHZ),
                min: Some(min * MHZ),
                hardware_max: Some(1300 * MHZ),
            },
            busy: Some(true),
            thermal: false,
            mode_ceiling_hz: Some(ceiling * MHZ),
        }
    }

    #[test]
    fn each_reason_is_told_apart() {
        // MAXN, clocks at the top: not throttled.
        assert_eq!(look(1300, 1300, 306, 1300).reason(), None);
        // MODE_15W caps at 420 MHz and the GPU runs there.
        assert_eq!(look(420, 420, 306, 420).reason(), Some(Reason::PowerMode));
        // Below the cap, the governor's choice.
        assert_eq!(
            look(306, 420, 306, 420).reason(),
            Some(Reason::ClocksNotPinned)
        );
        // Pinned, yet below the cap.
        assert_eq!(look(306, 420, 420, 420).reason(), Some(Reason::Other));
        // Capped lower than the mode's ceiling by something else.
        assert_eq!(look(600, 600, 306, 1300).reason(), Some(Reason::Other));
        // No configuration: a cap cannot be put down to the mode.
        let unknown_mode = Look {
            mode_ceiling_hz: None,
            ..look(420, 420, 306, 420)
        };
        assert_eq!(unknown_mode.reason(), Some(Reason::Other));
        // A passive trip point reached comes first.
        let hot = Look {
            thermal: true,
            ..look(420, 420, 306, 420)
        };
        assert_eq!(hot.reason(), Some(Reason::Thermal));
        // Idle is not throttled; no load file counts as busy.
        let idle = Look {
            busy: Some(false),
            ..look(306, 420, 306, 420)
        };
        assert_eq!(idle.reason(), None);
        let unknown = Look {
            busy: None,
            ..look(306, 420, 306, 420)
        };
        assert_eq!(unknown.reason(), Some(Reason::ClocksNotPinned));
        // Clocks that cannot be read say nothing.
        assert_eq!(Look::default().reason(), None);
    }

    const DEVFREQ: &str = "/sys/class/devfreq/17000000.gpu";
    const LOAD: &str = "/sys/devices/platform/17000000.gpu/load";

    fn board(root: &Path) -> PowerFacts {
        write(root, "/etc/nvpmodel.conf", CONF);
        write(root, "/var/lib/nvpmodel/status", "pmode:0001\n");
        write(
            root,
            &format!("{DEVFREQ}/available_frequencies"),
            "306000000 420750000 1300500000\n",
        );
        clocks(root, 420_750_000, 420_750_000, 306_000_000);
        write(root, LOAD, "500\n");
        let zone = "/sys/class/thermal/thermal_zone1";
        write(root, &format!("{zone}/type"), "gpu-thermal\n");
        write(root, &format!("{zone}/temp"), "50000\n");
        write(root, &format!("{zone}/trip_point_0_type"), "passive\n");
        write(root, &format!("{zone}/trip_point_0_temp"), "99000\n");
        PowerFacts {
            gpu_load: Some(LOAD.into()),
            ..PowerFacts::read(root, Some(DEVFREQ))
        }
    }

    fn clocks(root: &Path, current: u64, max: u64, min: u64) {
        for (file, hz) in [("cur_freq", current), ("max_freq", max), ("min_freq", min)] {
            write(root, &format!("{DEVFREQ}/{file}"), &format!("{hz}\n"));
        }
    }

    #[test]
    fn a_look_reads_the_board() {
        let root = tempfile::tempdir().unwrap();
        let facts = board(root.path());
        assert_eq!(
            facts.thermal[0].trips,
            [Trip {
                kind: "passive".into(),
                millicelsius: 99_000
            }]
        );
        let sampler = Sampler::new(root.path(), &facts).unwrap();
        assert_eq!(sampler.look().reason(), Some(Reason::PowerMode));
        write(
            root.path(),
            "/sys/class/thermal/thermal_zone1/temp",
            "99500\n",
        );
        assert_eq!(sampler.look().reason(), Some(Reason::Thermal));
        write(root.path(), LOAD, "0\n");
        assert_eq!(sampler.look().reason(), None);
        assert!(Sampler::new(root.path(), &PowerFacts::default()).is_none());

        // A mode whose GPU value is not one of the GPU's frequencies (Nano 5W: 640 MHz):
        // devfreq enforces the one below, and that is still the mode's cap.
        write(root.path(), LOAD, "500\n");
        write(
            root.path(),
            "/sys/class/thermal/thermal_zone1/temp",
            "50000\n",
        );
        write(
            root.path(),
            "/etc/nvpmodel.conf",
            "< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ -1\n\
             < POWER_MODEL ID=1 NAME=5W >\nGPU MAX_FREQ 440000000\n",
        );
        clocks(root.path(), 420_750_000, 420_750_000, 306_000_000);
        let facts = PowerFacts {
            gpu_load: Some(LOAD.into()),
            ..PowerFacts::read(root.path(), Some(DEVFREQ))
        };
        let sampler = Sampler::new(root.path(), &facts).unwrap();
        assert_eq!(sampler.look().mode_ceiling_hz, Some(420_750_000));
        assert_eq!(sampler.look().reason(), Some(Reason::PowerMode));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn seconds_go_to_the_reason_seen_and_follow_a_mode_change() {
        let root = tempfile::tempdir().unwrap();
        let facts = board(root.path());
        let sampler = Sampler::new(root.path(), &facts).unwrap();
        let seconds = Arc::new(ThrottleSeconds::default());
        let task = tokio::spawn(count(
            sampler,
            seconds.clone(),
            Duration::from_secs(1),
            Duration::from_secs(5),
        ));
        // Looks at 0, 1, 2 s: two periods at the mode's cap.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(seconds.seconds(Reason::PowerMode), 2.0);
        // `nvpmodel -m 0` (MAXN), and something else caps devfreq at 600 MHz: against the
        // old ceiling that is the mode's cap, against MAXN's it is not.
        write(root.path(), "/var/lib/nvpmodel/status", "pmode:0000\n");
        clocks(root.path(), 600_000_000, 600_000_000, 306_000_000);
        // The looks at 3 and 4 s compare with the old ceiling; the recheck at 5 s reads
        // MAXN's, and the looks at 5 and 6 s see another cap.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(seconds.seconds(Reason::PowerMode), 5.0);
        assert_eq!(seconds.seconds(Reason::Other), 2.0);
        assert_eq!(seconds.seconds(Reason::Thermal), 0.0);
        task.abort();
    }
}
