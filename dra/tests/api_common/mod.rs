//! What the API-side tests and the publish benchmark share: a client of the fake API server
//! and realistic devices (attributes of every type, capacity quantities), so that the schema
//! validation in `tests/slices.rs` checks them.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use edgegpu_apiclient::ApiServer;
use edgegpu_testkit::apiserver::FakeApiServer;
use serde_json::{json, Value};

pub const NODE: &str = "orin-agx-01";
pub const OTHER_NODE: &str = "orin-agx-02";

pub fn client(api: &FakeApiServer) -> Arc<ApiServer> {
    Arc::new(ApiServer::new(&api.url(), &api.token_file(), &api.ca_file()).expect("client"))
}

/// A Jetson AGX Orin: the integrated GPU, two DLA cores, the PVA.
pub fn jetson_devices() -> Vec<Value> {
    let mut devices = vec![json!({
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "Orin (nvgpu)"},
            "integrated": {"bool": true},
            "index": {"int": 0},
            "cudaComputeCapability": {"version": "8.7.0"},
            "driverVersion": {"version": "540.4.0"},
            "l4tVersion": {"version": "36.4.3"},
        },
        "capacity": {
            "memory": {"value": "64Gi"},
            "multiprocessors": {"value": "16"},
        },
    })];
    for core in 0..2 {
        devices.push(json!({
            "name": format!("dla-{core}"),
            "attributes": {
                "type": {"string": "dla"},
                "index": {"int": core},
                "integrated": {"bool": true},
            },
        }));
    }
    devices.push(json!({
        "name": "pva-0",
        "attributes": {"type": {"string": "pva"}, "index": {"int": 0}},
    }));
    devices
}

/// A discrete GPU `index` (H100-like), its PCI address as the standard attribute.
pub fn gpu(index: usize) -> Value {
    json!({
        "name": format!("gpu-{index}"),
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": format!("GPU-5d6f2d4a-0000-4000-8000-{index:012x}")},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "index": {"int": index},
            "migEnabled": {"bool": false},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.95.5"},
            "resource.kubernetes.io/pciBusID": {"string": format!("0000:{:02x}:00.0", (0x18 + index) % 256)},
        },
        "capacity": {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}},
    })
}

/// MIG device `slot` (1g.10gb) of GPU `parent`.
pub fn mig(parent: usize, slot: usize) -> Value {
    json!({
        "name": format!("gpu-{parent}-mig-1g10gb-19-{slot}"),
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": format!("MIG-0e4c1e3a-{parent:04x}-4000-8000-{slot:012x}")},
            "parentUUID": {"string": format!("GPU-5d6f2d4a-0000-4000-8000-{parent:012x}")},
            "profile": {"string": "1g.10gb"},
            "parentIndex": {"int": parent},
            "cudaComputeCapability": {"version": "9.0.0"},
            "resource.kubernetes.io/pciBusID": {"string": format!("0000:{:02x}:00.0", 0x18 + parent)},
        },
        "capacity": {
            "memory": {"value": "9984Mi"},
            "multiprocessors": {"value": "16"},
            "copyEngines": {"value": "1"},
        },
    })
}

/// A big node: 8 GPUs, 7 MIG devices each.
pub fn mig_node_devices() -> Vec<Value> {
    (0..8)
        .flat_map(|g| (0..7).map(move |s| mig(g, s)))
        .collect()
}

/// `.tools/venv-manifests/bin/kubernetes-validate`, installed by scripts/validate-manifests.sh.
pub fn kubernetes_validate() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/venv-manifests/bin/kubernetes-validate");
    path.exists().then_some(path)
}
