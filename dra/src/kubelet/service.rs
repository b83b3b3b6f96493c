//! The DRA node service, `DRAPlugin` v1 and v1beta1: `NodePrepareResources` and
//! `NodeUnprepareResources`.
//!
//! Contract (k8s.io/kubelet v0.36.0 `pkg/apis/dra/v1/api.proto`; kubernetes
//! `pkg/kubelet/cm/dra/manager.go`):
//! - one call carries every claim of a pod for this driver; the response needs an entry per
//!   claim UID (the kubelet fails the pod's preparation with "NodePrepareResources skipped N
//!   ResourceClaims" otherwise), and a failed claim is reported in that entry's `error`;
//! - a gRPC error fails the whole call, so it is kept for requests that cannot be answered
//!   per claim (a claim without UID, namespace or name);
//! - calls are serialised, as the kubeletplugin helper does by default
//!   (k8s.io/dynamic-resource-allocation v0.36.0 `kubeletplugin/draplugin.go`
//!   serializeGRPCIfEnabled): one prepare or unprepare at a time, across both versions;
//! - request names are reported without their subrequest part (`req/sub` → `req`), as the
//!   helper's stripSubrequestNames does.
//!
//! v1beta1 answers are the v1 answers without `share_id` (the v1beta1 `Device` has none).

use std::collections::BTreeMap;
use std::sync::Arc;

use edgegpu_kubelet_api::{dra_v1, dra_v1beta1};
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};

use super::contract::{ClaimRef, Driver, DriverError, PreparedDevice};

/// Serves both versions with one driver and one lock.
#[derive(Clone)]
pub struct NodeService {
    driver: Arc<dyn Driver>,
    serial: Arc<Mutex<()>>,
}

/// Per claim UID: the prepared devices, or the driver's error.
type Prepared = BTreeMap<String, Result<Vec<PreparedDevice>, DriverError>>;
/// Per claim UID: `Ok`, or the driver's error.
type Unprepared = BTreeMap<String, Result<(), DriverError>>;

/// The fields of a v1 or v1beta1 `Claim` (identical messages).
struct RawClaim<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
}

impl NodeService {
    pub fn new(driver: Arc<dyn Driver>) -> Self {
        NodeService {
            driver,
            serial: Arc::new(Mutex::new(())),
        }
    }

    /// The v1 service, for tonic.
    pub fn v1(&self) -> dra_v1::dra_plugin_server::DraPluginServer<V1> {
        dra_v1::dra_plugin_server::DraPluginServer::new(V1(self.clone()))
    }

    /// The v1beta1 service, for tonic.
    pub fn v1beta1(&self) -> dra_v1beta1::dra_plugin_server::DraPluginServer<V1beta1> {
        dra_v1beta1::dra_plugin_server::DraPluginServer::new(V1beta1(self.clone()))
    }

    async fn prepare(&self, version: &str, claims: Vec<ClaimRef>) -> Prepared {
        let _serial = self.serial.lock().await;
        let mut results = Prepared::new();
        for claim in claims {
            if results.contains_key(&claim.uid) {
                continue;
            }
            let result = self.driver.prepare(&claim).await;
            match &result {
                Ok(devices) => tracing::debug!(
                    "NodePrepareResources ({version}): claim {}/{} ({}) prepared, {} device(s)",
                    claim.namespace,
                    claim.name,
                    claim.uid,
                    devices.len()
                ),
                Err(e) => tracing::warn!(
                    "NodePrepareResources ({version}): claim {}/{} ({}) failed: {e}",
                    claim.namespace,
                    claim.name,
                    claim.uid
                ),
            }
            results.insert(claim.uid, result);
        }
        results
    }

    async fn unprepare(&self, version: &str, claims: Vec<ClaimRef>) -> Unprepared {
        let _serial = self.serial.lock().await;
        let mut results = Unprepared::new();
        for claim in claims {
            if results.contains_key(&claim.uid) {
                continue;
            }
            let result = self.driver.unprepare(&claim).await;
            match &result {
                Ok(()) => tracing::debug!(
                    "NodeUnprepareResources ({version}): claim {}/{} ({}) unprepared",
                    claim.namespace,
                    claim.name,
                    claim.uid
                ),
                Err(e) => tracing::warn!(
                    "NodeUnprepareResources ({version}): claim {}/{} ({}) failed: {e}",
                    claim.namespace,
                    claim.name,
                    claim.uid
                ),
            }
            results.insert(claim.uid, result);
        }
        results
    }
}

