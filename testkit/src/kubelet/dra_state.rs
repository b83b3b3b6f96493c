//! What the fake kubelet remembers of the DRA drivers registered with it: part of its
//! state (state.rs), filled and read by its DRA side (dra.rs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use edgegpu_kubelet_api::dra_health_v1alpha1::DeviceHealth;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// What the fake kubelet knows about one registered plugin of a DRA driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraPluginInfo {
    /// The endpoint the kubelet calls (`PluginInfo.endpoint`, or the registration socket).
    pub endpoint: PathBuf,
    /// The service the kubelet chose, e.g. `"v1.DRAPlugin"`.
    pub chosen_service: String,
    /// `PluginInfo.supported_versions` as the plugin sent it.
    pub supported_versions: Vec<String>,
    /// The registration socket it came through.
    pub registration_socket: PathBuf,
}

pub(super) struct DraPlugin_ {
    pub(super) info: DraPluginInfo,
    pub(super) channel: Channel,
    pub(super) health: Option<JoinHandle<()>>,
}

impl DraPlugin_ {
    pub(super) fn stop(&mut self) {
        if let Some(task) = self.health.take() {
            task.abort();
        }
    }
}

/// The DRA part of the fake kubelet's state.
#[derive(Default)]
pub(super) struct DraState {
    /// Per driver, its plugins in registration order (the newest is called).
    pub(super) plugins: HashMap<String, Vec<DraPlugin_>>,
    /// Per driver, how often it registered (across restarts).
    pub(super) registrations: HashMap<String, usize>,
    /// Per driver, the last health list received while a stream is open.
    pub(super) health: HashMap<String, Vec<DeviceHealth>>,
}

impl DraState {
    /// A dying kubelet: every plugin and health list is dropped.
    pub(super) fn clear(&mut self) {
        for plugins in self.plugins.values_mut() {
            plugins.iter_mut().for_each(DraPlugin_::stop);
        }
        self.plugins.clear();
        self.health.clear();
    }

    /// DeRegisterPlugin for every plugin registered through `socket`; returns their drivers.
    pub(super) fn deregister_socket(&mut self, socket: &Path) -> Vec<String> {
        let mut gone = Vec::new();
        for (driver, plugins) in self.plugins.iter_mut() {
            plugins.retain_mut(|p| {
                if p.info.registration_socket == socket {
                    p.stop();
                    gone.push(driver.clone());
                    false
                } else {
                    true
                }
            });
        }
        self.plugins.retain(|_, p| !p.is_empty());
        gone
    }
}
