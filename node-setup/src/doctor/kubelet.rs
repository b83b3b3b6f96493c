//! Link 5: a device plugin or the DRA driver serving the kubelet. The kubelet's side is
//! read from its own files: `device-plugins/kubelet.sock` (the kubelet is up), the plugins'
//! sockets next to it (does anything answer?), and `device-plugins/kubelet_internal_checkpoint`,
//! which the kubelet rewrites whenever a plugin's device list changes
//! (`pkg/kubelet/cm/devicemanager/manager.go`, `writeCheckpoint`): its
//! `Data.RegisteredDevices` is the resources registered and their device IDs. The DRA
//! driver registers through `plugins_registry/<driver>-reg.sock`
//! (`pkg/kubelet/pluginmanager`).

use std::collections::BTreeMap;
use std::path::Path;

use edgegpu_host::root::HostRoot;
use edgegpu_platform::DRA_DRIVER_NAME;
use serde_json::Value;

use super::finding::{Finding, Link, Verdict};

/// The device manager's checkpoint file (`pkg/kubelet/cm/devicemanager/types.go`).
const CHECKPOINT: &str = "kubelet_internal_checkpoint";
/// The kubelet's own registration socket in the device-plugin directory.
const KUBELET_SOCKET: &str = "kubelet.sock";
/// A checkpoint is a few KiB; more is not the kubelet's.
const MAX_CHECKPOINT_BYTES: u64 = 4 << 20;

/// Whether a Unix socket answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Listening,
    /// Nothing listens: a socket file left by a process that is gone.
    Refused,
    /// Not a socket, or cannot be tried (permissions, a path too long to connect to).
    Unusable,
}

/// Connects without blocking (a full backlog answers EAGAIN, which still means a listener).
fn answer(path: &Path) -> Answer {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {}
        _ => return Answer::Unusable,
    }
    let Ok(addr) = UnixAddr::new(path) else {
        return Answer::Unusable;
    };
    let Ok(fd) = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return Answer::Unusable;
    };
    use std::os::fd::AsRawFd;
    match connect(fd.as_raw_fd(), &addr) {
        Ok(()) | Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINPROGRESS) => {
            Answer::Listening
        }
        Err(nix::errno::Errno::ECONNREFUSED) | Err(nix::errno::Errno::ENOENT) => Answer::Refused,
        Err(_) => Answer::Unusable,
    }
}

/// `Data.RegisteredDevices` of a checkpoint: resource → device IDs.
fn registered(text: &str) -> Result<BTreeMap<String, Vec<String>>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let mut out = BTreeMap::new();
    match &v["Data"]["RegisteredDevices"] {
        Value::Object(map) => {
            for (resource, ids) in map {
                let ids = ids
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|i| i.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(resource.clone(), ids);
            }
        }
        Value::Null => {}
        _ => return Err("Data.RegisteredDevices is not a map".into()),
    }
    Ok(out)
}

