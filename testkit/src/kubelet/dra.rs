//! The fake kubelet's Dynamic Resource Allocation side: what the kubelet's DRA plugin manager
//! does with a `DRAPlugin` registration and how it calls the driver.
//!
//! Read from kubernetes main of 2025–26: `pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go` and
//! `pkg/kubelet/cm/dra/healthinfo.go` @0062353, `dra_plugin.go` of the same (v1) generation,
//! `pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go` @04791b4:
//! - validation: an empty `supported_versions` is refused; otherwise the **first** entry of
//!   the plugin's list that the kubelet supports is chosen (the kubelet's own list, most
//!   recent first: `v1.DRAPlugin`, `v1beta1.DRAPlugin` since 1.34; `v1beta1.DRAPlugin` alone
//!   in 1.32–1.33 — [`FakeKubeletOptions::dra_services`] picks it), none ⇒ refused. Entries the
//!   kubelet does not know (the health service) are ignored. The plugin's name is not
//!   checked. A refusal is reported with `NotifyRegistrationStatus(false, error)` and the
//!   kubelet's error texts. Version-dependent: kubelets from before the v1 API
//!   (`registration.go` of 1.32–1.33) walked *their own* list (v1beta1, then v1alpha4) and fell
//!   back to v1alpha4 for an unknown list instead of refusing; a plugin listing v1 first gets
//!   the same choice from both;
//! - an empty `endpoint` means the registration socket itself; a second registration of an
//!   endpoint already registered for the driver is refused ("One plugin instance cannot
//!   hijack the endpoint of another instance"); several endpoints per driver are kept (the
//!   two pods of a rolling update, 1.33+) and the newest connected one is called, the newest
//!   one when none is connected (`get`: since 1.34 the kubelet watches each plugin's gRPC
//!   connection, 1.33 calls the newest; here a plugin counts as connected when its endpoint
//!   accepts a connection);
//! - the gRPC connection is created lazily (registration does not dial the endpoint), with
//!   the `unix:` scheme, so its `:authority` is `localhost` even when
//!   [`FakeKubeletOptions::old_kubelet_authority`] makes the plugin watcher's dial send the
//!   socket path;
//! - every call has a 45 s timeout (`defaultClientCallTimeout`); a v1beta1 plugin gets
//!   v1beta1 requests and its answers are read as v1 ones (without `share_id`);
//! - a prepare answer with fewer entries than claims fails with "NodePrepareResources skipped
//!   N ResourceClaims" (`pkg/kubelet/cm/dra/manager.go`);
//! - with the `ResourceHealthStatus` gate ([`FakeKubeletOptions::resource_health_status`]) the
//!   kubelet opens `NodeWatchResources` right after registration and again 5 s after the
//!   stream ends, keeping the last list; the list is dropped when the stream ends
//!   (`healthinfo.go` clearDriver). Which health API version a kubelet dials is
//!   version-dependent: v1alpha1 here, as in 1.34–1.36.
//!
//! Deregistration (the registration socket is gone) drops that plugin, and the driver's other
//! plugins, if any, are called from then on; a kubelet restart drops every plugin and the
//! plugin watcher registers the sockets it finds again. Not modelled: the kubelet's wiping of
//! a driver's ResourceSlices 30 s after its last plugin became unusable.
//!
//! [`FakeKubeletOptions::dra_services`]: super::FakeKubeletOptions::dra_services
//! [`FakeKubeletOptions::resource_health_status`]: super::FakeKubeletOptions::resource_health_status
//! [`FakeKubeletOptions::old_kubelet_authority`]: super::FakeKubeletOptions::old_kubelet_authority

// `tonic::Status` is the natural error of a gRPC fake; its size does not matter here.
#![allow(clippy::result_large_err)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use edgegpu_kubelet_api::dra_health_v1alpha1::dra_resource_health_client::DraResourceHealthClient;
use edgegpu_kubelet_api::dra_health_v1alpha1::{
    DeviceHealth, NodeWatchResourcesRequest, NodeWatchResourcesResponse,
};
use edgegpu_kubelet_api::pluginregistration::PluginInfo;
use edgegpu_kubelet_api::{dra_v1, dra_v1beta1};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status, Streaming};

