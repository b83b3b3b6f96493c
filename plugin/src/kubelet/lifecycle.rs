//! The plugin's lifecycle: serve, register, watch for kubelet restarts, re-register.
//!
//! Each *generation* binds a fresh, uniquely named socket, serves `DevicePlugin` on it,
//! and only then registers (with `Register` on `kubelet.sock`, or through the plugin
//! watcher). A generation ends when
//! - inotify reports a Create of `kubelet.sock` (the kubelet restarted and deleted every
//!   socket in the directory),
//! - inotify reports that our own socket was deleted or renamed away,
//! - a `ListAndWatch` stream ended while the generation was live (the kubelet never
//!   reconnects; only a new registration brings the resource back) — unless another live
//!   instance of the same resource registered after us, in which case we yield to it
//!   until its socket disappears (no registration ping-pong between two instances), or
//! - shutdown was requested.
//!
//! Stopping a generation ends its streams, closes its connections, stops the server and
//! unlinks its sockets if they still carry the inode it bound; then the next generation
//! starts. Nothing polls: with a registered plugin the process sleeps until the kernel
//! or the kubelet wakes it.

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use edgegpu_kubelet_api::v1beta1::{DEVICE_PLUGIN_PATH, KUBELET_SOCKET_NAME};
use futures_util::Stream;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::Server;

use super::plugin_watcher;
use super::registration::{backoff, register_request, register_until_success};
use super::restart_watch::{DirWatcher, RestartReason, WatchError};
use super::server::{self, DevicePluginService};
use super::socket::{socket_prefix, OwnedSocket};
use super::stats::KubeletStats;
use crate::resource::Resource;
use edgegpu_node::authority::AuthorityShim;

/// How long probing another instance's socket may take.
const COMPETITOR_DIAL_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a stopping generation may take to close its connections before its server
/// task is aborted.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// Why a lifecycle ended, or (the socket variants, logged and retried) why a generation
/// could not start. `serve` and `serve_all` return it inside an `anyhow::Error`.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("cannot create the plugin socket in {}: {error}", .dir.display())]
    PluginSocket { dir: PathBuf, error: io::Error },
    #[error("cannot create the registration socket in {}: {error}", .dir.display())]
    RegistrationSocket { dir: PathBuf, error: io::Error },
    /// The device-plugin directory cannot be watched: kubelet restarts would go unseen.
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error("a resource's lifecycle task failed: {0}")]
    TaskFailed(tokio::task::JoinError),
}

/// Where the plugin meets the kubelet.
#[derive(Debug, Clone)]
pub struct LifecycleOptions {
    /// The kubelet's device-plugin directory; the plugin's sockets are created here.
    pub device_plugin_dir: PathBuf,
    /// The kubelet's registration socket (normally `<device_plugin_dir>/kubelet.sock`).
    pub kubelet_socket: PathBuf,
    /// When set, register through the kubelet's plugin watcher in this directory instead
    /// of calling `Register` on `kubelet.sock`.
    pub plugins_registry: Option<PathBuf>,
    /// Socket file-name prefix; derived from the resource name when `None`
    /// (`nvidia.com/gpu` → `nvidia-gpu-<unix-secs>-<process-tag>-<n>.sock`).
    pub socket_prefix: Option<String>,
    /// Registration counters per resource (read by the metrics endpoint).
    pub stats: Arc<KubeletStats>,
}

impl LifecycleOptions {
    /// Options for a device-plugin directory with the kubelet socket at its usual place.
    pub fn new(device_plugin_dir: impl Into<PathBuf>) -> Self {
        let device_plugin_dir = device_plugin_dir.into();
        LifecycleOptions {
            kubelet_socket: device_plugin_dir.join(KUBELET_SOCKET_NAME),
            device_plugin_dir,
            plugins_registry: None,
            socket_prefix: None,
            stats: Arc::default(),
        }
    }
}

impl Default for LifecycleOptions {
    fn default() -> Self {
        LifecycleOptions::new(DEVICE_PLUGIN_PATH)
    }
}

