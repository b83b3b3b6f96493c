//! gRPC types for the kubelet's device-plugin API (`v1beta1`), its plugin-watcher
//! registration API (`pluginregistration`), its pod-resources API (`podresources`, v1) and
//! its Dynamic Resource Allocation plugin APIs (`dra_v1`, `dra_v1beta1`, `dra_health_v1alpha1`).
//!
//! The code under `src/generated/` is produced from `proto/*.proto` by a pure-Rust
//! protobuf compiler (protox) and tonic-build, and checked in so that building never
//! needs `protoc`. `tests/generated_code_is_fresh.rs` fails when it is stale; run
//! `scripts/regen-proto.sh` to refresh it.

/// Device plugin API v1beta1: `Registration` (served by the kubelet) and `DevicePlugin`
/// (served by plugins).
#[allow(clippy::all, missing_docs)]
pub mod v1beta1 {
    include!("generated/v1beta1.rs");

    /// The only API version the kubelet supports.
    pub const VERSION: &str = "v1beta1";
    /// Health value for a device that counts toward allocatable.
    pub const HEALTHY: &str = "Healthy";
    /// Health value for a device that must not be allocated.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// The kubelet's default device-plugin directory.
    pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins";
    /// File name of the kubelet's registration socket inside [`DEVICE_PLUGIN_PATH`].
    pub const KUBELET_SOCKET_NAME: &str = "kubelet.sock";
}

/// Plugin-watcher registration API (`/var/lib/kubelet/plugins_registry`).
#[allow(clippy::all, missing_docs)]
pub mod pluginregistration {
    include!("generated/pluginregistration.rs");

    /// `PluginInfo.type` for device plugins.
    pub const DEVICE_PLUGIN_TYPE: &str = "DevicePlugin";
    /// `PluginInfo.type` for Dynamic Resource Allocation drivers (`DRAPlugin` in
    /// k8s.io/kubelet/pkg/apis/pluginregistration/v1/constants.go).
    pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";
    /// The kubelet's default plugin-watcher directory.
    pub const PLUGINS_REGISTRY_PATH: &str = "/var/lib/kubelet/plugins_registry";
}

/// Pod-resources API v1: `PodResourcesLister` (served by the kubelet), which tells monitoring
/// agents which device IDs each running container holds.
#[allow(clippy::all, missing_docs)]
pub mod podresources {
    include!("generated/v1.rs");

    /// The kubelet's default pod-resources socket.
    pub const POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
}

/// DRA kubelet plugin API v1 (`k8s.io.kubelet.pkg.apis.dra.v1`, Kubernetes 1.34 on):
/// `DRAPlugin` with `NodePrepareResources` / `NodeUnprepareResources`, served by DRA drivers
/// on their `dra.sock` and called by the kubelet.
#[allow(clippy::all, missing_docs)]
pub mod dra_v1 {
    include!("generated/k8s.io.kubelet.pkg.apis.dra.v1.rs");

    /// How a driver lists this service in `PluginInfo.supported_versions`
    /// (`DRAPluginService` in k8s.io/kubelet/pkg/apis/dra/v1/types.go).
    pub const DRA_PLUGIN_SERVICE: &str = "v1.DRAPlugin";
    /// The kubelet's default directory for plugin sockets; a DRA driver's `dra.sock` lives in
    /// `<this>/<driver name>/` (`KubeletPluginsDir` in
    /// k8s.io/dynamic-resource-allocation/kubeletplugin/draplugin.go).
    pub const KUBELET_PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";
    /// The DRA service's socket file name inside the driver's plugin directory.
    pub const DRA_SOCKET_NAME: &str = "dra.sock";
}

/// DRA kubelet plugin API v1beta1 (`k8s.io.kubelet.pkg.apis.dra.v1beta1`, Kubernetes 1.32 on):
/// the same messages as [`dra_v1`] without `Device.share_id`.
#[allow(clippy::all, missing_docs)]
pub mod dra_v1beta1 {
    include!("generated/k8s.io.kubelet.pkg.apis.dra.v1beta1.rs");

    /// How a driver lists this service in `PluginInfo.supported_versions`
    /// (`DRAPluginService` in k8s.io/kubelet/pkg/apis/dra/v1beta1/types.go).
    pub const DRA_PLUGIN_SERVICE: &str = "v1beta1.DRAPlugin";
}

/// DRA device-health API v1alpha1 (proto package `v1alpha1`): `DRAResourceHealth` with the
/// server stream `NodeWatchResources`, served by DRA drivers on their `dra.sock`.
#[allow(clippy::all, missing_docs)]
pub mod dra_health_v1alpha1 {
    include!("generated/v1alpha1.rs");

    /// How a driver lists this service in `PluginInfo.supported_versions` (the gRPC service
    /// name, as k8s.io/dynamic-resource-allocation/kubeletplugin/draplugin.go advertises it).
    pub const DRA_RESOURCE_HEALTH_SERVICE: &str = "v1alpha1.DRAResourceHealth";
}

/// Container Runtime Interface v1 (`runtime.v1`, k8s.io/cri-api v0.34.0
/// `pkg/apis/runtime/v1/api.proto`), client only. Behind the `cri` feature: only the
/// end-to-end test (e2e/) talks to containerd through it; the shipped programs never compile it.
#[cfg(feature = "cri")]
#[allow(clippy::all, missing_docs)]
pub mod cri {
    include!("generated/runtime.v1.rs");
}

#[cfg(test)]
mod tests {
    use tonic::server::NamedService;

    /// The kubelet matches `supported_versions` entries as "<last proto package element>.<service>"
    /// (kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go validateSupportedServices);
    /// the constants must name the services the generated code serves.
    #[test]
    fn advertised_service_names_match_the_generated_services() {
        fn short(full: &str) -> String {
            let mut parts: Vec<&str> = full.rsplitn(3, '.').collect();
            parts.truncate(2);
            parts.reverse();
            parts.join(".")
        }
        type V1 = crate::dra_v1::dra_plugin_server::DraPluginServer<()>;
        type V1beta1 = crate::dra_v1beta1::dra_plugin_server::DraPluginServer<()>;
        type Health =
            crate::dra_health_v1alpha1::dra_resource_health_server::DraResourceHealthServer<()>;
        assert_eq!(short(V1::NAME), crate::dra_v1::DRA_PLUGIN_SERVICE);
        assert_eq!(short(V1beta1::NAME), crate::dra_v1beta1::DRA_PLUGIN_SERVICE);
        assert_eq!(
            Health::NAME,
            crate::dra_health_v1alpha1::DRA_RESOURCE_HEALTH_SERVICE
        );
    }
}