use super::dra_state::{DraPluginInfo, DraPlugin_};
use super::state::Shared;

/// The kubelet's timeout for every call to a DRA plugin (`defaultClientCallTimeout`).
pub const DRA_CALL_TIMEOUT: Duration = Duration::from_secs(45);
/// How long the kubelet waits before opening a health stream again.
pub const HEALTH_RETRY: Duration = Duration::from_secs(5);

/// A claim as the kubelet sends it.
pub fn dra_claim(namespace: &str, name: &str, uid: &str) -> dra_v1::Claim {
    dra_v1::Claim {
        namespace: namespace.to_string(),
        uid: uid.to_string(),
        name: name.to_string(),
    }
}

/// The kubelet's validateSupportedServices: the first of the plugin's entries it supports.
pub fn choose_service(kubelet: &[String], plugin: &[String]) -> Result<String, String> {
    if plugin.is_empty() {
        return Err("empty list of supported gRPC services (aka supported versions)".to_string());
    }
    plugin
        .iter()
        .find(|s| kubelet.contains(s))
        .cloned()
        .ok_or_else(|| {
            format!(
                "none of services supported by the plugin ({plugin:?}) are supported by the kubelet ({kubelet:?})"
            )
        })
}

/// A channel that connects to `path` on first use, as `grpc.NewClient` does.
fn lazy_channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    let connector = tower::service_fn(move |_| {
        let path = path.clone();
        async move {
            let stream = UnixStream::connect(&path).await?;
            Ok::<_, io::Error>(TokioIo::new(stream))
        }
    });
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(connector)
}

/// ValidatePlugin and RegisterPlugin for a `DRAPlugin` found at `socket`; the error is the
/// text the kubelet sends with `NotifyRegistrationStatus(false, …)`.
pub(super) fn register(
    shared: &Arc<Shared>,
    epoch: u64,
    socket: &Path,
    info: &PluginInfo,
) -> Result<(), String> {
    let endpoint = if info.endpoint.is_empty() {
        socket.to_path_buf()
    } else {
        PathBuf::from(&info.endpoint)
    };
    let driver = info.name.clone();
    let chosen = choose_service(&shared.opts.dra_services, &info.supported_versions).map_err(|e| {
        format!(
            "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {}: {e}",
            endpoint.display()
        )
    })?;
    let channel = lazy_channel(&endpoint);
    let plugin = DraPlugin_ {
        info: DraPluginInfo {
            endpoint: endpoint.clone(),
            chosen_service: chosen.clone(),
            supported_versions: info.supported_versions.clone(),
            registration_socket: socket.to_path_buf(),
        },
        channel: channel.clone(),
        health: None,
    };
    shared.update(|s| {
        if !s.running || s.epoch != epoch {
            return Err("kubelet is shutting down".to_string());
        }
        let plugins = s.dra.plugins.entry(driver.clone()).or_default();
        if plugins.iter().any(|p| p.info.endpoint == endpoint) {
            return Err(format!(
                "RegisterPlugin error -- plugin registration failed with err: endpoint {} already registered for DRA driver plugin {driver}",
                endpoint.display()
            ));
        }
        plugins.push(plugin);
        *s.dra.registrations.entry(driver.clone()).or_default() += 1;
        Ok(())
    })?;
    shared.log(format!(
        "Registered DRA plugin {driver} at {} (chosen service {chosen})",
        endpoint.display()
    ));
    if shared.opts.resource_health_status {
        let task = tokio::spawn(watch_health(
            shared.clone(),
            driver.clone(),
            endpoint.clone(),
            channel,
        ));
        shared.update(|s| {
            match s
                .dra
                .plugins
                .get_mut(&driver)
                .and_then(|ps| ps.iter_mut().find(|p| p.info.endpoint == endpoint))
            {
                Some(p) => p.health = Some(task),
                None => task.abort(),
            }
        });
    }
    Ok(())
}

