//! `edgegpu-node-setup doctor` (the real binary) on simulated nodes: a healthy Jetson k3s node
//! with zero findings, then one broken link at a time, each named as the broken link with its
//! fix; the upgrade scenario (driver files change: the CDI spec is stale until the watch's
//! commands regenerate it, and the textfile and feature file say so meanwhile); the support
//! bundle's redaction and contents.

use crate::common;

use std::io::Read;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Output;

use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use edgegpu_testkit::process::binary_command;
use serde_json::Value;

/// A kubelet and a device plugin as the doctor sees them: their sockets answering, and the
/// device manager's checkpoint.
struct Kubelet {
    _listeners: Vec<UnixListener>,
}

const PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";

fn listen(host: &FakeHost, host_path: &str) -> UnixListener {
    let p = host.path(host_path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    UnixListener::bind(&p).unwrap_or_else(|e| panic!("bind {}: {e}", p.display()))
}

/// The kubelet (its socket), a plugin socket answering, and the checkpoint registering
/// `devices` for nvidia.com/gpu (the kubelet's own format).
fn kubelet_with_plugin(host: &FakeHost, devices: &[&str]) -> Kubelet {
    let listeners = vec![
        listen(host, &format!("{PLUGIN_DIR}/kubelet.sock")),
        listen(
            host,
            &format!("{PLUGIN_DIR}/nvidia-gpu-1764400000-1a2b-0.sock"),
        ),
    ];
    write_checkpoint(host, devices);
    Kubelet {
        _listeners: listeners,
    }
}

fn write_checkpoint(host: &FakeHost, devices: &[&str]) {
    let doc = serde_json::json!({
        "Data": {"PodDeviceEntries": null, "RegisteredDevices": {"nvidia.com/gpu": devices}},
        "Checksum": 1234
    });
    host.write(
        &format!("{PLUGIN_DIR}/kubelet_internal_checkpoint"),
        doc.to_string(),
    );
}

fn executable(host: &FakeHost, path: &str, contents: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    host.write(path, contents);
    std::fs::set_permissions(host.path(path), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// k3s v1.30 (a stand-in binary embedding its version as the real one does), its installer's
/// server unit, and the NVIDIA runtime.
fn install_k3s(host: &FakeHost) {
    install_k3s_version(host, "v1.30.4+k3s1");
}

fn install_k3s_version(host: &FakeHost, version: &str) {
    let mut body = b"\x7fELF-not-really\0go1.22.5\0".to_vec();
    body.extend(std::iter::repeat(0u8).take(4096));
    body.extend_from_slice(b"github.com/k3s-io/k3s/pkg/version.Version");
    body.extend_from_slice(version.as_bytes());
    body.extend_from_slice(b"v0.0.0-upstream");
    executable(host, "/usr/local/bin/k3s", &body);
    host.write(
        "/etc/systemd/system/k3s.service",
        common::fixture("units/k3s-installer-server.service"),
    );
    executable(
        host,
        "/usr/bin/nvidia-container-runtime",
        b"#!/bin/sh\nexit 0\n",
    );
}

fn node_setup(root: &Path, args: &[&str]) -> Output {
    let mut cmd = binary_command(common::node_setup_binary());
    for var in [
        "EDGEGPU_ROOT",
        "EDGEGPU_OUTPUT",
        "EDGEGPU_CDI",
        "MPS_ROOT",
        "NODE_NAME",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("--root").arg(root).args(args);
    cmd.output().expect("run edgegpu-node-setup")
}

fn ok(root: &Path, args: &[&str]) {
    let out = node_setup(root, args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Jetson AGX Orin running k3s, configured by `apply`, its CDI spec generated, the device
/// plugin registered with the kubelet.
fn healthy_orin() -> (FakeHost, Kubelet) {
    let host = FakeHost::jetson(Board::Orin);
    install_k3s(&host);
    ok(host.root(), &["--no-restart", "apply"]);
    ok(host.root(), &["cdi", "generate"]);
    let kubelet = kubelet_with_plugin(&host, &["tegra::0"]);
    (host, kubelet)
}

/// The doctor's JSON document and exit code.
fn doctor(root: &Path, args: &[&str]) -> (Value, i32) {
    let mut all = vec!["doctor", "--output", "json"];
    all.extend_from_slice(args);
    let out = node_setup(root, &all);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (doc, out.status.code().unwrap_or(-1))
}

fn finding<'a>(doc: &'a Value, link: &str) -> &'a Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["link"] == link)
        .unwrap_or_else(|| panic!("no {link} finding in {doc:#}"))
}

/// Asserts that `link` is the first broken one, its fix mentions `fix`, and the exit code is 1.
fn assert_broken_first(doc: &Value, code: i32, link: &str, fix: &str) {
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["firstBroken"], link, "{doc:#}");
    let f = finding(doc, link);
    assert_eq!(f["verdict"], "broken", "{f:#}");
    assert!(
        f["fix"].as_str().is_some_and(|x| x.contains(fix)),
        "fix of {link} should name {fix:?}: {f:#}"
    );
}

fn verdicts(doc: &Value) -> Vec<(String, String)> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["link"].as_str().unwrap().to_string(),
                f["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_healthy_jetson_node_has_no_finding() {
    let (host, _kubelet) = healthy_orin();
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["verdict"], "ok");
    assert_eq!(
        verdicts(&doc),
        [
            ("platform", "ok"),
            ("device-nodes", "ok"),
            ("runtime", "ok"),
            ("cdi-spec", "ok"),
            ("kubelet", "ok"),
            ("mps", "skipped"),
            ("labels", "skipped"),
            ("power", "ok"),
        ]
        .map(|(l, v)| (l.to_string(), v.to_string()))
    );
    assert!(
        finding(&doc, "platform")["summary"]
            .as_str()
            .unwrap()
            .contains("L4T 36."),
        "{doc:#}"
    );
    // The text report ends in the verdict line, with the run time.
    let out = node_setup(host.root(), &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().last().unwrap().starts_with("healthy"),
        "{text}"
    );
}

#[test]
fn no_gpu_is_the_platform_link() {
    let host = FakeHost::empty();
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "platform", "modprobe nvidia");
}

#[test]
fn a_release_the_table_does_not_know_is_a_warning() {
    let (host, _kubelet) = healthy_orin();
    host.write(
        "/etc/nv_tegra_release",
        "# R41 (release), REVISION: 1.0, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x\n",
    );
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "warnings keep exit 0: {doc:#}");
    let f = finding(&doc, "platform");
    assert_eq!(f["verdict"], "warning", "{f:#}");
    assert!(f["summary"].as_str().unwrap().contains("41.1.0"), "{f:#}");
    assert!(
        f["fix"].as_str().unwrap().contains("update edgegpu"),
        "{f:#}"
    );
}

