//! Which pod a process belongs to: the pod UID in the cgroup the kubelet made for the pod,
//! read from `<root>/proc/<pid>/cgroup` (the host's `/proc`).
//!
//! The kubelet names a pod's cgroup `pod<UID>` under `kubepods` and its QoS class
//! (`burstable`, `besteffort`; Guaranteed pods directly under `kubepods`):
//! `pkg/kubelet/cm/pod_container_manager_linux.go` (`podCgroupNamePrefix`),
//! `pkg/kubelet/cm/qos_container_manager_linux.go`. With the cgroupfs driver that is the
//! path `/kubepods/burstable/pod<UID>/<container>`; the systemd driver turns each component
//! list into a slice whose name joins them with `-` after replacing the UID's `-` by `_`
//! (`pkg/kubelet/cm/cgroup_manager_linux.go`, `ToSystemd`, `escapeSystemdCgroupName`):
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID with _>.slice/
//! cri-containerd-<id>.scope`. A `--cgroup-root` (kind's `/kubelet`) only adds a prefix.
//!
//! `/proc/<pid>/cgroup` has one `hierarchy:controllers:path` line per hierarchy on cgroup v1
//! and the single `0::path` line on v2 (Linux `Documentation/admin-guide/cgroup-v2.rst`,
//! "Processes"; `man 7 cgroups`). Paths are relative to the reader's cgroup namespace, so
//! they may start with `/..`: the pod component is searched anywhere in the path.

use std::path::Path;

/// The pod UID of process `pid`, from `<root>/proc/<pid>/cgroup`; `None` when the process is
/// gone, the file is unreadable or the process is in no pod's cgroup. Blocking.
pub fn pod_uid_of(root: &Path, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))).ok()?;
    pod_uid(&text)
}

/// The pod UID in a `/proc/<pid>/cgroup` text (v1 or v2, either cgroup driver).
pub fn pod_uid(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        pod_uid_in_path(path)
    })
}

/// The UID of the first pod cgroup in `path`, below a `kubepods` component.
fn pod_uid_in_path(path: &str) -> Option<String> {
    let mut below_kubepods = false;
    for component in path.split('/') {
        if let Some(slice) = component.strip_suffix(".slice") {
            // systemd: `kubepods-burstable-pod<uid_>.slice`, `kubelet-kubepods-pod<uid_>.slice`.
            let mut words = slice.split('-');
            if words.any(|w| w == "kubepods") {
                if let Some(uid) = slice.rsplit('-').next().and_then(|w| w.strip_prefix("pod")) {
                    return valid_uid(&uid.replace('_', "-"));
                }
            }
        } else if below_kubepods {
            // cgroupfs: `/kubepods/[qos/]pod<uid>/<container>`.
            if let Some(uid) = component.strip_prefix("pod") {
                return valid_uid(uid);
            }
        }
        if component == "kubepods" {
            below_kubepods = true;
        }
    }
    None
}

/// A pod UID: a UUID from the API server, or the hex hash of a static pod's manifest.
fn valid_uid(uid: &str) -> Option<String> {
    (!uid.is_empty() && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        .then(|| uid.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6f1c2a7e-0b9d-4c55-9a43-2d1e8f7b3c10";

    #[test]
    fn cgroup_v2_both_drivers() {
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c2a7e_0b9d_4c55_9a43_2d1e8f7b3c10.slice/cri-containerd-3f2a.scope\n";
        assert_eq!(pod_uid(systemd).as_deref(), Some(UID));
        let guaranteed = "0::/kubepods.slice/kubepods-pod6f1c2a7e_0b9d_4c55_9a43_2d1e8f7b3c10.slice/cri-containerd-3f2a.scope\n";
        assert_eq!(pod_uid(guaranteed).as_deref(), Some(UID));
        let cgroupfs = format!("0::/kubepods/besteffort/pod{UID}/3f2a9c\n");
        assert_eq!(pod_uid(&cgroupfs).as_deref(), Some(UID));
        let cgroupfs_guaranteed = format!("0::/kubepods/pod{UID}/3f2a9c\n");
        assert_eq!(pod_uid(&cgroupfs_guaranteed).as_deref(), Some(UID));
        // Seen from another cgroup namespace, and under kind's --cgroup-root=/kubelet.
        let relative = format!("0::/../../kubepods/burstable/pod{UID}/3f2a9c\n");
        assert_eq!(pod_uid(&relative).as_deref(), Some(UID));
        let kind = "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod6f1c2a7e_0b9d_4c55_9a43_2d1e8f7b3c10.slice/cri-containerd-1.scope\n";
        assert_eq!(pod_uid(kind).as_deref(), Some(UID));
    }

    #[test]
    fn cgroup_v1_lines() {
        let v1 = format!(
            "12:pids:/kubepods/burstable/pod{UID}/3f2a9c\n\
             11:memory:/kubepods/burstable/pod{UID}/3f2a9c\n\
             1:name=systemd:/kubepods/burstable/pod{UID}/3f2a9c\n\
             0::/\n"
        );
        assert_eq!(pod_uid(&v1).as_deref(), Some(UID));
        let v1_systemd = "4:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6f1c2a7e_0b9d_4c55_9a43_2d1e8f7b3c10.slice/docker-9.scope\n";
        assert_eq!(pod_uid(v1_systemd).as_deref(), Some(UID));
        // A static pod's UID is the hash of its manifest.
        let static_pod = "0::/kubepods/pod0123456789abcdef0123456789abcdef/c\n";
        assert_eq!(
            pod_uid(static_pod).as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
    }

    #[test]
    fn no_pod() {
        for text in [
            "0::/system.slice/containerd.service\n",
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/\n",
            "12:pids:/docker/pod1234\n",
            "0::/podman.slice/pod-x.slice\n",
            "0::/kubepods/burstable/\n",
            "0::/kubepods.slice/kubepods-burstable.slice\n",
            "0::/kubepods/burstable/podnot-a-uid!/c\n",
            "garbage",
            "",
        ] {
            assert_eq!(pod_uid(text), None, "{text}");
        }
        assert_eq!(pod_uid_of(Path::new("/nonexistent"), 1), None);
    }
}
