//! How Allocate tells the container runtime which GPUs a container gets, NVIDIA's contract
//! (docs/device-plugin.md): `NVIDIA_VISIBLE_DEVICES` for `envvar`, CDI names as an
//! annotation (`cdi-annotations`) or as CRI CDI devices (`cdi-cri`).

use std::hash::{BuildHasher, Hasher};

use edgegpu_kubelet_api::v1beta1::{CdiDevice, ContainerAllocateResponse};

use edgegpu_node::config::DeviceListStrategy;

/// Env var the NVIDIA container runtime reads.
const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
/// Annotation prefix the CRI runtimes read CDI devices from, plus NVIDIA's key stem.
const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/nvidia-device-plugin_";

/// Adds to `response` what each of `strategies` hands the runtime: `visible` are the GPU IDs
/// under the ID strategy, `cdi_ids` the matching CDI device names (`nvidia.com/gpu=<id>`).
pub fn apply(
    strategies: &[DeviceListStrategy],
    visible: &[String],
    cdi_ids: &[String],
    response: &mut ContainerAllocateResponse,
) {
    let cdi_names: Vec<String> = cdi_ids
        .iter()
        .map(|id| edgegpu_platform::cdi::qualified(id))
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
}

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
