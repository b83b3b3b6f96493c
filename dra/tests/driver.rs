//! The real `edgegpu-dra-driver` binary on simulated nodes, between the fake kubelet (plugin
//! watcher registration, DRA gRPC) and the fake API server (Nodes, ResourceSlices,
//! ResourceClaims): what it publishes per board, a claim prepared from its allocation on the
//! API server into a CDI spec and unprepared again, a driver restart in between, the device
//! kinds the device plugin holds left alone and taken over, SIGTERM clean-up, MPS claims and
//! the MPS companion's daemon (`--mps`), a rolling update with two pods side by side.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgegpu_dra::DRIVER_NAME;
use edgegpu_kubelet_api::dra_v1;
use edgegpu_node::mps::plan::DaemonSettings;
use edgegpu_node::mps::status::{self as mps_status, Desired, State, Status};
use edgegpu_node::mps::MpsPaths;
use edgegpu_node::ownership::{try_own, DeviceKind, Owned};
use edgegpu_testkit::apiserver::FakeApiServer;
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::kubelet::{dial_plugin, dra_claim, FakeKubelet, FakeKubeletOptions};
use edgegpu_testkit::mps;
use edgegpu_testkit::process::{binary_command, OWNERSHIP_DIR_ENV};
use serde_json::{json, Value};

/// The program under test, as its manifests run it (a link to the multi-call binary).
fn bin() -> std::path::PathBuf {
    edgegpu_testkit::process::program("edgegpu-dra-driver")
}
const NODE: &str = "jetson-1";
const WAIT: Duration = Duration::from_secs(30);

