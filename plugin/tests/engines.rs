//! DLA and PVA engines as `nvidia.com/dla` / `nvidia.com/pva` through the fake kubelet:
//! which resources each fake board advertises, what Allocate answers, and health that flips
//! to Unhealthy when an engine's node disappears or its driver is unbound, and back.

use crate::gpu_common;

use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::{ContainerAllocateResponse, HEALTHY, UNHEALTHY};
use edgegpu_plugin::engine_resource::EngineResource;
use edgegpu_plugin::node::build_engine_resources;
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::serve_all;
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::kubelet::FakeKubelet;
use gpu_common::{cli, WAIT};
use tokio::sync::oneshot;

/// The engine resources the plugin builds for `host` with `args`.
async fn engines_of(host: &FakeHost, args: &[&str]) -> Vec<Arc<EngineResource>> {
    let dir = tempfile::tempdir().unwrap();
    let cli = cli(host.root(), dir.path(), args);
    build_engine_resources(&cli.root, &cli.gpu)
        .await
        .expect("engine resources")
}

/// `resource name: ids` per resource.
fn summary(resources: &[Arc<EngineResource>]) -> Vec<String> {
    resources
        .iter()
        .map(|r| {
            let ids: Vec<String> = r.engines().iter().map(|e| e.id()).collect();
            format!("{}: {}", r.resource_name(), ids.join(","))
        })
        .collect()
}

#[tokio::test]
async fn resources_per_board() {
    let cases: [(Board, &[&str]); 5] = [
        (Board::Nano, &[]),
        (
            Board::Xavier,
            &["nvidia.com/dla: dla0,dla1", "nvidia.com/pva: pva0,pva1"],
        ),
        (
            Board::Orin,
            &["nvidia.com/dla: dla0,dla1", "nvidia.com/pva: pva0"],
        ),
        (
            Board::OrinR39,
            &["nvidia.com/dla: dla0,dla1", "nvidia.com/pva: pva0"],
        ),
        (Board::Thor, &["nvidia.com/pva: pva0"]),
    ];
    for (board, want) in cases {
        let host = FakeHost::jetson_with_engines(board);
        assert_eq!(summary(&engines_of(&host, &[]).await), want, "{board:?}");
    }
}

#[tokio::test]
async fn a_module_with_one_dla_node_gets_one_dla_and_none_is_never_empty() {
    // Orin NX 8 GB: the table allows two, the host shows one.
    let host = FakeHost::jetson_with_engines(Board::OrinR39);
    host.remove_engine("dla", 1);
    assert_eq!(
        summary(&engines_of(&host, &[]).await),
        ["nvidia.com/dla: dla0", "nvidia.com/pva: pva0"]
    );
    // Orin Nano: fused off, no nodes, no resource at all (not an empty one).
    let nano = FakeHost::jetson_with_engines(Board::OrinR39);
    for (k, i) in [("dla", 0), ("dla", 1), ("pva", 0)] {
        nano.remove_engine(k, i);
    }
    assert!(engines_of(&nano, &[]).await.is_empty());
}

#[tokio::test]
async fn engines_can_be_turned_off() {
    let host = FakeHost::jetson_with_engines(Board::Orin);
    assert!(engines_of(&host, &["--engines=false"]).await.is_empty());
    assert_eq!(engines_of(&host, &["--engines=true"]).await.len(), 2);
}

/// The engine resources of `host` served to a fake kubelet.
struct Served {
    kubelet: FakeKubelet,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
    resources: Vec<Arc<EngineResource>>,
}

async fn serve(host: &FakeHost, args: &[&str]) -> Served {
    let dir = tempfile::Builder::new().prefix("dp-").tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.expect("fake kubelet");
    let cli = cli(host.root(), dir.path(), args);
    let resources = build_engine_resources(&cli.root, &cli.gpu).await.unwrap();
    let served: Vec<Arc<dyn Resource>> = resources
        .iter()
        .map(|r| r.clone() as Arc<dyn Resource>)
        .collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_all(served, cli.lifecycle_options(), async move {
        let _ = stopped.await;
    }));
    for r in &resources {
        kubelet
            .wait_for_registration(r.resource_name(), WAIT)
            .await
            .expect("registration");
    }
    Served {
        kubelet,
        stop,
        task,
        _dir: dir,
        resources,
    }
}

