//! Device health: one table per served resource of its allocatable devices (whole GPUs or
//! MIG devices, called *slots*) and their state, fed by monitors per platform (`tegra`:
//! device nodes and sysfs watched with inotify; `nvml`: XID events, lost GPUs and MIG
//! devices). A slot can be watched by several monitors (a JetPack 6+ Jetson by both): it is
//! unhealthy while any of them says so. Every change republishes the full device list on the
//! watch channel ListAndWatch streams.

pub mod nvml;
pub mod tegra;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use edgegpu_kubelet_api::v1beta1::{Device, NumaNode, TopologyInfo, HEALTHY, UNHEALTHY};
use tokio::sync::watch;

use crate::gpu::AbortOnDrop;

/// One advertised device ID (a GPU or MIG device, or one time-slicing replica of it).
#[derive(Debug, Clone, PartialEq)]
pub struct Advertised {
    pub id: String,
    /// The slot (allocatable device) it belongs to: index into the table's slots.
    pub physical: usize,
    pub numa_node: Option<i64>,
}

/// One slot's health now and how often it changed (for the plugin's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthCounts {
    pub healthy: bool,
    /// Healthy → unhealthy transitions since start.
    pub became_unhealthy: u64,
    /// Unhealthy → healthy transitions since start.
    pub became_healthy: u64,
}

/// Per slot: the reason each monitor that currently objects gives.
type SlotState = BTreeMap<&'static str, String>;

/// Health of the slots of one resource, published as the advertised device list.
pub struct HealthTable {
    resource: String,
    advertised: Vec<Advertised>,
    /// Empty = healthy; else unhealthy, by monitor name and reason.
    state: Mutex<Vec<SlotState>>,
    /// Transition counts per slot.
    counts: Mutex<Vec<HealthCounts>>,
    /// Slot IDs, for log lines.
    names: Vec<String>,
    tx: watch::Sender<Vec<Device>>,
    /// Monitor tasks that report only here (and to tables of the same node): they end when
    /// the last of their tables is dropped.
    monitors: Mutex<Vec<Arc<AbortOnDrop>>>,
}

/// Where a monitor reports one watched device: a slot of a resource's table.
#[derive(Clone)]
pub struct Target {
    pub table: Weak<HealthTable>,
    pub slot: usize,
}

impl Target {
    pub fn new(table: &Arc<HealthTable>, slot: usize) -> Self {
        Target {
            table: Arc::downgrade(table),
            slot,
        }
    }

    /// Reports to the slot; `false` once the table is gone (the resource was dropped).
    pub fn report(&self, source: &'static str, outcome: Result<(), String>) -> bool {
        match self.table.upgrade() {
            Some(t) => {
                t.report(self.slot, source, outcome);
                true
            }
            None => false,
        }
    }
}

impl HealthTable {
    pub fn new(resource: &str, physical_ids: Vec<String>, advertised: Vec<Advertised>) -> Self {
        let state = vec![SlotState::new(); physical_ids.len()];
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
            monitors: Mutex::new(Vec::new()),
        }
    }

    /// Keeps `monitor` running while this table lives.
    pub fn keep_monitor(&self, monitor: Arc<AbortOnDrop>) {
        self.monitors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(monitor);
    }

    fn render(advertised: &[Advertised], state: &[SlotState]) -> Vec<Device> {
        advertised
            .iter()
            .map(|a| Device {
                id: a.id.clone(),
                health: if state[a.physical].is_empty() {
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

    /// The reason a slot is unhealthy, if it is.
    pub fn unhealthy_reason(&self, physical: usize) -> Option<String> {
        let state = self.state.lock().unwrap();
        let reasons: Vec<&str> = state[physical].values().map(String::as_str).collect();
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// Each slot's health and transition counts.
    pub fn counts(&self) -> Vec<HealthCounts> {
        self.counts.lock().unwrap().clone()
    }

    /// Records the outcome of monitor `source`'s check of slot `physical`; logs and
    /// publishes only real transitions.
    pub fn report(&self, physical: usize, source: &'static str, outcome: Result<(), String>) {
        let mut state = self.state.lock().unwrap();
        let slot = &mut state[physical];
        let was_healthy = slot.is_empty();
        let old = slot.get(source).cloned();
        let new = outcome.err();
        if old == new {
            return;
        }
        let id = &self.names[physical];
        match (&old, &new) {
            (_, Some(reason)) => {
                tracing::warn!(resource = %self.resource, device = %id, %reason, source, "'{}' device marked unhealthy: {id}: {reason}", self.resource)
            }
            (Some(old), None) => {
                tracing::info!(resource = %self.resource, device = %id, previous = %old, source, "'{}' device healthy again ({source}): {id} (was: {old})", self.resource)
            }
            (None, None) => {}
        }
        match new {
            Some(reason) => slot.insert(source, reason),
            None => slot.remove(source),
        };
        // A change of reason (or of which monitor objects) does not change the list.
        if was_healthy != slot.is_empty() {
            let mut counts = self.counts.lock().unwrap();
            let c = &mut counts[physical];
            c.healthy = slot.is_empty();
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
