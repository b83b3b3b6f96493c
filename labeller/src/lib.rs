//! `edgegpu-labeller`: puts a node's GPU labels on its own Node through the API server, for
//! clusters without Node Feature Discovery (k3s). docs/labels.md has the design; in short,
//! two runs of this one program in the plugin image, neither with a steady-state cost:
//!
//! - `--kind-only --wait`: the main container of the `node-labeller` DaemonSet, which runs on
//!   every Linux node and mounts only `/sys`. It sets `edgegpu.io/gpu=jetson|discrete` when
//!   it finds a GPU (the label the device-plugin DaemonSets select on, so nobody has to set it
//!   by hand), then sleeps until SIGTERM.
//! - without flags: the init container of each device-plugin DaemonSet, with the plugin's own
//!   mounts, environment and config. It computes the labels the plugin would write to its NFD
//!   feature file (GPU Feature Discovery's keys and `edgegpu.io/` keys) and patches them, then
//!   exits; the plugin starts whether or not that worked.
//!
//! A value set by hand on `edgegpu.io/gpu` is never changed. The other keys are edgegpu's:
//! they are set to what this node has, and removed where it has no value.

/// The API client, shared with the DRA driver.
pub use edgegpu_apiclient as api;
pub mod kind;
pub mod power_policy;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use edgegpu_apiclient::args::ApiArgs;
use edgegpu_node::config::GpuArgs;
use edgegpu_node::labels::{self, GPU_KIND, KEYS, MIG_PROFILE_PREFIX};
use edgegpu_node::logging::LogFormat;
use edgegpu_node::power::follow::Published;
use edgegpu_node::power::PowerFacts;
use edgegpu_node::snapshot::Snapshot;
use edgegpu_node::{logging, runtime};
use serde_json::{Map, Value};

/// Puts this node's GPU labels on its Node (docs/labels.md).
///
/// Reads the host under --root, computes the labels the device plugin would write for Node
/// Feature Discovery (nvidia.com/gpu.*, edgegpu.io/*) and merge-patches them onto the Node
/// named --node-name, with the pod's service-account token. A value set by hand on
/// edgegpu.io/gpu is left as it is.
#[derive(Debug, Clone, Parser)]
#[command(name = "edgegpu-labeller", version = env!("EDGEGPU_LONG_VERSION"), max_term_width = 100,
          after_help = "Commands:\n  power-policy  the companion that applies the power mode an operator \
                        wants on a Jetson (docs/power.md); `edgegpu-labeller power-policy --help`")]
pub struct Args {
    /// The Node to label and the API server (NODE_NAME, --api-server, --token-file,
    /// --ca-file).
    #[command(flatten)]
    pub api: ApiArgs,

    /// Host root prefix for every host file read (as the device plugin's --root).
    #[arg(long, env = "HOST_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// Only the node kind, edgegpu.io/gpu=jetson|discrete, from /sys alone (the node-labeller
    /// DaemonSet on every node).
    #[arg(long)]
    pub kind_only: bool,

    /// After labelling (retried until it works), keep running until SIGTERM: for a
    /// DaemonSet's main or sidecar container. With the full labels on a Jetson, the power-mode
    /// labels then follow `nvpmodel -m` (checked every --power-recheck-seconds). Without it,
    /// give up after --timeout and exit 0, so that an init container never holds the device
    /// plugin back.
    #[arg(long)]
    pub wait: bool,

    /// Without --wait: how long to retry before giving up.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub timeout: u64,

    /// With --kind-only --wait on a node where no GPU (or no GPU driver) was found: look
    /// again this often, so that a driver loaded after the pod started still gets the node
    /// labelled (a read of /sys; no API request until something is found).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub recheck: u64,

    /// Print the patch instead of sending it.
    #[arg(long)]
    pub dry_run: bool,

