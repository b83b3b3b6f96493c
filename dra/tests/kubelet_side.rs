//! The kubelet side of the DRA driver against the fake kubelet (edgegpu-testkit), whose
//! plugin watcher and DRA calls follow the kubelet's code: registration, v1 and v1beta1
//! prepare/unprepare, per-claim errors, serialisation, health, kubelet restart, socket
//! deletion and shutdown, two pods of a rolling update side by side. A small in-test `Driver`
//! stands in for the node side.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgegpu_dra::kubelet::rolling::PodUid;
use edgegpu_dra::kubelet::{
    registration, serve, ClaimRef, DeviceHealth, Driver, DriverError, Health, KubeletOptions,
    PreparedDevice,
};
use edgegpu_kubelet_api::dra_health_v1alpha1::HealthStatus;
use edgegpu_kubelet_api::pluginregistration::PluginInfo;
use edgegpu_kubelet_api::{dra_v1, dra_v1beta1};
use edgegpu_testkit::kubelet::{dial_plugin, dra_claim, FakeKubelet, FakeKubeletOptions};
use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;

const DRIVER: &str = "edgegpu.io";
/// Generous: only ever waited for, never asserted as a duration.
const WAIT: Duration = Duration::from_secs(20);

/// Stands in for the node side: one device per claim, failures for chosen UIDs, a delay
/// to make overlapping calls visible, and the count of calls running at once.
struct TestDriver {
    failing: HashSet<String>,
    delay: Duration,
    running: AtomicUsize,
    max_running: AtomicUsize,
    calls: Mutex<Vec<String>>,
    health: watch::Sender<Vec<DeviceHealth>>,
}

impl TestDriver {
    fn new(failing: &[&str], delay: Duration) -> Arc<TestDriver> {
        let (health, _) = watch::channel(vec![
            device("gpu-0", Health::Healthy),
            device("gpu-1", Health::Healthy),
        ]);
        Arc::new(TestDriver {
            failing: failing.iter().map(|s| s.to_string()).collect(),
            delay,
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            calls: Mutex::new(Vec::new()),
            health,
        })
    }

    async fn call(&self, what: String) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        self.calls.lock().unwrap().push(what);
        tokio::time::sleep(self.delay).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

fn device(name: &str, health: Health) -> DeviceHealth {
    DeviceHealth {
        pool: "node-a".into(),
        device: name.into(),
        health,
        message: String::new(),
    }
}

#[tonic::async_trait]
impl Driver for TestDriver {
    async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, DriverError> {
        self.call(format!("prepare {}", claim.uid)).await;
        if self.failing.contains(&claim.uid) {
            return Err(format!("no device free for claim {}", claim.name).into());
        }
        Ok(vec![PreparedDevice {
            requests: vec!["gpu/large".into()],
            pool: "node-a".into(),
            device: "gpu-0".into(),
            cdi_device_ids: vec![format!("edgegpu.io/claim={}-gpu-0", claim.uid)],
            share_id: Some(format!("share-{}", claim.uid)),
        }])
    }

    async fn unprepare(&self, claim: &ClaimRef) -> Result<(), DriverError> {
        self.call(format!("unprepare {}", claim.uid)).await;
        if self.failing.contains(&claim.uid) {
            return Err(format!("cannot remove the CDI spec of {}", claim.name).into());
        }
        Ok(())
    }

    fn health(&self) -> watch::Receiver<Vec<DeviceHealth>> {
        self.health.subscribe()
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    kubelet: FakeKubelet,
    options: KubeletOptions,
    driver: Arc<TestDriver>,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<anyhow::Result<()>>,
}

impl Setup {
    async fn start(
        driver: Arc<TestDriver>,
        kubelet: impl FnOnce(&mut FakeKubeletOptions),
    ) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let registry = dir.path().join("plugins_registry");
        let mut kopts = FakeKubeletOptions::new(dir.path().join("device-plugins"));
        kopts.plugins_registry = Some(registry.clone());
        kubelet(&mut kopts);
        let kubelet = FakeKubelet::start_with(kopts).await.unwrap();
        let options = KubeletOptions {
            driver_name: DRIVER.into(),
            registry_dir: registry,
            plugin_dir: dir.path().join("plugins").join(DRIVER),
            rolling_update: None,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve(driver.clone(), options.clone(), async {
            let _ = stopped.await;
        }));
        Setup {
            _dir: dir,
            kubelet,
            options,
            driver,
            stop: Some(stop),
            served,
        }
    }

