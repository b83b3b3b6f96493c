//! Shared helpers for the plugin's integration tests: a small test [`Resource`] whose
//! devices are set through a `watch::Sender`, and a running plugin handle.
#![allow(dead_code, clippy::result_large_err)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use edgegpu_kubelet_api::v1beta1::{
    ContainerAllocateRequest, ContainerAllocateResponse, ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, HEALTHY, UNHEALTHY,
};
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::{serve, LifecycleOptions};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Generous "eventually" timeout (tests also run under qemu-user).
pub const WAIT: Duration = Duration::from_secs(30);

pub fn device(id: &str, healthy: bool) -> Device {
    Device {
        id: id.to_string(),
        health: if healthy { HEALTHY } else { UNHEALTHY }.to_string(),
        topology: None,
    }
}

/// A resource with settable devices. `allocate` answers `TEST_VISIBLE=<ids>` and
/// refuses unknown IDs; `preferred_allocation` picks the last `size` available IDs (so
/// the tests can tell it apart from the kubelet's own first-free choice).
pub struct TestResource {
    pub name: String,
    pub options: DevicePluginOptions,
    pub devices: watch::Sender<Vec<Device>>,
}

impl TestResource {
    pub fn new(name: &str, devices: Vec<Device>) -> Arc<TestResource> {
        Self::with_options(
            name,
            devices,
            DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            },
        )
    }

    pub fn with_options(
        name: &str,
        devices: Vec<Device>,
        options: DevicePluginOptions,
    ) -> Arc<TestResource> {
        let (tx, _) = watch::channel(devices);
        Arc::new(TestResource {
            name: name.to_string(),
            options,
            devices: tx,
        })
    }
}

impl Resource for TestResource {
    fn resource_name(&self) -> &str {
        &self.name
    }

    fn options(&self) -> DevicePluginOptions {
        self.options
    }

    fn devices(&self) -> watch::Receiver<Vec<Device>> {
        self.devices.subscribe()
    }

    fn allocate(
        &self,
        request: &ContainerAllocateRequest,
    ) -> Result<ContainerAllocateResponse, tonic::Status> {
        let known = self.devices.borrow();
        for id in &request.devices_ids {
            if !known.iter().any(|d| &d.id == id) {
                return Err(tonic::Status::invalid_argument(format!(
                    "unknown device {id:?}"
                )));
            }
        }
        let mut response = ContainerAllocateResponse::default();
        response
            .envs
            .insert("TEST_VISIBLE".to_string(), request.devices_ids.join(","));
        Ok(response)
    }

    fn preferred_allocation(
        &self,
        request: &ContainerPreferredAllocationRequest,
    ) -> Result<ContainerPreferredAllocationResponse, tonic::Status> {
        let size = usize::try_from(request.allocation_size)
            .map_err(|_| tonic::Status::invalid_argument("negative allocation_size"))?;
        let available = &request.available_device_i_ds;
        let start = available.len().saturating_sub(size);
        Ok(ContainerPreferredAllocationResponse {
            device_i_ds: available[start..].to_vec(),
        })
    }
}

/// The library's lifecycle running in a task of the current runtime.
pub struct RunningPlugin {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl RunningPlugin {
    pub fn start(resource: Arc<dyn Resource>, opts: LifecycleOptions) -> RunningPlugin {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(resource, opts, async move {
            let _ = stopped.await;
        }));
        RunningPlugin {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Requests shutdown and waits for `serve` to return.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.task.take().unwrap())
            .await
            .expect("serve returns after shutdown")
            .expect("serve task did not panic")
    }
}

impl Drop for RunningPlugin {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Sockets (not other files) directly in `dir`, by file name, sorted.
pub fn sockets_in(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::FileTypeExt;
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_socket()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The plugin socket (not kubelet.sock) currently in `dir`, if exactly one.
pub fn plugin_socket(dir: &Path) -> Option<PathBuf> {
    let names: Vec<String> = sockets_in(dir)
        .into_iter()
        .filter(|n| n != "kubelet.sock")
        .collect();
    match names.as_slice() {
        [one] => Some(dir.join(one)),
        _ => None,
    }
}

/// Counts entries of a /proc directory of this process (fds, threads).
pub fn proc_count(what: &str) -> usize {
    std::fs::read_dir(format!("/proc/self/{what}"))
        .unwrap()
        .count()
}
