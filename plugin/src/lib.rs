//! `edgegpu-device-plugin`: a kubelet device plugin (API v1beta1) that advertises NVIDIA GPUs.
//!
//! A thin application on the node library (`edgegpu_node`), which finds the GPUs and engines,
//! reads the config and plans each round (docs/architecture.md draws the picture):
//! - [`kubelet`]: everything facing the kubelet — serve, register, survive restarts, let old
//!   kubelets in. It serves [`resource::Resource`]s, one socket each, and knows nothing about
//!   GPUs.
//! - [`allocate`]: what a pod receives — the `Allocate` and preferred-allocation answers of
//!   a resource the node library planned ([`GpuResource`]); [`engine_resource`] the same for
//!   DLA and PVA.
//!
//! [`node`] wires the node library's plan into the served resources. [`metrics`] (Prometheus'
//! `/metrics`) reads all of it and nothing reads it. [`cli`] is the command line around it.

// `tonic::Status` (176 bytes) is the error type of every gRPC handler and of the
// `Resource` contract by design; boxing it would only add allocations on error paths.
#![allow(clippy::result_large_err)]

pub mod allocate;
pub mod cli;
pub mod engine_resource;
pub mod kubelet;
pub mod metrics;
pub mod node;
pub mod resource;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use edgegpu_node::facts::NodeFacts;
use edgegpu_node::{gpu, labels, logging, mps, ownership, runtime, shutdown};

pub use allocate::GpuResource;
pub use cli::Cli;
pub use kubelet::lifecycle::{serve, serve_all, LifecycleOptions};
pub use node::{
    build_gpu_resource, build_gpu_resources, build_resource, build_round, NodeResources, Round,
};

/// The program's entry point (`edgegpu-device-plugin`, and `edgegpu-device-plugin
/// mps-control-daemon` for the MPS companion): parses `args` (argv\[0\] first), sets up
/// logging and runs until a signal. The multi-call `edgegpu` binary calls it.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    if let Some(cli::Command::MpsControlDaemon(args)) = cli.command {
        if let Err(e) = logging::init(args.log_format) {
            eprintln!("edgegpu-device-plugin: cannot set up logging: {e}");
        }
        // Before any thread exists: a private mount namespace covers the whole process only
        // then.
        if let Err(e) =
            edgegpu_node::mps::daemon::isolate(&args.root, args.private_shm(), args.chroot())
        {
            tracing::error!("{e:#}");
            return ExitCode::FAILURE;
        }
        return runtime::run_to_exit(run_mps_daemon(args));
    }
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("edgegpu-device-plugin: cannot set up logging: {e}");
    }
    runtime::run_to_exit(run(cli))
}

/// Why a round of serving ended.
enum RoundEnd {
    Shutdown,
    Rebuild(String),
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
    let mut metrics = MetricsEndpoint::bind(&cli).await?;
    // One set of options (and registration counters) for every round.
    let options = cli.lifecycle_options();
    let result = serve_rounds(&cli, &options, &mut signals, &mut metrics).await;
    metrics.stop();
    if let Some(path) = cli.feature_file() {
        remove_feature_file(path).await;
    }
    result
}

/// Round after round: discover, serve until a signal or a MIG reconfiguration, rebuild.
/// `Ok` on SIGTERM/SIGINT.
async fn serve_rounds(
    cli: &Cli,
    options: &LifecycleOptions,
    signals: &mut shutdown::ShutdownSignals,
    metrics: &mut MetricsEndpoint,
) -> anyhow::Result<()> {
    // After a MIG geometry change (or a rebuild that met a refused geometry): wait until the
    // geometry is valid and stable before serving it; never exit for a geometry met while
    // running, which is what reconfigurations pass through.
    let mut settle = false;
    let mut first_round = true;
    let mut owned = ownership::Ownerships::new(cli.ownership_dir(), "edgegpu-device-plugin");
    loop {
        if settle {
            tokio::select! {
                r = node::settle_mig_geometry(&cli.root, &cli.resource_name, &cli.gpu) => r?,
                _ = signals.recv() => return Ok(()),
            }
            settle = false;
        }
        // The round's one discovery: the GPU resources, the engines and the feature file's
        // labels all read it.
        let round = tokio::select! {
            round = node::build_round(&cli.root, &cli.resource_name, &cli.gpu) => round,
            _ = signals.recv() => return Ok(()),
        };
        let node::Round {
            gpus: node,
            mut engines,
            facts,
        } = match round {
            Ok(round) => round,
            // Changed again between settling and discovery: settle again.
            Err(e) if !first_round && e.downcast_ref::<node::InvalidMigGeometry>().is_some() => {
                settle = true;
                continue;
            }
            Err(e) => return Err(e),
        };
        first_round = false;
        // Serve only the kinds this plugin holds (docs/dra.md): the others wait for a
        // takeover, which ends the round.
        let kinds: Vec<ownership::DeviceKind> = node
            .resources
            .iter()
            .map(|_| ownership::DeviceKind::Gpu)
            .chain(
                engines
                    .iter()
                    .map(|e| ownership::DeviceKind::from(e.kind())),
            )
            .collect();
        owned.acquire(&kinds)?;
        let mut node = node;
        // Every GPU resource (MIG and shared replicas included) hands out GPUs.
        node.resources
            .retain(|_| owned.holds(ownership::DeviceKind::Gpu));
        engines.retain(|e| owned.holds(e.kind().into()));
        if let Some(path) = cli.feature_file() {
            publish_feature_file(path, &node.resources, facts).await;
        }
        metrics.describe(cli, &node.resources, options).await?;
        metrics.describe_engines(cli, &engines);
        match serve_round(node, engines, options, signals, &mut owned, &kinds).await? {
            RoundEnd::Rebuild(why) => tracing::info!("Rebuilding the resources: {why}"),
            RoundEnd::Reconfigured => {
                tracing::info!("Rebuilding the resources: the MIG geometry changed");
                settle = true;
            }
            RoundEnd::Shutdown => return Ok(()),
        }
    }
}

