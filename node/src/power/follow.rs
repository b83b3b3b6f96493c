//! Following a power-mode change: `nvpmodel -m` (or a reboot into another default) changes the
//! mode, and the GPU's ceiling with it, while the programs run. Labels and DRA attributes
//! publish only [`Published`]; the programs re-read the facts every `--power-recheck-seconds`
//! and update what they publish when that part changed, without ending their round (the
//! GPUs served and the claims prepared stay as they are).
//!
//! Polled, not watched: devfreq's sysfs files send no inotify events, and nvpmodel's status
//! file may be replaced as well as written. A read is a few small local files, done on the
//! runtime's own thread (no blocking-pool thread comes and goes every period).

use std::path::Path;
use std::time::Duration;

use super::PowerFacts;

/// What labels and DRA attributes say of the power facts: two reads that give the same
/// [`Published`] need no update (the current clock and the temperatures change all the time
/// and are metrics, not labels).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    pub mode_id: Option<u32>,
    pub mode_name: Option<String>,
    /// The GPU's clock ceiling under the mode, in whole MHz.
    pub gpu_ceiling_mhz: Option<u64>,
}

impl PowerFacts {
    /// The part of these facts that labels and attributes publish.
    pub fn published(&self) -> Published {
        Published {
            mode_id: self.current.as_ref().map(|c| c.id),
            mode_name: self.current.as_ref().and_then(|c| c.name.clone()),
            gpu_ceiling_mhz: self.gpu_ceiling_hz().map(|hz| hz / 1_000_000),
        }
    }

    /// Whether these facts are worth following: a Jetson with an nvpmodel configuration or a
    /// GPU devfreq directory (anything else has nothing that can change).
    pub fn followable(&self) -> bool {
        self.modes.is_some() || self.gpu_devfreq.is_some()
    }
}

/// Re-reads the mode under `root` every `every` (the GPU's devfreq directory is the one
/// `facts` found; the thermal zones are not read, they publish nothing) and, at the first
/// read whose [`Published`] differs from that of `facts`, returns the whole facts read anew.
/// Never returns when nothing changes: the caller selects it against its round's end.
pub async fn changed(root: &Path, facts: &PowerFacts, every: Duration) -> PowerFacts {
    let seen = facts.published();
    let devfreq = facts.gpu_devfreq.as_deref();
    loop {
        tokio::time::sleep(every).await;
        let now = PowerFacts::read_mode(root, devfreq).published();
        if now != seen {
            tracing::info!(
                from = ?seen,
                to = ?now,
                "the power mode changed; updating what this node publishes of it"
            );
            return PowerFacts {
                gpu_load: facts.gpu_load.clone(),
                ..PowerFacts::read(root, devfreq)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The power module's own test configuration and file writer.
    use crate::power::tests::{write, CONF};

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_mode_change_is_returned_and_clock_noise_is_not() {
        let root = tempfile::tempdir().unwrap();
        let devfreq = "/sys/class/devfreq/17000000.gpu";
        write(root.path(), "/etc/nvpmodel.conf", CONF);
        write(
            root.path(),
            &format!("{devfreq}/available_frequencies"),
            "306000000 1300500000\n",
        );
        write(root.path(), &format!("{devfreq}/cur_freq"), "306000000\n");
        let before = PowerFacts::read(root.path(), Some(devfreq));
        assert!(before.followable());
        assert_eq!(
            before.published(),
            Published {
                mode_id: Some(1),
                mode_name: Some("MODE_15W".into()),
                gpu_ceiling_mhz: Some(420),
            }
        );

        let every = Duration::from_secs(15);
        let follow = changed(root.path(), &before, every);
        tokio::pin!(follow);
        // The current clock moves: nothing published changes, so nothing is returned.
        write(root.path(), &format!("{devfreq}/cur_freq"), "1300500000\n");
        tokio::select! {
            _ = &mut follow => panic!("a clock reading is not a mode change"),
            _ = tokio::time::sleep(every * 3) => {}
        }
        // nvpmodel -m 0 records MAXN: the next read returns it, with MAXN's ceiling.
        write(root.path(), "/var/lib/nvpmodel/status", "pmode:0000\n");
        let after = follow.await;
        assert_eq!(
            after.published(),
            Published {
                mode_id: Some(0),
                mode_name: Some("MAXN".into()),
                gpu_ceiling_mhz: Some(1300),
            }
        );
        assert_eq!(after.gpu_devfreq.as_deref(), Some(devfreq));
    }

    #[test]
    fn nothing_to_follow_off_jetson() {
        let root = tempfile::tempdir().unwrap();
        assert!(!PowerFacts::read(root.path(), None).followable());
    }
}
