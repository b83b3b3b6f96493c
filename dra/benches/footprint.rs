//! The driver's footprint (printed, never asserted; docs/dra.md quotes it): the binary on a
//! simulated node (Orin with its engines; a discrete server with two H100s) between the fake
//! kubelet and the fake API server — start to slices published and registered, then its RSS
//! and wake-ups while it idles as the DaemonSet's container does, and the time from the
//! kubelet's NodePrepareResources to the answer (the claim's CDI spec on disk before it).
//!
//! Run: `scripts/bench.sh -p edgegpu-dra --bench footprint` (the release binary users run;
//! `EDGEGPU_BENCH_BINARY=dist/edgegpu-<triple>` measures a cross-built one); smoke mode
//! (short windows, as scripts/test.sh runs it): `edgegpu_testkit::bench`. Memory as the
//! device plugin's benchmark counts it: RssAnon, VmHWM, and the working set left after the
//! kernel reclaimed what it can in a cgroup of the driver's own (what a pod's memory limit
//! sees), with VmRSS as it falls out.

use std::process::Stdio;
use std::time::{Duration, Instant};

use edgegpu_testkit::apiserver::FakeApiServer;
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, window};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use edgegpu_testkit::kubelet::{dra_claim, FakeKubelet, FakeKubeletOptions};
use edgegpu_testkit::process::{
    bench_program, binary_command, terminate, unreclaimable_memory, Footprint, OWNERSHIP_DIR_ENV,
};
use serde_json::json;

const NODE: &str = "node-1";
const DRIVER: &str = "edgegpu.io";

async fn run(what: &str, host: FakeHost, discovery: &str, idle_seconds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut options = FakeKubeletOptions::new(dir.path().join("device-plugins"));
    options.plugins_registry = Some(dir.path().join("plugins_registry"));
    let kubelet = FakeKubelet::start_with(options).await.unwrap();
    let api = FakeApiServer::start(NODE, &[]).await;
    let cdi = dir.path().join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    let t0 = Instant::now();
    let binary = bench_program("edgegpu-dra-driver");
    if what.starts_with("Jetson") {
        println!(
            "binary measured: {}",
            std::fs::canonicalize(&binary).unwrap().display()
        );
    }
    let mut child = binary_command(binary)
        .args(["--node-name", NODE, "--discovery", discovery])
        .arg("--root")
        .arg(host.root())
        .arg("--api-server")
        .arg(api.url())
        .arg("--token-file")
        .arg(api.token_file())
        .arg("--ca-file")
        .arg(api.ca_file())
        .arg("--kubelet-registry-dir")
        .arg(dir.path().join("plugins_registry"))
        .arg("--kubelet-plugins-dir")
        .arg(dir.path().join("plugins"))
        .arg("--cdi-dir")
        .arg(&cdi)
        .env(OWNERSHIP_DIR_ENV, dir.path().join("locks"))
        .env("EDGEGPU_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kubelet
        .wait_for_dra_registration(DRIVER, 1, Duration::from_secs(30))
        .await
        .unwrap();
    let registered = t0.elapsed();
    while api.slices().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no slices");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let published = t0.elapsed();
    let devices: Vec<String> = api
        .slices()
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    // Prepare → answer, claim after claim (each a new claim of the first GPU).
    let mut times = Vec::new();
    for i in 0..iterations(50) {
        let uid = format!("00000000-0000-4000-8000-{i:012}");
        api.add_claim(
            "default",
            &format!("c{i}"),
            &uid,
            Some(json!({"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": devices[0]}]}})),
        );
        let claim = dra_claim("default", &format!("c{i}"), &uid);
        let t = Instant::now();
        let answer = kubelet
            .dra_prepare(DRIVER, std::slice::from_ref(&claim))
            .await
            .unwrap();
        times.push(t.elapsed());
        assert_eq!(answer.claims[&uid].error, "");
        kubelet.dra_unprepare(DRIVER, &[claim]).await.unwrap();
    }
    times.sort();
    let pct = |p: usize| times[(times.len() - 1) * p / 100];
    tokio::time::sleep(window(Duration::from_secs(1))).await;
    let pid = child.id();
    let footprint = Footprint::measure(pid, window(Duration::from_secs(idle_seconds))).await;
    let working_set = unreclaimable_memory(pid);
    println!(
        "dra driver, {what} ({} devices): start -> registered {registered:.2?}, slices published {published:.2?}; \
         NodePrepareResources (fetch claim, CDI spec + checkpoint written) median {:.2?} p95 {:.2?} over {}; \
         then idle: {footprint}; working set after reclaim: {working_set}",
        devices.len(),
        pct(50),
        pct(95),
        times.len()
    );
    terminate(pid);
    child.wait().unwrap();
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    announce_smoke_mode();
    rt.block_on(async {
        run(
            "Jetson AGX Orin",
            FakeHost::jetson_with_engines(Board::Orin),
            "tegra",
            5,
        )
        .await;
        let gpus = FakeGpu::two_h100();
        let host = FakeHost::discrete(&gpus);
        host.with_driver_libs();
        run("discrete, 2 H100", host, "nvml", 5).await;
    });
}
