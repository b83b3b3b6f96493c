//! `edgegpu-labeller power-policy`: the companion that applies the power mode an
//! operator wants on this Jetson (docs/power.md, "Policy"). Every `--recheck-seconds` it reads
//! its Node (labels and annotations) and the policy file, works out the wanted mode
//! ([`edgegpu_node::power::wanted`]), and where another is in force asks the host's
//! `nvpmodel` for it ([`edgegpu_node::power::policy`]); then it reports on the Node: an Event
//! per outcome, the power-mode labels of the mode in force, and
//! `edgegpu.io/jetson.power-mode.pending` while a change waits for a reboot.
//!
//! An attempt that did not take (refused, needs a reboot, the tool missing or hung) is not
//! repeated for the same wanted mode and the same mode in force: nvpmodel would ask the same
//! question again every period. A new wanted mode, or a change of the mode in force (a
//! reboot, someone's `nvpmodel -m`), tries again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Map, Value};

use edgegpu_apiclient::ApiServer;
use edgegpu_node::gpu::sysfs::GpuSysfs;
use edgegpu_node::labels;
use edgegpu_node::power::policy::{self, HostTools, Outcome, RebootRequest};
use edgegpu_node::power::wanted::{self, Rules, Wanted};
use edgegpu_node::power::{PowerFacts, PowerMode};
use edgegpu_node::shutdown;

use edgegpu_apiclient::args::ApiArgs;
use edgegpu_node::logging::LogFormat;

/// The label that names the wanted mode while it waits for a reboot (removed once it is in
/// force, or no longer wanted).
pub const PENDING_LABEL: &str = "edgegpu.io/jetson.power-mode.pending";
/// Who the Events say reported them.
const COMPONENT: &str = "edgegpu-power-policy";
const FORBIDDEN_HINT: &str = "the power policy's ClusterRole must allow get and patch on nodes \
                              and create on events";

/// Applies the power mode an operator wants on this Jetson (docs/power.md, "Policy").
///
/// Every --recheck-seconds: reads this Node's labels and annotations and the policy file,
/// works out the wanted mode (the annotation edgegpu.io/power-mode, else the first rule whose
/// nodeSelector the Node's labels match), and where another mode is in force runs the host's
/// `nvpmodel -m <id>` (chrooted into --root), with stdin on /dev/null: a question to confirm
/// a reboot is never answered, and nothing here ever reboots. Reports each outcome as an
/// Event on the Node and keeps the power-mode labels current; a change that needs a reboot
/// sets edgegpu.io/jetson.power-mode.pending and, where allowed (allowReboot, or the
/// annotation edgegpu.io/power-mode-allow-reboot=true), leaves /run/reboot-required for
/// the operator's reboot tooling (kured and the like), once.
/// Privileged: needs the host root and root on it.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "edgegpu-labeller power-policy", version = env!("EDGEGPU_LONG_VERSION"), max_term_width = 100)]
pub struct PowerPolicyArgs {
    /// The Node and the API server (NODE_NAME, --api-server, --token-file, --ca-file).
    #[command(flatten)]
    pub api: ApiArgs,

    /// The host's root: nvpmodel and jetson_clocks run chrooted into it (unless
    /// --chroot=false), and its nvpmodel files and sysfs are read under it.
    #[arg(long, env = "HOST_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// chroot the host's tools into --root. [default: true unless --root is /]
    #[arg(long, env = "POWER_POLICY_CHROOT", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL")]
    pub chroot: Option<bool>,

    /// The policy file: JSON `{"rules": [{"nodeSelector": {...}, "mode": "MAXN",
    /// "jetsonClocks": true, "allowReboot": false}]}` (the chart's powerPolicy.rules). Read
    /// again at every recheck; a bad file at start is an error, later it is logged and the
    /// rules read before stay. Without it only the Node's annotation counts.
    #[arg(long, env = "POWER_POLICY_RULES", value_name = "FILE")]
    pub rules_file: Option<PathBuf>,

