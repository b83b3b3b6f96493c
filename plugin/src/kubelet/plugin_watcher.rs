//! Plugin-watcher registration (`--plugins-registry`): the kubelet finds the plugin by a
//! socket in its `plugins_registry` directory serving `pluginregistration.Registration`.
//!
//! In this mode the plugin does **not** also call `Register` on `kubelet.sock`: two
//! registrations of one resource make the kubelet replace the endpoint while the first
//! stream is still closing (kubernetes #127803). Restart detection stays on, because a
//! starting kubelet still deletes the `DevicePlugin` socket in the device-plugin directory.

use std::sync::Arc;

use edgegpu_kubelet_api::pluginregistration::{PluginInfo, DEVICE_PLUGIN_TYPE};
use edgegpu_kubelet_api::v1beta1::VERSION;
use edgegpu_node::registration::{RegistrationOutcome, RegistrationService};

use super::stats::RegistrationStats;

/// The plugin watcher's service for one generation of a resource.
pub type PluginWatcherService = RegistrationService<Counted>;

/// `endpoint` is the absolute path of the socket serving `DevicePlugin`.
pub fn service(
    resource_name: &str,
    endpoint: &str,
    stats: Arc<RegistrationStats>,
) -> PluginWatcherService {
    let info = PluginInfo {
        r#type: DEVICE_PLUGIN_TYPE.to_string(),
        name: resource_name.to_string(),
        endpoint: endpoint.to_string(),
        supported_versions: vec![VERSION.to_string()],
    };
    RegistrationService::new(info, Counted(stats))
}

/// The kubelet's verdict, counted in the resource's registration statistics and logged.
pub struct Counted(Arc<RegistrationStats>);

impl RegistrationOutcome for Counted {
    fn registered(&self, info: &PluginInfo) {
        self.0.registered();
        tracing::info!(
            "Registered device plugin for '{}' with Kubelet (plugin watcher, endpoint {})",
            info.name,
            info.endpoint
        );
    }

    fn refused(&self, info: &PluginInfo, error: &str) {
        self.0.registration_failed();
        tracing::error!("Kubelet plugin watcher refused '{}': {error}", info.name);
    }
}