    async fn shutdown(&mut self) -> anyhow::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.served).await.unwrap()
    }
}

fn claims(uids: &[&str]) -> Vec<dra_v1::Claim> {
    uids.iter()
        .map(|uid| dra_claim("default", &format!("claim-{uid}"), uid))
        .collect()
}

async fn wait_for_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} did not come back",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_with_v1_first_and_answers_every_claim_of_a_batch() {
    let mut s = Setup::start(TestDriver::new(&["bad"], Duration::ZERO), |_| {}).await;
    let plugin = s
        .kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    assert_eq!(plugin.chosen_service, "v1.DRAPlugin");
    assert_eq!(plugin.endpoint, s.options.dra_socket());
    assert_eq!(plugin.registration_socket, s.options.registration_socket());
    assert_eq!(
        plugin.supported_versions,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1alpha1.DRAResourceHealth"
        ]
    );

    let response = s
        .kubelet
        .dra_prepare(DRIVER, &claims(&["a", "bad", "c"]))
        .await
        .unwrap();
    assert_eq!(response.claims.len(), 3, "{response:?}");
    for uid in ["a", "c"] {
        let claim = &response.claims[uid];
        assert_eq!(claim.error, "");
        assert_eq!(
            claim.devices,
            [dra_v1::Device {
                request_names: vec!["gpu".into()],
                pool_name: "node-a".into(),
                device_name: "gpu-0".into(),
                cdi_device_ids: vec![format!("edgegpu.io/claim={uid}-gpu-0")],
                share_id: Some(format!("share-{uid}")),
            }]
        );
    }
    assert_eq!(
        response.claims["bad"].error,
        "no device free for claim claim-bad"
    );
    assert!(response.claims["bad"].devices.is_empty());

    let response = s
        .kubelet
        .dra_unprepare(DRIVER, &claims(&["a", "bad", "c"]))
        .await
        .unwrap();
    assert_eq!(response.claims.len(), 3, "{response:?}");
    assert_eq!(response.claims["a"].error, "");
    assert_eq!(response.claims["c"].error, "");
    assert_eq!(
        response.claims["bad"].error,
        "cannot remove the CDI spec of claim-bad"
    );
    assert_eq!(
        *s.driver.calls.lock().unwrap(),
        [
            "prepare a",
            "prepare bad",
            "prepare c",
            "unprepare a",
            "unprepare bad",
            "unprepare c"
        ]
    );
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1beta1_kubelet_gets_the_same_answers_without_share_id() {
    let mut s = Setup::start(TestDriver::new(&["bad"], Duration::ZERO), |k| {
        k.dra_services = vec!["v1beta1.DRAPlugin".into()];
    })
    .await;
    let plugin = s
        .kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    assert_eq!(plugin.chosen_service, "v1beta1.DRAPlugin");
    assert_eq!(
        s.kubelet.dra_registered(DRIVER).as_deref(),
        Some("v1beta1.DRAPlugin")
    );

    let response = s
        .kubelet
        .dra_prepare(DRIVER, &claims(&["a", "bad"]))
        .await
        .unwrap();
    assert_eq!(response.claims.len(), 2);
    let a = &response.claims["a"];
    assert_eq!(a.error, "");
    assert_eq!(a.devices.len(), 1);
    assert_eq!(a.devices[0].request_names, ["gpu"]);
    assert_eq!(a.devices[0].cdi_device_ids, ["edgegpu.io/claim=a-gpu-0"]);
    assert_eq!(a.devices[0].share_id, None, "v1beta1 has no share_id");
    assert_eq!(
        response.claims["bad"].error,
        "no device free for claim claim-bad"
    );

    let response = s
        .kubelet
        .dra_unprepare(DRIVER, &claims(&["a", "bad"]))
        .await
        .unwrap();
    assert_eq!(response.claims["a"].error, "");
    assert_eq!(
        response.claims["bad"].error,
        "cannot remove the CDI spec of claim-bad"
    );
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_without_uid_fails_the_whole_request() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |_| {}).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    let mut batch = claims(&["a"]);
    batch.push(dra_claim("default", "no-uid", ""));
    let err = s.kubelet.dra_prepare(DRIVER, &batch).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        s.driver.calls.lock().unwrap().is_empty(),
        "nothing may be prepared"
    );
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_and_unprepare_run_one_at_a_time() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::from_millis(30)), |_| {}).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    let kubelet = &s.kubelet;
    let prepares = (0..4).map(|i| {
        let batch = claims(&[&format!("p{i}")]);
        async move { kubelet.dra_prepare(DRIVER, &batch).await.unwrap() }
    });
    let unprepares = (0..4).map(|i| {
        let batch = claims(&[&format!("u{i}")]);
        async move { kubelet.dra_unprepare(DRIVER, &batch).await.unwrap() }
    });
    // v1beta1 calls share the lock with v1 ones.
    let channel = dial_plugin(&s.options.dra_socket(), false, WAIT)
        .await
        .unwrap();
    let beta = (0..4).map(|i| {
        let mut client = dra_v1beta1::dra_plugin_client::DraPluginClient::new(channel.clone());
        async move {
            let request = dra_v1beta1::NodePrepareResourcesRequest {
                claims: vec![dra_v1beta1::Claim {
                    namespace: "default".into(),
                    uid: format!("b{i}"),
                    name: format!("claim-b{i}"),
                }],
            };
            client.node_prepare_resources(request).await.unwrap()
        }
    });
    tokio::join!(
        futures_util::future::join_all(prepares),
        futures_util::future::join_all(unprepares),
        futures_util::future::join_all(beta)
    );
    assert_eq!(s.driver.calls.lock().unwrap().len(), 12);
    assert_eq!(
        s.driver.max_running.load(Ordering::SeqCst),
        1,
        "driver calls overlapped: {:?}",
        s.driver.calls.lock().unwrap()
    );
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_stream_sends_the_full_list_on_connect_and_on_change() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |k| {
        k.resource_health_status = true;
    })
    .await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    let mut stream = s.kubelet.dra_health(DRIVER).await.unwrap();
    let first = stream.next(WAIT).await.unwrap().expect("a first list");
    assert_eq!(first.len(), 2);
    assert!(first
        .iter()
        .all(|d| d.health == HealthStatus::Healthy as i32));
    let mut names: Vec<_> = first
        .iter()
        .map(|d| d.device.as_ref().unwrap().device_name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["gpu-0", "gpu-1"]);

    s.driver.health.send_replace(vec![
        device("gpu-0", Health::Healthy),
        DeviceHealth {
            message: "Xid 79: GPU has fallen off the bus".into(),
            ..device("gpu-1", Health::Unhealthy)
        },
    ]);
    let changed = stream
        .wait_for("gpu-1 unhealthy", WAIT, |devices| {
            devices.iter().any(|d| {
                d.device.as_ref().unwrap().device_name == "gpu-1"
                    && d.health == HealthStatus::Unhealthy as i32
            })
        })
        .await
        .unwrap();
    assert_eq!(
        changed.len(),
        2,
        "every response lists all devices: {changed:?}"
    );
    let gpu1 = changed
        .iter()
        .find(|d| d.device.as_ref().unwrap().device_name == "gpu-1")
        .unwrap();
    assert_eq!(gpu1.message, "Xid 79: GPU has fallen off the bus");
    assert!(gpu1.last_updated_time > 0);

    // The kubelet's own stream (ResourceHealthStatus on) saw the change as well.
    s.kubelet
        .wait_until("the kubelet's health view", WAIT, |k| {
            k.dra_device_health(DRIVER).is_some_and(|devices| {
                devices.len() == 2
                    && devices
                        .iter()
                        .any(|d| d.health == HealthStatus::Unhealthy as i32)
            })
        })
        .await
        .unwrap();

    // Shutdown ends open streams instead of waiting for them.
    s.shutdown().await.unwrap();
    assert!(stream.next(WAIT).await.map_or(true, |m| m.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_list_is_sent_again_before_the_kubelet_ages_it_out() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |_| {}).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    let mut stream = s.kubelet.dra_health(DRIVER).await.unwrap();
    let first = stream.next(WAIT).await.unwrap().expect("a first list");
    // Nothing changes; the list must come again within the kubelet's 30 s default timeout.
    let again = stream
        .next(Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the list again");
    assert_eq!(again.len(), first.len());
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_registration_leaves_the_driver_serving() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |k| {
        k.dra_services = vec!["v2.DRAPlugin".into()];
    })
    .await;
    s.kubelet
        .wait_until("the refusal", WAIT, |k| {
            k.events()
                .iter()
                .any(|e| e.contains("none of services supported by the plugin"))
        })
        .await
        .unwrap();
    assert_eq!(s.kubelet.dra_registered(DRIVER), None);
    assert!(
        !s.served.is_finished(),
        "a refusal must not stop the driver"
    );
    assert!(s.options.registration_socket().exists());
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_restart_registers_the_driver_again() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |_| {}).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    s.kubelet.restart().await.unwrap();
    let plugin = s
        .kubelet
        .wait_for_dra_registration(DRIVER, 2, WAIT)
        .await
        .unwrap();
    assert_eq!(plugin.chosen_service, "v1.DRAPlugin");
    assert_eq!(s.kubelet.dra_plugins(DRIVER).len(), 1);
    let response = s
        .kubelet
        .dra_prepare(DRIVER, &claims(&["after-restart"]))
        .await
        .unwrap();
    assert_eq!(response.claims["after-restart"].error, "");
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_removes_both_sockets_and_the_kubelet_deregisters() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |_| {}).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    assert!(s.options.dra_socket().exists());
    assert!(s.options.registration_socket().exists());
    s.shutdown().await.unwrap();
    assert!(!s.options.dra_socket().exists());
    assert!(!s.options.registration_socket().exists());
    s.kubelet
        .wait_until("deregistration", WAIT, |k| {
            k.dra_registered(DRIVER).is_none()
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_sockets_are_created_again() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |_| {}).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();

    // dra.sock: a new connection reaches the driver through the new socket.
    std::fs::remove_file(s.options.dra_socket()).unwrap();
    wait_for_socket(&s.options.dra_socket()).await;
    let channel = dial_plugin(&s.options.dra_socket(), false, WAIT)
        .await
        .unwrap();
    let mut client = dra_v1::dra_plugin_client::DraPluginClient::new(channel);
    let response = client
        .node_prepare_resources(dra_v1::NodePrepareResourcesRequest {
            claims: claims(&["direct"]),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.claims["direct"].error, "");

    // The registration socket: the kubelet deregisters the driver and registers it again.
    std::fs::remove_file(s.options.registration_socket()).unwrap();
    wait_for_socket(&s.options.registration_socket()).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 2, WAIT)
        .await
        .unwrap();
    assert_eq!(s.kubelet.dra_plugins(DRIVER).len(), 1);
    let response = s
        .kubelet
        .dra_prepare(DRIVER, &claims(&["again"]))
        .await
        .unwrap();
    assert_eq!(response.claims["again"].error, "");
    s.shutdown().await.unwrap();
}

