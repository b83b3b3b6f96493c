//! One discovery per round: the config file and the node's GPUs, found once, with the facts
//! read from them. The labels ([`crate::labels::for_snapshot`]), the DRA driver's inventory
//! and the round's serving plan ([`crate::serving::served_of`]) all read the same snapshot,
//! so a round never probes the hardware twice nor sees two different answers.

use std::path::Path;

use crate::config::{Config, GpuArgs, MigStrategy};
use crate::engines;
use crate::facts::NodeFacts;
use crate::gpu::discovery::{self, Discovered, NoGpuError, Platform};

/// What one discovery found on the node.
#[derive(Debug)]
pub struct Snapshot {
    /// The effective configuration (flags, environment, the config file).
    pub config: Config,
    /// The GPUs and MIG devices, or why none was found (a program decides whether that is
    /// fatal: the device plugin's `--fail-on-init-error`).
    pub discovered: Result<Discovered, NoGpuError>,
    /// What the node is, read from what discovery found (default without a GPU, but for the
    /// engines: a Jetson's DLA and PVA are probed whether or not its GPU was found).
    pub facts: NodeFacts,
}

impl Snapshot {
    /// Reads the config `args` describe (and logs it) and discovers the GPUs under `root` once
    /// (MIG devices where the MIG strategy enumerates them). Blocking: NVML, sysfs, device
    /// nodes.
    pub fn take(root: &Path, args: &GpuArgs) -> anyhow::Result<Snapshot> {
        let config = args.resolve()?;
        tracing::info!(
            "Running with config: {}",
            serde_json::to_string(&config).unwrap_or_default()
        );
        tracing::info!(
            "Using device discovery strategy: {}",
            serde_json::to_string(&config.discovery)
                .unwrap_or_default()
                .trim_matches('"')
        );
        let with_mig = config.mig_strategy != MigStrategy::None;
        let discovered = discovery::discover(root, config.discovery, with_mig);
        let mut facts = match &discovered {
            Ok(d) => NodeFacts::read(root, &d.platform, &d.gpus, d.nvml.as_deref()),
            Err(e) => {
                tracing::info!("{e}");
                NodeFacts::default()
            }
        };
        // Read with the Jetson's facts when discovery served its GPU as Tegra; otherwise (no
        // GPU found, or NVML chosen on a Jetson) from the host's own Tegra probe.
        if !matches!(&discovered, Ok(d) if matches!(d.platform, Platform::Tegra { .. })) {
            facts.engines = engines::discover_on_host(root);
        }
        Ok(Snapshot {
            config,
            discovered,
            facts,
        })
    }

    /// [`Snapshot::take`] on tokio's blocking pool: for a round that runs on the runtime.
    pub async fn take_off_runtime(root: &Path, args: &GpuArgs) -> anyhow::Result<Snapshot> {
        let (root, args) = (root.to_path_buf(), args.clone());
        tokio::task::spawn_blocking(move || Snapshot::take(&root, &args)).await?
    }

    /// The GPUs found, if any.
    pub fn gpus_found(&self) -> Option<&Discovered> {
        self.discovered.as_ref().ok()
    }
}
