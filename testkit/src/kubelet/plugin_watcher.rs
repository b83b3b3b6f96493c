//! The plugin-watcher registration path: scanning `plugins_registry` for sockets, `GetInfo`,
//! registering the plugin and `NotifyRegistrationStatus`; deregistration when a socket goes.
//! A socket deleted and created again (another inode at the same path) is deregistered and
//! registered again, as the kubelet's reconciler does when the socket's timestamp changes
//! (kubernetes `pkg/kubelet/pluginmanager/reconciler/reconciler.go`). `DevicePlugin`
//! sockets go to the device manager's path (`dial.rs`), `DRAPlugin` ones to `dra.rs`.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use edgegpu_kubelet_api::pluginregistration::registration_client::RegistrationClient as WatcherClient;
use edgegpu_kubelet_api::pluginregistration::{
    InfoRequest, RegistrationStatus, DEVICE_PLUGIN_TYPE, DRA_PLUGIN_TYPE,
};
use edgegpu_kubelet_api::v1beta1::VERSION;
use tokio::task::JoinHandle;

use super::dial::{connect_endpoint, dial_plugin, Registered, DIAL_TIMEOUT};
use super::names::is_extended_resource_name;
use super::state::Shared;

/// How often the fake's plugin watcher rescans `plugins_registry` (the real one uses
/// fsnotify; polling is good enough for a test double and adds no dependency).
const WATCHER_SCAN: Duration = Duration::from_millis(20);
/// gRPC's first reconnection backoff (grpc-go backoff.DefaultConfig: BaseDelay 1 s).
const DIAL_BACKOFF: Duration = Duration::from_secs(1);

/// The plugin-watcher side: scans `registry` for new and removed sockets.
pub(super) async fn run_plugin_watcher(shared: Arc<Shared>, registry: PathBuf, epoch: u64) {
    if let Err(e) = std::fs::create_dir_all(&registry) {
        shared.log(format!(
            "plugin watcher: cannot create {}: {e}",
            registry.display()
        ));
    }
    // Socket path → (inode, registration task).
    let mut known: HashMap<PathBuf, (u64, JoinHandle<()>)> = HashMap::new();
    loop {
        let mut present: HashMap<PathBuf, u64> = HashMap::new();
        if let Ok(entries) = std::fs::read_dir(&registry) {
            for entry in entries.flatten() {
                // The kubelet ignores names starting with '.' (plugin_watcher.go).
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                if let Ok(meta) = std::fs::symlink_metadata(entry.path()) {
                    if meta.file_type().is_socket() {
                        present.insert(entry.path(), meta.ino());
                    }
                }
            }
        }
        let gone: Vec<PathBuf> = known
            .iter()
            .filter(|(p, (ino, _))| present.get(*p) != Some(ino))
            .map(|(p, _)| p.clone())
            .collect();
        for path in gone {
            if let Some((_, task)) = known.remove(&path) {
                task.abort();
            }
            // DeRegisterPlugin: the device manager disconnects the resource's client.
            let deregistered = shared.update(|s| {
                let mut names = Vec::new();
                for (name, ep) in s.resources.iter_mut() {
                    if ep.watcher_socket.as_deref() == Some(path.as_path()) && !ep.info.stopped {
                        ep.info.stopped = true;
                        ep.client = None;
                        if let Some(l) = ep.lister.take() {
                            l.abort();
                        }
                        names.push(name.clone());
                    }
                }
                // The DRA plugin manager drops the plugin of that socket.
                names.extend(s.dra.deregister_socket(&path));
                names
            });
            for name in deregistered {
                shared.log(format!(
                    "plugin watcher: {} removed, deregistered {name}",
                    path.display()
                ));
            }
        }
        for (path, ino) in &present {
            if !known.contains_key(path) {
                let task = tokio::spawn(register_through_watcher(
                    shared.clone(),
                    path.clone(),
                    epoch,
                ));
                known.insert(path.clone(), (*ino, task));
            }
        }
        tokio::time::sleep(WATCHER_SCAN).await;
    }
}

async fn register_through_watcher(shared: Arc<Shared>, socket: PathBuf, epoch: u64) {
    let old = shared.opts.old_kubelet_authority;
    // A socket found between the plugin's bind() and listen() refuses the dial. The
    // kubelet dials with gRPC's blocking dial, which retries a refused connection (gRPC's
    // connection backoff: 1 s first) until the dial timeout ends, so this dials again too.
    let deadline = tokio::time::Instant::now() + DIAL_TIMEOUT;
    let channel = loop {
        match dial_plugin(&socket, old, DIAL_TIMEOUT).await {
            Ok(c) => break c,
            Err(e) if tokio::time::Instant::now() + DIAL_BACKOFF < deadline => {
                shared.log(format!(
                    "plugin watcher: dialing {} again: {e:#}",
                    socket.display()
                ));
                tokio::time::sleep(DIAL_BACKOFF).await;
            }
            Err(e) => {
                shared.log(format!(
                    "plugin watcher: cannot dial {}: {e:#}",
                    socket.display()
                ));
                return;
            }
        }
    };
    let mut client = WatcherClient::new(channel);
    let timeout = shared.opts.get_info_timeout;
    let info = match tokio::time::timeout(timeout, client.get_info(InfoRequest {})).await {
        Ok(Ok(info)) => info.into_inner(),
        Ok(Err(status)) => {
            shared.log(format!(
                "plugin watcher: GetInfo failed: {}",
                status.message()
            ));
            return;
        }
        Err(_) => {
            shared.log("plugin watcher: GetInfo timed out".to_string());
            return;
        }
    };
    shared.log(format!(
        "plugin watcher: {} is a {} plugin named {} (endpoint {:?}, versions {:?})",
        socket.display(),
        info.r#type,
        info.name,
        info.endpoint,
        info.supported_versions
    ));
    let result = if info.r#type == DRA_PLUGIN_TYPE {
        super::dra::register(&shared, epoch, &socket, &info)
    } else if info.r#type != DEVICE_PLUGIN_TYPE {
        Err(format!("unsupported plugin type {:?}", info.r#type))
    } else if !info.supported_versions.iter().any(|v| v == VERSION) {
        Err(format!(
            "none of the versions {:?} is supported by the device manager",
            info.supported_versions
        ))
    } else if !is_extended_resource_name(&info.name) {
        Err(format!("the ResourceName {:?} is invalid", info.name))
    } else {
        let endpoint = if info.endpoint.is_empty() {
            socket.clone()
        } else {
            PathBuf::from(&info.endpoint)
        };
        let registered = Registered {
            resource: &info.name,
            endpoint,
            register_options: None,
            watcher_socket: Some(socket.clone()),
        };
        connect_endpoint(&shared, epoch, registered).await
    };
    let status = match &result {
        Ok(()) => RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        },
        Err(e) => {
            shared.log(format!(
                "plugin watcher: registration of {} failed: {e}",
                info.name
            ));
            RegistrationStatus {
                plugin_registered: false,
                error: e.clone(),
            }
        }
    };
    if let Err(e) = client.notify_registration_status(status).await {
        shared.log(format!(
            "plugin watcher: NotifyRegistrationStatus failed: {}",
            e.message()
        ));
    }
}
