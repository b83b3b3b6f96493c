//! Figures for the node side of the DRA driver, on simulated hosts (no GPU needed): the time
//! from a `prepare_allocation` call to the claim's CDI spec on disk (the call returns after
//! the checkpoint's two writes and the spec's write, each fsynced and renamed into place),
//! median and p95, for a Jetson GPU claim (AGX Orin, L4T r36: the L4T lists' libraries in the
//! spec) and a discrete GPU claim (two A100s with the driver's files); and the unprepare. With
//! sharing: a 2Gi memory share of the Orin's GPU joining the node's MPS daemon (its status read
//! on every prepare), and the same share accounted where MPS does not run.
//!
//! `cargo bench -p edgegpu-dra --bench prepare`; smoke mode (a few iterations, as
//! scripts/test.sh runs it): `edgegpu_testkit::bench`.

use std::time::Instant;

use clap::Parser;
use edgegpu_dra::claims::{AllocatedDevice, ClaimAllocation};
use edgegpu_dra::inventory::{Inventory, ShareOptions};
use edgegpu_dra::kubelet::ClaimRef;
use edgegpu_dra::prepare::{NodeDriver, NodeOptions};
use edgegpu_dra::sharing::{MpsHost, ShareLimits};
use edgegpu_node::config::GpuArgs;
use edgegpu_node::mps::plan::DaemonSettings;
use edgegpu_node::mps::status::{self, Desired, State, Status};
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, print_latencies};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    gpu: GpuArgs,
}

/// A claim's memory share of `gpu-0` (2Gi), and how the node enforces it.
struct Share {
    limits: ShareLimits,
}

/// What the companion leaves under `mps_root` for a ready daemon the driver asked for.
fn ready_daemon(mps: &MpsHost) {
    let daemon = DaemonSettings {
        resource: mps.resource.clone(),
        active_thread_percentage: None,
        pinned_memory_limits: vec![],
        exclusive_gpus: vec![],
    };
    let desired = Desired {
        daemons: vec![daemon.clone()],
    };
    status::write_desired(&mps.mps_root, &desired).unwrap();
    let paths = mps.paths();
    std::fs::create_dir_all(&paths.pipe).unwrap();
    let ready = Status {
        state: State::Ready,
        reason: None,
        pid: None,
        restarts: 0,
        settings: daemon,
    };
    status::write(&paths.status, &ready).unwrap();
}

fn run(what: &str, host: &FakeHost, args: &[&str], share: Option<Share>) {
    let mut argv = vec!["bench"];
    argv.extend_from_slice(args);
    let gpu = Args::parse_from(argv).gpu;
    let shares = ShareOptions {
        memory_step: share.as_ref().map(|_| 256 << 20),
    };
    let start = Instant::now();
    let inventory = Inventory::discover(host.root(), &gpu, "node-a", shares).unwrap();
    let discovery = start.elapsed();
    let dirs = tempfile::tempdir().unwrap();
    let mps = MpsHost {
        mps_root: dirs.path().join("mps"),
        ..MpsHost::default()
    };
    if matches!(
        share,
        Some(Share {
            limits: ShareLimits::Mps
        })
    ) {
        ready_daemon(&mps);
    }
    let driver = NodeDriver::new(
        inventory,
        NodeOptions {
            plugin_dir: dirs.path().join("plugins/edgegpu.io"),
            cdi_dir: dirs.path().join("cdi"),
            mps,
            share_limits: share
                .as_ref()
                .map_or_else(Default::default, |s| s.limits.clone()),
        },
        None,
    )
    .unwrap();
    let consumed = share.as_ref().map(|_| ("memory".to_string(), 2u64 << 30));
    let allocation = ClaimAllocation {
        devices: vec![AllocatedDevice {
            request: "gpu".into(),
            pool: "node-a".into(),
            device: "gpu-0".into(),
            admin_access: false,
            share_id: share
                .as_ref()
                .map(|_| "4f3c9d2a-1b6e-4c8f-a0d7-9e5b2c1f8a36".into()),
            consumed_capacity: consumed.into_iter().collect(),
        }],
        configs: Vec::new(),
    };
    let n = iterations(300);
    let mut prepare = Vec::with_capacity(n);
    let mut unprepare = Vec::with_capacity(n);
    let mut spec_bytes = 0;
    for i in 0..n {
        let claim = ClaimRef {
            namespace: "default".into(),
            name: format!("c{i}"),
            uid: format!("00000000-0000-4000-8000-{i:012}"),
        };
        let t = Instant::now();
        let prepared = driver.prepare_allocation(&claim, &allocation).unwrap();
        prepare.push(t.elapsed());
        let file = dirs
            .path()
            .join(format!("cdi/edgegpu.io-claim_{}.json", claim.uid));
        spec_bytes = std::fs::metadata(&file).expect("the spec is on disk").len();
        assert_eq!(prepared.len(), 1);
        let t = Instant::now();
        driver.unprepare_claim(&claim).unwrap();
        unprepare.push(t.elapsed());
    }
    println!("{what}: inventory discovery {discovery:.3?}, claim spec {spec_bytes} bytes");
    print_latencies(&format!("{what}: prepare → spec on disk"), prepare);
    print_latencies(&format!("{what}: unprepare"), unprepare);
}

fn main() {
    announce_smoke_mode();
    let orin = FakeHost::jetson(Board::Orin);
    run("Jetson AGX Orin gpu-0", &orin, &["--discovery=tegra"], None);
    let mps = Share {
        limits: ShareLimits::Mps,
    };
    run(
        "Jetson AGX Orin 2Gi memory share under MPS",
        &orin,
        &["--discovery=tegra"],
        Some(mps),
    );
    let accounted = Share {
        limits: ShareLimits::Accounted {
            why: "MPS is not enabled for the DRA driver on this node (--mps)".into(),
        },
    };
    run(
        "Jetson AGX Orin 2Gi memory share, accounted",
        &orin,
        &["--discovery=tegra"],
        Some(accounted),
    );
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let discrete = FakeHost::discrete(&gpus);
    discrete.with_driver_libs();
    run("discrete A100 gpu-0", &discrete, &[], None);
}
