//! `cargo bench -p edgegpu-node-setup --bench cdi`: time of `cdi generate` (read the inputs,
//! build, validate and serialise the spec) per simulated platform, and of writing it
//! atomically. Prints figures. Smoke mode (a few rounds, as scripts/test.sh runs it):
//! `edgegpu_testkit::bench`.

use std::time::Instant;

use edgegpu_host::cdi;
use edgegpu_host::root::HostRoot;
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, print_latencies};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};

const ROUNDS: usize = 200;

fn bench(what: &str, host: &FakeHost) {
    let root = HostRoot::new(host.root());
    let mut generate = Vec::new();
    let mut yaml = Vec::new();
    let mut devices = 0;
    for _ in 0..iterations(ROUNDS) {
        let t = Instant::now();
        let g = cdi::generate(&root).expect("generate");
        generate.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(g.spec.to_yaml());
        yaml.push(t.elapsed());
        devices = g.spec.devices.len();
    }
    print_latencies(&format!("generate {what} ({devices} devices)"), generate);
    print_latencies(&format!("  yaml {what}"), yaml);
    // The whole command, atomic write (fsync) included.
    let mut write = Vec::new();
    let out = host.path("/var/run/cdi/bench.yaml");
    for i in 0..iterations(20) {
        // A changed file each time, so every round writes.
        let _ = std::fs::remove_file(&out);
        let t = Instant::now();
        let mut sink = Vec::new();
        cdi::run(&root, Some(&out), None, &mut sink).expect("run");
        write.push(t.elapsed());
        std::hint::black_box((i, sink));
    }
    print_latencies(&format!("  cdi generate + atomic write {what}"), write);
}

fn main() {
    announce_smoke_mode();
    for board in Board::ALL {
        let host = FakeHost::jetson_with_nvml(board);
        host.write("/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n");
        bench(board.name(), &host);
    }
    // Thor with two MIG devices (procfs capability tree next to the CSV lists).
    let host = FakeHost::jetson_with_nvml(Board::Thor);
    host.write("/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n");
    let thor = Board::Thor.nvml().expect("Thor has NVML");
    host.set_mig(
        std::slice::from_ref(&thor),
        &[0],
        &[
            FakeMig::h100(0, 1, "1g.10gb"),
            FakeMig::h100(0, 2, "1g.10gb"),
        ],
    );
    bench("thor-mig", &host);
    let gpus = FakeGpu::two_on_two_numa_nodes();
    bench("dgpu", &FakeHost::discrete(&gpus));
    let h100 = FakeGpu::two_h100();
    let host = FakeHost::discrete(&h100);
    host.set_mig(
        &h100,
        &[0, 1],
        &[
            FakeMig::h100(0, 1, "3g.40gb"),
            FakeMig::h100(0, 5, "1g.10gb"),
            FakeMig::h100(0, 6, "1g.10gb"),
            FakeMig::h100(1, 0, "7g.80gb"),
        ],
    );
    bench("mig", &host);
}
