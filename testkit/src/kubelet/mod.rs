//! An in-process fake kubelet that behaves like the real one towards device plugins (the
//! kubelet's device manager, kubernetes `pkg/kubelet/cm/devicemanager/`: `manager.go`,
//! `plugin/v1beta1/server.go`, `handler.go`, `client.go`; the device-plugin page of the
//! Kubernetes documentation; docs/device-plugin.md says which behaviours the plugin relies on).
//!
//! - On start it deletes every socket in the device-plugin directory (keeping
//!   `kubelet_internal_checkpoint` and anything that is not a socket) and serves
//!   `v1beta1.Registration` on a fresh `kubelet.sock`.
//! - `Register` validates version and resource name with the kubelet's error texts, dials
//!   back to `<dir>/<endpoint>` *inside* the call (10 s timeout), calls
//!   `GetDevicePluginOptions`, then consumes `ListAndWatch` in the background, recording
//!   every device list. A second registration of a resource replaces the first endpoint.
//! - When the stream ends, the resource's devices count as unhealthy (allocatable 0).
//! - [`FakeKubelet::admit`] mimics pod admission: `GetPreferredAllocation` and
//!   `PreStartContainer` only when the options say so, `Allocate` with exactly one
//!   container request.
//! - It can restart ([`FakeKubelet::restart`]), dial back like an old kubelet whose
//!   `:authority` is the socket path ([`FakeKubeletOptions::old_kubelet_authority`]),
//!   and run the plugin-watcher flow on a `plugins_registry` directory.
//! - Its plugin watcher also registers Dynamic Resource Allocation drivers (`DRAPlugin`
//!   sockets) as the kubelet's DRA plugin manager does, and tests call them through
//!   [`FakeKubelet::dra_prepare`], [`FakeKubelet::dra_unprepare`] and
//!   [`FakeKubelet::dra_health`] (`dra.rs`).
//!
//! The fake kubelet itself (its `Registration` server, start, stop, restart and pod
//! admission) is here; its options and the state its tasks share are in `state.rs`, the
//! kubelet's resource name checks in `names.rs`, dialing a plugin and consuming its
//! `ListAndWatch` in `dial.rs`, the plugin-watcher registration path in `plugin_watcher.rs`
//! and the old kubelets' `:authority` in `old_authority.rs`.

// `tonic::Status` is the natural error of a gRPC fake; its size does not matter here.
#![allow(clippy::result_large_err)]

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgegpu_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use edgegpu_kubelet_api::v1beta1::registration_server::{Registration, RegistrationServer};
use edgegpu_kubelet_api::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, Device, Empty, PreStartContainerRequest,
    PreferredAllocationRequest, RegisterRequest, HEALTHY, KUBELET_SOCKET_NAME, VERSION,
};
use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

mod dial;
mod dra;
mod dra_state;
mod names;
mod old_authority;
mod plugin_watcher;
mod state;

pub use dial::{dial_plugin, DIAL_TIMEOUT};
pub use dra::{choose_service, dra_claim, DraHealthStream, DRA_CALL_TIMEOUT, HEALTH_RETRY};
pub use dra_state::DraPluginInfo;
pub use names::is_extended_resource_name;
pub use old_authority::AuthorityOverride;
pub use state::{kubelet_dra_services, FakeKubeletOptions, ResourceInfo, GET_INFO_TIMEOUT};

use dial::{connect_endpoint, Registered};
use plugin_watcher::run_plugin_watcher;
use state::{Shared, State};

/// The kubelet's checkpoint file, which survives its start-up clean-up.
pub const CHECKPOINT_NAME: &str = "kubelet_internal_checkpoint";

struct Running {
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
    watcher: Option<JoinHandle<()>>,
}

/// The fake kubelet. Dropping it stops it (sockets it created are left for the test's
/// temporary directory to clean up).
pub struct FakeKubelet {
    shared: Arc<Shared>,
    running: tokio::sync::Mutex<Option<Running>>,
}

impl FakeKubelet {
    /// Starts a modern kubelet on `device_plugin_dir`.
    pub async fn start(device_plugin_dir: impl Into<PathBuf>) -> anyhow::Result<FakeKubelet> {
        Self::start_with(FakeKubeletOptions::new(device_plugin_dir)).await
    }

    /// Starts a kubelet configured by `opts`.
    pub async fn start_with(opts: FakeKubeletOptions) -> anyhow::Result<FakeKubelet> {
        let kubelet = Self::new_stopped(opts);
        kubelet.start_again().await?;
        Ok(kubelet)
    }

