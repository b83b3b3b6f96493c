//! Registration through the kubelet's plugin watcher: the `pluginregistration.Registration`
//! service on `<registry_dir>/<driver>-reg.sock`.
//!
//! The kubelet (kubernetes `pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go` @04791b4)
//! dials the socket, calls `GetInfo` (1 s timeout), hands a `DRAPlugin` to its DRA plugin
//! manager (`pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go` ValidatePlugin, RegisterPlugin)
//! and reports the outcome with `NotifyRegistrationStatus`. For DRA, `supported_versions` lists
//! the gRPC services the endpoint serves as `<last proto package element>.<service>`; the
//! kubelet takes the **first** entry it supports (its own list: `v1.DRAPlugin`,
//! `v1beta1.DRAPlugin` since 1.34), so v1 comes first. Kubelets of 1.32–1.33 know
//! `v1beta1.DRAPlugin` (and the older `v1alpha4.Node`, which this driver does not serve) and
//! pick by their own order, which also gives v1beta1 here.
//! The health service is listed as the kubeletplugin helper does (k8s.io/dynamic-resource-allocation
//! v0.36.0 `kubeletplugin/draplugin.go`); the kubelet does not look for it there but opens
//! `NodeWatchResources` on the same endpoint when its `ResourceHealthStatus` gate is on.

use edgegpu_kubelet_api::dra_health_v1alpha1::DRA_RESOURCE_HEALTH_SERVICE;
use edgegpu_kubelet_api::pluginregistration::{PluginInfo, DRA_PLUGIN_TYPE};
use edgegpu_kubelet_api::{dra_v1, dra_v1beta1};
use edgegpu_node::registration::RegistrationOutcome;

/// The services `dra.sock` serves, as advertised in `PluginInfo.supported_versions`: v1
/// first (the kubelet takes the first one it supports), then v1beta1 for 1.32–1.33
/// kubelets, then the health service.
pub const SUPPORTED_SERVICES: [&str; 3] = [
    dra_v1::DRA_PLUGIN_SERVICE,
    dra_v1beta1::DRA_PLUGIN_SERVICE,
    DRA_RESOURCE_HEALTH_SERVICE,
];

/// What `GetInfo` answers: type `DRAPlugin`, the driver's name, the absolute path of
/// `dra.sock` and [`SUPPORTED_SERVICES`].
pub fn plugin_info(driver_name: &str, dra_endpoint: &str) -> PluginInfo {
    PluginInfo {
        r#type: DRA_PLUGIN_TYPE.to_string(),
        name: driver_name.to_string(),
        endpoint: dra_endpoint.to_string(),
        supported_versions: SUPPORTED_SERVICES.iter().map(|s| s.to_string()).collect(),
    }
}

/// The registration service of `dra.sock`.
pub type RegistrationService = edgegpu_node::registration::RegistrationService<Logged>;

/// The service answering the plugin watcher with `info` ([`plugin_info`]).
pub fn service(info: PluginInfo) -> RegistrationService {
    RegistrationService::new(info, Logged)
}

/// The kubelet's verdict, logged.
pub struct Logged;

impl RegistrationOutcome for Logged {
    fn registered(&self, info: &PluginInfo) {
        tracing::info!(
            "Registered DRA driver '{}' with the kubelet (endpoint {}, services {:?})",
            info.name,
            info.endpoint,
            info.supported_versions
        );
    }

    fn refused(&self, info: &PluginInfo, error: &str) {
        tracing::error!(
            "The kubelet refused the registration of DRA driver '{}': {error}",
            info.name
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_is_advertised_first() {
        let info = plugin_info("edgegpu.io", "/var/lib/kubelet/plugins/edgegpu.io/dra.sock");
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.name, "edgegpu.io");
        assert_eq!(
            info.supported_versions,
            [
                "v1.DRAPlugin",
                "v1beta1.DRAPlugin",
                "v1alpha1.DRAResourceHealth"
            ]
        );
    }
}
