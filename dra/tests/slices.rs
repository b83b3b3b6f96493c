//! `SlicePublisher` against the fake API server: what is created, updated and deleted, and
//! that every slice it produces is valid under the real `resource.k8s.io/v1` schema.

use crate::api_common;

use std::path::PathBuf;
use std::process::Command;

use api_common::{
    client, gpu, jetson_devices, kubernetes_validate, mig_node_devices, NODE, OTHER_NODE,
};
use edgegpu_dra::api_versions::{ResourceApi, ResourceVersion};
use edgegpu_dra::slices::{PublishOutcome, SlicePublisher};
use edgegpu_dra::DRIVER_NAME;
use edgegpu_testkit::apiserver::FakeApiServer;
use serde_json::{json, Value};

/// A Kubernetes 1.36 API server, the fake's default.
const CURRENT: ResourceApi = ResourceApi {
    version: ResourceVersion::V1,
    minor: Some(36),
};

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The slices of this driver and node, in name order.
fn own_slices(api: &FakeApiServer) -> Vec<Value> {
    api.slices()
        .into_iter()
        .filter(|s| str_at(s, "/spec/nodeName") == NODE && str_at(s, "/spec/driver") == DRIVER_NAME)
        .collect()
}

fn writes(api: &FakeApiServer) -> Vec<(String, String)> {
    api.requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| (r.method, r.path))
        .collect()
}

async fn publisher() -> (FakeApiServer, SlicePublisher) {
    let api = FakeApiServer::start(NODE, &[]).await;
    let publisher = SlicePublisher::new(client(&api), CURRENT, DRIVER_NAME, NODE);
    (api, publisher)
}

#[tokio::test]
async fn first_publish_creates_one_slice_owned_by_the_node() {
    let (api, mut publisher) = publisher().await;
    let outcome = publisher.publish(jetson_devices()).await.unwrap();
    assert_eq!(
        outcome,
        PublishOutcome {
            created: 1,
            generation: 1,
            ..Default::default()
        }
    );
    let slices = own_slices(&api);
    assert_eq!(slices.len(), 1);
    let slice = &slices[0];
    assert_eq!(slice["apiVersion"], "resource.k8s.io/v1");
    let name = str_at(slice, "/metadata/name");
    assert!(name.starts_with("00000-edgegpu.io-orin-agx-01-"), "{name}");
    assert_eq!(name.len(), "00000-edgegpu.io-orin-agx-01-".len() + 5);
    assert_eq!(
        slice["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE,
            "uid": api.node_uid(NODE), "controller": true}])
    );
    assert_eq!(
        slice["spec"],
        json!({"driver": DRIVER_NAME, "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": jetson_devices()})
    );
    // Listed with the field selectors, percent-encoded.
    let list = api
        .requests()
        .into_iter()
        .find(|r| r.method == "GET" && r.path == "/apis/resource.k8s.io/v1/resourceslices")
        .unwrap();
    assert_eq!(
        list.query.as_deref(),
        Some("fieldSelector=spec.nodeName%3Dorin-agx-01%2Cspec.driver%3Dedgegpu.io")
    );
}

#[tokio::test]
async fn unchanged_devices_write_nothing_and_the_node_is_read_once() {
    let (api, mut publisher) = publisher().await;
    publisher.publish(jetson_devices()).await.unwrap();
    let before = writes(&api).len();
    for _ in 0..3 {
        let outcome = publisher.publish(jetson_devices()).await.unwrap();
        assert_eq!(
            outcome,
            PublishOutcome {
                unchanged: 1,
                generation: 1,
                ..Default::default()
            }
        );
    }
    assert_eq!(writes(&api).len(), before);
    let node_reads = api
        .requests()
        .iter()
        .filter(|r| r.path == format!("/api/v1/nodes/{NODE}"))
        .count();
    assert_eq!(node_reads, 1);
    // A new publisher (a restarted driver) compares with what the server has.
    let mut restarted = SlicePublisher::new(client(&api), CURRENT, DRIVER_NAME, NODE);
    let outcome = restarted.publish(jetson_devices()).await.unwrap();
    assert_eq!(outcome.unchanged, 1);
    assert_eq!(writes(&api).len(), before);
}

