//! Which `resource.k8s.io` version the cluster's API server serves, and which DRA features
//! its release has: the driver publishes in the newest version served (`v1` from Kubernetes
//! 1.34, `v1beta2` on 1.33, `v1beta1` on 1.32), as `k8s.io/dynamic-resource-allocation`'s
//! client falls back `v1` → `v1beta2` → `v1beta1` (`client/client.go`, v0.36.0), and leaves
//! out, with a log line, what the release cannot take.
//!
//! Devices are built in `v1`'s shape everywhere in the driver; [`ResourceApi::to_wire`] and
//! [`ResourceApi::from_wire`] convert at the API boundary (`v1beta2` has `v1`'s shape,
//! `v1beta1` wraps a device's fields in `basic`: `k8s.io/api/resource/v1beta1/types.go`).
//!
//! A feature's fields exist from the release its gate appeared in
//! (`pkg/features/kube_features.go`): device taints and partitionable devices from 1.33,
//! consumable capacity from 1.34, the last two on by default from 1.36. Partitionable
//! devices are published only in the form 1.35 and later require (counter sets in slices
//! of their own). Whether a gate is on cannot be asked: an API server with the gate off
//! drops the fields on write, which the publisher sees in what it gets back
//! ([`crate::slices::PublishOutcome::dropped`]).

use edgegpu_apiclient::{api_error, ApiServer};
use serde_json::{Map, Value};

/// A `resource.k8s.io` version the driver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceVersion {
    V1,
    V1beta2,
    V1beta1,
}

impl ResourceVersion {
    /// Newest first: the order the driver tries them in.
    pub const ALL: [ResourceVersion; 3] = [
        ResourceVersion::V1,
        ResourceVersion::V1beta2,
        ResourceVersion::V1beta1,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ResourceVersion::V1 => "v1",
            ResourceVersion::V1beta2 => "v1beta2",
            ResourceVersion::V1beta1 => "v1beta1",
        }
    }

    /// The oldest Kubernetes minor release serving it.
    fn first_minor(self) -> u32 {
        match self {
            ResourceVersion::V1 => 34,
            ResourceVersion::V1beta2 => 33,
            ResourceVersion::V1beta1 => 32,
        }
    }
}

/// A DRA feature that changes what the driver publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// `DRADeviceTaints`: the unhealthy taint.
    DeviceTaints,
    /// `DRAPartitionableDevices`: a MIG GPU published whole beside its MIG devices, with
    /// shared counters.
    PartitionableDevices,
    /// `DRAConsumableCapacity`: GPUs shared by memory size.
    ConsumableCapacity,
}

impl Feature {
    /// The feature gate's name.
    pub fn gate(self) -> &'static str {
        match self {
            Feature::DeviceTaints => "DRADeviceTaints",
            Feature::PartitionableDevices => "DRAPartitionableDevices",
            Feature::ConsumableCapacity => "DRAConsumableCapacity",
        }
    }

    /// The oldest minor release the driver uses it on.
    fn first_minor(self) -> u32 {
        match self {
            Feature::DeviceTaints => 33,
            Feature::ConsumableCapacity => 34,
            // 1.33 and 1.34 keep counters in the devices' slice; the driver writes 1.35's
            // form only.
            Feature::PartitionableDevices => 35,
        }
    }
}

/// The features the driver may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    pub device_taints: bool,
    pub partitionable_devices: bool,
    pub consumable_capacity: bool,
}

impl Features {
    /// Every feature (tests, and a cluster whose release is not known to lack one).
    pub const ALL: Features = Features {
        device_taints: true,
        partitionable_devices: true,
        consumable_capacity: true,
    };

    /// None: what the driver assumes until the API server has said what it serves (nothing
    /// that needs a feature is prepared before its slices are published).
    pub const NONE: Features = Features {
        device_taints: false,
        partitionable_devices: false,
        consumable_capacity: false,
    };

    pub fn has(&self, feature: Feature) -> bool {
        match feature {
            Feature::DeviceTaints => self.device_taints,
            Feature::PartitionableDevices => self.partitionable_devices,
            Feature::ConsumableCapacity => self.consumable_capacity,
        }
    }

    /// The same, without `feature`.
    pub fn without(mut self, feature: Feature) -> Features {
        match feature {
            Feature::DeviceTaints => self.device_taints = false,
            Feature::PartitionableDevices => self.partitionable_devices = false,
            Feature::ConsumableCapacity => self.consumable_capacity = false,
        }
        self
    }
}

/// What the cluster serves: the version the driver uses and the release's minor number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceApi {
    pub version: ResourceVersion,
    /// `1.<minor>` from `GET /version`; `None` when it did not say.
    pub minor: Option<u32>,
}

/// The API server serves no `resource.k8s.io` version the driver speaks.
#[derive(Debug, thiserror::Error)]
#[error("the API server serves no resource.k8s.io version the DRA driver speaks (v1, v1beta2, v1beta1; served: {}): DRA needs Kubernetes 1.32 or newer", if .served.is_empty() { "none".to_string() } else { .served.join(", ") })]
pub struct NoResourceApi {
    pub served: Vec<String>,
}