    /// A kubelet that is not running yet ("absent at plugin start"); call
    /// [`FakeKubelet::start_again`] to start it.
    pub fn new_stopped(opts: FakeKubeletOptions) -> FakeKubelet {
        let (changed, _) = watch::channel(0);
        FakeKubelet {
            shared: Arc::new(Shared {
                opts,
                state: Mutex::new(State::default()),
                changed,
            }),
            running: tokio::sync::Mutex::new(None),
        }
    }

    /// The device-plugin directory.
    pub fn device_plugin_dir(&self) -> &Path {
        &self.shared.opts.device_plugin_dir
    }

    /// Path of `kubelet.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.shared.opts.device_plugin_dir.join(KUBELET_SOCKET_NAME)
    }

    /// Starts serving (no-op when running): deletes every socket in the directory, then
    /// creates `kubelet.sock`.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        let mut running = self.running.lock().await;
        if running.is_some() {
            return Ok(());
        }
        let dir = &self.shared.opts.device_plugin_dir;
        std::fs::create_dir_all(dir)?;
        let removed = remove_sockets(dir)?;
        let listener = if self.shared.opts.listen_delay.is_zero() {
            UnixListener::bind(self.socket_path())?
        } else {
            let socket = tokio::net::UnixSocket::new_stream()?;
            socket.bind(self.socket_path())?;
            tokio::time::sleep(self.shared.opts.listen_delay).await;
            socket.listen(1024)?
        };
        self.shared
            .update(|s| s.listening_since = Some(Instant::now()));
        let epoch = self.shared.update(|s| {
            s.epoch += 1;
            s.running = true;
            s.epoch
        });
        self.shared.log(format!(
            "kubelet started (removed {removed} socket(s)); serving Registration on {}",
            self.socket_path().display()
        ));
        let service = KubeletRegistration {
            shared: self.shared.clone(),
            epoch,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let shared = self.shared.clone();
        let server = tokio::spawn(async move {
            // A dropped sender stops the server as well.
            let stopped = async { stopped.await.unwrap_or(()) };
            if let Err(e) = Server::builder()
                .add_service(RegistrationServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stopped)
                .await
            {
                shared.log(format!("registration server failed: {e}"));
            }
        });
        let watcher =
            self.shared.opts.plugins_registry.clone().map(|registry| {
                tokio::spawn(run_plugin_watcher(self.shared.clone(), registry, epoch))
            });
        *running = Some(Running {
            stop,
            server,
            watcher,
        });
        Ok(())
    }

    /// Stops like a dying kubelet process: the registration server goes away, every
    /// plugin connection is dropped and every endpoint counts as stopped.
    pub async fn stop(&self) {
        let Some(running) = self.running.lock().await.take() else {
            return;
        };
        let listers = self.shared.update(|s| {
            s.epoch += 1;
            s.running = false;
            let mut listers = Vec::new();
            for ep in s.resources.values_mut() {
                ep.info.stopped = true;
                ep.client = None;
                listers.extend(ep.lister.take());
            }
            s.dra.clear();
            listers
        });
        for lister in listers {
            abort_and_join(lister).await;
        }
        if let Some(watcher) = running.watcher {
            abort_and_join(watcher).await;
        }
        if running.stop.send(()).is_err() {
            self.shared
                .log("registration server had already ended".to_string());
        }
        let abort = running.server.abort_handle();
        if tokio::time::timeout(Duration::from_secs(2), running.server)
            .await
            .is_err()
        {
            abort.abort();
        }
        match std::fs::remove_file(self.socket_path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => self.shared.log(format!(
                "cannot remove {}: {e}",
                self.socket_path().display()
            )),
            _ => {}
        }
        self.shared.log("kubelet stopped".to_string());
    }

    /// A kubelet restart: stop, delete every socket in the directory, start again.
    pub async fn restart(&self) -> anyhow::Result<()> {
        self.stop().await;
        self.start_again().await
    }

    /// When `kubelet.sock` last started accepting connections (after the listen delay).
    pub fn listening_since(&self) -> Option<Instant> {
        self.shared.state.lock().unwrap().listening_since
    }

    /// Total number of successful registrations (all resources, across restarts).
    pub fn registration_count(&self) -> usize {
        self.shared.state.lock().unwrap().total_registrations
    }

    /// Everything known about `resource`, if it ever registered.
    pub fn resource(&self, resource: &str) -> Option<ResourceInfo> {
        let state = self.shared.state.lock().unwrap();
        state.resources.get(resource).map(|ep| ep.info.clone())
    }

    /// The last device list of `resource` (empty when unknown).
    pub fn devices(&self, resource: &str) -> Vec<Device> {
        self.resource(resource)
            .map(|r| r.devices)
            .unwrap_or_default()
    }

    /// Healthy devices of a live endpoint (0 when stopped or unknown).
    pub fn allocatable(&self, resource: &str) -> usize {
        self.resource(resource).map_or(0, |r| r.allocatable())
    }

    /// Number of devices last advertised (what the node reports as capacity).
    pub fn capacity(&self, resource: &str) -> usize {
        self.resource(resource).map_or(0, |r| r.devices.len())
    }

    /// Human-readable event log, oldest first.
    pub fn events(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().events.clone()
    }

    /// Waits until `pred` holds on the kubelet's view, or fails after `timeout` with the
    /// event log in the error.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&FakeKubelet) -> bool,
    ) -> anyhow::Result<()> {
        let mut changed = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changed.borrow_and_update();
            if pred(self) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                anyhow::bail!(
                    "fake kubelet: timed out after {timeout:?} waiting for {what}; events:\n  {}",
                    self.events().join("\n  ")
                );
            }
        }
    }

    /// Waits until `resource` is registered with a live endpoint that has sent at least
    /// one device list; returns its info.
    pub async fn wait_for_registration(
        &self,
        resource: &str,
        timeout: Duration,
    ) -> anyhow::Result<ResourceInfo> {
        self.wait_until(&format!("registration of {resource}"), timeout, |k| {
            k.resource(resource)
                .is_some_and(|r| !r.stopped && !r.history.is_empty())
        })
        .await?;
        Ok(self.resource(resource).expect("registered"))
    }

    /// Waits until the total registration count reaches `count` and `resource` is live.
    pub async fn wait_for_registrations(
        &self,
        resource: &str,
        count: usize,
        timeout: Duration,
    ) -> anyhow::Result<ResourceInfo> {
        self.wait_until(
            &format!("{count} registrations, {resource} live"),
            timeout,
            |k| {
                k.registration_count() >= count
                    && k.resource(resource)
                        .is_some_and(|r| !r.stopped && !r.history.is_empty())
            },
        )
        .await?;
        Ok(self.resource(resource).expect("registered"))
    }

    fn client(
        &self,
        resource: &str,
    ) -> Result<(DevicePluginClient<Channel>, ResourceInfo), Status> {
        let state = self.shared.state.lock().unwrap();
        let ep = state.resources.get(resource).ok_or_else(|| {
            Status::not_found(format!("cannot allocate unregistered device {resource}"))
        })?;
        match (&ep.client, ep.info.stopped) {
            (Some(client), false) => Ok((client.clone(), ep.info.clone())),
            _ => Err(Status::unavailable(format!(
                "endpoint {:?} has been stopped",
                ep.info.endpoint
            ))),
        }
    }

    /// `Allocate` with exactly one container request for `ids`, after the kubelet's own
    /// checks (registered, healthy).
    pub async fn allocate(
        &self,
        resource: &str,
        ids: &[&str],
    ) -> Result<ContainerAllocateResponse, Status> {
        let (mut client, info) = self.client(resource)?;
        for id in ids {
            match info.devices.iter().find(|d| d.id == *id) {
                None => {
                    return Err(Status::not_found(format!(
                        "cannot allocate unregistered device {resource}"
                    )))
                }
                Some(d) if d.health != HEALTHY => {
                    return Err(Status::failed_precondition(format!(
                        "no healthy devices present; cannot allocate unhealthy devices {resource}"
                    )))
                }
                Some(_) => {}
            }
        }
        let request = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids.iter().map(|s| s.to_string()).collect(),
            }],
        };
        let mut response = client.allocate(request).await?.into_inner();
        if response.container_responses.is_empty() {
            return Err(Status::internal(
                "plugin returned no container response (the kubelet needs exactly one)",
            ));
        }
        Ok(response.container_responses.swap_remove(0))
    }

    /// `GetPreferredAllocation` for one container; refused when the plugin's options do not
    /// offer it (a real kubelet would not call it).
    pub async fn preferred_allocation(
        &self,
        resource: &str,
        available: &[&str],
        must_include: &[&str],
        size: i32,
    ) -> Result<Vec<String>, Status> {
        let (mut client, info) = self.client(resource)?;
        if !info.options.get_preferred_allocation_available {
            return Err(Status::failed_precondition(
                "the plugin does not offer GetPreferredAllocation; a kubelet would not call it",
            ));
        }
        let request = PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: available.iter().map(|s| s.to_string()).collect(),
                must_include_device_i_ds: must_include.iter().map(|s| s.to_string()).collect(),
                allocation_size: size,
            }],
        };
        let response = client.get_preferred_allocation(request).await?.into_inner();
        Ok(response
            .container_responses
            .into_iter()
            .next()
            .map(|r| r.device_i_ds)
            .unwrap_or_default())
    }

    /// Pod admission of one container asking for `count` devices, as the kubelet does it:
    /// free healthy devices, `GetPreferredAllocation` if offered (answer intersected with
    /// what is free, shortfall filled), `Allocate` with one container request, then
    /// `PreStartContainer` if required. Returns the chosen IDs and the response.
    pub async fn admit(
        &self,
        resource: &str,
        count: usize,
    ) -> Result<(Vec<String>, ContainerAllocateResponse), Status> {
        let (mut client, info) = self.client(resource)?;
        let allocated = {
            let state = self.shared.state.lock().unwrap();
            state.resources[resource].allocated.clone()
        };
        let free: Vec<String> = info
            .devices
            .iter()
            .filter(|d| d.health == HEALTHY && !allocated.contains(&d.id))
            .map(|d| d.id.clone())
            .collect();
        if free.len() < count {
            return Err(Status::resource_exhausted(format!(
                "requested number of devices unavailable for {resource}. Requested: {count}, Available: {}",
                free.len()
            )));
        }
        let mut chosen: Vec<String> = Vec::new();
        if info.options.get_preferred_allocation_available {
            let free_refs: Vec<&str> = free.iter().map(String::as_str).collect();
            let preferred = self
                .preferred_allocation(resource, &free_refs, &[], count as i32)
                .await?;
            chosen.extend(
                preferred
                    .into_iter()
                    .filter(|id| free.contains(id))
                    .take(count),
            );
        }
        for id in &free {
            if chosen.len() == count {
                break;
            }
            if !chosen.contains(id) {
                chosen.push(id.clone());
            }
        }
        let ids: Vec<&str> = chosen.iter().map(String::as_str).collect();
        let response = self.allocate(resource, &ids).await?;
        if info.options.pre_start_required {
            client
                .pre_start_container(PreStartContainerRequest {
                    devices_ids: chosen.clone(),
                })
                .await?;
        }
        self.shared.update(|s| {
            if let Some(ep) = s.resources.get_mut(resource) {
                ep.allocated.extend(chosen.iter().cloned());
            }
        });
        Ok((chosen, response))
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Ok(mut running) = self.running.try_lock() {
            if let Some(running) = running.take() {
                running.server.abort();
                if let Some(w) = running.watcher {
                    w.abort();
                }
            }
        }
        let mut state = self.shared.state.lock().unwrap();
        for ep in state.resources.values_mut() {
            if let Some(l) = ep.lister.take() {
                l.abort();
            }
        }
        state.dra.clear();
    }
}

