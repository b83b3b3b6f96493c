//! Figures for ResourceSlice publishing (printed, never asserted): `SlicePublisher::publish`
//! against the fake API server (HTTPS on loopback, one connection per request as the client
//! makes them) for a Jetson AGX Orin (4 devices: GPU, 2 DLA, PVA) and a big node (8 GPUs × 7
//! MIG devices = 56 devices): the first publish (node lookup, list, create), an update (one
//! attribute changed: list, update) and an unchanged publish (list only). Wall time per
//! publish, median and p95, and the requests it made.
//!
//! Run: `cargo bench -p edgegpu-dra --bench publish`; smoke mode (a few iterations):
//! `edgegpu_testkit::bench`.

#[path = "../tests/api_common/mod.rs"]
mod api_common;

use std::time::{Duration, Instant};

use api_common::{client, jetson_devices, mig_node_devices, NODE};
use edgegpu_dra::api_versions::{ResourceApi, ResourceVersion};
use edgegpu_dra::inventory::{Inventory, ShareOptions};
use edgegpu_dra::slices::{PoolContent, SlicePublisher};

use edgegpu_dra::DRIVER_NAME;
use edgegpu_testkit::apiserver::FakeApiServer;
use edgegpu_testkit::bench::{announce_smoke_mode, iterations};
use serde_json::{json, Value};

/// The fake's default release, 1.36.
const CURRENT: ResourceApi = ResourceApi {
    version: ResourceVersion::V1,
    minor: Some(36),
};

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:>9.2?}  p95 {:>9.2?}  (n={})",
        pick(0.5),
        pick(0.95),
        samples.len()
    )
}

/// `devices` with the first device's `driverVersion` set to `version`.
fn changed(devices: &[Value], version: usize) -> Vec<Value> {
    let mut devices = devices.to_vec();
    devices[0]["attributes"]["driverVersion"] = json!({"version": format!("1.0.{version}")});
    devices
}

async fn scenario(what: &str, devices: Vec<Value>, rounds: usize) {
    let rounds = iterations(rounds);
    let (mut first, mut update, mut unchanged) = (Vec::new(), Vec::new(), Vec::new());
    let mut requests = [0usize; 3];
    for round in 0..rounds {
        let api = FakeApiServer::start(NODE, &[]).await;
        let mut publisher = SlicePublisher::new(client(&api), CURRENT, DRIVER_NAME, NODE);
        let t = Instant::now();
        publisher.publish(devices.clone()).await.unwrap();
        first.push(t.elapsed());
        let after_first = api.requests().len();

        let next = changed(&devices, round);
        let t = Instant::now();
        let outcome = publisher.publish(next.clone()).await.unwrap();
        update.push(t.elapsed());
        assert_eq!(outcome.updated, 1);
        let after_update = api.requests().len();

        let t = Instant::now();
        publisher.publish(next).await.unwrap();
        unchanged.push(t.elapsed());
        requests = [
            after_first,
            after_update - after_first,
            api.requests().len() - after_update,
        ];
    }
    println!("{what} ({} devices):", devices.len());
    println!(
        "  first publish  {}  {} requests",
        summary(first),
        requests[0]
    );
    println!(
        "  update         {}  {} requests",
        summary(update),
        requests[1]
    );
    println!(
        "  unchanged      {}  {} requests",
        summary(unchanged),
        requests[2]
    );
}

/// What a node's pool costs the API server: slices and bytes as stored, for the content a
/// real inventory gives (memory shares, a MIG GPU whole with its counters).
async fn pool_size(what: &str, content: PoolContent) {
    let api = FakeApiServer::start(NODE, &[]).await;
    let mut publisher = SlicePublisher::new(client(&api), CURRENT, DRIVER_NAME, NODE);
    publisher.publish(content).await.unwrap();
    let slices = api.slices();
    let bytes: usize = slices.iter().map(|s| s.to_string().len()).sum();
    let devices: usize = slices
        .iter()
        .map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len))
        .sum();
    println!(
        "{what}: {} ResourceSlices, {devices} devices, {bytes} bytes of JSON as stored",
        slices.len()
    );
}

/// The inventory of `host` with the plugin's `args`, shared by memory in 256Mi steps.
fn inventory(host: &edgegpu_testkit::host::FakeHost, args: &[&str]) -> Inventory {
    #[derive(clap::Parser)]
    struct Args {
        #[command(flatten)]
        gpu: edgegpu_node::config::GpuArgs,
    }
    let mut argv = vec!["bench"];
    argv.extend_from_slice(args);
    let gpu = <Args as clap::Parser>::parse_from(argv).gpu;
    let shares = ShareOptions {
        memory_step: Some(256 << 20),
    };
    Inventory::discover(host.root(), &gpu, NODE, shares).unwrap()
}

fn main() {
    announce_smoke_mode();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!(
            "SlicePublisher::publish against the fake API server (HTTPS, loopback, {} build)",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        );
        scenario("Jetson AGX Orin", jetson_devices(), 50).await;
        scenario("8 GPUs x 7 MIG", mig_node_devices(), 50).await;
        use edgegpu_testkit::host::{Board, FakeHost, FakeMig};
        let orin = FakeHost::jetson_with_engines(Board::Orin);
        let orin = inventory(&orin, &["--discovery=tegra"]);
        pool_size("Jetson AGX Orin, memory shares", orin.slice_content()).await;
        let (mig, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
        let mig = inventory(&mig, &["--mig-strategy=mixed"]);
        pool_size(
            "2 H100s, one in MIG mode (3 MIG devices, the GPU whole, its counters), memory shares",
            mig.slice_content(),
        )
        .await;
    });
}
