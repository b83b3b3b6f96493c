//! Discovery in `auto` mode on roots without NVML, and detection details. This test binary
//! never loads a (fake) NVML: glibc would hand a loaded copy to the soname fallback.

mod gpu_common;

use edgegpu_plugin::discovery::{Generation, Platform};
use edgegpu_testkit::host::{Board, FakeHost};
use gpu_common::{ids, spec_paths, Plugin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_discovery_without_nvml_falls_through_to_tegra() {
    let host = FakeHost::jetson(Board::Xavier);
    let res = gpu_common::resource(host.root(), &[]).await.expect("auto");
    match res.platform() {
        Some(Platform::Tegra {
            detection,
            nvml_name,
        }) => {
            assert_eq!(detection.generation, Some(Generation::Xavier));
            assert_eq!(nvml_name, &None);
        }
        other => panic!("expected Tegra, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_on_every_jetson_serves_tegra_with_specs() {
    for board in Board::ALL {
        let host = FakeHost::jetson(board);
        let plugin = Plugin::start(host.root(), &["--pass-device-specs=true"]).await;
        assert_eq!(ids(&plugin.devices()), vec!["tegra"], "{board:?}");
        let r = plugin.allocate(&["tegra"]).await.expect("allocate");
        let key_node = if board == Board::Thor {
            "/dev/nvidia0"
        } else {
            "/dev/nvmap"
        };
        assert!(
            spec_paths(&r).contains(&key_node.to_string()),
            "{board:?}: {:?}",
            spec_paths(&r)
        );
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_gpu_fails_at_start_or_runs_with_zero_devices() {
    let host = FakeHost::empty();
    let err = gpu_common::resource(host.root(), &[])
        .await
        .err()
        .expect("no GPU is an error by default");
    let text = format!("{err:#}");
    assert!(text.contains("no NVIDIA GPU found"), "{text}");
    assert!(text.contains("could not load NVML"), "{text}");
    assert!(
        text.contains("libnvidia-ml.so.1"),
        "the NVML candidates are named: {text}"
    );
    assert!(
        text.contains("etc/nv_tegra_release"),
        "the Tegra files looked for are named: {text}"
    );

    let plugin = Plugin::start(host.root(), &["--fail-on-init-error=false"]).await;
    assert!(plugin.devices().is_empty());
    assert_eq!(plugin.kubelet.capacity(&plugin.name), 0);
    plugin.stop().await;
}
