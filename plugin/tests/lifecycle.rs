//! Lifecycle through the fake kubelet: registration, ListAndWatch, Allocate, lost
//! sockets, two instances, a kubelet that appears late. (100 restarts: `restarts.rs`.)

use crate::common;

use std::time::Duration;

use common::{device, plugin_socket, sockets_in, RunningPlugin, TestResource, WAIT};
use edgegpu_kubelet_api::v1beta1::{DevicePluginOptions, HEALTHY, UNHEALTHY};
use edgegpu_plugin::LifecycleOptions;
use edgegpu_testkit::kubelet::{FakeKubelet, FakeKubeletOptions};

const GPU: &str = "nvidia.com/gpu";

#[tokio::test]
async fn registers_and_streams_full_lists_and_allocates() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let resource = TestResource::new(GPU, vec![device("gpu-0", true), device("gpu-1", true)]);
    let plugin = RunningPlugin::start(resource.clone(), LifecycleOptions::new(dir.path()));

    let info = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    // Registered with the socket's file name, in the directory, uniquely named.
    let socket = plugin_socket(dir.path()).expect("exactly one plugin socket");
    assert_eq!(info.endpoint, socket);
    let name = socket.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("nvidia-gpu-") && name.ends_with(".sock"),
        "{name}"
    );
    assert_eq!(info.options, resource.options);
    assert_eq!(
        info.register_options,
        Some(resource.options),
        "Register carries the same options"
    );
    assert_eq!(
        info.history[0].len(),
        2,
        "first message carries the full list"
    );
    assert_eq!(kubelet.allocatable(GPU), 2);

    // A health change: the next message again carries the complete list.
    resource
        .devices
        .send_replace(vec![device("gpu-0", true), device("gpu-1", false)]);
    kubelet
        .wait_until("gpu-1 unhealthy", WAIT, |k| k.allocatable(GPU) == 1)
        .await
        .unwrap();
    let last = kubelet.devices(GPU);
    assert_eq!(last.len(), 2);
    assert_eq!(last[1].health, UNHEALTHY);
    assert_eq!(last[0].health, HEALTHY);

    // Allocate with one container request; unknown IDs are refused by the kubelet.
    let response = kubelet.allocate(GPU, &["gpu-0"]).await.unwrap();
    assert_eq!(response.envs["TEST_VISIBLE"], "gpu-0");
    let err = kubelet.allocate(GPU, &["gpu-9"]).await.unwrap_err();
    assert!(err.message().contains("unregistered device"), "{err}");
    // Pod admission uses the plugin's preferred allocation (last of the free ones).
    resource.devices.send_replace(vec![
        device("gpu-0", true),
        device("gpu-1", true),
        device("gpu-2", true),
    ]);
    kubelet
        .wait_until("3 healthy", WAIT, |k| k.allocatable(GPU) == 3)
        .await
        .unwrap();
    let (ids, response) = kubelet.admit(GPU, 1).await.unwrap();
    assert_eq!(ids, vec!["gpu-2".to_string()]);
    assert_eq!(response.envs["TEST_VISIBLE"], "gpu-2");

    plugin.shutdown().await.unwrap();
    assert_eq!(sockets_in(dir.path()), vec!["kubelet.sock".to_string()]);
    kubelet
        .wait_until("stream end noticed", WAIT, |k| k.allocatable(GPU) == 0)
        .await
        .unwrap();
}

#[tokio::test]
async fn pre_start_is_called_only_when_required() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let options = DevicePluginOptions {
        pre_start_required: true,
        get_preferred_allocation_available: false,
    };
    let resource = TestResource::with_options(GPU, vec![device("a", true)], options);
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    let info = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    assert_eq!(info.options, options);
    // No preferred allocation offered: the kubelet picks by itself and still admits.
    let (ids, _) = kubelet.admit(GPU, 1).await.unwrap();
    assert_eq!(ids, vec!["a".to_string()]);
    let err = kubelet
        .preferred_allocation(GPU, &["a"], &[], 1)
        .await
        .unwrap_err();
    assert!(err.message().contains("does not offer"), "{err}");
}

#[tokio::test]
async fn own_socket_deleted_leads_to_a_new_socket_and_registration() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let resource = TestResource::new(GPU, vec![device("gpu-0", true)]);
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    let first = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    let before = kubelet.registration_count();
    std::fs::remove_file(&first.endpoint).unwrap();
    let second = kubelet
        .wait_for_registrations(GPU, before + 1, WAIT)
        .await
        .unwrap();
    assert_ne!(second.endpoint, first.endpoint);
    assert!(second.endpoint.exists());
    assert_eq!(kubelet.allocatable(GPU), 1);
}

#[tokio::test]
async fn two_instances_never_delete_each_others_socket() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let old = RunningPlugin::start(
        TestResource::new(GPU, vec![device("gpu-0", true)]),
        LifecycleOptions::new(dir.path()),
    );
    let first = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    // A second instance (e.g. the new pod of a rolling update) starts while the old one
    // still runs; it registers its own socket and replaces the endpoint.
    let new = RunningPlugin::start(
        TestResource::new(GPU, vec![device("gpu-0", true)]),
        LifecycleOptions::new(dir.path()),
    );
    let second = kubelet.wait_for_registrations(GPU, 2, WAIT).await.unwrap();
    assert_ne!(first.endpoint, second.endpoint);
    assert!(first.endpoint.exists() && second.endpoint.exists());
    // The old instance lost its stream to the new one and yields instead of taking the
    // resource back (no registration ping-pong).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(kubelet.registration_count(), 2, "{:#?}", kubelet.events());
    assert_eq!(kubelet.resource(GPU).unwrap().endpoint, second.endpoint);

    // The old instance leaves: only its own socket goes.
    old.shutdown().await.unwrap();
    assert!(!first.endpoint.exists());
    assert!(
        second.endpoint.exists(),
        "the new instance's socket survives"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        kubelet.allocatable(GPU),
        1,
        "the kubelet still sees the new endpoint"
    );

    // Even a socket of someone else at our old path is left alone.
    let _squatter = std::os::unix::net::UnixListener::bind(&first.endpoint).unwrap();
    new.shutdown().await.unwrap();
    assert!(
        first.endpoint.exists(),
        "a socket we did not bind is never unlinked"
    );
    assert!(!second.endpoint.exists());
}

#[tokio::test]
async fn kubelet_absent_at_start_is_registered_with_when_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::new_stopped(FakeKubeletOptions::new(dir.path()));
    let resource = TestResource::new(GPU, vec![device("gpu-0", true)]);
    std::fs::create_dir_all(dir.path()).unwrap();
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    // Let the plugin fail a few registrations first.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(kubelet.registration_count(), 0);
    kubelet.start_again().await.unwrap();
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    assert_eq!(kubelet.allocatable(GPU), 1);
}
