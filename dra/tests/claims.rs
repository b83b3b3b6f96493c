//! `claims::fetch` against the fake API server, and `allocation_from_object` on claim objects.

use crate::api_common;

use api_common::{client, NODE};
use edgegpu_dra::claims::{
    allocation_from_object, fetch, AllocatedDevice, AllocationError, ConfigSource, FetchError,
    OpaqueConfig,
};
use edgegpu_dra::kubelet::ClaimRef;
use edgegpu_dra::DRIVER_NAME;
use edgegpu_testkit::apiserver::FakeApiServer;
use serde_json::{json, Value};

const UID: &str = "5b9c1e0e-7d3a-4c55-9d1e-2f6a8c4b7e01";

fn claim_ref() -> ClaimRef {
    ClaimRef {
        namespace: "vision".into(),
        name: "camera-infer-gpu".into(),
        uid: UID.into(),
    }
}

/// Two of this driver's devices, one of another driver, configs of both drivers and both
/// sources, the claim's listed before the class's (the order must not matter).
fn allocation() -> Value {
    json!({"devices": {
        "results": [
            {"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-0"},
            {"request": "nic", "driver": "net.example.com", "pool": NODE, "device": "eth1"},
            {"request": "dla/core", "driver": DRIVER_NAME, "pool": NODE, "device": "dla-1",
             "adminAccess": true,
             "shareID": "4f3c9d2a-1b6e-4c8f-a0d7-9e5b2c1f8a36"},
        ],
        "config": [
            {"source": "FromClaim", "requests": ["gpu"],
             "opaque": {"driver": DRIVER_NAME, "parameters": {"sharing": "claim"}}},
            {"source": "FromClass",
             "opaque": {"driver": "net.example.com", "parameters": {"mtu": 9000}}},
            {"source": "FromClass",
             "opaque": {"driver": DRIVER_NAME, "parameters": {"sharing": "class"}}},
        ],
    }})
}

fn expected_devices() -> Vec<AllocatedDevice> {
    vec![
        AllocatedDevice {
            request: "gpu".into(),
            pool: NODE.into(),
            device: "gpu-0".into(),
            admin_access: false,
            share_id: None,
            consumed_capacity: Default::default(),
        },
        AllocatedDevice {
            request: "dla/core".into(),
            pool: NODE.into(),
            device: "dla-1".into(),
            admin_access: true,
            share_id: Some("4f3c9d2a-1b6e-4c8f-a0d7-9e5b2c1f8a36".into()),
            consumed_capacity: Default::default(),
        },
    ]
}

#[tokio::test]
async fn an_allocated_claim_gives_this_drivers_devices_and_configs_class_first() {
    let api = FakeApiServer::start(NODE, &[]).await;
    api.add_claim("vision", "camera-infer-gpu", UID, Some(allocation()));
    let got = fetch(&client(&api), &claim_ref(), DRIVER_NAME)
        .await
        .unwrap();
    assert_eq!(got.devices, expected_devices());
    assert_eq!(
        got.configs,
        vec![
            OpaqueConfig {
                requests: vec![],
                parameters: json!({"sharing": "class"}),
                source: ConfigSource::Class,
            },
            OpaqueConfig {
                requests: vec!["gpu".into()],
                parameters: json!({"sharing": "claim"}),
                source: ConfigSource::Claim,
            },
        ]
    );
    let paths: Vec<String> = api.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        ["/apis/resource.k8s.io/v1/namespaces/vision/resourceclaims/camera-infer-gpu"]
    );
}

#[tokio::test]
async fn an_older_api_server_is_read_through_the_beta_versions() {
    let api = FakeApiServer::start(NODE, &[]).await;
    api.add_claim("vision", "camera-infer-gpu", UID, Some(allocation()));
    api.serve_resource_versions(&["v1beta1"]);
    let got = fetch(&client(&api), &claim_ref(), DRIVER_NAME)
        .await
        .unwrap();
    assert_eq!(got.devices, expected_devices());
    let versions: Vec<String> = api
        .requests()
        .into_iter()
        .map(|r| r.path.split('/').nth(3).unwrap().to_string())
        .collect();
    assert_eq!(versions, ["v1", "v1beta2", "v1beta1"]);
}

#[tokio::test]
async fn a_deleted_claim_is_gone_without_trying_other_versions() {
    let api = FakeApiServer::start(NODE, &[]).await;
    let error = fetch(&client(&api), &claim_ref(), DRIVER_NAME)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, FetchError::Gone { claim, answer } if *claim == claim_ref() && answer.is_object_not_found()),
        "{error:?}"
    );
    let message = format!("{error:#}");
    assert!(
        message.contains("claim vision/camera-infer-gpu is gone"),
        "{message}"
    );
    assert!(
        message.contains("resourceclaims.resource.k8s.io \"camera-infer-gpu\" not found"),
        "{message}"
    );
    assert_eq!(api.requests().len(), 1);
}

