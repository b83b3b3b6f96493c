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
use edgegpu_node::power::throttle::{self, ThrottleSeconds};
use edgegpu_node::power::PowerFacts;
use edgegpu_node::{gpu, labels, logging, mps, ownership, rounds, runtime, shutdown};

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

/// The plugin's own reason to end a round: the MIG geometry changed (settle it before
/// rebuilding).
struct MigGeometryChanged;

impl std::fmt::Display for MigGeometryChanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the MIG geometry changed")
    }
}

/// Runs the plugin as the command line describes, until SIGTERM/SIGINT. A SIGHUP or a changed
/// MIG geometry ends the round: every resource is stopped (sockets removed), discovery runs
/// again and the resources it finds are served and registered anew.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let signals = shutdown::ShutdownSignals::install()?;
    tracing::info!(
        "Starting edgegpu device plugin {} for '{}'",
        cli::VERSION,
        cli.resource_name
    );
    // A bad or busy metrics address ends the plugin before discovery, with its message.
    let mut metrics = MetricsEndpoint::bind(&cli).await?;
    // One set of options (and registration counters) for every round.
    let options = cli.lifecycle_options();
    let owned = ownership::Ownerships::new(cli.ownership_dir(), "edgegpu-device-plugin");
    let mut plugin = PluginRounds {
        cli: &cli,
        options: &options,
        metrics: &mut metrics,
    };
    let result = rounds::serve_rounds(&mut plugin, signals, owned).await;
    metrics.stop();
    if let Some(path) = cli.feature_file() {
        remove_feature_file(path).await;
    }
    result
}

/// The plugin's rounds ([`rounds::serve_rounds`]): discover, serve until a signal, a
/// takeover or a MIG reconfiguration, rebuild.
struct PluginRounds<'a> {
    cli: &'a Cli,
    options: &'a LifecycleOptions,
    metrics: &'a mut MetricsEndpoint,
}

impl rounds::Rounds for PluginRounds<'_> {
    type Found = node::Round;
    type End = MigGeometryChanged;
    const REBUILDING: &'static str = "Rebuilding the resources";

    /// The round's one discovery: the GPU resources, the engines and the feature file's
    /// labels all read it.
    async fn discover(
        &mut self,
        after: Option<&rounds::RoundEnd<MigGeometryChanged>>,
    ) -> anyhow::Result<node::Round> {
        let cli = self.cli;
        // After a MIG geometry change (or a rebuild that met a refused geometry): wait until
        // the geometry is valid and stable before serving it; never exit for a geometry met
        // while running, which is what reconfigurations pass through.
        let mut settle = matches!(after, Some(rounds::RoundEnd::Program(MigGeometryChanged)));
        loop {
            if settle {
                node::settle_mig_geometry(&cli.root, &cli.resource_name, &cli.gpu).await?;
            }
            match node::build_round(&cli.root, &cli.resource_name, &cli.gpu).await {
                // Changed again between settling and discovery: settle again.
                Err(e)
                    if after.is_some()
                        && e.downcast_ref::<node::InvalidMigGeometry>().is_some() =>
                {
                    settle = true;
                }
                round => return round,
            }
        }
    }

    fn kinds(&self, round: &node::Round) -> Vec<ownership::DeviceKind> {
        round
            .gpus
            .resources
            .iter()
            .map(|_| ownership::DeviceKind::Gpu)
            .chain(
                round
                    .engines
                    .iter()
                    .map(|e| ownership::DeviceKind::from(e.kind())),
            )
            .collect()
    }

    async fn serve(
        &mut self,
        round: node::Round,
        held: &[ownership::DeviceKind],
        until: rounds::Until<'_, MigGeometryChanged>,
    ) -> anyhow::Result<()> {
        let node::Round {
            gpus: mut node,
            mut engines,
            facts,
        } = round;
        // Serve only the kinds this plugin holds (docs/dra.md): the others wait for a
        // takeover, which ends the round. Every GPU resource (MIG and shared replicas
        // included) hands out GPUs.
        node.resources
            .retain(|_| held.contains(&ownership::DeviceKind::Gpu));
        engines.retain(|e| held.contains(&e.kind().into()));
        let cli = self.cli;
        let power = facts.jetson.as_ref().map(|j| j.power.clone());
        // The feature file's power-mode labels follow `nvpmodel -m` for the round's length.
        let mut follow_power = None;
        if let Some(path) = cli.feature_file() {
            publish_feature_file(path, &node.resources, facts.clone()).await;
            if facts.jetson.as_ref().is_some_and(|j| j.power.followable()) {
                follow_power = Some(tokio::spawn(follow_power_mode(
                    path.to_path_buf(),
                    cli.root.clone(),
                    cli.gpu.power_recheck(),
                    node.resources.clone(),
                    facts,
                )));
            }
        }
        self.metrics
            .describe(cli, &node.resources, self.options)
            .await?;
        self.metrics.describe_engines(cli, &engines);
        self.metrics.describe_power(cli, power);
        let served = serve_round(node, engines, self.options, until).await;
        if let Some(task) = follow_power {
            task.abort();
        }
        served
    }
}

