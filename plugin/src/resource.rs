//! The contract between the gRPC side of the plugin (server, registration, lifecycle) and
//! the GPU side (discovery, health, allocation, sharing).
//!
//! The server knows nothing about GPUs: it serves one [`Resource`] and streams its device
//! list. Everything GPU-specific sits behind this trait.

use edgegpu_kubelet_api::v1beta1::{
    ContainerAllocateRequest, ContainerAllocateResponse, ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions,
};
use tokio::sync::watch;

/// One extended resource (e.g. `nvidia.com/gpu`) advertised to the kubelet.
pub trait Resource: Send + Sync + 'static {
    /// The extended resource name sent in `RegisterRequest.resource_name`.
    fn resource_name(&self) -> &str;

    /// The options reported by `GetDevicePluginOptions` (and, identically, in `Register`).
    fn options(&self) -> DevicePluginOptions;

    /// The complete, current device list. Every change (health, hot-plug) is published
    /// as a new full list; `ListAndWatch` sends each one to the kubelet.
    fn devices(&self) -> watch::Receiver<Vec<Device>>;

    /// Builds the response for one container's allocation. Unknown, unhealthy or too many
    /// IDs must produce an error that names them (`tonic::Status::invalid_argument`, …).
    fn allocate(
        &self,
        request: &ContainerAllocateRequest,
    ) -> Result<ContainerAllocateResponse, tonic::Status>;

    /// Picks the preferred devices for one container (only called when
    /// `get_preferred_allocation_available` is set in [`Resource::options`]).
    fn preferred_allocation(
        &self,
        request: &ContainerPreferredAllocationRequest,
    ) -> Result<ContainerPreferredAllocationResponse, tonic::Status>;
}