#[tokio::test]
async fn a_changed_device_bumps_the_generation_in_place() {
    let (api, mut publisher) = publisher().await;
    publisher.publish(jetson_devices()).await.unwrap();
    let name = str_at(&own_slices(&api)[0], "/metadata/name").to_string();
    let mut devices = jetson_devices();
    devices[0]["attributes"]["driverVersion"] = json!({"version": "540.4.1"});
    let outcome = publisher.publish(devices.clone()).await.unwrap();
    assert_eq!(
        outcome,
        PublishOutcome {
            updated: 1,
            generation: 2,
            ..Default::default()
        }
    );
    let slices = own_slices(&api);
    assert_eq!(slices.len(), 1);
    assert_eq!(str_at(&slices[0], "/metadata/name"), name);
    assert_eq!(slices[0]["spec"]["pool"]["generation"], 2);
    assert_eq!(slices[0]["spec"]["devices"], json!(devices));
    assert_eq!(
        writes(&api).last().unwrap(),
        &(
            "PUT".to_string(),
            format!("/apis/resource.k8s.io/v1/resourceslices/{name}")
        )
    );
}

#[tokio::test]
async fn more_than_128_devices_split_in_order_and_shrinking_deletes_the_spare_slice() {
    let (api, mut publisher) = publisher().await;
    publisher.publish(jetson_devices()).await.unwrap();
    let many: Vec<Value> = (0..130).map(gpu).collect();
    let outcome = publisher.publish(many.clone()).await.unwrap();
    assert_eq!(
        outcome,
        PublishOutcome {
            created: 1,
            updated: 1,
            generation: 2,
            ..Default::default()
        }
    );
    let slices = own_slices(&api);
    assert_eq!(slices.len(), 2);
    assert!(str_at(&slices[0], "/metadata/name").starts_with("00000-"));
    assert!(str_at(&slices[1], "/metadata/name").starts_with("00001-"));
    let published: Vec<Value> = slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().unwrap().clone())
        .collect();
    assert_eq!(published, many, "the device order survives the split");
    for slice in &slices {
        assert_eq!(
            slice["spec"]["pool"],
            json!({"name": NODE, "generation": 2, "resourceSliceCount": 2})
        );
    }

    let outcome = publisher.publish(mig_node_devices()).await.unwrap();
    assert_eq!(
        outcome,
        PublishOutcome {
            updated: 1,
            deleted: 1,
            generation: 3,
            ..Default::default()
        }
    );
    let slices = own_slices(&api);
    assert_eq!(slices.len(), 1);
    assert!(str_at(&slices[0], "/metadata/name").starts_with("00000-"));
    assert_eq!(
        slices[0]["spec"]["pool"],
        json!({"name": NODE, "generation": 3, "resourceSliceCount": 1})
    );
}

#[tokio::test]
async fn a_conflict_is_resolved_by_listing_again() {
    let (api, mut publisher) = publisher().await;
    publisher.publish(jetson_devices()).await.unwrap();
    // Someone else writes the slice right after the publisher listed it.
    api.modify_slices_after_next_list();
    let mut devices = jetson_devices();
    devices.pop();
    let outcome = publisher.publish(devices.clone()).await.unwrap();
    assert_eq!(outcome.updated, 1);
    assert_eq!(outcome.generation, 2);
    let puts = writes(&api).iter().filter(|(m, _)| m == "PUT").count();
    assert_eq!(
        puts, 2,
        "the first update met 409 Conflict, the second went through"
    );
    let lists = api
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/resourceslices"))
        .count();
    assert_eq!(lists, 3, "first publish, then the conflicting one twice");
    assert_eq!(own_slices(&api)[0]["spec"]["devices"], json!(devices));
}

