//! The labeller program against the testkit's fake API server (HTTPS, token, merge patch):
//! the kind label on every kind of node, the full label set (a JetPack 7.2 Orin with its
//! NVML, a MIG server whose per-profile keys follow its geometry), hand-set values kept, stale
//! keys removed, retries, RBAC errors, --dry-run and --wait with SIGTERM.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use edgegpu_labeller::kind::{self, NodeKind};
use edgegpu_testkit::apiserver::FakeApiServer;
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use edgegpu_testkit::process::binary_command;

/// The program under test, as its manifests run it (a link to the multi-call binary).
fn bin() -> std::path::PathBuf {
    edgegpu_testkit::process::program("edgegpu-labeller")
}
const NODE: &str = "node-1";

/// Runs the labeller on `root` against `api` (blocking: the fake runs on its own runtime).
fn labeller(root: &Path, api: &FakeApiServer, args: &[&str]) -> Command {
    labeller_trusting(root, api, &api.ca_file(), args)
}

/// The same, trusting the CA bundle `ca_file`.
fn labeller_trusting(root: &Path, api: &FakeApiServer, ca_file: &Path, args: &[&str]) -> Command {
    let mut cmd = binary_command(bin());
    cmd.arg("--root")
        .arg(root)
        .arg("--api-server")
        .arg(api.url())
        .arg("--token-file")
        .arg(api.token_file())
        .arg("--ca-file")
        .arg(ca_file)
        .args(args)
        .env("NODE_NAME", NODE)
        .env("EDGEGPU_LOG", "info")
        .env_remove("KUBERNETES_SERVICE_HOST");
    cmd
}

async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("run the labeller"))
        .await
        .unwrap()
}

/// A long-running labeller: killed when dropped, so that a test that fails before its
/// SIGTERM leaves nothing running (it would keep patching and spawning until the machine
/// reboots).
struct Running(Option<std::process::Child>);

impl Running {
    fn new(child: std::process::Child) -> Running {
        Running(Some(child))
    }
}

