//! Which Kubernetes release the fake API server acts as for `resource.k8s.io`: the versions
//! it serves, its DRA feature gates, and what the real server does with a field whose gate
//! is off or that its version does not have: it drops the field on create and update
//! (`dropDisabledFields` in `pkg/registry/resource/resourceslice/strategy.go`; a field the
//! version's schema lacks is dropped by the decoder, with a warning, under the default
//! `fieldValidation=Warn`).
//!
//! Stages of the gates (kubernetes `pkg/features/kube_features.go`):
//! `DRADeviceTaints` alpha 1.33, `DRAPartitionableDevices` alpha 1.33, `DRAConsumableCapacity`
//! alpha 1.34, all three on by default from 1.36. Versions: `v1beta1` from 1.32, `v1beta2`
//! from 1.33, `v1` from 1.34. From 1.35 a slice holds either devices or shared counters,
//! not both.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A DRA feature gate the fake knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    /// `DRADeviceTaints`: `devices[].taints`.
    DeviceTaints,
    /// `DRAPartitionableDevices`: `spec.sharedCounters`, `devices[].consumesCounters`.
    PartitionableDevices,
    /// `DRAConsumableCapacity`: `devices[].allowMultipleAllocations`,
    /// `capacity.*.requestPolicy`.
    ConsumableCapacity,
}

impl Gate {
    pub fn name(self) -> &'static str {
        match self {
            Gate::DeviceTaints => "DRADeviceTaints",
            Gate::PartitionableDevices => "DRAPartitionableDevices",
            Gate::ConsumableCapacity => "DRAConsumableCapacity",
        }
    }

    /// The minor release the gate (and its fields) appeared in.
    fn introduced(self) -> u32 {
        match self {
            Gate::DeviceTaints | Gate::PartitionableDevices => 33,
            Gate::ConsumableCapacity => 34,
        }
    }
}

/// A Kubernetes 1.x release as far as `resource.k8s.io` goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub minor: u32,
    /// Gates set on the command line; the others have the release's default.
    gates: BTreeMap<Gate, bool>,
}

impl Default for Release {
    /// 1.36 with its defaults (every gate above on).
    fn default() -> Self {
        Release::kubernetes(36)
    }
}

impl Release {
    /// Kubernetes `1.<minor>` with its default gates.
    pub fn kubernetes(minor: u32) -> Release {
        Release {
            minor,
            gates: BTreeMap::new(),
        }
    }

    /// `--feature-gates=<gate>=<on>` (a gate the release does not have stays off).
    pub fn with_gate(mut self, gate: Gate, on: bool) -> Release {
        self.gates.insert(gate, on);
        self
    }

    /// Whether the gate's fields are kept.
    pub fn enabled(&self, gate: Gate) -> bool {
        self.minor >= gate.introduced() && *self.gates.get(&gate).unwrap_or(&(self.minor >= 36))
    }

    /// The `resource.k8s.io` versions served, newest first.
    pub fn served(&self) -> Vec<&'static str> {
        let mut versions = Vec::new();
        if self.minor >= 34 {
            versions.push("v1");
        }
        if self.minor >= 33 {
            versions.push("v1beta2");
        }
        if self.minor >= 32 {
            versions.push("v1beta1");
        }
        versions
    }

    /// `GET /version`.
    pub fn version_object(&self) -> Value {
        serde_json::json!({
            "major": "1",
            "minor": self.minor.to_string(),
            "gitVersion": format!("v1.{}.0", self.minor),
            "platform": "linux/amd64",
        })
    }

    /// Drops from a slice's `spec` (stored form, as `v1`) what this release does not keep;
    /// returns the dropped fields' paths (what the real server would warn about).
    pub fn drop_disabled(&self, spec: &mut Value) -> Vec<String> {
        let mut dropped = Vec::new();
        let partitionable = self.enabled(Gate::PartitionableDevices);
        if !partitionable {
            if let Some(map) = spec.as_object_mut() {
                if map.remove("sharedCounters").is_some() {
                    dropped.push("spec.sharedCounters".to_string());
                }
            }
        }
        let Some(devices) = spec.get_mut("devices").and_then(Value::as_array_mut) else {
            return dropped;
        };
        for (i, device) in devices.iter_mut().enumerate() {
            let Some(d) = device.as_object_mut() else {
                continue;
            };
            let mut remove = |key: &str, gate: Gate, d: &mut Map<String, Value>| {
                if !self.enabled(gate) && d.remove(key).is_some() {
                    dropped.push(format!("spec.devices[{i}].{key}"));
                }
            };
            remove("taints", Gate::DeviceTaints, d);
            remove("consumesCounters", Gate::PartitionableDevices, d);
            remove("allowMultipleAllocations", Gate::ConsumableCapacity, d);
            if !self.enabled(Gate::ConsumableCapacity) {
                if let Some(capacity) = d.get_mut("capacity").and_then(Value::as_object_mut) {
                    for (name, c) in capacity.iter_mut() {
                        if let Some(c) = c.as_object_mut() {
                            if c.remove("requestPolicy").is_some() {
                                dropped.push(format!(
                                    "spec.devices[{i}].capacity[{name}].requestPolicy"
                                ));
                            }
                        }
                    }
                }
            }
        }
        dropped
    }

    /// What this release's validation refuses beyond the common checks.
    pub fn validate(&self, spec: &Value) -> Vec<String> {
        let mut causes = Vec::new();
        let devices = spec
            .get("devices")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let counters = spec.get("sharedCounters").and_then(Value::as_array);
        if self.minor >= 35 && devices > 0 && counters.is_some_and(|c| !c.is_empty()) {
            causes.push(
                "spec: Invalid value: only one of `devices` and `sharedCounters` may be set"
                    .to_string(),
            );
        }
        if let Some(sets) = counters {
            if sets.len() > 8 {
                causes.push(format!(
                    "spec.sharedCounters: Too many: {}: must have at most 8 items",
                    sets.len()
                ));
            }
            for (i, set) in sets.iter().enumerate() {
                let n = set
                    .get("counters")
                    .and_then(Value::as_object)
                    .map_or(0, Map::len);
                if n > 32 {
                    causes.push(format!(
                        "spec.sharedCounters[{i}].counters: Too many: {n}: must have at most 32 items"
                    ));
                }
            }
        }
        causes
    }
}