/// The kubelet's health stream consumer for one plugin: open, record every list, clear on
/// end, open again after [`HEALTH_RETRY`].
async fn watch_health(shared: Arc<Shared>, driver: String, endpoint: PathBuf, channel: Channel) {
    loop {
        let mut client = DraResourceHealthClient::new(channel.clone());
        match client
            .node_watch_resources(NodeWatchResourcesRequest {})
            .await
        {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                shared.log(format!("NodeWatchResources stream to {driver} opened"));
                let end = loop {
                    match stream.message().await {
                        Ok(Some(message)) => {
                            let n = message.devices.len();
                            shared.update(|s| s.dra.health.insert(driver.clone(), message.devices));
                            shared.log(format!("NodeWatchResources {driver}: {n} device(s)"));
                        }
                        Ok(None) => break "EOF".to_string(),
                        Err(status) => break status.message().to_string(),
                    }
                };
                shared.update(|s| s.dra.health.remove(&driver));
                shared.log(format!(
                    "NodeWatchResources stream to {driver} ended ({end}); health cleared"
                ));
            }
            Err(status) => shared.log(format!(
                "NodeWatchResources to {driver} at {} failed: {}",
                endpoint.display(),
                status.message()
            )),
        }
        tokio::time::sleep(HEALTH_RETRY).await;
    }
}

/// A health stream opened by a test ([`FakeKubelet::dra_health`]).
pub struct DraHealthStream {
    stream: Streaming<NodeWatchResourcesResponse>,
}

impl DraHealthStream {
    /// The next list; `None` when the driver ended the stream. Fails after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> anyhow::Result<Option<Vec<DeviceHealth>>> {
        match tokio::time::timeout(timeout, self.stream.message()).await {
            Ok(Ok(message)) => Ok(message.map(|m| m.devices)),
            Ok(Err(status)) => anyhow::bail!("health stream failed: {status}"),
            Err(_) => anyhow::bail!("no health message within {timeout:?}"),
        }
    }

    /// Reads lists until one satisfies `pred`; fails when the stream ends or after `timeout`.
    pub async fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&[DeviceHealth]) -> bool,
    ) -> anyhow::Result<Vec<DeviceHealth>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Ok(Some(devices)) if pred(&devices) => return Ok(devices),
                Ok(Some(devices)) => last = Some(devices),
                Ok(None) => anyhow::bail!(
                    "health stream ended while waiting for {what}; last list: {last:?}"
                ),
                Err(e) => anyhow::bail!("{e} while waiting for {what}; last list: {last:?}"),
            }
        }
    }
}

fn v1beta1_claims(claims: &[dra_v1::Claim]) -> Vec<dra_v1beta1::Claim> {
    claims
        .iter()
        .map(|c| dra_v1beta1::Claim {
            namespace: c.namespace.clone(),
            uid: c.uid.clone(),
            name: c.name.clone(),
        })
        .collect()
}

/// A call with the kubelet's timeout, sent as `grpc-timeout` and enforced here too.
async fn with_timeout<T>(
    call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(DRA_CALL_TIMEOUT, call).await {
        Ok(result) => result.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "context deadline exceeded (DRA call timeout {DRA_CALL_TIMEOUT:?})"
        ))),
    }
}

fn timed<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(DRA_CALL_TIMEOUT);
    request
}

