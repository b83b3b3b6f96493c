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

pub use allocate::GpuResource;
pub use cli::Cli;
pub use kubelet::lifecycle::{serve, LifecycleOptions};
pub use node::{build_gpu_resource, build_resource};

/// Runs the plugin as the command line describes, until SIGTERM/SIGINT.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut signals = shutdown::ShutdownSignals::install()?;
    tracing::info!(
        "Starting edgegpu device plugin {} for '{}'",
        cli::VERSION,
        cli.resource_name
    );
    let resource = tokio::select! {
        resource = build_resource(&cli.root, &cli.resource_name, &cli.gpu) => resource?,
        _ = signals.recv() => return Ok(()),
    };
    serve(resource, cli.lifecycle_options(), async move {
        signals.recv().await
    })
    .await
}