impl Served {
    async fn wait_health(&self, resource: &str, id: &str, health: &str) {
        self.kubelet
            .wait_until(&format!("{resource} {id} {health}"), WAIT, |k| {
                k.devices(resource)
                    .iter()
                    .any(|d| d.id == id && d.health == health)
            })
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("join").expect("clean shutdown");
    }
}

fn paths(r: &ContainerAllocateResponse) -> Vec<&str> {
    r.devices.iter().map(|d| d.host_path.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_answers() {
    // Xavier, R35: each core has a ctrl and a plain node. Core 1 comes with every DLA node,
    // so index 1 names the same core in the container as on the host (docs/engines.md).
    let host = FakeHost::jetson_with_engines(Board::Xavier);
    let s = serve(&host, &[]).await;
    assert_eq!(s.kubelet.devices("nvidia.com/dla").len(), 2);
    let r = s
        .kubelet
        .allocate("nvidia.com/dla", &["dla1"])
        .await
        .unwrap();
    assert_eq!(
        r.envs.get("EDGEGPU_DLA_CORES").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        paths(&r),
        [
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-nvdla0",
            "/dev/nvhost-ctrl-nvdla1",
            "/dev/nvhost-nvdla1"
        ]
    );
    assert!(r.cdi_devices.is_empty());
    let all_pva = [
        "/dev/nvhost-ctrl-pva0",
        "/dev/nvhost-pva0",
        "/dev/nvhost-ctrl-pva1",
        "/dev/nvhost-pva1",
        "/dev/nvmap",
    ];
    let r = s
        .kubelet
        .allocate("nvidia.com/pva", &["pva1"])
        .await
        .unwrap();
    assert_eq!(
        r.envs.get("EDGEGPU_PVA_INSTANCES").map(String::as_str),
        Some("1")
    );
    assert_eq!(paths(&r), all_pva);
    let r = s
        .kubelet
        .allocate("nvidia.com/pva", &["pva1", "pva0"])
        .await
        .unwrap();
    assert_eq!(
        r.envs.get("EDGEGPU_PVA_INSTANCES").map(String::as_str),
        Some("0,1")
    );
    assert_eq!(paths(&r), all_pva);
    // An ID the kubelet never saw does not reach the plugin; the plugin refuses it too.
    let unknown = edgegpu_kubelet_api::v1beta1::ContainerAllocateRequest {
        devices_ids: vec!["dla7".to_string()],
    };
    let err = s.resources[0].allocate(&unknown).unwrap_err();
    assert!(err.message().contains("dla7"), "{err:?}");
    s.stop().await;

    // Orin, R36: control nodes only; every DLA control node so core indices keep their
    // host meaning, the env var names the one the scheduler gave. The PVA gets nvmap.
    let host = FakeHost::jetson_with_engines(Board::Orin);
    let s = serve(&host, &[]).await;
    let r = s
        .kubelet
        .allocate("nvidia.com/dla", &["dla1"])
        .await
        .unwrap();
    assert_eq!(
        r.envs.get("EDGEGPU_DLA_CORES").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        paths(&r),
        ["/dev/nvhost-ctrl-nvdla0", "/dev/nvhost-ctrl-nvdla1"]
    );
    let r = s
        .kubelet
        .allocate("nvidia.com/pva", &["pva0"])
        .await
        .unwrap();
    assert_eq!(paths(&r), ["/dev/nvhost-ctrl-pva0", "/dev/nvmap"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_with_cdi_strategies_names_cdi_devices() {
    let host = FakeHost::jetson_with_engines(Board::Orin);
    let s = serve(&host, &["--device-list-strategy=cdi-cri,cdi-annotations"]).await;
    let r = s
        .kubelet
        .allocate("nvidia.com/dla", &["dla0"])
        .await
        .unwrap();
    let names: Vec<&str> = r.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["nvidia.com/dla=0"]);
    assert_eq!(
        r.annotations.values().cloned().collect::<Vec<_>>(),
        ["nvidia.com/dla=0"]
    );
    assert!(r.devices.is_empty());
    assert_eq!(
        r.envs.get("EDGEGPU_DLA_CORES").map(String::as_str),
        Some("0")
    );
    let r = s
        .kubelet
        .allocate("nvidia.com/pva", &["pva0"])
        .await
        .unwrap();
    let names: Vec<&str> = r.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["nvidia.com/pva=pva0"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_node_and_the_driver_and_recovers() {
    let host = FakeHost::jetson_with_engines(Board::Orin);
    let s = serve(&host, &[]).await;
    s.wait_health("nvidia.com/dla", "dla1", HEALTHY).await;
    // Idle engines are runtime-suspended: that is not a fault.
    host.set_engine_runtime_status("dla", 1, "suspended");

    host.remove_node("/dev/nvhost-ctrl-nvdla1");
    s.wait_health("nvidia.com/dla", "dla1", UNHEALTHY).await;
    s.wait_health("nvidia.com/dla", "dla0", HEALTHY).await;
    let err = s
        .kubelet
        .allocate("nvidia.com/dla", &["dla1"])
        .await
        .unwrap_err();
    assert!(err.message().contains("unhealthy"), "{err:?}");
    host.restore_node("/dev/nvhost-ctrl-nvdla1");
    s.wait_health("nvidia.com/dla", "dla1", HEALTHY).await;

    host.set_engine_driver_bound("pva", 0, false);
    s.wait_health("nvidia.com/pva", "pva0", UNHEALTHY).await;
    host.set_engine_driver_bound("pva", 0, true);
    s.wait_health("nvidia.com/pva", "pva0", HEALTHY).await;
    s.stop().await;
}

#[tokio::test]
async fn metrics_per_engine_where_the_kernel_gives_them() {
    use edgegpu_plugin::kubelet::stats::KubeletStats;
    use edgegpu_plugin::metrics::MetricsSource;
    let host = FakeHost::jetson_with_engines(Board::Orin);
    let resources = engines_of(&host, &["--health-checks=false"]).await;
    let src = MetricsSource::new(
        Vec::new(),
        Arc::new(KubeletStats::default()),
        None,
        "node-1".into(),
    );
    src.set_engines(
        host.root().to_path_buf(),
        resources
            .iter()
            .flat_map(|r| r.engines().to_vec())
            .collect(),
    );
    host.set_engine_runtime_status("dla", 0, "active");
    host.set_engine_clock("dla", 0, 1_600_000_000);
    // No debugfs clock for pva0 (root-only, not mounted): no sample, no error.
    std::fs::remove_dir_all(host.path("/sys/kernel/debug/clk/pva0_vps")).unwrap();
    let text = src.render().await;
    for line in [
        "edgegpu_engine_active{engine=\"dla0\",kind=\"dla\",Hostname=\"node-1\"} 1",
        "edgegpu_engine_active{engine=\"dla1\",kind=\"dla\",Hostname=\"node-1\"} 0",
        "edgegpu_engine_active{engine=\"pva0\",kind=\"pva\",Hostname=\"node-1\"} 0",
        "edgegpu_engine_clock_hertz{engine=\"dla0\",kind=\"dla\",Hostname=\"node-1\"} 1600000000",
        "edgegpu_engine_clock_hertz{engine=\"dla1\",kind=\"dla\",Hostname=\"node-1\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    assert!(
        !text.contains("edgegpu_engine_clock_hertz{engine=\"pva0\""),
        "{text}"
    );
}
