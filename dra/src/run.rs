//! The driver's life: discover the node's devices, keep the kinds this driver owns on the
//! node (the device plugin may hold others: `edgegpu_node::ownership`), publish them, serve
//! the kubelet, keep the slices and health current, and on SIGTERM/SIGINT remove the sockets
//! and exit. A kind taken over from the device plugin, or a SIGHUP, starts a new round:
//! discovery again, the checkpoint read again, the sockets bound again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use edgegpu_apiclient::ApiServer;
use edgegpu_node::config::MigStrategy;
use edgegpu_node::mps::plan::DaemonSettings;
use edgegpu_node::ownership::{DeviceKind, Ownerships};
use edgegpu_node::rounds::{self, RoundEnd, Until};
use edgegpu_node::shutdown::ShutdownSignals;
use edgegpu_node::snapshot::Snapshot;
use edgegpu_node::{logging, runtime};
use tokio::sync::Notify;

use crate::api_versions::ResourceApi;
use crate::cli::Cli;
use crate::inventory::{Inventory, ShareOptions};
use crate::kubelet::{self, KubeletOptions};
use crate::mps_daemon;
use crate::prepare::{NodeDriver, NodeOptions};
use crate::sharing::{ShareLimits, MPS_RESOURCE};
use crate::slices::SlicePublisher;
use crate::DRIVER_NAME;

/// How often the engines' device nodes and platform devices are checked.
const ENGINE_HEALTH_EVERY: Duration = Duration::from_secs(5);
/// Slices are written again this often even without a change, repairing edits and
/// deletions by others (the upstream slice controller resyncs too).
const RESYNC_EVERY: Duration = Duration::from_secs(600);
/// First and longest delay between two failed publishing attempts.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// The program's entry point (`edgegpu-dra-driver`): parses `args` (argv\[0\] first), sets up
/// logging and runs until a signal. The multi-call `edgegpu` binary calls it.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("edgegpu-dra-driver: cannot set up logging: {e}");
    }
    runtime::run_to_exit(run(cli))
}

/// Runs the driver until SIGTERM/SIGINT.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let signals = ShutdownSignals::install()?;
    tracing::info!(
        "Starting edgegpu DRA driver {} on node {}",
        crate::cli::VERSION,
        cli.api.node_name
    );
    cli.validate()?;
    let api = Arc::new(
        cli.api
            .connect(
                "the ClusterRole edgegpu-dra-driver must allow resourceslices \
                 list/create/update/delete, resourceclaims get and nodes get",
            )
            .await?,
    );
    // Shared: the other pod of a rolling update serves the same kinds (docs/dra.md).
    let owned = Ownerships::new(cli.ownership_dir(), "edgegpu-dra-driver").shared_among_instances();
    rounds::serve_rounds(
        &mut DriverRounds {
            cli: &cli,
            api: &api,
        },
        signals,
        owned,
    )
    .await
}

/// The driver's rounds ([`rounds::serve_rounds`]): discover, publish and serve until a signal
/// or a takeover, rebuild.
struct DriverRounds<'a> {
    cli: &'a Cli,
    api: &'a Arc<ApiServer>,
}

