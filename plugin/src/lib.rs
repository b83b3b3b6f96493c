//! `edgegpu-device-plugin`: a kubelet device plugin (API v1beta1) that advertises NVIDIA GPUs.
//!
//! Three sides, each in one place (docs/architecture.md draws the picture):
//! - [`kubelet`]: everything facing the kubelet — serve, register, survive restarts, let old
//!   kubelets in. It serves one [`resource::Resource`] and knows nothing about GPUs.
//! - [`gpu`]: everything facing the hardware — the device model, discovery and health per
//!   platform; Jetson facts come from the `edgegpu-platform` table.
//! - [`allocate`]: what a pod receives — device IDs and replicas, Allocate strategies, device
//!   specs, preferred allocation. Reads `gpu`; `gpu` never reads it.
//!
//! [`node`] wires `gpu` and `allocate` into the served resource; [`cli`], [`config`],
//! [`logging`] and [`shutdown`] are the program around it.

// `tonic::Status` (176 bytes) is the error type of every gRPC handler and of the
// `Resource` contract by design; boxing it would only add allocations on error paths.
#![allow(clippy::result_large_err)]

pub mod allocate;
pub mod cli;
pub mod config;
pub mod gpu;
pub mod kubelet;
pub mod logging;
pub mod node;
pub mod resource;
pub mod shutdown;

use std::sync::Arc;

pub use allocate::GpuResource;
pub use cli::Cli;
pub use kubelet::lifecycle::{serve, serve_all, LifecycleOptions};
pub use node::{build_gpu_resource, build_gpu_resources, build_resource, NodeResources};

/// Why a round of serving ended.
enum RoundEnd {
    Shutdown,
    Rebuild(&'static str),
}

/// Runs the plugin as the command line describes, until SIGTERM/SIGINT. A SIGHUP or a changed
/// MIG geometry ends the round: every resource is stopped (sockets removed), discovery runs
/// again and the resources it finds are served and registered anew.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut signals = shutdown::ShutdownSignals::install()?;
    tracing::info!(
        "Starting edgegpu device plugin {} for '{}'",
        cli::VERSION,
        cli.resource_name
    );
    loop {
        let node = tokio::select! {
            node = build_gpu_resources(&cli.root, &cli.resource_name, &cli.gpu) => node?,
            _ = signals.recv() => return Ok(()),
        };
        let NodeResources {
            resources,
            mut reconfigured,
        } = node;
        let resources: Vec<Arc<dyn resource::Resource>> = resources
            .into_iter()
            .map(|r| r as Arc<dyn resource::Resource>)
            .collect();
        let (end_tx, mut end_rx) = tokio::sync::mpsc::channel::<RoundEnd>(1);
        let signals_ref = &mut signals;
        let stop = async {
            let end = tokio::select! {
                shutdown = signals_ref.shutdown_or_hangup() => if shutdown {
                    RoundEnd::Shutdown
                } else {
                    RoundEnd::Rebuild("SIGHUP")
                },
                _ = async {
                    // No MIG watch (its sender is gone): nothing will ever change.
                    if reconfigured.wait_for(|c| *c).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                } => RoundEnd::Rebuild("the MIG geometry changed"),
            };
            let _ = end_tx.send(end).await;
        };
        serve_all(resources, cli.lifecycle_options(), stop).await?;
        match end_rx.recv().await {
            Some(RoundEnd::Rebuild(why)) => {
                tracing::info!("Rebuilding the resources: {why}");
            }
            Some(RoundEnd::Shutdown) | None => return Ok(()),
        }
    }
}