/// A running driver; killed when dropped.
struct Driver {
    child: Child,
    log: std::sync::mpsc::Receiver<String>,
    seen: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Waits (bounded) for a log line containing `what`.
    fn wait_log(&mut self, what: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.seen.contains(what) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                }
                Err(_) => panic!("no `{what}` in the driver's log:\n{}", self.seen),
            }
        }
    }

    fn sigterm(&mut self) -> std::process::ExitStatus {
        self.terminate();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and returns at once.
    fn terminate(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
    }

    /// Waits (bounded) for the exit without holding up the runtime's other tasks.
    async fn exited(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The node: a fake host, the fake kubelet with its plugin watcher, the fake API server,
/// and the directories the driver writes.
struct Node {
    host: FakeHost,
    dir: tempfile::TempDir,
    kubelet: FakeKubelet,
    api: FakeApiServer,
}

impl Node {
    async fn start(host: FakeHost) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let mut options = FakeKubeletOptions::new(dir.path().join("device-plugins"));
        options.plugins_registry = Some(dir.path().join("plugins_registry"));
        let kubelet = FakeKubelet::start_with(options).await.unwrap();
        let api = FakeApiServer::start(NODE, &[]).await;
        std::fs::create_dir_all(dir.path().join("cdi")).unwrap();
        Node {
            host,
            dir,
            kubelet,
            api,
        }
    }

    fn cdi_dir(&self) -> PathBuf {
        self.dir.path().join("cdi")
    }

    /// The registration socket and the DRA socket of the pod with UID `uid` (rolling
    /// updates), or of the fixed names.
    fn sockets(&self, uid: Option<&str>) -> (PathBuf, PathBuf) {
        let (reg, dra) = match uid {
            Some(uid) => (
                format!("{DRIVER_NAME}-{uid}-reg.sock"),
                format!("dra-{uid}.sock"),
            ),
            None => (format!("{DRIVER_NAME}-reg.sock"), "dra.sock".to_string()),
        };
        (
            self.dir.path().join("plugins_registry").join(reg),
            self.dir.path().join("plugins").join(DRIVER_NAME).join(dra),
        )
    }

    fn locks(&self) -> PathBuf {
        self.dir.path().join("locks")
    }

    fn start_driver(&self, extra: &[&str]) -> Driver {
        let mut child = binary_command(bin())
            .arg("--node-name")
            .arg(NODE)
            .arg("--root")
            .arg(self.host.root())
            .arg("--api-server")
            .arg(self.api.url())
            .arg("--token-file")
            .arg(self.api.token_file())
            .arg("--ca-file")
            .arg(self.api.ca_file())
            .arg("--kubelet-registry-dir")
            .arg(self.dir.path().join("plugins_registry"))
            .arg("--kubelet-plugins-dir")
            .arg(self.dir.path().join("plugins"))
            .arg("--cdi-dir")
            .arg(self.cdi_dir())
            .args(["--discovery", "tegra"])
            .args(extra)
            .env(OWNERSHIP_DIR_ENV, self.locks())
            .env("EDGEGPU_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Driver {
            child,
            log,
            seen: String::new(),
        }
    }

    /// The names of the devices the API server holds for this node, once their count is
    /// `count` (bounded wait).
    async fn published(&self, driver: &mut Driver, count: usize) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let names: Vec<String> = self
                .api
                .slices()
                .iter()
                .filter(|s| s["spec"]["nodeName"] == NODE && s["spec"]["driver"] == DRIVER_NAME)
                .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            if names.len() == count {
                return names;
            }
            if Instant::now() >= deadline {
                while let Ok(line) = driver.log.try_recv() {
                    driver.seen.push_str(&line);
                    driver.seen.push('\n');
                }
                panic!(
                    "published {names:?}, expected {count} devices; the driver's log:\n{}",
                    driver.seen
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn allocation(devices: &[&str]) -> Value {
    json!({"devices": {
        "results": devices.iter().map(|d| json!({
            "request": "accel", "driver": DRIVER_NAME, "pool": NODE, "device": d,
        })).collect::<Vec<_>>(),
    }})
}

fn spec_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Xavier (JetPack 5): its GPU, two DLA cores and two PVAs published; a claim of the GPU and
/// one DLA core prepared into a CDI spec, kept across a driver restart, unprepared; SIGTERM
/// removes the sockets and leaves the slices to the kubelet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_prepares_survives_a_restart_and_unprepares() {
    let node = Node::start(FakeHost::jetson_with_engines(Board::Xavier)).await;
    let mut driver = node.start_driver(&[]);
    let mut names = node.published(&mut driver, 5).await;
    names.sort();
    assert_eq!(names, ["dla-0", "dla-1", "gpu-0", "pva-0", "pva-1"]);
    // One discovery for the round: the devices, their attributes and the GPU's health
    // monitors all come from it (it was three: labels, inventory, health resources).
    driver.wait_log("GPU resource ready");
    let discoveries = driver.seen.matches("Discovering GPUs").count();
    assert_eq!(discoveries, 1, "{}", driver.seen);
    let registered = node
        .kubelet
        .wait_for_dra_registration(DRIVER_NAME, 1, WAIT)
        .await
        .unwrap();
    assert_eq!(registered.chosen_service, "v1.DRAPlugin");

    let uid = "6b0c3d8e-5f1a-4e2b-9c7d-0a1b2c3d4e5f";
    node.api.add_claim(
        "vision",
        "infer",
        uid,
        Some(allocation(&["gpu-0", "dla-1"])),
    );
    let claim = dra_claim("vision", "infer", uid);
    let answer = node
        .kubelet
        .dra_prepare(DRIVER_NAME, std::slice::from_ref(&claim))
        .await
        .unwrap();
    let prepared = &answer.claims[uid];
    assert_eq!(prepared.error, "", "{prepared:?}");
    let ids: Vec<String> = prepared
        .devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();
    assert_eq!(
        ids,
        [
            format!("{DRIVER_NAME}/claim={uid}-gpu-0"),
            format!("{DRIVER_NAME}/claim={uid}-dla-1")
        ]
    );
    let files = spec_files(&node.cdi_dir());
    assert_eq!(files.len(), 1, "{files:?}");
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(node.cdi_dir().join(&files[0])).unwrap())
            .unwrap();
    let dla = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == format!("{uid}-dla-1"))
        .expect("the DLA core's device");
    assert!(
        dla["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("EDGEGPU_DLA_CORES=1")),
        "{dla}"
    );

    // A restart: the checkpoint answers the kubelet's retry, the spec stays.
    let status = driver.sigterm();
    assert!(status.success(), "{status:?}");
    assert!(
        !node
            .dir
            .path()
            .join("plugins_registry/edgegpu.io-reg.sock")
            .exists()
            && !node.dir.path().join("plugins/edgegpu.io/dra.sock").exists(),
        "sockets removed on SIGTERM"
    );
    assert_eq!(
        node.published(&mut driver, 5).await.len(),
        5,
        "slices stay for the kubelet to wipe"
    );
    let mut driver = node.start_driver(&[]);
    node.kubelet
        .wait_for_dra_registration(DRIVER_NAME, 2, WAIT)
        .await
        .unwrap();
    node.api.remove_claim("vision", "infer");
    let again = node
        .kubelet
        .dra_prepare(DRIVER_NAME, std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(again.claims[uid], *prepared, "the checkpoint answers");
    assert_eq!(spec_files(&node.cdi_dir()), files);

    let gone = node
        .kubelet
        .dra_unprepare(DRIVER_NAME, &[claim])
        .await
        .unwrap();
    assert_eq!(gone.claims[uid].error, "");
    assert!(spec_files(&node.cdi_dir()).is_empty(), "spec removed");
    driver.wait_log("ResourceSlices published");
    assert!(driver.sigterm().success());
}

/// The device plugin holds the GPU (its lock in the shared directory, held here by the test):
/// the driver publishes the engines only and says who has the GPU; once the lock is free it
/// takes the GPU over and publishes it too. `--devices` leaves kinds to the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_the_device_plugin_holds_are_not_published_until_free() {
    let node = Node::start(FakeHost::jetson_with_engines(Board::Xavier)).await;
    let held = match try_own(&node.locks(), DeviceKind::Gpu, "edgegpu-device-plugin").unwrap() {
        Owned::Yes(o) => o,
        other => panic!("{other:?}"),
    };
    let mut driver = node.start_driver(&[]);
    let mut names = node.published(&mut driver, 4).await;
    names.sort();
    assert_eq!(names, ["dla-0", "dla-1", "pva-0", "pva-1"]);
    driver.wait_log("served by edgegpu-device-plugin pid");
    drop(held);
    let names = node.published(&mut driver, 5).await;
    assert!(names.contains(&"gpu-0".to_string()), "{names:?}");
    driver.wait_log("took over the gpu devices");
    // The rebuild names the holder the lock file named (here the test, as the plugin).
    driver.wait_log("Rebuilding: took over the gpu devices edgegpu-device-plugin pid");
    assert!(driver.sigterm().success());

    // Only DLA cores, by choice: the GPU and PVAs stay free for the device plugin.
    let mut driver = node.start_driver(&["--devices", "dla"]);
    driver.wait_log("publishing dla-0, dla-1");
    let mut names = node.published(&mut driver, 2).await;
    names.sort();
    assert_eq!(names, ["dla-0", "dla-1"]);
    for kind in [DeviceKind::Gpu, DeviceKind::Pva] {
        assert!(
            matches!(
                try_own(&node.locks(), kind, "edgegpu-device-plugin").unwrap(),
                Owned::Yes(_)
            ),
            "{kind} is free"
        );
    }
    assert!(driver.sigterm().success());
}

/// An AGX Orin switched from its boot default (MODE_30W) to MAXN with `nvpmodel -m 0` while
/// the driver runs: the published power attributes follow at the next recheck, on the GPU
/// and the engines alike, without a rebuild (prepared claims and the kubelet registration
/// stay as they are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_mode_change_is_republished_without_a_rebuild() {
    let node = Node::start(FakeHost::jetson_with_engines(Board::Orin)).await;
    let mut driver = node.start_driver(&["--power-recheck-seconds", "1"]);
    node.published(&mut driver, 4).await;
    let attributes = |device: &str| -> Value {
        node.api
            .slices()
            .iter()
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .find(|d| d["name"] == device)
            .map(|d| d["attributes"].clone())
            .unwrap_or(Value::Null)
    };
    let gpu = attributes("gpu-0");
    assert_eq!(gpu["powerMode"], json!({"string": "MODE_30W"}), "{gpu}");
    assert_eq!(gpu["powerModeId"], json!({"int": 2}));
    assert_eq!(gpu["gpuClockMaxMHz"], json!({"int": 624}));

    node.host.set_power_mode(Board::Orin, 0, 1_300_500_000);
    let deadline = Instant::now() + WAIT;
    while attributes("gpu-0")["powerMode"] != json!({"string": "MAXN"}) {
        assert!(Instant::now() < deadline, "{}", attributes("gpu-0"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gpu = attributes("gpu-0");
    assert_eq!(gpu["powerModeId"], json!({"int": 0}));
    // MAXN sets no GPU limit: the GPU's highest frequency.
    assert_eq!(gpu["gpuClockMaxMHz"], json!({"int": 1300}));
    let dla = attributes("dla-0");
    assert_eq!(dla["powerMode"], json!({"string": "MAXN"}), "{dla}");
    assert_eq!(
        dla["gpuClockMaxMHz"],
        Value::Null,
        "the GPU's own attribute"
    );
    driver.wait_log("the power mode changed");
    assert!(!driver.seen.contains("Rebuilding"), "{}", driver.seen);
    assert!(driver.sigterm().success());
}

/// What the prepare/unprepare loop of [`a_rolling_update_drops_nothing`] saw: per call, the
/// phase of the update it started in and what went wrong, if anything.
type Calls = Arc<Mutex<Vec<(usize, Result<(), String>)>>>;

/// Prepares and unprepares `claim` through the kubelet until `stop`, recording each call
/// with the phase it started in. Each round ends with a short pause, which also lets the
/// task be cancelled when calls fail at once (a failed test's runtime going away).
async fn prepare_unprepare_loop(
    node: Arc<Node>,
    claim: dra_v1::Claim,
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    calls: Calls,
) {
    let uid = claim.uid.clone();
    while !stop.load(Ordering::SeqCst) {
        let started = phase.load(Ordering::SeqCst);
        let prepared = match node
            .kubelet
            .dra_prepare(DRIVER_NAME, std::slice::from_ref(&claim))
            .await
        {
            Ok(answer) if answer.claims[&uid].error.is_empty() => Ok(()),
            Ok(answer) => Err(format!("prepare: {}", answer.claims[&uid].error)),
            Err(status) => Err(format!("prepare: {status}")),
        };
        calls.lock().unwrap().push((started, prepared));
        let started = phase.load(Ordering::SeqCst);
        let unprepared = match node
            .kubelet
            .dra_unprepare(DRIVER_NAME, std::slice::from_ref(&claim))
            .await
        {
            Ok(answer) if answer.claims[&uid].error.is_empty() => Ok(()),
            Ok(answer) => Err(format!("unprepare: {}", answer.claims[&uid].error)),
            Err(status) => Err(format!("unprepare: {status}")),
        };
        calls.lock().unwrap().push((started, unprepared));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A task aborted when this is dropped: a failing test does not leave it running.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits (bounded) until the loop has finished a call that started in `phase`.
async fn a_call_in(calls: &Calls, phase: usize) {
    let deadline = Instant::now() + WAIT;
    while !calls.lock().unwrap().iter().any(|(p, _)| *p == phase) {
        assert!(Instant::now() < deadline, "no call in phase {phase}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A rolling update of the DaemonSet (maxSurge 1, maxUnavailable 0): the new pod starts
/// beside the old one, each with sockets named after its pod UID and both holding the device
/// kinds; the kubelet moves to the new pod; the old one gets SIGTERM and removes its own
/// sockets only. Nothing is lost on the way: a claim the old pod prepared before, and one it
/// prepared after the new pod had read the checkpoint (a call in flight at the switch), are
/// answered and unprepared by the new pod, and the device the old pod gave away is busy for
/// the new one; a prepare/unprepare loop running through every phase never fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_drops_nothing() {
    const OLD: &str = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
    const NEW: &str = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
    let node = Arc::new(Node::start(FakeHost::jetson_with_engines(Board::Xavier)).await);
    let claims = [
        ("before", "1b1b1b1b-0000-4000-8000-000000000001", "gpu-0"),
        ("loop", "1b1b1b1b-0000-4000-8000-000000000002", "dla-0"),
        ("in-flight", "1b1b1b1b-0000-4000-8000-000000000003", "pva-0"),
        ("contender", "1b1b1b1b-0000-4000-8000-000000000004", "pva-0"),
    ];
    for (name, uid, device) in claims {
        node.api
            .add_claim("apps", name, uid, Some(allocation(&[device])));
    }
    let [before, looped, in_flight, contender] =
        claims.map(|(name, uid, _)| dra_claim("apps", name, uid));

    let mut old = node.start_driver(&["--rolling-update-pod-uid", OLD]);
    node.published(&mut old, 5).await;
    node.kubelet
        .wait_for_dra_registration(DRIVER_NAME, 1, WAIT)
        .await
        .unwrap();
    let (old_reg, old_dra) = node.sockets(Some(OLD));
    let (fixed_reg, fixed_dra) = node.sockets(None);
    assert!(old_reg.exists() && old_dra.exists());
    assert!(!fixed_reg.exists() && !fixed_dra.exists(), "no fixed names");
    let answer = node
        .kubelet
        .dra_prepare(DRIVER_NAME, std::slice::from_ref(&before))
        .await
        .unwrap();
    assert_eq!(answer.claims[&before.uid].error, "");

    // Phase 0: the old pod alone; 1: both; 2: the old one shutting down; 3: the new one alone.
    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let calls: Calls = Arc::default();
    let mut looping = AbortOnDrop(tokio::spawn(prepare_unprepare_loop(
        node.clone(),
        looped,
        phase.clone(),
        stop.clone(),
        calls.clone(),
    )));
    a_call_in(&calls, 0).await;

    let mut new = node.start_driver(&["--rolling-update-pod-uid", NEW]);
    let (new_reg, new_dra) = node.sockets(Some(NEW));
    node.kubelet
        .wait_until("both pods registered", WAIT, |k| {
            k.dra_plugins(DRIVER_NAME).len() == 2
        })
        .await
        .unwrap();
    assert_eq!(
        node.kubelet
            .wait_for_dra_registration(DRIVER_NAME, 2, WAIT)
            .await
            .unwrap()
            .endpoint,
        new_dra,
        "the kubelet calls the newest pod"
    );
    phase.store(1, Ordering::SeqCst);
    a_call_in(&calls, 1).await;
    new.wait_log("ResourceSlices published");
    assert_eq!(
        node.published(&mut new, 5).await.len(),
        5,
        "both publish all"
    );

    // A call the kubelet sent the old pod just before it moved: the old pod prepares after
    // the new one read the checkpoint at its start.
    let channel = dial_plugin(&old_dra, false, WAIT).await.unwrap();
    let mut direct = dra_v1::dra_plugin_client::DraPluginClient::new(channel);
    let answer = direct
        .node_prepare_resources(dra_v1::NodePrepareResourcesRequest {
            claims: vec![in_flight.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    let prepared_by_old = answer.claims[&in_flight.uid].clone();
    assert_eq!(prepared_by_old.error, "");
    // The new pod knows it: the device is busy, and the claim's answer is the old pod's.
    let answer = node
        .kubelet
        .dra_prepare(DRIVER_NAME, std::slice::from_ref(&contender))
        .await
        .unwrap();
    let refused = &answer.claims[&contender.uid].error;
    assert!(
        refused.contains("device pva-0 is busy") && refused.contains(&in_flight.uid),
        "{refused}"
    );
    let answer = node
        .kubelet
        .dra_prepare(DRIVER_NAME, std::slice::from_ref(&in_flight))
        .await
        .unwrap();
    assert_eq!(answer.claims[&in_flight.uid], prepared_by_old);

    phase.store(2, Ordering::SeqCst);
    old.terminate();
    assert!(old.exited().await.success());
    a_call_in(&calls, 2).await;
    assert!(
        !old_reg.exists() && !old_dra.exists(),
        "the old pod removes its sockets"
    );
    assert!(new_reg.exists() && new_dra.exists(), "the new pod's stay");
    node.kubelet
        .wait_until("the old pod deregistered", WAIT, |k| {
            k.dra_plugins(DRIVER_NAME).len() == 1
        })
        .await
        .unwrap();
    assert_eq!(node.kubelet.dra_plugins(DRIVER_NAME)[0].endpoint, new_dra);
    phase.store(3, Ordering::SeqCst);
    a_call_in(&calls, 3).await;
    stop.store(true, Ordering::SeqCst);
    (&mut looping.0).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let failed: Vec<_> = calls.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.is_empty(), "failed calls (phase, error): {failed:?}");

    // The claims the old pod prepared are the new pod's to unprepare.
    let gone = node
        .kubelet
        .dra_unprepare(DRIVER_NAME, &[before.clone(), in_flight.clone()])
        .await
        .unwrap();
    assert_eq!(gone.claims[&before.uid].error, "");
    assert_eq!(gone.claims[&in_flight.uid].error, "");
    assert!(spec_files(&node.cdi_dir()).is_empty(), "every spec removed");
    let checkpoint: Value = serde_json::from_slice(
        &std::fs::read(node.dir.path().join("plugins/edgegpu.io/checkpoint.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(checkpoint["claims"], json!({}), "{checkpoint}");
    assert!(new.sigterm().success());
    assert!(!new_reg.exists() && !new_dra.exists());
}

/// Bad command lines fail before anything starts, naming what is wrong.
#[test]
fn bad_flags_are_refused_with_their_reason() {
    let out = binary_command(bin())
        .args([
            "--node-name",
            "Not_A_Node",
            "--api-server",
            "https://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`Not_A_Node` is not a node name"), "{err}");
    let out = binary_command(bin())
        .args(["--node-name", "n", "--devices", "gpu,tpu"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`tpu` is not a device kind"), "{err}");
    let out = binary_command(bin())
        .args(["--node-name", "n", "--rolling-update-pod-uid", "../pod"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pod UID \"../pod\" cannot name a socket"),
        "{err}"
    );
}

// ---- MPS ----------------------------------------------------------------------------------

/// The MPS companion (`edgegpu-device-plugin mps-control-daemon`, the plugin's program) with
/// the fake `nvidia-cuda-mps-control`, as on a device-plugin node; SIGKILLed when dropped.
struct Companion(Child);

impl Companion {
    fn start(host: &FakeHost, mps_root: &Path) -> Companion {
        host.install_mps_control_runnable(mps::HOST_PATH);
        let program = edgegpu_testkit::process::program("edgegpu-device-plugin");
        Companion(
            mps::companion_command(&program, host.root(), mps_root)
                .spawn()
                .expect("start the MPS companion"),
        )
    }

    fn stop(mut self) -> std::process::ExitStatus {
        edgegpu_testkit::process::terminate(self.0.id());
        self.0.wait().unwrap()
    }
}

impl Drop for Companion {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const MPS_RESOURCE: &str = "nvidia.com/gpu";

impl Node {
    fn mps_root(&self) -> PathBuf {
        self.dir.path().join("mps")
    }

    /// `--mps` and this node's `--mps-root`.
    fn start_mps_driver(&self) -> Driver {
        let root = self.mps_root().display().to_string();
        self.start_driver(&["--mps", "--mps-root", &root])
    }

    /// The daemons the companion is asked for, once the file exists (bounded wait).
    fn wait_desired(&self) -> Desired {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(d) = mps_status::read_desired(&self.mps_root()).unwrap() {
                return d;
            }
            assert!(Instant::now() < deadline, "no daemons.json");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's status as the companion reports it.
    fn report(&self, state: State, reason: Option<&str>, settings: &DaemonSettings) {
        mps_status::write(
            &MpsPaths::new(&self.mps_root(), MPS_RESOURCE).status,
            &Status {
                state,
                reason: reason.map(str::to_string),
                pid: None,
                restarts: 0,
                settings: settings.clone(),
            },
        )
        .unwrap();
    }
}

/// The daemon the driver asks for: no default limits, no GPU in EXCLUSIVE_PROCESS.
fn plain_daemon() -> DaemonSettings {
    DaemonSettings {
        resource: MPS_RESOURCE.into(),
        active_thread_percentage: None,
        pinned_memory_limits: vec![],
        exclusive_gpus: vec![],
    }
}

/// gpu-0 for `request`, with a claim config sharing it by `sharing`.
fn shared_gpu(sharing: Value) -> Value {
    json!({"devices": {
        "results": [{"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-0"}],
        "config": [{"source": "FromClaim", "requests": ["gpu"], "opaque": {
            "driver": DRIVER_NAME,
            "parameters": {"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig", "sharing": sharing},
        }}],
    }})
}

/// An AGX Orin on L4T R36.4 with `--mps`: the driver asks the companion for one daemon
/// without limits. An MPS claim fails to prepare, alone in the NodePrepareResources call
/// that prepares a time-sliced claim of the same GPU, while the daemon has no status, is
/// starting or failed (each said with the companion's reason); once the real companion runs
/// the daemon and reports it ready, the claim gets its pipe directory and its own limits,
/// and the daemon got no default limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_claims_join_the_daemon_the_driver_asks_for_once_it_is_ready() {
    let node = Node::start(FakeHost::jetson_with_engines(Board::Orin)).await;
    let mut driver = node.start_mps_driver();
    node.published(&mut driver, 4).await;
    driver.wait_log("MPS control daemon requested from the MPS companion");
    assert_eq!(node.wait_desired().daemons, [plain_daemon()]);
    node.kubelet
        .wait_for_dra_registration(DRIVER_NAME, 1, WAIT)
        .await
        .unwrap();

    let mps_uid = "1f0e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
    let sliced_uid = "2a1b0c9d-8e7f-4a6b-9c5d-4e3f2a1b0c9d";
    node.api.add_claim(
        "vision",
        "mps",
        mps_uid,
        Some(shared_gpu(
            json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 30, "pinnedMemoryLimit": "2Gi"}}),
        )),
    );
    node.api.add_claim(
        "vision",
        "sliced",
        sliced_uid,
        Some(shared_gpu(json!({"strategy": "TimeSlicing"}))),
    );
    let claims = [
        dra_claim("vision", "mps", mps_uid),
        dra_claim("vision", "sliced", sliced_uid),
    ];
    let status_file = MpsPaths::new(&node.mps_root(), MPS_RESOURCE).status;
    let mut refusals = vec![(
        None,
        format!(
            "the MPS control daemon for nvidia.com/gpu has reported no state ({} does not exist): is the MPS companion",
            status_file.display()
        ),
    )];
    refusals.push((
        Some((State::Starting, None)),
        "is not ready: its state is starting (".into(),
    ));
    refusals.push((
        Some((State::Failed, Some("the daemon exited (status 3)"))),
        "is not ready: its state is failed: the daemon exited (status 3) (".into(),
    ));
    for (state, says) in refusals {
        if let Some((state, reason)) = state {
            node.report(state, reason, &plain_daemon());
        }
        let answer = node
            .kubelet
            .dra_prepare(DRIVER_NAME, &claims)
            .await
            .unwrap();
        let error = &answer.claims[mps_uid].error;
        assert!(
            error.starts_with(&format!("claim vision/mps ({mps_uid}): ")),
            "{error}"
        );
        assert!(error.contains(&says), "{error}");
        // The other claim of the call is prepared (and answered from the checkpoint after).
        assert_eq!(answer.claims[sliced_uid].error, "", "{answer:?}");
    }
    assert_eq!(
        spec_files(&node.cdi_dir()).len(),
        1,
        "the time-sliced claim's"
    );

    // The companion runs the daemon asked for and reports it ready.
    std::fs::remove_file(&status_file).unwrap();
    let companion = Companion::start(&node.host, &node.mps_root());
    let deadline = Instant::now() + WAIT;
    while !matches!(mps_status::read(&status_file), Ok(Some(s)) if s.state == State::Ready) {
        assert!(
            Instant::now() < deadline,
            "not ready: {:?}",
            mps_status::read(&status_file)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answer = node
        .kubelet
        .dra_prepare(DRIVER_NAME, &claims[..1])
        .await
        .unwrap();
    assert_eq!(answer.claims[mps_uid].error, "", "{answer:?}");
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(
            node.cdi_dir()
                .join(format!("{DRIVER_NAME}-claim_{mps_uid}.json")),
        )
        .unwrap(),
    )
    .unwrap();
    let env = &spec["devices"][0]["containerEdits"]["env"];
    let pipe = MpsPaths::new(&node.mps_root(), MPS_RESOURCE).pipe;
    for wanted in [
        format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display()),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30".to_string(),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M".to_string(),
    ] {
        assert!(env.as_array().unwrap().contains(&json!(wanted)), "{env}");
    }
    // The claim's limits are its own: the daemon was given no defaults.
    let commands = mps::commands(&pipe);
    assert!(
        !commands.iter().any(|c| c.starts_with("set_default_")),
        "{commands:?}"
    );
    assert!(companion.stop().success());
    assert!(driver.sigterm().success());
}

/// `--mps` while the device plugin holds the GPUs: the plugin's list of daemons is left as it
/// is; once the driver takes the GPUs over, its own daemon replaces it. On a Xavier (L4T 35,
/// which ships no control binary) no daemon is asked for, and the log says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugins_list_of_mps_daemons_is_left_alone_until_the_gpus_are_taken_over() {
    let node = Node::start(FakeHost::jetson_with_engines(Board::Orin)).await;
    let held = match try_own(&node.locks(), DeviceKind::Gpu, "edgegpu-device-plugin").unwrap() {
        Owned::Yes(o) => o,
        other => panic!("{other:?}"),
    };
    let plugins = Desired {
        daemons: vec![DaemonSettings {
            active_thread_percentage: Some(25),
            ..plain_daemon()
        }],
    };
    mps_status::write_desired(&node.mps_root(), &plugins).unwrap();
    let mut driver = node.start_mps_driver();
    node.published(&mut driver, 3).await;
    driver.wait_log("--mps: this driver does not serve the node's GPUs");
    assert_eq!(node.wait_desired(), plugins);
    drop(held);
    driver.wait_log("took over the gpu devices");
    driver.wait_log("MPS control daemon requested from the MPS companion");
    assert_eq!(node.wait_desired().daemons, [plain_daemon()]);
    assert!(driver.sigterm().success());

    let node = Node::start(FakeHost::jetson_with_engines(Board::Xavier)).await;
    let mut driver = node.start_mps_driver();
    node.published(&mut driver, 5).await;
    driver.wait_log(
        "--mps: MPS cannot serve this node's GPUs (L4T 35.4.1 ships no nvidia-cuda-mps-control",
    );
    assert!(!node.mps_root().join("desired").exists());
    assert!(driver.sigterm().success());
}
