//! The ResourceClaims the kubelet asks to prepare: which of their allocated devices are this
//! driver's, and the opaque configuration that applies to them. NodePrepareResources names a
//! claim only by namespace, name and UID; what was allocated is in the claim's
//! `status.allocation` on the API server (as `k8s.io/dynamic-resource-allocation/kubeletplugin`
//! fetches it before calling a driver).

use std::collections::BTreeMap;

use edgegpu_apiclient::{api_error, ApiError, ApiServer};
use edgegpu_node::quantity::{parse_bytes, QuantityError};
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
    /// What the allocation consumed of the device's consumable capacities
    /// (`consumedCapacity`, KEP-5075): bytes for `memory`, by capacity name.
    pub consumed_capacity: BTreeMap<String, u64>,
}

/// Where an opaque configuration came from: the DeviceClass (the cluster admin's ceiling) or
/// the claim (which may only tighten the class's: [`crate::sharing::resolve`]).
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
    /// This driver's opaque configs, class ones then claim ones, each in the claim's order.
    pub configs: Vec<OpaqueConfig>,
}

/// Why a claim's `status.allocation` is not one this driver can prepare
/// ([`allocation_from_object`]); each names the claim by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// The claim was deleted and created again under the same name.
    #[error("claim {}/{} got replaced: the kubelet asked for UID {}, the API server has UID {found_uid} (deleted and created again)", .claim.namespace, .claim.name, .claim.uid)]
    Replaced { claim: ClaimRef, found_uid: String },
    #[error("claim {}/{} is not allocated (no status.allocation)", .claim.namespace, .claim.name)]
    NotAllocated { claim: ClaimRef },
    #[error("claim {}/{}: status.allocation.devices.results[{index}] has no {field}", .claim.namespace, .claim.name)]
    ResultWithout {
        claim: ClaimRef,
        index: usize,
        field: &'static str,
    },
    /// None of the results is this driver's; `drivers` are the drivers they are for.
    #[error("claim {}/{} has no device of driver {driver} allocated (its results are for: {})", .claim.namespace, .claim.name, list_or_nothing(.drivers))]
    NoDeviceOfDriver {
        claim: ClaimRef,
        driver: String,
        drivers: Vec<String>,
    },
    #[error("claim {}/{}: status.allocation.devices.results[{index}].consumedCapacity.{capacity}: {source}", .claim.namespace, .claim.name)]
    ConsumedCapacity {
        claim: ClaimRef,
        index: usize,
        capacity: String,
        // Boxed: the other variants are small, and this is the `Err` of every claim read.
        #[source]
        source: Box<QuantityError>,
    },
    #[error("claim {}/{}: status.allocation.devices.config[{index}] has source {found:?}, neither FromClass nor FromClaim", .claim.namespace, .claim.name)]
    ConfigSource {
        claim: ClaimRef,
        index: usize,
        found: Option<String>,
    },
}

fn list_or_nothing(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".to_string()
    } else {
        items.join(", ")
    }
}

/// Why [`fetch`] could not read what was allocated to a claim.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The API server answered that the claim does not exist.
    #[error("claim {}/{} is gone (deleted before it was prepared): {}", .claim.namespace, .claim.name, .answer.message)]
    Gone {
        claim: ClaimRef,
        #[source]
        answer: ApiError,
    },
    /// Every version of [`CLAIM_API_VERSIONS`] answered "not served".
    #[error("{what}: the API server serves none of resource.k8s.io/{}", CLAIM_API_VERSIONS.join(", "))]
    NotServed { what: String },
    /// The request failed otherwise (the API client's error, with its context).
    #[error(transparent)]
    Api(anyhow::Error),
    #[error(transparent)]
    Allocation(#[from] AllocationError),
}

/// The `resource.k8s.io` versions a claim is read in, most preferred first: the order of
/// `k8s.io/dynamic-resource-allocation/client` (v0.36.0, `client.go`). Their
/// `status.allocation.devices` have the same shape.
pub const CLAIM_API_VERSIONS: [&str; 3] = ["v1", "v1beta2", "v1beta1"];

/// `/apis/resource.k8s.io/<version>/namespaces/<ns>/resourceclaims/<name>`.
pub fn claim_path(version: &str, claim: &ClaimRef) -> String {
    format!(
        "/apis/resource.k8s.io/{version}/namespaces/{}/resourceclaims/{}",
        claim.namespace, claim.name
    )
}