/// Serves a hand-made `PluginInfo` on `<registry>/<name>` (the driver's own registration
/// service with other contents), to see what the fake kubelet refuses.
fn serve_info(registry: &Path, name: &str, info: PluginInfo) -> (PathBuf, JoinHandle<()>) {
    let path = registry.join(name);
    let listener = UnixListener::bind(&path).unwrap();
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(registration::service(info).into_server())
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    });
    (path, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_kubelet_refuses_what_the_kubelet_refuses() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |_| {}).await;
    s.kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    let registry = s.options.registry_dir.clone();
    let dra = s.options.dra_socket().to_string_lossy().into_owned();

    // Another registration of the same endpoint.
    let (_, hijack) = serve_info(
        &registry,
        "hijack-reg.sock",
        registration::plugin_info(DRIVER, &dra),
    );
    // No supported services; only services this kubelet does not know.
    let mut empty = registration::plugin_info("empty.example.com", "/nowhere/dra.sock");
    empty.supported_versions.clear();
    let (_, empty) = serve_info(&registry, "empty-reg.sock", empty);
    let mut unknown = registration::plugin_info("unknown.example.com", "/nowhere/dra.sock");
    unknown.supported_versions = vec!["v1alpha4.Node".into()];
    let (_, unknown) = serve_info(&registry, "unknown-reg.sock", unknown);

    s.kubelet
        .wait_until("three refusals", WAIT, |k| {
            let events = k.events().join("\n");
            events.contains(&format!(
                "endpoint {dra} already registered for DRA driver plugin {DRIVER}"
            )) && events.contains("empty list of supported gRPC services")
                && events.contains("none of services supported by the plugin")
        })
        .await
        .unwrap();
    assert_eq!(s.kubelet.dra_plugins(DRIVER).len(), 1);
    assert_eq!(s.kubelet.dra_registered("empty.example.com"), None);
    assert_eq!(s.kubelet.dra_registered("unknown.example.com"), None);
    for task in [hijack, empty, unknown] {
        task.abort();
    }
    s.shutdown().await.unwrap();
}

