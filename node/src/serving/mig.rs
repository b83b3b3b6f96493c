//! Which resources a node serves under `--mig-strategy`, with NVIDIA's semantics
//! (k8s-device-plugin `internal/rm/device_map.go` and `rm.go`):
//!
//! - `none`: every GPU whole, as the configured resource (`nvidia.com/gpu`), MIG mode or not.
//! - `single`: MIG-enabled GPUs are served as their MIG devices under the configured resource;
//!   every MIG-enabled GPU must hold at least one MIG device, all MIG devices must have the
//!   same attributes (`nvmlDeviceGetAttributes`: slices, multiprocessors, engines, memory —
//!   NVIDIA's `assertAllMigDevicesAreValid`), and GPUs with and without MIG cannot be mixed.
//!   With no MIG-enabled GPU it is `none`.
//! - `mixed`: GPUs without MIG under the configured resource, and each MIG profile as its own
//!   resource `<domain>/mig-<profile>` with `+` written `.` (`nvidia.com/mig-1g.10gb`,
//!   `nvidia.com/mig-1g.10gb.me`). NVIDIA only makes resources of profiles whose compute
//!   instance spans its GPU instance (`1g.10gb`, not `1c.3g.40gb`), so a MIG device of any
//!   other profile is refused. A MIG-enabled GPU without MIG devices serves nothing (NVIDIA
//!   warns: see [`gpus_without_mig_devices`]). Resources without devices are not served
//!   (unless nothing at all was found).
//!
//! A refused geometry is an `Err` with NVIDIA's reason; while the plugin runs it is a
//! transient state of a reconfiguration (see `node::settle_mig_geometry`).

use std::collections::BTreeMap;

use crate::config::MigStrategy;
use crate::gpu::{Gpu, MigDevice};

use super::unit::Unit;

/// A resource name and the units it serves, in GPU order.
pub type ResourceUnits = Vec<(String, Vec<Unit>)>;

/// The resource `--mig-strategy mixed` serves a MIG profile as: NVIDIA's
/// `strings.ReplaceAll("mig-"+profile, "+", ".")` under `domain`.
pub fn mixed_resource_name(domain: &str, profile: &str) -> String {
    format!("{domain}/mig-{}", profile.replace('+', "."))
}

/// MIG-enabled GPUs (positions in `gpus`) that hold no MIG device.
pub fn gpus_without_mig_devices(gpus: &[Gpu], migs: &[MigDevice]) -> Vec<usize> {
    (0..gpus.len())
        .filter(|i| gpus[*i].mig_enabled && !migs.iter().any(|m| m.parent == *i))
        .collect()
}

