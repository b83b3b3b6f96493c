//! The fake kubelet's options ([`FakeKubeletOptions`]), what it knows about a registered
//! resource ([`ResourceInfo`]), and the state its registration server, dial-back,
//! `ListAndWatch` consumers and plugin watcher share.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use edgegpu_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use edgegpu_kubelet_api::v1beta1::{Device, DevicePluginOptions, HEALTHY};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// Timeout of the plugin watcher's `GetInfo` call.
pub const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);

/// How the fake kubelet is set up.
#[derive(Debug, Clone)]
pub struct FakeKubeletOptions {
    /// The device-plugin directory (`kubelet.sock` is created here).
    pub device_plugin_dir: PathBuf,
    /// Run the plugin-watcher flow on this directory.
    pub plugins_registry: Option<PathBuf>,
    /// Dial plugins like kubelets before 1.26: the HTTP/2 `:authority` is the socket path.
    pub old_kubelet_authority: bool,
    /// The plugin watcher's `GetInfo` timeout (the kubelet's: 1 s, never retried). A test
    /// of a cold debug binary under qemu-user may need more for the very first RPC.
    pub get_info_timeout: Duration,
    /// Time between creating `kubelet.sock` (bind) and accepting on it (listen). Go's
    /// `net.Listen` does both back to back, but a plugin woken by inotify at bind() can dial
    /// in between and get ECONNREFUSED; a gap makes that reproducible.
    pub listen_delay: Duration,
    /// The DRA services this kubelet supports, most recent first: `v1.DRAPlugin`,
    /// `v1beta1.DRAPlugin` as in 1.34 on; `vec!["v1beta1.DRAPlugin"]` for a 1.32–1.33 kubelet.
    pub dra_services: Vec<String>,
    /// The `ResourceHealthStatus` feature gate: open each DRA plugin's health stream after
    /// registration (and 5 s after it ends). Off by default, as in the kubelet.
    pub resource_health_status: bool,
}

impl FakeKubeletOptions {
    /// A modern kubelet on `device_plugin_dir`, without plugin watcher.
    pub fn new(device_plugin_dir: impl Into<PathBuf>) -> Self {
        FakeKubeletOptions {
            device_plugin_dir: device_plugin_dir.into(),
            plugins_registry: None,
            old_kubelet_authority: false,
            get_info_timeout: GET_INFO_TIMEOUT,
            listen_delay: Duration::ZERO,
            dra_services: kubelet_dra_services(),
            resource_health_status: false,
        }
    }
}

/// What the fake kubelet knows about one registered resource.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// Socket path the kubelet dialed.
    pub endpoint: PathBuf,
    /// Options from `GetDevicePluginOptions`.
    pub options: DevicePluginOptions,
    /// Options the plugin put in `RegisterRequest` (`None` through the plugin watcher).
    /// Modern kubelets ignore them; they must equal [`ResourceInfo::options`].
    pub register_options: Option<DevicePluginOptions>,
    /// The last device list received.
    pub devices: Vec<Device>,
    /// Every device list received from the current endpoint, in order.
    pub history: Vec<Vec<Device>>,
    /// The stream ended (or the kubelet restarted): devices count as unhealthy.
    pub stopped: bool,
    /// How often this resource registered (all endpoints, across restarts).
    pub registrations: usize,
}

impl ResourceInfo {
    /// Healthy devices while the endpoint is live; 0 once it stopped.
    pub fn allocatable(&self) -> usize {
        if self.stopped {
            0
        } else {
            self.devices.iter().filter(|d| d.health == HEALTHY).count()
        }
    }
}

pub(super) struct Endpoint_ {
    pub(super) info: ResourceInfo,
    pub(super) client: Option<DevicePluginClient<Channel>>,
    pub(super) endpoint_id: u64,
    pub(super) lister: Option<JoinHandle<()>>,
    /// Devices handed out by [`FakeKubelet::admit`](super::FakeKubelet::admit).
    pub(super) allocated: Vec<String>,
    /// Registration socket when registered through the plugin watcher.
    pub(super) watcher_socket: Option<PathBuf>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) resources: HashMap<String, Endpoint_>,
    pub(super) events: Vec<String>,
    pub(super) total_registrations: usize,
    pub(super) next_endpoint_id: u64,
    /// Incremented on every start and stop; work started in an older epoch is discarded.
    pub(super) epoch: u64,
    pub(super) running: bool,
    /// When `kubelet.sock` last started accepting.
    pub(super) listening_since: Option<Instant>,
    /// Registered DRA plugins (plugin watcher only).
    pub(super) dra: super::dra_state::DraState,
}

pub(super) struct Shared {
    pub(super) opts: FakeKubeletOptions,
    pub(super) state: Mutex<State>,
    pub(super) changed: watch::Sender<u64>,
}

impl Shared {
    pub(super) fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.state.lock().unwrap());
        self.changed.send_modify(|n| *n += 1);
        r
    }

    pub(super) fn log(&self, line: String) {
        tracing::debug!("fake kubelet: {line}");
        self.update(|s| s.events.push(line));
    }
}

/// The DRA services a 1.34+ kubelet supports, most recent first (`servicesSupportedByKubelet`).
pub fn kubelet_dra_services() -> Vec<String> {
    vec![
        edgegpu_kubelet_api::dra_v1::DRA_PLUGIN_SERVICE.to_string(),
        edgegpu_kubelet_api::dra_v1beta1::DRA_PLUGIN_SERVICE.to_string(),
    ]
}
