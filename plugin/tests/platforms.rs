//! Each simulated platform through the fake kubelet: Jetson Nano (L4T r32), Xavier (r35),
//! Orin (r36, JetPack 6), Orin (r39, JetPack 7.2), Thor (r38), and a discrete server through
//! the fake NVML; the JetPack 6+ boards also with their release's NVML (hybrid discovery and
//! health), and every simulated board checked to be a generation of the platform table.
//!
//! This binary loads fake NVML copies. glibc matches a later `dlopen("libnvidia-ml.so.1")`
//! (the soname fallback) against an already loaded copy, so Jetson roots here use
//! `--discovery tegra`; `auto` on roots without NVML is tested in `discovery.rs`, a binary
//! that never loads NVML.

use crate::gpu_common;

use edgegpu_kubelet_api::v1beta1::{ContainerAllocateRequest, HEALTHY, UNHEALTHY};
use edgegpu_node::gpu::discovery::{Platform, TegraDetection};
use edgegpu_platform::Generation;
use edgegpu_plugin::resource::Resource;
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use gpu_common::{ids, spec_paths, Plugin};

/// The SoC each simulated board carries.
fn soc(board: Board) -> &'static str {
    board.soc()
}

/// The simulated boards are fixtures, not facts: this checks that each one is a generation
/// of the platform table running one of its L4T releases, with the nodes the table requires
/// (what the tests below rely on). The table's facts are checked against independent records
/// where the repository has them: CUDA names and capabilities against deviceQuery outputs
/// taken on the boards (devicequery/tests/platforms.rs). What each release's NVML answers
/// has no such record here (no capture from a Jetson), so it is not compared with the fake's
/// equally hand-written `unsupported` lists; the table's answers are exercised through the
/// code that reads them (`gpu/sensors/tegra.rs`, tests/metrics.rs).
#[test]
fn every_simulated_board_is_a_generation_of_the_table() {
    for board in Board::ALL {
        let g = Generation::by_compatible(&format!("tegra{}", &board.soc()[1..]))
            .unwrap_or_else(|| panic!("{board:?}: no table entry"));
        assert!(g.l4t_majors.contains(&board.l4t_major()), "{board:?}");
        assert_eq!(
            board.nvml().is_some(),
            g.nvml_answers(board.l4t_major()).is_some(),
            "{board:?}: a simulated NVML where the table has none, or none where it has one"
        );
        for node in g.required_nodes {
            assert!(board.device_nodes().contains(node), "{board:?}: {node}");
        }
    }
}

#[test]
fn every_jetson_is_detected_with_board_generation_and_l4t() {
    for board in Board::ALL {
        let host = FakeHost::jetson(board);
        let d = TegraDetection::probe(host.root());
        assert!(d.is_tegra(), "{board:?}: {d:?}");
        assert_eq!(d.generation.map(|g| g.soc), Some(soc(board)), "{board:?}");
        assert_eq!(
            d.generation_from,
            Some("/proc/device-tree/compatible"),
            "{board:?}"
        );
        assert_eq!(d.l4t.as_deref(), Some(board.l4t()), "{board:?}");
        assert_eq!(d.model.as_deref(), Some(board.model()), "{board:?}");
        let matched: Vec<&str> = d.signals.iter().map(|s| s.path).collect();
        for expected in [
            "/proc/device-tree/compatible",
            "/proc/device-tree/model",
            "/proc/device-tree/nvidia,dtsfilename",
            "/sys/devices/soc0/family",
            "/etc/nv_tegra_release",
        ] {
            assert!(
                matched.contains(&expected),
                "{board:?}: {expected} not in {matched:?}"
            );
        }
        // The fake AGX Orin (JetPack 6) has no tegra_chip_id; the others do.
        assert_eq!(
            matched.contains(&"/sys/module/tegra_fuse/parameters/tegra_chip_id"),
            board != Board::Orin,
            "{board:?}"
        );
    }
    let orin = TegraDetection::probe(FakeHost::jetson(Board::Orin).root());
    assert_eq!(orin.module.as_deref(), Some("p3701-0005"));
    assert_eq!(orin.module_name, Some("Jetson AGX Orin"));
}