/// A `v1beta1` device (`{name, basic: {…}}`) in the stored (`v1`) shape; a device without
/// `basic` keeps its name only, as the decoder drops the fields `v1beta1` does not have.
pub fn device_from_v1beta1(device: &Value) -> Value {
    let mut out = Map::new();
    if let Some(name) = device.get("name") {
        out.insert("name".into(), name.clone());
    }
    if let Some(basic) = device.get("basic").and_then(Value::as_object) {
        for (k, v) in basic {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// A stored device in `v1beta1`'s shape.
pub fn device_to_v1beta1(device: &Value) -> Value {
    let mut basic = Map::new();
    let mut out = Map::new();
    if let Some(map) = device.as_object() {
        for (k, v) in map {
            if k == "name" {
                out.insert(k.clone(), v.clone());
            } else {
                basic.insert(k.clone(), v.clone());
            }
        }
    }
    out.insert("basic".into(), Value::Object(basic));
    Value::Object(out)
}

/// Applies `convert` to every device of a slice's `spec`.
pub fn map_devices(slice: &mut Value, convert: fn(&Value) -> Value) {
    if let Some(devices) = slice
        .pointer_mut("/spec/devices")
        .and_then(Value::as_array_mut)
    {
        for d in devices.iter_mut() {
            *d = convert(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_and_gates_follow_the_release() {
        assert_eq!(Release::kubernetes(32).served(), ["v1beta1"]);
        assert_eq!(Release::kubernetes(33).served(), ["v1beta2", "v1beta1"]);
        assert_eq!(Release::kubernetes(36).served()[0], "v1");
        assert!(Release::kubernetes(31).served().is_empty());
        let r35 = Release::kubernetes(35);
        assert!(!r35.enabled(Gate::ConsumableCapacity));
        assert!(r35
            .clone()
            .with_gate(Gate::ConsumableCapacity, true)
            .enabled(Gate::ConsumableCapacity));
        // A gate the release does not have stays off.
        assert!(!Release::kubernetes(33)
            .with_gate(Gate::ConsumableCapacity, true)
            .enabled(Gate::ConsumableCapacity));
        assert!(Release::kubernetes(36).enabled(Gate::PartitionableDevices));
    }

    #[test]
    fn disabled_fields_are_dropped() {
        let mut spec = json!({"sharedCounters": [{"name": "c", "counters": {}}],
            "devices": [{"name": "gpu-0", "allowMultipleAllocations": true,
                "consumesCounters": [], "capacity": {"memory": {"value": "1Gi",
                "requestPolicy": {"default": "1Gi"}}}}]});
        let dropped = Release::kubernetes(34).drop_disabled(&mut spec);
        assert_eq!(dropped.len(), 4, "{dropped:?}");
        assert_eq!(
            spec,
            json!({"devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "1Gi"}}}]})
        );
    }

    #[test]
    fn v1beta1_wraps_devices_in_basic() {
        let d = json!({"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}});
        let wire = device_to_v1beta1(&d);
        assert_eq!(wire["basic"]["attributes"]["type"]["string"], "gpu");
        assert_eq!(device_from_v1beta1(&wire), d);
        assert_eq!(
            device_from_v1beta1(&d),
            json!({"name": "gpu-0"}),
            "v1 fields are not v1beta1's"
        );
    }
}
