//! 100 kubelet restarts in a row: re-registration each time with a fresh socket, and no
//! growth in open file descriptors, threads or tokio tasks. In its own test binary so that
//! no other test's fds or threads are counted.

mod common;

use std::time::Duration;

use common::{device, plugin_socket, proc_count, sockets_in, RunningPlugin, TestResource, WAIT};
use edgegpu_plugin::LifecycleOptions;
use edgegpu_testkit::kubelet::FakeKubelet;

const GPU: &str = "nvidia.com/gpu";

#[tokio::test]
async fn survives_100_kubelet_restarts_without_leaking() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let resource = TestResource::new(GPU, vec![device("gpu-0", true)]);
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    // Warm up (lazily created runtime resources), then take the baseline.
    kubelet.restart().await.unwrap();
    let info = kubelet.wait_for_registrations(GPU, 2, WAIT).await.unwrap();
    let mut registrations = info.registrations;
    let settle = || async {
        // Closed connections are released asynchronously; give them a moment.
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    settle().await;
    let fds_before = proc_count("fd");
    let threads_before = proc_count("task");
    let tasks_before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();

    for round in 0..100 {
        let previous_socket = plugin_socket(dir.path());
        kubelet.restart().await.unwrap();
        let info = kubelet
            .wait_for_registrations(GPU, registrations + 1, WAIT)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(info.registrations > registrations);
        registrations = info.registrations;
        assert_ne!(
            Some(info.endpoint.clone()),
            previous_socket,
            "round {round}: a fresh socket per registration"
        );
    }

    // Leaks would show up as 100× growth; wait (bounded) for the counts to come back.
    let mut fds_after = 0;
    let mut tasks_after = 0;
    for _ in 0..150 {
        settle().await;
        fds_after = proc_count("fd");
        tasks_after = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        if fds_after <= fds_before
            && tasks_after <= tasks_before
            && proc_count("task") <= threads_before
        {
            break;
        }
    }
    let threads_after = proc_count("task");
    assert!(
        fds_after <= fds_before,
        "open fds grew from {fds_before} to {fds_after}"
    );
    assert!(
        tasks_after <= tasks_before,
        "tokio tasks grew from {tasks_before} to {tasks_after}"
    );
    assert!(
        threads_after <= threads_before,
        "threads grew from {threads_before} to {threads_after}"
    );
    assert_eq!(
        sockets_in(dir.path()).len(),
        2,
        "kubelet.sock + one plugin socket"
    );
}
