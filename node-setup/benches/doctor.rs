//! `cargo bench -p edgegpu-node-setup --bench doctor`: run time of `edgegpu-node-setup doctor`
//! on simulated nodes (a healthy Jetson AGX Orin and a two-GPU discrete server running k3s,
//! configured by `apply`, CDI spec generated, a device plugin registered with the kubelet):
//! every link walked in-process, and the whole command as a user runs it (process start,
//! text report). No network (`--cluster` is not used). Prints figures; smoke mode (a few
//! rounds, as scripts/test.sh runs it): `edgegpu_testkit::bench`.

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use edgegpu_host::root::HostRoot;
use edgegpu_node_setup::doctor::{self, Verdict};
use edgegpu_node_setup::plan;
use edgegpu_node_setup::RuntimeSpec;
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, print_latencies};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};

const BINARY: &str = env!("CARGO_BIN_EXE_edgegpu-node-setup");

fn node_setup(root: &Path, args: &[&str]) {
    let out = Command::new(BINARY)
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("run edgegpu-node-setup");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// k3s v1.30 with its installer's unit and the NVIDIA runtime; `apply`; the CDI spec; the
/// kubelet's and a plugin's sockets and the checkpoint registering `devices`.
fn configure(host: &FakeHost, devices: &[&str]) -> Vec<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let mut k3s = b"\x7fELF\0".to_vec();
    k3s.extend_from_slice(b"github.com/k3s-io/k3s/pkg/version.Versionv1.30.4+k3s1v0.0.0-upstream");
    for (path, body) in [
        ("/usr/local/bin/k3s", k3s.as_slice()),
        (
            "/usr/bin/nvidia-container-runtime",
            b"#!/bin/sh\n".as_slice(),
        ),
    ] {
        host.write(path, body);
        std::fs::set_permissions(host.path(path), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    host.write(
        "/etc/systemd/system/k3s.service",
        include_str!("../tests/fixtures/units/k3s-installer-server.service"),
    );
    node_setup(host.root(), &["--no-restart", "apply"]);
    node_setup(host.root(), &["cdi", "generate"]);
    let dir = "/var/lib/kubelet/device-plugins";
    host.mkdir(dir);
    let checkpoint = serde_json::json!({"Data": {"RegisteredDevices": {"nvidia.com/gpu": devices}}, "Checksum": 1});
    host.write(
        &format!("{dir}/kubelet_internal_checkpoint"),
        checkpoint.to_string(),
    );
    ["kubelet.sock", "nvidia-gpu-1764400000-1a2b-0.sock"]
        .iter()
        .map(|s| UnixListener::bind(host.path(&format!("{dir}/{s}"))).expect("bind"))
        .collect()
}

fn bench(what: &str, host: &FakeHost) {
    let opts = doctor::Options {
        plan: plan::Options {
            host: HostRoot::new(host.root()),
            mode: edgegpu_node_setup::detect::ModeRequest::Auto,
            spec: RuntimeSpec {
                name: "nvidia".into(),
                path: "/usr/bin/nvidia-container-runtime".into(),
                set_default: true,
            },
            force: false,
            k3s_version: None,
            cdi: false,
        },
        kubelet_dir: "/var/lib/kubelet".into(),
        mps_root: "/run/edgegpu/mps".into(),
        cluster: None,
    };
    let mut walk = Vec::new();
    for _ in 0..iterations(100) {
        let t = Instant::now();
        let report = doctor::examine(&opts);
        walk.push(t.elapsed());
        assert_eq!(report.worst(), Verdict::Ok, "{:#?}", report.findings);
    }
    print_latencies(&format!("every link, in-process ({what})"), walk);
    let mut command = Vec::new();
    for _ in 0..iterations(30) {
        let t = Instant::now();
        let out = Command::new(BINARY)
            .arg("--root")
            .arg(host.root())
            .arg("doctor")
            .output()
            .expect("run doctor");
        command.push(t.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    print_latencies(&format!("edgegpu-node-setup doctor ({what})"), command);
}

fn main() {
    announce_smoke_mode();
    let orin = FakeHost::jetson(Board::Orin);
    let _orin_sockets = configure(&orin, &["tegra::0"]);
    bench("orin", &orin);
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let server = FakeHost::discrete(&gpus);
    server.with_driver_libs();
    let _server_sockets = configure(&server, &[&gpus[0].uuid, &gpus[1].uuid]);
    bench("2 discrete GPUs", &server);
}
