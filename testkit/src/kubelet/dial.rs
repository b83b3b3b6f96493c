//! Dialing a plugin the way the kubelet does, and what follows a registration on either
//! path: `GetDevicePluginOptions`, endpoint replacement and the `ListAndWatch` consumer.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use edgegpu_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use edgegpu_kubelet_api::v1beta1::{DevicePluginOptions, Empty, HEALTHY};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use super::old_authority::AuthorityOverride;
use super::state::{Endpoint_, ResourceInfo, Shared};

/// The kubelet's dial-back timeout inside `Register`.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Dials a plugin socket the way the kubelet does: blocking, with `timeout`; an old
/// kubelet puts the socket path into `:authority`.
pub async fn dial_plugin(
    path: &Path,
    old_kubelet_authority: bool,
    timeout: Duration,
) -> anyhow::Result<Channel> {
    let path = path.to_path_buf();
    let connector = tower::service_fn(move |_| {
        let path = path.clone();
        async move {
            let stream = UnixStream::connect(&path).await?;
            let authority = old_kubelet_authority.then(|| path.to_string_lossy().into_owned());
            Ok::<_, io::Error>(TokioIo::new(AuthorityOverride::new(stream, authority)))
        }
    });
    let endpoint = Endpoint::from_static("http://localhost");
    let connect = endpoint.connect_with_connector(connector);
    match tokio::time::timeout(timeout, connect).await {
        Ok(result) => Ok(result?),
        Err(_) => anyhow::bail!("context deadline exceeded (dial timeout {timeout:?})"),
    }
}

/// What a registration (either path) announced.
pub(super) struct Registered<'a> {
    pub(super) resource: &'a str,
    pub(super) endpoint: PathBuf,
    pub(super) register_options: Option<DevicePluginOptions>,
    pub(super) watcher_socket: Option<PathBuf>,
}

/// Dial-back, `GetDevicePluginOptions`, endpoint replacement and the `ListAndWatch`
/// consumer — shared by `Register` and the plugin watcher.
pub(super) async fn connect_endpoint(
    shared: &Arc<Shared>,
    epoch: u64,
    registered: Registered<'_>,
) -> Result<(), String> {
    let Registered {
        resource,
        endpoint,
        register_options,
        watcher_socket,
    } = registered;
    let channel = dial_plugin(&endpoint, shared.opts.old_kubelet_authority, DIAL_TIMEOUT)
        .await
        .map_err(|e| format!("failed to dial device plugin: {e:#}"))?;
    let mut client = DevicePluginClient::new(channel);
    let options = client
        .get_device_plugin_options(Empty {})
        .await
        .map_err(|s| format!("GetDevicePluginOptions failed: {}", s.message()))?
        .into_inner();
    let installed = shared.update(|s| {
        if !s.running || s.epoch != epoch {
            return None;
        }
        s.next_endpoint_id += 1;
        s.total_registrations += 1;
        let id = s.next_endpoint_id;
        let previous = s.resources.remove(resource);
        let registrations = previous.as_ref().map_or(0, |p| p.info.registrations) + 1;
        let allocated = previous
            .as_ref()
            .map(|p| p.allocated.clone())
            .unwrap_or_default();
        if let Some(mut previous) = previous {
            if let Some(lister) = previous.lister.take() {
                lister.abort();
            }
        }
        s.resources.insert(
            resource.to_string(),
            Endpoint_ {
                info: ResourceInfo {
                    endpoint: endpoint.clone(),
                    options,
                    register_options,
                    devices: Vec::new(),
                    history: Vec::new(),
                    stopped: false,
                    registrations,
                },
                client: Some(client.clone()),
                endpoint_id: id,
                lister: None,
                allocated,
                watcher_socket,
            },
        );
        Some(id)
    });
    let Some(endpoint_id) = installed else {
        return Err("kubelet is shutting down".to_string());
    };
    shared.log(format!(
        "Registered {resource} at {} (options: pre_start_required={}, get_preferred_allocation_available={})",
        endpoint.display(),
        options.pre_start_required,
        options.get_preferred_allocation_available
    ));
    let lister = tokio::spawn(list_and_watch(
        shared.clone(),
        resource.to_string(),
        endpoint_id,
        client,
    ));
    shared.update(|s| match s.resources.get_mut(resource) {
        Some(ep) if ep.endpoint_id == endpoint_id => ep.lister = Some(lister),
        _ => lister.abort(),
    });
    Ok(())
}

async fn list_and_watch(
    shared: Arc<Shared>,
    resource: String,
    endpoint_id: u64,
    mut client: DevicePluginClient<Channel>,
) {
    let result = async {
        let mut stream = client.list_and_watch(Empty {}).await?.into_inner();
        while let Some(message) = stream.message().await? {
            let healthy = message
                .devices
                .iter()
                .filter(|d| d.health == HEALTHY)
                .count();
            let total = message.devices.len();
            let current = shared.update(|s| match s.resources.get_mut(&resource) {
                Some(ep) if ep.endpoint_id == endpoint_id => {
                    ep.info.history.push(message.devices.clone());
                    ep.info.devices = message.devices;
                    true
                }
                _ => false,
            });
            if !current {
                return Ok(());
            }
            shared.log(format!(
                "ListAndWatch {resource}: {total} device(s), {healthy} healthy"
            ));
        }
        Ok::<(), Status>(())
    }
    .await;
    let stopped = shared.update(|s| match s.resources.get_mut(&resource) {
        Some(ep) if ep.endpoint_id == endpoint_id && !ep.info.stopped => {
            ep.info.stopped = true;
            ep.client = None;
            true
        }
        _ => false,
    });
    if stopped {
        let why = match result {
            Ok(()) => "stream closed".to_string(),
            Err(status) => status.message().to_string(),
        };
        shared.log(format!(
            "ListAndWatch ended unexpectedly for device plugin {resource}: {why}; devices marked unhealthy"
        ));
    }
}
