//! Which container holds which device: the kubelet's pod-resources API
//! (`v1.PodResourcesLister/List` on `/var/lib/kubelet/pod-resources/kubelet.sock`), the
//! source dcgm-exporter uses for its `pod`, `namespace` and `container` labels.
//!
//! Asked once per scrape over a fresh connection: no connection is kept open between scrapes,
//! so an idle plugin has nothing to wake up for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use edgegpu_kubelet_api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use edgegpu_kubelet_api::podresources::ListPodResourcesRequest;

use super::registration::{unix_channel, DialError};

/// A List call must not hold a scrape up for long (Prometheus' default scrape timeout is 10 s).
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// One device ID of one of our resources held by one container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceHolder {
    /// The resource the ID belongs to (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`,
    /// `nvidia.com/gpu.shared`).
    pub resource: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub device_id: String,
}

/// Why the pod-resources API gave no answer (logged once until it answers again).
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// The socket could not be dialed (only the innermost cause is shown).
    #[error("cannot dial {}: {}", .socket.display(), .error.root_cause())]
    Dial { socket: PathBuf, error: DialError },
    #[error("List did not answer within {0:?}")]
    Timeout(Duration),
    #[error("List failed: {message} ({code:?})")]
    Failed { message: String, code: tonic::Code },
}

/// The device IDs of `resources` that running containers hold, sorted (one List call).
pub async fn holders(
    socket: &Path,
    resources: &[&str],
) -> Result<Vec<DeviceHolder>, PodResourcesError> {
    let channel =
        unix_channel(socket, LIST_TIMEOUT)
            .await
            .map_err(|error| PodResourcesError::Dial {
                socket: socket.to_path_buf(),
                error,
            })?;
    let mut client = PodResourcesListerClient::new(channel);
    let response = tokio::time::timeout(LIST_TIMEOUT, client.list(ListPodResourcesRequest {}))
        .await
        .map_err(|_| PodResourcesError::Timeout(LIST_TIMEOUT))?
        .map_err(|status| PodResourcesError::Failed {
            message: status.message().to_string(),
            code: status.code(),
        })?
        .into_inner();
    let mut out = Vec::new();
    for pod in response.pod_resources {
        for container in &pod.containers {
            for devices in container
                .devices
                .iter()
                .filter(|d| resources.contains(&d.resource_name.as_str()))
            {
                out.extend(devices.device_ids.iter().map(|id| DeviceHolder {
                    resource: devices.resource_name.clone(),
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    container: container.name.clone(),
                    device_id: id.clone(),
                }));
            }
        }
    }
    out.sort();
    Ok(out)
}
