//! Publishing this node's devices as ResourceSlices, as
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
//! The pool's shared counters (partitionable devices) go into slices of their own after the
//! devices' slices, at most 8 counter sets each, as Kubernetes 1.35 and later require (a
//! slice holds devices or counter sets, not both). Slices are written in the version the
//! server serves ([`ResourceApi`]); everything here works on `v1`'s shape.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use edgegpu_apiclient::{api_error, ApiServer, ListOptions};
use serde_json::{json, Map, Value};

use crate::api_versions::{Feature, Features, ResourceApi};

/// `ResourceSliceMaxDevices` (k8s.io/api/resource/v1/types.go, v0.36.0).
pub const MAX_DEVICES: usize = 128;
/// `ResourceSliceMaxDevicesWithAdvancedFeatures`: the limit when a device of the slice has
/// taints, consumes counters or has list-typed attributes.
pub const MAX_DEVICES_ADVANCED: usize = 64;
/// `ResourceSliceMaxCounterSets`: counter sets in one slice.
pub const MAX_COUNTER_SETS: usize = 8;
/// Shortest hex index at the start of a slice name (`resourceSliceIndexMinLength`).
const INDEX_MIN_LEN: usize = 5;

/// What the node's pool holds: its devices (in order) and the counter sets they consume
/// from, each a `v1` `Device` / `CounterSet` object as JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolContent {
    pub devices: Vec<Value>,
    pub counter_sets: Vec<Value>,
}

impl From<Vec<Value>> for PoolContent {
    /// Devices without counter sets.
    fn from(devices: Vec<Value>) -> Self {
        PoolContent {
            devices,
            counter_sets: Vec::new(),
        }
    }
}

/// What one [`SlicePublisher::publish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishOutcome {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    pub unchanged: usize,
    /// The pool's generation now.
    pub generation: i64,
    /// Features whose fields the server dropped from what was written (its gate is off).
    pub dropped: Vec<Feature>,
}

/// What this publisher last wrote to a slice: the `resourceVersion` the server answered with
/// and the content it was sent. While the stored slice still has that version, the desired
/// content is compared with what was sent, so that a server normalising a field (a quantity
/// such as `1024Mi` stored as `1Gi`) or dropping one (a gate that is off) cannot make every
/// publish write again.
#[derive(Debug, Clone)]
struct Written {
    resource_version: String,
    content: Value,
}