    /// The plugin's extended resource name (time-slicing may rename it; gpu.replicas needs it).
    #[arg(
        long,
        env = "RESOURCE_NAME",
        value_name = "NAME",
        default_value = "nvidia.com/gpu"
    )]
    pub resource_name: String,

    /// Log output format (EDGEGPU_LOG sets the level, default info). Text is coloured only
    /// when stderr is a terminal, never with NO_COLOR set to a non-empty value.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The device plugin's GPU settings (same flags and environment variables), so the labels
    /// describe what the plugin serves.
    #[command(flatten)]
    pub gpu: GpuArgs,
}

/// First and longest delay between two attempts.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// What one run sets on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The wanted value of every key this run manages: `Some` sets it, `None` removes it.
    pub values: Vec<(String, Option<String>)>,
    /// Keys under this prefix that are not in `values` are removed too (the MIG profiles'
    /// keys, which change with the MIG geometry); `None` for `--kind-only`.
    pub owned_prefix: Option<&'static str>,
}

impl Wanted {
    /// Sets the power-mode keys this run manages to what `power` publishes (a mode change
    /// while `--wait` runs); keys it leaves alone (the mode, where nvpmodel's files are not
    /// readable) stay so.
    fn set_power(&mut self, power: &Published) {
        for (key, value) in labels::power_values(power) {
            if let Some((_, v)) = self.values.iter_mut().find(|(k, _)| k == key) {
                *v = value;
            }
        }
    }
}

/// What this run sets, and (full labels on a Jetson) the power facts to follow with `--wait`.
fn wanted(args: &Args) -> anyhow::Result<(Wanted, Option<PowerFacts>)> {
    if args.kind_only {
        let kind = kind::detect(&args.root);
        let wanted = Wanted {
            values: vec![(
                GPU_KIND.to_string(),
                kind.map(|k| k.label_value().to_string()),
            )],
            owned_prefix: None,
        };
        return Ok((wanted, None));
    }
    let snapshot = Snapshot::take(&args.root, &args.gpu)?;
    let computed = labels::for_snapshot(&args.root, &args.resource_name, &snapshot)?;
    let power = snapshot
        .facts
        .jetson
        .map(|j| j.power)
        .filter(PowerFacts::followable);
    // Where neither nvpmodel's configuration nor its record is readable (a pod without those
    // host files), the mode is unknown here, not absent: its keys are left to whoever can
    // read them (the power policy, a labeller on the host) rather than removed.
    let mode_unknown = power
        .as_ref()
        .is_some_and(|p| p.modes.is_none() && p.current.is_none());
    let mut values: Vec<(String, Option<String>)> = KEYS
        .iter()
        .filter(|key| !(mode_unknown && [labels::POWER_MODE, labels::POWER_MODE_ID].contains(key)))
        .map(|key| (key.to_string(), computed.get(key).map(str::to_string)))
        .collect();
    values.extend(
        computed
            .iter()
            .filter(|(key, _)| !KEYS.contains(key))
            .map(|(key, value)| (key.to_string(), Some(value.to_string()))),
    );
    let wanted = Wanted {
        values,
        owned_prefix: Some(MIG_PROFILE_PREFIX),
    };
    Ok((wanted, power))
}

/// The merge patch from the Node's `current` labels to `wanted`: only what changes. The kind
/// label is only ever added (a value set by hand wins, and a node where nothing was found
/// keeps whatever it has).
pub fn patch(
    current: &std::collections::BTreeMap<String, String>,
    wanted: &Wanted,
) -> Map<String, Value> {
    let mut patch = Map::new();
    if let Some(prefix) = wanted.owned_prefix {
        for key in current.keys().filter(|k| k.starts_with(prefix)) {
            if !wanted.values.iter().any(|(k, _)| k == key) {
                patch.insert(key.clone(), Value::Null);
            }
        }
    }
    for (key, value) in &wanted.values {
        let now = current.get(key);
        if key == GPU_KIND {
            if let (None, Some(v)) = (now, value) {
                patch.insert(key.to_string(), Value::String(v.clone()));
            }
            continue;
        }
        match (now, value) {
            (Some(n), Some(v)) if n == v => {}
            (_, Some(v)) => {
                patch.insert(key.to_string(), Value::String(v.clone()));
            }
            (Some(_), None) => {
                patch.insert(key.to_string(), Value::Null);
            }
            (None, None) => {}
        }
    }
    patch
}

