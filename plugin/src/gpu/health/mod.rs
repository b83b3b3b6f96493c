//! Device health: one table of physical GPUs and their state, fed by a monitor per platform
//! (`tegra`: device nodes and sysfs watched with inotify; `nvml`: XID events and lost GPUs).
//! Every change republishes the full device list on the watch channel ListAndWatch streams.

pub mod nvml;
pub mod tegra;

use std::sync::Mutex;

use edgegpu_kubelet_api::v1beta1::{Device, NumaNode, TopologyInfo, HEALTHY, UNHEALTHY};
use tokio::sync::watch;

/// One advertised device ID (a GPU, or one time-slicing replica of it).
#[derive(Debug, Clone, PartialEq)]
pub struct Advertised {
    pub id: String,
    /// Index into the physical GPU list.
    pub physical: usize,
    pub numa_node: Option<i64>,
}

/// One physical GPU's health now and how often it changed (for the plugin's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthCounts {
    pub healthy: bool,
    /// Healthy → unhealthy transitions since start.
    pub became_unhealthy: u64,
    /// Unhealthy → healthy transitions since start.
    pub became_healthy: u64,
}

/// Health of the physical GPUs, published as the advertised device list.
pub struct HealthTable {
    resource: String,
    advertised: Vec<Advertised>,
    /// `None` = healthy; `Some(reason)` = unhealthy because of `reason`.
    state: Mutex<Vec<Option<String>>>,
    /// Transition counts per physical GPU.
    counts: Mutex<Vec<HealthCounts>>,
    /// Physical GPU IDs, for log lines.
    names: Vec<String>,
    tx: watch::Sender<Vec<Device>>,
}

impl HealthTable {
    pub fn new(resource: &str, physical_ids: Vec<String>, advertised: Vec<Advertised>) -> Self {
        let state = vec![None; physical_ids.len()];
        let counts = vec![
            HealthCounts {
                healthy: true,
                ..HealthCounts::default()
            };
            physical_ids.len()
        ];
        let initial = Self::render(&advertised, &state);
        let (tx, _) = watch::channel(initial);
        Self {
            resource: resource.to_string(),
            advertised,
            state: Mutex::new(state),
            counts: Mutex::new(counts),
            names: physical_ids,
            tx,
        }
    }

    fn render(advertised: &[Advertised], state: &[Option<String>]) -> Vec<Device> {
        advertised
            .iter()
            .map(|a| Device {
                id: a.id.clone(),
                health: if state[a.physical].is_none() {
                    HEALTHY
                } else {
                    UNHEALTHY
                }
                .to_string(),
                topology: a.numa_node.map(|n| TopologyInfo {
                    nodes: vec![NumaNode { id: n }],
                }),
            })
            .collect()
    }

    pub fn subscribe(&self) -> watch::Receiver<Vec<Device>> {
        self.tx.subscribe()
    }

    pub fn advertised(&self) -> &[Advertised] {
        &self.advertised
    }

    /// The reason a GPU is unhealthy, if it is.
    pub fn unhealthy_reason(&self, physical: usize) -> Option<String> {
        self.state.lock().unwrap()[physical].clone()
    }

    /// Each physical GPU's health and transition counts.
    pub fn counts(&self) -> Vec<HealthCounts> {
        self.counts.lock().unwrap().clone()
    }

    /// Records the outcome of a check; logs and publishes only real transitions.
    pub fn report(&self, physical: usize, outcome: Result<(), String>) {
        let mut state = self.state.lock().unwrap();
        let new = outcome.err();
        if state[physical] == new {
            return;
        }
        let id = &self.names[physical];
        match (&state[physical], &new) {
            (_, Some(reason)) => {
                tracing::warn!(resource = %self.resource, device = %id, %reason, "'{}' device marked unhealthy: {id}: {reason}", self.resource)
            }
            (Some(old), None) => {
                tracing::info!(resource = %self.resource, device = %id, previous = %old, "'{}' device healthy again: {id} (was: {old})", self.resource)
            }
            (None, None) => {}
        }
        // An unhealthy→unhealthy change of reason is logged but does not change the list.
        let health_changed = state[physical].is_some() != new.is_some();
        state[physical] = new;
        if health_changed {
            let mut counts = self.counts.lock().unwrap();
            let c = &mut counts[physical];
            c.healthy = state[physical].is_none();
            if c.healthy {
                c.became_healthy += 1;
            } else {
                c.became_unhealthy += 1;
            }
            drop(counts);
            let list = Self::render(&self.advertised, &state);
            self.tx.send_replace(list);
        }
    }
}
