//! The kubelet side: registration through the kubelet's plugin watcher
//! (`/var/lib/kubelet/plugins_registry/<driver>-reg.sock`, `PluginInfo.type = "DRAPlugin"`),
//! the DRA gRPC service (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`, and `v1beta1`) on
//! `/var/lib/kubelet/plugins/<driver>/dra.sock` (both names with the pod's UID in them for
//! rolling updates: [`rolling`]), and device health
//! (`v1alpha1.DRAResourceHealth`). Follows the kubelet's client code
//! (kubernetes main of 2025–26: `pkg/kubelet/cm/dra/plugin` @0062353, `pkg/kubelet/pluginmanager`
//! @02910b7) and
//! k8s.io/dynamic-resource-allocation v0.36.0 `kubeletplugin`. Knows nothing about GPUs: it
//! calls a [`Driver`].
//!
//! [`serve`] runs it all:
//! - [`socket`]: both sockets, bound after removing stale files at their paths, bound again
//!   when deleted, removed on shutdown (only while still ours);
//! - [`rolling`]: the pod UID in the sockets' names, so that the old and the new pod of a
//!   rolling update are registered side by side;
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
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tonic::transport::Server;

mod contract;
pub mod health;
pub mod registration;
pub mod rolling;
pub mod service;
pub mod socket;

pub use contract::{
    ClaimRef, DeviceHealth, Driver, DriverError, Health, KubeletOptions, PreparedDevice,
};

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
        .add_service(registration::service(info).into_server())
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