/// One attempt: read the Node, patch what differs.
async fn label_once(args: &Args, wanted: &Wanted) -> anyhow::Result<Map<String, Value>> {
    // The token and CA files are read on each attempt (a rotated token is picked up).
    let server = args
        .api
        .connect("the ClusterRole edgegpu-node-labeller must allow get and patch on nodes")
        .await?;
    let current = server.node_labels(&args.api.node_name).await?;
    let patch = patch(&current, wanted);
    if !patch.is_empty() {
        server
            .patch_node_labels(&args.api.node_name, &patch)
            .await?;
    }
    Ok(patch)
}

/// Runs the labeller as `args` describe.
pub async fn run(args: Args) -> anyhow::Result<()> {
    args.api.check_node_name()?;
    let mut signals = edgegpu_node::shutdown::ShutdownSignals::install()?;
    let for_labels = args.clone();
    let (mut wanted, mut power) =
        tokio::task::spawn_blocking(move || wanted(&for_labels)).await??;
    if args.dry_run {
        let patch = patch(&Default::default(), &wanted);
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "metadata": { "labels": patch } }))?
        );
        return Ok(());
    }
    let nothing_found = |w: &Wanted| w.values.iter().all(|(_, value)| value.is_none());
    if args.kind_only && nothing_found(&wanted) {
        // Most nodes of a cluster: nothing to set, so no API request at all.
        tracing::info!(node = %args.api.node_name, "No GPU found: no label to set");
        if !args.wait {
            return Ok(());
        }
        // A GPU driver may load later (a module built at first boot): look again now and then.
        while nothing_found(&wanted) {
            tokio::select! {
                _ = signals.recv() => return Ok(()),
                _ = tokio::time::sleep(Duration::from_secs(args.recheck)) => {}
            }
            let for_labels = args.clone();
            (wanted, _) = tokio::task::spawn_blocking(move || self::wanted(&for_labels)).await??;
        }
    }
    if !label_until_done(&args, &wanted, &mut signals).await {
        return Ok(());
    }
    if !args.wait {
        return Ok(());
    }
    // Full labels with --wait on a Jetson: the power-mode keys follow `nvpmodel -m`.
    let every = args.gpu.power_recheck();
    loop {
        let follow = async {
            match &power {
                Some(facts) => edgegpu_node::power::follow::changed(&args.root, facts, every).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = signals.recv() => return Ok(()),
            changed = follow => {
                wanted.set_power(&changed.published());
                power = Some(changed);
            }
        }
        if !label_until_done(&args, &wanted, &mut signals).await {
            return Ok(());
        }
    }
}