/// A client that puts the registration socket's path into `:authority` (gRPC libraries that
/// do not encode a bare-path target) still registers the driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_path_as_authority_is_accepted() {
    let mut s = Setup::start(TestDriver::new(&[], Duration::ZERO), |k| {
        k.old_kubelet_authority = true;
    })
    .await;
    let plugin = s
        .kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    assert_eq!(plugin.chosen_service, "v1.DRAPlugin");
    let response = s
        .kubelet
        .dra_prepare(DRIVER, &claims(&["a"]))
        .await
        .unwrap();
    assert_eq!(response.claims["a"].error, "");
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_cannot_be_bound_fails_serve_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let options = KubeletOptions {
        driver_name: DRIVER.into(),
        registry_dir: dir.path().join("plugins_registry"),
        plugin_dir: dir.path().join("plugins").join(DRIVER),
        rolling_update: None,
    };
    // A non-empty directory where the registration socket belongs cannot be replaced.
    std::fs::create_dir_all(options.registration_socket().join("x")).unwrap();
    let driver = TestDriver::new(&[], Duration::ZERO);
    let err = serve(driver, options.clone(), std::future::pending())
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("edgegpu.io-reg.sock"),
        "the error names the socket: {err:#}"
    );
    assert!(
        !options.dra_socket().exists(),
        "dra.sock must be removed again"
    );
}

