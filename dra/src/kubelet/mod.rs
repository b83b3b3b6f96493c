//! The kubelet side: registration through the kubelet's plugin watcher
//! (`/var/lib/kubelet/plugins_registry/<driver>-reg.sock`, `PluginInfo.type = "DRAPlugin"`),
//! the DRA gRPC service (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`, and `v1beta1`) on
//! `/var/lib/kubelet/plugins/<driver>/dra.sock`, and device health
//! (`v1alpha1.DRAResourceHealth`). Follows the kubelet's client code
//! (kubernetes main of 2025–26: `pkg/kubelet/cm/dra/plugin` @0062353, `pkg/kubelet/pluginmanager`
//! @02910b7) and
//! k8s.io/dynamic-resource-allocation v0.36.0 `kubeletplugin`. Knows nothing about GPUs: it
//! calls a [`Driver`].
//!
//! [`serve`] runs it all:
//! - [`socket`]: both sockets, bound at fixed paths after removing stale files, bound again
//!   when deleted, removed on shutdown (only while still ours);
//! - [`service`]: `NodePrepareResources` / `NodeUnprepareResources`, v1 and v1beta1, one
//!   entry per claim, calls serialised;
//! - [`health`]: `NodeWatchResources`, the full device list on connect, on change and every
//!   10 s;
//! - [`registration`]: `GetInfo` (v1 listed before v1beta1) and `NotifyRegistrationStatus`.
//!
//! Kubelet restarts need nothing from the driver: the kubelet's plugin watcher walks
//! `plugins_registry` when it starts and registers every socket it finds there
//! (`pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go` traversePluginDir), and it
//! dials `dra.sock` again on its own.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use edgegpu_kubelet_api::dra_v1::DRA_SOCKET_NAME;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tonic::transport::Server;

pub mod health;
pub mod registration;
pub mod service;
pub mod socket;

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

impl KubeletOptions {
    /// The DRA service's socket, `<plugin_dir>/dra.sock` (the endpoint the kubelet dials).
    pub fn dra_socket(&self) -> PathBuf {
        self.plugin_dir.join(DRA_SOCKET_NAME)
    }

    /// The registration socket, `<registry_dir>/<driver_name>-reg.sock`.
    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir
            .join(format!("{}-reg.sock", self.driver_name))
    }
}

/// How long a shutdown waits for the gRPC servers to finish their calls in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves the kubelet until `shutdown` resolves: creates `plugin_dir` (and `registry_dir`,
/// normally the kubelet's), serves the DRA v1 and v1beta1 services and the health service
/// on [`KubeletOptions::dra_socket`], then the plugin-watcher registration service on
/// [`KubeletOptions::registration_socket`] (the kubelet dials the DRA socket as soon as it
/// sees the registration socket, so that one comes last). On shutdown both sockets are
/// removed. Fails when a socket cannot be bound or a server fails.
pub async fn serve(
    driver: Arc<dyn Driver>,
    options: KubeletOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    for dir in [&options.plugin_dir, &options.registry_dir] {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create directory {}", dir.display()))?;
    }
    let (stop_tx, stop) = watch::channel(false);
    let dra_path = options.dra_socket();
    let (dra_incoming, dra_socket) = socket::serve(dra_path.clone(), "DRA", stop.clone())?;
    let node = service::NodeService::new(driver.clone());
    let dra_server = Server::builder()
        .add_service(node.v1())
        .add_service(node.v1beta1())
        .add_service(health::HealthService::new(driver, stop.clone()).into_server())
        .serve_with_incoming_shutdown(dra_incoming, stopped_owned(stop.clone()));
    let mut dra_task = tokio::spawn(dra_server);

    // The registration socket has a stop signal of its own: on shutdown it goes first, so
    // the kubelet deregisters the driver before the DRA socket disappears.
    let (reg_stop_tx, reg_stop) = watch::channel(false);
    let reg_path = options.registration_socket();
    let (reg_incoming, reg_socket) =
        match socket::serve(reg_path.clone(), "registration", reg_stop.clone()) {
            Ok(served) => served,
            Err(e) => {
                let _ = stop_tx.send(true);
                let _ = dra_socket.await;
                dra_task.abort();
                return Err(e.into());
            }
        };
    let info = registration::plugin_info(&options.driver_name, &dra_path.to_string_lossy());
    let reg_server = Server::builder()
        .add_service(registration::RegistrationService::new(info).into_server())
        .serve_with_incoming_shutdown(reg_incoming, stopped_owned(reg_stop));
    let mut reg_task = tokio::spawn(reg_server);
    tracing::info!(
        "Serving DRA driver '{}' to the kubelet: DRA services on {}, registration on {}",
        options.driver_name,
        dra_path.display(),
        reg_path.display()
    );

    let failure = tokio::select! {
        _ = shutdown => None,
        ended = &mut dra_task => Some(format!("the DRA gRPC server ended: {}", describe(ended))),
        ended = &mut reg_task => Some(format!("the registration gRPC server ended: {}", describe(ended))),
    };
    if failure.is_none() {
        tracing::info!(
            "Shutting down the kubelet side of DRA driver '{}'",
            options.driver_name
        );
    }
    let _ = reg_stop_tx.send(true);
    if let Err(e) = reg_socket.await {
        tracing::warn!("registration socket task failed: {e}");
    }
    let _ = stop_tx.send(true);
    if let Err(e) = dra_socket.await {
        tracing::warn!("DRA socket task failed: {e}");
    }
    for task in [&mut reg_task, &mut dra_task] {
        if task.is_finished() {
            continue;
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut *task)
            .await
            .is_err()
        {
            tracing::warn!("A gRPC server did not stop within {SHUTDOWN_GRACE:?}; aborting it");
            task.abort();
        }
    }
    match failure {
        Some(failure) => {
            tracing::error!("{failure}");
            anyhow::bail!(failure)
        }
        None => Ok(()),
    }
}

async fn stopped_owned(mut stop: watch::Receiver<bool>) {
    socket::stopped(&mut stop).await
}

fn describe(ended: Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>) -> String {
    match ended {
        Ok(Ok(())) => "without error".to_string(),
        Ok(Err(e)) => format!("{e:#}"),
        Err(e) => format!("{e}"),
    }
}
