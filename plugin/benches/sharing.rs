//! Sharing figures (printed, never asserted), the real binary on a fake Orin root (L4T r36.4.3)
//! with the testkit's fake kubelet:
//! - Allocate round trip (the kubelet double → the binary over its socket, one caller, 1000
//!   calls) and the binary's steady RSS after them, for: whole GPU, time-slicing (4 replicas),
//!   MPS replicas (4, status ready as the companion reports it), memory units (256 MiB);
//! - config change → new limits: the plugin rebuilt on SIGHUP with another thread percentage,
//!   the real companion (`mps-control-daemon`) running the fake `nvidia-cuda-mps-control`,
//!   timed to `daemons.json` rewritten, to the companion's status `ready` with the new
//!   settings, and to the kubelet seeing the devices healthy again.
//!
//! Run: `cargo bench -p edgegpu-plugin --bench sharing`; smoke mode (a few iterations, short
//! idle windows, as scripts/test.sh runs it): `edgegpu_testkit::bench`.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use edgegpu_kubelet_api::v1beta1::HEALTHY;
use edgegpu_node::mps::status::{self, State, Status};
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, window};
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::kubelet::FakeKubelet;
use edgegpu_testkit::process::{binary_command, machine_line, terminate, Footprint};

/// The program under test, as its manifests run it (a link to the multi-call binary).
fn bin() -> std::path::PathBuf {
    edgegpu_testkit::process::program("edgegpu-device-plugin")
}
const WAIT: Duration = Duration::from_secs(30);

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.0?} p99 {:.0?} max {:.0?}",
        pick(0.5),
        pick(0.99),
        samples[samples.len() - 1]
    )
}

/// Waits until `f` holds (polling: the bench's own loop, not the plugin's).
async fn until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    t0.elapsed()
}

fn spawn_plugin(host: &FakeHost, plugin_dir: &Path, config: &Path, mps_root: &Path) -> Child {
    binary_command(bin())
        .arg("--device-plugin-path")
        .arg(plugin_dir)
        .arg("--root")
        .arg(host.root())
        .arg("--discovery=tegra")
        .arg("--config")
        .arg(config)
        .arg("--mps-root")
        .arg(mps_root)
        .arg("--metrics-bind-address=127.0.0.1:0")
        .arg("--pod-resources-socket=")
        .arg("--feature-file=")
        .env("EDGEGPU_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Allocate latency and RSS under one sharing config.
async fn allocate_and_footprint(name: &str, yaml: &str, resource: &str) {
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("dp");
    let mps_root = dir.path().join("mps");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, yaml).unwrap();
    let kubelet = FakeKubelet::start(&plugin_dir).await.unwrap();
    let mut child = spawn_plugin(&host, &plugin_dir, &config, &mps_root);
    kubelet.wait_for_registration(resource, WAIT).await.unwrap();
    // MPS: report the daemon ready, as the companion would once it runs.
    if let Ok(Some(desired)) = status::read_desired(&mps_root) {
        for settings in desired.daemons {
            let path = mps_root.join(&settings.resource).join("status.json");
            let ready = Status {
                state: State::Ready,
                reason: None,
                pid: None,
                restarts: 0,
                settings,
            };
            status::write(&path, &ready).unwrap();
        }
    }
    kubelet
        .wait_until("healthy", WAIT, |k| {
            let d = k.devices(resource);
            !d.is_empty() && d.iter().all(|x| x.health == HEALTHY)
        })
        .await
        .unwrap();
    let id = kubelet.devices(resource)[0].id.clone();
    let calls = iterations(1000);
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t0 = Instant::now();
        kubelet.allocate(resource, &[&id]).await.unwrap();
        samples.push(t0.elapsed());
    }
    tokio::time::sleep(window(Duration::from_secs(1))).await;
    let footprint = Footprint::measure(child.id(), window(Duration::from_secs(3))).await;
    println!(
        "{name:<28} Allocate round trip {} | steady state {footprint}",
        summary(samples)
    );
    terminate(child.id());
    let _ = child.wait();
}

/// SIGHUP with a changed thread percentage → new limits in force.
async fn config_change_to_new_limits(rounds: usize) {
    let rounds = iterations(rounds);
    let host = FakeHost::jetson(Board::Orin);
    host.install_mps_control_runnable(edgegpu_testkit::mps::HOST_PATH);
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("dp");
    let mps_root = dir.path().join("mps");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let config = dir.path().join("config.yaml");
    let write_config = |pct: u32| {
        std::fs::write(
            &config,
            format!("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n      activeThreadPercentage: {pct}\n"),
        )
        .unwrap();
    };
    write_config(25);
    let mut companion = edgegpu_testkit::mps::companion_command(&bin(), host.root(), &mps_root)
        .env("EDGEGPU_LOG", "warn")
        .spawn()
        .unwrap();
    let kubelet = FakeKubelet::start(&plugin_dir).await.unwrap();
    let mut plugin = spawn_plugin(&host, &plugin_dir, &config, &mps_root);
    let gpu = "nvidia.com/gpu";
    let healthy = |k: &FakeKubelet| {
        let d = k.devices(gpu);
        !d.is_empty() && d.iter().all(|x| x.health == HEALTHY)
    };
    kubelet.wait_for_registration(gpu, WAIT).await.unwrap();
    kubelet.wait_until("healthy", WAIT, healthy).await.unwrap();
    let status_path = mps_root.join(gpu).join("status.json");
    let pct_of = |p: &Path| {
        status::read(p)
            .ok()
            .flatten()
            .filter(|s| s.state == State::Ready)
            .and_then(|s| s.settings.active_thread_percentage)
    };
    let (mut desired, mut ready, mut served) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let pct = if round % 2 == 0 { 50 } else { 25 };
        write_config(pct);
        let registrations = kubelet.registration_count();
        let t0 = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(plugin.id() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        let root = mps_root.clone();
        until("daemons.json", || {
            status::read_desired(&root)
                .ok()
                .flatten()
                .is_some_and(|d| d.daemons[0].active_thread_percentage == Some(pct))
        })
        .await;
        desired.push(t0.elapsed());
        until("status ready", || pct_of(&status_path) == Some(pct)).await;
        ready.push(t0.elapsed());
        kubelet
            .wait_for_registrations(gpu, registrations + 1, WAIT)
            .await
            .unwrap();
        kubelet.wait_until("healthy", WAIT, healthy).await.unwrap();
        served.push(t0.elapsed());
    }
    println!(
        "config change (SIGHUP, {rounds} rounds) -> daemons.json rewritten: {}",
        summary(desired)
    );
    println!(
        "  -> companion's daemon ready with the new limits: {}",
        summary(ready)
    );
    println!(
        "  -> kubelet sees the devices healthy again: {}",
        summary(served)
    );
    terminate(plugin.id());
    let _ = plugin.wait();
    terminate(companion.id());
    let _ = companion.wait();
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    println!("{}", machine_line());
    announce_smoke_mode();
    rt.block_on(async {
        allocate_and_footprint("whole GPU", "version: v1\n", "nvidia.com/gpu").await;
        allocate_and_footprint(
            "time-slicing, 4 replicas",
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n",
            "nvidia.com/gpu",
        )
        .await;
        allocate_and_footprint(
            "MPS, 4 replicas",
            "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n",
            "nvidia.com/gpu",
        )
        .await;
        allocate_and_footprint(
            "memory units of 256 MiB",
            "version: v1\nsharing:\n  gpuMemory:\n    resources:\n    - {name: nvidia.com/gpu}\n",
            "nvidia.com/gpu-mem",
        )
        .await;
        config_change_to_new_limits(10).await;
    });
}
