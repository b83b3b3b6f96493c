//! `edgegpu-device-plugin`: a kubelet device plugin (API v1beta1) that advertises NVIDIA GPUs.
//!
//! Three sides, each in one place (docs/architecture.md draws the picture):
//! - [`kubelet`]: everything facing the kubelet — serve, register, survive restarts, let old
//!   kubelets in. It serves [`resource::Resource`]s, one socket each, and knows nothing about
//!   GPUs.
//! - [`gpu`]: everything facing the hardware — the device model, discovery and health per
//!   platform; Jetson facts come from the `edgegpu-platform` table.
//! - [`allocate`]: what a pod receives — device IDs and replicas, Allocate strategies, device
//!   specs, preferred allocation. Reads `gpu`; `gpu` never reads it.
//!
//! [`node`] wires `gpu` and `allocate` into the served resources. Two readers look at all
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
pub mod mps;
pub mod node;
pub mod resource;
pub mod runtime;
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
    /// The MIG geometry changed: settle it before rebuilding.
    Reconfigured,
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
    // A bad or busy metrics address ends the plugin before discovery, with its message.
    let mut metrics_listener = match cli.metrics_address()? {
        Some(addr) => Some(metrics::server::bind(addr).await?),
        None => None,
    };
    // One set of options (and registration counters) for every round.
    let options = cli.lifecycle_options();
    let mut metrics_source: Option<Arc<metrics::MetricsSource>> = None;
    let (metrics_stop, metrics_stopped) = tokio::sync::watch::channel(false);
    // After a MIG geometry change (or a rebuild that met a refused geometry): wait until the
    // geometry is valid and stable before serving it; never exit for a geometry met while
    // running, which is what reconfigurations pass through.
    let mut settle = false;
    let mut first_round = true;
    let result = loop {
        if settle {
            let settled = tokio::select! {
                r = node::settle_mig_geometry(&cli.root, &cli.resource_name, &cli.gpu) => r,
                _ = signals.recv() => break Ok(()),
            };
            if let Err(e) = settled {
                break Err(e);
            }
            settle = false;
        }
        let node = tokio::select! {
            node = build_gpu_resources(&cli.root, &cli.resource_name, &cli.gpu) => node,
            _ = signals.recv() => break Ok(()),
        };
        let NodeResources {
            resources,
            mut reconfigured,
        } = match node {
            Ok(node) => node,
            // Changed again between settling and discovery: settle again.
            Err(e) if !first_round && e.downcast_ref::<node::InvalidMigGeometry>().is_some() => {
                settle = true;
                continue;
            }
            Err(e) => break Err(e),
        };
        first_round = false;
        // Labels and sensors read host files (and NVML): off the runtime thread.
        if let Some(path) = cli.feature_file() {
            let (path, resources) = (path.to_path_buf(), resources.clone());
            if let Err(e) =
                tokio::task::spawn_blocking(move || write_feature_file(&path, &resources)).await
            {
                tracing::warn!("writing the feature file failed: {e}");
            }
        }
        // The metrics endpoint outlives the rounds: it starts with the first and describes
        // the resources of the current one.
        match (&metrics_source, metrics_listener.take()) {
            (Some(source), _) => {
                let (source, resources) = (source.clone(), resources.clone());
                if let Err(e) = tokio::task::spawn_blocking(move || source.replace(resources)).await
                {
                    tracing::warn!("locating the GPU sensors failed: {e}");
                }
            }
            (None, Some(listener)) => {
                let (resources, stats, cli) =
                    (resources.clone(), options.stats.clone(), cli.clone());
                let source = match tokio::task::spawn_blocking(move || {
                    metrics::MetricsSource::new(
                        resources,
                        stats,
                        cli.pod_resources_socket(),
                        cli.node_name(),
                    )
                    // The kubelet keeps its device manager checkpoint beside our socket.
                    .with_checkpoint(
                        cli.device_plugin_path
                            .join(kubelet::checkpoint::CHECKPOINT_FILE),
                    )
                })
                .await
                {
                    Ok(source) => Arc::new(source),
                    Err(e) => break Err(anyhow::anyhow!("locating the GPU sensors failed: {e}")),
                };
                let mut stopped = metrics_stopped.clone();
                tokio::spawn(metrics::server::serve(
                    listener,
                    source.clone(),
                    async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    },
                ));
                metrics_source = Some(source);
            }
            (None, None) => {}
        }
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
                } => RoundEnd::Reconfigured,
            };
            let _ = end_tx.send(end).await;
        };
        if let Err(e) = serve_all(resources, options.clone(), stop).await {
            break Err(e);
        }
        match end_rx.recv().await {
            Some(RoundEnd::Rebuild(why)) => {
                tracing::info!("Rebuilding the resources: {why}");
            }
            Some(RoundEnd::Reconfigured) => {
                tracing::info!("Rebuilding the resources: the MIG geometry changed");
                settle = true;
            }
            Some(RoundEnd::Shutdown) | None => break Ok(()),
        }
    };
    metrics_stop.send_replace(true);
    if let Some(path) = cli.feature_file() {
        let path = path.to_path_buf();
        let removed = tokio::task::spawn_blocking(move || {
            labels::feature_file::remove(&path).map(|r| (r, path))
        })
        .await;
        match removed {
            Ok(Ok((true, path))) => {
                tracing::info!(file = %path.display(), "Node Feature Discovery feature file removed")
            }
            Ok(Ok((false, _))) => {}
            Ok(Err(e)) => tracing::warn!("{e:#}"),
            Err(e) => tracing::warn!("removing the feature file failed: {e}"),
        }
    }
    result
}

/// Runs the MPS companion (`mps-control-daemon`) until SIGTERM/SIGINT; the caller has
/// already isolated the process ([`mps::daemon::isolate`]).
pub async fn run_mps_daemon(args: cli::MpsDaemonArgs) -> anyhow::Result<()> {
    let mut signals = shutdown::ShutdownSignals::install()?;
    tracing::info!(
        "Starting edgegpu MPS control daemon companion {}",
        cli::VERSION
    );
    let root = args.effective_root();
    let binary = mps::support::find_control_binary(&root, args.mps_control_binary.as_deref())
        .map(|host| gpu::under_root(&root, &host.to_string_lossy()));
    // Discrete GPUs' compute mode needs NVML; a Jetson without it needs nothing of it.
    let nvml = {
        let root = root.clone();
        match tokio::task::spawn_blocking(move || gpu::discovery::nvml::load_nvml(&root)).await? {
            Ok(nvml) => Some(Arc::new(nvml)),
            Err(e) => {
                tracing::info!("{e:#}");
                None
            }
        }
    };
    let options = mps::daemon::Options {
        mps_root: args.mps_root.clone(),
        binary,
        nvml,
    };
    mps::daemon::run(options, async move { signals.recv().await }).await
}

/// Writes the NFD feature file; a failure is logged, never fatal (labels are a convenience,
/// the GPUs are served either way).
fn write_feature_file(path: &std::path::Path, resources: &[Arc<GpuResource>]) {
    let labels = labels::for_resources(resources);
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