impl ResourceApi {
    /// The newest version the server serves (`GET /apis/resource.k8s.io`) and its release
    /// (`GET /version`; a server that does not answer it is taken as the oldest release
    /// serving that version).
    pub async fn discover(api: &ApiServer) -> anyhow::Result<ResourceApi> {
        let group = match api
            .get("/apis/resource.k8s.io", "discover resource.k8s.io")
            .await
        {
            Ok(g) => g,
            Err(e) if api_error(&e).is_some_and(|a| a.is_resource_not_served()) => {
                return Err(NoResourceApi { served: Vec::new() }.into())
            }
            Err(e) => return Err(e),
        };
        let served: Vec<String> = group
            .get("versions")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|v| v.get("version").and_then(Value::as_str))
            .map(str::to_string)
            .collect();
        let Some(version) = ResourceVersion::ALL
            .into_iter()
            .find(|v| served.iter().any(|s| s == v.as_str()))
        else {
            return Err(NoResourceApi { served }.into());
        };
        let minor = match api.get("/version", "get the server's version").await {
            Ok(v) => parse_minor(&v),
            Err(e) => {
                tracing::warn!("{e:#}: taking the API server for the oldest release serving resource.k8s.io/{}", version.as_str());
                None
            }
        };
        Ok(ResourceApi { version, minor })
    }

    /// The release, or the oldest one serving the version.
    pub fn effective_minor(&self) -> u32 {
        self.minor.unwrap_or(self.version.first_minor())
    }

    /// The features the release can take, each one left out logged (once per call).
    pub fn features(&self) -> Features {
        let minor = self.effective_minor();
        let mut features = Features::ALL;
        for feature in [
            Feature::DeviceTaints,
            Feature::PartitionableDevices,
            Feature::ConsumableCapacity,
        ] {
            if minor < feature.first_minor() {
                tracing::info!(
                    "Kubernetes 1.{minor} (resource.k8s.io/{}): {} is left out (it needs 1.{}+)",
                    self.version.as_str(),
                    feature.gate(),
                    feature.first_minor()
                );
                features = features.without(feature);
            }
        }
        features
    }

    /// `resource.k8s.io/<version>`.
    pub fn api_version(&self) -> String {
        format!("resource.k8s.io/{}", self.version.as_str())
    }

    /// The collection path of ResourceSlices (cluster-scoped).
    pub fn slices_path(&self) -> String {
        format!(
            "/apis/resource.k8s.io/{}/resourceslices",
            self.version.as_str()
        )
    }

    /// A device (in `v1`'s shape) as this version writes it.
    pub fn to_wire(&self, device: &Value) -> Value {
        if self.version != ResourceVersion::V1beta1 {
            return device.clone();
        }
        let mut out = Map::new();
        let mut basic = Map::new();
        for (k, v) in device.as_object().into_iter().flatten() {
            if k == "name" {
                out.insert(k.clone(), v.clone());
            } else {
                basic.insert(k.clone(), v.clone());
            }
        }
        out.insert("basic".into(), Value::Object(basic));
        Value::Object(out)
    }

    /// A device as this version reads, in `v1`'s shape.
    pub fn from_wire(&self, device: &Value) -> Value {
        if self.version != ResourceVersion::V1beta1 {
            return device.clone();
        }
        let mut out = Map::new();
        for (k, v) in device.as_object().into_iter().flatten() {
            match (k.as_str(), v.as_object()) {
                ("basic", Some(basic)) => {
                    out.extend(basic.iter().map(|(k, v)| (k.clone(), v.clone())))
                }
                _ => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        Value::Object(out)
    }
}

/// `1.<minor>` of a `/version` answer (`"minor": "36"`, or `"36+"` on some distributions).
fn parse_minor(version: &Value) -> Option<u32> {
    let minor = version.get("minor").and_then(Value::as_str)?;
    let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api(version: ResourceVersion, minor: Option<u32>) -> ResourceApi {
        ResourceApi { version, minor }
    }

    #[test]
    fn features_follow_the_release() {
        let f = api(ResourceVersion::V1beta1, Some(32)).features();
        assert!(!f.device_taints && !f.partitionable_devices && !f.consumable_capacity);
        let f = api(ResourceVersion::V1beta2, None).features();
        assert!(f.device_taints && !f.consumable_capacity);
        let f = api(ResourceVersion::V1, Some(34)).features();
        assert!(f.consumable_capacity && !f.partitionable_devices);
        assert_eq!(api(ResourceVersion::V1, Some(36)).features(), Features::ALL);
    }

    #[test]
    fn minor_versions_parse() {
        assert_eq!(parse_minor(&json!({"minor": "36"})), Some(36));
        assert_eq!(parse_minor(&json!({"minor": "33+"})), Some(33));
        assert_eq!(parse_minor(&json!({"major": "1"})), None);
    }

    #[test]
    fn v1beta1_devices_are_wrapped() {
        let v1b1 = api(ResourceVersion::V1beta1, Some(32));
        let d = json!({"name": "gpu-0", "attributes": {"type": {"string": "gpu"}},
            "capacity": {"memory": {"value": "8Gi"}}});
        let wire = v1b1.to_wire(&d);
        assert_eq!(
            wire,
            json!({"name": "gpu-0", "basic": {"attributes": {"type": {"string": "gpu"}},
                "capacity": {"memory": {"value": "8Gi"}}}})
        );
        assert_eq!(v1b1.from_wire(&wire), d);
        let v1 = api(ResourceVersion::V1, Some(36));
        assert_eq!(v1.to_wire(&d), d);
        assert_eq!(v1.slices_path(), "/apis/resource.k8s.io/v1/resourceslices");
    }
}
