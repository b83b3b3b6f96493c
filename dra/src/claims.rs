//! The ResourceClaims the kubelet asks to prepare: which of their allocated devices are this
//! driver's, and the opaque configuration that applies to them. NodePrepareResources names a
//! claim only by namespace, name and UID; what was allocated is in the claim's
//! `status.allocation` on the API server (as `k8s.io/dynamic-resource-allocation/kubeletplugin`
//! fetches it before calling a driver).

use edgegpu_apiclient::ApiServer;
use serde_json::Value;

use crate::kubelet::ClaimRef;

/// One device allocated to the claim by the scheduler (`status.allocation.devices.results[]`)
/// for this driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// The request (or `request/subrequest`) it was allocated for.
    pub request: String,
    pub pool: String,
    pub device: String,
    /// `adminAccess: true`: monitoring access that does not make the device busy.
    pub admin_access: bool,
    /// Set when the device may be allocated several times (`allowMultipleAllocations`).
    pub share_id: Option<String>,
}

/// Where an opaque configuration came from: the DeviceClass (applied first) or the claim
/// (applied after, so it wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    Class,
    Claim,
}

/// One `opaque` configuration for this driver (`status.allocation.devices.config[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct OpaqueConfig {
    /// The requests it applies to; empty: every request of the claim.
    pub requests: Vec<String>,
    /// `opaque.parameters`, not yet validated (see [`crate::sharing`]).
    pub parameters: Value,
    pub source: ConfigSource,
}

/// What the scheduler allocated to a claim, as far as this driver is concerned.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimAllocation {
    /// This driver's devices, in the order of the allocation results.
    pub devices: Vec<AllocatedDevice>,
    /// This driver's opaque configs, in the order they apply (class ones, then claim ones).
    pub configs: Vec<OpaqueConfig>,
}

/// Reads the claim from the API server (`resource.k8s.io/v1`, falling back to the beta
/// versions an older API server serves) and extracts [`ClaimAllocation`]. Fails when the claim
/// is gone, has another UID (deleted and recreated), or is not allocated.
pub async fn fetch(
    api: &ApiServer,
    claim: &ClaimRef,
    driver: &str,
) -> anyhow::Result<ClaimAllocation> {
    let _ = (api, claim, driver);
    todo!("API side")
}

/// The pure part of [`fetch`]: [`ClaimAllocation`] from the claim object (JSON).
pub fn allocation_from_object(
    claim: &ClaimRef,
    object: &Value,
    driver: &str,
) -> Result<ClaimAllocation, String> {
    let _ = (claim, object, driver);
    todo!("API side")
}
