//! Registration with the kubelet through `Registration/Register` on `kubelet.sock`,
//! retried with bounded exponential backoff.

use std::path::{Path, PathBuf};
use std::time::Duration;

use edgegpu_kubelet_api::v1beta1::registration_client::RegistrationClient;
use edgegpu_kubelet_api::v1beta1::{DevicePluginOptions, RegisterRequest, VERSION};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

use super::stats::RegistrationStats;

/// First retry delay after a failed registration.
const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest delay between two registration attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Dialing `kubelet.sock` must not hang a generation forever.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// The kubelet dials back inside `Register` with a 10 s timeout; leave it room.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(15);

/// Opens a gRPC channel over a unix socket. The URI is a placeholder required by tonic;
/// the connector ignores it and the kubelet ignores the authority.
pub(crate) async fn unix_channel(path: &Path, timeout: Duration) -> anyhow::Result<Channel> {
    let path: PathBuf = path.to_path_buf();
    let endpoint = Endpoint::from_static("http://localhost");
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_| {
        let path = path.clone();
        async move { UnixStream::connect(path).await.map(TokioIo::new) }
    }));
    Ok(tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {timeout:?}"))??)
}

/// The `RegisterRequest` for a plugin socket named `endpoint` (file name only).
pub fn register_request(
    endpoint: &str,
    resource_name: &str,
    options: DevicePluginOptions,
) -> RegisterRequest {
    RegisterRequest {
        version: VERSION.to_string(),
        endpoint: endpoint.to_string(),
        resource_name: resource_name.to_string(),
        options: Some(options),
    }
}

/// One attempt: dial `kubelet_socket` and call `Register`.
async fn register_once(kubelet_socket: &Path, request: RegisterRequest) -> anyhow::Result<()> {
    let channel = unix_channel(kubelet_socket, DIAL_TIMEOUT)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot dial {}: {}",
                kubelet_socket.display(),
                e.root_cause()
            )
        })?;
    let mut client = RegistrationClient::new(channel);
    match tokio::time::timeout(REGISTER_TIMEOUT, client.register(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(anyhow::anyhow!(
            "kubelet rejected the registration: {} ({:?})",
            status.message(),
            status.code()
        )),
        Err(_) => Err(anyhow::anyhow!(
            "Register did not answer within {REGISTER_TIMEOUT:?}"
        )),
    }
}

/// The delay before retry number `attempt` (0-based): 100 ms, 200 ms, … capped at 5 s.
pub fn backoff(attempt: u32) -> Duration {
    BACKOFF_INITIAL
        .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .min(BACKOFF_MAX)
}

/// Registers until it succeeds, logging each failure; only ends on success (the caller
/// aborts it when the generation ends).
pub async fn register_until_success(
    kubelet_socket: &Path,
    request: RegisterRequest,
    stats: &RegistrationStats,
) {
    let mut attempt = 0u32;
    loop {
        match register_once(kubelet_socket, request.clone()).await {
            Ok(()) => {
                stats.registered();
                tracing::info!(
                    "Registered device plugin for '{}' with Kubelet (endpoint {})",
                    request.resource_name,
                    request.endpoint
                );
                return;
            }
            Err(e) => {
                stats.registration_failed();
                let delay = backoff(attempt);
                tracing::warn!(
                    "Could not register device plugin for '{}' with Kubelet at {}: {e:#}; retrying in {delay:?}",
                    request.resource_name,
                    kubelet_socket.display()
                );
                tokio::time::sleep(delay).await;
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_then_caps() {
        assert_eq!(backoff(0), Duration::from_millis(100));
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(5), Duration::from_millis(3200));
        assert_eq!(backoff(6), BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
