//! Allocate: what a container receives for its GPU IDs, with NVIDIA's contract
//! (reference kubelet-device-plugin.md §5.4): `NVIDIA_VISIBLE_DEVICES` for `envvar`, CDI
//! names as an annotation (`cdi-annotations`) or CRI CDI devices (`cdi-cri`), and, with
//! `--pass-device-specs`, the `/dev` nodes that exist on the host.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};

use edgegpu_kubelet_api::v1beta1::{CdiDevice, ContainerAllocateResponse, DeviceSpec};
use tonic::Status;

use crate::config::DeviceListStrategy;
use crate::device_specs;
use crate::discovery::Platform;
use crate::gpu::GpuResource;

/// Env var the NVIDIA container runtime reads.
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
/// CDI kind of the devices (`nvidia-ctk cdi generate` names them `nvidia.com/gpu=<id>`).
pub const CDI_KIND: &str = "nvidia.com/gpu";
/// Annotation prefix the CRI runtimes read CDI devices from, plus NVIDIA's key stem.
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/nvidia-device-plugin_";

/// A random RFC 4122 v4 UUID: NVIDIA's annotation key is unique per response.
fn random_uuid() -> String {
    // RandomState is seeded from the OS once per process and bumped per instance.
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::process::id() as u64);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Validates `ids` against the advertised devices; returns the physical GPU indices
/// (deduplicated, in request order).
// tonic::Status is the Resource contract's error type; boxing it would only move the cost.
#[allow(clippy::result_large_err)]
pub fn resolve_ids(res: &GpuResource, ids: &[String]) -> Result<Vec<usize>, Status> {
    let name = res.name();
    let advertised = res.table.advertised();
    if ids.is_empty() {
        return Err(Status::invalid_argument(format!(
            "Allocate request for '{name}' has no device IDs"
        )));
    }
    if ids.len() > advertised.len() {
        return Err(Status::invalid_argument(format!(
            "requested {} devices for '{name}' ({}) but only {} exist",
            ids.len(),
            ids.join(", "),
            advertised.len()
        )));
    }
    let unknown: Vec<&str> = ids
        .iter()
        .filter(|id| !advertised.iter().any(|a| &a.id == *id))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(Status::invalid_argument(format!(
            "unknown device IDs for '{name}': {}",
            unknown.join(", ")
        )));
    }
    let mut seen = HashSet::new();
    let repeated: Vec<&str> = ids
        .iter()
        .filter(|id| !seen.insert(id.as_str()))
        .map(String::as_str)
        .collect();
    if !repeated.is_empty() {
        return Err(Status::invalid_argument(format!(
            "device IDs requested twice for '{name}': {}",
            repeated.join(", ")
        )));
    }
    if let Some(rep) = res.replication {
        if rep.fail_requests_greater_than_one && ids.len() > 1 {
            return Err(Status::invalid_argument(format!(
                "invalid request: maximum request size for shared resources is 1; found {}",
                ids.len()
            )));
        }
    }
    let mut physical = Vec::new();
    let mut unhealthy = Vec::new();
    for id in ids {
        let a = advertised
            .iter()
            .find(|a| &a.id == id)
            .expect("checked above");
        if let Some(reason) = res.table.unhealthy_reason(a.physical) {
            unhealthy.push(format!("{id} ({reason})"));
        }
        if !physical.contains(&a.physical) {
            physical.push(a.physical);
        }
    }
    if !unhealthy.is_empty() {
        return Err(Status::failed_precondition(format!(
            "unhealthy device IDs for '{name}': {}",
            unhealthy.join(", ")
        )));
    }
    Ok(physical)
}

/// The response for one container.
#[allow(clippy::result_large_err)]
pub fn allocate(res: &GpuResource, ids: &[String]) -> Result<ContainerAllocateResponse, Status> {
    let physical = resolve_ids(res, ids)?;
    // IDs handed to the runtime: the GPU's ID under the ID strategy (replicas map to their GPU).
    let visible: Vec<String> = physical.iter().map(|p| res.base_ids[*p].clone()).collect();
    let mut response = ContainerAllocateResponse {
        envs: HashMap::new(),
        ..Default::default()
    };

    let strategies = &res.config.device_list_strategy;
    let cdi_names: Vec<String> = physical
        .iter()
        .map(|p| format!("{CDI_KIND}={}", res.cdi_id(*p)))
        .collect();
    if strategies.contains(&DeviceListStrategy::CdiAnnotations) {
        response.annotations.insert(
            format!("{CDI_ANNOTATION_PREFIX}{}", random_uuid()),
            cdi_names.join(","),
        );
    }
    if strategies.contains(&DeviceListStrategy::CdiCri) {
        response.cdi_devices = cdi_names
            .iter()
            .map(|n| CdiDevice { name: n.clone() })
            .collect();
    }
    if strategies.contains(&DeviceListStrategy::Envvar) {
        response
            .envs
            .insert(VISIBLE_DEVICES_ENV.to_string(), visible.join(","));
    }

    if res.config.pass_device_specs {
        let paths = match &res.platform {
            Some(Platform::Tegra { detection, .. }) => {
                device_specs::tegra_device_paths(&res.root, detection.generation)
            }
            Some(Platform::Nvml) => {
                let minors: Vec<u32> = physical
                    .iter()
                    .map(|p| res.gpus[*p].minor.unwrap_or(res.gpus[*p].index))
                    .collect();
                device_specs::discrete_device_paths(&res.root, &minors)
            }
            None => Vec::new(),
        };
        response.devices = paths
            .into_iter()
            .map(|p| DeviceSpec {
                container_path: p.clone(),
                host_path: p,
                permissions: "rw".into(),
            })
            .collect();
    }
    tracing::info!(
        resource = %res.name(),
        ids = %ids.join(","),
        visible = %visible.join(","),
        device_specs = response.devices.len(),
        "Allocate"
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_uuids_differ_and_look_like_v4() {
        let a = super::random_uuid();
        let b = super::random_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }
}
