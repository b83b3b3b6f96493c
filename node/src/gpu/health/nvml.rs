//! Health through NVML: critical XID events and lost GPUs, per whole GPU and per MIG device,
//! with recovery; and, for MIG strategies, the watch on the MIG geometry.
//!
//! NVIDIA's plugin marks a GPU unhealthy forever; here a device becomes Healthy again when it
//! answers NVML queries again (lost GPU) or, after an XID, when it has kept answering for the
//! recovery delay without a new critical XID. An XID that carries GPU/compute instance ids
//! hits only that MIG device; one without hits every device of its GPU (as NVIDIA's plugin).
//!
//! MIG reconfiguration: NVML has no event for a changed MIG geometry (GPU instances created or
//! destroyed with `nvidia-smi mig` or mig-parted), so the health loop re-reads it on every tick
//! (MIG mode and MIG device UUIDs of each GPU: a handful of NVML calls every 2 s) and reports a
//! change on `MigWatch::changed`; the plugin then rebuilds and re-registers its resources.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use tokio::sync::watch;

use super::{HealthTable, Target};
use crate::gpu::discovery::nvml::mig_modes;
use crate::gpu::nvml_raw;
use crate::gpu::{Gpu, MigDevice};

/// Application-level XIDs that say nothing about the GPU's health (NVIDIA's list).
const IGNORED_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// How long one `nvmlEventSetWait` blocks; also the period of the probes and the MIG watch.
const WAIT_MS: u32 = 2000;

/// The period of the probes and the MIG watch.
pub const TICK: Duration = Duration::from_millis(WAIT_MS as u64);

/// Monitor name in health reasons.
const SOURCE: &str = "nvml";

/// One device NVML watches: a whole GPU, or a MIG device of it.
#[derive(Clone)]
pub struct Watched {
    /// NVML UUID of the (parent) GPU.
    pub gpu_uuid: String,
    /// A MIG device: its UUID and (GPU instance, compute instance).
    pub mig: Option<(String, u32, u32)>,
    pub target: Target,
}

/// The MIG geometry seen at discovery, to notice a reconfiguration.
pub struct MigWatch {
    /// NVML UUID of every GPU of the node (None where NVML does not see it).
    pub gpus: Vec<Option<String>>,
    /// MIG mode and MIG device UUIDs per GPU at discovery.
    pub layout: Vec<(bool, Vec<String>)>,
    /// Set to `true` when the geometry changed.
    pub changed: watch::Sender<bool>,
}