#[tokio::test]
async fn only_this_drivers_slices_of_this_node_are_touched() {
    let (api, mut publisher) = publisher().await;
    api.add_node(OTHER_NODE);
    let other_node = api.insert_slice(json!({
        "metadata": {"generateName": format!("00000-{DRIVER_NAME}-{OTHER_NODE}-")},
        "spec": {"driver": DRIVER_NAME, "nodeName": OTHER_NODE,
            "pool": {"name": OTHER_NODE, "generation": 7, "resourceSliceCount": 1},
            "devices": [gpu(0)]}}));
    let other_driver = api.insert_slice(json!({
        "metadata": {"generateName": format!("00000-gpu.nvidia.com-{NODE}-")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": NODE,
            "pool": {"name": NODE, "generation": 3, "resourceSliceCount": 1},
            "devices": [gpu(0)]}}));
    // A slice of an older version of this driver (another naming scheme).
    let legacy = api.insert_slice(json!({
        "metadata": {"generateName": format!("{NODE}-{DRIVER_NAME}-")},
        "spec": {"driver": DRIVER_NAME, "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu(1)]}}));
    // As the ValidatingAdmissionPolicy would: writes only for this node's slices.
    api.restrict_slice_writes_to_node(Some(NODE));

    let outcome = publisher.publish(jetson_devices()).await.unwrap();
    assert_eq!(outcome.created, 1);
    assert_eq!(outcome.deleted, 1, "the legacy slice is replaced");
    assert_eq!(outcome.generation, 2, "above the legacy slice's");
    let mut devices = jetson_devices();
    devices.truncate(1);
    publisher.publish(devices).await.unwrap();
    publisher
        .publish((0..130).map(gpu).collect::<Vec<_>>())
        .await
        .unwrap();
    publisher.publish(Vec::new()).await.unwrap();

    let all = api.slices();
    assert!(
        all.contains(&other_node),
        "the other node's slice is as it was"
    );
    assert!(
        all.contains(&other_driver),
        "the other driver's slice is as it was"
    );
    assert!(!all.contains(&legacy));
    for (method, path) in writes(&api) {
        for untouched in [&other_node, &other_driver] {
            let name = str_at(untouched, "/metadata/name");
            assert!(!path.ends_with(name), "{method} {path}");
        }
    }
    let own = own_slices(&api);
    assert_eq!(own.len(), 1);
    assert!(
        own[0]["spec"].get("devices").is_none(),
        "an empty pool is one empty slice"
    );
}

#[tokio::test]
async fn writes_refused_by_admission_fail_with_the_apis_message() {
    let (api, mut publisher) = publisher().await;
    api.restrict_slice_writes_to_node(Some(OTHER_NODE));
    let err = publisher.publish(jetson_devices()).await.unwrap_err();
    let message = format!("{err:#}");
    assert!(message.contains("403 Forbidden"), "{message}");
    assert!(message.contains("ValidatingAdmissionPolicy"), "{message}");
    assert!(
        message.contains("00000-edgegpu.io-orin-agx-01-"),
        "{message}"
    );
}

/// Every slice the publisher sends (create and update bodies) and every slice as stored,
/// for a Jetson, a MIG node, a split pool and an empty pool, validated with
/// kubernetes-validate --strict against Kubernetes 1.34 and 1.37 (the newest it knows).
#[tokio::test]
async fn published_slices_are_valid_under_the_real_schema() {
    let Some(validator) = kubernetes_validate() else {
        eprintln!(
            "SKIPPED: kubernetes-validate is not installed in .tools/venv-manifests; \
             run scripts/validate-manifests.sh once to install it"
        );
        return;
    };
    let (api, mut publisher) = publisher().await;
    let mut objects = Vec::new();
    for devices in [
        jetson_devices(),
        mig_node_devices(),
        (0..130).map(gpu).collect(),
        vec![],
    ] {
        publisher.publish(devices).await.unwrap();
        objects.extend(own_slices(&api));
    }
    objects.extend(
        api.requests()
            .into_iter()
            .filter(|r| r.path.contains("/resourceslices") && r.method != "GET")
            .filter_map(|r| r.body)
            .filter(|b| b.get("spec").is_some()),
    );
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = objects
        .iter()
        .enumerate()
        .map(|(i, object)| {
            let mut object = object.clone();
            object["apiVersion"] = json!("resource.k8s.io/v1");
            object["kind"] = json!("ResourceSlice");
            let file = dir.path().join(format!("slice-{i}.json"));
            std::fs::write(&file, serde_json::to_vec_pretty(&object).unwrap()).unwrap();
            file
        })
        .collect();
    assert!(files.len() >= 10, "{} objects", files.len());
    for version in ["1.34.0", "1.37.0"] {
        let out = Command::new(&validator)
            .args(["--strict", "--quiet", "-k", version])
            .args(&files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "Kubernetes {version}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The validator does check: an attribute of no known type fails.
    let bad = dir.path().join("bad.json");
    let mut object = objects[0].clone();
    object["apiVersion"] = json!("resource.k8s.io/v1");
    object["kind"] = json!("ResourceSlice");
    object["spec"]["devices"][0]["attributes"]["type"] = json!({"text": "gpu"});
    std::fs::write(&bad, object.to_string()).unwrap();
    let out = Command::new(&validator)
        .args(["--strict", "--quiet", "-k", "1.34.0"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success(), "an unknown attribute type must fail");
}