/// Serves one round's resources until a signal, a takeover or (MIG strategies) a changed
/// geometry.
async fn serve_round(
    node: NodeResources,
    engines: Vec<Arc<engine_resource::EngineResource>>,
    options: &LifecycleOptions,
    until: rounds::Until<'_, MigGeometryChanged>,
) -> anyhow::Result<()> {
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
    let stop = until.end_or(async move {
        // No MIG watch (its sender is gone): nothing will ever change.
        if reconfigured.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
        MigGeometryChanged
    });
    if resources.is_empty() {
        // Every kind is served by the DRA driver: nothing to register, wait for a signal or a
        // takeover (serve_all would return at once).
        stop.await;
    } else {
        serve_all(resources, options.clone(), stop).await?;
    }
    Ok(())
}

/// `/metrics`: bound once, before discovery; it outlives the rounds, starting with the first
/// and describing the resources of the current one.
struct MetricsEndpoint {
    /// Until the first round starts the server.
    listener: Option<tokio::net::TcpListener>,
    source: Option<Arc<metrics::MetricsSource>>,
    stop: tokio::sync::watch::Sender<bool>,
    /// A Jetson GPU's throttling seconds and the task counting them: started with the first
    /// round that has a GPU devfreq, kept across rounds (a counter never restarts).
    throttle: Option<(Arc<ThrottleSeconds>, tokio::task::JoinHandle<()>)>,
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
            throttle: None,
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

    /// Scrapes describe this Jetson's power mode, clocks and thermal zones from now on
    /// (`None`: not a Jetson); the first round with a GPU devfreq starts counting throttling.
    fn describe_power(&mut self, cli: &Cli, power: Option<PowerFacts>) {
        let (Some(source), Some(facts)) = (&self.source, power) else {
            return;
        };
        if !facts.followable() {
            return;
        }
        if self.throttle.is_none() {
            if let Some(sampler) = throttle::Sampler::new(&cli.root, &facts) {
                let seconds = Arc::new(ThrottleSeconds::default());
                let task = tokio::spawn(throttle::count(
                    sampler,
                    seconds.clone(),
                    THROTTLE_LOOK_EVERY,
                    cli.gpu.power_recheck(),
                ));
                self.throttle = Some((seconds, task));
            }
        }
        let seconds = self.throttle.as_ref().map(|(s, _)| s.clone());
        source.set_power(cli.root.clone(), facts, seconds);
    }

    fn stop(&self) {
        self.stop.send_replace(true);
        if let Some((_, task)) = &self.throttle {
            task.abort();
        }
    }
}

/// How often the throttling sampler looks at the GPU: the resolution of
/// `edgegpu_gpu_throttle_seconds_total` (docs/metrics.md).
const THROTTLE_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

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

/// Rewrites the feature file each time the power mode or the GPU's ceiling under it changed
/// (docs/power.md); the round, and what it serves, go on.
async fn follow_power_mode(
    path: std::path::PathBuf,
    root: std::path::PathBuf,
    every: std::time::Duration,
    resources: Vec<Arc<GpuResource>>,
    mut facts: NodeFacts,
) {
    while let Some(jetson) = facts.jetson.as_mut() {
        jetson.power = edgegpu_node::power::follow::changed(&root, &jetson.power, every).await;
        publish_feature_file(&path, &resources, facts.clone()).await;
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