pub fn check(host: &HostRoot, kubelet_dir: &str) -> Finding {
    let dir = kubelet_dir.trim_end_matches('/');
    let plugin_dir = format!("{dir}/device-plugins");
    let kubelet_socket = format!("{plugin_dir}/{KUBELET_SOCKET}");
    let checkpoint = format!("{plugin_dir}/{CHECKPOINT}");
    let dra_registration = format!("{dir}/plugins_registry/{DRA_DRIVER_NAME}-reg.sock");
    let dra_socket = format!("{dir}/plugins/{DRA_DRIVER_NAME}/dra.sock");
    let sources = vec![
        kubelet_socket.clone(),
        checkpoint.clone(),
        dra_registration.clone(),
    ];
    let fix_start = "start the device plugin: helm upgrade --install edgegpu <chart> (or the edgegpu-k3s package's manifest; on the host: sudo systemctl enable --now edgegpu-device-plugin)";
    let listing = match std::fs::read_dir(host.path(&plugin_dir)) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Finding::new(
                Link::Kubelet,
                Verdict::Unknown,
                format!("cannot read {plugin_dir}: permission denied"),
            )
            .sources(sources)
            .fix("run it as root: sudo edgegpu-node-setup doctor");
        }
        Err(_) => {
            return Finding::new(
                Link::Kubelet,
                Verdict::Broken,
                format!("no kubelet on this node: {plugin_dir} does not exist"),
            )
            .sources(sources)
            .fix("start k3s: sudo systemctl start k3s (server) or k3s-agent (agent); --kubelet-dir if the kubelet's root is not /var/lib/kubelet");
        }
    };
    let mut details = Vec::new();
    let kubelet_up = answer(&host.path(&kubelet_socket)) == Answer::Listening;
    if !kubelet_up {
        details.push(format!(
            "{kubelet_socket} does not answer: the kubelet is not running"
        ));
    }
    let mut live = Vec::new();
    let mut stale = Vec::new();
    let mut names: Vec<String> = listing
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sock") && n != KUBELET_SOCKET)
        .collect();
    names.sort();
    for name in names {
        match answer(&host.path(&format!("{plugin_dir}/{name}"))) {
            Answer::Listening => live.push(name),
            Answer::Refused => stale.push(name),
            Answer::Unusable => details.push(format!(
                "{plugin_dir}/{name}: not a socket that can be tried"
            )),
        }
    }
    let dra_live = answer(&host.path(&dra_registration)) == Answer::Listening
        && answer(&host.path(&dra_socket)) == Answer::Listening;
    // Kept by the kubelet; read as the plugin's files are (no link followed, bounded).
    let resources = match super::safe_read::read_text(
        &super::safe_read::on_disk(host, &checkpoint),
        MAX_CHECKPOINT_BYTES,
    ) {
        Ok(text) => {
            host.note_read(&checkpoint);
            registered(&text).unwrap_or_else(|e| {
                details.push(format!("{checkpoint}: {e}"));
                BTreeMap::new()
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => {
            details.push(format!("{checkpoint}: {e}"));
            BTreeMap::new()
        }
    };
    let gpu_resources: Vec<(&String, &Vec<String>)> = resources
        .iter()
        .filter(|(r, _)| r.starts_with("nvidia.com/"))
        .collect();
    for (r, ids) in &gpu_resources {
        details.push(format!(
            "{checkpoint}: {r} registered with {} device(s)",
            ids.len()
        ));
    }
    details.extend(live.iter().map(|n| format!("{plugin_dir}/{n}: answers")));
    details.extend(
        stale
            .iter()
            .map(|n| format!("{plugin_dir}/{n}: nothing listens (left by a plugin that is gone)")),
    );
    if dra_live {
        details.push(format!("{dra_registration} and {dra_socket}: answer"));
    }
    let finding = |verdict, summary: String| {
        Finding::new(Link::Kubelet, verdict, summary)
            .sources(sources.clone())
            .details(details.clone())
    };
    if !kubelet_up {
        return finding(Verdict::Broken, "the kubelet is not running".into())
            .fix("start k3s: sudo systemctl start k3s (server) or k3s-agent (agent), then look at: journalctl -u k3s -n 100");
    }
    if !live.is_empty() {
        let empty: Vec<&str> = gpu_resources
            .iter()
            .filter(|(_, ids)| ids.is_empty())
            .map(|(r, _)| r.as_str())
            .collect();
        if gpu_resources.is_empty() {
            return finding(
                Verdict::Broken,
                "a device plugin answers, but no GPU resource is registered with the kubelet".into(),
            )
            .fix("read the plugin's log for its registration: kubectl -n kube-system logs ds/edgegpu-device-plugin (host service: journalctl -u edgegpu-device-plugin)");
        }
        if empty.len() == gpu_resources.len() {
            return finding(
                Verdict::Broken,
                format!("{} registered with no device", empty.join(", ")),
            )
            .fix("the plugin found no healthy GPU: read its log (kubectl -n kube-system logs ds/edgegpu-device-plugin) and the device-nodes link above");
        }
        let summary = gpu_resources
            .iter()
            .map(|(r, ids)| format!("{r} ({} device(s))", ids.len()))
            .collect::<Vec<_>>()
            .join(", ");
        return finding(Verdict::Ok, format!("device plugin registered: {summary}"));
    }
    if dra_live {
        return finding(
            Verdict::Ok,
            format!("the DRA driver {DRA_DRIVER_NAME} is registered with the kubelet"),
        );
    }
    if !stale.is_empty() {
        return finding(
            Verdict::Broken,
            "the device plugin is not running (its socket is left, nothing answers)".into(),
        )
        .fix("restart it: kubectl -n kube-system rollout restart ds/edgegpu-device-plugin (host service: sudo systemctl restart edgegpu-device-plugin)");
    }
    finding(
        Verdict::Broken,
        "no device plugin and no DRA driver serves this node's kubelet".into(),
    )
    .fix(fix_start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_devices_of_a_checkpoint() {
        let text = r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["tegra::0","tegra::1"],"nvidia.com/dla":[]}},"Checksum":1}"#;
        let r = registered(text).unwrap();
        assert_eq!(r["nvidia.com/gpu"], ["tegra::0", "tegra::1"]);
        assert!(r["nvidia.com/dla"].is_empty());
        let none = registered(r#"{"Data":{"RegisteredDevices":null},"Checksum":0}"#).unwrap();
        assert!(none.is_empty());
        assert!(registered("{").is_err());
        assert!(registered(r#"{"Data":{"RegisteredDevices":[1]}}"#).is_err());
    }
}
