//! The kubelet side: registration through the kubelet's plugin watcher
//! (`/var/lib/kubelet/plugins_registry/<driver>-reg.sock`, `PluginInfo.type = "DRAPlugin"`),
//! the DRA gRPC service (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`, and `v1beta1`) on
//! `/var/lib/kubelet/plugins/<driver>/dra.sock`, and device health
//! (`v1alpha1.DRAResourceHealth`). Follows the kubelet's client code
//! (`pkg/kubelet/cm/dra/plugin`) and `k8s.io/dynamic-resource-allocation/kubeletplugin`.
//! Knows nothing about GPUs: it calls a [`Driver`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One device of a prepared claim, as the kubelet gets it back (`dra.v1.Device`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedDevice {
    /// The claim's requests this device was allocated for.
    pub requests: Vec<String>,
    pub pool: String,
    pub device: String,
    /// Fully qualified CDI device IDs (`vendor/class=name`) the runtime injects.
    pub cdi_device_ids: Vec<String>,
    /// The allocation's `shareID`, for devices allocated several times (v1 only).
    pub share_id: Option<String>,
}

/// Health of one published device, for the kubelet's health stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Unknown,
    Healthy,
    Unhealthy,
}

/// One device's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHealth {
    pub pool: String,
    pub device: String,
    pub health: Health,
    /// Why (≤ 1024 bytes: the kubelet's limit).
    pub message: String,
}

/// What the kubelet side calls. Calls are serialised by the kubelet side (one prepare or
/// unprepare at a time), as the kubeletplugin helper does by default.
#[tonic::async_trait]
pub trait Driver: Send + Sync + 'static {
    /// Prepares one claim: idempotent (the kubelet retries and calls again after restarts).
    /// `Err` carries the message the kubelet shows on the pod's events.
    async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, String>;
    /// Undoes [`Driver::prepare`]; a claim never prepared (or already unprepared) is `Ok`.
    async fn unprepare(&self, claim: &ClaimRef) -> Result<(), String>;
    /// Every published device's health, current value first, a new full list on change.
    fn health(&self) -> watch::Receiver<Vec<DeviceHealth>>;
}

/// Where the kubelet side puts its sockets.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// Registered with the kubelet (`PluginInfo.name`): [`crate::DRIVER_NAME`].
    pub driver_name: String,
    /// The kubelet's plugin-watcher directory (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: PathBuf,
    /// This driver's directory, where `dra.sock` lives (`/var/lib/kubelet/plugins/<driver>`).
    pub plugin_dir: PathBuf,
}