#[test]
fn a_missing_device_node_is_the_device_nodes_link() {
    let (host, _kubelet) = healthy_orin();
    host.remove_node(Board::Orin.required_node());
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "device-nodes", "modprobe");
}

#[test]
fn a_runtime_not_configured_is_the_runtime_link() {
    let host = FakeHost::jetson(Board::Orin);
    install_k3s(&host);
    ok(host.root(), &["cdi", "generate"]);
    let _kubelet = kubelet_with_plugin(&host, &["tegra::0"]);
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "runtime", "sudo edgegpu-node-setup apply");
    // The evidence is check's: which requirement is missing, in which file.
    let details = finding(&doc, "runtime")["details"].to_string();
    assert!(details.contains("[missing]"), "{details}");
    // A configuration that does not parse names its file and line.
    host.write("/etc/rancher/k3s/config.yaml", "default-runtime: [nvidia\n");
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "runtime", "fix the file");
    assert!(
        finding(&doc, "runtime")["details"]
            .to_string()
            .contains("/etc/rancher/k3s/config.yaml:"),
        "{doc:#}"
    );
}

#[test]
fn a_plugin_that_is_not_serving_is_the_kubelet_link() {
    let (host, kubelet) = healthy_orin();
    // Registered with no device.
    write_checkpoint(&host, &[]);
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "kubelet", "logs ds/edgegpu-device-plugin");
    // The plugin is gone; its socket is left behind.
    drop(kubelet);
    let _kubelet = listen(&host, &format!("{PLUGIN_DIR}/kubelet.sock.new"));
    std::fs::remove_file(host.path(&format!("{PLUGIN_DIR}/kubelet.sock"))).unwrap();
    std::fs::rename(
        host.path(&format!("{PLUGIN_DIR}/kubelet.sock.new")),
        host.path(&format!("{PLUGIN_DIR}/kubelet.sock")),
    )
    .unwrap();
    write_checkpoint(&host, &["tegra::0"]);
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "kubelet", "rollout restart");
    // No plugin at all.
    std::fs::remove_file(host.path(&format!("{PLUGIN_DIR}/nvidia-gpu-1764400000-1a2b-0.sock")))
        .unwrap();
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "kubelet", "helm upgrade --install");
    // The DRA driver instead of a plugin is fine.
    let _reg = listen(
        &host,
        "/var/lib/kubelet/plugins_registry/edgegpu.io-reg.sock",
    );
    let _dra = listen(&host, "/var/lib/kubelet/plugins/edgegpu.io/dra.sock");
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert!(finding(&doc, "kubelet")["summary"]
        .as_str()
        .unwrap()
        .contains("DRA driver"));
}

