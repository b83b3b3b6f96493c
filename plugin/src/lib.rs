//! `edgegpu-device-plugin`: a kubelet device plugin (API v1beta1) that advertises NVIDIA GPUs.
//!
//! gRPC side (this crate's lifecycle): [`server`] serves one [`resource::Resource`],
//! [`registration`] / [`plugin_watcher`] announce it, [`lifecycle`] keeps it registered
//! across kubelet restarts, [`socket`] names and removes sockets safely, [`authority`]
//! lets old kubelets in. GPU side: [`config`], [`gpu`] build the resource.

// `tonic::Status` (176 bytes) is the error type of every gRPC handler and of the
// `Resource` contract by design; boxing it would only add allocations on error paths.
#![allow(clippy::result_large_err)]

pub mod allocate;
pub mod authority;
pub mod cli;
pub mod config;
pub mod device_specs;
pub mod discovery;
pub mod gpu;
pub mod health;
pub mod lifecycle;
pub mod logging;
pub mod plugin_watcher;
pub mod registration;
pub mod resource;
pub mod server;
pub mod sharing;
pub mod shutdown;
pub mod socket;

pub use cli::Cli;
pub use lifecycle::{serve, LifecycleOptions};

/// Runs the plugin as the command line describes, until SIGTERM/SIGINT.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut signals = shutdown::ShutdownSignals::install()?;
    tracing::info!(
        "Starting edgegpu device plugin {} for '{}'",
        cli::VERSION,
        cli.resource_name
    );
    let resource = tokio::select! {
        resource = gpu::build_resource(&cli.root, &cli.resource_name, &cli.gpu) => resource?,
        _ = signals.recv() => return Ok(()),
    };
    lifecycle::serve(resource, cli.lifecycle_options(), async move {
        signals.recv().await
    })
    .await
}
