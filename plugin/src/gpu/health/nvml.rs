//! Discrete GPU health through NVML: critical XID events and lost GPUs, with recovery.
//!
//! NVIDIA's plugin marks a GPU unhealthy forever; here a GPU becomes Healthy again when it
//! answers NVML queries again (lost GPU) or, after an XID, when it has kept answering for the
//! recovery delay without a new critical XID.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::HealthTable;

/// Application-level XIDs that say nothing about the GPU's health (NVIDIA's list).
const IGNORED_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// How long one `nvmlEventSetWait` blocks; also the period of the "does it answer" probe.
const WAIT_MS: u32 = 2000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cause {
    Xid(Instant),
    Lost,
}

/// Starts the health thread for `uuids` (table index = position). Ends when the table is dropped.
pub fn spawn(
    nvml: Arc<Nvml>,
    uuids: Vec<String>,
    table: &Arc<HealthTable>,
    extra_ignored: BTreeSet<u64>,
    recovery: Duration,
) -> anyhow::Result<()> {
    let mut ignored: BTreeSet<u64> = IGNORED_XIDS.into_iter().collect();
    ignored.extend(extra_ignored);
    tracing::info!("Ignoring the following XIDs for health checks: {ignored:?}");
    let weak = Arc::downgrade(table);
    std::thread::Builder::new()
        .name("nvml-health".into())
        .spawn(move || run(&nvml, &uuids, weak, &ignored, recovery))?;
    Ok(())
}

/// Does the GPU answer? `NotSupported` counts as an answer (it came from the driver).
fn probe(nvml: &Nvml, uuid: &str) -> Result<(), NvmlError> {
    let device = nvml.device_by_uuid(uuid)?;
    match device.memory_info() {
        Ok(_) | Err(NvmlError::NotSupported) => Ok(()),
        Err(e) => Err(e),
    }
}

fn run(
    nvml: &Nvml,
    uuids: &[String],
    table: Weak<HealthTable>,
    ignored: &BTreeSet<u64>,
    recovery: Duration,
) {
    let mut causes: Vec<Option<Cause>> = vec![None; uuids.len()];
    let mut set = register(nvml, uuids);
    let mut rebuild = false;
    loop {
        let Some(table) = table.upgrade() else { return };
        let waited = match &set {
            Some(s) => s.wait(WAIT_MS).map(Some),
            None => {
                std::thread::sleep(Duration::from_millis(u64::from(WAIT_MS)));
                Ok(None)
            }
        };
        match waited {
            Ok(Some(event)) if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) => {
                let xid = match event.event_data {
                    Some(XidError::Value(v)) => v,
                    _ => 999,
                };
                let index = event
                    .device
                    .uuid()
                    .ok()
                    .and_then(|u| uuids.iter().position(|x| *x == u));
                if ignored.contains(&xid) {
                    tracing::info!(xid, "ignoring application XID {xid}");
                } else {
                    let reason = format!("XidCriticalError: Xid={xid}");
                    match index {
                        Some(i) => {
                            causes[i] = Some(Cause::Xid(Instant::now()));
                            table.report(i, Err(format!("{reason} on Device={}", uuids[i])));
                        }
                        None => {
                            // NVIDIA: an event we cannot attribute marks every GPU unhealthy.
                            for (i, c) in causes.iter_mut().enumerate() {
                                *c = Some(Cause::Xid(Instant::now()));
                                table.report(i, Err(format!("{reason} on an unidentified device")));
                            }
                        }
                    }
                }
            }
            Ok(_) | Err(NvmlError::Timeout) => {}
            Err(e) => {
                tracing::warn!("Error waiting for NVML event: {e}; probing every GPU");
                // A broken event set (e.g. a GPU fell off the bus) is rebuilt below.
                rebuild = true;
            }
        }
        // Probe: lost GPUs, and recovery of unhealthy ones.
        for (i, uuid) in uuids.iter().enumerate() {
            match probe(nvml, uuid) {
                Err(e) => {
                    if !matches!(causes[i], Some(Cause::Lost)) {
                        causes[i] = Some(Cause::Lost);
                        table.report(i, Err(format!("GPU {uuid} does not answer NVML: {e}")));
                    }
                }
                Ok(()) => match causes[i] {
                    Some(Cause::Lost) => {
                        causes[i] = None;
                        table.report(i, Ok(()));
                        rebuild = true; // re-register its events
                    }
                    Some(Cause::Xid(at)) if at.elapsed() >= recovery => {
                        causes[i] = None;
                        table.report(i, Ok(()));
                    }
                    _ => {}
                },
            }
        }
        if rebuild {
            drop(set.take()); // free the old set before registering again
            set = register(nvml, uuids);
            rebuild = false;
        }
    }
}

/// An event set with critical-XID events of every GPU that supports them.
fn register<'n>(nvml: &'n Nvml, uuids: &[String]) -> Option<nvml_wrapper::EventSet<'n>> {
    let mut set = match nvml.create_event_set() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "Failed to start health check: {e}; continuing with XID checks disabled"
            );
            return None;
        }
    };
    for uuid in uuids {
        let Ok(device) = nvml.device_by_uuid(uuid.as_str()) else {
            continue;
        };
        let supported = device
            .supported_event_types()
            .unwrap_or(EventTypes::empty());
        if !supported.contains(EventTypes::CRITICAL_XID_ERROR) {
            tracing::info!(%uuid, "GPU does not report XID events; only lost-GPU checks apply");
            continue;
        }
        match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(s) => set = s,
            Err(e) => {
                // The wrapper released the set; XIDs stay off until the next rebuild.
                tracing::warn!(%uuid, "cannot register XID events: {e}");
                return None;
            }
        }
    }
    Some(set)
}
