//! Registration details, the plugin-watcher path, and bad requests.

use crate::common;

use std::time::Duration;

use common::{device, plugin_socket, sockets_in, RunningPlugin, TestResource, WAIT};
use edgegpu_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use edgegpu_kubelet_api::v1beta1::registration_client::RegistrationClient;
use edgegpu_kubelet_api::v1beta1::{
    AllocateRequest, AllocateResponse, DevicePluginOptions, PreStartContainerRequest,
    PreferredAllocationRequest, RegisterRequest,
};
use edgegpu_plugin::LifecycleOptions;
use edgegpu_testkit::kubelet::{dial_plugin, FakeKubelet, FakeKubeletOptions};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Code;

const GPU: &str = "nvidia.com/gpu";

/// A message whose field 1 is a varint where `AllocateRequest` has a repeated message.
#[derive(Clone, PartialEq, prost::Message)]
struct Bogus {
    #[prost(uint64, tag = "1")]
    junk: u64,
}

#[tokio::test]
async fn malformed_and_unexpected_requests_get_grpc_errors() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let options = DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: false,
    };
    let resource = TestResource::with_options(GPU, vec![device("gpu-0", true)], options);
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    let socket = plugin_socket(dir.path()).unwrap();
    let channel = dial_plugin(&socket, false, Duration::from_secs(10))
        .await
        .unwrap();
    let mut client = DevicePluginClient::new(channel.clone());

    let err = client
        .allocate(AllocateRequest {
            container_requests: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let err = client
        .get_preferred_allocation(PreferredAllocationRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::Unimplemented,
        "not offered in the options: {err:?}"
    );

    client
        .pre_start_container(PreStartContainerRequest {
            devices_ids: vec!["gpu-0".into()],
        })
        .await
        .expect("PreStartContainer answers empty");

    // Undecodable protobuf.
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let err = grpc
        .unary(
            tonic::Request::new(Bogus { junk: 7 }),
            PathAndQuery::from_static("/v1beta1.DevicePlugin/Allocate"),
            tonic::codec::ProstCodec::<Bogus, AllocateResponse>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");

    // A method that does not exist.
    grpc.ready().await.unwrap();
    let err = grpc
        .unary(
            tonic::Request::new(Bogus { junk: 1 }),
            PathAndQuery::from_static("/v1beta1.DevicePlugin/NoSuchMethod"),
            tonic::codec::ProstCodec::<Bogus, Bogus>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");

    // Still serving, still registered.
    client
        .get_device_plugin_options(edgegpu_kubelet_api::v1beta1::Empty {})
        .await
        .unwrap();
    assert_eq!(kubelet.allocatable(GPU), 1);
}

#[tokio::test]
async fn kubelet_rejections_are_retried_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    // Not an extended resource name: the kubelet refuses it every time.
    let resource = TestResource::new("gpu", vec![device("gpu-0", true)]);
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    kubelet
        .wait_until("two refused attempts", WAIT, |k| {
            k.events()
                .iter()
                .filter(|e| e.contains("the ResourceName \"gpu\" is invalid"))
                .count()
                >= 2
        })
        .await
        .unwrap();
    assert_eq!(kubelet.registration_count(), 0);
}

#[tokio::test]
async fn fake_kubelet_checks_the_api_version_like_the_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let channel = dial_plugin(&kubelet.socket_path(), false, Duration::from_secs(10))
        .await
        .unwrap();
    let err = RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: "v1alpha".into(),
            endpoint: "x.sock".into(),
            resource_name: GPU.into(),
            options: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "requested API version \"v1alpha\" is not supported by kubelet. Supported version is [\"v1beta1\"]"
    );
}

#[tokio::test]
async fn plugin_watcher_mode_registers_without_kubelet_sock_register() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("device-plugins");
    let registry = dir.path().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let mut kopts = FakeKubeletOptions::new(&plugins);
    kopts.plugins_registry = Some(registry.clone());
    let kubelet = FakeKubelet::start_with(kopts).await.unwrap();
    let mut opts = LifecycleOptions::new(&plugins);
    opts.plugins_registry = Some(registry.clone());
    let resource = TestResource::new(GPU, vec![device("gpu-0", true)]);
    let plugin = RunningPlugin::start(resource, opts);

    let first = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    assert!(first.endpoint.is_absolute());
    assert_eq!(Some(first.endpoint.clone()), plugin_socket(&plugins));
    assert_eq!(sockets_in(&registry).len(), 1);
    assert!(
        !kubelet
            .events()
            .iter()
            .any(|e| e.contains("Got registration request")),
        "no Register call on kubelet.sock in watcher mode"
    );
    let (_, response) = kubelet.admit(GPU, 1).await.unwrap();
    assert_eq!(response.envs["TEST_VISIBLE"], "gpu-0");

    // A kubelet restart deletes the DevicePlugin socket: a new generation re-registers
    // through a new registration socket.
    kubelet.restart().await.unwrap();
    let second = kubelet.wait_for_registrations(GPU, 2, WAIT).await.unwrap();
    assert_ne!(second.endpoint, first.endpoint);
    assert_eq!(
        sockets_in(&registry).len(),
        1,
        "the old registration socket is gone"
    );

    plugin.shutdown().await.unwrap();
    assert!(sockets_in(&registry).is_empty());
    assert_eq!(plugin_socket(&plugins), None);
    kubelet
        .wait_until("deregistered", WAIT, |k| k.allocatable(GPU) == 0)
        .await
        .unwrap();
}

#[tokio::test]
async fn socket_that_cannot_be_bound_yet_is_retried_not_fatal() {
    // The registration directory does not exist when the plugin starts (the kubelet has not
    // created it yet): binding fails, and the plugin must keep retrying instead of exiting,
    // then register once the directory appears.
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("device-plugins");
    let registry = dir.path().join("plugins_registry");
    let mut opts = LifecycleOptions::new(&plugins);
    opts.plugins_registry = Some(registry.clone());
    let resource = TestResource::new(GPU, vec![device("gpu-0", true)]);
    let plugin = RunningPlugin::start(resource, opts);
    // Several failed attempts (backoff 100 ms, 200 ms, 400 ms, …).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!registry.exists());
    assert_eq!(
        plugin_socket(&plugins),
        None,
        "a failed attempt leaves no DevicePlugin socket behind"
    );

    std::fs::create_dir_all(&registry).unwrap();
    let mut kopts = FakeKubeletOptions::new(&plugins);
    kopts.plugins_registry = Some(registry.clone());
    let kubelet = FakeKubelet::start_with(kopts).await.unwrap();
    let info = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    assert_eq!(Some(info.endpoint), plugin_socket(&plugins));
    assert_eq!(kubelet.allocatable(GPU), 1);

    plugin.shutdown().await.unwrap();
    assert!(sockets_in(&registry).is_empty());
}

/// A restarting kubelet whose `kubelet.sock` exists for a while before it accepts (bind,
/// then listen): the plugin, woken at bind, is refused, retries and registers once it listens.
#[tokio::test]
async fn registers_after_the_kubelet_socket_starts_listening() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = FakeKubeletOptions::new(dir.path());
    opts.listen_delay = Duration::from_millis(150);
    let kubelet = FakeKubelet::start_with(opts).await.unwrap();
    let resource = TestResource::new(GPU, vec![device("gpu-0", true)]);
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    for round in 2..5 {
        kubelet.restart().await.unwrap();
        let info = kubelet
            .wait_for_registrations(GPU, round, WAIT)
            .await
            .unwrap_or_else(|e| panic!("restart {round}: {e}"));
        assert!(info.registrations >= round);
    }
}
