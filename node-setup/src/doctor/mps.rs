//! Link 6: the MPS control daemons, where the device plugin shares a GPU through MPS. The
//! plugin writes the daemons it wants to `<mps-root>/desired/daemons.json`; the companion
//! (`mps-control-daemon`) reports each one in `<mps-root>/<resource>/status.json` (the
//! formats are `edgegpu_node::mps::status`'s; a test writes them with that module). The
//! plugin advertises a resource's devices only while its daemon is `ready`.
//!
//! The files are written by the plugin and its companion, not by pods; still, as root the
//! doctor reads them without following links and bounded, and takes a resource name from
//! them only when it is a plain resource name (no `..`, no absolute path).

use std::io::Read;
use std::path::Path;

use edgegpu_host::root::HostRoot;
use serde_json::Value;

use super::finding::{Finding, Link, Verdict};

/// Largest file read (the plugin's and the companion's are a few KiB).
const MAX_BYTES: u64 = 256 * 1024;

/// Reads `path` without following a link at its last component, at most [`MAX_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    file.take(MAX_BYTES).read_to_string(&mut text)?;
    Ok(text)
}

/// `O_NOFOLLOW | O_NONBLOCK` (a FIFO planted there must not hang the doctor).
fn libc_flags() -> i32 {
    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits()
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
    let text = match read_bounded(&host.path(&desired)) {
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
    let resources: Vec<String> = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| {
            v["daemons"].as_array().map(|a| {
                a.iter()
                    .filter_map(|d| d["resource"].as_str().map(String::from))
                    .collect()
            })
        })
        .unwrap_or_default();
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
        sources.push(status.clone());
        let (verdict, line) = match read_bounded(&host.path(&status)) {
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
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let reason = v["reason"].as_str().unwrap_or("");
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

    #[test]
    fn a_fifo_or_a_link_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(read_bounded(&fifo).is_err());
        std::fs::write(dir.path().join("real"), "{}").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        assert!(read_bounded(&dir.path().join("link")).is_err());
        assert_eq!(read_bounded(&dir.path().join("real")).unwrap(), "{}");
    }
}
