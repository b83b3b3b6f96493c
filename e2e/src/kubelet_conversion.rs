//! The kubelet's conversion of a device plugin's `ContainerAllocateResponse` into the CRI
//! `ContainerConfig` fields, as Kubernetes v1.34 does it:
//! - pkg/kubelet/cm/devicemanager/pod_devices.go `deviceRunContainerOptions`: envs merged into
//!   one map (a later device's value for the same name wins), mounts de-duplicated by container
//!   path, devices by host path, annotations merged, CDI device names collected (de-duplicated);
//! - pkg/kubelet/kuberuntime/kuberuntime_container.go `generateContainerConfig`: the envs become
//!   `KeyValue`s, `makeDevices` copies each device as `DeviceSpec{container_path, host_path,
//!   permissions}`, `makeMounts` each mount as `Mount{container_path, host_path, readonly}`
//!   (private propagation), the annotations go into `ContainerConfig.annotations`, and
//!   `makeCDIDevices` the names into `ContainerConfig.cdi_devices` (kubelets before 1.28 passed
//!   them only as `cdi.k8s.io/` annotations; containerd 1.7 and 2.x read the field).

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

/// Converts the responses of every device plugin a container got devices from.
pub fn convert(responses: &[ContainerAllocateResponse]) -> DeviceOptions {
    let mut envs = BTreeMap::new();
    let mut out = DeviceOptions::default();
    for r in responses {
        envs.extend(r.envs.iter().map(|(k, v)| (k.clone(), v.clone())));
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
                propagation: cri::MountPropagation::PropagationPrivate as i32,
                ..Default::default()
            });
        }
        for d in &r.devices {
            if out.devices.iter().any(|x| x.host_path == d.host_path) {
                continue;
            }
            out.devices.push(cri::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            });
        }
        out.annotations
            .extend(r.annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        for c in &r.cdi_devices {
            if !out.cdi_devices.iter().any(|x| x.name == c.name) {
                out.cdi_devices.push(cri::CdiDevice {
                    name: c.name.clone(),
                });
            }
        }
    }
    out.envs = envs
        .into_iter()
        .map(|(key, value)| cri::KeyValue { key, value })
        .collect();
    out
}
