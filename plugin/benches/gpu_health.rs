//! Figures for the GPU side of the plugin, on simulated hosts (no GPU needed):
//!
//! - Tegra health latency: a device node removed/restored → the device list on the watch
//!   channel ListAndWatch streams from (target ≤ 100 ms);
//! - NVML XID latency through the fake libnvidia-ml (its event wait polls every 10 ms);
//! - Allocate cost with `--pass-device-specs` (reads the CSV files and globs /dev each time);
//! - discovery time per simulated board (files only, and hybrid with NVML on JetPack 6+), a
//!   discrete server and a MIG server.
//!
//! `cargo bench -p edgegpu-plugin --bench gpu_health`; smoke mode (a few iterations, as
//! scripts/test.sh runs it): `edgegpu_testkit::bench`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use edgegpu_kubelet_api::v1beta1::{ContainerAllocateRequest, Device, HEALTHY, UNHEALTHY};
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::Cli;
use edgegpu_plugin::{build_gpu_resource, build_gpu_resources, GpuResource};
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, print_latencies};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use tokio::sync::watch;

fn cli(root: &Path, args: &[&str]) -> Cli {
    let mut argv = vec![
        "edgegpu-device-plugin".to_string(),
        "--root".into(),
        root.display().to_string(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    Cli::try_parse_from(argv).unwrap()
}

async fn resource(root: &Path, args: &[&str]) -> Arc<GpuResource> {
    let cli = cli(root, args);
    build_gpu_resource(&cli.root, &cli.resource_name, &cli.gpu)
        .await
        .unwrap()
}

async fn wait_for(rx: &mut watch::Receiver<Vec<Device>>, id: &str, health: &str) -> Duration {
    let start = Instant::now();
    loop {
        if rx
            .borrow_and_update()
            .iter()
            .any(|d| d.id == id && d.health == health)
        {
            return start.elapsed();
        }
        tokio::time::timeout(Duration::from_secs(30), rx.changed())
            .await
            .expect("health change within 30 s")
            .unwrap();
    }
}

async fn tegra_health_latency() {
    let host = FakeHost::jetson(Board::Orin);
    let res = resource(host.root(), &["--discovery=tegra"]).await;
    let mut rx = res.devices();
    let (mut lost, mut back) = (Vec::new(), Vec::new());
    for _ in 0..iterations(100) {
        // Timed from just before the change, so the figure includes the filesystem operation.
        let t = Instant::now();
        host.remove_node("/dev/nvmap");
        wait_for(&mut rx, "tegra", UNHEALTHY).await;
        lost.push(t.elapsed());
        let t = Instant::now();
        host.restore_node("/dev/nvmap");
        wait_for(&mut rx, "tegra", HEALTHY).await;
        back.push(t.elapsed());
    }
    print_latencies("tegra: /dev/nvmap removed → Unhealthy published", lost);
    print_latencies("tegra: /dev/nvmap restored → Healthy published", back);

    let mut sysfs = Vec::new();
    for _ in 0..iterations(50) {
        let t = Instant::now();
        host.break_gpu_sysfs();
        wait_for(&mut rx, "tegra", UNHEALTHY).await;
        sysfs.push(t.elapsed());
        host.restore_gpu_sysfs();
        wait_for(&mut rx, "tegra", HEALTHY).await;
    }
    print_latencies("tegra: GPU load file unreadable → Unhealthy", sysfs);
}

async fn nvml_xid_latency() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let res = resource(host.root(), &["--health-recovery-seconds=1"]).await;
    let mut rx = res.devices();
    let mut xid = Vec::new();
    for _ in 0..iterations(10) {
        let t = Instant::now();
        host.inject_xid(0, 79);
        wait_for(&mut rx, &gpus[0].uuid, UNHEALTHY).await;
        xid.push(t.elapsed());
        // Recovery: 1 s without a new XID, seen at the next probe round (≤ 2 s later).
        wait_for(&mut rx, &gpus[0].uuid, HEALTHY).await;
    }
    print_latencies(
        "nvml: critical XID injected → Unhealthy (fake polls 10 ms)",
        xid,
    );
}

async fn allocate_cost() {
    for (board, args) in [
        (
            Some(Board::Orin),
            &["--discovery=tegra", "--pass-device-specs"][..],
        ),
        (Some(Board::Orin), &["--discovery=tegra"][..]),
        (
            None,
            &[
                "--pass-device-specs",
                "--device-list-strategy=envvar,cdi-annotations,cdi-cri",
            ][..],
        ),
    ] {
        let gpus = FakeGpu::two_on_two_numa_nodes();
        let host = match board {
            Some(b) => FakeHost::jetson(b),
            None => FakeHost::discrete(&gpus),
        };
        let res = resource(host.root(), args).await;
        let id = res.devices().borrow()[0].id.clone();
        let request = ContainerAllocateRequest {
            devices_ids: vec![id],
        };
        let mut samples = Vec::new();
        for _ in 0..iterations(2000) {
            let t = Instant::now();
            let r = res.allocate(&request).unwrap();
            samples.push(t.elapsed());
            std::hint::black_box(r);
        }
        let label = format!(
            "allocate {} {}",
            if board.is_some() { "orin" } else { "dgpu" },
            args.join(" ")
        );
        print_latencies(&label, samples);
    }
}

async fn discovery_time() {
    // Files only (--discovery tegra), every generation.
    for board in Board::ALL {
        let mut samples = Vec::new();
        for _ in 0..iterations(20) {
            let host = FakeHost::jetson(board);
            let t = Instant::now();
            let res = resource(host.root(), &["--discovery=tegra", "--health-checks=false"]).await;
            samples.push(t.elapsed());
            drop(res);
        }
        print_latencies(&format!("discovery (tegra) {}", board.name()), samples);
    }
    // JetPack 6+: auto, NVML loaded (a fresh copy per root) and the hybrid Tegra probe.
    for board in Board::ALL.into_iter().filter(|b| b.nvml().is_some()) {
        let mut samples = Vec::new();
        for _ in 0..iterations(20) {
            let host = FakeHost::jetson_with_nvml(board);
            let t = Instant::now();
            let res = resource(host.root(), &["--discovery=auto", "--health-checks=false"]).await;
            samples.push(t.elapsed());
            drop(res);
        }
        print_latencies(
            &format!("discovery (auto, hybrid incl. dlopen) {}", board.name()),
            samples,
        );
    }
    let mut samples = Vec::new();
    for _ in 0..iterations(20) {
        let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
        let t = Instant::now();
        let res = resource(host.root(), &["--discovery=nvml", "--health-checks=false"]).await;
        samples.push(t.elapsed());
        drop(res);
    }
    print_latencies("discovery (nvml, fake, 2 GPUs incl. dlopen)", samples);
    let mut samples = Vec::new();
    for _ in 0..iterations(20) {
        let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
        let t = Instant::now();
        let node = build_gpu_resources(
            host.root(),
            "nvidia.com/gpu",
            &cli(
                host.root(),
                &["--mig-strategy=mixed", "--health-checks=false"],
            )
            .gpu,
        )
        .await
        .unwrap();
        samples.push(t.elapsed());
        drop(node);
    }
    print_latencies("discovery (nvml, MIG mixed: 3 resources)", samples);
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we do not support.
    announce_smoke_mode();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        tegra_health_latency().await;
        nvml_xid_latency().await;
        allocate_cost().await;
        discovery_time().await;
    });
}
