//! Link 7 (with `--cluster`): the Node object against the facts. The plugin's DaemonSets run
//! only on Nodes labelled `edgegpu.io/gpu=jetson|discrete`; a Node whose allocatable has no
//! GPU resource schedules no GPU pod; a power-mode label that disagrees with the board
//! misleads every selector on it (docs/labels.md).
//!
//! The Node is read with the host's own `kubectl` (or `k3s kubectl`), with a time limit:
//! node-setup carries no HTTP or TLS client, and the command already has the credentials
//! (`/etc/rancher/k3s/k3s.yaml` on a server). Without `--cluster` the doctor reads local
//! files only, and this link is skipped.

use std::time::Duration;

use edgegpu_host::root::HostRoot;
use edgegpu_platform::host::{NVPMODEL_CONF, NVPMODEL_STATUS};
use edgegpu_platform::nvpmodel::{parse_conf, parse_status};
use serde_json::Value;

use super::finding::{Facts, Finding, Link, Verdict};

/// How to reach the API server.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The kubectl command (`kubectl`, or `k3s kubectl`), split into words.
    pub kubectl: Vec<String>,
    /// This Node's name.
    pub node: String,
    pub timeout: Duration,
}

/// Largest Node JSON read (a Node object is tens of KiB).
const MAX_NODE_BYTES: u64 = 4 << 20;

/// Runs `kubectl get node <name> -o json` within the time limit.
fn get_node(cluster: &Cluster) -> Result<Value, String> {
    let command = cluster.kubectl.join(" ");
    let mut argv: Vec<&str> = cluster.kubectl.iter().map(String::as_str).collect();
    argv.extend(["get", "node", &cluster.node, "-o", "json"]);
    let ran = super::command::run(&argv, cluster.timeout, MAX_NODE_BYTES)
        .map_err(|e| format!("cannot run {command}: {e}"))?;
    match ran.status {
        None => Err(format!(
            "{command} did not answer within {} s",
            cluster.timeout.as_secs()
        )),
        Some(s) if !s.success() => Err(format!(
            "{command} get node {}: {}",
            cluster.node,
            ran.stderr.trim()
        )),
        Some(_) => serde_json::from_str(&ran.stdout).map_err(|e| format!("not a Node object: {e}")),
    }
}

pub fn check(host: &HostRoot, facts: &Facts, cluster: Option<&Cluster>) -> Finding {
    let Some(cluster) = cluster else {
        return Finding::new(
            Link::Labels,
            Verdict::Skipped,
            "not checked: the Node's labels are on the API server (add --cluster)",
        );
    };
    let source = format!(
        "{} get node {} -o json",
        cluster.kubectl.join(" "),
        cluster.node
    );
    let node = match get_node(cluster) {
        Ok(n) => n,
        Err(e) => {
            return Finding::new(Link::Labels, Verdict::Unknown, "cannot read the Node")
                .source(source)
                .detail(e)
                .fix("run it where kubectl can read Nodes (a k3s server, as root), or name the command: --kubectl 'k3s kubectl'; --node-name if the Node is not named after the host")
        }
    };
    let labels = &node["metadata"]["labels"];
    let label = |key: &str| labels[key].as_str();
    let mut broken = Vec::new();
    let mut warnings = Vec::new();
    let mut details = Vec::new();
    let kind = if facts.tegra.is_tegra() {
        Some("jetson")
    } else if facts.driver_version.is_some() {
        Some("discrete")
    } else {
        None
    };
    match (kind, label("edgegpu.io/gpu")) {
        (Some(k), None) => broken.push(format!(
            "no edgegpu.io/gpu label: the plugin's DaemonSets select edgegpu.io/gpu={k}, so none runs here"
        )),
        (Some(k), Some(v)) if v != k => warnings.push(format!(
            "edgegpu.io/gpu={v}, but this is a {k} node (a value set by hand is kept)"
        )),
        (_, Some(v)) => details.push(format!("edgegpu.io/gpu={v}")),
        (None, None) => {}
    }
    let allocatable = &node["status"]["allocatable"];
    let gpu_resources: Vec<(String, String)> = allocatable
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("nvidia.com/"))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    if kind.is_some() {
        if gpu_resources.iter().all(|(_, v)| v == "0" || v.is_empty()) {
            broken.push("the Node's allocatable has no GPU resource (nvidia.com/*): no GPU pod can be scheduled here".into());
        }
        for (k, v) in &gpu_resources {
            details.push(format!("allocatable {k}: {v}"));
        }
    }
    if facts.tegra.is_tegra() {
        let mode = host
            .read(NVPMODEL_CONF)
            .ok()
            .flatten()
            .and_then(|c| parse_conf(&c).ok())
            .and_then(|modes| {
                let id = host
                    .read(NVPMODEL_STATUS)
                    .ok()
                    .flatten()
                    .and_then(|s| parse_status(&s))
                    .or(modes.default)?;
                modes.by_id(id).map(|m| m.name.clone())
            });
        match (mode, label("edgegpu.io/jetson.power-mode")) {
            (Some(m), Some(l)) if m != l => warnings.push(format!(
                "edgegpu.io/jetson.power-mode={l}, but {m} is in force: the labeller has not seen the change"
            )),
            (Some(m), None) => warnings.push(format!(
                "no edgegpu.io/jetson.power-mode label ({m} is in force)"
            )),
            _ => {}
        }
    }
    let verdict = if !broken.is_empty() {
        Verdict::Broken
    } else if !warnings.is_empty() {
        Verdict::Warning
    } else {
        Verdict::Ok
    };
    let summary = broken
        .first()
        .or(warnings.first())
        .cloned()
        .unwrap_or_else(|| {
            format!(
                "Node {} carries the labels and resources of its GPU",
                cluster.node
            )
        });
    let f = Finding::new(Link::Labels, verdict, summary)
        .source(source)
        .details(broken.iter().skip(1).cloned())
        .details(
            warnings
                .iter()
                .skip(usize::from(broken.is_empty()))
                .cloned(),
        )
        .details(details);
    match verdict {
        Verdict::Ok => f,
        _ => f.fix("look at the labeller: kubectl -n kube-system logs ds/edgegpu-node-labeller (and ds/edgegpu-device-plugin, whose labeller container sets the rest)"),
    }
}
