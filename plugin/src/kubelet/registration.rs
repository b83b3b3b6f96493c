//! Registration with the kubelet through `Registration/Register` on `kubelet.sock`,
//! retried with bounded exponential backoff.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgegpu_kubelet_api::v1beta1::registration_client::RegistrationClient;
use edgegpu_kubelet_api::v1beta1::{DevicePluginOptions, RegisterRequest, VERSION};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

use super::stats::RegistrationStats;

/// First retry delay after a failed registration.
const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Retry interval while `kubelet.sock` exists but refuses connections: a starting kubelet
/// creates the file at bind() and accepts only after listen() a moment later, and inotify
/// wakes us in between. A flat 1 ms finds the listening socket at most 1 ms late (doubling
/// delays would be up to as late as the gap itself).
const REFUSED_INTERVAL: Duration = Duration::from_millis(1);
/// Quick retries while refused (50 ms in all) before the ordinary backoff takes over.
const REFUSED_QUICK_RETRIES: u32 = 50;
/// Longest delay between two registration attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Dialing `kubelet.sock` must not hang a generation forever.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// The kubelet dials back inside `Register` with a 10 s timeout; leave it room.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(15);

/// Why dialing a kubelet socket failed.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The socket is missing or not listening yet (ENOENT, ECONNREFUSED).
    #[error(transparent)]
    NotListening(tonic::transport::Error),
    /// Any other connect failure.
    #[error(transparent)]
    Failed(tonic::transport::Error),
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
}

impl DialError {
    /// The innermost cause (e.g. the `connect()` error), the part worth logging.
    pub fn root_cause(&self) -> &(dyn std::error::Error + 'static) {
        let mut cause: &(dyn std::error::Error + 'static) = self;
        while let Some(next) = cause.source() {
            cause = next;
        }
        cause
    }
}

/// Why one `Register` attempt failed. Logged on every retry: each message names what an
/// operator checks first (docs/device-plugin.md lists them).
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// `kubelet.sock` could not be dialed (only the innermost cause is shown).
    #[error("cannot dial {}: {}", .socket.display(), .error.root_cause())]
    Dial { socket: PathBuf, error: DialError },
    /// The kubelet answered `Register` with an error.
    #[error("kubelet rejected the registration: {message} ({code:?})")]
    Rejected { message: String, code: tonic::Code },
    /// The kubelet accepted the connection but `Register` did not return in time.
    #[error("Register did not answer within {0:?}")]
    Timeout(Duration),
}

impl RegistrationError {
    /// The kubelet socket is missing or not listening yet: the normal start of a kubelet,
    /// retried quickly.
    pub fn is_not_listening(&self) -> bool {
        matches!(
            self,
            RegistrationError::Dial {
                error: DialError::NotListening(_),
                ..
            }
        )
    }
}

/// Opens a gRPC channel over a unix socket. The URI is a placeholder required by tonic;
/// the connector ignores it and the kubelet ignores the authority.
pub(crate) async fn unix_channel(path: &Path, timeout: Duration) -> Result<Channel, DialError> {
    let path: PathBuf = path.to_path_buf();
    // The connector's io::Error reaches us wrapped by tonic; keep its kind aside.
    let dial_error = Arc::new(Mutex::new(None::<io::ErrorKind>));
    let endpoint = Endpoint::from_static("http://localhost");
    let connect = endpoint.connect_with_connector(tower::service_fn({
        let dial_error = Arc::clone(&dial_error);
        move |_| {
            let (path, dial_error) = (path.clone(), Arc::clone(&dial_error));
            async move {
                UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
                    .map_err(|e| {
                        *dial_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.kind());
                        e
                    })
            }
        }
    }));
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => {
            let kind = *dial_error.lock().unwrap_or_else(|p| p.into_inner());
            match kind {
                Some(io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound) => {
                    Err(DialError::NotListening(e))
                }
                _ => Err(DialError::Failed(e)),
            }
        }
        Err(_) => Err(DialError::TimedOut(timeout)),
    }
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
async fn register_once(
    kubelet_socket: &Path,
    request: RegisterRequest,
) -> Result<(), RegistrationError> {
    let channel = unix_channel(kubelet_socket, DIAL_TIMEOUT)
        .await
        .map_err(|error| RegistrationError::Dial {
            socket: kubelet_socket.to_path_buf(),
            error,
        })?;
    let mut client = RegistrationClient::new(channel);
    match tokio::time::timeout(REGISTER_TIMEOUT, client.register(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(RegistrationError::Rejected {
            message: status.message().to_string(),
            code: status.code(),
        }),
        Err(_) => Err(RegistrationError::Timeout(REGISTER_TIMEOUT)),
    }
}

/// The delay before retry number `attempt` (0-based): 100 ms, 200 ms, … capped at 5 s.
pub fn backoff(attempt: u32) -> Duration {
    BACKOFF_INITIAL
        .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .min(BACKOFF_MAX)
}

/// The delay before the next quick retry while the socket refuses connections (`quick`
/// retries so far), or `None` when the ordinary [`backoff`] should take over.
pub fn refused_retry(quick: u32) -> Option<Duration> {
    (quick < REFUSED_QUICK_RETRIES).then_some(REFUSED_INTERVAL)
}

/// Registers until it succeeds, logging each failure; only ends on success (the caller
/// aborts it when the generation ends). A socket that is not listening yet is retried
/// within milliseconds a few times (logged at debug: it is the normal start of a kubelet),
/// then with the ordinary backoff.
pub async fn register_until_success(
    kubelet_socket: &Path,
    request: RegisterRequest,
    stats: &RegistrationStats,
) {
    let mut attempt = 0u32;
    let mut quick = 0u32;
    loop {
        let e = match register_once(kubelet_socket, request.clone()).await {
            Ok(()) => {
                stats.registered();
                tracing::info!(
                    "Registered device plugin for '{}' with Kubelet (endpoint {})",
                    request.resource_name,
                    request.endpoint
                );
                return;
            }
            Err(e) => e,
        };
        let quick_retry = if e.is_not_listening() {
            refused_retry(quick)
        } else {
            None
        };
        let delay = match quick_retry {
            Some(delay) => {
                quick += 1;
                tracing::debug!("kubelet socket not listening yet ({e:#}); retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                continue;
            }
            None => backoff(attempt),
        };
        stats.registration_failed();
        tracing::warn!(
            "Could not register device plugin for '{}' with Kubelet at {}: {e:#}; retrying in {delay:?}",
            request.resource_name,
            kubelet_socket.display()
        );
        tokio::time::sleep(delay).await;
        attempt = attempt.saturating_add(1);
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

    #[test]
    fn refused_retries_are_quick_then_hand_over() {
        let quick: Vec<Duration> = (0..).map_while(refused_retry).collect();
        assert!(quick.iter().all(|d| *d == Duration::from_millis(1)));
        assert_eq!(quick.iter().sum::<Duration>(), Duration::from_millis(50));
    }
}
