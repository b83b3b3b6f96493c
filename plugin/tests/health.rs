//! Health through the fake kubelet: a Jetson losing a device node or its GPU sysfs and
//! getting them back (inotify, recovery to Healthy), and a discrete server with a critical
//! XID, an ignored XID and a lost GPU through the fake NVML.

use crate::gpu_common;

use std::time::Duration;

use edgegpu_kubelet_api::v1beta1::{HEALTHY, UNHEALTHY};
use edgegpu_plugin::resource::Resource;
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use gpu_common::Plugin;

fn allocate_ids(ids: &[&str]) -> edgegpu_kubelet_api::v1beta1::ContainerAllocateRequest {
    edgegpu_kubelet_api::v1beta1::ContainerAllocateRequest {
        devices_ids: ids.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetson_device_node_loss_and_recovery() {
    for board in Board::ALL {
        let host = FakeHost::jetson(board);
        let plugin = Plugin::start(host.root(), &["--discovery=tegra"]).await;
        plugin.wait_health("tegra", HEALTHY).await;
        let node = board.required_node();
        host.remove_node(node);
        plugin.wait_health("tegra", UNHEALTHY).await;
        // The plugin refuses to allocate it and says why (the kubelet would not even ask).
        let err = plugin
            .resource
            .allocate(&allocate_ids(&["tegra"]))
            .unwrap_err();
        assert!(
            err.message().contains("unhealthy device IDs") && err.message().contains(node),
            "{board:?}: {}",
            err.message()
        );
        host.restore_node(node);
        plugin.wait_health("tegra", HEALTHY).await;
        plugin
            .allocate(&["tegra"])
            .await
            .expect("allocatable again");
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetson_gpu_sysfs_unreadable_and_back() {
    for board in Board::ALL {
        let host = FakeHost::jetson(board);
        let plugin = Plugin::start(host.root(), &["--discovery=tegra"]).await;
        host.break_gpu_sysfs();
        plugin.wait_health("tegra", UNHEALTHY).await;
        host.restore_gpu_sysfs();
        plugin.wait_health("tegra", HEALTHY).await;
        // Every transition reached the kubelet: Healthy → Unhealthy → Healthy.
        let info = plugin.kubelet.resource(&plugin.name).unwrap();
        let seen: Vec<&str> = info.history.iter().map(|l| l[0].health.as_str()).collect();
        let mut transitions = seen.clone();
        transitions.dedup();
        assert_eq!(
            transitions,
            vec![HEALTHY, UNHEALTHY, HEALTHY],
            "{board:?}: {seen:?}"
        );
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetson_gpu_device_directory_unbound_and_rebound() {
    // The driver unbinding removes the whole GPU sysfs directory (the watched one); when it
    // comes back the watches must follow it down again.
    let board = Board::Orin;
    let host = FakeHost::jetson(board);
    let plugin = Plugin::start(host.root(), &["--discovery=tegra"]).await;
    let load = board.load_file().unwrap();
    let device_dir = load.rsplit_once('/').unwrap().0.to_string();
    std::fs::remove_dir_all(host.path(&device_dir)).unwrap();
    plugin.wait_health("tegra", UNHEALTHY).await;
    host.mkdir(&device_dir);
    host.write(&board.cur_freq_file(), "306000000\n");
    host.write(&load, "0\n");
    plugin.wait_health("tegra", HEALTHY).await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_disabled_keeps_advertising_healthy() {
    let host = FakeHost::jetson(Board::Nano);
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", "--health-checks=false"]).await;
    host.remove_node("/dev/nvmap");
    // The same change is reported within milliseconds when checks are on (tests above);
    // give it ample time here and check nothing was published.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let info = plugin.kubelet.resource(&plugin.name).unwrap();
    assert!(
        info.history.iter().flatten().all(|d| d.health == HEALTHY),
        "{:?}",
        info.history
    );
    assert_eq!(info.history.len(), 1, "no second list was sent");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_critical_xid_marks_only_that_gpu_and_it_recovers() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let plugin = Plugin::start(host.root(), &["--health-recovery-seconds=1"]).await;
    // An application XID (13) is ignored; the critical one after it (48, double-bit ECC) counts.
    host.inject_xid(1, 13);
    tokio::time::sleep(Duration::from_millis(200)).await;
    host.inject_xid(1, 48);
    plugin.wait_health(&gpus[1].uuid, UNHEALTHY).await;
    let devices = plugin.devices();
    assert_eq!(devices[0].health, HEALTHY, "the other GPU is untouched");
    let history = plugin.kubelet.resource(&plugin.name).unwrap().history;
    let unhealthy_lists = history
        .iter()
        .filter(|l| l.iter().any(|d| d.health == UNHEALTHY))
        .count();
    assert!(unhealthy_lists >= 1);
    let err = plugin
        .resource
        .allocate(&allocate_ids(&[&gpus[1].uuid]))
        .unwrap_err();
    assert!(err.message().contains("Xid=48"), "{}", err.message());
    assert!(!err.message().contains("Xid=13"), "{}", err.message());
    // It keeps answering NVML, so after the recovery delay it is Healthy again.
    plugin.wait_health(&gpus[1].uuid, HEALTHY).await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_ignored_xid_alone_changes_nothing() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let plugin = Plugin::start(host.root(), &[]).await;
    for xid in [13, 31, 43, 45, 68, 109] {
        host.inject_xid(0, xid);
        // The fake consumes the file; wait until it did before the next one.
        for _ in 0..3000 {
            if !host.nvml_dir().join("xid-events").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            !host.nvml_dir().join("xid-events").exists(),
            "XID {xid} was not consumed"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let info = plugin.kubelet.resource(&plugin.name).unwrap();
    assert!(
        info.history.iter().flatten().all(|d| d.health == HEALTHY),
        "{:?}",
        info.history
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_lost_gpu_and_recovery() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let plugin = Plugin::start(host.root(), &[]).await;
    host.lose_gpu(0);
    plugin.wait_health(&gpus[0].uuid, UNHEALTHY).await;
    assert_eq!(plugin.devices()[1].health, HEALTHY);
    let err = plugin
        .resource
        .allocate(&allocate_ids(&[&gpus[0].uuid]))
        .unwrap_err();
    assert!(
        err.message().contains("does not answer NVML"),
        "{}",
        err.message()
    );
    host.recover_gpu(0);
    plugin.wait_health(&gpus[0].uuid, HEALTHY).await;
    // Its XID events are registered again after the recovery.
    host.inject_xid(0, 79);
    plugin.wait_health(&gpus[0].uuid, UNHEALTHY).await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r470_without_memory_info_v2_keeps_its_gpus_healthy() {
    // The probe asks for the memory: an R470 driver has no nvmlDeviceGetMemoryInfo_v2.
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete_r470(&gpus);
    let plugin = Plugin::start(host.root(), &[]).await;
    // An XID on GPU 0 wakes the watch, which then probes every GPU.
    host.inject_xid(0, 79);
    plugin.wait_health(&gpus[0].uuid, UNHEALTHY).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(plugin.devices()[1].health, HEALTHY);
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_disable_healthchecks_values_are_parsed() {
    use edgegpu_node::config::GpuArgs;
    let args = GpuArgs::default();
    let all = args
        .resolve_with_env(|k| (k == "DP_DISABLE_HEALTHCHECKS").then(|| "all".to_string()))
        .unwrap();
    assert!(!all.health_checks);
    let xids = args
        .resolve_with_env(|k| (k == "DP_DISABLE_HEALTHCHECKS").then(|| "xids".to_string()))
        .unwrap();
    assert!(!xids.health_checks);
    let extra = args
        .resolve_with_env(|k| (k == "DP_DISABLE_HEALTHCHECKS").then(|| "48, 79".to_string()))
        .unwrap();
    assert!(extra.health_checks);
    assert_eq!(
        extra.extra_ignored_xids.into_iter().collect::<Vec<_>>(),
        vec![48, 79]
    );
    let bad =
        args.resolve_with_env(|k| (k == "DP_DISABLE_HEALTHCHECKS").then(|| "nope".to_string()));
    assert!(format!("{:#}", bad.unwrap_err()).contains("DP_DISABLE_HEALTHCHECKS"));
}