/// One pod of a rolling update: the kubelet side of `driver` with the pod's sockets, until
/// its stop is sent.
struct Pod {
    options: KubeletOptions,
    driver: Arc<TestDriver>,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<anyhow::Result<()>>,
}

impl Pod {
    fn start(dir: &Path, uid: &str) -> Pod {
        let options = KubeletOptions {
            driver_name: DRIVER.into(),
            registry_dir: dir.join("plugins_registry"),
            plugin_dir: dir.join("plugins").join(DRIVER),
            rolling_update: Some(PodUid::parse(uid).unwrap()),
        };
        let driver = TestDriver::new(&[], Duration::ZERO);
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve(driver.clone(), options.clone(), async {
            let _ = stopped.await;
        }));
        Pod {
            options,
            driver,
            stop: Some(stop),
            served,
        }
    }

    async fn shutdown(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.served).await.unwrap().unwrap();
    }

    fn calls(&self) -> Vec<String> {
        self.driver.calls.lock().unwrap().clone()
    }
}

/// Two pods of a rolling update in one registry and one plugin directory, each with its own
/// sockets: the kubelet keeps both and calls the newest; a newer registration whose endpoint
/// nobody serves (a pod killed before its clean-up) does not take the calls from a connected
/// pod; when the new pod shuts down it removes only its own sockets and the kubelet falls
/// back to the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_of_a_rolling_update_serve_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let mut kopts = FakeKubeletOptions::new(dir.path().join("device-plugins"));
    kopts.plugins_registry = Some(dir.path().join("plugins_registry"));
    let kubelet = FakeKubelet::start_with(kopts).await.unwrap();
    let mut old = Pod::start(dir.path(), "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0");
    kubelet
        .wait_for_dra_registration(DRIVER, 1, WAIT)
        .await
        .unwrap();
    let mut new = Pod::start(dir.path(), "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d");
    let called = kubelet
        .wait_for_dra_registration(DRIVER, 2, WAIT)
        .await
        .unwrap();
    assert_eq!(called.endpoint, new.options.dra_socket());
    assert_eq!(
        called.registration_socket,
        new.options.registration_socket()
    );
    let endpoints: Vec<PathBuf> = kubelet
        .dra_plugins(DRIVER)
        .into_iter()
        .map(|p| p.endpoint)
        .collect();
    assert_eq!(
        endpoints,
        [old.options.dra_socket(), new.options.dra_socket()],
        "both registered, oldest first"
    );
    let response = kubelet.dra_prepare(DRIVER, &claims(&["a"])).await.unwrap();
    assert_eq!(response.claims["a"].error, "");
    assert_eq!(new.calls(), ["prepare a"]);

    let dead_endpoint = old.options.plugin_dir.join("dra-dead.sock");
    let (dead_reg, dead) = serve_info(
        &old.options.registry_dir,
        "edgegpu.io-dead-reg.sock",
        registration::plugin_info(DRIVER, &dead_endpoint.to_string_lossy()),
    );
    kubelet
        .wait_until("the dead pod registered", WAIT, |k| {
            k.dra_plugins(DRIVER).len() == 3
        })
        .await
        .unwrap();
    let response = kubelet.dra_prepare(DRIVER, &claims(&["b"])).await.unwrap();
    assert_eq!(response.claims["b"].error, "");
    assert_eq!(new.calls(), ["prepare a", "prepare b"]);
    dead.abort();
    std::fs::remove_file(&dead_reg).unwrap();
    kubelet
        .wait_until("the dead pod deregistered", WAIT, |k| {
            k.dra_plugins(DRIVER).len() == 2
        })
        .await
        .unwrap();

    new.shutdown().await;
    assert!(!new.options.dra_socket().exists() && !new.options.registration_socket().exists());
    assert!(
        old.options.dra_socket().exists() && old.options.registration_socket().exists(),
        "the other pod's sockets stay"
    );
    kubelet
        .wait_until("the new pod deregistered", WAIT, |k| {
            k.dra_plugins(DRIVER).len() == 1
        })
        .await
        .unwrap();
    let response = kubelet
        .dra_unprepare(DRIVER, &claims(&["a"]))
        .await
        .unwrap();
    assert_eq!(response.claims["a"].error, "");
    assert_eq!(old.calls(), ["unprepare a"]);
    old.shutdown().await;
    assert!(!old.options.dra_socket().exists() && !old.options.registration_socket().exists());
}
