//! Device health for the kubelet: `v1alpha1.DRAResourceHealth/NodeWatchResources`.
//!
//! The kubelet (kubernetes `pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go` @0062353, with the
//! `ResourceHealthStatus` feature gate) opens this stream on the driver's `dra.sock` right
//! after registration and opens it again 5 s after it ends. Every response replaces the
//! driver's whole device list (`pkg/kubelet/cm/dra/healthinfo.go` updateHealthInfo), and the
//! kubelet stamps each device with the time it *received* it: a device not reported again
//! within its timeout (`health_check_timeout_seconds`, default 30 s, `DefaultHealthTimeout`)
//! reads as Unknown. So the stream sends the full list at once, on every change, and again
//! every [`RESEND_INTERVAL`] while nothing changes.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use edgegpu_kubelet_api::dra_health_v1alpha1::dra_resource_health_server::{
    DraResourceHealth, DraResourceHealthServer,
};
use edgegpu_kubelet_api::dra_health_v1alpha1::{
    DeviceHealth as WireHealth, DeviceIdentifier, HealthStatus, NodeWatchResourcesRequest,
    NodeWatchResourcesResponse,
};
use futures_util::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::contract::{DeviceHealth, Driver, Health};
use super::socket::stopped;

/// How often an unchanged list is sent again: well inside the kubelet's default 30 s.
pub const RESEND_INTERVAL: Duration = Duration::from_secs(10);
/// The kubelet's limit on `message`, in characters; longer ones it cuts to 1021 plus "...".
pub const MESSAGE_LIMIT: usize = 1024;

/// The health service.
pub struct HealthService {
    driver: Arc<dyn Driver>,
    stop: watch::Receiver<bool>,
}

impl HealthService {
    /// Streams end when `stop` turns true, so a shutdown is not held up by open streams.
    pub fn new(driver: Arc<dyn Driver>, stop: watch::Receiver<bool>) -> Self {
        HealthService { driver, stop }
    }

    /// Wraps the service for tonic.
    pub fn into_server(self) -> DraResourceHealthServer<Self> {
        DraResourceHealthServer::new(self)
    }
}

/// `message` as the kubelet would keep it.
pub fn limit_message(message: &str) -> String {
    if message.chars().count() <= MESSAGE_LIMIT {
        return message.to_string();
    }
    let mut cut: String = message.chars().take(MESSAGE_LIMIT - 3).collect();
    cut.push_str("...");
    cut
}

/// One response: every device of `devices`, stamped `now` (Unix seconds).
pub fn response(devices: &[DeviceHealth], now: i64) -> NodeWatchResourcesResponse {
    NodeWatchResourcesResponse {
        devices: devices
            .iter()
            .map(|d| WireHealth {
                device: Some(DeviceIdentifier {
                    pool_name: d.pool.clone(),
                    device_name: d.device.clone(),
                }),
                health: match d.health {
                    Health::Unknown => HealthStatus::Unknown,
                    Health::Healthy => HealthStatus::Healthy,
                    Health::Unhealthy => HealthStatus::Unhealthy,
                } as i32,
                last_updated_time: now,
                // 0: the kubelet's default timeout, which RESEND_INTERVAL is made for.
                health_check_timeout_seconds: 0,
                message: limit_message(&d.message),
            })
            .collect(),
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

type HealthStream = Pin<Box<dyn Stream<Item = Result<NodeWatchResourcesResponse, Status>> + Send>>;

struct StreamState {
    health: watch::Receiver<Vec<DeviceHealth>>,
    stop: watch::Receiver<bool>,
    resend: tokio::time::Interval,
    first: bool,
}

/// The next response: the current list first, then on change or every
/// [`RESEND_INTERVAL`]; `None` (end of stream) on stop or when the driver's health
/// sender is gone.
async fn next(
    mut s: StreamState,
) -> Option<(Result<NodeWatchResourcesResponse, Status>, StreamState)> {
    if s.first {
        s.first = false;
        s.resend.reset();
    } else {
        tokio::select! {
            _ = stopped(&mut s.stop) => return None,
            changed = s.health.changed() => {
                if changed.is_err() {
                    tracing::warn!("The driver's health source is gone; ending the kubelet's health stream");
                    return None;
                }
                s.resend.reset();
            }
            _ = s.resend.tick() => {}
        }
    }
    let devices = s.health.borrow_and_update().clone();
    tracing::debug!(
        "NodeWatchResources: sending the health of {} device(s)",
        devices.len()
    );
    Some((Ok(response(&devices, unix_now())), s))
}

#[tonic::async_trait]
impl DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = HealthStream;

    async fn node_watch_resources(
        &self,
        _request: Request<NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        tracing::debug!("NodeWatchResources: the kubelet opened the health stream");
        let mut resend = tokio::time::interval(RESEND_INTERVAL);
        resend.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let state = StreamState {
            health: self.driver.health(),
            stop: self.stop.clone(),
            resend,
            first: true,
        };
        Ok(Response::new(Box::pin(futures_util::stream::unfold(
            state, next,
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_like_the_kubelet_does() {
        assert_eq!(limit_message("ok"), "ok");
        let exact = "é".repeat(MESSAGE_LIMIT);
        assert_eq!(limit_message(&exact), exact);
        let cut = limit_message(&"é".repeat(MESSAGE_LIMIT + 1));
        assert_eq!(cut.chars().count(), MESSAGE_LIMIT);
        assert!(cut.ends_with("..."));
    }

    #[test]
    fn every_device_is_in_the_response() {
        let devices = vec![
            DeviceHealth {
                pool: "p".into(),
                device: "gpu-0".into(),
                health: Health::Healthy,
                message: String::new(),
            },
            DeviceHealth {
                pool: "p".into(),
                device: "gpu-1".into(),
                health: Health::Unhealthy,
                message: "Xid 79".into(),
            },
        ];
        let r = response(&devices, 42);
        assert_eq!(r.devices.len(), 2);
        assert_eq!(r.devices[1].health, HealthStatus::Unhealthy as i32);
        assert_eq!(r.devices[1].message, "Xid 79");
        assert_eq!(r.devices[0].last_updated_time, 42);
        assert_eq!(r.devices[0].device.as_ref().unwrap().device_name, "gpu-0");
    }
}