#[tokio::test]
async fn no_served_version_is_an_error() {
    let api = FakeApiServer::start(NODE, &[]).await;
    api.serve_resource_versions(&[]);
    let error = fetch(&client(&api), &claim_ref(), DRIVER_NAME)
        .await
        .unwrap_err();
    assert!(matches!(error, FetchError::NotServed { .. }), "{error:?}");
    let message = format!("{error:#}");
    assert!(
        message.contains("serves none of resource.k8s.io/v1, v1beta2, v1beta1"),
        "{message}"
    );
}

#[tokio::test]
async fn replaced_and_unallocated_claims_are_refused() {
    let api = FakeApiServer::start(NODE, &[]).await;
    api.add_claim(
        "vision",
        "camera-infer-gpu",
        "0e7a4d1c-0000-4000-8000-000000000001",
        Some(allocation()),
    );
    let error = fetch(&client(&api), &claim_ref(), DRIVER_NAME)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, FetchError::Allocation(AllocationError::Replaced { found_uid, .. })
            if found_uid == "0e7a4d1c-0000-4000-8000-000000000001"),
        "{error:?}"
    );
    let message = format!("{error:#}");
    assert!(message.contains("got replaced"), "{message}");
    api.add_claim("vision", "camera-infer-gpu", UID, None);
    let message = format!(
        "{:#}",
        fetch(&client(&api), &claim_ref(), DRIVER_NAME)
            .await
            .unwrap_err()
    );
    assert!(message.contains("is not allocated"), "{message}");
}

#[test]
fn a_claim_with_only_other_drivers_devices_is_refused() {
    let object = json!({"metadata": {"uid": UID}, "status": {"allocation": {"devices": {
        "results": [{"request": "nic", "driver": "net.example.com", "pool": NODE, "device": "eth1"}],
        "config": [{"source": "FromClass",
            "opaque": {"driver": DRIVER_NAME, "parameters": {}}}]}}}});
    let err = allocation_from_object(&claim_ref(), &object, DRIVER_NAME).unwrap_err();
    assert_eq!(
        err,
        AllocationError::NoDeviceOfDriver {
            claim: claim_ref(),
            driver: DRIVER_NAME.into(),
            drivers: vec!["net.example.com".into()],
        }
    );
    assert_eq!(
        err.to_string(),
        "claim vision/camera-infer-gpu has no device of driver edgegpu.io allocated (its results are for: net.example.com)"
    );
}

#[test]
fn malformed_results_and_sources_are_named() {
    let mut object = json!({"metadata": {"uid": UID}, "status": {"allocation": allocation()}});
    object["status"]["allocation"]["devices"]["results"][0]["device"] = json!("");
    let err = allocation_from_object(&claim_ref(), &object, DRIVER_NAME).unwrap_err();
    assert!(
        matches!(
            err,
            AllocationError::ResultWithout {
                index: 0,
                field: "device",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .ends_with(": status.allocation.devices.results[0] has no device"),
        "{err}"
    );
    let mut object = json!({"metadata": {"uid": UID}, "status": {"allocation": allocation()}});
    object["status"]["allocation"]["devices"]["config"][0]["source"] = json!("FromPod");
    let err = allocation_from_object(&claim_ref(), &object, DRIVER_NAME)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("config[0] has source Some(\"FromPod\")"),
        "{err}"
    );
}

/// A memory share (KEP-5075): what the allocation consumed, in bytes; a quantity that is not
/// one is refused naming the result and the capacity.
#[test]
fn consumed_capacity_is_read_in_bytes() {
    let object = |consumed: Value| {
        json!({"metadata": {"uid": UID}, "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-0",
             "shareID": "9b2f6a3e-5c1d-4e8f-b7a0-3d6c9e2f1a54",
             "consumedCapacity": consumed}]}}}})
    };
    let got = allocation_from_object(
        &claim_ref(),
        &object(json!({"memory": "2Gi", "computeShare": 25})),
        DRIVER_NAME,
    )
    .unwrap();
    let consumed = &got.devices[0].consumed_capacity;
    assert_eq!(consumed["memory"], 2 << 30);
    assert_eq!(consumed["computeShare"], 25);
    let err = allocation_from_object(
        &claim_ref(),
        &object(json!({"memory": "2.5Gi"})),
        DRIVER_NAME,
    )
    .unwrap_err();
    assert!(
        matches!(&err, AllocationError::ConsumedCapacity { index: 0, capacity, .. } if capacity == "memory"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("results[0].consumedCapacity.memory: \"2.5Gi\""),
        "{err}"
    );
}
