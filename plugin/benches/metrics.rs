//! Figures for `/metrics` (printed, never asserted; docs/metrics.md quotes them):
//!
//! - one scrape rendered in process (sensors read, text built) on simulated Nano, Orin and
//!   Thor roots, a two-GPU fake-NVML server and a MIG server (`--mig-strategy mixed`): wall time p50/p99 and CPU per scrape
//!   (target ≤ 1 ms CPU on a Jetson tree), without and with the pod-resources call;
//! - a full HTTP scrape through the real binary (`GET /metrics` over TCP);
//! - the real binary's RSS with metrics off and on, and its idle context switches with the
//!   endpoint open (on a Jetson the throttling sampler looks at the GPU once a second; nothing
//!   else wakes the process between scrapes).
//!
//! Run: `cargo bench -p edgegpu-plugin --bench metrics`; smoke mode (a few iterations, short
//! idle windows, as scripts/test.sh runs it): `edgegpu_testkit::bench`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use edgegpu_node::gpu::sysfs::GpuSysfs;
use edgegpu_node::power::{throttle, PowerFacts};
use edgegpu_plugin::kubelet::stats::KubeletStats;
use edgegpu_plugin::metrics::MetricsSource;
use edgegpu_plugin::{build_gpu_resources, Cli};
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, window};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use edgegpu_testkit::kubelet::FakeKubelet;
use edgegpu_testkit::pod_resources::FakePodResources;
use edgegpu_testkit::process::{binary_command, cpu_time_us, machine_line, terminate, Footprint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(30);

/// CPU time (user + system) of a whole process (`self` or a pid), in microseconds.
fn cpu_us(process: &str) -> u64 {
    cpu_time_us(&format!("/proc/{process}/stat"))
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:>9.2?}  p99 {:>9.2?}  max {:>9.2?}",
        pick(0.5),
        pick(0.99),
        samples[samples.len() - 1]
    )
}

async fn source_for(host: &FakeHost, args: &[&str], pods: Option<&Path>) -> MetricsSource {
    source_with(host, args, pods, true).await
}