    /// How often the Node and the mode in force are looked at.
    #[arg(long, env = "POWER_POLICY_RECHECK_SECONDS", value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub recheck_seconds: u64,

    /// How long nvpmodel or jetson_clocks may run before it is killed.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub tool_timeout_seconds: u64,

    /// Log output format (EDGEGPU_LOG sets the level, default info).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl PowerPolicyArgs {
    /// Whether the tools run chrooted into --root.
    pub fn chroot(&self) -> bool {
        self.chroot
            .unwrap_or(self.root != std::path::Path::new("/"))
    }

    pub fn recheck(&self) -> Duration {
        Duration::from_secs(self.recheck_seconds)
    }
}

/// What a recheck says of the pending label.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    /// As it is (nothing was tried this time).
    Keep,
    /// Set to the mode that waits for a reboot, or removed.
    Set(Option<String>),
}

/// What the last attempt was about and how it ended: not repeated while both hold.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attempt {
    wanted: Wanted,
    in_force: Option<u32>,
}

/// The companion's state between rechecks.
struct Policy {
    api: ApiServer,
    node: String,
    tools: HostTools,
    devfreq: Option<String>,
    rules_file: Option<PathBuf>,
    rules: Rules,
    /// The last attempt that did not take (or the wanted mode that was refused).
    settled: Option<Attempt>,
    /// The malformed annotation value last reported.
    rejected: Option<String>,
}

/// Runs the power policy until SIGTERM/SIGINT.
pub async fn run(args: PowerPolicyArgs) -> anyhow::Result<()> {
    let mut signals = shutdown::ShutdownSignals::install()?;
    args.api.check_node_name()?;
    tracing::info!(
        "Starting edgegpu power policy {}",
        env!("EDGEGPU_LONG_VERSION")
    );
    // A bad policy file at start ends the program with its message; later it is kept.
    let rules = match &args.rules_file {
        Some(file) => Rules::read(file)?,
        None => Rules::default(),
    };
    let api = args.api.connect(FORBIDDEN_HINT).await?;
    let root = args.root.clone();
    let devfreq =
        tokio::task::spawn_blocking(move || GpuSysfs::find(&root, None, None).devfreq).await?;
    let mut policy = Policy {
        api,
        node: args.api.node_name.clone(),
        tools: HostTools {
            root: args.root.clone(),
            chroot: args.chroot(),
            timeout: Duration::from_secs(args.tool_timeout_seconds),
        },
        devfreq,
        rules_file: args.rules_file.clone(),
        rules,
        settled: None,
        rejected: None,
    };
    loop {
        if let Err(e) = policy.recheck().await {
            tracing::warn!("{e:#}");
        }
        tokio::select! {
            _ = signals.recv() => break,
            _ = tokio::time::sleep(args.recheck()) => {}
        }
    }
    tracing::info!("Stopped");
    Ok(())
}

impl Policy {
    /// One look: what is wanted, what is in force, what to do about it; then the Node's
    /// power-mode labels as the host has them now (this companion reads the host's files,
    /// which the plugin's pods may not see: docs/power.md).
    async fn recheck(&mut self) -> anyhow::Result<()> {
        self.reload_rules();
        let node = self
            .api
            .get(&format!("/api/v1/nodes/{}", self.node), "get node")
            .await?;
        let labels = string_map(&node, "/metadata/labels");
        let annotations = string_map(&node, "/metadata/annotations");
        let uid = node
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let facts = self.read_facts();
        let pending = self.decide(&uid, &labels, &annotations, &facts).await;
        let now = self.read_facts();
        self.publish(&labels, &now, pending).await
    }