#[test]
fn no_kubelet_is_the_kubelet_link() {
    let host = FakeHost::jetson(Board::Orin);
    install_k3s(&host);
    ok(host.root(), &["--no-restart", "apply"]);
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "kubelet", "systemctl start k3s");
}

#[test]
fn an_mps_daemon_that_is_not_ready_is_the_mps_link() {
    use edgegpu_node::mps::plan::DaemonSettings;
    use edgegpu_node::mps::status::{self, Desired, State, Status};
    let (host, _kubelet) = healthy_orin();
    let mps_root = host.path("/run/edgegpu/mps");
    let settings = DaemonSettings {
        resource: "nvidia.com/gpu".into(),
        active_thread_percentage: Some(50),
        pinned_memory_limits: Vec::new(),
        exclusive_gpus: Vec::new(),
    };
    status::write_desired(
        &mps_root,
        &Desired {
            daemons: vec![settings.clone()],
        },
    )
    .unwrap();
    // The plugin wants a daemon; the companion never reported.
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "mps", "mps-control-daemon");
    let status_file = mps_root.join("nvidia.com/gpu/status.json");
    let report = |state, reason: Option<&str>| Status {
        state,
        reason: reason.map(String::from),
        pid: Some(42),
        restarts: 0,
        settings: settings.clone(),
    };
    status::write(
        &status_file,
        &report(State::Failed, Some("nvidia-cuda-mps-control exited")),
    )
    .unwrap();
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "mps", "control.log");
    assert!(
        doc.to_string().contains("nvidia-cuda-mps-control exited"),
        "{doc:#}"
    );
    status::write(&status_file, &report(State::Ready, None)).unwrap();
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(finding(&doc, "mps")["verdict"], "ok");
}