#[test]
fn each_signal_alone_is_enough_and_generation_falls_back() {
    // Only the chip id: Tegra, generation from it.
    let host = FakeHost::empty();
    host.write("/sys/module/tegra_fuse/parameters/tegra_chip_id", "0x19\n");
    let d = TegraDetection::probe(host.root());
    assert!(d.is_tegra());
    assert_eq!(d.generation.map(|g| g.soc), Some("T194"));
    // Only soc0/family: Tegra, generation unknown.
    let host = FakeHost::empty();
    host.write("/sys/devices/soc0/family", "tegra\n");
    let d = TegraDetection::probe(host.root());
    assert!(d.is_tegra());
    assert_eq!(d.generation, None);
    // Only nv_tegra_release of r38: Thor.
    let host = FakeHost::empty();
    host.write("/etc/nv_tegra_release", Board::Thor.nv_tegra_release());
    let d = TegraDetection::probe(host.root());
    assert_eq!(
        (d.is_tegra(), d.generation.map(|g| g.soc)),
        (true, Some("T264"))
    );
    // dtsfilename alone names the SoC.
    let host = FakeHost::empty();
    host.write(
        "/proc/device-tree/nvidia,dtsfilename",
        "/x/tegra186-quill-p3310-1000-c03-00-base.dts\0",
    );
    let d = TegraDetection::probe(host.root());
    assert_eq!(d.generation.map(|g| g.soc), Some("T186"));
}

