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
//! [`node`] wires `gpu` and `allocate` into the served resource. Two readers look at all
//! three sides and nothing looks at them: [`metrics`] (Prometheus' `/metrics`) and [`labels`]
//! (the node's GPU labels). [`cli`], [`config`], [`logging`], [`runtime`] and [`shutdown`] are the program
//! around it.

// `tonic::Status` (176 bytes) is the error type of every gRPC handler and of the
// `Resource` contract by design; boxing it would only add allocations on error paths.
#![allow(clippy::result_large_err)]

pub mod allocate;
pub mod cli;
pub mod config;
pub mod gpu;
pub mod kubelet;
pub mod labels;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod resource;
pub mod runtime;
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
    // A bad or busy metrics address ends the plugin before discovery, with its message.
    let metrics_listener = match cli.metrics_address()? {
        Some(addr) => Some(metrics::server::bind(addr).await?),
        None => None,
    };
    let resource = tokio::select! {
        resource = build_gpu_resource(&cli.root, &cli.resource_name, &cli.gpu) => resource?,
        _ = signals.recv() => return Ok(()),
    };
    if let Some(path) = cli.feature_file() {
        write_feature_file(path, &resource);
    }
    let options = cli.lifecycle_options();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    if let Some(listener) = metrics_listener {
        let source = metrics::MetricsSource::new(
            resource.clone(),
            options.stats.clone(),
            cli.pod_resources_socket(),
            cli.node_name(),
        );
        let mut stopped = stopped.clone();
        tokio::spawn(metrics::server::serve(
            listener,
            std::sync::Arc::new(source),
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ));
    }
    serve(resource, options, async move {
        signals.recv().await;
        stop.send_replace(true);
    })
    .await
}

/// Writes the NFD feature file; a failure is logged, never fatal (labels are a convenience,
/// the GPUs are served either way).
fn write_feature_file(path: &std::path::Path, resource: &GpuResource) {
    let labels = labels::for_resource(resource);
    match labels::feature_file::write(path, &labels) {
        Ok(true) => {
            tracing::info!(file = %path.display(), labels = labels.iter().count(), "Node Feature Discovery feature file written")
        }
        Ok(false) => tracing::info!(
            "{} does not exist (Node Feature Discovery not installed); no feature file written",
            path.parent().unwrap_or(path).display()
        ),
        Err(e) => tracing::warn!("{e:#}"),
    }
}
