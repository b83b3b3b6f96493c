//! The CDI spec we write: the subset of the Container Device Interface specification
//! (cncf-tags/container-device-interface `SPEC.md`, Go types `specs-go/config.go`) that GPU
//! specs use, its field names, the minimum `cdiVersion` the content needs (the rules of
//! `specs-go/version.go`), and the name rules the CDI library enforces on load.

use serde::Serialize;

/// The CDI kind of NVIDIA GPUs (what `nvidia-ctk cdi generate` writes, and what the device
/// plugin's CDI strategies name: `nvidia.com/gpu=<device>`; one definition for both, in
/// `edgegpu_platform::cdi`).
pub const KIND: &str = edgegpu_platform::cdi::KIND;

/// A CDI spec file.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub cdi_version: String,
    pub kind: String,
    pub devices: Vec<Device>,
    #[serde(skip_serializing_if = "ContainerEdits::is_empty")]
    pub container_edits: ContainerEdits,
}

/// One named device.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub name: String,
    pub container_edits: ContainerEdits,
}

/// Edits to the container's OCI spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
}

impl ContainerEdits {
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
    }
}

/// A device node, at the same path in the container as on the host (the runtime reads type,
/// major and minor from the host node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceNode {
    pub path: String,
}

/// A bind mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    pub options: Vec<String>,
}

/// An OCI hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    pub hook_name: String,
    pub path: String,
    pub args: Vec<String>,
}

/// Options of a read-only bind mount of driver files (nvidia-ctk's).
pub const MOUNT_OPTIONS: [&str; 5] = ["ro", "nosuid", "nodev", "rbind", "rprivate"];

impl Mount {
    /// A read-only bind mount of `path` at the same path in the container.
    pub fn bind(path: &str) -> Mount {
        Mount::bind_at(path, path)
    }

    /// A read-only bind mount of host `host_path` at `container_path`.
    pub fn bind_at(host_path: &str, container_path: &str) -> Mount {
        Mount {
            host_path: host_path.to_string(),
            container_path: container_path.to_string(),
            options: MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Every released CDI specification version: what the CDI Go library v1.1.0 accepts
/// (`specs-go/version.go`, `validSpecVersions`). Older libraries know fewer (v0.5.x, which
/// Debian 12 ships and older runtimes vendor, only up to 0.5.0), which is why a spec claims
/// [`minimum_version`] and not the newest.
pub const KNOWN_VERSIONS: [&str; 10] = [
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// The minimum `cdiVersion` `spec`'s content needs, as the CDI library computes it
/// (`MinimumRequiredVersion`): 0.3.0 at least; 0.4.0 for a mount `type`; 0.5.0 for a device
/// name not starting with a letter or a device node `hostPath`; 0.6.0 for annotations or a
/// dot in the kind's class. Older runtimes vendor older libraries and reject versions they do
/// not know, so the spec claims no more than this.
pub fn minimum_version(spec: &Spec) -> &'static str {
    let digit_name = spec
        .devices
        .iter()
        .any(|d| !d.name.starts_with(|c: char| c.is_ascii_alphabetic()));
    let class_has_dot = spec
        .kind
        .split_once('/')
        .is_some_and(|(_, class)| class.contains('.'));
    if class_has_dot {
        "0.6.0"
    } else if digit_name {
        "0.5.0"
    } else {
        "0.3.0"
    }
}

/// Whether `name` is a valid CDI device name: starts and ends with a letter or digit, and
/// contains only letters, digits, `_`, `.`, `:` and `-` (the CDI library's `ValidateDeviceName`).
pub fn valid_device_name(name: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric();
    name.starts_with(ok)
        && name.ends_with(ok)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

impl Spec {
    /// A spec of [`KIND`] with `devices` and `edits`, claiming the minimum version.
    pub fn new(devices: Vec<Device>, edits: ContainerEdits) -> Spec {
        let mut spec = Spec {
            cdi_version: String::new(),
            kind: KIND.to_string(),
            devices,
            container_edits: edits,
        };
        spec.cdi_version = minimum_version(&spec).to_string();
        spec
    }

    /// The device names, in order.
    pub fn device_names(&self) -> Vec<&str> {
        self.devices.iter().map(|d| d.name.as_str()).collect()
    }

    /// The checks the CDI library makes when it loads a spec, so that a spec we write is one
    /// it accepts: at least one device, names valid and unique, every device with edits.
    pub fn validate(&self) -> Result<(), String> {
        if self.devices.is_empty() {
            return Err("the spec has no devices".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for d in &self.devices {
            if !valid_device_name(&d.name) {
                return Err(format!("invalid CDI device name `{}`", d.name));
            }
            if !seen.insert(d.name.as_str()) {
                return Err(format!("device `{}` is listed twice", d.name));
            }
            if d.container_edits.is_empty() {
                return Err(format!("device `{}` has no container edits", d.name));
            }
        }
        if !KNOWN_VERSIONS.contains(&self.cdi_version.as_str()) {
            return Err(format!("unknown cdiVersion {}", self.cdi_version));
        }
        Ok(())
    }

    pub fn to_json(&self) -> String {
        let mut out = serde_json::to_string_pretty(self).expect("a spec serialises");
        out.push('\n');
        out
    }

    pub fn to_yaml(&self) -> String {
        let value = serde_json::to_value(self).expect("a spec serialises");
        super::yaml::to_yaml(&value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str) -> Device {
        Device {
            name: name.into(),
            container_edits: ContainerEdits {
                device_nodes: vec![DeviceNode {
                    path: "/dev/nvidia0".into(),
                }],
                ..Default::default()
            },
        }
    }

    #[test]
    fn minimum_versions_follow_the_cdi_rules() {
        let spec = Spec::new(vec![device("all")], ContainerEdits::default());
        assert_eq!(spec.cdi_version, "0.3.0");
        let spec = Spec::new(vec![device("0"), device("all")], ContainerEdits::default());
        assert_eq!(spec.cdi_version, "0.5.0");
        let mut spec = Spec::new(vec![device("all")], ContainerEdits::default());
        spec.kind = "nvidia.com/gpu.shared".into();
        assert_eq!(minimum_version(&spec), "0.6.0");
    }

    #[test]
    fn names_and_validation() {
        for good in ["0", "all", "GPU-3b7e0c2a-5f1d", "0:gi1:ci0", "a_b.c"] {
            assert!(valid_device_name(good), "{good}");
        }
        for bad in ["", "-0", "0:", "a b", "a/b", "é"] {
            assert!(!valid_device_name(bad), "{bad}");
        }
        let spec = Spec::new(vec![device("0"), device("0")], ContainerEdits::default());
        assert!(spec.validate().unwrap_err().contains("twice"));
        let mut empty = device("all");
        empty.container_edits = ContainerEdits::default();
        let spec = Spec::new(vec![empty], ContainerEdits::default());
        assert!(spec.validate().unwrap_err().contains("no container edits"));
        assert!(Spec::new(vec![], ContainerEdits::default())
            .validate()
            .unwrap_err()
            .contains("no devices"));
        let mut newest = Spec::new(vec![device("all")], ContainerEdits::default());
        newest.cdi_version = "1.1.0".into();
        assert_eq!(newest.validate(), Ok(()));
        newest.cdi_version = "1.2.0".into();
        assert!(newest
            .validate()
            .unwrap_err()
            .contains("unknown cdiVersion"));
    }
}