    /// Applies what is wanted where it is not in force; returns what the pending label
    /// should say.
    async fn decide(
        &mut self,
        uid: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        facts: &PowerFacts,
    ) -> Pending {
        let keep = Pending::Keep;
        let wanted = match wanted::wanted(&self.rules, labels, annotations) {
            Ok(Some(w)) => w,
            Ok(None) => {
                policy::forget_reboot_request(&self.tools.root);
                // Wanted again later, it is tried again (and its pending label set again).
                self.settled = None;
                return Pending::Set(None);
            }
            Err(e) => {
                // Only the annotations can be malformed here (rules were checked on load);
                // reported once per value, not every period.
                let value = Some(format!("{annotations:?}"));
                if self.rejected != value {
                    let text = format!("the Node's annotations: {e}");
                    tracing::warn!("{text}");
                    self.event(uid, "Warning", "PowerModeRejected", &text).await;
                    self.rejected = value;
                }
                return keep;
            }
        };
        self.rejected = None;
        let attempt = Attempt {
            wanted: wanted.clone(),
            in_force: facts.current.as_ref().map(|c| c.id),
        };
        if self.settled.as_ref() == Some(&attempt) {
            return keep;
        }
        let target = match policy::resolve(facts, &wanted.mode) {
            Ok(mode) => mode.clone(),
            Err(e) => {
                let text = format!("{e} (asked by {})", wanted.source);
                self.event(uid, "Warning", "PowerModeRejected", &text).await;
                self.settled = Some(attempt);
                return Pending::Set(None);
            }
        };
        match policy::set_mode(&self.tools, facts, &target).await {
            Outcome::InForce => {
                policy::forget_reboot_request(&self.tools.root);
            }
            Outcome::Applied => {
                let before = describe(facts.current_mode());
                let text = format!(
                    "power mode {} ({}) applied with nvpmodel, was {before} (asked by {})",
                    target.name, target.id, wanted.source
                );
                tracing::info!("{text}");
                self.event(uid, "Normal", "PowerModeApplied", &text).await;
                policy::forget_reboot_request(&self.tools.root);
            }
            Outcome::NeedsReboot { output } => {
                let in_force = describe(facts.current_mode());
                let asked = format!(
                    "power mode {} ({}) needs a reboot (L4T asked to confirm one; edgegpu \
                     never answers or reboots); {in_force} stays in force",
                    target.name, target.id
                );
                let text = if wanted.allow_reboot {
                    // One small local file and the sentinel.
                    match policy::request_reboot(&self.tools.root, &target) {
                        Ok(RebootRequest::Requested | RebootRequest::AlreadyRequested) => format!(
                            "{asked} until the node reboots: {} is there for the operator's \
                             reboot tooling (asked by {})",
                            policy::REBOOT_SENTINEL,
                            wanted.source
                        ),
                        Ok(RebootRequest::RebootDidNotApply) => format!(
                            "{asked}: a reboot asked for it earlier did not bring it (L4T did \
                             not keep the change across the reboot), so no reboot is asked \
                             again; set it by hand with `nvpmodel -m {}` (asked by {})",
                            target.id, wanted.source
                        ),
                        Err(e) => format!(
                            "{asked}: the reboot request could not be written: {e} (asked by {})",
                            wanted.source
                        ),
                    }
                } else {
                    format!(
                        "{asked}; allow a reboot outside edgegpu (allowReboot, or the \
                         annotation {}=true) to have the reboot asked for (asked by {})",
                        wanted::ALLOW_REBOOT_ANNOTATION,
                        wanted.source
                    )
                };
                tracing::warn!(nvpmodel = %output.trim(), "{text}");
                self.event(uid, "Warning", "PowerModeNeedsReboot", &text)
                    .await;
                self.settled = Some(attempt);
                return Pending::Set(Some(target.name));
            }
            Outcome::Refused { code, output } => {
                let text = format!(
                    "nvpmodel -m {} did not set power mode {} (exit status {}): {}; {} stays \
                     in force (asked by {})",
                    target.id,
                    target.name,
                    code.map_or_else(|| "none".to_string(), |c| c.to_string()),
                    last_line(&output),
                    describe(facts.current_mode()),
                    wanted.source
                );
                tracing::warn!("{text}");
                self.event(uid, "Warning", "PowerModeRefused", &text).await;
                self.settled = Some(attempt);
                return Pending::Set(None);
            }
            Outcome::Failed(e) => {
                let text = format!(
                    "power mode {} ({}) not applied: {e} (asked by {})",
                    target.name, target.id, wanted.source
                );
                tracing::warn!("{text}");
                self.event(uid, "Warning", "PowerModeFailed", &text).await;
                self.settled = Some(attempt);
                return Pending::Set(None);
            }
        }
        self.settled = None;
        if let Some(pin) = wanted.jetson_clocks {
            let facts = self.read_facts();
            match policy::set_clocks(&self.tools, &facts, pin).await {
                Ok(true) => {
                    let (reason, what) = if pin {
                        (
                            "JetsonClocksPinned",
                            "clocks pinned to their ceilings with jetson_clocks",
                        )
                    } else {
                        (
                            "JetsonClocksRestored",
                            "clocks restored to what jetson_clocks stored",
                        )
                    };
                    let text = format!("{what} (asked by {})", wanted.source);
                    tracing::info!("{text}");
                    self.event(uid, "Normal", reason, &text).await;
                }
                Ok(false) => {}
                Err(e) => {
                    let text = format!("jetson_clocks: {e} (asked by {})", wanted.source);
                    self.event(uid, "Warning", "JetsonClocksFailed", &text)
                        .await;
                    self.settled = Some(attempt);
                }
            }
        }
        Pending::Set(None)
    }

