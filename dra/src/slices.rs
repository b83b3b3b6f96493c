//! Publishing this node's devices as ResourceSlices (`resource.k8s.io/v1`), as
//! `k8s.io/dynamic-resource-allocation/resourceslice` does: one pool named after the node,
//! owned by the Node object, split into slices of at most 128 devices, generation bumped on
//! every change, stale slices deleted; only this node's slices are ever touched.
//!
//! Follows `resourceslice/resourceslicecontroller.go` of k8s.io/dynamic-resource-allocation
//! v0.36.0 (`syncPool`): slices are named through `metadata.generateName`
//! `<index, 5+ hex digits>-<driver>-<node>-`, so that their names sort in the order of the
//! pool (the allocator is first-fit in that order); an existing slice is matched to its place
//! by that index; slices of an older generation, with an index out of range or a name of
//! another scheme are deleted (with the `uid` and `resourceVersion` as preconditions); the
//! owner is the Node (`controller: true`), whose UID is looked up once.
//!
//! One deliberate difference: upstream keeps the generation when at most one slice needs an
//! update; here every change bumps it, as `k8s.io/api/resource/v1/types.go` (v0.36.0,
//! `ResourcePool.Generation`) words the contract ("whenever a driver changes something about
//! one or more of the resources in a pool, it must change the generation in all
//! ResourceSlices"). It costs one update per other slice, on nodes with more than 128
//! devices only.
//!
//! Only `resource.k8s.io/v1` (Kubernetes 1.34+): an older API server is reported as such
//! rather than served a converted beta object (v1beta1's devices have another shape).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use edgegpu_apiclient::{api_error, ApiServer, ListOptions};
use serde_json::{json, Value};

/// The collection path of `resource.k8s.io/v1` ResourceSlices (cluster-scoped).
pub const SLICES_PATH: &str = "/apis/resource.k8s.io/v1/resourceslices";
/// `ResourceSliceMaxDevices` (k8s.io/api/resource/v1/types.go, v0.36.0).
pub const MAX_DEVICES: usize = 128;
/// `ResourceSliceMaxDevicesWithAdvancedFeatures`: the limit when a device of the slice has
/// taints, consumes counters or has list-typed attributes.
pub const MAX_DEVICES_ADVANCED: usize = 64;
/// Shortest hex index at the start of a slice name (`resourceSliceIndexMinLength`).
const INDEX_MIN_LEN: usize = 5;

/// What one [`SlicePublisher::publish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishOutcome {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    pub unchanged: usize,
    /// The pool's generation now.
    pub generation: i64,
}

/// What this publisher last wrote to a slice: the `resourceVersion` the server answered with
/// and the devices it was sent. While the stored slice still has that version, the desired
/// devices are compared with what was sent, so that a server normalising a field (a quantity
/// such as `1024Mi` stored as `1Gi`) cannot make every publish write again.
#[derive(Debug, Clone)]
struct Written {
    resource_version: String,
    devices: Vec<Value>,
}

/// Keeps the node's ResourceSlices equal to the devices it is given.
pub struct SlicePublisher {
    api: Arc<ApiServer>,
    driver: String,
    node: String,
    node_uid: Option<String>,
    written: HashMap<String, Written>,
}

/// Splits `devices` (in order) into the slices of one pool: at most [`MAX_DEVICES`] each, or
/// [`MAX_DEVICES_ADVANCED`] for a slice with a device that uses taints, counters or list
/// attributes. No device gives one empty slice: an empty pool shows that the driver runs.
pub fn split_devices(devices: Vec<Value>) -> Vec<Vec<Value>> {
    let mut slices = vec![Vec::new()];
    let mut advanced = false;
    for device in devices {
        let this_advanced = uses_advanced_features(&device);
        let current = slices.last_mut().expect("never empty");
        let limit = if advanced || this_advanced {
            MAX_DEVICES_ADVANCED
        } else {
            MAX_DEVICES
        };
        if current.len() + 1 > limit {
            slices.push(vec![device]);
            advanced = this_advanced;
        } else {
            current.push(device);
            advanced |= this_advanced;
        }
    }
    slices
}

/// Whether a device counts against the lower per-slice limit.
fn uses_advanced_features(device: &Value) -> bool {
    let non_empty = |key: &str| {
        device
            .get(key)
            .is_some_and(|v| v.as_array().map_or(!v.is_null(), |a| !a.is_empty()))
    };
    let list_attribute = device
        .get("attributes")
        .and_then(Value::as_object)
        .is_some_and(|attrs| {
            attrs.values().any(|a| {
                ["ints", "bools", "strings", "versions"]
                    .iter()
                    .any(|k| a.get(k).is_some())
            })
        });
    non_empty("taints") || non_empty("consumesCounters") || list_attribute
}

/// `<index>-<driver>-<node>-`: the `generateName` of slice `index` of a pool of `count`.
pub fn generate_name(index: usize, count: usize, driver: &str, node: &str) -> String {
    format!(
        "{:0width$x}-{driver}-{node}-",
        index,
        width = index_len(count)
    )
}

