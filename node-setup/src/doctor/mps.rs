//! Link 6: the MPS control daemons, where the device plugin shares a GPU through MPS. The
//! plugin writes the daemons it wants to `<mps-root>/desired/daemons.json`; the companion
//! (`mps-control-daemon`) reports each one in `<mps-root>/<resource>/status.json` (the
//! formats are `edgegpu_node::mps::status`'s; a test writes them with that module). The
//! plugin advertises a resource's devices only while its daemon is `ready`.
//!
//! The files are written by the plugin and its companion, not by pods; still, as root the
//! doctor reads them without following links and bounded, and takes a resource name from
//! them only when it is a plain resource name (no `..`, no absolute path).

use std::path::Path;

use edgegpu_host::root::HostRoot;
use serde_json::Value;

use super::finding::{Finding, Link, Verdict};

/// Largest file read (the plugin's and the companion's are a few KiB).
const MAX_BYTES: u64 = 256 * 1024;

fn read_bounded(path: &Path) -> std::io::Result<String> {
    super::safe_read::read_text(path, MAX_BYTES)
}

/// A resource name as the plugin advertises it (`nvidia.com/gpu`, `nvidia.com/gpu.shared`).
fn plain_resource(name: &str) -> bool {
    let mut parts = name.split('/');
    let (Some(domain), Some(res), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    [domain, res].iter().all(|p| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    })
}

pub fn check(host: &HostRoot, mps_root: &str) -> Finding {
    let root = mps_root.trim_end_matches('/');
    let desired = format!("{root}/desired/daemons.json");
    let text = match read_bounded(&super::safe_read::on_disk(host, &desired)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Finding::new(
                Link::Mps,
                Verdict::Skipped,
                "no GPU is shared through MPS on this node",
            )
            .source(desired);
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Finding::new(
                Link::Mps,
                Verdict::Unknown,
                format!("cannot read {desired}: {e}"),
            )
            .source(desired)
            .fix("run it as root: sudo edgegpu-node-setup doctor");
        }
        Err(e) => {
            return Finding::new(
                Link::Mps,
                Verdict::Broken,
                format!("cannot read {desired}: {e}"),
            )
            .source(desired)
            .fix("restart the device plugin, which rewrites it");
        }
    };
    host.note_read(&desired);
    let Some(resources) = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
        v["daemons"].as_array().map(|a| {
            a.iter()
                .filter_map(|d| d["resource"].as_str().map(String::from))
                .collect::<Vec<String>>()
        })
    }) else {
        return Finding::new(
            Link::Mps,
            Verdict::Broken,
            format!("{desired} is not the device plugin's list of MPS daemons: the companion runs none"),
        )
        .source(desired)
        .fix("restart the device plugin, which rewrites it: kubectl -n kube-system rollout restart ds/edgegpu-device-plugin");
    };
    if resources.is_empty() {
        return Finding::new(
            Link::Mps,
            Verdict::Skipped,
            "the device plugin asks for no MPS daemon",
        )
        .source(desired);
    }
    let mut sources = vec![desired];
    let mut details = Vec::new();
    let mut worst = Verdict::Ok;
    for resource in &resources {
        if !plain_resource(resource) {
            details.push(format!("{resource:?}: not a resource name, skipped"));
            worst = worst.max(Verdict::Warning);
            continue;
        }
        let status = format!("{root}/{resource}/status.json");
        let (verdict, line) = match read_bounded(&super::safe_read::on_disk(host, &status)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
                Verdict::Broken,
                format!("{resource}: no status: the MPS companion is not running"),
            ),
            Err(e) => (
                Verdict::Broken,
                format!("{resource}: cannot read {status}: {e}"),
            ),
            Ok(text) => {
                host.note_read(&status);
                sources.push(status.clone());
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                // Written by the companion, printed to root's terminal and the journal.
                let reason: String = v["reason"]
                    .as_str()
                    .unwrap_or("")
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .take(500)
                    .collect();
                match v["state"].as_str() {
                    Some("ready") => (Verdict::Ok, format!("{resource}: ready")),
                    Some("starting") => (
                        Verdict::Warning,
                        format!("{resource}: starting (its devices are unhealthy until it is ready) {reason}"),
                    ),
                    Some(state @ ("failed" | "refused")) => {
                        (Verdict::Broken, format!("{resource}: {state}: {reason}"))
                    }
                    _ => (Verdict::Broken, format!("{resource}: {status} is not a status file")),
                }
            }
        };
        worst = worst.max(verdict);
        details.push(line.trim_end().to_string());
    }
    let f = Finding::new(
        Link::Mps,
        worst,
        match worst {
            Verdict::Ok => format!("{} MPS daemon(s) ready", resources.len()),
            Verdict::Warning => "an MPS daemon is not ready yet".to_string(),
            _ => "an MPS daemon is not running: pods asking for its resource wait (devices unhealthy)".to_string(),
        },
    )
    .sources(sources)
    .details(details);
    if worst == Verdict::Broken {
        f.fix("read the companion's log: kubectl -n kube-system logs ds/edgegpu-device-plugin -c mps-control-daemon (host service: journalctl -u edgegpu-mps-control-daemon); the daemon's own log is <mps-root>/<resource>/log/control.log")
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_resource_names_become_paths() {
        assert!(plain_resource("nvidia.com/gpu"));
        assert!(plain_resource("nvidia.com/gpu.shared"));
        for bad in [
            "../etc/shadow",
            "nvidia.com/../../x",
            "/abs/x",
            "nvidia.com",
            "a/b/c",
            "nvidia.com/..",
        ] {
            assert!(!plain_resource(bad), "{bad}");
        }
    }
}