impl std::ops::Deref for Running {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("running")
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut().expect("running")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends SIGTERM to a labeller started with --wait and waits for its exit.
async fn sigterm_and_wait(mut running: Running) -> std::process::ExitStatus {
    let mut child = running.0.take().expect("running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn node_kind_from_sys_alone() {
    for board in Board::ALL {
        let host = FakeHost::jetson(board);
        assert_eq!(
            kind::detect(host.root()),
            Some(NodeKind::Jetson),
            "{board:?}"
        );
    }
    let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
    assert_eq!(kind::detect(host.root()), Some(NodeKind::Discrete));
    // Thor's iGPU is an NVIDIA PCI display device too: still a Jetson.
    let host = FakeHost::jetson(Board::Thor);
    host.write("/sys/bus/pci/devices/0000:01:00.0/vendor", "0x10de\n");
    host.write("/sys/bus/pci/devices/0000:01:00.0/class", "0x030200\n");
    assert_eq!(kind::detect(host.root()), Some(NodeKind::Jetson));
    // An AMD display controller and an NVIDIA network card are no GPU of ours.
    let host = FakeHost::empty();
    host.write("/sys/bus/pci/devices/0000:03:00.0/vendor", "0x1002\n");
    host.write("/sys/bus/pci/devices/0000:03:00.0/class", "0x030000\n");
    host.write("/sys/bus/pci/devices/0000:04:00.0/vendor", "0x10de\n");
    host.write("/sys/bus/pci/devices/0000:04:00.0/class", "0x020000\n");
    assert_eq!(kind::detect(host.root()), None);
}

#[test]
fn no_kind_without_the_gpu_driver() {
    // An NVIDIA card on nouveau, or with no driver: no nvidia module, no label (the discrete
    // plugin would crash-loop without NVML).
    let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
    std::fs::remove_dir_all(host.path("/sys/module/nvidia")).unwrap();
    assert_eq!(kind::detect(host.root()), None);
    for board in Board::ALL {
        // A Tegra board whose GPU driver did not probe: no devfreq device, no nvgpu module.
        let host = FakeHost::jetson(board);
        std::fs::remove_dir_all(host.path("/sys/class/devfreq")).unwrap();
        assert_eq!(kind::detect(host.root()), None, "{board:?}");
        // nvgpu loaded as a module (L4T r34 on) is enough.
        host.write("/sys/module/nvgpu/refcnt", "1\n");
        assert_eq!(
            kind::detect(host.root()),
            Some(NodeKind::Jetson),
            "{board:?}"
        );
    }
    // Thor's OpenRM driver.
    let host = FakeHost::jetson(Board::Thor);
    std::fs::remove_dir_all(host.path("/sys/class/devfreq")).unwrap();
    host.write("/sys/module/nvidia/version", "580.00\n");
    assert_eq!(kind::detect(host.root()), Some(NodeKind::Jetson));
    // On Orin the nvidia module is the display driver only: not the GPU's.
    let host = FakeHost::jetson(Board::Orin);
    std::fs::remove_dir_all(host.path("/sys/class/devfreq")).unwrap();
    host.write("/sys/module/nvidia/version", "540.00\n");
    assert_eq!(kind::detect(host.root()), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_loaded_later_still_gets_the_node_labelled() {
    let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
    std::fs::remove_dir_all(host.path("/sys/module/nvidia")).unwrap();
    let api = FakeApiServer::start(NODE, &[]).await;
    let child = labeller(host.root(), &api, &["--kind-only", "--wait", "--recheck=1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Running::new)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        api.requests().is_empty(),
        "asked the API server without a GPU"
    );
    host.write("/sys/module/nvidia/version", "550.54.15\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.labels(NODE).get("edgegpu.io/gpu").map(String::as_str) != Some("discrete") {
        assert!(Instant::now() < deadline, "not labelled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = sigterm_and_wait(child).await;
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_only_labels_a_jetson_and_keeps_hand_set_values() {
    let host = FakeHost::jetson(Board::Orin);
    let api = FakeApiServer::start(NODE, &[("kubernetes.io/arch", "arm64")]).await;
    let out = run(labeller(host.root(), &api, &["--kind-only"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = api.labels(NODE);
    assert_eq!(labels["edgegpu.io/gpu"], "jetson");
    assert_eq!(labels["kubernetes.io/arch"], "arm64");
    assert_eq!(labels.len(), 2, "{labels:?}");
    let requests = api.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[1].method, "PATCH");
    assert_eq!(
        requests[1].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        requests[1].body,
        Some(serde_json::json!({"metadata": {"labels": {"edgegpu.io/gpu": "jetson"}}}))
    );

    // A value set by hand wins: read, nothing patched.
    let api = FakeApiServer::start(NODE, &[("edgegpu.io/gpu", "discrete")]).await;
    let out = run(labeller(host.root(), &api, &["--kind-only"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(api.labels(NODE)["edgegpu.io/gpu"], "discrete");
    assert_eq!(api.requests().len(), 1);

    // A node without a GPU gets nothing, and does not even ask the API server.
    let api = FakeApiServer::start(NODE, &[]).await;
    let out = run(labeller(FakeHost::empty().root(), &api, &["--kind-only"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("No GPU found"), "{}", stderr(&out));
    assert!(api.labels(NODE).is_empty());
    assert!(api.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_labels_replace_stale_ones_and_are_idempotent() {
    let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
    // Left over from when this node was labelled as something else.
    let api = FakeApiServer::start(
        NODE,
        &[
            ("edgegpu.io/jetson.l4t", "36.4.3"),
            ("nvidia.com/gpu.count", "1"),
            ("team", "vision"),
        ],
    )
    .await;
    let out = run(labeller(host.root(), &api, &["--discovery=nvml"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = api.labels(NODE);
    assert_eq!(labels["edgegpu.io/gpu"], "discrete");
    assert_eq!(labels["nvidia.com/gpu.count"], "2");
    assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-40GB");
    assert_eq!(labels["nvidia.com/cuda.driver.major"], "12");
    assert_eq!(labels["team"], "vision");
    assert!(!labels.contains_key("edgegpu.io/jetson.l4t"), "{labels:?}");
    let patch = api.requests()[1].body.clone().unwrap();
    assert_eq!(
        patch["metadata"]["labels"]["edgegpu.io/jetson.l4t"],
        serde_json::Value::Null
    );

    // Nothing changed: no second PATCH.
    let before = api.requests().len();
    let out = run(labeller(host.root(), &api, &["--discovery=nvml"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("already up to date"),
        "{}",
        stderr(&out)
    );
    assert_eq!(api.requests().len(), before + 1);
}

/// In a pod that cannot read nvpmodel's files the mode is unknown, not absent: the mode keys
/// another writer put there (the power policy, which reads the host) stay; the GPU's ceiling,
/// from sysfs, is still this run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_power_mode_leaves_the_mode_labels_alone() {
    let host = FakeHost::jetson(Board::Orin);
    std::fs::remove_file(host.path("/etc/nvpmodel.conf")).unwrap();
    let api = FakeApiServer::start(
        NODE,
        &[
            ("edgegpu.io/jetson.power-mode", "MAXN"),
            ("edgegpu.io/jetson.power-mode.id", "0"),
        ],
    )
    .await;
    let out = run(labeller(host.root(), &api, &["--discovery=tegra"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = api.labels(NODE);
    assert_eq!(labels["edgegpu.io/jetson.power-mode"], "MAXN");
    assert_eq!(labels["edgegpu.io/jetson.power-mode.id"], "0");
    assert_eq!(labels["edgegpu.io/jetson.gpu-clock-max-mhz"], "624");
    assert_eq!(labels["edgegpu.io/jetson.soc"], "T234");

    // With the files, the mode is this run's again.
    let host = FakeHost::jetson(Board::Orin);
    let out = run(labeller(host.root(), &api, &["--discovery=tegra"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(api.labels(NODE)["edgegpu.io/jetson.power-mode"], "MODE_30W");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetpack_7_orin_with_its_nvml() {
    let host = FakeHost::jetson_with_nvml(Board::OrinR39);
    let api = FakeApiServer::start(NODE, &[]).await;
    let out = run(labeller(host.root(), &api, &[])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = api.labels(NODE);
    for (k, v) in [
        ("edgegpu.io/gpu", "jetson"),
        ("nvidia.com/gpu.product", "Orin-nvgpu"),
        ("nvidia.com/cuda.driver.major", "13"),
        ("nvidia.com/cuda.driver.minor", "2"),
        ("edgegpu.io/jetson.l4t", "39.2.0"),
        ("edgegpu.io/jetson.jetpack.major", "7"),
        ("edgegpu.io/jetson.product", "Jetson-Orin-NX"),
    ] {
        assert_eq!(
            labels.get(k).map(String::as_str),
            Some(v),
            "{k}: {labels:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_profile_keys_follow_the_geometry() {
    let (host, gpus) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    // A profile this node no longer has, and someone else's key under nvidia.com.
    let api = FakeApiServer::start(
        NODE,
        &[
            ("nvidia.com/mig-2g.20gb.count", "3"),
            (
                "nvidia.com/mig-2g.20gb.product",
                "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb",
            ),
            ("nvidia.com/gpu.deploy.operands", "false"),
        ],
    )
    .await;
    let out = run(labeller(host.root(), &api, &["--mig-strategy=mixed"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = api.labels(NODE);
    assert_eq!(labels["nvidia.com/mig.strategy"], "mixed");
    assert_eq!(labels["nvidia.com/mig-1g.10gb.count"], "2");
    assert_eq!(labels["nvidia.com/mig-3g.40gb.count"], "1");
    assert_eq!(
        labels["nvidia.com/mig-1g.10gb.product"],
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    );
    assert!(
        !labels.contains_key("nvidia.com/mig-2g.20gb.count"),
        "{labels:?}"
    );
    assert!(
        !labels.contains_key("nvidia.com/mig-2g.20gb.product"),
        "{labels:?}"
    );
    assert_eq!(labels["nvidia.com/gpu.deploy.operands"], "false");

    // Re-partitioned (the plugin pods restart): the old profiles' keys go.
    host.set_mig(&gpus, &[0], &[FakeMig::h100(0, 0, "7g.80gb")]);
    let out = run(labeller(host.root(), &api, &["--mig-strategy=mixed"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let labels = api.labels(NODE);
    assert_eq!(labels["nvidia.com/mig-7g.80gb.count"], "1");
    assert!(
        labels
            .keys()
            .all(|k| !k.starts_with("nvidia.com/mig-1g") && !k.starts_with("nvidia.com/mig-3g")),
        "{labels:?}"
    );
    // --kind-only never touches them.
    let out = run(labeller(host.root(), &api, &["--kind-only"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(api.labels(NODE)["nvidia.com/mig-7g.80gb.count"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_then_succeeds_and_gives_up_on_rbac_errors() {
    let host = FakeHost::jetson(Board::Nano);
    let api = FakeApiServer::start(NODE, &[]).await;
    api.fail_next(2);
    let out = run(labeller(host.root(), &api, &["--discovery=tegra"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("503"), "{}", stderr(&out));
    assert_eq!(
        api.labels(NODE)["nvidia.com/gpu.product"],
        "NVIDIA-Tegra-X1"
    );

    // Missing RBAC: the error names the ClusterRole; the init container still exits 0 so the
    // plugin starts.
    let api = FakeApiServer::start(NODE, &[]).await;
    api.set_forbidden(true);
    let out = run(labeller(host.root(), &api, &["--timeout=2"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("403") && err.contains("edgegpu-node-labeller"),
        "{err}"
    );
    assert!(err.contains("giving up"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_with_their_name() {
    let host = FakeHost::jetson(Board::Nano);
    let api = FakeApiServer::start(NODE, &[]).await;
    let mut cmd = labeller(host.root(), &api, &[]);
    cmd.env("NODE_NAME", "Not/A/Node");
    let out = run(cmd).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("Not/A/Node"), "{}", stderr(&out));
    // A file that is no CA bundle: said so, nothing sent.
    let out = run(labeller_trusting(
        host.root(),
        &api,
        &api.token_file(),
        &["--timeout=1"],
    ))
    .await;
    assert!(
        stderr(&out).contains("holds no certificate"),
        "{}",
        stderr(&out)
    );
    // A CA that did not sign the server's certificate: the TLS handshake fails.
    let other_ca = api.ca_file().with_file_name("other-ca.crt");
    let out = run(labeller_trusting(
        host.root(),
        &api,
        &other_ca,
        &["--timeout=1"],
    ))
    .await;
    assert!(stderr(&out).contains("TLS with"), "{}", stderr(&out));
    assert!(api.requests().is_empty());
}

/// The labeller's pod log is a pipe: no ANSI colour codes in it (tracing-subscriber's default
/// colours whatever stderr is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_pipe_carry_no_colour_codes() {
    let host = FakeHost::jetson(Board::Orin);
    let api = FakeApiServer::start(NODE, &[]).await;
    let mut cmd = labeller(host.root(), &api, &["--kind-only"]);
    cmd.env_remove("NO_COLOR");
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(" INFO "),
        "no log line: {}",
        stderr(&out)
    );
    assert!(
        !out.stderr.contains(&0x1b),
        "escape codes in a piped log: {:?}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_prints_the_patch() {
    let host = FakeHost::jetson(Board::Orin);
    let api = FakeApiServer::start(NODE, &[]).await;
    let out = run(labeller(host.root(), &api, &["--dry-run"])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let patch: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        patch["metadata"]["labels"]["nvidia.com/gpu.product"],
        "Orin"
    );
    assert_eq!(patch["metadata"]["labels"]["edgegpu.io/jetson.soc"], "T234");
    assert!(api.requests().is_empty());
}

/// Full labels with --wait on an AGX Orin: `nvpmodel -m 0` while it runs moves the power-mode
/// labels from the boot default (MODE_30W) to MAXN, and nothing else is patched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_follows_a_power_mode_change() {
    let host = FakeHost::jetson(Board::Orin);
    let api = FakeApiServer::start(NODE, &[]).await;
    let child = labeller(
        host.root(),
        &api,
        &["--discovery=tegra", "--wait", "--power-recheck-seconds=1"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .map(Running::new)
    .unwrap();
    let label = |key: &str| api.labels(NODE).get(key).cloned();
    let wait_for = |key: &'static str, value: &'static str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        async move {
            while label(key).as_deref() != Some(value) {
                assert!(Instant::now() < deadline, "{key} is {:?}", label(key));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_for("edgegpu.io/jetson.power-mode", "MODE_30W").await;
    assert_eq!(
        label("edgegpu.io/jetson.gpu-clock-max-mhz").as_deref(),
        Some("624")
    );
    let patches = || {
        api.requests()
            .into_iter()
            .filter(|r| r.method == "PATCH")
            .collect::<Vec<_>>()
    };
    let patches_before = patches().len();

    host.set_power_mode(Board::Orin, 0, 1_300_500_000);
    wait_for("edgegpu.io/jetson.power-mode", "MAXN").await;
    assert_eq!(
        label("edgegpu.io/jetson.power-mode.id").as_deref(),
        Some("0")
    );
    assert_eq!(
        label("edgegpu.io/jetson.gpu-clock-max-mhz").as_deref(),
        Some("1300")
    );
    assert_eq!(label("edgegpu.io/jetson.soc").as_deref(), Some("T234"));
    // One patch, of the power-mode keys alone.
    let after = patches();
    assert_eq!(after.len(), patches_before + 1);
    let changed = &after.last().unwrap().body.as_ref().unwrap()["metadata"]["labels"];
    let mut keys: Vec<&str> = changed
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "edgegpu.io/jetson.gpu-clock-max-mhz",
            "edgegpu.io/jetson.power-mode",
            "edgegpu.io/jetson.power-mode.id"
        ]
    );

    let status = sigterm_and_wait(child).await;
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_keeps_running_until_sigterm() {
    let host = FakeHost::jetson(Board::Orin);
    let api = FakeApiServer::start(NODE, &[]).await;
    let mut child = labeller(host.root(), &api, &["--kind-only", "--wait"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Running::new)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !api.labels(NODE).contains_key("edgegpu.io/gpu") {
        assert!(Instant::now() < deadline, "not labelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "exited without SIGTERM"
    );
    let t = Instant::now();
    let status = sigterm_and_wait(child).await;
    assert!(status.success(), "{status}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

// ---- power-policy: the companion that applies a wanted power mode ----------------------

/// `edgegpu-labeller power-policy` on `root` against `api`, as a test runs it: no chroot
/// (the fake root has no libc), a one-second recheck.
fn power_policy(root: &Path, api: &FakeApiServer, args: &[&str]) -> Running {
    let mut cmd = binary_command(bin());
    cmd.arg("power-policy")
        .arg("--root")
        .arg(root)
        .args(["--chroot=false", "--recheck-seconds=1"])
        .args(api.client_args())
        .args(args)
        .env("NODE_NAME", NODE)
        .env("EDGEGPU_LOG", "info")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Running::new(cmd.spawn().expect("start the power policy"))
}

/// Waits until `done` holds (30 s at most).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The reasons of the Events posted so far, in order, each with its message.
fn events(api: &FakeApiServer) -> Vec<(String, String)> {
    api.events()
        .iter()
        .map(|e| {
            assert_eq!(e["involvedObject"]["kind"], "Node");
            assert_eq!(e["involvedObject"]["name"], NODE);
            assert_eq!(e["metadata"]["namespace"], "default");
            (
                e["reason"].as_str().unwrap().to_string(),
                e["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A rule of the policy file selects the node; the host's nvpmodel sets MAXN, jetson_clocks
/// pins the clocks, the labels follow, and nothing runs again while MAXN stays in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_policy_applies_the_rule_that_selects_the_node() {
    let host = FakeHost::jetson(Board::Orin);
    host.install_power_tools(Board::Orin);
    let api = FakeApiServer::start(NODE, &[("fleet", "robots")]).await;
    let rules = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        rules.path(),
        r#"{"rules": [
            {"nodeSelector": {"fleet": "cameras"}, "mode": "MODE_15W"},
            {"nodeSelector": {"fleet": "robots"}, "mode": "maxn", "jetsonClocks": true}
        ]}"#,
    )
    .unwrap();
    let rules_flag = format!("--rules-file={}", rules.path().display());
    let child = power_policy(host.root(), &api, &[&rules_flag]);
    eventually("JetsonClocksPinned", || {
        events(&api).iter().any(|(r, _)| r == "JetsonClocksPinned")
    })
    .await;
    assert_eq!(
        events(&api)[0],
        (
            "PowerModeApplied".to_string(),
            "power mode MAXN (0) applied with nvpmodel, was MODE_30W (2) (asked by power \
             policy rule 1)"
                .to_string()
        )
    );
    // The labels follow at the end of that recheck.
    eventually("MAXN labels", || {
        api.labels(NODE).get("edgegpu.io/jetson.power-mode") == Some(&"MAXN".into())
    })
    .await;
    let labels = api.labels(NODE);
    assert_eq!(labels["edgegpu.io/jetson.power-mode.id"], "0");
    assert_eq!(labels["edgegpu.io/jetson.gpu-clock-max-mhz"], "1300");
    let devfreq = Board::Orin.devfreq_dir();
    let read = |f: &str| std::fs::read_to_string(host.path(&format!("{devfreq}/{f}"))).unwrap();
    assert_eq!(read("min_freq"), read("max_freq"), "pinned");
    // Three more rechecks: MAXN stays, nothing runs again.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    assert_eq!(host.nvpmodel_calls(), ["-m 0"]);
    assert_eq!(host.jetson_clocks_calls().len(), 2, "store, then pin");
    assert_eq!(events(&api).len(), 2);
    assert!(sigterm_and_wait(child).await.success());
}

/// The Node's annotation wins over the rules. A mode the board lacks is an error naming its
/// modes; a change L4T wants a reboot for is asked once, never confirmed, reported with the
/// pending label, and (allowed) leaves the reboot sentinel for the operator's tooling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_policy_never_confirms_a_reboot() {
    let host = FakeHost::jetson(Board::Orin);
    host.install_power_tools(Board::Orin);
    host.require_reboot_for_power_mode(1);
    host.write("/proc/sys/kernel/random/boot_id", "boot-1\n");
    let api = FakeApiServer::start(NODE, &[]).await;
    api.annotate(NODE, "edgegpu.io/power-mode", Some("MODE_20W"));
    let child = power_policy(host.root(), &api, &[]);
    eventually("PowerModeRejected", || !events(&api).is_empty()).await;
    assert_eq!(
        events(&api)[0],
        (
            "PowerModeRejected".to_string(),
            "this board has no power mode `MODE_20W`; its modes: MAXN (0), MODE_15W (1), \
             MODE_30W (2), MODE_50W (3) (asked by the Node's annotation edgegpu.io/power-mode)"
                .to_string()
        )
    );
    assert!(host.nvpmodel_calls().is_empty());
    // Whatever is wanted, the Node's power-mode labels are the host's.
    eventually("power-mode labels", || {
        api.labels(NODE).get("edgegpu.io/jetson.power-mode") == Some(&"MODE_30W".into())
    })
    .await;

    api.annotate(NODE, "edgegpu.io/power-mode", Some("1"));
    eventually("pending label", || {
        api.labels(NODE).get("edgegpu.io/jetson.power-mode.pending") == Some(&"MODE_15W".into())
    })
    .await;
    let (reason, message) = events(&api)[1].clone();
    assert_eq!(reason, "PowerModeNeedsReboot");
    assert!(
        message.starts_with(
            "power mode MODE_15W (1) needs a reboot (L4T asked to confirm one; edgegpu never \
             answers or reboots); MODE_30W (2) stays in force; allow a reboot"
        ),
        "{message}"
    );
    // Asked once; the question was never answered; the board is as it was.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(host.nvpmodel_calls(), ["-m 1"]);
    assert!(!host.path("/fake-nvpmodel-rebooted").exists());
    assert!(!host.path("/run/reboot-required").exists());
    assert_eq!(
        std::fs::read_to_string(host.path("/var/lib/nvpmodel/status")).ok(),
        None,
        "nvpmodel recorded nothing"
    );

    // The operator allows a reboot outside edgegpu: the sentinel, once.
    api.annotate(NODE, "edgegpu.io/power-mode-allow-reboot", Some("true"));
    eventually("reboot sentinel", || {
        host.path("/run/reboot-required").exists()
    })
    .await;
    eventually("second NeedsReboot", || events(&api).len() == 3).await;
    assert!(events(&api)[2]
        .1
        .contains("/run/reboot-required is there for the operator's reboot tooling"));
    assert!(!host.path("/fake-nvpmodel-rebooted").exists());

    // The annotation removed: nothing is wanted, the pending label goes.
    api.annotate(NODE, "edgegpu.io/power-mode", None);
    eventually("pending label removed", || {
        !api.labels(NODE)
            .contains_key("edgegpu.io/jetson.power-mode.pending")
    })
    .await;
    assert!(sigterm_and_wait(child).await.success());
}

#[test]
fn power_policy_refuses_a_bad_rules_file_naming_it() {
    let rules = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        rules.path(),
        "{\"rules\": [{\"mode\": \"MAXN\", \"clocks\": 1}]}",
    )
    .unwrap();
    let out = binary_command(bin())
        .args([
            "power-policy",
            "--node-name=node-1",
            "--api-server=https://127.0.0.1:1",
        ])
        .arg(format!("--rules-file={}", rules.path().display()))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}: line 1, column", rules.path().display()))
            && err.contains("unknown field `clocks`"),
        "{err}"
    );
}
