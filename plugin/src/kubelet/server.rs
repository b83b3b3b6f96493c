//! The `DevicePlugin` gRPC service: serves one [`Resource`] to the kubelet.
//!
//! The service holds no state of its own besides a *generation* stop signal: when the
//! lifecycle tears a generation down (kubelet restart, lost socket), every open
//! `ListAndWatch` stream of that generation ends, so its connections close and no task or
//! file descriptor outlives the generation.

use std::pin::Pin;
use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::device_plugin_server::{DevicePlugin, DevicePluginServer};
use edgegpu_kubelet_api::v1beta1::{
    AllocateRequest, AllocateResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse,
};
use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

use crate::resource::Resource;

/// The gRPC service for one generation of the plugin's socket.
pub struct DevicePluginService {
    resource: Arc<dyn Resource>,
    stop: watch::Receiver<bool>,
    stream_lost: mpsc::UnboundedSender<()>,
}

impl DevicePluginService {
    /// A service whose `ListAndWatch` streams end when `stop` becomes `true`; a stream
    /// that ends for any other reason (the kubelet went away, a send failed) is reported
    /// on `stream_lost` so the lifecycle re-registers (the kubelet never reconnects).
    pub fn new(
        resource: Arc<dyn Resource>,
        stop: watch::Receiver<bool>,
        stream_lost: mpsc::UnboundedSender<()>,
    ) -> Self {
        DevicePluginService {
            resource,
            stop,
            stream_lost,
        }
    }

    /// Wraps the service for tonic.
    pub fn into_server(self) -> DevicePluginServer<Self> {
        DevicePluginServer::new(self)
    }
}

/// Reports a `ListAndWatch` stream that was dropped before its generation stopped.
struct LostGuard {
    stream_lost: mpsc::UnboundedSender<()>,
    stop: watch::Receiver<bool>,
    resource: String,
}

impl Drop for LostGuard {
    fn drop(&mut self) {
        if !*self.stop.borrow() {
            tracing::warn!(
                "ListAndWatch stream for '{}' ended (kubelet gone or send failed); re-registering",
                self.resource
            );
            if self.stream_lost.send(()).is_err() {
                tracing::debug!("the generation is already gone; nothing to re-register");
            }
        }
    }
}

type ListAndWatchStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

/// The current device list, then every new one, until the generation stops. `guard` lives
/// as long as the stream and reports it if it is dropped before the generation stops.
fn list_and_watch_stream(
    devices: watch::Receiver<Vec<Device>>,
    mut stop: watch::Receiver<bool>,
    guard: LostGuard,
) -> ListAndWatchStream {
    let lists = WatchStream::new(devices)
        // The resource dropped its publisher: nothing more will ever change. Keep the
        // stream open (ending it would make the kubelet zero the resource); it ends with
        // the generation.
        .chain(futures_util::stream::pending())
        .map(move |devices| {
            let _alive = &guard;
            Ok(ListAndWatchResponse { devices })
        });
    Box::pin(lists.take_until(async move { stopped(&mut stop).await }))
}

/// Completes when the generation stops (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    // `Err`: the sender is gone, which ends the generation as well. The `Ok` value is a
    // `Ref` holding a lock guard; it is dropped at the end of this statement.
    if stop.wait_for(|stop| *stop).await.is_err() {
        tracing::debug!("generation stop signal dropped; treating it as a stop");
    }
}

#[tonic::async_trait]
impl DevicePlugin for DevicePluginService {
    async fn get_device_plugin_options(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(self.resource.options()))
    }

    type ListAndWatchStream = ListAndWatchStream;

    async fn list_and_watch(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let resource = self.resource.resource_name().to_string();
        tracing::info!("ListAndWatch opened for '{resource}'");
        let guard = LostGuard {
            stream_lost: self.stream_lost.clone(),
            stop: self.stop.clone(),
            resource,
        };
        Ok(Response::new(list_and_watch_stream(
            self.resource.devices(),
            self.stop.clone(),
            guard,
        )))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        if !self.resource.options().get_preferred_allocation_available {
            return Err(Status::unimplemented(format!(
                "GetPreferredAllocation is not offered for '{}' (get_preferred_allocation_available is false)",
                self.resource.resource_name()
            )));
        }
        let request = request.into_inner();
        if request.container_requests.is_empty() {
            return Err(Status::invalid_argument(
                "PreferredAllocationRequest has no container requests",
            ));
        }
        let container_responses = request
            .container_requests
            .iter()
            .map(|r| self.resource.preferred_allocation(r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let request = request.into_inner();
        if request.container_requests.is_empty() {
            return Err(Status::invalid_argument(
                "AllocateRequest has no container requests",
            ));
        }
        let container_responses = request
            .container_requests
            .iter()
            .map(|r| self.resource.allocate(r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _request: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        // Nothing to prepare: the container runtime (NVIDIA runtime / CDI) does the work.
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
