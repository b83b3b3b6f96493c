//! What the kubelet side and the rest of the driver agree on: the claim and device types of
//! the DRA calls, the [`Driver`] the kubelet side calls, where its sockets go.

use std::path::PathBuf;

use edgegpu_kubelet_api::dra_v1::DRA_SOCKET_NAME;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::rolling::PodUid;

/// A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// `namespace/name (uid)`, how messages name a claim.
impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} ({})", self.namespace, self.name, self.uid)
    }
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

/// Why a [`Driver`] could not prepare or unprepare a claim: the node side's own error, kept
/// whole up to the gRPC answer, where its message becomes the claim's `error` (the text the
/// kubelet shows on the pod's events).
pub type DriverError = Box<dyn std::error::Error + Send + Sync>;

/// What the kubelet side calls. Calls are serialised by the kubelet side (one prepare or
/// unprepare at a time), as the kubeletplugin helper does by default.
#[tonic::async_trait]
pub trait Driver: Send + Sync + 'static {
    /// Prepares one claim: idempotent (the kubelet retries and calls again after restarts).
    async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, DriverError>;
    /// Undoes [`Driver::prepare`]; a claim never prepared (or already unprepared) is `Ok`.
    async fn unprepare(&self, claim: &ClaimRef) -> Result<(), DriverError>;
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
    /// The pod's UID when the DaemonSet updates by surge ([`super::rolling`]): both sockets
    /// carry it, so the old and the new pod serve side by side. `None`: the fixed names.
    pub rolling_update: Option<PodUid>,
}

impl KubeletOptions {
    /// The DRA service's socket, the endpoint the kubelet dials: `<plugin_dir>/dra.sock`, or
    /// `<plugin_dir>/dra-<pod uid>.sock` with [`KubeletOptions::rolling_update`].
    pub fn dra_socket(&self) -> PathBuf {
        match &self.rolling_update {
            None => self.plugin_dir.join(DRA_SOCKET_NAME),
            Some(uid) => self.plugin_dir.join(format!("dra-{uid}.sock")),
        }
    }

    /// The registration socket: `<registry_dir>/<driver_name>-reg.sock`, or
    /// `<registry_dir>/<driver_name>-<pod uid>-reg.sock` with
    /// [`KubeletOptions::rolling_update`].
    pub fn registration_socket(&self) -> PathBuf {
        let name = match &self.rolling_update {
            None => format!("{}-reg.sock", self.driver_name),
            Some(uid) => format!("{}-{uid}-reg.sock", self.driver_name),
        };
        self.registry_dir.join(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The names the kubeletplugin helper gives the sockets, without and with
    /// `RollingUpdate(podUID)` (k8s.io/dynamic-resource-allocation v0.36.0 draplugin.go).
    #[test]
    fn sockets_carry_the_pod_uid_only_for_rolling_updates() {
        let mut options = KubeletOptions {
            driver_name: "edgegpu.io".into(),
            registry_dir: "/var/lib/kubelet/plugins_registry".into(),
            plugin_dir: "/var/lib/kubelet/plugins/edgegpu.io".into(),
            rolling_update: None,
        };
        assert_eq!(
            options.registration_socket(),
            Path::new("/var/lib/kubelet/plugins_registry/edgegpu.io-reg.sock")
        );
        assert_eq!(
            options.dra_socket(),
            Path::new("/var/lib/kubelet/plugins/edgegpu.io/dra.sock")
        );
        let uid = "3f9b8c1e-7d2a-4b6e-9c0d-5e4f3a2b1c0d";
        options.rolling_update = Some(PodUid::parse(uid).unwrap());
        assert_eq!(
            options.registration_socket(),
            Path::new(&format!(
                "/var/lib/kubelet/plugins_registry/edgegpu.io-{uid}-reg.sock"
            ))
        );
        assert_eq!(
            options.dra_socket(),
            Path::new(&format!(
                "/var/lib/kubelet/plugins/edgegpu.io/dra-{uid}.sock"
            ))
        );
    }
}
