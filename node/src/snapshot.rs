//! One discovery per round: the config file and the node's GPUs, found once, with the facts
//! read from them. The labels ([`crate::labels::for_snapshot`]), the DRA driver's inventory
//! and the round's serving plan ([`crate::serving::served_of`]) all read the same snapshot,
//! so a round never probes the hardware twice nor sees two different answers.

use std::path::Path;

use crate::config::{Config, GpuArgs, MigStrategy};
use crate::facts::NodeFacts;
use crate::gpu::discovery::{self, Discovered};

/// What one discovery found on the node.
#[derive(Debug)]
pub struct Snapshot {
    /// The effective configuration (flags, environment, the config file).
    pub config: Config,
    /// The GPUs and MIG devices; `None` when there is no GPU (the reason was logged).
    pub discovered: Option<Discovered>,
    /// What the node is, read from what discovery found (default without a GPU).
    pub facts: NodeFacts,
}

impl Snapshot {
    /// Reads the config `args` describe and discovers the GPUs under `root` once (MIG
    /// devices where the MIG strategy enumerates them). Blocking: NVML, sysfs, device nodes.
    pub fn take(root: &Path, args: &GpuArgs) -> anyhow::Result<Snapshot> {
        let config = args.resolve()?;
        let with_mig = config.mig_strategy != MigStrategy::None;
        let discovered = match discovery::discover(root, config.discovery, with_mig) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::info!("{e}");
                None
            }
        };
        let facts = discovered
            .as_ref()
            .map(|d| NodeFacts::read(root, &d.platform, &d.gpus, d.nvml.as_deref()))
            .unwrap_or_default();
        Ok(Snapshot {
            config,
            discovered,
            facts,
        })
    }
}
