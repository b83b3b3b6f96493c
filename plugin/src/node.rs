//! The node's resources as this plugin serves them: the node library's plan of the GPUs
//! (`edgegpu_node::serving`) wrapped with the kubelet's `Allocate` answers, and the DLA and PVA
//! engines. One resource normally (`nvidia.com/gpu`); with `--mig-strategy mixed` one per MIG
//! profile as well. The kubelet side only sees the result as [`Resource`]s.

use std::path::Path;
use std::sync::Arc;

use edgegpu_node::config::{Config, GpuArgs};
use edgegpu_node::engines::{Engine, EngineKind};
use edgegpu_node::facts::NodeFacts;
use edgegpu_node::gpu::discovery::{Discovered, NoGpuError};
use edgegpu_node::serving::{self, ServedNode};
use edgegpu_node::snapshot::Snapshot;
use tokio::sync::watch;

use crate::allocate::GpuResource;
use crate::engine_resource::EngineResource;
use crate::resource::Resource;

pub use edgegpu_node::serving::{settle_mig_geometry, InvalidMigGeometry};

/// The resources of this node, and the signal that they must be rebuilt.
pub struct NodeResources {
    pub resources: Vec<Arc<GpuResource>>,
    /// Becomes `true` when the MIG geometry changed (MIG strategies only): the resources no
    /// longer describe the node and must be built again.
    pub reconfigured: watch::Receiver<bool>,
}

impl From<ServedNode> for NodeResources {
    fn from(node: ServedNode) -> Self {
        Self {
            resources: node
                .resources
                .into_iter()
                .map(|served| Arc::new(GpuResource::new(served)))
                .collect(),
            reconfigured: node.reconfigured,
        }
    }
}

/// Everything one round of the plugin serves, from the round's one snapshot: the GPU
/// resources, the DLA and PVA resources, and the facts the feature file's labels read. The
/// program's rounds and the `simulate` example both build it with [`build_round`].
pub struct Round {
    pub gpus: NodeResources,
    pub engines: Vec<Arc<EngineResource>>,
    pub facts: NodeFacts,
}

/// Takes the round's snapshot under `root` (the config `args` describe and one discovery) and
/// builds what it serves. A MIG geometry the strategy refuses is an [`InvalidMigGeometry`]
/// error; no GPU is one unless `--fail-on-init-error=false`.
pub async fn build_round(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<Round> {
    let Snapshot {
        config,
        discovered,
        facts,
    } = Snapshot::take_off_runtime(root, args).await?;
    let gpus = resources_of_discovery(root, resource_name, &config, discovered).await?;
    let engines = if args.engines == Some(false) {
        Vec::new()
    } else {
        engine_resources_of(root, &config, &facts.engines).await?
    };
    Ok(Round {
        gpus,
        engines,
        facts,
    })
}

/// Detects the GPUs under `root` and returns the one resource to serve (`--mig-strategy
/// mixed` may need several: use [`build_gpu_resources`]).
pub async fn build_resource(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<Arc<dyn Resource>> {
    let resource: Arc<dyn Resource> = build_gpu_resource(root, resource_name, args).await?;
    Ok(resource)
}

/// [`build_resource`] with the concrete type (for callers that want to show what was found).
pub async fn build_gpu_resource(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<Arc<GpuResource>> {
    let mut node = build_gpu_resources(root, resource_name, args).await?;
    anyhow::ensure!(
        node.resources.len() == 1,
        "this node serves {} resources ({}); build them with build_gpu_resources",
        node.resources.len(),
        node.resources
            .iter()
            .map(|r| r.name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(node.resources.remove(0))
}

/// Detects the GPUs under `root` and returns every resource to serve. A MIG geometry the
/// strategy refuses is an [`InvalidMigGeometry`] error.
pub async fn build_gpu_resources(
    root: &Path,
    resource_name: &str,
    args: &GpuArgs,
) -> anyhow::Result<NodeResources> {
    Ok(serving::build_served(root, resource_name, args)
        .await?
        .into())
}

/// The resources a round's snapshot makes (its config, and what discovery found or why
/// nothing was): [`edgegpu_node::serving::served_of_discovery`].
pub async fn resources_of_discovery(
    root: &Path,
    resource_name: &str,
    config: &Config,
    discovered: Result<Discovered, NoGpuError>,
) -> anyhow::Result<NodeResources> {
    Ok(
        serving::served_of_discovery(root, resource_name, config, discovered)
            .await?
            .into(),
    )
}

/// The resources `config` makes of what discovery found, with their health monitors and,
/// for MIG strategies, the watch on the MIG geometry as `discovered` saw it.
pub async fn resources_of(
    root: &Path,
    resource_name: &str,
    config: &Config,
    discovered: Discovered,
) -> anyhow::Result<NodeResources> {
    Ok(serving::served_of(root, resource_name, config, discovered)
        .await?
        .into())
}

/// The node's DLA and PVA resources (`nvidia.com/dla`, `nvidia.com/pva`), each only where the
/// host has engines of its kind, with their health monitor running (kept alive by the
/// resources' tables). Empty when `--engines=false` or the host is not a Jetson. They use the
/// GPU resource's device list strategies and `--health-checks` setting. The plugin's round
/// reads the engines its snapshot found instead ([`engine_resources_of`]).
pub async fn build_engine_resources(
    root: &Path,
    args: &GpuArgs,
) -> anyhow::Result<Vec<Arc<EngineResource>>> {
    if args.engines == Some(false) {
        return Ok(Vec::new());
    }
    let (args, root_owned) = (args.clone(), root.to_path_buf());
    let (config, found) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        Ok((
            args.resolve()?,
            edgegpu_node::engines::discover_on_host(&root_owned),
        ))
    })
    .await??;
    engine_resources_of(root, &config, &found).await
}

/// The DLA and PVA resources of the engines `found` (a round's snapshot,
/// `NodeFacts::engines`), as [`build_engine_resources`] describes them.
pub async fn engine_resources_of(
    root: &Path,
    config: &Config,
    found: &[Engine],
) -> anyhow::Result<Vec<Arc<EngineResource>>> {
    let resources: Vec<Arc<EngineResource>> = EngineKind::ALL
        .iter()
        .filter_map(|k| EngineResource::new(root, *k, found, &config.device_list_strategy))
        .map(Arc::new)
        .collect();
    if config.health_checks && !resources.is_empty() {
        let watched = resources.iter().flat_map(|r| r.health_targets()).collect();
        let monitor =
            Arc::new(edgegpu_node::engines::health::spawn(root.to_path_buf(), watched).await?);
        for r in &resources {
            r.table.keep_monitor(monitor.clone());
        }
    }
    for r in &resources {
        tracing::info!(resource = %r.resource_name(), devices = r.engines().len(), "engine resource ready");
    }
    Ok(resources)
}