    /// The mode and clocks now. A few small files: read on the runtime thread.
    fn read_facts(&self) -> PowerFacts {
        PowerFacts::read_mode(&self.tools.root, self.devfreq.as_deref())
    }

    /// Reads the policy file again (a ConfigMap's update arrives in place); a bad one is
    /// logged and the last good rules stay.
    fn reload_rules(&mut self) {
        let Some(file) = &self.rules_file else { return };
        match Rules::read(file) {
            Ok(rules) if rules != self.rules => {
                tracing::info!(file = %file.display(), "power policy rules changed");
                self.rules = rules;
                self.settled = None;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("{e}; keeping the rules read before"),
        }
    }

    /// Patches what differs of the power-mode labels of the mode in force (`facts`) and of
    /// the pending label.
    async fn publish(
        &self,
        labels: &BTreeMap<String, String>,
        facts: &PowerFacts,
        pending: Pending,
    ) -> anyhow::Result<()> {
        let mut wanted: Vec<(&str, Option<String>)> =
            labels::power_values(&facts.published()).to_vec();
        if let Pending::Set(value) = pending {
            wanted.push((PENDING_LABEL, value));
        }
        let mut patch = Map::new();
        for (key, value) in wanted {
            if labels.get(key) != value.as_ref() {
                patch.insert(key.to_string(), value.map_or(Value::Null, Value::String));
            }
        }
        self.patch(patch).await
    }

    async fn patch(&self, patch: Map<String, Value>) -> anyhow::Result<()> {
        if patch.is_empty() {
            return Ok(());
        }
        self.api
            .patch_node_labels(&self.node, &patch)
            .await
            .context("updating the Node's power-mode labels")
    }

    /// An Event on the Node (in `default`, where the kubelet puts node events); a failure
    /// to post one is logged, never fatal.
    async fn event(&self, uid: &str, kind: &str, reason: &str, message: &str) {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{}.", self.node)},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid},
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        if let Err(e) = self
            .api
            .create("/api/v1/namespaces/default/events", &event, "create event")
            .await
        {
            tracing::warn!("cannot post the Event {reason}: {e:#}");
        }
    }
}

/// `MODE_30W (2)`, or what is known of the mode in force.
fn describe(mode: Option<&PowerMode>) -> String {
    mode.map_or_else(
        || "the mode in force".to_string(),
        |m| format!("{} ({})", m.name, m.id),
    )
}

/// The last non-empty line of a tool's output (its error), or `no output`.
fn last_line(output: &str) -> &str {
    output
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
}

/// A string map of the object at `pointer` (labels, annotations).
fn string_map(object: &Value, pointer: &str) -> BTreeMap<String, String> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}
