//! The kubelet's conversion of device plugins' `ContainerAllocateResponse`s into the CRI
//! `ContainerConfig` fields. Read in kubernetes/kubernetes:
//! - pkg/kubelet/cm/devicemanager/pod_devices.go `deviceRunContainerOptions` (commit
//!   04791b4906602ffda5ccf9bc4c84d3329f1d7080): over the responses of every resource, envs,
//!   devices (keyed by container path), mounts (keyed by container path) and annotations are
//!   collected; a key already present keeps its FIRST value (a conflicting later one is only
//!   logged). Mounts get `SELinuxRelabel: false` and no propagation. That copy predates the
//!   CDI field; a current copy of the same file (Kubernetes 1.28 on, with `getCDIDeviceInfo`)
//!   also collects each response's `CdiDevices` names into `CDIDevices`, skipping a name already
//!   collected for the container (one set over all its resources).
//! - pkg/kubelet/kuberuntime/kuberuntime_container.go (a Kubernetes 1.33+ copy)
//!   `generateContainerConfig`: `makeDevices` copies each device as `Device{host_path,
//!   container_path, permissions}`, `makeMounts` each mount as `Mount{host_path, container_path,
//!   readonly, selinux_relabel (false here), propagation (unset = PROPAGATION_PRIVATE)}`,
//!   `makeCDIDevices` each name as `CDIDevice{name}` into `ContainerConfig.cdi_devices`, and the
//!   annotations join the container's annotations. (Kubelets before 1.28 passed CDI names only as
//!   `cdi.k8s.io/` annotations; the plugin's `cdi-annotations` strategy covers those.)

use edgegpu_kubelet_api::cri;
use edgegpu_kubelet_api::v1beta1::ContainerAllocateResponse;
use std::collections::BTreeMap;

/// The device-plugin parts of a CRI container config.
#[derive(Default, Debug)]
pub struct DeviceOptions {
    pub envs: Vec<cri::KeyValue>,
    pub mounts: Vec<cri::Mount>,
    pub devices: Vec<cri::Device>,
    pub annotations: BTreeMap<String, String>,
    pub cdi_devices: Vec<cri::CdiDevice>,
}

/// Converts the responses of every device plugin a container got devices from (in the order
/// the kubelet iterates them). Within one response the envs and annotations are taken in key
/// order (the kubelet iterates a Go map: any order; a plugin's keys are distinct anyway).
pub fn convert(responses: &[ContainerAllocateResponse]) -> DeviceOptions {
    let mut out = DeviceOptions::default();
    for r in responses {
        let envs: BTreeMap<_, _> = r.envs.iter().collect();
        for (k, v) in envs {
            if !out.envs.iter().any(|e| &e.key == k) {
                out.envs.push(cri::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                });
            }
        }
        for d in &r.devices {
            if out
                .devices
                .iter()
                .any(|x| x.container_path == d.container_path)
            {
                continue;
            }
            out.devices.push(cri::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            });
        }
        for m in &r.mounts {
            if out
                .mounts
                .iter()
                .any(|x| x.container_path == m.container_path)
            {
                continue;
            }
            out.mounts.push(cri::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.read_only,
                selinux_relabel: false,
                propagation: cri::MountPropagation::PropagationPrivate as i32,
                ..Default::default()
            });
        }
        for (k, v) in &r.annotations {
            out.annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        for c in &r.cdi_devices {
            if !out.cdi_devices.iter().any(|x| x.name == c.name) {
                out.cdi_devices.push(cri::CdiDevice {
                    name: c.name.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegpu_kubelet_api::v1beta1::{CdiDevice, DeviceSpec, Mount};

    fn response(env: &str, host: &str, cdi: &str) -> ContainerAllocateResponse {
        ContainerAllocateResponse {
            envs: [("NVIDIA_VISIBLE_DEVICES".to_string(), env.to_string())].into(),
            mounts: vec![Mount {
                container_path: "/lib/x".into(),
                host_path: host.into(),
                read_only: true,
            }],
            devices: vec![DeviceSpec {
                container_path: "/dev/nvidia0".into(),
                host_path: host.into(),
                permissions: "rw".into(),
            }],
            annotations: [("a".to_string(), env.to_string())].into(),
            cdi_devices: vec![CdiDevice { name: cdi.into() }],
        }
    }

    #[test]
    fn the_first_value_of_a_key_wins_and_container_paths_are_unique() {
        let o = convert(&[
            response("0", "/h0", "nvidia.com/gpu=0"),
            response("1", "/h1", "nvidia.com/gpu=0"),
        ]);
        assert_eq!(o.envs.len(), 1);
        assert_eq!(o.envs[0].value, "0");
        assert_eq!(o.devices.len(), 1);
        assert_eq!(
            (
                o.devices[0].host_path.as_str(),
                o.devices[0].permissions.as_str()
            ),
            ("/h0", "rw")
        );
        assert_eq!(o.mounts.len(), 1);
        assert!(o.mounts[0].readonly && !o.mounts[0].selinux_relabel);
        assert_eq!(
            o.mounts[0].propagation,
            cri::MountPropagation::PropagationPrivate as i32
        );
        assert_eq!(o.annotations["a"], "0");
        assert_eq!(o.cdi_devices.len(), 1);
    }
}
