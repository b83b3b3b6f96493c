//! Time-slicing through the fake kubelet: replica IDs `<id>::<n>`, `renameByDefault`,
//! `failRequestsGreaterThanOne`, replica health, and the `distributed`/`packed` policies.

use crate::gpu_common;

use edgegpu_kubelet_api::v1beta1::{HEALTHY, UNHEALTHY};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use gpu_common::{ids, Plugin};

fn config(dir: &std::path::Path, replicas: u32, rename: bool, fail_gt_one: bool) -> String {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: {rename}\n    failRequestsGreaterThanOne: {fail_gt_one}\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetson_replicas_shared_by_several_pods() {
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 4, false, false);
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", "--config", &file]).await;
    assert_eq!(plugin.name, "nvidia.com/gpu");
    assert_eq!(
        ids(&plugin.devices()),
        vec!["tegra::0", "tegra::1", "tegra::2", "tegra::3"]
    );
    // Four pods, one replica each: all get the one GPU.
    for _ in 0..4 {
        let (chosen, r) = plugin.kubelet.admit(&plugin.name, 1).await.expect("admit");
        assert_eq!(chosen.len(), 1);
        assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "tegra");
    }
    assert!(
        plugin.kubelet.admit(&plugin.name, 1).await.is_err(),
        "a fifth pod does not fit"
    );
    // Two replicas of the same GPU in one container: the GPU once.
    let r = plugin.allocate(&["tegra::1", "tegra::3"]).await.unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "tegra");
    // Health applies to every replica of the GPU.
    host.remove_node("/dev/nvmap");
    plugin
        .wait_devices("all replicas unhealthy", |d| {
            d.len() == 4 && d.iter().all(|x| x.health == UNHEALTHY)
        })
        .await;
    host.restore_node("/dev/nvmap");
    plugin
        .wait_devices("all replicas healthy", |d| {
            d.len() == 4 && d.iter().all(|x| x.health == HEALTHY)
        })
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_by_default_and_fail_requests_greater_than_one() {
    let host = FakeHost::jetson(Board::Nano);
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 2, true, true);
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", "--config", &file]).await;
    assert_eq!(plugin.name, "nvidia.com/gpu.shared");
    assert_eq!(ids(&plugin.devices()), vec!["tegra::0", "tegra::1"]);
    let err = plugin
        .allocate(&["tegra::0", "tegra::1"])
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "invalid request: maximum request size for shared resources is 1; found 2"
    );
    let r = plugin.allocate(&["tegra::1"]).await.unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "tegra");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_for_another_resource_name_advertises_no_replicas() {
    let host = FakeHost::jetson(Board::Xavier);
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 4, false, false);
    let plugin = Plugin::start(
        host.root(),
        &[
            "--discovery=tegra",
            "--config",
            &file,
            "--resource-name",
            "example.com/igpu",
        ],
    )
    .await;
    assert_eq!(ids(&plugin.devices()), vec!["tegra"]);
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_replicas_distributed_or_packed() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3, false, false);
    let (a, b) = (&gpus[0].uuid, &gpus[1].uuid);

    let plugin = Plugin::start(host.root(), &["--config", &file]).await;
    let all = ids(&plugin.devices());
    assert_eq!(
        all,
        vec![
            format!("{a}::0"),
            format!("{a}::1"),
            format!("{a}::2"),
            format!("{b}::0"),
            format!("{b}::1"),
            format!("{b}::2")
        ]
    );
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    // distributed (default): one replica on each GPU.
    let got = plugin
        .kubelet
        .preferred_allocation(&plugin.name, &refs, &[], 2)
        .await
        .unwrap();
    assert_eq!(got, vec![format!("{a}::0"), format!("{b}::0")]);
    // GPU a already has two replicas in use: the next single replica goes to b.
    let free: Vec<&str> = refs
        .iter()
        .copied()
        .filter(|id| *id != format!("{a}::0") && *id != format!("{a}::1"))
        .collect();
    let got = plugin
        .kubelet
        .preferred_allocation(&plugin.name, &free, &[], 1)
        .await
        .unwrap();
    assert_eq!(got, vec![format!("{b}::0")]);
    // Allocate of replicas on both GPUs names both GPUs once.
    let r = plugin
        .allocate(&[&format!("{a}::2"), &format!("{b}::1")])
        .await
        .unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], format!("{a},{b}"));
    plugin.stop().await;

    let plugin = Plugin::start(
        host.root(),
        &[
            "--config",
            &file,
            "--shared-devices-allocation-policy",
            "packed",
        ],
    )
    .await;
    let got = plugin
        .kubelet
        .preferred_allocation(&plugin.name, &refs, &[], 2)
        .await
        .unwrap();
    assert_eq!(got, vec![format!("{a}::0"), format!("{a}::1")]);
    // packed fills the GPU that is already in use.
    let got = plugin
        .kubelet
        .preferred_allocation(&plugin.name, &free, &[], 1)
        .await
        .unwrap();
    assert_eq!(got, vec![format!("{a}::2")]);
    plugin.stop().await;
}
