//! Publishing this node's devices as ResourceSlices (`resource.k8s.io/v1`), as
//! `k8s.io/dynamic-resource-allocation/resourceslice` does: one pool named after the node,
//! owned by the Node object, split into slices of at most 128 devices, generation bumped on
//! every change, stale slices deleted; only this node's slices are ever touched.

use std::sync::Arc;

use edgegpu_apiclient::ApiServer;
use serde_json::Value;

/// What one [`SlicePublisher::publish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishOutcome {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    pub unchanged: usize,
    /// The pool's generation now.
    pub generation: i64,
}

/// Keeps the node's ResourceSlices equal to the devices it is given.
pub struct SlicePublisher {
    api: Arc<ApiServer>,
    driver: String,
    node: String,
}

impl SlicePublisher {
    pub fn new(api: Arc<ApiServer>, driver: &str, node: &str) -> Self {
        SlicePublisher {
            api,
            driver: driver.to_string(),
            node: node.to_string(),
        }
    }

    /// Makes the API server's slices of this driver and node hold exactly `devices` (each a
    /// `resource.k8s.io/v1` `Device` object as JSON), changing only what differs.
    pub async fn publish(&mut self, devices: Vec<Value>) -> anyhow::Result<PublishOutcome> {
        let _ = (&self.api, &self.driver, &self.node, devices);
        todo!("API side")
    }
}
