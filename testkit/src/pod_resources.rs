//! A fake of the kubelet's pod-resources API (`v1.PodResourcesLister` on a unix socket),
//! answering `List` (and `Get`) from assignments the test sets: which container of which pod
//! holds which device IDs of which resource.

// `tonic::Status` is the natural error of a gRPC fake; its size does not matter here.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use edgegpu_kubelet_api::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use edgegpu_kubelet_api::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

#[derive(Default)]
struct Shared {
    pods: Mutex<Vec<PodResources>>,
    list_calls: AtomicUsize,
    /// While set, every call fails with UNAVAILABLE (a kubelet that is restarting).
    failing: Mutex<bool>,
}

/// The fake, serving until dropped.
pub struct FakePodResources {
    socket: PathBuf,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

struct Service(Arc<Shared>);

impl Service {
    fn check(&self) -> Result<(), Status> {
        if *self.0.failing.lock().unwrap() {
            return Err(Status::unavailable("fake kubelet is restarting"));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _request: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        self.0.list_calls.fetch_add(1, Ordering::Relaxed);
        self.check()?;
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: self.0.pods.lock().unwrap().clone(),
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _request: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        self.check()?;
        Ok(Response::new(AllocatableResourcesResponse::default()))
    }

    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        self.check()?;
        let r = request.into_inner();
        let pods = self.0.pods.lock().unwrap();
        let pod = pods
            .iter()
            .find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace)
            .cloned()
            .ok_or_else(|| {
                Status::not_found(format!("pod {}/{} not found", r.pod_namespace, r.pod_name))
            })?;
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(pod),
        }))
    }
}

impl FakePodResources {
    /// Serves on `socket` (created; its directory must exist).
    pub async fn start(socket: &Path) -> std::io::Result<FakePodResources> {
        let listener = UnixListener::bind(socket)?;
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let service = PodResourcesListerServer::new(Service(shared.clone()));
        let server = tokio::spawn(async move {
            let stopped = async move {
                let _ = stopped.await;
            };
            if let Err(e) = Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stopped)
                .await
            {
                tracing::warn!("fake pod-resources server failed: {e}");
            }
        });
        Ok(FakePodResources {
            socket: socket.to_path_buf(),
            shared,
            stop: Some(stop),
            server: Some(server),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Records that `container` of pod `namespace/pod` holds `device_ids` of `resource`
    /// (adding the pod and container as needed).
    pub fn assign(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        resource: &str,
        device_ids: &[&str],
    ) {
        let mut pods = self.shared.pods.lock().unwrap();
        let index = match pods
            .iter()
            .position(|p| p.name == pod && p.namespace == namespace)
        {
            Some(i) => i,
            None => {
                pods.push(PodResources {
                    name: pod.into(),
                    namespace: namespace.into(),
                    containers: Vec::new(),
                });
                pods.len() - 1
            }
        };
        let p = &mut pods[index];
        let c = match p.containers.iter().position(|c| c.name == container) {
            Some(i) => &mut p.containers[i],
            None => {
                p.containers.push(ContainerResources {
                    name: container.into(),
                    ..Default::default()
                });
                p.containers.last_mut().unwrap()
            }
        };
        c.devices.push(ContainerDevices {
            resource_name: resource.into(),
            device_ids: device_ids.iter().map(|s| s.to_string()).collect(),
            topology: None,
        });
    }

    /// The pod ended: it no longer holds anything.
    pub fn remove_pod(&self, namespace: &str, pod: &str) {
        self.shared
            .pods
            .lock()
            .unwrap()
            .retain(|p| !(p.name == pod && p.namespace == namespace));
    }

    /// While `failing`, every call answers UNAVAILABLE.
    pub fn set_failing(&self, failing: bool) {
        *self.shared.failing.lock().unwrap() = failing;
    }

    /// How many `List` calls arrived.
    pub fn list_calls(&self) -> usize {
        self.shared.list_calls.load(Ordering::Relaxed)
    }
}

impl Drop for FakePodResources {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}
