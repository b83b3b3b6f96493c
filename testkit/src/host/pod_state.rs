//! The kubelet's pod state on a root: the cgroup a container's process is in
//! (`/proc/<pid>/cgroup` per cgroup driver and version) and the device manager's checkpoint.

use std::path::PathBuf;

use super::fake_host::FakeHost;

/// The kubelet's cgroup driver (`--cgroup-driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    Systemd,
    Cgroupfs,
}

/// The host's cgroup version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// One entry of the kubelet's device manager checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointEntry {
    pub pod_uid: String,
    pub container: String,
    pub resource: String,
    pub device_ids: Vec<String>,
}

impl CheckpointEntry {
    pub fn new(pod_uid: &str, container: &str, resource: &str, device_ids: &[&str]) -> Self {
        CheckpointEntry {
            pod_uid: pod_uid.into(),
            container: container.into(),
            resource: resource.into(),
            device_ids: device_ids.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// How the checkpoint writes `DeviceIDs`: a map NUMA node → IDs (Kubernetes 1.20 on), or a
/// plain list (1.19 and older).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointShape {
    PerNumaNode,
    ListBefore1_20,
}

impl FakeHost {
    /// Puts process `pid` in the cgroup the kubelet makes for a container of pod `uid` of QoS
    /// class `qos` (`guaranteed`, `burstable`, `besteffort`): `/proc/<pid>/cgroup` as the
    /// kernel shows it for that cgroup driver and version.
    pub fn put_process_in_pod(
        &self,
        pid: u32,
        uid: &str,
        qos: &str,
        driver: CgroupDriver,
        version: CgroupVersion,
    ) {
        let container = format!("{:064x}", u64::from(pid) * 0x9e37_79b9);
        let path = match driver {
            CgroupDriver::Cgroupfs if qos == "guaranteed" => {
                format!("/kubepods/pod{uid}/{container}")
            }
            CgroupDriver::Cgroupfs => format!("/kubepods/{qos}/pod{uid}/{container}"),
            CgroupDriver::Systemd => {
                let uid = uid.replace('-', "_");
                if qos == "guaranteed" {
                    format!(
                        "/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{container}.scope"
                    )
                } else {
                    format!(
                        "/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice/cri-containerd-{container}.scope"
                    )
                }
            }
        };
        self.put_process_in_cgroup(pid, &path, version);
    }

    /// Writes `/proc/<pid>/cgroup` for a process in cgroup `path` (v1: the same path in every
    /// hierarchy, as with the kubelet's cgroups; v2: the one `0::` line).
    pub fn put_process_in_cgroup(&self, pid: u32, path: &str, version: CgroupVersion) {
        let text = match version {
            CgroupVersion::V2 => format!("0::{path}\n"),
            CgroupVersion::V1 => {
                let mut t = String::new();
                for (n, controllers) in [
                    (12, "pids"),
                    (11, "memory"),
                    (10, "cpu,cpuacct"),
                    (4, "devices"),
                    (1, "name=systemd"),
                ] {
                    t.push_str(&format!("{n}:{controllers}:{path}\n"));
                }
                t.push_str("0::/\n");
                t
            }
        };
        self.write(&format!("/proc/{pid}/cgroup"), text);
    }

    /// Where the kubelet's device-plugin directory is in this root (tests point
    /// `--device-plugin-path` and the fake kubelet at it).
    pub fn device_plugin_dir(&self) -> PathBuf {
        self.path("/var/lib/kubelet/device-plugins")
    }

    /// Writes the kubelet device manager's checkpoint (`kubelet_internal_checkpoint` in
    /// [`Self::device_plugin_dir`]) holding `entries`, in `shape`, as the kubelet's
    /// `checkpoint.go` marshals it (by rename, as the kubelet writes it).
    pub fn write_kubelet_checkpoint(&self, entries: &[CheckpointEntry], shape: CheckpointShape) {
        let entries: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                let ids = match shape {
                    CheckpointShape::ListBefore1_20 => serde_json::json!(e.device_ids),
                    // Spread over two NUMA nodes, as a two-socket server's would be.
                    CheckpointShape::PerNumaNode => {
                        let on_node = |node: usize| -> Vec<&String> {
                            e.device_ids.iter().skip(node).step_by(2).collect()
                        };
                        let mut per_node = serde_json::Map::new();
                        per_node.insert("0".into(), serde_json::json!(on_node(0)));
                        if e.device_ids.len() > 1 {
                            per_node.insert("1".into(), serde_json::json!(on_node(1)));
                        }
                        serde_json::Value::Object(per_node)
                    }
                };
                serde_json::json!({
                    "PodUID": e.pod_uid,
                    "ContainerName": e.container,
                    "ResourceName": e.resource,
                    "DeviceIDs": ids,
                    // A ContainerAllocateResponse, protobuf in base64 ([]byte in Go's JSON).
                    "AllocResp": "CiQKHE5WSURJQV9WSVNJQkxFX0RFVklDRVMSBGFsbA==",
                })
            })
            .collect();
        let file = serde_json::json!({
            "Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}},
            "Checksum": 1_894_633_021u64,
        });
        let dir = self.device_plugin_dir();
        std::fs::create_dir_all(&dir).expect("device-plugin dir");
        let tmp = dir.join(".kubelet_internal_checkpoint.tmp");
        std::fs::write(&tmp, file.to_string()).expect("write checkpoint");
        std::fs::rename(&tmp, dir.join("kubelet_internal_checkpoint")).expect("publish checkpoint");
    }

    /// Removes the checkpoint (a kubelet that has not written it yet).
    pub fn remove_kubelet_checkpoint(&self) {
        let _ = std::fs::remove_file(self.device_plugin_dir().join("kubelet_internal_checkpoint"));
    }
}
