//! The driver on the clusters people run: Kubernetes 1.32 (resource.k8s.io/v1beta1) to 1.36,
//! each release's feature gates as it ships them or as an admin sets them. Against the fake
//! API server acting as that release ([`Release`]): the version found, what the server keeps
//! of what is published (a gate that is off drops its fields, and the driver publishes again
//! without them), and every object written validated by kubernetes-validate for that
//! release.

use std::process::Command;

use crate::api_common::{client, kubernetes_validate};
use crate::node_side::discover_with;
use edgegpu_dra::api_versions::{Feature, Features, ResourceApi, ResourceVersion};
use edgegpu_dra::inventory::{Inventory, ShareOptions};
use edgegpu_dra::kubelet::Health;
use edgegpu_dra::slices::SlicePublisher;
use edgegpu_dra::DRIVER_NAME;
use edgegpu_testkit::apiserver::release::{Gate, Release};
use edgegpu_testkit::apiserver::FakeApiServer;
use edgegpu_testkit::host::{Board, FakeHost, FakeMig};
use serde_json::{json, Value};

const NODE: &str = "mig-server-01";
const GIB: u64 = 1 << 30;
/// The fake H100's memory, 81,559 MiB in bytes.
const H100_MEMORY: &str = "85520809984";

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A server with H100 0 in MIG mode (three MIG devices) and H100 1 whole, memory shares of
/// 1Gi, and GPU 1 unhealthy (so a taint is published where the cluster has taints).
fn mig_node_inventory(host: &FakeHost) -> Inventory {
    let shares = ShareOptions {
        memory_step: Some(GIB),
    };
    let mut inv = discover_with(host, &["--mig-strategy=mixed"], NODE, shares);
    inv.set_health("gpu-1", Health::Unhealthy, "XID 79");
    inv
}

/// What one release kept: the version used, the features published under, the slices as
/// stored (in the version's own shape) and every slice body written.
struct Published {
    resources: ResourceApi,
    features: Features,
    stored: Vec<Value>,
    written: Vec<Value>,
    dropped_by_server: Vec<String>,
}

async fn publish_on(release: Release) -> Published {
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let inv = mig_node_inventory(&host);
    let api = FakeApiServer::start(NODE, &[]).await;
    api.act_as(release);
    let resources = ResourceApi::discover(&client(&api)).await.unwrap();
    let mut publisher = SlicePublisher::new(client(&api), resources, DRIVER_NAME, NODE);
    let (_, features) = publisher
        .publish_within(resources.features(), |f| inv.slice_content_for(f))
        .await
        .unwrap();
    // Listed in the version the driver uses: the server's own shape for it.
    let list = api
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && r.path.contains("/resourceslices"))
        .filter_map(|r| r.body)
        .collect();
    let stored = stored_in(&api, &resources).await;
    Published {
        resources,
        features,
        stored,
        written: list,
        dropped_by_server: api.dropped_fields(),
    }
}