/// Serves `resource` until `shutdown` completes, surviving kubelet restarts.
///
/// Returns `Ok(())` after a clean shutdown (every socket this call created is gone), or
/// an error ([`LifecycleError::Watch`]) when the directory cannot be watched. Sockets that cannot be bound are
/// retried with backoff.
pub async fn serve(
    resource: Arc<dyn Resource>,
    opts: LifecycleOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let resource_name = resource.resource_name().to_string();
    let prefix = opts
        .socket_prefix
        .clone()
        .unwrap_or_else(|| socket_prefix(&resource_name));
    tracing::info!(
        "Starting FS watcher for {}",
        opts.device_plugin_dir.display()
    );
    let mut watcher = DirWatcher::new(&opts.device_plugin_dir, &opts.kubelet_socket)
        .await
        .map_err(LifecycleError::Watch)?;
    tokio::pin!(shutdown);
    let mut number = 0u64;
    loop {
        number += 1;
        let Some(mut generation) =
            start_generation(&resource, &opts, &prefix, number, &mut shutdown).await
        else {
            tracing::info!("Stopped before serving '{resource_name}'");
            return Ok(());
        };
        let own_name = OsString::from(generation.socket.file_name());
        // Set while another live instance of this resource holds the kubelet's endpoint.
        let mut yielded_to: Option<OsString> = None;
        let reason = loop {
            tokio::select! {
                _ = &mut shutdown => break None,
                reason = watcher.next_restart(&own_name, yielded_to.as_deref()) => break Some(reason.map_err(LifecycleError::Watch)?),
                Some(()) = generation.stream_lost.recv() => {
                    match live_competitor(&opts.device_plugin_dir, &prefix, &own_name).await {
                        Some(other) => {
                            tracing::info!(
                                "Another instance serves '{resource_name}' at {}; not re-registering while it is alive",
                                opts.device_plugin_dir.join(&other).display()
                            );
                            yielded_to = Some(other);
                        }
                        None => break Some(RestartReason::StreamLost),
                    }
                }
            }
        };
        generation.stop().await;
        opts.stats
            .resource(&resource_name)
            .generation_ended(reason.as_ref());
        match reason {
            None => {
                tracing::info!("Stopped serving '{resource_name}'; sockets removed");
                return Ok(());
            }
            Some(RestartReason::WatchLost) => {
                tracing::info!("{}", RestartReason::WatchLost);
                watcher = DirWatcher::new(&opts.device_plugin_dir, &opts.kubelet_socket)
                    .await
                    .map_err(LifecycleError::Watch)?;
            }
            Some(reason) => tracing::info!("{reason}"),
        }
    }
}