impl rounds::Rounds for DriverRounds<'_> {
    type Found = Round;
    type End = std::convert::Infallible;
    const REBUILDING: &'static str = "Rebuilding";

    async fn discover(&mut self, _after: Option<&RoundEnd>) -> anyhow::Result<Round> {
        let root = self.cli.root.clone();
        let (gpu, node, mps) = (
            self.cli.gpu.clone(),
            self.cli.api.node_name.clone(),
            self.cli.mps,
        );
        let shares = self.cli.share_options();
        tokio::task::spawn_blocking(move || discover(&root, &gpu, &node, mps, shares)).await?
    }

    /// The kinds found that `--devices` lets this driver serve.
    fn kinds(&self, round: &Round) -> Vec<DeviceKind> {
        kinds_of(&round.inventory)
            .into_iter()
            .filter(|k| self.cli.devices.contains(k))
            .collect()
    }

    async fn serve(
        &mut self,
        mut round: Round,
        held: &[DeviceKind],
        until: Until<'_, std::convert::Infallible>,
    ) -> anyhow::Result<()> {
        let cli = self.cli;
        let inventory = &mut round.inventory;
        inventory.devices.retain(|d| {
            let kind = d.kind.kind();
            cli.devices.contains(&kind) && held.contains(&kind)
        });
        inventory.engines.retain(|e| {
            let kind = DeviceKind::from(e.kind);
            cli.devices.contains(&kind) && held.contains(&kind)
        });
        tracing::info!(
            devices = inventory.devices.len(),
            "publishing {}",
            inventory
                .devices
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(daemon) = round.mps_daemon.clone() {
            let gpus = DeviceKind::Gpu;
            let serves_gpus = cli.devices.contains(&gpus) && held.contains(&gpus);
            ask_for_mps_daemon(&round.snapshot.config.mps_root, daemon, serves_gpus).await;
        }
        serve_round(cli, self.api, round, until).await
    }
}

/// `--mps`: tells the MPS companion to run this node's MPS control daemon, or to stop it
/// where MPS cannot run ([`mps_daemon::publish`]), while this driver serves the node's GPUs;
/// the device plugin's list stays untouched otherwise. A failure is logged, not fatal: only
/// MPS claims need the daemon, and they fail to prepare saying that none was asked for.
async fn ask_for_mps_daemon(
    mps_root: &Path,
    daemon: Result<DaemonSettings, mps_daemon::NoDaemon>,
    serves_gpus: bool,
) {
    if !serves_gpus {
        tracing::warn!(
            "--mps: this driver does not serve the node's GPUs (--devices, or the device plugin holds them): no MPS control daemon asked for"
        );
        return;
    }
    let daemon = match daemon {
        Ok(d) => Some(d),
        Err(why) => {
            tracing::warn!("--mps: MPS cannot serve this node's GPUs ({why}); claims with sharing.strategy MPS fail to prepare");
            None
        }
    };
    let (root, resource) = (
        mps_root.to_path_buf(),
        daemon.as_ref().map(|d| d.resource.clone()),
    );
    match tokio::task::spawn_blocking(move || mps_daemon::publish(&root, daemon)).await {
        Ok(Ok(true)) => tracing::info!(
            file = %edgegpu_node::mps::status::desired_path(mps_root).display(),
            resource = resource.as_deref().unwrap_or("none"),
            "MPS control daemon requested from the MPS companion"
        ),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::error!("{e}"),
        Err(e) => tracing::error!("asking for the MPS control daemon: {e}"),
    }
}

/// The node's devices, its Jetson engines included, and the snapshot they come from: the
/// round's one discovery (its health monitors start from the same snapshot); with `mps`, the
/// MPS daemon its GPUs get. Blocking.
fn discover(
    root: &Path,
    gpu: &edgegpu_node::config::GpuArgs,
    node: &str,
    mps: bool,
    shares: ShareOptions,
) -> anyhow::Result<Round> {
    let snapshot = Snapshot::take(root, gpu)?;
    let inventory = Inventory::of_snapshot(root, &snapshot, node, shares)?;
    let mps_daemon = mps.then(|| match snapshot.gpus_found() {
        Some(discovered) => mps_daemon::wanted(
            discovered,
            snapshot.config.mig_strategy != MigStrategy::None,
            MPS_RESOURCE,
        ),
        None => Err(mps_daemon::NoDaemon::NoWholeGpu),
    });
    Ok(Round {
        inventory,
        snapshot,
        mps_daemon,
    })
}

/// What one round serves: the devices it publishes and the discovery they come from.
struct Round {
    inventory: Inventory,
    snapshot: Snapshot,
    /// With `--mps`: the daemon to ask the MPS companion for, or why there is none.
    mps_daemon: Option<Result<DaemonSettings, mps_daemon::NoDaemon>>,
}

