//! Old kubelets (< 1.26) send the socket path as HTTP/2 `:authority`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{device, RunningPlugin, TestResource, WAIT};
use edgegpu_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use edgegpu_kubelet_api::v1beta1::{AllocateRequest, ContainerAllocateRequest, Empty};
use edgegpu_plugin::kubelet::server::DevicePluginService;
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::LifecycleOptions;
use edgegpu_testkit::kubelet::{dial_plugin, FakeKubelet, FakeKubeletOptions};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnixListenerStream;

const GPU: &str = "nvidia.com/gpu";

#[tokio::test]
async fn old_kubelet_with_path_authority_registers_and_allocates() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = FakeKubeletOptions::new(dir.path());
    opts.old_kubelet_authority = true;
    let kubelet = FakeKubelet::start_with(opts).await.unwrap();
    let resource = TestResource::new(GPU, vec![device("gpu-0", true), device("gpu-1", true)]);
    let _plugin = RunningPlugin::start(resource, LifecycleOptions::new(dir.path()));
    let info = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    assert_eq!(info.devices.len(), 2);
    let response = kubelet.allocate(GPU, &["gpu-1"]).await.unwrap();
    assert_eq!(response.envs["TEST_VISIBLE"], "gpu-1");
    // Several requests on one connection: later header blocks use the client's HPACK
    // dynamic table and must still decode.
    for _ in 0..5 {
        kubelet.allocate(GPU, &["gpu-0"]).await.unwrap();
    }
    let (ids, _) = kubelet.admit(GPU, 2).await.unwrap();
    assert_eq!(ids.len(), 2);
}

/// The control experiment: the same client against tonic *without* the shim fails, so
/// the test above really exercises a path-shaped authority.
#[tokio::test]
async fn without_the_shim_h2_rejects_the_path_authority() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let resource: Arc<dyn Resource> = TestResource::new(GPU, vec![device("gpu-0", true)]);
    let (_stop_tx, stop_rx) = watch::channel(false);
    let (lost_tx, _lost_rx) = mpsc::unbounded_channel();
    let service = DevicePluginService::new(resource, stop_rx, lost_tx);
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );

    let modern = dial_plugin(&path, false, Duration::from_secs(10))
        .await
        .unwrap();
    DevicePluginClient::new(modern)
        .get_device_plugin_options(Empty {})
        .await
        .expect("a localhost authority is accepted by plain tonic");

    let old = dial_plugin(&path, true, Duration::from_secs(10))
        .await
        .unwrap();
    let err = DevicePluginClient::new(old)
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["gpu-0".into()],
            }],
        })
        .await
        .expect_err("plain h2 refuses a path as :authority");
    assert!(
        !err.message().is_empty(),
        "the failure carries a reason: {err:?}"
    );
    server.abort();
}
