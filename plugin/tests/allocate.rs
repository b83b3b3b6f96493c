//! Allocate errors that name the offending IDs, and GetPreferredAllocation keeping a pod on
//! one NUMA node, on a discrete host with four GPUs on two NUMA nodes.

use crate::gpu_common;

use edgegpu_kubelet_api::v1beta1::{ContainerAllocateRequest, ContainerPreferredAllocationRequest};
use edgegpu_plugin::resource::Resource;
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use gpu_common::{ids, Plugin};

fn four_gpus() -> Vec<FakeGpu> {
    (0..4)
        .map(|i| FakeGpu {
            uuid: format!("GPU-00000000-0000-4000-8000-00000000000{i}"),
            name: "NVIDIA L4".into(),
            memory_bytes: 24_000_000_000,
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x10 + i),
            // GPUs 0 and 2 on node 0, 1 and 3 on node 1.
            nvml_numa_node: (i % 2) as i32,
            sysfs_numa_node: None,
            minor: i,
            unsupported: "",
        })
        .collect()
}

fn request(ids: &[&str]) -> ContainerAllocateRequest {
    ContainerAllocateRequest {
        devices_ids: ids.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_allocation_keeps_a_pod_on_one_numa_node() {
    let gpus = four_gpus();
    let host = FakeHost::discrete(&gpus);
    let plugin = Plugin::start(host.root(), &["--device-id-strategy=index"]).await;
    assert_eq!(ids(&plugin.devices()), vec!["0", "1", "2", "3"]);
    let k = &plugin.kubelet;
    // Two GPUs: both from one node.
    let got = k
        .preferred_allocation(&plugin.name, &["0", "1", "2", "3"], &[], 2)
        .await
        .unwrap();
    assert_eq!(got, vec!["0", "2"]);
    // Must include GPU 1 (node 1): its partner is 3.
    let got = k
        .preferred_allocation(&plugin.name, &["0", "1", "2", "3"], &["1"], 2)
        .await
        .unwrap();
    assert_eq!(got, vec!["1", "3"]);
    // Node 0 has one free GPU left, node 1 two: a 2-GPU pod goes to node 1.
    let got = k
        .preferred_allocation(&plugin.name, &["2", "1", "3"], &[], 2)
        .await
        .unwrap();
    assert_eq!(got, vec!["1", "3"]);
    // Three GPUs cannot fit one node: the answer still has three.
    let got = k
        .preferred_allocation(&plugin.name, &["0", "1", "2", "3"], &[], 3)
        .await
        .unwrap();
    assert_eq!(got.len(), 3);
    // The fake kubelet's admission uses the preference: a 2-GPU pod lands on one node.
    let (chosen, r) = k.admit(&plugin.name, 2).await.unwrap();
    assert_eq!(chosen, vec!["0", "2"]);
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "0,2");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_allocate_requests_name_the_ids() {
    let host = FakeHost::discrete(&four_gpus());
    let res = gpu_common::resource(host.root(), &["--device-id-strategy=index"])
        .await
        .unwrap();
    let msg = |ids: &[&str]| {
        res.allocate(&request(ids))
            .unwrap_err()
            .message()
            .to_string()
    };
    let m = msg(&["0", "7", "GPU-x"]);
    assert!(
        m.contains("unknown device IDs") && m.contains("7, GPU-x") && !m.contains("0,"),
        "{m}"
    );
    let m = msg(&["0", "1", "2", "3", "0"]);
    assert!(
        m.contains("requested 5 devices") && m.contains("only 4 exist"),
        "{m}"
    );
    let m = msg(&["1", "1"]);
    assert!(m.contains("requested twice") && m.contains('1'), "{m}");
    assert!(msg(&[]).contains("no device IDs"));
    // Preferred allocation with an unknown ID is an error too.
    let e = res
        .preferred_allocation(&ContainerPreferredAllocationRequest {
            available_device_i_ds: vec!["0".into(), "9".into()],
            must_include_device_i_ds: vec![],
            allocation_size: 1,
        })
        .unwrap_err();
    assert!(e.message().contains('9'), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_offer_preferred_allocation_without_prestart() {
    let host = FakeHost::jetson(Board::Thor);
    let plugin = Plugin::start(host.root(), &["--discovery=tegra"]).await;
    let info = plugin.kubelet.resource(&plugin.name).unwrap();
    assert!(info.options.get_preferred_allocation_available);
    assert!(!info.options.pre_start_required);
    plugin.stop().await;
}