impl MigWatch {
    /// A watch whose baseline is the geometry discovery found: `gpus` and their MIG devices
    /// `migs` (in NVML order, as [`mig_layout`] lists them).
    pub fn of_discovery(gpus: &[Gpu], migs: &[MigDevice], changed: watch::Sender<bool>) -> Self {
        let layout = (0..gpus.len())
            .map(|i| {
                let uuids = migs
                    .iter()
                    .filter(|m| m.parent == i)
                    .map(|m| m.uuid.clone())
                    .collect();
                (gpus[i].mig_enabled, uuids)
            })
            .collect();
        MigWatch {
            gpus: gpus.iter().map(|g| g.nvml_uuid.clone()).collect(),
            layout,
            changed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cause {
    Xid(Instant),
    Lost,
}

/// Starts the health thread (for `watched`, possibly none, and the MIG watch). It ends when
/// every table of `lifetime` (the node's resources) is dropped.
pub fn spawn(
    nvml: Arc<Nvml>,
    watched: Vec<Watched>,
    lifetime: Vec<Weak<HealthTable>>,
    extra_ignored: BTreeSet<u64>,
    recovery: Duration,
    mig_watch: Option<MigWatch>,
) -> anyhow::Result<()> {
    let mut ignored: BTreeSet<u64> = IGNORED_XIDS.into_iter().collect();
    ignored.extend(extra_ignored);
    tracing::info!("Ignoring the following XIDs for health checks: {ignored:?}");
    std::thread::Builder::new()
        .name("nvml-health".into())
        .spawn(move || run(&nvml, &watched, &lifetime, &ignored, recovery, mig_watch))?;
    Ok(())
}

/// Does the device answer? `NotSupported` counts as an answer (it came from the driver).
fn probe(nvml: &Nvml, w: &Watched) -> Result<(), String> {
    let device = nvml
        .device_by_uuid(w.gpu_uuid.as_str())
        .map_err(|e| format!("GPU {} does not answer NVML: {e}", w.gpu_uuid))?;
    match nvml_raw::memory_info(&device) {
        Ok(_) | Err(NvmlError::NotSupported) => {}
        Err(e) => return Err(format!("GPU {} does not answer NVML: {e}", w.gpu_uuid)),
    }
    if let Some((uuid, _, _)) = &w.mig {
        nvml.device_by_uuid(uuid.as_str())
            .map_err(|e| format!("MIG device {uuid} is gone: {e}"))?;
    }
    Ok(())
}

/// MIG mode and MIG device UUIDs of each GPU, as now.
pub fn mig_layout(nvml: &Nvml, gpus: &[Option<String>]) -> Vec<(bool, Vec<String>)> {
    let modes = mig_modes(nvml, gpus);
    gpus.iter()
        .zip(modes)
        .map(|(uuid, enabled)| {
            let mut migs = Vec::new();
            if let (true, Some(uuid)) = (enabled, uuid) {
                if let Ok(device) = nvml.device_by_uuid(uuid.as_str()) {
                    let max = device.mig_device_count().unwrap_or(0);
                    for i in 0..max {
                        if let Ok(uuid) = device.mig_device_by_index(i).and_then(|m| m.uuid()) {
                            migs.push(uuid);
                        }
                    }
                }
            }
            (enabled, migs)
        })
        .collect()
}

/// The watched devices an event for GPU `gpu_uuid` (on MIG instance `instance`) hits.
fn hit_by(watched: &[Watched], gpu_uuid: &str, instance: Option<(u32, u32)>) -> Vec<usize> {
    let of_gpu: Vec<usize> = (0..watched.len())
        .filter(|i| watched[*i].gpu_uuid == gpu_uuid)
        .collect();
    if let Some((gi, ci)) = instance {
        let exact: Vec<usize> = of_gpu
            .iter()
            .copied()
            .filter(|i| matches!(&watched[*i].mig, Some((_, g, c)) if *g == gi && *c == ci))
            .collect();
        if !exact.is_empty() {
            return exact;
        }
    }
    of_gpu
}

fn describe(w: &Watched) -> &str {
    w.mig.as_ref().map_or(w.gpu_uuid.as_str(), |(u, _, _)| u)
}

fn run(
    nvml: &Nvml,
    watched: &[Watched],
    lifetime: &[Weak<HealthTable>],
    ignored: &BTreeSet<u64>,
    recovery: Duration,
    mig_watch: Option<MigWatch>,
) {
    let mut causes: Vec<Option<Cause>> = vec![None; watched.len()];
    let gpu_uuids: BTreeSet<&str> = watched.iter().map(|w| w.gpu_uuid.as_str()).collect();
    let mut set = register(nvml, &gpu_uuids);
    let mut rebuild = false;
    let mut geometry_reported = false;
    loop {
        if lifetime.iter().all(|t| t.strong_count() == 0) {
            return;
        }
        let waited = match &set {
            Some(s) => nvml_raw::wait(nvml, s, WAIT_MS).map(Some),
            None => {
                std::thread::sleep(Duration::from_millis(u64::from(WAIT_MS)));
                Ok(None)
            }
        };
        match waited {
            Ok(Some(event)) if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) => {
                let xid = event.xid;
                if ignored.contains(&xid) {
                    tracing::info!(xid, "ignoring application XID {xid}");
                } else {
                    let reason = format!("XidCriticalError: Xid={xid}");
                    let hit = match &event.gpu_uuid {
                        Some(uuid) => hit_by(watched, uuid, event.instance),
                        None => Vec::new(),
                    };
                    if hit.is_empty() {
                        // NVIDIA: an event we cannot attribute marks every device unhealthy.
                        for (i, w) in watched.iter().enumerate() {
                            causes[i] = Some(Cause::Xid(Instant::now()));
                            w.target
                                .report(SOURCE, Err(format!("{reason} on an unidentified device")));
                        }
                    }
                    for i in hit {
                        causes[i] = Some(Cause::Xid(Instant::now()));
                        let w = &watched[i];
                        w.target
                            .report(SOURCE, Err(format!("{reason} on Device={}", describe(w))));
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
        // Probe: lost GPUs and MIG devices, and recovery of unhealthy ones.
        for (i, w) in watched.iter().enumerate() {
            match probe(nvml, w) {
                Err(reason) => {
                    if !matches!(causes[i], Some(Cause::Lost)) {
                        causes[i] = Some(Cause::Lost);
                        w.target.report(SOURCE, Err(reason));
                    }
                }
                Ok(()) => match causes[i] {
                    Some(Cause::Lost) => {
                        causes[i] = None;
                        w.target.report(SOURCE, Ok(()));
                        rebuild = true; // re-register its events
                    }
                    Some(Cause::Xid(at)) if at.elapsed() >= recovery => {
                        causes[i] = None;
                        w.target.report(SOURCE, Ok(()));
                    }
                    _ => {}
                },
            }
        }
        if let Some(mw) = &mig_watch {
            if !geometry_reported {
                let now = mig_layout(nvml, &mw.gpus);
                if now != mw.layout {
                    tracing::info!(before = ?mw.layout, now = ?now, "MIG geometry changed; re-advertising");
                    mw.changed.send_replace(true);
                    geometry_reported = true;
                }
            }
        }
        if rebuild {
            drop(set.take()); // free the old set before registering again
            set = register(nvml, &gpu_uuids);
            rebuild = false;
        }
    }
}

/// An event set with critical-XID events of every GPU that supports them.
fn register<'n>(nvml: &'n Nvml, uuids: &BTreeSet<&str>) -> Option<nvml_wrapper::EventSet<'n>> {
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
        let Ok(device) = nvml.device_by_uuid(*uuid) else {
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
