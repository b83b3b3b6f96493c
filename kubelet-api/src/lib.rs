//! gRPC types for the kubelet's device-plugin API (`v1beta1`), its plugin-watcher
//! registration API (`pluginregistration`) and its pod-resources API (`podresources`, v1).
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

/// Container Runtime Interface v1 (`runtime.v1`, k8s.io/cri-api v0.34.0
/// `pkg/apis/runtime/v1/api.proto`), client only. Behind the `cri` feature: only the
/// end-to-end test (e2e/) talks to containerd through it; the shipped programs never compile it.
#[cfg(feature = "cri")]
#[allow(clippy::all, missing_docs)]
pub mod cri {
    include!("generated/runtime.v1.rs");
}