/// The claims of a request, or `InvalidArgument` when one lacks a required field.
// `tonic::Status` is what the RPC returns anyway; boxing it here would only move the cost.
#[allow(clippy::result_large_err)]
fn claim_refs<'a>(
    method: &str,
    raw: impl Iterator<Item = RawClaim<'a>>,
) -> Result<Vec<ClaimRef>, Status> {
    let mut claims = Vec::new();
    for (i, c) in raw.enumerate() {
        for (field, value) in [("uid", c.uid), ("namespace", c.namespace), ("name", c.name)] {
            if value.is_empty() {
                tracing::warn!("{method}: claim #{i} has no {field}; request refused");
                return Err(Status::invalid_argument(format!(
                    "{method}: claim #{i} has an empty {field}"
                )));
            }
        }
        claims.push(ClaimRef {
            namespace: c.namespace.to_string(),
            name: c.name.to_string(),
            uid: c.uid.to_string(),
        });
    }
    tracing::debug!("{method}: {} claim(s)", claims.len());
    Ok(claims)
}

/// `req/sub` → `req` (k8s.io/dynamic-resource-allocation `resourceclaim.BaseRequestRef`).
fn base_request(name: &str) -> String {
    name.split_once('/')
        .map_or(name, |(base, _)| base)
        .to_string()
}

/// The v1 `DRAPlugin` service.
pub struct V1(NodeService);

/// The v1beta1 `DRAPlugin` service: the v1 answers without `share_id`.
pub struct V1beta1(NodeService);

/// One body for both API versions of `DRAPlugin`: their requests and answers have the same
/// shape (v1beta1's `Device` lacks `share_id`), so the service is written once and each
/// version converts its devices at the edge (`$device`). Kubelets of 1.32–1.33 speak only
/// v1beta1; both are served.
macro_rules! dra_plugin_service {
    ($service:ident, $api:ident, $version:literal, $device:path) => {
        #[tonic::async_trait]
        impl $api::dra_plugin_server::DraPlugin for $service {
            async fn node_prepare_resources(
                &self,
                request: Request<$api::NodePrepareResourcesRequest>,
            ) -> Result<Response<$api::NodePrepareResourcesResponse>, Status> {
                let request = request.into_inner();
                let claims = claim_refs(
                    "NodePrepareResources",
                    request.claims.iter().map(|c| RawClaim {
                        namespace: &c.namespace,
                        name: &c.name,
                        uid: &c.uid,
                    }),
                )?;
                let claims = self
                    .0
                    .prepare($version, claims)
                    .await
                    .into_iter()
                    .map(|(uid, result)| {
                        let answer = match result {
                            Ok(devices) => $api::NodePrepareResourceResponse {
                                devices: devices.into_iter().map($device).collect(),
                                error: String::new(),
                            },
                            Err(error) => $api::NodePrepareResourceResponse {
                                devices: Vec::new(),
                                error: error.to_string(),
                            },
                        };
                        (uid, answer)
                    })
                    .collect();
                Ok(Response::new($api::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                request: Request<$api::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$api::NodeUnprepareResourcesResponse>, Status> {
                let request = request.into_inner();
                let claims = claim_refs(
                    "NodeUnprepareResources",
                    request.claims.iter().map(|c| RawClaim {
                        namespace: &c.namespace,
                        name: &c.name,
                        uid: &c.uid,
                    }),
                )?;
                let claims = self
                    .0
                    .unprepare($version, claims)
                    .await
                    .into_iter()
                    .map(|(uid, result)| {
                        let error = result.err().map(|e| e.to_string()).unwrap_or_default();
                        (uid, $api::NodeUnprepareResourceResponse { error })
                    })
                    .collect();
                Ok(Response::new($api::NodeUnprepareResourcesResponse {
                    claims,
                }))
            }
        }
    };
}

dra_plugin_service!(V1, dra_v1, "v1", v1_device);
dra_plugin_service!(V1beta1, dra_v1beta1, "v1beta1", v1beta1_device);

fn v1_device(d: PreparedDevice) -> dra_v1::Device {
    dra_v1::Device {
        request_names: d.requests.iter().map(|r| base_request(r)).collect(),
        pool_name: d.pool,
        device_name: d.device,
        cdi_device_ids: d.cdi_device_ids,
        share_id: d.share_id,
    }
}

fn v1beta1_device(d: PreparedDevice) -> dra_v1beta1::Device {
    dra_v1beta1::Device {
        request_names: d.requests.iter().map(|r| base_request(r)).collect(),
        pool_name: d.pool,
        device_name: d.device,
        cdi_device_ids: d.cdi_device_ids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subrequest_names_are_stripped() {
        assert_eq!(base_request("gpu"), "gpu");
        assert_eq!(base_request("gpu/large"), "gpu");
    }

    #[test]
    fn a_claim_without_uid_refuses_the_request() {
        let claims = [RawClaim {
            namespace: "ns",
            name: "c",
            uid: "",
        }];
        let err = claim_refs("NodePrepareResources", claims.into_iter()).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
}
