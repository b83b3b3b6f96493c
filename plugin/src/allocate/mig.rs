//! Which resources a node serves under `--mig-strategy`, with NVIDIA's semantics
//! (k8s-device-plugin `internal/rm/device_map.go`):
//!
//! - `none`: every GPU whole, as the configured resource (`nvidia.com/gpu`), MIG mode or not.
//! - `single`: MIG-enabled GPUs are served as their MIG devices under the configured resource;
//!   every MIG-enabled GPU must hold at least one MIG device, all MIG devices must be of one
//!   profile, and GPUs with and without MIG cannot be mixed. With no MIG-enabled GPU it is
//!   `none`.
//! - `mixed`: GPUs without MIG under the configured resource, and each MIG profile as its own
//!   resource `<domain>/mig-<profile>` (`nvidia.com/mig-1g.10gb`). Resources without devices
//!   are not served (unless nothing at all was found).

use std::collections::BTreeMap;

use crate::config::MigStrategy;
use crate::gpu::{Gpu, MigDevice};

use super::Unit;

/// A resource name and the units it serves, in GPU order.
pub type ResourceUnits = Vec<(String, Vec<Unit>)>;

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
    for (i, g) in gpus.iter().enumerate() {
        if g.mig_enabled && !migs.iter().any(|m| m.parent == i) {
            return Err(format!(
                "invalid MIG configuration: GPU {} ({}) has MIG enabled but no MIG devices; create GPU and compute instances or disable MIG",
                g.index, g.uuid
            ));
        }
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
            if mig_units.is_empty() {
                return Ok(vec![(resource_name.to_string(), plain)]);
            }
            if !plain.is_empty() {
                return Err("invalid MIG configuration for --mig-strategy single: all devices on the node must be configured with the same migEnabled value (use mixed to serve GPUs with and without MIG)".into());
            }
            let profiles: Vec<&str> = {
                let mut p: Vec<&str> = migs.iter().map(|m| m.profile.as_str()).collect();
                p.sort_unstable();
                p.dedup();
                p
            };
            if profiles.len() > 1 {
                return Err(format!(
                    "invalid MIG configuration for --mig-strategy single: more than one MIG device type present on node ({}); use mixed",
                    profiles.join(", ")
                ));
            }
            Ok(vec![(resource_name.to_string(), mig_units)])
        }
        MigStrategy::Mixed => {
            let domain = resource_name
                .split_once('/')
                .map_or("nvidia.com", |(d, _)| d);
            let mut by_profile: BTreeMap<String, Vec<Unit>> = BTreeMap::new();
            for u in mig_units {
                let profile = u.mig.as_ref().expect("MIG unit").profile.clone();
                by_profile.entry(profile).or_default().push(u);
            }
            let mut out = Vec::new();
            if !plain.is_empty() || by_profile.is_empty() {
                out.push((resource_name.to_string(), plain));
            }
            for (profile, units) in by_profile {
                out.push((format!("{domain}/mig-{profile}"), units));
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn mig(parent: usize, index: u32, profile: &str) -> MigDevice {
        MigDevice {
            uuid: format!("MIG-{parent}-{index}"),
            parent,
            index,
            gpu_instance: index + 1,
            compute_instance: 0,
            profile: profile.into(),
            memory_bytes: 0,
            attributes: Default::default(),
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
        assert!(err.contains("1g.10gb, 3g.40gb"), "{err}");
        let empty = [gpu(0, true)];
        let err = resources("nvidia.com/gpu", MigStrategy::Mixed, &empty, &[]).unwrap_err();
        assert!(err.contains("has MIG enabled but no MIG devices"), "{err}");
    }

    #[test]
    fn mixed_serves_one_resource_per_profile() {
        let gpus = [gpu(0, true), gpu(1, false)];
        let migs = [
            mig(0, 0, "3g.40gb"),
            mig(0, 1, "1g.10gb"),
            mig(0, 2, "1g.10gb"),
        ];
        let r = resources("nvidia.com/gpu", MigStrategy::Mixed, &gpus, &migs).unwrap();
        assert_eq!(
            names(&r),
            vec![
                ("nvidia.com/gpu", 1),
                ("nvidia.com/mig-1g.10gb", 2),
                ("nvidia.com/mig-3g.40gb", 1)
            ]
        );
        // Every GPU in MIG mode: no empty nvidia.com/gpu resource.
        let all_mig = [gpu(0, true)];
        let r = resources("nvidia.com/gpu", MigStrategy::Mixed, &all_mig, &migs).unwrap();
        assert_eq!(names(&r)[0].0, "nvidia.com/mig-1g.10gb");
    }
}