/// Reads the claim from the API server (`resource.k8s.io/v1`, falling back to the beta
/// versions an older API server serves) and extracts [`ClaimAllocation`]. Fails when the claim
/// is gone, has another UID (deleted and recreated), or is not allocated.
///
/// Unlike the Go client, which tries the next version on every 404, only a 404 for the path
/// itself (no `details.name`: the version is not served) moves to the next version; a 404
/// naming the claim means it is gone.
pub async fn fetch(
    api: &ApiServer,
    claim: &ClaimRef,
    driver: &str,
) -> Result<ClaimAllocation, FetchError> {
    let what = format!("get resourceclaim {}/{}", claim.namespace, claim.name);
    let mut object = None;
    for version in CLAIM_API_VERSIONS {
        match api.get(&claim_path(version, claim), &what).await {
            Ok(found) => {
                object = Some(found);
                break;
            }
            Err(e) => match api_error(&e) {
                Some(a) if a.is_resource_not_served() => continue,
                Some(a) if a.is_object_not_found() => {
                    let answer = e.downcast::<ApiError>().map_err(FetchError::Api)?;
                    return Err(FetchError::Gone {
                        claim: claim.clone(),
                        answer,
                    });
                }
                _ => return Err(FetchError::Api(e)),
            },
        }
    }
    let object = object.ok_or(FetchError::NotServed { what })?;
    Ok(allocation_from_object(claim, &object, driver)?)
}

/// The pure part of [`fetch`]: [`ClaimAllocation`] from the claim object (JSON).
pub fn allocation_from_object(
    claim: &ClaimRef,
    object: &Value,
    driver: &str,
) -> Result<ClaimAllocation, AllocationError> {
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    if uid != claim.uid {
        return Err(AllocationError::Replaced {
            claim: claim.clone(),
            found_uid: uid.to_string(),
        });
    }
    let Some(allocation) = object
        .pointer("/status/allocation")
        .filter(|a| !a.is_null())
    else {
        return Err(AllocationError::NotAllocated {
            claim: claim.clone(),
        });
    };
    let results = allocation
        .pointer("/devices/results")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut devices = Vec::new();
    for (i, result) in results.iter().enumerate() {
        let field = |key: &str| result.get(key).and_then(Value::as_str);
        if field("driver") != Some(driver) {
            continue;
        }
        let required = |key: &'static str| {
            field(key)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or_else(|| AllocationError::ResultWithout {
                    claim: claim.clone(),
                    index: i,
                    field: key,
                })
        };
        let mut consumed_capacity = BTreeMap::new();
        for (capacity, quantity) in result
            .get("consumedCapacity")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            // Quantities come back as strings; a number is a quantity of plain units.
            let text = match quantity {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let value = parse_bytes(&text).map_err(|source| AllocationError::ConsumedCapacity {
                claim: claim.clone(),
                index: i,
                capacity: capacity.clone(),
                source: Box::new(source),
            })?;
            consumed_capacity.insert(capacity.clone(), value);
        }
        devices.push(AllocatedDevice {
            request: required("request")?,
            pool: required("pool")?,
            device: required("device")?,
            admin_access: result
                .get("adminAccess")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            share_id: field("shareID").map(str::to_string),
            consumed_capacity,
        });
    }
    if devices.is_empty() {
        return Err(AllocationError::NoDeviceOfDriver {
            claim: claim.clone(),
            driver: driver.to_string(),
            drivers: results
                .iter()
                .filter_map(|r| r.get("driver").and_then(Value::as_str))
                .map(str::to_string)
                .collect(),
        });
    }
    let configs = allocation
        .pointer("/devices/config")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut class = Vec::new();
    let mut from_claim = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let Some(opaque) = config.get("opaque") else {
            continue;
        };
        if opaque.get("driver").and_then(Value::as_str) != Some(driver) {
            continue;
        }
        let source = match config.get("source").and_then(Value::as_str) {
            Some("FromClass") => ConfigSource::Class,
            Some("FromClaim") => ConfigSource::Claim,
            other => {
                return Err(AllocationError::ConfigSource {
                    claim: claim.clone(),
                    index: i,
                    found: other.map(str::to_string),
                })
            }
        };
        let requests = config
            .get("requests")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let entry = OpaqueConfig {
            requests,
            parameters: opaque.get("parameters").cloned().unwrap_or(Value::Null),
            source,
        };
        match source {
            ConfigSource::Class => class.push(entry),
            ConfigSource::Claim => from_claim.push(entry),
        }
    }
    class.extend(from_claim);
    Ok(ClaimAllocation {
        devices,
        configs: class,
    })
}
