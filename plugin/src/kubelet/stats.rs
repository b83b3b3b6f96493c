//! What the kubelet side counts about itself, for the plugin's own health metrics
//! (`edgegpu_registrations_total`, …; docs/metrics.md). Plain atomics per served resource,
//! written where the events happen and read when Prometheus scrapes: no timers, and a lock
//! only to find a resource's counters (once per generation and per scrape).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::restart_watch::RestartReason;

/// Why a generation ended and the plugin registered again, as a metric label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reregistration {
    /// The kubelet (re)started: a new `kubelet.sock` appeared.
    KubeletRestart,
    /// Our socket was deleted or renamed away.
    SocketRemoved,
    /// The kubelet's `ListAndWatch` stream ended.
    StreamLost,
    /// The other instance we yielded to went away.
    OtherInstanceGone,
    /// The device-plugin directory's watch was lost.
    WatchLost,
}

impl Reregistration {
    pub const ALL: [Reregistration; 5] = [
        Reregistration::KubeletRestart,
        Reregistration::SocketRemoved,
        Reregistration::StreamLost,
        Reregistration::OtherInstanceGone,
        Reregistration::WatchLost,
    ];

    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            Reregistration::KubeletRestart => "kubelet_restart",
            Reregistration::SocketRemoved => "socket_removed",
            Reregistration::StreamLost => "stream_lost",
            Reregistration::OtherInstanceGone => "other_instance_gone",
            Reregistration::WatchLost => "watch_lost",
        }
    }

    fn of(reason: &RestartReason) -> Self {
        match reason {
            RestartReason::KubeletSocketCreated(_) => Reregistration::KubeletRestart,
            RestartReason::OwnSocketDeleted(_) => Reregistration::SocketRemoved,
            RestartReason::StreamLost => Reregistration::StreamLost,
            RestartReason::OtherInstanceGone(_) => Reregistration::OtherInstanceGone,
            RestartReason::WatchLost => Reregistration::WatchLost,
        }
    }
}

/// The registration counters of every resource this process has served, by resource name.
/// Counters outlive a rebuild of the resources (SIGHUP, MIG reconfiguration), so the totals
/// stay monotonic as Prometheus expects of counters.
#[derive(Debug, Default)]
pub struct KubeletStats {
    resources: Mutex<BTreeMap<String, Arc<RegistrationStats>>>,
}

impl KubeletStats {
    /// The counters of `resource`, created at its first use.
    pub fn resource(&self, resource: &str) -> Arc<RegistrationStats> {
        self.resources
            .lock()
            .unwrap()
            .entry(resource.to_string())
            .or_default()
            .clone()
    }

    /// The counters of `resource`, if it was ever served.
    pub fn get(&self, resource: &str) -> Option<Arc<RegistrationStats>> {
        self.resources.lock().unwrap().get(resource).cloned()
    }
}

/// Registration counters of one served resource.
#[derive(Debug, Default)]
pub struct RegistrationStats {
    registrations: AtomicU64,
    registration_failures: AtomicU64,
    reregistrations: [AtomicU64; 5],
    registered: AtomicBool,
}

impl RegistrationStats {
    /// A registration the kubelet accepted (`Register`, or the plugin watcher's
    /// `NotifyRegistrationStatus` with `plugin_registered`).
    pub fn registered(&self) {
        self.registrations.fetch_add(1, Ordering::Relaxed);
        self.registered.store(true, Ordering::Relaxed);
    }

    /// A registration attempt that failed (it is retried).
    pub fn registration_failed(&self) {
        self.registration_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A generation ended for `reason`; the next one registers again.
    pub(crate) fn generation_ended(&self, reason: Option<&RestartReason>) {
        self.registered.store(false, Ordering::Relaxed);
        if let Some(reason) = reason {
            let i = Reregistration::of(reason) as usize;
            self.reregistrations[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn registrations(&self) -> u64 {
        self.registrations.load(Ordering::Relaxed)
    }

    pub fn registration_failures(&self) -> u64 {
        self.registration_failures.load(Ordering::Relaxed)
    }

    /// Generations restarted for `reason` (each one registers again).
    pub fn reregistrations(&self, reason: Reregistration) -> u64 {
        self.reregistrations[reason as usize].load(Ordering::Relaxed)
    }

    /// Whether the current generation's registration was accepted.
    pub fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn counts_by_reason() {
        let all = KubeletStats::default();
        let stats = all.resource("nvidia.com/gpu");
        assert!(all.get("nvidia.com/mig-1g.10gb").is_none());
        stats.registered();
        assert!(stats.is_registered());
        stats.generation_ended(Some(&RestartReason::KubeletSocketCreated(PathBuf::new())));
        assert!(!stats.is_registered());
        stats.generation_ended(Some(&RestartReason::StreamLost));
        stats.generation_ended(Some(&RestartReason::StreamLost));
        stats.generation_ended(None);
        assert_eq!(stats.reregistrations(Reregistration::KubeletRestart), 1);
        assert_eq!(stats.reregistrations(Reregistration::StreamLost), 2);
        assert_eq!(stats.reregistrations(Reregistration::WatchLost), 0);
        assert_eq!(stats.registrations(), 1);
        // The same counters when the resource is served again (a rebuild).
        assert_eq!(all.resource("nvidia.com/gpu").registrations(), 1);
        assert_eq!(all.get("nvidia.com/gpu").unwrap().registrations(), 1);
    }
}
