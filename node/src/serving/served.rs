//! One planned resource of the node: its units, sharing and limits, its health table.

use std::path::PathBuf;
use std::sync::Arc;

use super::sharing::{self, Replication};
use super::{device_specs, limits, unit::Unit};
use crate::config::Config;
use crate::gpu::health::{Advertised, HealthCounts, HealthTable};
use crate::gpu::{Gpu, Platform};

/// Some devices of this node as one extended resource, as planned and health-watched: what
/// the device plugin serves to the kubelet (wrapped with its Allocate answers) and what the
/// DRA driver follows for health.
pub struct Served {
    /// The advertised name.
    pub name: String,
    /// The name before sharing renamed it (`nvidia.com/gpu` for `nvidia.com/gpu.shared`).
    pub configured_name: String,
    pub config: Config,
    /// The host root the GPUs were found under (what metrics and labels read).
    pub root: PathBuf,
    /// `None` when no GPU was found and `--fail-on-init-error=false`.
    pub platform: Option<Platform>,
    /// Every GPU of the node (units refer to them by position).
    pub gpus: Vec<Gpu>,
    /// The devices this resource serves.
    pub units: Vec<Unit>,
    /// Per unit: its ID under `--device-id-strategy`.
    pub base_ids: Vec<String>,
    pub replication: Option<Replication>,
    /// MPS replicas' or memory units' limits (`None`: whole GPUs or time-slicing).
    pub limits: Option<limits::Limits>,
    /// The MPS control daemon serving this resource, as the companion must run it.
    pub mps_daemon: Option<crate::mps::plan::DaemonSettings>,
    pub table: Arc<HealthTable>,
    /// The `/dev` nodes for `--pass-device-specs` (`None` when it is off).
    /// Shared by the node's resources.
    pub device_nodes: Option<Arc<device_specs::DeviceNodes>>,
    /// NVML, where discovery kept it loaded (discrete GPUs, hybrid Jetsons).
    pub nvml: Option<Arc<nvml_wrapper::Nvml>>,
}

impl Drop for Served {
    /// A rebuild drops the old resources on the runtime thread; when theirs is the last NVML
    /// handle, dropping it calls `nvmlShutdown`, which blocks: hand it to the blocking pool.
    fn drop(&mut self) {
        if let (Some(nvml), Ok(runtime)) = (self.nvml.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn_blocking(move || drop(nvml));
        }
    }
}

impl Served {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The platform found (None: no GPU, running with zero devices).
    pub fn platform(&self) -> Option<&Platform> {
        self.platform.as_ref()
    }

    /// Every GPU of the node.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// Per unit, its ID under `--device-id-strategy` (`GPU-…`/`MIG-…`/`tegra`, or the index).
    pub fn base_ids(&self) -> &[String] {
        &self.base_ids
    }

    /// The advertised device IDs (units or their replicas) and the unit of each.
    pub fn advertised(&self) -> &[Advertised] {
        self.table.advertised()
    }

    /// Time-slicing or MPS replicas per unit (`None`: units are not replicated).
    pub fn replication(&self) -> Option<Replication> {
        self.replication
    }

    /// The name before sharing renamed it (`nvidia.com/gpu` for `nvidia.com/gpu.shared`).
    pub fn resource_name_configured(&self) -> &str {
        &self.configured_name
    }

    /// How many devices unit `p` is advertised as, where units are shared (replicas or
    /// memory units); `None` for whole units.
    pub fn advertised_per_unit(&self, p: usize) -> Option<u32> {
        if self.replication.is_none() && self.limits.is_none() {
            return None;
        }
        Some(self.advertised().iter().filter(|a| a.physical == p).count() as u32)
    }

    /// The limits of MPS replicas or memory units (`None`: none set).
    pub fn limits(&self) -> Option<&limits::Limits> {
        self.limits.as_ref()
    }

    /// The MPS control daemon this resource needs (`None`: no MPS).
    pub fn mps_daemon(&self) -> Option<&crate::mps::plan::DaemonSettings> {
        self.mps_daemon.as_ref()
    }

    /// The unit (position in [`Self::units`]) behind an advertised device ID, also for a
    /// replica ID of an earlier configuration (`tegra::7` after the replica count went down):
    /// its base ID decides.
    pub fn physical_of(&self, device_id: &str) -> Option<usize> {
        if let Some(a) = self.advertised().iter().find(|a| a.id == device_id) {
            return Some(a.physical);
        }
        let base = sharing::base_id(device_id);
        self.base_ids.iter().position(|b| b == base)
    }

    /// Each unit's health and transition counts.
    pub fn health(&self) -> Vec<HealthCounts> {
        self.table.counts()
    }

    /// The host root the GPUs were found under.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// NVML, where discovery kept it loaded.
    pub fn nvml(&self) -> Option<&Arc<nvml_wrapper::Nvml>> {
        self.nvml.as_ref()
    }

    /// The devices this resource serves.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// The CDI device name part of unit `physical`.
    pub fn cdi_id(&self, physical: usize) -> String {
        self.units[physical].cdi_name(
            &self.gpus,
            self.platform.as_ref(),
            self.config.device_id_strategy,
        )
    }
}