/// Keeps the node's ResourceSlices equal to the devices it is given.
pub struct SlicePublisher {
    api: Arc<ApiServer>,
    resources: ResourceApi,
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

/// The content of each slice of the pool: `{"devices": [...]}` for the devices
/// ([`split_devices`]), then `{"sharedCounters": [...]}` with at most [`MAX_COUNTER_SETS`]
/// counter sets each.
pub fn split_pool(content: PoolContent) -> Vec<Value> {
    let mut slices: Vec<Value> = split_devices(content.devices)
        .into_iter()
        .map(|devices| {
            if devices.is_empty() {
                json!({})
            } else {
                json!({ "devices": devices })
            }
        })
        .collect();
    for sets in content.counter_sets.chunks(MAX_COUNTER_SETS) {
        slices.push(json!({ "sharedCounters": sets }));
    }
    slices
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

/// What a stored slice holds (its `devices` and `sharedCounters`), as [`split_pool`] gives it.
fn content_of(slice: &Value) -> Value {
    let mut content = Map::new();
    for key in ["devices", "sharedCounters"] {
        if let Some(v) = slice
            .pointer(&format!("/spec/{key}"))
            .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        {
            content.insert(key.into(), v.clone());
        }
    }
    Value::Object(content)
}

/// The features whose fields are in `sent` (a slice's content) but not in `stored`.
fn dropped_features(sent: &Value, stored: &Value) -> Vec<Feature> {
    let mut dropped = Vec::new();
    let devices = |c: &Value| -> Vec<Value> {
        c.get("devices")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (sent_devices, stored_devices) = (devices(sent), devices(stored));
    let lost = |key: &str| {
        sent_devices.iter().any(|d| {
            let name = d.get("name");
            d.get(key).is_some()
                && !stored_devices
                    .iter()
                    .any(|s| s.get("name") == name && s.get(key).is_some())
        })
    };
    if lost("taints") {
        dropped.push(Feature::DeviceTaints);
    }
    if lost("consumesCounters")
        || (sent.get("sharedCounters").is_some() && stored.get("sharedCounters").is_none())
    {
        dropped.push(Feature::PartitionableDevices);
    }
    if lost("allowMultipleAllocations") {
        dropped.push(Feature::ConsumableCapacity);
    }
    dropped
}

impl SlicePublisher {
    pub fn new(api: Arc<ApiServer>, resources: ResourceApi, driver: &str, node: &str) -> Self {
        SlicePublisher {
            api,
            resources,
            driver: driver.to_string(),
            node: node.to_string(),
            node_uid: None,
            written: HashMap::new(),
        }
    }

    /// Makes the API server's slices of this driver and node hold exactly `content`,
    /// changing only what differs.
    pub async fn publish(
        &mut self,
        content: impl Into<PoolContent>,
    ) -> anyhow::Result<PublishOutcome> {
        let desired = split_pool(content.into());
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

    /// Publishes `content(features)`, and publishes again without each feature whose fields
    /// the server dropped (its gate is off), until the server keeps what it is sent; returns
    /// the last outcome and the features the pool is published under.
    pub async fn publish_within(
        &mut self,
        mut features: Features,
        content: impl Fn(Features) -> PoolContent,
    ) -> anyhow::Result<(PublishOutcome, Features)> {
        loop {
            let outcome = self.publish(content(features)).await?;
            let narrowed = outcome
                .dropped
                .iter()
                .fold(features, |f, dropped| f.without(*dropped));
            if narrowed == features {
                return Ok((outcome, features));
            }
            for dropped in &outcome.dropped {
                tracing::warn!(
                    "the API server dropped the fields of {} (the feature gate is off): \
                     publishing without them",
                    dropped.gate()
                );
            }
            features = narrowed;
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
            .list(
                &self.resources.slices_path(),
                &options,
                "list resourceslices",
            )
            .await
        {
            Err(e) if api_error(&e).is_some_and(|a| a.is_resource_not_served()) => {
                return Err(e.context(format!(
                    "the API server no longer serves {} ResourceSlices (upgraded or \
                     downgraded?): the driver looks again when it restarts",
                    self.resources.api_version()
                )))
            }
            other => other?,
        };
        let items: Vec<Value> = list
            .get("items")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|s| self.in_v1_shape(s))
            .collect();
        // The field selector is the server's; do not trust a server (or a proxy) that
        // ignores it with another node's or driver's slices.
        Ok(items
            .into_iter()
            .filter(|s| {
                str_at(s, "/spec/nodeName") == self.node && str_at(s, "/spec/driver") == self.driver
            })
            .collect())
    }

    /// A slice as the server has it, its devices in `v1`'s shape.
    fn in_v1_shape(&self, slice: &Value) -> Value {
        let mut slice = slice.clone();
        if let Some(devices) = slice
            .pointer_mut("/spec/devices")
            .and_then(Value::as_array_mut)
        {
            for d in devices.iter_mut() {
                *d = self.resources.from_wire(d);
            }
        }
        slice
    }

    /// Whether stored slice `current` already holds `content`.
    fn holds(&self, current: &Value, content: &Value) -> bool {
        let name = str_at(current, "/metadata/name");
        match self.written.get(name) {
            Some(w) if w.resource_version == str_at(current, "/metadata/resourceVersion") => {
                &w.content == content
            }
            _ => &content_of(current) == content,
        }
    }

    /// Records what was written to a slice; the features whose fields the server dropped.
    fn remember(&mut self, stored: &Value, content: &Value) -> Vec<Feature> {
        let stored = self.in_v1_shape(stored);
        let name = str_at(&stored, "/metadata/name").to_string();
        let resource_version = str_at(&stored, "/metadata/resourceVersion").to_string();
        self.written.insert(
            name,
            Written {
                resource_version,
                content: content.clone(),
            },
        );
        dropped_features(content, &content_of(&stored))
    }

    fn spec(&self, pool: &Value, content: &Value) -> Value {
        let mut spec = json!({
            "driver": self.driver,
            "pool": pool,
            "nodeName": self.node,
        });
        if let Some(devices) = content.get("devices").and_then(Value::as_array) {
            let wire: Vec<Value> = devices.iter().map(|d| self.resources.to_wire(d)).collect();
            spec["devices"] = Value::Array(wire);
        }
        if let Some(sets) = content.get("sharedCounters") {
            spec["sharedCounters"] = sets.clone();
        }
        spec
    }

    /// One pass of `syncPool`: list, compare, delete, update, create.
    async fn sync(
        &mut self,
        desired: &[Value],
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
            .filter(|(slice, content)| {
                slice.as_ref().is_some_and(|s| {
                    s.pointer("/spec/pool") != Some(&current_pool) || !self.holds(s, content)
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
                    &format!("{}/{name}", self.resources.slices_path()),
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

        for (slice, content) in matched.iter().zip(desired) {
            let Some(current) = slice else { continue };
            if !bumped {
                outcome.unchanged += 1;
                continue;
            }
            let name = str_at(current, "/metadata/name").to_string();
            let mut object = current.clone();
            object["apiVersion"] = Value::String(self.resources.api_version());
            object["kind"] = json!("ResourceSlice");
            object["spec"] = self.spec(&pool, content);
            let stored = self
                .api
                .replace(
                    &format!("{}/{name}", self.resources.slices_path()),
                    &object,
                    &format!("update resourceslice {name}"),
                )
                .await?;
            let dropped = self.remember(&stored, content);
            add_dropped(outcome, dropped);
            outcome.updated += 1;
        }

        if new > 0 {
            let uid = self.node_uid().await?;
            for (index, content) in desired.iter().enumerate() {
                if matched[index].is_some() {
                    continue;
                }
                let generate_name = generate_name(index, count, &self.driver, &self.node);
                let object = json!({
                    "apiVersion": self.resources.api_version(),
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
                    "spec": self.spec(&pool, content),
                });
                let stored = self
                    .api
                    .create(
                        &self.resources.slices_path(),
                        &object,
                        &format!("create resourceslice {generate_name}"),
                    )
                    .await
                    .context("publishing the node's devices")?;
                let dropped = self.remember(&stored, content);
                add_dropped(outcome, dropped);
                outcome.created += 1;
            }
        }
        Ok(())
    }
}

fn add_dropped(outcome: &mut PublishOutcome, dropped: Vec<Feature>) {
    for f in dropped {
        if !outcome.dropped.contains(&f) {
            outcome.dropped.push(f);
        }
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