/// The resources `strategy` makes of `gpus` and their MIG devices `migs`.
pub fn resources(
    resource_name: &str,
    strategy: MigStrategy,
    gpus: &[Gpu],
    migs: &[MigDevice],
) -> Result<ResourceUnits, String> {
    let whole = |filter: &dyn Fn(&Gpu) -> bool| -> Vec<Unit> {
        gpus.iter()
            .enumerate()
            .filter(|(_, g)| filter(g))
            .map(|(gpu, _)| Unit { gpu, mig: None })
            .collect()
    };
    if strategy == MigStrategy::None {
        return Ok(vec![(resource_name.to_string(), whole(&|_| true))]);
    }
    let mig_units: Vec<Unit> = migs
        .iter()
        .map(|m| Unit {
            gpu: m.parent,
            mig: Some(m.clone()),
        })
        .collect();
    let plain = whole(&|g| !g.mig_enabled);
    match strategy {
        MigStrategy::None => unreachable!("handled above"),
        MigStrategy::Single => {
            if let Some(&i) = gpus_without_mig_devices(gpus, migs).first() {
                let g = &gpus[i];
                return Err(format!(
                    "invalid MIG configuration: GPU {} ({}) has MIG enabled but no MIG devices; create GPU and compute instances or disable MIG",
                    g.index, g.uuid
                ));
            }
            if mig_units.is_empty() {
                return Ok(vec![(resource_name.to_string(), plain)]);
            }
            if !plain.is_empty() {
                return Err("invalid MIG configuration for --mig-strategy single: all devices on the node must be configured with the same migEnabled value (use mixed to serve GPUs with and without MIG)".into());
            }
            // NVIDIA compares the whole nvmlDeviceAttributes_t, memory included: two
            // profiles can share a name (`1g.10gb`, `1g.10gb+me` differ only in engines).
            let first = &migs[0];
            if let Some(other) = migs
                .iter()
                .find(|m| (m.attributes, m.memory_bytes) != (first.attributes, first.memory_bytes))
            {
                return Err(format!(
                    "invalid MIG configuration for --mig-strategy single: more than one MIG device type present on node ({} {} and {} {} differ in their attributes); use mixed",
                    first.profile, first.uuid, other.profile, other.uuid
                ));
            }
            Ok(vec![(resource_name.to_string(), mig_units)])
        }
        MigStrategy::Mixed => {
            if let Some(m) = migs
                .iter()
                .find(|m| m.attributes.compute_instance_slices != m.attributes.gpu_instance_slices)
            {
                return Err(format!(
                    "invalid MIG configuration for --mig-strategy mixed: MIG device {} has profile {}, whose compute instance does not span its GPU instance; mixed serves only such profiles (as NVIDIA's plugin): create one compute instance per GPU instance or use single",
                    m.uuid, m.profile
                ));
            }
            let domain = resource_name
                .split_once('/')
                .map_or("nvidia.com", |(d, _)| d);
            let mut by_profile: BTreeMap<String, Vec<Unit>> = BTreeMap::new();
            for u in mig_units {
                let profile = &u.mig.as_ref().expect("MIG unit").profile;
                by_profile
                    .entry(mixed_resource_name(domain, profile))
                    .or_default()
                    .push(u);
            }
            let mut out = Vec::new();
            if !plain.is_empty() || by_profile.is_empty() {
                out.push((resource_name.to_string(), plain));
            }
            out.extend(by_profile);
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::discovery::MigAttributes;

    fn gpu(index: u32, mig: bool) -> Gpu {
        Gpu {
            uuid: format!("GPU-{index}"),
            nvml_uuid: Some(format!("GPU-{index}")),
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_bytes: Some(85_520_809_984),
            pci_bus_id: None,
            numa_node: None,
            minor: Some(index),
            mig_enabled: mig,
        }
    }

    /// A MIG device of an H100 profile with the attributes NVML reports for it (slices,
    /// media engines per NVIDIA's MIG user guide; `+me` adds the OFA).
    fn mig(parent: usize, index: u32, profile: &str) -> MigDevice {
        let (gi, ci, mib, ofa) = match profile {
            "1g.10gb" => (1, 1, 9856, 0),
            "1g.10gb+me" => (1, 1, 9856, 1),
            "3g.40gb" => (3, 3, 40320, 0),
            "1c.3g.40gb" => (3, 1, 40320, 0),
            other => panic!("{other}"),
        };
        MigDevice {
            uuid: format!("MIG-{parent}-{index}"),
            parent,
            index,
            gpu_instance: index + 1,
            compute_instance: 0,
            profile: profile.into(),
            memory_bytes: mib << 20,
            attributes: MigAttributes {
                gpu_instance_slices: gi,
                compute_instance_slices: ci,
                multiprocessors: 16 * ci,
                copy_engines: gi,
                decoders: gi,
                encoders: 0,
                jpeg_engines: gi,
                ofa_engines: ofa,
            },
        }
    }

    fn names(r: &ResourceUnits) -> Vec<(&str, usize)> {
        r.iter().map(|(n, u)| (n.as_str(), u.len())).collect()
    }

    #[test]
    fn none_serves_every_gpu_whole() {
        let gpus = [gpu(0, true), gpu(1, false)];
        let r = resources("nvidia.com/gpu", MigStrategy::None, &gpus, &[]).unwrap();
        assert_eq!(names(&r), vec![("nvidia.com/gpu", 2)]);
        assert!(r[0].1.iter().all(|u| u.mig.is_none()));
    }

    #[test]
    fn single_serves_mig_devices_as_the_gpu_resource() {
        let gpus = [gpu(0, true), gpu(1, true)];
        let migs = [
            mig(0, 0, "1g.10gb"),
            mig(0, 1, "1g.10gb"),
            mig(1, 0, "1g.10gb"),
        ];
        let r = resources("nvidia.com/gpu", MigStrategy::Single, &gpus, &migs).unwrap();
        assert_eq!(names(&r), vec![("nvidia.com/gpu", 3)]);
        // No MIG at all: whole GPUs.
        let plain = [gpu(0, false)];
        let r = resources("nvidia.com/gpu", MigStrategy::Single, &plain, &[]).unwrap();
        assert_eq!(names(&r), vec![("nvidia.com/gpu", 1)]);
    }

    #[test]
    fn single_refuses_what_nvidia_refuses() {
        let mixed_modes = [gpu(0, true), gpu(1, false)];
        let err = resources(
            "nvidia.com/gpu",
            MigStrategy::Single,
            &mixed_modes,
            &[mig(0, 0, "1g.10gb")],
        )
        .unwrap_err();
        assert!(err.contains("same migEnabled value"), "{err}");
        let two = [gpu(0, true)];
        let err = resources(
            "nvidia.com/gpu",
            MigStrategy::Single,
            &two,
            &[mig(0, 0, "1g.10gb"), mig(0, 1, "3g.40gb")],
        )
        .unwrap_err();
        assert!(err.contains("more than one MIG device type"), "{err}");
        let empty = [gpu(0, true)];
        let err = resources("nvidia.com/gpu", MigStrategy::Single, &empty, &[]).unwrap_err();
        assert!(err.contains("has MIG enabled but no MIG devices"), "{err}");
    }

    #[test]
    fn single_compares_attributes_not_profile_names() {
        // Same slices and memory, different engines: two types, as NVIDIA's comparison of
        // nvmlDeviceAttributes_t says (a profile-name comparison of `1g.10gb` would pass
        // had the GPU instance profile been unknown).
        let gpus = [gpu(0, true)];
        let mut me = mig(0, 1, "1g.10gb+me");
        me.profile = "1g.10gb".into();
        let err = resources(
            "nvidia.com/gpu",
            MigStrategy::Single,
            &gpus,
            &[mig(0, 0, "1g.10gb"), me],
        )
        .unwrap_err();
        assert!(err.contains("more than one MIG device type"), "{err}");
        // Same profile name and attributes but another memory size: two types as well.
        let mut bigger = mig(0, 1, "1g.10gb");
        bigger.memory_bytes += 512 << 20;
        assert!(resources(
            "nvidia.com/gpu",
            MigStrategy::Single,
            &gpus,
            &[mig(0, 0, "1g.10gb"), bigger],
        )
        .is_err());
    }

    #[test]
    fn mixed_serves_one_resource_per_profile() {
        let gpus = [gpu(0, true), gpu(1, false)];
        let migs = [
            mig(0, 0, "3g.40gb"),
            mig(0, 1, "1g.10gb"),
            mig(0, 2, "1g.10gb"),
            mig(0, 3, "1g.10gb+me"),
        ];
        let r = resources("nvidia.com/gpu", MigStrategy::Mixed, &gpus, &migs).unwrap();
        assert_eq!(
            names(&r),
            vec![
                ("nvidia.com/gpu", 1),
                ("nvidia.com/mig-1g.10gb", 2),
                ("nvidia.com/mig-1g.10gb.me", 1),
                ("nvidia.com/mig-3g.40gb", 1)
            ]
        );
        // Every GPU in MIG mode: no empty nvidia.com/gpu resource.
        let all_mig = [gpu(0, true)];
        let r = resources("nvidia.com/gpu", MigStrategy::Mixed, &all_mig, &migs).unwrap();
        assert_eq!(names(&r)[0].0, "nvidia.com/mig-1g.10gb");
    }

    #[test]
    fn mixed_follows_nvidia_for_partial_compute_instances_and_empty_gpus() {
        // A compute instance smaller than its GPU instance has no resource in NVIDIA's
        // mixed strategy (rm.go skips profiles with C != G): refused, not nvidia.com/mig-1c.….
        let gpus = [gpu(0, true)];
        let err = resources(
            "nvidia.com/gpu",
            MigStrategy::Mixed,
            &gpus,
            &[mig(0, 0, "1c.3g.40gb")],
        )
        .unwrap_err();
        assert!(err.contains("1c.3g.40gb"), "{err}");
        // MIG enabled without MIG devices: NVIDIA warns and serves the rest.
        let gpus = [gpu(0, true), gpu(1, false)];
        let r = resources("nvidia.com/gpu", MigStrategy::Mixed, &gpus, &[]).unwrap();
        assert_eq!(names(&r), vec![("nvidia.com/gpu", 1)]);
        assert_eq!(gpus_without_mig_devices(&gpus, &[]), vec![0]);
    }
}