/// A kubectl stand-in printing `node` for `get node <name> -o json`, and failing otherwise.
fn fake_kubectl(dir: &Path, name: &str, node: &Value) -> PathBuf {
    let path = dir.join("kubectl");
    let json = dir.join("node.json");
    std::fs::write(&json, node.to_string()).unwrap();
    let script = format!(
        "#!/bin/sh\n[ \"$1 $2 $3 $4 $5\" = \"get node {name} -o json\" ] || {{ echo \"unexpected: $*\" >&2; exit 1; }}\ncat '{}'\n",
        json.display()
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn labels_are_compared_with_the_cluster_only_when_asked() {
    let (host, _kubelet) = healthy_orin();
    let dir = tempfile::tempdir().unwrap();
    let node = |labels: Value, gpus: &str| {
        serde_json::json!({"metadata": {"name": "orin-1", "labels": labels},
                           "status": {"allocatable": {"cpu": "12", "nvidia.com/gpu": gpus}}})
    };
    let kubectl = |n: &Value| fake_kubectl(dir.path(), "orin-1", n).display().to_string();
    let args = |k: &str| -> Vec<String> {
        ["--cluster", "--node-name", "orin-1", "--kubectl", k]
            .map(String::from)
            .to_vec()
    };
    let run = |k: &str| {
        let a = args(k);
        doctor(
            host.root(),
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    // Labelled as the labeller would: ok.
    let good = node(
        serde_json::json!({"edgegpu.io/gpu": "jetson", "edgegpu.io/jetson.power-mode": "MODE_30W"}),
        "1",
    );
    let (doc, code) = run(&kubectl(&good));
    assert_eq!(finding(&doc, "labels")["verdict"], "ok", "{doc:#}");
    assert_eq!(code, 0);
    // No edgegpu.io/gpu: no plugin DaemonSet runs there.
    let (doc, code) = run(&kubectl(&node(serde_json::json!({}), "1")));
    assert_broken_first(&doc, code, "labels", "edgegpu-node-labeller");
    // No GPU in allocatable.
    let (doc, code) = run(&kubectl(&node(
        serde_json::json!({"edgegpu.io/gpu": "jetson"}),
        "0",
    )));
    assert_broken_first(&doc, code, "labels", "labeller");
    // kubectl cannot read the Node: could not be checked.
    let (doc, code) = run("/nonexistent/kubectl");
    assert_eq!(finding(&doc, "labels")["verdict"], "unknown", "{doc:#}");
    assert_eq!(code, 3);
}

#[test]
fn a_power_mode_waiting_for_a_reboot_is_a_power_warning() {
    let (host, _kubelet) = healthy_orin();
    host.write("/proc/sys/kernel/random/boot_id", "b1\n");
    host.write("/var/lib/edgegpu/power-mode-reboot", "mode=0 boot=b1\n");
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    let f = finding(&doc, "power");
    assert_eq!(f["verdict"], "warning", "{f:#}");
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains("waits for a reboot"),
        "{f:#}"
    );
    // In a later boot the reboot did not bring it.
    host.write("/proc/sys/kernel/random/boot_id", "b2\n");
    let (doc, _) = doctor(host.root(), &[]);
    assert!(
        finding(&doc, "power")["summary"]
            .as_str()
            .unwrap()
            .contains("did not bring"),
        "{doc:#}"
    );
}

/// The library folder of the host's architecture, where the discrete roots keep the driver.
fn lib_dir() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "/usr/lib/aarch64-linux-gnu"
    } else {
        "/usr/lib/x86_64-linux-gnu"
    }
}

/// Replaces driver 550.54.15's files by `version`'s, as a driver package upgrade does.
fn upgrade_driver(host: &FakeHost, version: &str) {
    for lib in ["libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"] {
        let old = host.path(&format!("{}/{lib}.so.550.54.15", lib_dir()));
        let _ = std::fs::remove_file(old);
        host.write(&format!("{}/{lib}.so.{version}", lib_dir()), "ELF");
        let link = host.path(&format!("{}/{lib}.so.1", lib_dir()));
        if link
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            std::fs::remove_file(&link).unwrap();
            host.symlink_raw(
                &format!("{}/{lib}.so.1", lib_dir()),
                &format!("{lib}.so.{version}"),
            );
        }
    }
    std::fs::remove_dir(host.path("/lib/firmware/nvidia/550.54.15")).unwrap();
    host.mkdir(&format!("/lib/firmware/nvidia/{version}"));
    let text = std::fs::read_to_string(host.path("/proc/driver/nvidia/version")).unwrap();
    host.write(
        "/proc/driver/nvidia/version",
        text.replace("550.54.15", version),
    );
}

/// The watch's commands (`edgegpu-node-check.service`'s ExecStart lines, as shipped), run
/// against `root` with the machine paths they write moved under `out`.
fn run_watch_service(root: &Path, out: &Path) -> Vec<i32> {
    let unit =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../yocto/meta-edgegpu/recipes-containers/edgegpu/files/edgegpu-node-check.service",
        ))
        .unwrap();
    let mut codes = Vec::new();
    for line in unit.lines().filter_map(|l| l.strip_prefix("ExecStart=")) {
        let line = line.trim_start_matches('-');
        let words: Vec<String> = line
            .split_whitespace()
            .skip(1) // the binary: the one under test
            .filter(|w| !w.starts_with('$'))
            .map(|w| {
                if w.starts_with("/var/") || w.starts_with("/etc/") {
                    out.join(w.trim_start_matches('/')).display().to_string()
                } else {
                    w.to_string()
                }
            })
            .collect();
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        codes.push(node_setup(root, &args).status.code().unwrap_or(-1));
    }
    codes
}