/// Serves one round's resources until a signal or (MIG strategies) a changed geometry.
async fn serve_round(
    node: NodeResources,
    engines: Vec<Arc<engine_resource::EngineResource>>,
    options: &LifecycleOptions,
    signals: &mut shutdown::ShutdownSignals,
    owned: &mut ownership::Ownerships,
    kinds: &[ownership::DeviceKind],
) -> anyhow::Result<RoundEnd> {
    let NodeResources {
        resources,
        mut reconfigured,
    } = node;
    let resources: Vec<Arc<dyn resource::Resource>> = resources
        .into_iter()
        .map(|r| r as Arc<dyn resource::Resource>)
        .chain(
            engines
                .into_iter()
                .map(|r| r as Arc<dyn resource::Resource>),
        )
        .collect();
    let (end_tx, mut end_rx) = tokio::sync::mpsc::channel::<RoundEnd>(1);
    let stop = async {
        let end = tokio::select! {
            shutdown = signals.shutdown_or_hangup() => if shutdown {
                RoundEnd::Shutdown
            } else {
                RoundEnd::Rebuild("SIGHUP".into())
            },
            _ = async {
                // No MIG watch (its sender is gone): nothing will ever change.
                if reconfigured.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            } => RoundEnd::Reconfigured,
            taken = owned.take_over(kinds) => RoundEnd::Rebuild(taken.to_string()),
        };
        let _ = end_tx.send(end).await;
    };
    if resources.is_empty() {
        // Every kind is served by the DRA driver: nothing to register, wait for a signal or a
        // takeover (serve_all would return at once).
        stop.await;
    } else {
        serve_all(resources, options.clone(), stop).await?;
    }
    Ok(end_rx.recv().await.unwrap_or(RoundEnd::Shutdown))
}

/// `/metrics`: bound once, before discovery; it outlives the rounds, starting with the first
/// and describing the resources of the current one.
struct MetricsEndpoint {
    /// Until the first round starts the server.
    listener: Option<tokio::net::TcpListener>,
    source: Option<Arc<metrics::MetricsSource>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl MetricsEndpoint {
    /// Binds `--metrics-bind-address` (nothing when it is empty).
    async fn bind(cli: &Cli) -> anyhow::Result<MetricsEndpoint> {
        let listener = match cli.metrics_address()? {
            Some(addr) => Some(metrics::server::bind(addr).await?),
            None => None,
        };
        Ok(MetricsEndpoint {
            listener,
            source: None,
            stop: tokio::sync::watch::channel(false).0,
        })
    }

    /// Scrapes describe `resources` from now on; the first call starts the server. Sensors
    /// are located off the runtime thread (they read host files and NVML).
    async fn describe(
        &mut self,
        cli: &Cli,
        resources: &[Arc<GpuResource>],
        options: &LifecycleOptions,
    ) -> anyhow::Result<()> {
        let resources = resources.to_vec();
        if let Some(source) = &self.source {
            let source = source.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || source.replace(resources)).await {
                tracing::warn!("locating the GPU sensors failed: {e}");
            }
            return Ok(());
        }
        let Some(listener) = self.listener.take() else {
            return Ok(());
        };
        let (stats, cli) = (options.stats.clone(), cli.clone());
        let source = tokio::task::spawn_blocking(move || {
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
        .map_err(|e| anyhow::anyhow!("locating the GPU sensors failed: {e}"))?;
        let source = Arc::new(source);
        let mut stopped = self.stop.subscribe();
        tokio::spawn(metrics::server::serve(
            listener,
            source.clone(),
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ));
        self.source = Some(source);
        Ok(())
    }

    /// Scrapes describe these engines from now on.
    fn describe_engines(&self, cli: &Cli, engines: &[Arc<engine_resource::EngineResource>]) {
        if let Some(source) = &self.source {
            let all = engines.iter().flat_map(|r| r.engines().to_vec()).collect();
            source.set_engines(cli.root.clone(), all);
        }
    }

    fn stop(&self) {
        self.stop.send_replace(true);
    }
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
        private_shm: args.private_shm(),
    };
    mps::daemon::run(options, async move { signals.recv().await }).await
}

/// Writes the NFD feature file off the runtime thread (labels read host files and NVML).
async fn publish_feature_file(
    path: &std::path::Path,
    resources: &[Arc<GpuResource>],
    facts: NodeFacts,
) {
    let (path, resources) = (path.to_path_buf(), resources.to_vec());
    if let Err(e) =
        tokio::task::spawn_blocking(move || write_feature_file(&path, &resources, &facts)).await
    {
        tracing::warn!("writing the feature file failed: {e}");
    }
}

/// Removes the NFD feature file on the way out (its labels describe a plugin that stopped).
async fn remove_feature_file(path: &std::path::Path) {
    let path = path.to_path_buf();
    let removed =
        tokio::task::spawn_blocking(move || labels::feature_file::remove(&path).map(|r| (r, path)))
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

/// Writes the NFD feature file; a failure is logged, never fatal (labels are a convenience,
/// the GPUs are served either way).
fn write_feature_file(path: &std::path::Path, resources: &[Arc<GpuResource>], facts: &NodeFacts) {
    let served: Vec<_> = resources.iter().map(|r| r.served().clone()).collect();
    let labels = labels::for_served(&served, facts);
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