/// Hex digits of the index in the names of a pool of `count` slices.
fn index_len(count: usize) -> usize {
    let highest = count.saturating_sub(1);
    format!("{highest:x}").len().max(INDEX_MIN_LEN)
}

/// The index a slice's name starts with, if it follows [`generate_name`] for a pool of
/// `count` slices.
fn decode_index(name: &str, count: usize) -> Option<usize> {
    let (prefix, _) = name.split_once('-')?;
    if prefix.len() != index_len(count) {
        return None;
    }
    usize::from_str_radix(prefix, 16).ok()
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn devices_of(slice: &Value) -> &[Value] {
    slice
        .pointer("/spec/devices")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

impl SlicePublisher {
    pub fn new(api: Arc<ApiServer>, driver: &str, node: &str) -> Self {
        SlicePublisher {
            api,
            driver: driver.to_string(),
            node: node.to_string(),
            node_uid: None,
            written: HashMap::new(),
        }
    }

    /// Makes the API server's slices of this driver and node hold exactly `devices` (each a
    /// `resource.k8s.io/v1` `Device` object as JSON), changing only what differs.
    pub async fn publish(&mut self, devices: Vec<Value>) -> anyhow::Result<PublishOutcome> {
        let desired = split_devices(devices);
        let mut outcome = PublishOutcome::default();
        match self.sync(&desired, &mut outcome).await {
            Ok(()) => Ok(outcome),
            // Someone else changed or deleted one of the slices between the list and the
            // write (another instance of the driver during a rolling update, the kubelet
            // wiping the node's slices): list again and redo it, once.
            Err(e) if api_error(&e).is_some_and(|a| a.is_conflict()) => {
                tracing::info!("{e:#}; listing the ResourceSlices again");
                outcome.unchanged = 0;
                self.sync(&desired, &mut outcome).await?;
                Ok(outcome)
            }
            Err(e) => Err(e),
        }
    }

    /// The Node's UID, looked up once (the owner reference needs it).
    async fn node_uid(&mut self) -> anyhow::Result<String> {
        if let Some(uid) = &self.node_uid {
            return Ok(uid.clone());
        }
        let node = self
            .api
            .get(
                &format!("/api/v1/nodes/{}", self.node),
                &format!("get node {}", self.node),
            )
            .await?;
        let uid = str_at(&node, "/metadata/uid");
        anyhow::ensure!(!uid.is_empty(), "node {} has no metadata.uid", self.node);
        self.node_uid = Some(uid.to_string());
        Ok(uid.to_string())
    }

    /// This driver's slices of this node, as the server has them.
    async fn list(&self) -> anyhow::Result<Vec<Value>> {
        let options = ListOptions {
            field_selector: Some(format!(
                "spec.nodeName={},spec.driver={}",
                self.node, self.driver
            )),
            label_selector: None,
        };
        let list = match self
            .api
            .list(SLICES_PATH, &options, "list resourceslices")
            .await
        {
            Err(e) if api_error(&e).is_some_and(|a| a.is_resource_not_served()) => {
                return Err(e.context(
                    "the API server does not serve resource.k8s.io/v1 ResourceSlices: \
                     the DRA driver needs Kubernetes 1.34 or newer",
                ))
            }
            other => other?,
        };
        let items = list
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // The field selector is the server's; do not trust a server (or a proxy) that
        // ignores it with another node's or driver's slices.
        Ok(items
            .into_iter()
            .filter(|s| {
                str_at(s, "/spec/nodeName") == self.node && str_at(s, "/spec/driver") == self.driver
            })
            .collect())
    }

    /// Whether stored slice `current` already holds `devices`.
    fn holds(&self, current: &Value, devices: &[Value]) -> bool {
        let name = str_at(current, "/metadata/name");
        match self.written.get(name) {
            Some(w) if w.resource_version == str_at(current, "/metadata/resourceVersion") => {
                w.devices == devices
            }
            _ => devices_of(current) == devices,
        }
    }

    fn remember(&mut self, stored: &Value, devices: &[Value]) {
        let name = str_at(stored, "/metadata/name").to_string();
        let resource_version = str_at(stored, "/metadata/resourceVersion").to_string();
        self.written.insert(
            name,
            Written {
                resource_version,
                devices: devices.to_vec(),
            },
        );
    }

    fn spec(&self, pool: &Value, devices: &[Value]) -> Value {
        let mut spec = json!({
            "driver": self.driver,
            "pool": pool,
            "nodeName": self.node,
        });
        if !devices.is_empty() {
            spec["devices"] = Value::Array(devices.to_vec());
        }
        spec
    }

    /// One pass of `syncPool`: list, compare, delete, update, create.
    async fn sync(
        &mut self,
        desired: &[Vec<Value>],
        outcome: &mut PublishOutcome,
    ) -> anyhow::Result<()> {
        let count = desired.len();
        let existing = self.list().await?;
        let in_pool = |s: &Value| str_at(s, "/spec/pool/name") == self.node;
        let generation = existing
            .iter()
            .filter(|s| in_pool(s))
            .filter_map(|s| s.pointer("/spec/pool/generation").and_then(Value::as_i64))
            .max()
            .unwrap_or(0);

        let mut matched: Vec<Option<Value>> = vec![None; count];
        let mut obsolete = Vec::new();
        for slice in existing {
            let current_generation = slice
                .pointer("/spec/pool/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let index = decode_index(str_at(&slice, "/metadata/name"), count);
            match index {
                Some(i)
                    if in_pool(&slice)
                        && current_generation == generation
                        && i < count
                        && matched[i].is_none() =>
                {
                    matched[i] = Some(slice)
                }
                _ => obsolete.push(slice),
            }
        }

        let pool_at = |generation: i64| json!({"name": self.node, "generation": generation, "resourceSliceCount": count});
        let current_pool = pool_at(generation);
        let changed = matched
            .iter()
            .zip(desired)
            .filter(|(slice, devices)| {
                slice.as_ref().is_some_and(|s| {
                    s.pointer("/spec/pool") != Some(&current_pool) || !self.holds(s, devices)
                })
            })
            .count();
        let new = matched.iter().filter(|s| s.is_none()).count();
        let bumped = new > 0 || changed > 0;
        let generation = if bumped { generation + 1 } else { generation };
        outcome.generation = generation;
        let pool = pool_at(generation);

        // Obsolete slices first: devices the node no longer has must go even if publishing
        // the new ones fails.
        for slice in &obsolete {
            let name = str_at(slice, "/metadata/name");
            let what = format!("delete resourceslice {name}");
            let result = self
                .api
                .delete(
                    &format!("{SLICES_PATH}/{name}"),
                    Some((
                        str_at(slice, "/metadata/uid"),
                        str_at(slice, "/metadata/resourceVersion"),
                    )),
                    &what,
                )
                .await;
            match result {
                Ok(()) => outcome.deleted += 1,
                Err(e) if api_error(&e).is_some_and(|a| a.is_object_not_found()) => {}
                Err(e) => return Err(e),
            }
            self.written.remove(name);
        }

        for (slice, devices) in matched.iter().zip(desired) {
            let Some(current) = slice else { continue };
            if !bumped {
                outcome.unchanged += 1;
                continue;
            }
            let name = str_at(current, "/metadata/name").to_string();
            let mut object = current.clone();
            object["spec"] = self.spec(&pool, devices);
            let stored = self
                .api
                .replace(
                    &format!("{SLICES_PATH}/{name}"),
                    &object,
                    &format!("update resourceslice {name}"),
                )
                .await?;
            self.remember(&stored, devices);
            outcome.updated += 1;
        }

        if new > 0 {
            let uid = self.node_uid().await?;
            for (index, devices) in desired.iter().enumerate() {
                if matched[index].is_some() {
                    continue;
                }
                let generate_name = generate_name(index, count, &self.driver, &self.node);
                let object = json!({
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {
                        "generateName": generate_name,
                        "ownerReferences": [{
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": self.node,
                            "uid": uid,
                            "controller": true,
                        }],
                    },
                    "spec": self.spec(&pool, devices),
                });
                let stored = self
                    .api
                    .create(
                        SLICES_PATH,
                        &object,
                        &format!("create resourceslice {generate_name}"),
                    )
                    .await
                    .context("publishing the node's devices")?;
                self.remember(&stored, devices);
                outcome.created += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(i: usize) -> Value {
        json!({"name": format!("gpu-{i}")})
    }

    #[test]
    fn splits_at_128_or_64() {
        assert_eq!(split_devices(vec![]).len(), 1);
        let sizes = |v: Vec<Vec<Value>>| v.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(split_devices((0..128).map(plain).collect())), [128]);
        assert_eq!(
            sizes(split_devices((0..130).map(plain).collect())),
            [128, 2]
        );
        let mut devices: Vec<Value> = (0..100).map(plain).collect();
        devices[70] = json!({"name": "t", "taints": [{"key": "k", "effect": "NoSchedule"}]});
        assert_eq!(sizes(split_devices(devices)), [70, 30]);
        let list = json!({"name": "l", "attributes": {"x": {"ints": [1]}}});
        assert!(uses_advanced_features(&list));
        assert!(!uses_advanced_features(&json!({"name": "a", "taints": []})));
    }

    #[test]
    fn names_sort_in_pool_order() {
        assert_eq!(
            generate_name(1, 2, "edgegpu.io", "node-a"),
            "00001-edgegpu.io-node-a-"
        );
        assert_eq!(generate_name(0x12345, 0x12346, "d", "n"), "12345-d-n-");
        assert_eq!(generate_name(3, 0x100001, "d", "n"), "000003-d-n-");
        assert_eq!(decode_index("00001-edgegpu.io-node-a-x7k2q", 2), Some(1));
        assert_eq!(decode_index("node-a-edgegpu.io-x7k2q", 2), None);
        assert_eq!(decode_index("000001-d-n-abcde", 2), None);
    }
}
