//! Plugin-watcher registration (`--plugins-registry`): the kubelet finds the plugin by a
//! socket in its `plugins_registry` directory serving `pluginregistration.Registration`.
//!
//! In this mode the plugin does **not** also call `Register` on `kubelet.sock`: two
//! registrations of one resource make the kubelet replace the endpoint while the first
//! stream is still closing (kubernetes #127803). Restart detection stays on, because a
//! starting kubelet still deletes the `DevicePlugin` socket in the device-plugin directory.

use std::sync::Arc;

use edgegpu_kubelet_api::pluginregistration::registration_server::{
    Registration, RegistrationServer,
};
use edgegpu_kubelet_api::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse, DEVICE_PLUGIN_TYPE,
};
use edgegpu_kubelet_api::v1beta1::VERSION;
use tonic::{Request, Response, Status};

use super::stats::RegistrationStats;

/// Answers the kubelet's plugin watcher for one generation.
pub struct PluginWatcherService {
    info: PluginInfo,
    stats: Arc<RegistrationStats>,
}

impl PluginWatcherService {
    /// `endpoint` is the absolute path of the socket serving `DevicePlugin`.
    pub fn new(resource_name: &str, endpoint: &str, stats: Arc<RegistrationStats>) -> Self {
        PluginWatcherService {
            stats,
            info: PluginInfo {
                r#type: DEVICE_PLUGIN_TYPE.to_string(),
                name: resource_name.to_string(),
                endpoint: endpoint.to_string(),
                supported_versions: vec![VERSION.to_string()],
            },
        }
    }

    /// Wraps the service for tonic.
    pub fn into_server(self) -> RegistrationServer<Self> {
        RegistrationServer::new(self)
    }
}

#[tonic::async_trait]
impl Registration for PluginWatcherService {
    async fn get_info(
        &self,
        _request: Request<InfoRequest>,
    ) -> Result<Response<PluginInfo>, Status> {
        tracing::debug!(
            "Plugin watcher asked for plugin info of '{}'",
            self.info.name
        );
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            self.stats.registered();
            tracing::info!(
                "Registered device plugin for '{}' with Kubelet (plugin watcher, endpoint {})",
                self.info.name,
                self.info.endpoint
            );
        } else {
            self.stats.registration_failed();
            tracing::error!(
                "Kubelet plugin watcher refused '{}': {}",
                self.info.name,
                status.error
            );
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