// What the fake kubelet's DRA methods (kubelet/mod.rs) do, on its shared state.
/// The plugins of `driver`, oldest first, with their channels.
fn plugins_of(shared: &Shared, driver: &str) -> Vec<(DraPluginInfo, Channel)> {
    let state = shared.state.lock().unwrap();
    state
        .dra
        .plugins
        .get(driver)
        .map(|ps| {
            ps.iter()
                .map(|p| (p.info.clone(), p.channel.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The plugin the kubelet calls for `driver`: the newest connected one, else the newest
/// (`dra_plugin_manager.go` get). Connected: its endpoint accepts a connection now.
pub(super) async fn dra_plugin(
    shared: &Shared,
    driver: &str,
) -> Result<(DraPluginInfo, Channel), Status> {
    let plugins = plugins_of(shared, driver);
    if plugins.len() > 1 {
        for (info, channel) in plugins.iter().rev() {
            if UnixStream::connect(&info.endpoint).await.is_ok() {
                return Ok((info.clone(), channel.clone()));
            }
        }
    }
    plugins.last().cloned().ok_or_else(|| {
        Status::failed_precondition(format!("DRA driver {driver} is not registered"))
    })
}

/// The service chosen for `driver`'s newest plugin (e.g. `"v1.DRAPlugin"`), if a plugin is
/// registered.
pub(super) fn dra_registered(shared: &Shared, driver: &str) -> Option<String> {
    plugins_of(shared, driver)
        .pop()
        .map(|(info, _)| info.chosen_service)
}

/// Every registered plugin of `driver`, oldest first.
pub(super) fn dra_plugins(shared: &Shared, driver: &str) -> Vec<DraPluginInfo> {
    let state = shared.state.lock().unwrap();
    state
        .dra
        .plugins
        .get(driver)
        .map(|ps| ps.iter().map(|p| p.info.clone()).collect())
        .unwrap_or_default()
}

/// How often `driver` registered (across restarts).
pub(super) fn dra_registration_count(shared: &Shared, driver: &str) -> usize {
    let state = shared.state.lock().unwrap();
    state.dra.registrations.get(driver).copied().unwrap_or(0)
}

/// The last health list of `driver` (with `resource_health_status` on), while its
/// stream is open.
pub(super) fn dra_device_health(shared: &Shared, driver: &str) -> Option<Vec<DeviceHealth>> {
    let state = shared.state.lock().unwrap();
    state.dra.health.get(driver).cloned()
}

/// `NodePrepareResources` for `claims`, as the kubelet sends it (v1 or v1beta1 by the
/// chosen service, 45 s timeout). The answer is returned in v1 form; an answer that
/// leaves claims out fails as in the kubelet. Per-claim errors stay in the answer (a
/// kubelet would fail the pod's start with the first one).
pub(super) async fn dra_prepare(
    shared: &Shared,
    driver: &str,
    claims: &[dra_v1::Claim],
) -> Result<dra_v1::NodePrepareResourcesResponse, Status> {
    let (info, channel) = dra_plugin(shared, driver).await?;
    let response = if info.chosen_service == dra_v1::DRA_PLUGIN_SERVICE {
        let mut client = dra_v1::dra_plugin_client::DraPluginClient::new(channel);
        with_timeout(
            client.node_prepare_resources(timed(dra_v1::NodePrepareResourcesRequest {
                claims: claims.to_vec(),
            })),
        )
        .await?
    } else {
        let mut client = dra_v1beta1::dra_plugin_client::DraPluginClient::new(channel);
        let r = with_timeout(client.node_prepare_resources(timed(
            dra_v1beta1::NodePrepareResourcesRequest {
                claims: v1beta1_claims(claims),
            },
        )))
        .await?;
        dra_v1::NodePrepareResourcesResponse {
            claims: r
                .claims
                .into_iter()
                .map(|(uid, c)| {
                    let devices = c
                        .devices
                        .into_iter()
                        .map(|d| dra_v1::Device {
                            request_names: d.request_names,
                            pool_name: d.pool_name,
                            device_name: d.device_name,
                            cdi_device_ids: d.cdi_device_ids,
                            share_id: None,
                        })
                        .collect();
                    (
                        uid,
                        dra_v1::NodePrepareResourceResponse {
                            devices,
                            error: c.error,
                        },
                    )
                })
                .collect(),
        }
    };
    shared.log(format!(
        "NodePrepareResources {driver} at {} ({}): {} claim(s), {} answer(s)",
        info.endpoint.display(),
        info.chosen_service,
        claims.len(),
        response.claims.len()
    ));
    let unfinished = claims.len() as i64 - response.claims.len() as i64;
    if unfinished != 0 {
        return Err(Status::unknown(format!(
            "NodePrepareResources skipped {unfinished} ResourceClaims"
        )));
    }
    Ok(response)
}

/// `NodeUnprepareResources` for `claims` (v1 or v1beta1 by the chosen service, 45 s
/// timeout), answered in v1 form.
pub(super) async fn dra_unprepare(
    shared: &Shared,
    driver: &str,
    claims: &[dra_v1::Claim],
) -> Result<dra_v1::NodeUnprepareResourcesResponse, Status> {
    let (info, channel) = dra_plugin(shared, driver).await?;
    let response = if info.chosen_service == dra_v1::DRA_PLUGIN_SERVICE {
        let mut client = dra_v1::dra_plugin_client::DraPluginClient::new(channel);
        with_timeout(client.node_unprepare_resources(timed(
            dra_v1::NodeUnprepareResourcesRequest {
                claims: claims.to_vec(),
            },
        )))
        .await?
    } else {
        let mut client = dra_v1beta1::dra_plugin_client::DraPluginClient::new(channel);
        let r = with_timeout(client.node_unprepare_resources(timed(
            dra_v1beta1::NodeUnprepareResourcesRequest {
                claims: v1beta1_claims(claims),
            },
        )))
        .await?;
        dra_v1::NodeUnprepareResourcesResponse {
            claims: r
                .claims
                .into_iter()
                .map(|(uid, c)| {
                    (
                        uid,
                        dra_v1::NodeUnprepareResourceResponse { error: c.error },
                    )
                })
                .collect(),
        }
    };
    shared.log(format!(
        "NodeUnprepareResources {driver} at {} ({}): {} claim(s), {} answer(s)",
        info.endpoint.display(),
        info.chosen_service,
        claims.len(),
        response.claims.len()
    ));
    Ok(response)
}

/// Opens `NodeWatchResources` on `driver`'s plugin, as the kubelet does with the
/// `ResourceHealthStatus` gate.
pub(super) async fn dra_health(shared: &Shared, driver: &str) -> Result<DraHealthStream, Status> {
    let (_, channel) = dra_plugin(shared, driver).await?;
    let mut client = DraResourceHealthClient::new(channel);
    let stream = client
        .node_watch_resources(NodeWatchResourcesRequest {})
        .await?
        .into_inner();
    Ok(DraHealthStream { stream })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::state::kubelet_dra_services;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_first_supported_entry_of_the_plugin_wins() {
        let kubelet = kubelet_dra_services();
        assert_eq!(
            choose_service(&kubelet, &s(&["v1.DRAPlugin", "v1beta1.DRAPlugin"])).unwrap(),
            "v1.DRAPlugin"
        );
        // The plugin's order counts, not the kubelet's.
        assert_eq!(
            choose_service(&kubelet, &s(&["v1beta1.DRAPlugin", "v1.DRAPlugin"])).unwrap(),
            "v1beta1.DRAPlugin"
        );
        assert_eq!(
            choose_service(
                &kubelet,
                &s(&["v1alpha1.DRAResourceHealth", "v1.DRAPlugin"])
            )
            .unwrap(),
            "v1.DRAPlugin"
        );
        let old = s(&["v1beta1.DRAPlugin"]);
        assert_eq!(
            choose_service(&old, &s(&["v1.DRAPlugin", "v1beta1.DRAPlugin"])).unwrap(),
            "v1beta1.DRAPlugin"
        );
    }

    #[test]
    fn empty_or_unknown_lists_are_refused() {
        let kubelet = kubelet_dra_services();
        assert!(choose_service(&kubelet, &[])
            .unwrap_err()
            .contains("empty list of supported gRPC services"));
        assert!(choose_service(&kubelet, &s(&["v1alpha4.Node"]))
            .unwrap_err()
            .contains("none of services supported by the plugin"));
    }
}