/// The node's slices as a GET in the driver's version answers them.
async fn stored_in(api: &FakeApiServer, resources: &ResourceApi) -> Vec<Value> {
    let list = client(api)
        .get(
            &format!(
                "{}?fieldSelector=spec.nodeName%3D{NODE}",
                resources.slices_path()
            ),
            "list",
        )
        .await
        .unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

fn devices(slices: &[Value]) -> Vec<Value> {
    slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn names(slices: &[Value]) -> Vec<String> {
    devices(slices)
        .iter()
        .map(|d| str_at(d, "/name").to_string())
        .collect()
}

/// Whether any stored device (in `v1`'s shape or `v1beta1`'s `basic`) has `field`.
fn any_device_has(slices: &[Value], field: &str) -> bool {
    devices(slices)
        .iter()
        .any(|d| d.get(field).is_some() || d.pointer(&format!("/basic/{field}")).is_some())
}

#[tokio::test]
async fn kubernetes_1_32_gets_v1beta1_without_newer_features() {
    let p = publish_on(Release::kubernetes(32)).await;
    assert_eq!(p.resources.version, ResourceVersion::V1beta1);
    assert_eq!(p.resources.minor, Some(32));
    assert!(!p.features.device_taints && !p.features.consumable_capacity);
    assert!(!p.features.partitionable_devices);
    // v1beta1's shape: every device's fields under `basic`.
    for d in devices(&p.stored) {
        assert!(d.get("basic").is_some(), "{d}");
        assert!(d.get("attributes").is_none(), "{d}");
    }
    assert_eq!(
        names(&p.stored),
        ["gpu-1", "gpu-0-mig-1-0", "gpu-0-mig-5-0", "gpu-0-mig-6-0"],
        "the MIG GPU is not published whole without counters"
    );
    for field in ["taints", "allowMultipleAllocations", "consumesCounters"] {
        assert!(!any_device_has(&p.stored, field), "{field}");
    }
    assert!(
        p.dropped_by_server.is_empty(),
        "nothing the release lacks was sent: {:?}",
        p.dropped_by_server
    );
    let gpu1 = devices(&p.stored)[0].clone();
    assert_eq!(gpu1["basic"]["capacity"]["memory"]["value"], H100_MEMORY);
    assert!(gpu1["basic"]["capacity"]["memory"]
        .get("requestPolicy")
        .is_none());
}

#[tokio::test]
async fn kubernetes_1_33_gets_v1beta2_and_drops_taints_its_gate_keeps_off() {
    let p = publish_on(Release::kubernetes(33)).await;
    assert_eq!(p.resources.version, ResourceVersion::V1beta2);
    // Taints were sent (1.33 has the field), the gate is off by default: dropped, and the
    // driver published again without them.
    assert!(p.dropped_by_server.iter().any(|f| f.ends_with(".taints")));
    assert!(!p.features.device_taints);
    assert!(!any_device_has(&p.stored, "taints"));
    assert!(!any_device_has(&p.stored, "allowMultipleAllocations"));
    assert!(
        devices(&p.stored)[0].get("attributes").is_some(),
        "v1's shape"
    );
}

#[tokio::test]
async fn kubernetes_1_34_keeps_memory_shares_only_with_their_gate() {
    let p = publish_on(Release::kubernetes(34)).await;
    assert_eq!(p.resources.version, ResourceVersion::V1);
    assert!(!p.features.consumable_capacity, "alpha, off by default");
    assert!(!any_device_has(&p.stored, "allowMultipleAllocations"));
    assert!(p
        .dropped_by_server
        .iter()
        .any(|f| f.ends_with("allowMultipleAllocations")));

    let p = publish_on(Release::kubernetes(34).with_gate(Gate::ConsumableCapacity, true)).await;
    assert!(p.features.consumable_capacity);
    let gpu1 = &devices(&p.stored)[0];
    assert_eq!(gpu1["allowMultipleAllocations"], true);
    // 79 whole GiB of the fake H100's 81,559 MiB: the rest is less than a step.
    let shares = (79 * GIB).to_string();
    assert_eq!(
        gpu1["capacity"]["memory"],
        json!({"value": H100_MEMORY, "requestPolicy": {
            "default": shares,
            "validRange": {"min": GIB.to_string(), "max": shares, "step": GIB.to_string()}}})
    );
    assert!(
        !p.features.partitionable_devices,
        "1.34 keeps counters in the devices' slice, which the driver does not write"
    );
}

#[tokio::test]
async fn kubernetes_1_35_publishes_mig_partitions_when_the_gate_is_on() {
    let off = publish_on(Release::kubernetes(35)).await;
    assert!(!off.features.partitionable_devices);
    assert!(!names(&off.stored).contains(&"gpu-0".to_string()));
    assert!(off
        .stored
        .iter()
        .all(|s| s["spec"].get("sharedCounters").is_none()));

    let on = publish_on(Release::kubernetes(35).with_gate(Gate::PartitionableDevices, true)).await;
    assert!(on.features.partitionable_devices);
    check_partitions(&on.stored);
}

#[tokio::test]
async fn kubernetes_1_36_keeps_everything() {
    let p = publish_on(Release::kubernetes(36)).await;
    assert_eq!(p.features, Features::ALL);
    assert!(p.dropped_by_server.is_empty(), "{:?}", p.dropped_by_server);
    assert!(any_device_has(&p.stored, "taints"));
    assert!(any_device_has(&p.stored, "allowMultipleAllocations"));
    check_partitions(&p.stored);
    // A MIG GPU's parts are not shared by memory: MIG devices and the whole MIG GPU.
    for d in devices(&p.stored) {
        let name = str_at(&d, "/name");
        if name.starts_with("gpu-0") {
            assert!(d.get("allowMultipleAllocations").is_none(), "{name}");
        }
    }
}

/// The MIG GPU whole after its MIG devices, consuming every counter of its set, each MIG
/// device its own; the counter set alone in the last slice.
fn check_partitions(stored: &[Value]) {
    let mut sorted = stored.to_vec();
    sorted.sort_by(|a, b| str_at(a, "/metadata/name").cmp(str_at(b, "/metadata/name")));
    let last = sorted.last().unwrap();
    assert!(last["spec"].get("devices").is_none(), "{last}");
    assert_eq!(
        last["spec"]["sharedCounters"],
        json!([{"name": "gpu-0-counters", "counters": {
            "gi1ci0": {"value": "1"}, "gi5ci0": {"value": "1"}, "gi6ci0": {"value": "1"}}}])
    );
    assert_eq!(
        last["spec"]["pool"]["resourceSliceCount"],
        json!(sorted.len())
    );
    let all = devices(&sorted);
    let whole = all.iter().find(|d| d["name"] == "gpu-0").unwrap();
    assert_eq!(whole["attributes"]["migEnabled"], json!({"bool": true}));
    assert_eq!(
        whole["consumesCounters"],
        json!([{"counterSet": "gpu-0-counters", "counters": {
            "gi1ci0": {"value": "1"}, "gi5ci0": {"value": "1"}, "gi6ci0": {"value": "1"}}}])
    );
    let mig = all.iter().find(|d| d["name"] == "gpu-0-mig-5-0").unwrap();
    assert_eq!(
        mig["consumesCounters"],
        json!([{"counterSet": "gpu-0-counters", "counters": {"gi5ci0": {"value": "1"}}}])
    );
    assert!(all
        .iter()
        .find(|d| d["name"] == "gpu-1")
        .unwrap()
        .get("consumesCounters")
        .is_none());
}

#[tokio::test]
async fn a_cluster_without_dra_is_reported_as_too_old() {
    let api = FakeApiServer::start(NODE, &[]).await;
    api.act_as(Release::kubernetes(31));
    let err = ResourceApi::discover(&client(&api)).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("DRA needs Kubernetes 1.32 or newer"),
        "{err:#}"
    );
}

#[tokio::test]
async fn a_server_without_a_version_document_is_taken_for_the_oldest_release_of_its_version() {
    let api = FakeApiServer::start(NODE, &[]).await;
    api.act_as(Release::kubernetes(36));
    api.serve_resource_versions(&["v1beta2", "v1beta1"]);
    let resources = ResourceApi::discover(&client(&api)).await.unwrap();
    assert_eq!(resources.version, ResourceVersion::V1beta2);
    assert_eq!(resources.minor, Some(36), "the release answers /version");
    // The features follow the release, not the version.
    assert!(resources.features().consumable_capacity);
    let oldest = ResourceApi {
        version: ResourceVersion::V1beta2,
        minor: None,
    };
    assert_eq!(oldest.effective_minor(), 33);
    assert!(!oldest.features().has(Feature::ConsumableCapacity));
}

/// Every slice written and stored on each release, validated with kubernetes-validate
/// --strict for that release: the shape of each version, and no field a release lacks.
#[tokio::test]
async fn every_release_gets_objects_valid_under_its_schema() {
    let Some(validator) = kubernetes_validate() else {
        eprintln!(
            "SKIPPED: kubernetes-validate is not installed in .tools/venv-manifests; \
             run scripts/validate-manifests.sh once to install it"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for release in [
        Release::kubernetes(32),
        Release::kubernetes(33),
        Release::kubernetes(34).with_gate(Gate::ConsumableCapacity, true),
        Release::kubernetes(35).with_gate(Gate::PartitionableDevices, true),
        Release::kubernetes(36),
    ] {
        let minor = release.minor;
        let p = publish_on(release).await;
        let mut files = Vec::new();
        for (i, object) in p.written.iter().chain(&p.stored).enumerate() {
            let mut object = object.clone();
            object["apiVersion"] = json!(p.resources.api_version());
            object["kind"] = json!("ResourceSlice");
            let file = dir.path().join(format!("1.{minor}-slice-{i}.json"));
            std::fs::write(&file, serde_json::to_vec_pretty(&object).unwrap()).unwrap();
            files.push(file);
        }
        let out = Command::new(&validator)
            .args(["--strict", "--quiet", "-k", &format!("1.{minor}.0")])
            .args(&files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "Kubernetes 1.{minor}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_jetson_shares_its_memory_in_steps() {
    let host = FakeHost::jetson(Board::Orin);
    let shares = ShareOptions {
        memory_step: Some(256 << 20),
    };
    let inv = discover_with(&host, &[], NODE, shares);
    let gpu = inv.slice_devices()[0].clone();
    assert_eq!(gpu["name"], "gpu-0");
    assert_eq!(gpu["allowMultipleAllocations"], true);
    let memory = &gpu["capacity"]["memory"];
    let total: u64 = memory["value"].as_str().unwrap().parse().unwrap();
    let max: u64 = memory["requestPolicy"]["validRange"]["max"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(max % (256 << 20), 0);
    assert!(max <= total && total - max < 256 << 20);
    assert_eq!(memory["requestPolicy"]["default"], json!(max.to_string()));
    // Engines are never shared by memory.
    for d in inv.slice_devices().iter().skip(1) {
        assert!(d.get("allowMultipleAllocations").is_none(), "{d}");
    }
}