/// [`source_for`], with or without a Jetson's power series.
async fn source_with(
    host: &FakeHost,
    args: &[&str],
    pods: Option<&Path>,
    with_power: bool,
) -> MetricsSource {
    let mut argv = vec![
        "edgegpu-device-plugin".to_string(),
        "--root".into(),
        host.root().display().to_string(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    let cli = Cli::try_parse_from(argv).unwrap();
    let node = build_gpu_resources(&cli.root, &cli.resource_name, &cli.gpu)
        .await
        .unwrap();
    let source = MetricsSource::new(
        node.resources,
        Arc::new(KubeletStats::default()),
        pods.map(Path::to_path_buf),
        "bench-node".into(),
    );
    // A Jetson's power series too, as the binary serves them (mode, ceilings, every
    // thermal zone, throttling).
    let devfreq = GpuSysfs::find(&cli.root, None, None).devfreq;
    let power = PowerFacts::read(&cli.root, devfreq.as_deref());
    if with_power && power.followable() {
        source.set_power(cli.root.clone(), power, Some(Arc::default()));
    }
    source
}

/// Renders `rounds` scrapes on this (current-thread) runtime, like the binary.
async fn scrape_cost(what: &str, source: &MetricsSource, rounds: usize) {
    let rounds = iterations(rounds);
    let mut bytes = 0;
    for _ in 0..iterations(20) {
        bytes = source.render().await.len();
    }
    let mut samples = Vec::with_capacity(rounds);
    let cpu_before = cpu_us("self");
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(source.render().await);
        samples.push(t.elapsed());
    }
    let cpu = cpu_us("self") - cpu_before;
    println!(
        "{what:<44} {}  CPU {:>6.1} µs/scrape  ({bytes} bytes)",
        summary(samples),
        cpu as f64 / rounds as f64
    );
}

async fn in_process(rounds: usize) {
    for board in [Board::Nano, Board::Orin, Board::Thor] {
        let host = FakeHost::jetson(board);
        host.set_nvmap_used_kb(123_456);
        let source = source_for(&host, &["--discovery=tegra"], None).await;
        scrape_cost(
            &format!("render, {} (sysfs)", board.name()),
            &source,
            rounds,
        )
        .await;
    }
    // What the power series add to a scrape, and one look of the throttling sampler (once
    // a second between scrapes).
    let host = FakeHost::jetson(Board::Orin);
    let source = source_with(&host, &["--discovery=tegra"], None, false).await;
    scrape_cost("render, orin without the power series", &source, rounds).await;
    let devfreq = GpuSysfs::find(host.root(), None, None).devfreq;
    let facts = PowerFacts::read(host.root(), devfreq.as_deref());
    let sampler = throttle::Sampler::new(host.root(), &facts).expect("Orin's GPU devfreq");
    let looks = iterations(rounds);
    let cpu_before = cpu_us("self");
    for _ in 0..looks {
        std::hint::black_box(sampler.look());
    }
    println!(
        "{:<44} CPU {:>6.1} µs/look",
        "throttling sampler, orin",
        (cpu_us("self") - cpu_before) as f64 / looks as f64
    );

    let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
    for gpu in 0..2 {
        host.set_nvml_telemetry(
            gpu,
            &[
                ("gpu_util", 50),
                ("sm_clock", 1410),
                ("mem_clock", 1215),
                ("temp", 60),
                ("power_mw", 200_000),
            ],
        );
    }
    let source = source_for(&host, &["--discovery=nvml"], None).await;
    scrape_cost("render, 2 GPUs (fake NVML, reads files)", &source, rounds).await;
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let source = source_for(&host, &["--mig-strategy=mixed"], None).await;
    scrape_cost(
        "render, MIG server (3 GPU instances + 1 GPU)",
        &source,
        rounds,
    )
    .await;

    // The pod-resources call: a fresh unix-socket gRPC connection per scrape (the fake
    // kubelet answers in this process, so its CPU is counted too).
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    pods.assign("ml", "infer", "app", "nvidia.com/gpu", &["tegra"]);
    let source = source_for(&host, &["--discovery=tegra"], Some(pods.socket())).await;
    scrape_cost("render, orin + pod-resources List", &source, rounds).await;
}

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

async fn http_get(addr: SocketAddr) -> usize {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    assert!(out.starts_with(b"HTTP/1.1 200"), "scrape failed");
    out.len()
}

/// The real binary on a fake Orin root, with metrics off or on.
async fn binary(metrics: bool, idle_seconds: u64) {
    let bin = &edgegpu_testkit::process::program("edgegpu-device-plugin");
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let addr = free_port();
    let mut cmd = binary_command(bin);
    cmd.arg("--device-plugin-path")
        .arg(dir.path())
        .arg("--root")
        .arg(host.root())
        .arg("--feature-file=")
        .arg("--pod-resources-socket=")
        .env("EDGEGPU_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if metrics {
        cmd.arg(format!("--metrics-bind-address={addr}"));
    }
    let mut child = cmd.spawn().unwrap();
    kubelet
        .wait_for_registration("nvidia.com/gpu", WAIT)
        .await
        .unwrap();
    let pid = child.id();
    let mut scrape_line = String::new();
    if metrics {
        let mut samples = Vec::new();
        let cpu_before = cpu_us(&pid.to_string());
        let scrapes = iterations(200);
        for _ in 0..scrapes {
            let t = Instant::now();
            http_get(addr).await;
            samples.push(t.elapsed());
        }
        let cpu = cpu_us(&pid.to_string()) - cpu_before;
        scrape_line = format!(
            "; {scrapes} HTTP scrapes: {}, plugin CPU {:.1} µs/scrape",
            summary(samples),
            cpu as f64 / scrapes as f64
        );
    }
    tokio::time::sleep(window(Duration::from_secs(1))).await;
    let footprint = Footprint::measure(pid, window(Duration::from_secs(idle_seconds))).await;
    println!(
        "binary, metrics {:<3}: {footprint}{scrape_line}",
        if metrics { "on" } else { "off" }
    );
    terminate(pid);
    child.wait().unwrap();
}

fn main() {
    println!("{}", machine_line());
    announce_smoke_mode();
    // One thread, like the binary (blocking sensor reads go to tokio's blocking pool).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        in_process(2000).await;
        binary(false, 5).await;
        binary(true, 5).await;
    });
}