/// Deletes every socket directly in `dir` except the checkpoint; returns how many.
pub fn remove_sockets(dir: &Path) -> io::Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == CHECKPOINT_NAME {
            continue;
        }
        // A plugin may remove its own socket at the same moment: not an error.
        let is_socket = match entry.file_type() {
            Ok(t) => t.is_socket(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        if is_socket {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

struct KubeletRegistration {
    shared: Arc<Shared>,
    epoch: u64,
}

#[tonic::async_trait]
impl Registration for KubeletRegistration {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        self.shared.log(format!(
            "Got registration request from device plugin with resource {}",
            r.resource_name
        ));
        if r.version != VERSION {
            let msg = format!(
                "requested API version {:?} is not supported by kubelet. Supported version is [{:?}]",
                r.version, VERSION
            );
            self.shared.log(msg.clone());
            return Err(Status::unknown(msg));
        }
        if !is_extended_resource_name(&r.resource_name) {
            let msg = format!("the ResourceName {:?} is invalid", r.resource_name);
            self.shared.log(msg.clone());
            return Err(Status::unknown(msg));
        }
        let endpoint = self.shared.opts.device_plugin_dir.join(&r.endpoint);
        let registered = Registered {
            resource: &r.resource_name,
            endpoint,
            register_options: r.options,
            watcher_socket: None,
        };
        connect_endpoint(&self.shared, self.epoch, registered)
            .await
            .map_err(|e| {
                self.shared
                    .log(format!("registration of {} failed: {e}", r.resource_name));
                Status::unknown(e)
            })?;
        Ok(Response::new(Empty {}))
    }
}

/// Aborts `task` and waits for it to end; a panic inside it fails the test that runs the
/// fake (cancellation is the expected outcome).
async fn abort_and_join(task: JoinHandle<()>) {
    task.abort();
    if let Err(e) = task.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// The DRA side of the fake kubelet (dra.rs does the work on the shared state).
impl FakeKubelet {
    /// The service chosen for `driver`'s newest plugin (e.g. `"v1.DRAPlugin"`), if a plugin
    /// is registered.
    pub fn dra_registered(&self, driver: &str) -> Option<String> {
        dra::dra_registered(&self.shared, driver)
    }

    /// Every registered plugin of `driver`, oldest first.
    pub fn dra_plugins(&self, driver: &str) -> Vec<DraPluginInfo> {
        dra::dra_plugins(&self.shared, driver)
    }

    /// How often `driver` registered (across restarts).
    pub fn dra_registration_count(&self, driver: &str) -> usize {
        dra::dra_registration_count(&self.shared, driver)
    }

    /// The last health list of `driver` (with `resource_health_status` on), while its
    /// stream is open.
    pub fn dra_device_health(
        &self,
        driver: &str,
    ) -> Option<Vec<edgegpu_kubelet_api::dra_health_v1alpha1::DeviceHealth>> {
        dra::dra_device_health(&self.shared, driver)
    }

    /// Waits until `driver` has registered at least `count` times and is registered now;
    /// returns the plugin the kubelet would call (the newest connected one).
    pub async fn wait_for_dra_registration(
        &self,
        driver: &str,
        count: usize,
        timeout: Duration,
    ) -> anyhow::Result<DraPluginInfo> {
        self.wait_until(
            &format!("registration #{count} of DRA driver {driver}"),
            timeout,
            |k| k.dra_registration_count(driver) >= count && k.dra_registered(driver).is_some(),
        )
        .await?;
        Ok(dra::dra_plugin(&self.shared, driver)
            .await
            .map_err(|s| anyhow::anyhow!("{}", s.message()))?
            .0)
    }

    /// `NodePrepareResources` for `claims`, as the kubelet sends it (v1 or v1beta1 by the
    /// chosen service, 45 s timeout). The answer is returned in v1 form; an answer that
    /// leaves claims out fails as in the kubelet. Per-claim errors stay in the answer (a
    /// kubelet would fail the pod's start with the first one).
    pub async fn dra_prepare(
        &self,
        driver: &str,
        claims: &[edgegpu_kubelet_api::dra_v1::Claim],
    ) -> Result<edgegpu_kubelet_api::dra_v1::NodePrepareResourcesResponse, tonic::Status> {
        dra::dra_prepare(&self.shared, driver, claims).await
    }

    /// `NodeUnprepareResources` for `claims` (v1 or v1beta1 by the chosen service, 45 s
    /// timeout), answered in v1 form.
    pub async fn dra_unprepare(
        &self,
        driver: &str,
        claims: &[edgegpu_kubelet_api::dra_v1::Claim],
    ) -> Result<edgegpu_kubelet_api::dra_v1::NodeUnprepareResourcesResponse, tonic::Status> {
        dra::dra_unprepare(&self.shared, driver, claims).await
    }

    /// Opens `NodeWatchResources` on `driver`'s plugin, as the kubelet does with the
    /// `ResourceHealthStatus` gate.
    pub async fn dra_health(&self, driver: &str) -> Result<DraHealthStream, tonic::Status> {
        dra::dra_health(&self.shared, driver).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_checked_like_the_kubelet() {
        assert!(is_extended_resource_name("nvidia.com/gpu"));
        assert!(is_extended_resource_name("nvidia.com/mig-1g.5gb"));
        assert!(is_extended_resource_name("nvidia.com/gpu.shared"));
        assert!(!is_extended_resource_name("gpu"));
        assert!(!is_extended_resource_name("kubernetes.io/gpu"));
        assert!(!is_extended_resource_name("requests.nvidia.com/gpu"));
        assert!(!is_extended_resource_name("Nvidia.com/gpu"));
        assert!(!is_extended_resource_name("nvidia.com/-gpu"));
        assert!(!is_extended_resource_name(&format!(
            "nvidia.com/{}",
            "g".repeat(64)
        )));
    }

    #[test]
    fn start_up_clean_up_keeps_checkpoint_and_plain_files() {
        let dir = tempfile::tempdir().unwrap();
        let _a = std::os::unix::net::UnixListener::bind(dir.path().join("a.sock")).unwrap();
        let _c = std::os::unix::net::UnixListener::bind(dir.path().join(CHECKPOINT_NAME)).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert_eq!(remove_sockets(dir.path()).unwrap(), 1);
        assert!(!dir.path().join("a.sock").exists());
        assert!(dir.path().join(CHECKPOINT_NAME).exists());
        assert!(dir.path().join("notes.txt").exists());
        assert!(dir.path().join("sub").exists());
    }
}