#[test]
fn a_driver_upgrade_makes_the_spec_stale_until_the_watch_regenerates_it() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.with_driver_libs();
    install_k3s(&host);
    ok(host.root(), &["--no-restart", "apply"]);
    ok(host.root(), &["cdi", "generate"]);
    let _kubelet = kubelet_with_plugin(&host, &[&gpus[0].uuid, &gpus[1].uuid]);
    let out = tempfile::tempdir().unwrap();
    let textfile = out
        .path()
        .join("var/lib/prometheus/node-exporter/edgegpu-doctor.prom");
    let features = out
        .path()
        .join("etc/kubernetes/node-feature-discovery/features.d/edgegpu-doctor");
    std::fs::create_dir_all(textfile.parent().unwrap()).unwrap();
    std::fs::create_dir_all(features.parent().unwrap()).unwrap();
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "{doc:#}");

    upgrade_driver(&host, "560.35.03");
    let (doc, code) = doctor(
        host.root(),
        &[
            "--textfile",
            textfile.to_str().unwrap(),
            "--feature-file",
            features.to_str().unwrap(),
        ],
    );
    assert_broken_first(&doc, code, "cdi-spec", "edgegpu-node-setup cdi generate");
    let details = finding(&doc, "cdi-spec")["details"].to_string();
    assert!(details.contains("libcuda.so.550.54.15"), "{details}");
    assert!(
        details.contains("driver 550.54.15, but driver 560.35.03 is loaded"),
        "{details}"
    );
    let prom = std::fs::read_to_string(&textfile).unwrap();
    assert!(
        prom.contains("edgegpu_node_doctor_link{link=\"cdi-spec\",verdict=\"broken\"} 1"),
        "{prom}"
    );
    assert!(
        prom.contains("edgegpu_node_doctor_broken_links 1"),
        "{prom}"
    );
    assert_eq!(
        std::fs::read_to_string(&features).unwrap(),
        "edgegpu.io/node-doctor=broken\nedgegpu.io/node-doctor.broken=cdi-spec\n"
    );

    // What the path unit starts on such a change: regenerate, then look again.
    let codes = run_watch_service(host.root(), out.path());
    assert_eq!(codes, [0, 0], "cdi generate, then doctor");
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        std::fs::read_to_string(&features).unwrap(),
        "edgegpu.io/node-doctor=ok\n"
    );
    assert!(std::fs::read_to_string(&textfile)
        .unwrap()
        .contains("edgegpu_node_doctor_broken_links 0"));
}

#[test]
fn cdi_mode_without_a_spec_is_the_cdi_link() {
    // k3s with containerd 2, where CDI is on by default.
    let host = FakeHost::jetson(Board::Orin);
    install_k3s_version(&host, "v1.33.1+k3s1");
    ok(host.root(), &["--no-restart", "--cdi", "apply"]);
    ok(host.root(), &["cdi", "generate"]);
    let _kubelet = kubelet_with_plugin(&host, &["tegra::0"]);
    let (doc, code) = doctor(host.root(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    std::fs::remove_file(host.path("/var/run/cdi/nvidia.yaml")).unwrap();
    // Asked to judge CDI mode, the runtime link holds and the spec is what is missing.
    let (doc, code) = doctor(host.root(), &["--cdi"]);
    assert_broken_first(&doc, code, "cdi-spec", "cdi generate");
    assert_eq!(
        finding(&doc, "runtime")["verdict"],
        "ok",
        "CDI mode is configured: {doc:#}"
    );
    // Without --cdi and without a spec, nothing says this node was meant for CDI (containerd 2
    // has it on by default): the NVIDIA runtime is what is missing.
    let (doc, code) = doctor(host.root(), &[]);
    assert_broken_first(&doc, code, "runtime", "sudo edgegpu-node-setup apply");
}

/// Every entry of a tar.gz: (path, bytes).
fn untar(path: &Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(path).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).unwrap();
            (name, bytes)
        })
        .collect()
}