/// Patches the Node until it works (without `--wait`: until `--timeout`, then gives up so
/// the device plugin is never held back). `false` when SIGTERM/SIGINT came first.
async fn label_until_done(
    args: &Args,
    wanted: &Wanted,
    signals: &mut edgegpu_node::shutdown::ShutdownSignals,
) -> bool {
    let give_up =
        (!args.wait).then(|| tokio::time::Instant::now() + Duration::from_secs(args.timeout));
    let mut delay = RETRY_FIRST;
    loop {
        match label_once(args, wanted).await {
            Ok(patch) if patch.is_empty() => {
                tracing::info!(node = %args.api.node_name, "Node labels already up to date");
                return true;
            }
            Ok(patch) => {
                let keys: Vec<&str> = patch.keys().map(String::as_str).collect();
                tracing::info!(node = %args.api.node_name, changed = %keys.join(","), "Node labels updated");
                return true;
            }
            Err(e) => {
                if give_up.is_some_and(|t| tokio::time::Instant::now() + delay > t) {
                    tracing::warn!(
                        "{e:#}; giving up after {} s (the device plugin starts anyway)",
                        args.timeout
                    );
                    return true;
                }
                tracing::warn!("{e:#}; retrying in {delay:?}");
                tokio::select! {
                    _ = signals.recv() => return false,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}

/// The program's entry point (`edgegpu-labeller`): parses `args` (argv\[0\] first), sets up
/// logging and runs. The multi-call `edgegpu` binary calls it.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    // `edgegpu-labeller power-policy ...`: the power-mode companion, with its own flags.
    if args.get(1).is_some_and(|a| a == "power-policy") {
        let policy = power_policy::PowerPolicyArgs::parse_from(&args[1..]);
        if let Err(e) = logging::init(policy.log_format) {
            eprintln!("edgegpu-labeller power-policy: cannot set up logging: {e}");
        }
        return runtime::run_to_exit(power_policy::run(policy));
    }
    let args = Args::parse_from(args);
    if let Err(e) = logging::init(args.log_format) {
        eprintln!("edgegpu-labeller: cannot set up logging: {e}");
    }
    runtime::run_to_exit(run(args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::collections::BTreeMap;

    #[test]
    fn cli_definition_is_consistent() {
        Args::command().debug_assert();
        power_policy::PowerPolicyArgs::command().debug_assert();
    }

    #[test]
    fn patches_change_only_what_differs() {
        let current: BTreeMap<String, String> = [
            ("edgegpu.io/gpu", "discrete"),
            ("nvidia.com/gpu.count", "1"),
            ("nvidia.com/gpu.memory", "1000"),
            ("kubernetes.io/arch", "arm64"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let wanted = |values: &[(&str, Option<&str>)], owned_prefix| Wanted {
            values: values
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                .collect(),
            owned_prefix,
        };
        let full = wanted(
            &[
                (GPU_KIND, Some("jetson")),
                ("nvidia.com/gpu.count", Some("1")),
                ("nvidia.com/gpu.product", Some("Orin")),
                ("nvidia.com/gpu.memory", None),
                ("nvidia.com/gpu.family", None),
            ],
            Some(MIG_PROFILE_PREFIX),
        );
        let p = patch(&current, &full);
        // The hand-set kind stays; the same count is not sent; memory is removed.
        assert_eq!(
            Value::Object(p),
            serde_json::json!({"nvidia.com/gpu.product": "Orin", "nvidia.com/gpu.memory": null})
        );
        let p = patch(
            &BTreeMap::new(),
            &wanted(&[(GPU_KIND, Some("jetson"))], None),
        );
        assert_eq!(
            Value::Object(p),
            serde_json::json!({"edgegpu.io/gpu": "jetson"})
        );
        // Nothing found never removes the kind.
        assert!(patch(&current, &wanted(&[(GPU_KIND, None)], None)).is_empty());

        // A MIG profile that is gone is removed; one still there is kept; --kind-only
        // leaves MIG keys alone.
        let mut with_mig = current.clone();
        for (k, v) in [
            ("nvidia.com/mig-1g.10gb.count", "4"),
            ("nvidia.com/mig-3g.40gb.count", "1"),
        ] {
            with_mig.insert(k.to_string(), v.to_string());
        }
        let mixed = wanted(
            &[
                ("nvidia.com/gpu.count", Some("1")),
                ("nvidia.com/mig-1g.10gb.count", Some("7")),
            ],
            Some(MIG_PROFILE_PREFIX),
        );
        assert_eq!(
            Value::Object(patch(&with_mig, &mixed)),
            serde_json::json!({"nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-3g.40gb.count": null})
        );
        assert!(patch(&with_mig, &wanted(&[(GPU_KIND, Some("discrete"))], None)).is_empty());
    }
}
