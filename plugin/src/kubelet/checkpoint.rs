//! Which pod (by UID) holds which device IDs: the kubelet device manager's checkpoint,
//! `<device-plugin dir>/kubelet_internal_checkpoint`. The pod-resources API names pods but
//! gives no UID, and a process's cgroup gives the UID but no name; this file links the two
//! (per-pod GPU memory, docs/metrics.md).
//!
//! The format is the kubelet's (`pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go`,
//! file name in `pkg/kubelet/cm/devicemanager/types.go`): JSON
//! `{"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName", "DeviceIDs",
//! "AllocResp"}], "RegisteredDevices": {…}}, "Checksum": …}`. `DeviceIDs` is a map NUMA node →
//! IDs (`DevicesPerNUMA`, Kubernetes 1.20 on; Go writes the integer keys as strings), and a
//! plain list in the files of 1.19 and older (`checkpointv1.go`, `PodDevicesEntryV1`, still
//! read by current kubelets). Both are read. The checksum is the kubelet's business (it
//! writes the file by rename, so a reader never sees half of it); unknown fields are ignored.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

/// The file's name in the device-plugin directory.
pub const CHECKPOINT_FILE: &str = "kubelet_internal_checkpoint";

/// One container's device IDs of one resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodDevices {
    pub pod_uid: String,
    pub container: String,
    pub resource: String,
    /// Every NUMA node's IDs together.
    pub device_ids: Vec<String>,
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    /// `null` when no pod holds devices.
    #[serde(rename = "PodDeviceEntries", default)]
    entries: Option<Vec<Entry>>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "PodUID")]
    pod_uid: String,
    #[serde(rename = "ContainerName")]
    container: String,
    #[serde(rename = "ResourceName")]
    resource: String,
    #[serde(rename = "DeviceIDs", default)]
    device_ids: Option<DeviceIds>,
}

/// `DeviceIDs` in either shape.
#[derive(Deserialize)]
#[serde(untagged)]
enum DeviceIds {
    /// `DevicesPerNUMA` (map[int64][]string): `{"0": ["GPU-…"], "1": […]}`.
    PerNuma(BTreeMap<String, Option<Vec<String>>>),
    /// 1.19 and older: `["GPU-…"]`.
    List(Vec<String>),
}

/// The entries of a checkpoint's text, those of `resources` only (all when empty).
pub fn parse(text: &str, resources: &[&str]) -> anyhow::Result<Vec<PodDevices>> {
    let file: File = serde_json::from_str(text).context("not a device manager checkpoint")?;
    let mut out = Vec::new();
    for e in file.data.entries.unwrap_or_default() {
        if !resources.is_empty() && !resources.contains(&e.resource.as_str()) {
            continue;
        }
        let mut device_ids: Vec<String> = match e.device_ids {
            Some(DeviceIds::PerNuma(per_node)) => {
                per_node.into_values().flatten().flatten().collect()
            }
            Some(DeviceIds::List(ids)) => ids,
            None => Vec::new(),
        };
        device_ids.sort();
        device_ids.dedup();
        out.push(PodDevices {
            pod_uid: e.pod_uid,
            container: e.container,
            resource: e.resource,
            device_ids,
        });
    }
    out.sort();
    Ok(out)
}

/// Reads and parses the checkpoint at `path` (blocking: call it off the async runtime).
pub fn read(path: &Path, resources: &[&str]) -> anyhow::Result<Vec<PodDevices>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text, resources).with_context(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(uid: &str, container: &str, resource: &str, ids: &[&str]) -> PodDevices {
        PodDevices {
            pod_uid: uid.into(),
            container: container.into(),
            resource: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn current_kubelets_per_numa_node() {
        // As checkpoint.go marshals it: map keys as strings, AllocResp as base64, a checksum.
        let text = r#"{"Data":{"PodDeviceEntries":[
            {"PodUID":"6f1c2a7e-0b9d-4c55-9a43-2d1e8f7b3c10","ContainerName":"app",
             "ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-b::1"],"1":["GPU-a::0"]},
             "AllocResp":"CiQKHE5WSURJQV9WSVNJQkxFX0RFVklDRVMSBEdQVS1h"},
            {"PodUID":"0a0b","ContainerName":"side","ResourceName":"example.com/fpga",
             "DeviceIDs":{"0":["f0"]},"AllocResp":null},
            {"PodUID":"1b2c","ContainerName":"x","ResourceName":"nvidia.com/gpu",
             "DeviceIDs":null,"AllocResp":""}],
            "RegisteredDevices":{"nvidia.com/gpu":["GPU-a::0","GPU-b::1"]}},
            "Checksum":2446331235,"BootID":"4c3e"}"#;
        assert_eq!(
            parse(text, &["nvidia.com/gpu"]).unwrap(),
            vec![
                entry("1b2c", "x", "nvidia.com/gpu", &[]),
                entry(
                    "6f1c2a7e-0b9d-4c55-9a43-2d1e8f7b3c10",
                    "app",
                    "nvidia.com/gpu",
                    &["GPU-a::0", "GPU-b::1"]
                ),
            ]
        );
        assert_eq!(parse(text, &[]).unwrap().len(), 3);
    }

    #[test]
    fn kubelets_before_1_20_plain_lists() {
        let text = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"c",
            "ResourceName":"nvidia.com/gpu","DeviceIDs":["tegra::3","tegra::0"],"AllocResp":"e30="}],
            "RegisteredDevices":{}},"Checksum":1}"#;
        assert_eq!(
            parse(text, &["nvidia.com/gpu"]).unwrap(),
            vec![entry(
                "u1",
                "c",
                "nvidia.com/gpu",
                &["tegra::0", "tegra::3"]
            )]
        );
    }

    #[test]
    fn empty_and_broken_files() {
        let empty = r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":0}"#;
        assert_eq!(parse(empty, &[]).unwrap(), vec![]);
        assert!(parse("", &[]).is_err());
        assert!(parse("{\"Data\":", &[]).is_err());
        assert!(parse("[]", &[]).is_err());
        let missing = read(Path::new("/nonexistent/kubelet_internal_checkpoint"), &[]);
        assert!(format!("{:#}", missing.unwrap_err()).contains("cannot read"));
    }
}