/// Runs `doctor --bundle` on `host`, expecting the healthy node's exit code.
fn write_bundle(host: &FakeHost, bundle: &Path) {
    let out = node_setup(
        host.root(),
        &["doctor", "--bundle", bundle.to_str().unwrap()],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_bundle_carries_the_evidence_and_no_secret() {
    let (host, _kubelet) = healthy_orin();
    // Secrets a node holds: the join token in k3s's config, its unit and its environment
    // file, a database and a proxy password, a registry password, a docker registry auth.
    let token =
        "K10a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9::server:5ecr3tJoinPa55";
    host.write(
        "/etc/rancher/k3s/config.yaml",
        format!("token: {token}\nwrite-kubeconfig-mode: \"0644\"\ndatastore-endpoint: postgres://k3s:plantedDbPassword@db:5432/k3s\n"),
    );
    host.write(
        "/etc/systemd/system/k3s.service.env",
        "K3S_TOKEN=plantedEnvToken123\nK3S_URL=https://10.0.0.1:6443\nHTTPS_PROXY=http://proxyuser:plantedProxyPassword@proxy:3128\n",
    );
    // The installer writes each argument on its own line.
    let unit = common::fixture("units/k3s-installer-server.service").replace(
        "\t'--write-kubeconfig-mode' \\\n",
        "\t'--token' \\\n\t'plantedUnitToken' \\\n\t'--write-kubeconfig-mode' \\\n",
    );
    assert!(unit.contains("plantedUnitToken"));
    host.write("/etc/systemd/system/k3s.service", unit);
    host.write(
        "/etc/rancher/k3s/registries.yaml",
        "configs:\n  registry.example.com:\n    auth:\n      username: robot\n      password: plantedRegistryPassword\n",
    );
    host.write(
        "/etc/docker/daemon.json",
        r#"{"auths": {"registry.example.com": {"auth": "cGxhbnRlZERvY2tlckF1dGg="}}}"#,
    );
    // A kubeconfig's client key, a bearer token and a service-account JWT pasted into files
    // the bundle collects.
    host.write(
        "/etc/containerd/conf.d/kubeconfig.yaml",
        "users:\n- name: admin\n  user:\n    client-key-data: cGxhbnRlZENsaWVudEtleQ==\n",
    );
    host.write(
        "/etc/containerd/conf.d/notes.txt",
        "curl -H 'Authorization: Bearer plantedBearerToken' https://10.0.0.1:6443\nsa: eyJhbGciOiJSUzI1NiJ9.eyJwbGFudGVkIjoiand0In0.cGxhbnRlZFNpZ25hdHVyZQ\n",
    );
    host.write(
        "/etc/containerd/conf.d/registry-client.pem",
        "# a pasted key\n-----BEGIN EC PRIVATE KEY-----\nplantedPrivateKeyMaterial\n-----END EC PRIVATE KEY-----\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("node.tar.gz");
    write_bundle(&host, &bundle);
    let entries = untar(&bundle);
    let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "node/findings.txt",
        "node/findings.json",
        "node/MANIFEST.txt",
        "node/files/etc/rancher/k3s/config.yaml",
        "node/files/etc/rancher/k3s/registries.yaml",
        "node/files/etc/nv_tegra_release",
        "node/files/var/run/cdi/nvidia.yaml",
        "node/files/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
        // Each file a secret was planted in is packed (redacted), so none is missed by luck.
        "node/files/etc/systemd/system/k3s.service",
        "node/files/etc/systemd/system/k3s.service.env",
        "node/files/etc/docker/daemon.json",
        "node/files/etc/containerd/conf.d/kubeconfig.yaml",
        "node/files/etc/containerd/conf.d/notes.txt",
        "node/files/etc/containerd/conf.d/registry-client.pem",
    ] {
        assert!(names.contains(&expected), "{expected} not in {names:#?}");
    }
    let all: Vec<u8> = entries.iter().flat_map(|(_, b)| b.clone()).collect();
    let all = String::from_utf8_lossy(&all);
    for secret in [
        "5ecr3tJoinPa55",
        "a1b2c3d4e5f60718293a4b5c6d7e8f90",
        "plantedEnvToken123",
        "plantedRegistryPassword",
        "cGxhbnRlZERvY2tlckF1dGg=",
        "plantedPrivateKeyMaterial",
        "plantedUnitToken",
        "plantedProxyPassword",
        "plantedDbPassword",
        "cGxhbnRlZENsaWVudEtleQ==",
        "plantedBearerToken",
        "eyJwbGFudGVkIjoiand0In0",
    ] {
        assert!(!all.contains(secret), "{secret} leaked into the bundle");
    }
    // The files are there, redacted, not dropped.
    let config = &entries
        .iter()
        .find(|(n, _)| n == "node/files/etc/rancher/k3s/config.yaml")
        .unwrap()
        .1;
    assert_eq!(
        String::from_utf8_lossy(config),
        "token: <redacted>\nwrite-kubeconfig-mode: \"0644\"\ndatastore-endpoint: postgres://k3s:<redacted>@db:5432/k3s\n"
    );
    // Readable by its owner only: it holds root-only files.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A link planted where pods write (a CDI spec dir) is not followed into the archive.
    host.write("/root-only-secret", "plantedLinkTarget\n");
    std::os::unix::fs::symlink(
        host.path("/root-only-secret"),
        host.path("/var/run/cdi/evil.yaml"),
    )
    .unwrap();
    std::fs::remove_file(&bundle).unwrap();
    write_bundle(&host, &bundle);
    let again: Vec<u8> = untar(&bundle).into_iter().flat_map(|(_, b)| b).collect();
    assert!(!String::from_utf8_lossy(&again).contains("plantedLinkTarget"));
    let manifest = String::from_utf8_lossy(
        &entries
            .iter()
            .find(|(n, _)| n == "node/MANIFEST.txt")
            .unwrap()
            .1,
    )
    .into_owned();
    assert!(
        manifest.contains("files/etc/rancher/k3s/registries.yaml"),
        "{manifest}"
    );
    assert!(manifest.contains("no command run"), "{manifest}");
    // A failed write leaves nothing behind.
    let out = node_setup(
        host.root(),
        &["doctor", "--bundle", "/nonexistent/dir/x.tar.gz"],
    );
    assert_eq!(out.status.code(), Some(4));
}

/// The host paths `edgegpu-node-check.path` watches (its PathChanged= lines, as shipped).
fn watched_paths() -> Vec<String> {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../yocto/meta-edgegpu/recipes-containers/edgegpu/files/edgegpu-node-check.path"),
    )
    .unwrap()
    .lines()
    .filter_map(|l| l.strip_prefix("PathChanged="))
    .map(String::from)
    .collect()
}

#[test]
fn a_k3s_upgrade_is_looked_at_again() {
    // The watch fires on the k3s binary and on the containerd config k3s renders at start.
    let watched = watched_paths();
    for path in [
        "/usr/local/bin/k3s",
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        "/etc/nv_tegra_release",
        "/var/lib/dpkg/status",
    ] {
        assert!(
            watched.iter().any(|w| w == path),
            "{path} not watched: {watched:?}"
        );
    }
    // k3s v1.30 configured in CDI mode is refused (containerd 1.7, k3s's base template cannot
    // turn CDI on); after the upgrade to a containerd 2 release the same node is judged again
    // from the new binary: CDI is on by default, and the runtime link is ok.
    let host = FakeHost::jetson(Board::Orin);
    install_k3s_version(&host, "v1.30.4+k3s1");
    ok(host.root(), &["cdi", "generate"]);
    let _kubelet = kubelet_with_plugin(&host, &["tegra::0"]);
    let (doc, code) = doctor(host.root(), &["--cdi"]);
    assert_broken_first(&doc, code, "runtime", "apply --cdi");
    assert!(
        finding(&doc, "runtime")["summary"]
            .as_str()
            .unwrap()
            .contains("CDI specs"),
        "{doc:#}"
    );
    assert!(
        finding(&doc, "runtime")["details"]
            .to_string()
            .contains("v1.30.4"),
        "{doc:#}"
    );
    install_k3s_version(&host, "v1.32.2+k3s1");
    let (doc, code) = doctor(host.root(), &["--cdi"]);
    assert_eq!(code, 0, "{doc:#}");
    assert!(
        finding(&doc, "runtime")["summary"]
            .as_str()
            .unwrap()
            .contains("CDI"),
        "{doc:#}"
    );
}
