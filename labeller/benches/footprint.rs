//! The labeller's footprint (printed, never asserted; docs/labels.md quotes it): the release
//! binary labels a simulated node through the testkit's fake HTTPS API server, then sleeps as
//! the node-labeller DaemonSet's container does; its RSS and wake-ups while it sleeps, and how
//! long labelling took.
//!
//! Run: `cargo bench -p edgegpu-labeller --bench footprint`; smoke mode (short idle windows,
//! as scripts/test.sh runs it): `edgegpu_testkit::bench`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use edgegpu_testkit::apiserver::FakeApiServer;
use edgegpu_testkit::bench::{announce_smoke_mode, window};
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::process::{binary_command, terminate, Footprint};

const NODE: &str = "node-1";

async fn run(kind_only: bool, idle_seconds: u64) {
    let host = FakeHost::jetson(Board::Orin);
    let api = FakeApiServer::start(NODE, &[]).await;
    let mut cmd = binary_command(edgegpu_testkit::process::bench_program("edgegpu-labeller"));
    cmd.arg("--root")
        .arg(host.root())
        .arg("--api-server")
        .arg(api.url())
        .arg("--token-file")
        .arg(api.token_file())
        .arg("--ca-file")
        .arg(api.ca_file())
        .arg("--wait")
        .env("NODE_NAME", NODE)
        .env("EDGEGPU_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if kind_only {
        cmd.arg("--kind-only");
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let key = if kind_only {
        "edgegpu.io/gpu"
    } else {
        "nvidia.com/gpu.product"
    };
    while !api.labels(NODE).contains_key(key) {
        assert!(t0.elapsed() < Duration::from_secs(30), "not labelled");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let labelled = t0.elapsed();
    tokio::time::sleep(window(Duration::from_secs(1))).await;
    let pid = child.id();
    let footprint = Footprint::measure(pid, window(Duration::from_secs(idle_seconds))).await;
    println!(
        "labeller{}: start -> labelled {labelled:.2?}; then sleeping: {footprint}",
        if kind_only {
            " --kind-only"
        } else {
            " (full set)"
        },
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
        run(true, 5).await;
        run(false, 5).await;
    });
}