#[test]
fn nothing_matched_says_what_was_looked_for_and_where() {
    let host = FakeHost::empty();
    host.write("/sys/devices/soc0/family", "jep106:0426\n");
    let d = TegraDetection::probe(host.root());
    assert!(!d.is_tegra());
    let all = d.looked_for.join("\n");
    let root = host.root().display().to_string();
    for p in [
        "proc/device-tree/compatible",
        "sys/devices/soc0/family",
        "tegra_chip_id",
        "etc/nv_tegra_release",
    ] {
        assert!(
            all.contains(&format!("{root}/{p}")) || all.contains(p),
            "{p} missing in:\n{all}"
        );
    }
    assert!(
        all.contains("jep106:0426"),
        "the non-matching value is shown:\n{all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetsons_advertise_one_tegra_gpu_and_allocate_it() {
    for board in Board::ALL {
        let host = FakeHost::jetson(board);
        let plugin = Plugin::start(host.root(), &["--discovery", "tegra"]).await;
        assert_eq!(plugin.name, "nvidia.com/gpu");
        let devices = plugin.devices();
        assert_eq!(ids(&devices), vec!["tegra"], "{board:?}");
        assert_eq!(devices[0].health, HEALTHY, "{board:?}");
        assert!(devices[0].topology.is_none(), "Jetson has no NUMA topology");
        let (chosen, response) = plugin.kubelet.admit(&plugin.name, 1).await.expect("admit");
        assert_eq!(chosen, vec!["tegra"]);
        assert_eq!(
            response
                .envs
                .get("NVIDIA_VISIBLE_DEVICES")
                .map(String::as_str),
            Some("tegra")
        );
        assert!(
            response.devices.is_empty(),
            "no device specs without --pass-device-specs"
        );
        assert!(response.annotations.is_empty() && response.cdi_devices.is_empty());
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetpack6_and_7_are_hybrid_identity_from_nvml_health_from_both() {
    for board in [Board::Orin, Board::OrinR39, Board::Thor] {
        let fake = board.nvml().expect("JetPack 6+ ships NVML");
        let host = FakeHost::jetson_with_nvml(board);
        let plugin = Plugin::start(host.root(), &["--discovery", "auto"]).await;
        match plugin.resource.platform() {
            Some(Platform::Tegra { detection, nvml }) => {
                assert_eq!(detection.generation.map(|g| g.soc), Some(board.soc()));
                assert_eq!(detection.l4t.as_deref(), Some(board.l4t()));
                let nvml = nvml.as_ref().expect("identity from NVML");
                assert_eq!(
                    (nvml.name.as_str(), nvml.uuid.as_str()),
                    (fake.name.as_str(), fake.uuid.as_str())
                );
            }
            other => panic!("{board:?}: expected hybrid Tegra, got {other:?}"),
        }
        let gpu = &plugin.resource.gpus()[0];
        // NVIDIA's ID for the Jetson GPU stays `tegra`; NVML's UUID is kept for health.
        assert_eq!(gpu.uuid, "tegra");
        assert_eq!(gpu.nvml_uuid.as_deref(), Some(fake.uuid.as_str()));
        assert_eq!(gpu.name, fake.name);
        // NotSupported answers leave the fields empty instead of failing discovery.
        assert_eq!(gpu.memory_bytes, None, "{board:?}");
        assert_eq!(ids(&plugin.devices()), vec!["tegra"]);
        plugin.wait_health("tegra", HEALTHY).await;

        // Health from the files: a required node goes away and comes back.
        let node = board.required_node();
        host.remove_node(node);
        plugin.wait_health("tegra", UNHEALTHY).await;
        host.restore_node(node);
        plugin.wait_health("tegra", HEALTHY).await;

        // Health from NVML: the driver stops answering for the GPU, then answers again;
        // the files are fine all along.
        host.lose_gpu(0);
        plugin.wait_health("tegra", UNHEALTHY).await;
        let reason = plugin
            .resource
            .allocate(&ContainerAllocateRequest {
                devices_ids: vec!["tegra".into()],
            })
            .unwrap_err()
            .message()
            .to_string();
        assert!(
            reason.contains("does not answer NVML"),
            "{board:?}: {reason}"
        );
        host.recover_gpu(0);
        plugin.wait_health("tegra", HEALTHY).await;

        // Both at once: healthy only when both are.
        host.lose_gpu(0);
        host.remove_node(node);
        plugin.wait_health("tegra", UNHEALTHY).await;
        host.recover_gpu(0);
        // Still unhealthy (the node is missing), whatever NVML says.
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        assert_eq!(plugin.devices()[0].health, UNHEALTHY, "{board:?}");
        host.restore_node(node);
        plugin.wait_health("tegra", HEALTHY).await;
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_strategy_gives_0_on_jetson() {
    let host = FakeHost::jetson(Board::Orin);
    let plugin = Plugin::start(
        host.root(),
        &["--discovery=tegra", "--device-id-strategy", "index"],
    )
    .await;
    assert_eq!(ids(&plugin.devices()), vec!["0"]);
    let r = plugin.allocate(&["0"]).await.unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "0");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_specs_per_jetson_generation_only_existing_nodes() {
    let expectations: [(Board, &[&str], &[&str]); 5] = [
        (
            Board::Nano,
            &[
                "/dev/nvhost-ctrl",
                "/dev/nvhost-gpu",
                "/dev/nvhost-as-gpu",
                "/dev/nvmap",
                "/dev/nvhost-vic",
                "/dev/tegra_dc_1",
            ],
            // nvidiactl is absent on the Nano; nvhost-nvjpg is listed in its CSV but missing.
            &["/dev/nvidiactl", "/dev/nvhost-nvjpg"],
        ),
        (
            Board::Xavier,
            &[
                "/dev/nvhost-nvdla0",
                "/dev/nvhost-ctrl-nvdla1",
                "/dev/nvidiactl",
                "/dev/nvmap",
            ],
            // tegra_dc_1 is listed in its CSV but missing on this board.
            &["/dev/tegra_dc_1"],
        ),
        (
            Board::Orin,
            &[
                "/dev/nvgpu/igpu0/ctrl",
                "/dev/nvgpu/igpu0/tsg",
                "/dev/dri/card0",
                "/dev/dri/renderD128",
                "/dev/nvidia0",
                "/dev/nvsciipc",
            ],
            // A directory entry of the CSV and nodes that do not exist are not device specs.
            &["/dev/dri/by-path", "/dev/fb0", "/dev/nvidia-uvm"],
        ),
        (
            Board::OrinR39,
            &[
                "/dev/nvgpu/igpu0/ctrl",
                "/dev/nvidia-uvm",
                "/dev/nvidia-uvm-tools",
                "/dev/nvmap",
                "/dev/nvidia0",
            ],
            // In its CSV and in the table, but not on this board.
            &["/dev/nvidia1", "/dev/fb0"],
        ),
        (
            Board::Thor,
            &[
                "/dev/nvidia0",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/nvgpu/igpu-0000:01:00.0/ctrl",
                "/dev/dri/card0",
            ],
            &["/dev/nvmap"],
        ),
    ];
    for (board, present, absent) in expectations {
        let host = FakeHost::jetson(board);
        let plugin =
            Plugin::start(host.root(), &["--discovery=tegra", "--pass-device-specs"]).await;
        let r = plugin.allocate(&["tegra"]).await.expect("allocate");
        let paths = spec_paths(&r);
        for p in present {
            assert!(
                paths.contains(&p.to_string()),
                "{board:?}: {p} missing from {paths:?}"
            );
        }
        for p in absent {
            assert!(
                !paths.contains(&p.to_string()),
                "{board:?}: {p} must not be in {paths:?}"
            );
        }
        for spec in &r.devices {
            assert_eq!(spec.container_path, spec.host_path);
            assert_eq!(spec.permissions, "rw");
            assert!(
                !spec.host_path.contains(&host.root().display().to_string()),
                "host path, not the root's"
            );
        }
        plugin.stop().await;
    }
}

/// Device specs are not read inside Allocate but kept current from inotify: a node that
/// appears after the start (Thor's `/dev/nvidia-uvm` is created on first CUDA use) or goes
/// away is seen by the next Allocate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_specs_follow_nodes_that_appear_and_vanish_after_start() {
    let host = FakeHost::jetson(Board::Thor);
    host.remove_node("/dev/nvidia-uvm");
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", "--pass-device-specs"]).await;
    let uvm = "/dev/nvidia-uvm".to_string();
    let first = spec_paths(&plugin.allocate(&["tegra"]).await.expect("allocate"));
    assert!(!first.contains(&uvm), "{first:?}");

    host.restore_node("/dev/nvidia-uvm");
    host.remove_node("/dev/dri/card0");
    let deadline = std::time::Instant::now() + gpu_common::WAIT;
    loop {
        let paths = spec_paths(&plugin.allocate(&["tegra"]).await.expect("allocate"));
        if paths.contains(&uvm) && !paths.iter().any(|p| p == "/dev/dri/card0") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "device specs never followed the nodes: {paths:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_host_two_gpus_on_two_numa_nodes() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let plugin = Plugin::start(host.root(), &["--discovery", "nvml", "--pass-device-specs"]).await;
    let devices = plugin.devices();
    assert_eq!(
        ids(&devices),
        vec![gpus[0].uuid.clone(), gpus[1].uuid.clone()]
    );
    let numa: Vec<i64> = devices
        .iter()
        .map(|d| d.topology.as_ref().unwrap().nodes[0].id)
        .collect();
    // GPU 1's node comes from sysfs (its NVML answers NOT_SUPPORTED).
    assert_eq!(numa, vec![0, 1]);
    let res = &plugin.resource;
    assert_eq!(res.gpus()[0].memory_bytes, Some(42_949_672_960));
    assert_eq!(
        res.gpus()[1].pci_bus_id.as_deref(),
        Some("00000000:CA:00.0")
    );
    assert_eq!(res.gpus()[0].name, "NVIDIA A100-SXM4-40GB");

    let r = plugin.allocate(&[&gpus[1].uuid]).await.unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], gpus[1].uuid);
    // /dev/nvidia1 and the control nodes that exist (no nvidia-modeset on this host).
    assert_eq!(
        spec_paths(&r),
        vec![
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia1",
            "/dev/nvidiactl"
        ]
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_host_index_strategy_and_cdi_strategies() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let plugin = Plugin::start(
        host.root(),
        &[
            "--device-id-strategy=index",
            "--device-list-strategy",
            "envvar,cdi-annotations,cdi-cri",
        ],
    )
    .await;
    assert_eq!(ids(&plugin.devices()), vec!["0", "1"]);
    let r = plugin.allocate(&["1", "0"]).await.unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "1,0");
    let cdi: Vec<&str> = r.cdi_devices.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cdi, vec!["nvidia.com/gpu=1", "nvidia.com/gpu=0"]);
    assert_eq!(r.annotations.len(), 1);
    let (key, value) = r.annotations.iter().next().unwrap();
    assert!(key.starts_with("cdi.k8s.io/nvidia-device-plugin_"), "{key}");
    assert_eq!(key.len(), "cdi.k8s.io/nvidia-device-plugin_".len() + 36);
    assert_eq!(value, "nvidia.com/gpu=1,nvidia.com/gpu=0");
    plugin.stop().await;

    // CDI only: no NVIDIA_VISIBLE_DEVICES, but envs is still present (empty).
    let plugin = Plugin::start(host.root(), &["--device-list-strategy", "cdi-cri"]).await;
    let r = plugin.allocate(&[&gpus[0].uuid]).await.unwrap();
    assert!(r.envs.is_empty());
    assert_eq!(
        r.cdi_devices[0].name,
        format!("nvidia.com/gpu={}", gpus[0].uuid)
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetson_cdi_names_the_csv_mode_device_0() {
    let host = FakeHost::jetson(Board::Orin);
    let plugin = Plugin::start(
        host.root(),
        &[
            "--discovery=tegra",
            "--device-list-strategy",
            "cdi-cri,envvar",
        ],
    )
    .await;
    let r = plugin.allocate(&["tegra"]).await.unwrap();
    assert_eq!(r.cdi_devices[0].name, "nvidia.com/gpu=0");
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "tegra");
    plugin.stop().await;
}
