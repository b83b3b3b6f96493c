//! `cargo bench -p edgegpu-node-setup --bench apply`: time of a full `apply` (detect,
//! plan, backup, atomic writes, manifest) on fake host trees, and proof that a second
//! apply performs zero writes. Prints figures; exits non-zero if the second apply writes.
//! The first apply's time is mostly fsync latency (files, renames, new directories) of
//! the disk under the temp dir; "detect+plan" is the compute part. Smoke mode (a few rounds,
//! as scripts/test.sh runs it, the zero-writes check included): `edgegpu_testkit::bench`.

use std::time::{Duration, Instant};

use clap::Parser;
use edgegpu_host::fsops;
use edgegpu_node_setup::cli::Cli;
use edgegpu_node_setup::restart::ServiceManager;
use edgegpu_testkit::bench::{announce_smoke_mode, iterations};
use edgegpu_testkit::nodehost::NodeHost;

// The host layouts and fixtures the tests use.
#[path = "../tests/common/mod.rs"]
mod common;
use common::{containerd_host, docker_host, fixture};

const ROUNDS: usize = 30;

struct NoSystemctl;
impl ServiceManager for NoSystemctl {
    fn systemctl(&mut self, args: &[String]) -> Result<(), String> {
        Err(format!("bench must not run systemctl {args:?}"))
    }
}

fn k3s_host() -> NodeHost {
    let host = NodeHost::new();
    host.k3s_binary(None)
        .write(
            "/etc/systemd/system/k3s.service",
            fixture("units/k3s-installer-server.service"),
        )
        .nvidia_runtime();
    host
}

fn apply(host: &NodeHost) -> (Duration, u64) {
    let cli = Cli::parse_from([
        "edgegpu-node-setup",
        "--root",
        host.root().to_str().unwrap(),
        "apply",
    ]);
    let writes = fsops::write_count();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let start = Instant::now();
    let code = edgegpu_node_setup::run(cli, &mut NoSystemctl, &mut out, &mut err);
    let elapsed = start.elapsed();
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    (elapsed, fsops::write_count() - writes)
}

fn main() {
    announce_smoke_mode();
    let rounds = iterations(ROUNDS);
    let mut failed = false;
    for (name, make) in [
        (
            "docker (2 units + daemon.json)",
            docker_host as fn() -> NodeHost,
        ),
        ("containerd (system config.toml)", containerd_host),
        ("k3s-default-runtime (drop-in + RuntimeClass)", k3s_host),
    ] {
        // Detect + plan alone (reads and edits in memory, no write): the compute part.
        let mut planning = Vec::new();
        for _ in 0..rounds {
            let host = make();
            let opts = edgegpu_node_setup::plan::Options {
                host: edgegpu_host::root::HostRoot::new(host.root()),
                mode: edgegpu_node_setup::detect::ModeRequest::Auto,
                spec: edgegpu_node_setup::RuntimeSpec {
                    name: "nvidia".into(),
                    path: "/usr/bin/nvidia-container-runtime".into(),
                    set_default: true,
                },
                force: false,
                k3s_version: None,
                cdi: false,
            };
            let start = Instant::now();
            let plan = edgegpu_node_setup::plan::build(&opts, false).unwrap();
            planning.push(start.elapsed());
            assert!(!plan.changes.is_empty());
        }
        planning.sort();
        let mut first = Vec::new();
        let mut second = Vec::new();
        let mut first_writes = 0;
        let mut second_writes = 0;
        for _ in 0..rounds {
            let host = make();
            let (t, w) = apply(&host);
            first.push(t);
            first_writes = w;
            let snapshot = host.snapshot();
            let (t, w) = apply(&host);
            second.push(t);
            second_writes += w;
            if snapshot != host.snapshot() {
                eprintln!("{name}: second apply changed a file or its mtime");
                failed = true;
            }
        }
        first.sort();
        second.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{name}: detect+plan median {:.2} ms",
            ms(planning[rounds / 2])
        );
        println!(
            "{name}: first apply median {:.2} ms (min {:.2}, max {:.2}), {first_writes} writes incl. backups+manifest; second apply median {:.2} ms, {second_writes} writes in {rounds} rounds",
            ms(first[rounds / 2]),
            ms(first[0]),
            ms(first[rounds - 1]),
            ms(second[rounds / 2]),
        );
        if second_writes != 0 {
            eprintln!("{name}: second apply wrote {second_writes} files");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