/// Serves every resource of `resources` on its own socket (NVIDIA's one gRPC server per
/// resource), each with its own lifecycle, until `shutdown` completes; then stops them all.
/// The first error of any of them ends every one and is returned.
pub async fn serve_all(
    resources: Vec<Arc<dyn Resource>>,
    opts: LifecycleOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let (stop, _) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for resource in resources {
        let mut stopped = stop.subscribe();
        let opts = opts.clone();
        tasks.spawn(async move {
            serve(resource, opts, async move {
                // Err: the sender is gone, which also means stop.
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
        });
    }
    let mut first_error = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            done = tasks.join_next() => match done {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => { first_error = Some(e); break; }
                Some(Err(e)) => { first_error = Some(LifecycleError::TaskFailed(e).into()); break; }
            },
        }
    }
    stop.send_replace(true);
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(LifecycleError::TaskFailed(e).into());
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Starts the next generation, retrying with backoff while its sockets cannot be bound —
/// e.g. the kubelet is still deleting every socket in the directory after a restart, or
/// the directory is being recreated. Exiting instead would leave the node at
/// allocatable 0 until the DaemonSet restarts the plugin. `None`: shutdown came first.
async fn start_generation<S: Future<Output = ()>>(
    resource: &Arc<dyn Resource>,
    opts: &LifecycleOptions,
    prefix: &str,
    number: u64,
    shutdown: &mut std::pin::Pin<&mut S>,
) -> Option<Generation> {
    let mut attempt = 0u32;
    loop {
        match Generation::start(resource, opts, prefix, number).await {
            Ok(generation) => return Some(generation),
            Err(e) => {
                let delay = backoff(attempt);
                tracing::warn!(
                    "Failed to start serving '{}': {e:#}; retrying in {delay:?}",
                    resource.resource_name()
                );
                tokio::select! {
                    _ = shutdown.as_mut() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// One bound socket with its server and registration.
struct Generation {
    socket: OwnedSocket,
    registry_socket: Option<OwnedSocket>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    registration: Option<JoinHandle<()>>,
    stream_lost: mpsc::UnboundedReceiver<()>,
}

impl Generation {
    async fn start(
        resource: &Arc<dyn Resource>,
        opts: &LifecycleOptions,
        prefix: &str,
        number: u64,
    ) -> Result<Generation, LifecycleError> {
        let resource_name = resource.resource_name();
        let (socket, listener) = OwnedSocket::bind_unique(&opts.device_plugin_dir, prefix)
            .await
            .map_err(|error| LifecycleError::PluginSocket {
                dir: opts.device_plugin_dir.clone(),
                error,
            })?;
        // Bind the registration socket too before spawning anything, so that a failure
        // leaves no server task behind (dropping `socket` unlinks it).
        let registry = match &opts.plugins_registry {
            Some(registry_dir) => Some(
                OwnedSocket::bind_unique(registry_dir, prefix)
                    .await
                    .map_err(|error| LifecycleError::RegistrationSocket {
                        dir: registry_dir.clone(),
                        error,
                    })?,
            ),
            None => None,
        };
        tracing::info!(
            "Starting to serve '{resource_name}' on {} (generation {number})",
            socket.path().display()
        );
        let (stop, _) = watch::channel(false);
        let (lost_tx, stream_lost) = mpsc::unbounded_channel();
        let service = DevicePluginService::new(resource.clone(), stop.subscribe(), lost_tx);
        let mut tasks = vec![spawn_server(
            Server::builder().add_service(service.into_server()),
            listener,
            stop.subscribe(),
            "DevicePlugin",
        )];

        let mut registry_socket = None;
        let mut registration = None;
        match registry {
            Some((reg_socket, reg_listener)) => {
                let endpoint = absolute(socket.path());
                tracing::info!(
                    "Serving plugin-watcher registration for '{resource_name}' on {} (endpoint {})",
                    reg_socket.path().display(),
                    endpoint.display()
                );
                let watcher_service = plugin_watcher::service(
                    resource_name,
                    &endpoint.to_string_lossy(),
                    opts.stats.resource(resource_name),
                );
                tasks.push(spawn_server(
                    Server::builder().add_service(watcher_service.into_server()),
                    reg_listener,
                    stop.subscribe(),
                    "plugin-watcher Registration",
                ));
                registry_socket = Some(reg_socket);
            }
            None => {
                let request =
                    register_request(&socket.file_name(), resource_name, resource.options());
                let kubelet_socket = opts.kubelet_socket.clone();
                let stats = opts.stats.resource(resource_name);
                registration = Some(tokio::spawn(async move {
                    register_until_success(&kubelet_socket, request, &stats).await
                }));
            }
        }
        Ok(Generation {
            socket,
            registry_socket,
            stop,
            tasks,
            registration,
            stream_lost,
        })
    }

    async fn stop(self) {
        // `send_replace` also works when every receiver is already gone.
        self.stop.send_replace(true);
        if let Some(registration) = self.registration {
            registration.abort();
            match registration.await {
                Err(e) if !e.is_cancelled() => tracing::warn!("registration task failed: {e}"),
                _ => {}
            }
        }
        // Deregister from the plugin watcher first, then remove the DevicePlugin socket.
        if let Some(registry_socket) = self.registry_socket {
            registry_socket.remove_off_runtime().await;
        }
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(STOP_GRACE, task).await.is_err() {
                tracing::warn!("gRPC server did not stop within {STOP_GRACE:?}; aborting it");
                abort.abort();
            }
        }
        self.socket.remove_off_runtime().await;
    }
}

/// Another socket of this resource (same prefix) in `dir` that accepts connections: a
/// second instance (e.g. the new pod of a rolling update) that registered after us. The
/// kubelet then replaced our endpoint and closed our stream; re-registering would take
/// the resource back and start a ping-pong, so the older instance yields instead.
async fn live_competitor(dir: &Path, prefix: &str, own_name: &OsStr) -> Option<OsString> {
    let start = format!("{prefix}-");
    let (dir, own_name) = (dir.to_path_buf(), own_name.to_os_string());
    let candidates = tokio::task::spawn_blocking(move || {
        let entries = std::fs::read_dir(&dir).ok()?;
        let names = entries.flatten().map(|e| e.file_name()).filter(|name| {
            name != &own_name
                && name
                    .to_str()
                    .is_some_and(|t| t.starts_with(&start) && t.ends_with(".sock"))
        });
        Some(names.map(|n| (dir.join(&n), n)).collect::<Vec<_>>())
    })
    .await
    .ok()??;
    for (path, name) in candidates {
        // A connect() succeeds only if someone is listening (no stale socket file); one
        // whose backlog is full would block, hence the timeout.
        let connect = UnixStream::connect(path);
        if let Ok(Ok(_)) = tokio::time::timeout(COMPETITOR_DIAL_TIMEOUT, connect).await {
            return Some(name);
        }
    }
    None
}

/// `path` made absolute against the current directory (`std::path::absolute` needs
/// Rust 1.79; the MSRV is 1.75).
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Runs a tonic router on `listener` (through the `:authority` shim) until `stop`.
fn spawn_server(
    router: tonic::transport::server::Router,
    listener: UnixListener,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
) -> JoinHandle<()> {
    let incoming = accept_stream(listener);
    tokio::spawn(async move {
        let stopped = async move { server::stopped(&mut stop).await };
        if let Err(e) = router.serve_with_incoming_shutdown(incoming, stopped).await {
            tracing::error!("{what} gRPC server failed: {e}");
        }
    })
}

/// Accepted connections, each wrapped in the `:authority` shim.
fn accept_stream(
    listener: UnixListener,
) -> impl Stream<Item = io::Result<AuthorityShim<UnixStream>>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let item = match listener.accept().await {
            Ok((stream, _)) => Ok(AuthorityShim::new(stream)),
            Err(e) => {
                // E.g. EMFILE: tonic retries at once, so do not spin.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(e)
            }
        };
        Some((item, listener))
    })
}