fn kinds_of(inventory: &Inventory) -> Vec<DeviceKind> {
    let mut kinds: Vec<DeviceKind> = inventory.devices.iter().map(|d| d.kind.kind()).collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// How memory shares reach containers this round: through the MPS daemon the driver asks
/// for (`--mps` where the platform runs MPS), else accounted, saying why not.
fn share_limits(daemon: Option<&Result<DaemonSettings, mps_daemon::NoDaemon>>) -> ShareLimits {
    match daemon {
        Some(Ok(_)) => ShareLimits::Mps,
        Some(Err(why)) => ShareLimits::Accounted {
            why: format!("MPS cannot run here: {why}"),
        },
        // No --mps.
        None => ShareLimits::default(),
    }
}

/// One round: the node side on `inventory`, the publisher, the health followers and the
/// kubelet side, until a signal or a takeover.
async fn serve_round(
    cli: &Cli,
    api: &Arc<ApiServer>,
    round: Round,
    until: Until<'_, std::convert::Infallible>,
) -> anyhow::Result<()> {
    let options = NodeOptions {
        plugin_dir: cli.plugin_dir(),
        cdi_dir: cli.cdi_dir.clone(),
        mps: crate::sharing::MpsHost {
            // --mps-root (a GPU flag, as the plugin's): claims with `sharing.strategy: MPS`
            // join the daemon the MPS companion runs there.
            mps_root: round.snapshot.config.mps_root.clone(),
            resource: MPS_RESOURCE.to_string(),
        },
        share_limits: share_limits(round.mps_daemon.as_ref()),
    };
    let Round {
        mut inventory,
        snapshot:
            Snapshot {
                mut config,
                discovered,
                facts,
            },
        mps_daemon: _,
    } = round;
    // Claims carry their sharing: the config file's MPS sharing (the plugin's) would make
    // the health monitors wait for a daemon with its limits, which this driver never asks for.
    config.mps = None;
    config.gpu_memory = None;
    // Until the API server says what it serves, nothing that needs a feature is prepared
    // (publish_slices sets what the cluster takes).
    inventory.set_features(crate::api_versions::Features::NONE);
    let has_gpus = inventory
        .devices
        .iter()
        .any(|d| d.kind.kind() == DeviceKind::Gpu);
    let node = {
        let api = api.clone();
        tokio::task::spawn_blocking(move || NodeDriver::new(inventory, options, Some(api)))
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?
    };
    let node = Arc::new(node);
    let republish = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(publish_slices(
        api.clone(),
        cli.api.node_name.clone(),
        node.clone(),
        republish.clone(),
    ));
    tasks.spawn(follow_engine_health(
        cli.root.clone(),
        node.clone(),
        republish.clone(),
    ));
    if let Some(power) = facts.jetson.map(|j| j.power).filter(|p| p.followable()) {
        tasks.spawn(follow_power_mode(
            cli.root.clone(),
            power,
            cli.gpu.power_recheck(),
            node.clone(),
            republish.clone(),
        ));
    }
    // The GPUs' health: the node library's monitors of a planned round (inotify on Tegra
    // nodes and sysfs, NVML events), the same the device plugin serves; here never served to
    // the kubelet.
    let gpu_resources = if let (true, Ok(discovered)) = (has_gpus, discovered) {
        // Only the health: the plan's list of MPS daemons is not this driver's to write.
        match edgegpu_node::serving::served_for_health(
            &cli.root,
            "nvidia.com/gpu",
            &config,
            discovered,
        )
        .await
        {
            Ok(resources) => resources.resources,
            Err(e) => {
                tracing::warn!("GPU health monitors could not start: {e:#}");
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    for resource in &gpu_resources {
        tasks.spawn(follow_gpu_health(
            resource.table.subscribe(),
            node.clone(),
            republish.clone(),
        ));
    }
    let options = KubeletOptions {
        driver_name: DRIVER_NAME.to_string(),
        registry_dir: cli.kubelet_registry_dir.clone(),
        plugin_dir: cli.plugin_dir(),
        rolling_update: cli.rolling_update_pod_uid.clone(),
    };
    let served = kubelet::serve(
        node.clone() as Arc<dyn kubelet::Driver>,
        options,
        until.end(),
    )
    .await;
    tasks.abort_all();
    drop(gpu_resources);
    served
}

/// The `resource.k8s.io` version and features of the cluster, asked until the API server
/// answers (with backoff).
async fn discover_resource_api(api: &ApiServer) -> ResourceApi {
    let mut delay = RETRY_FIRST;
    loop {
        match ResourceApi::discover(api).await {
            Ok(resources) => {
                tracing::info!(
                    version = resources.version.as_str(),
                    minor = resources.minor,
                    "publishing in {}",
                    resources.api_version()
                );
                return resources;
            }
            Err(e) => {
                tracing::error!("{e:#} (asking again in {delay:?})");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}

/// Keeps the API server's slices equal to the node's devices: at start (retried with
/// backoff until it works), after every health change, and every [`RESYNC_EVERY`]. Devices
/// and fields of features the cluster lacks are left out: those its release does not have
/// from the start, those whose gate is off once the server drops their fields (published
/// again without them at once).
async fn publish_slices(
    api: Arc<ApiServer>,
    node_name: String,
    node: Arc<NodeDriver>,
    republish: Arc<Notify>,
) {
    let resources = discover_resource_api(&api).await;
    node.set_features(resources.features());
    let mut publisher = SlicePublisher::new(api, resources, DRIVER_NAME, &node_name);
    let mut delay = RETRY_FIRST;
    loop {
        let started = std::time::Instant::now();
        let published = publisher
            .publish_within(node.features(), |f| node.slice_content_for(f))
            .await;
        match published {
            Ok((outcome, features)) => {
                delay = RETRY_FIRST;
                node.set_features(features);
                tracing::info!(
                    created = outcome.created,
                    updated = outcome.updated,
                    deleted = outcome.deleted,
                    unchanged = outcome.unchanged,
                    generation = outcome.generation,
                    took_ms = started.elapsed().as_millis() as u64,
                    "ResourceSlices published"
                );
                tokio::select! {
                    _ = republish.notified() => {}
                    _ = tokio::time::sleep(RESYNC_EVERY) => {}
                }
            }
            Err(e) => {
                tracing::error!(
                    "publishing the ResourceSlices failed (retrying in {delay:?}): {e:#}"
                );
                tokio::select! {
                    _ = republish.notified() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}

/// Follows one plugin resource's device list into the node side's health.
async fn follow_gpu_health(
    mut devices: tokio::sync::watch::Receiver<Vec<edgegpu_kubelet_api::v1beta1::Device>>,
    node: Arc<NodeDriver>,
    republish: Arc<Notify>,
) {
    loop {
        let list = devices.borrow_and_update().clone();
        if node.apply_plugin_health(&list) {
            republish.notify_one();
        }
        if devices.changed().await.is_err() {
            return;
        }
    }
}

/// Follows the power mode (`nvpmodel -m` while the driver runs) into the devices' power
/// attributes, republishing the slices when one changed.
async fn follow_power_mode(
    root: PathBuf,
    mut power: edgegpu_node::power::PowerFacts,
    every: std::time::Duration,
    node: Arc<NodeDriver>,
    republish: Arc<Notify>,
) {
    loop {
        power = edgegpu_node::power::follow::changed(&root, &power, every).await;
        if node.set_power(&power.published()) {
            republish.notify_one();
        }
    }
}

/// Checks the engines' nodes and platform devices every [`ENGINE_HEALTH_EVERY`].
async fn follow_engine_health(root: PathBuf, node: Arc<NodeDriver>, republish: Arc<Notify>) {
    loop {
        let (r, n) = (root.clone(), node.clone());
        match tokio::task::spawn_blocking(move || n.check_engine_health(&r)).await {
            Ok(true) => republish.notify_one(),
            Ok(false) => {}
            Err(e) => tracing::warn!("engine health check failed: {e}"),
        }
        tokio::time::sleep(ENGINE_HEALTH_EVERY).await;
    }
}
