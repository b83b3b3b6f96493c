//! Helpers for the GPU-side integration tests: the real plugin (CLI parsing,
//! `build_gpu_resource`, `serve`) running in-process against a fake host root and the fake
//! kubelet from the testkit.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use edgegpu_kubelet_api::v1beta1::{ContainerAllocateResponse, Device, HEALTHY};
use edgegpu_plugin::kubelet::stats::KubeletStats;
use edgegpu_plugin::{build_gpu_resource, GpuResource};
use edgegpu_plugin::{serve, Cli};
use edgegpu_testkit::kubelet::FakeKubelet;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Generous "eventually" timeout (tests also run under qemu-user).
pub const WAIT: Duration = Duration::from_secs(30);

/// The plugin serving a fake host root, registered with a fake kubelet.
pub struct Plugin {
    pub kubelet: FakeKubelet,
    pub resource: Arc<GpuResource>,
    pub name: String,
    /// The lifecycle's registration counters.
    pub stats: Arc<KubeletStats>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    _dir: TempDir,
}

/// Parses `args` like the binary does (plus `--root` and a temporary plugin directory).
pub fn cli(root: &Path, dir: &Path, args: &[&str]) -> Cli {
    let mut argv = vec![
        "edgegpu-device-plugin".to_string(),
        "--root".into(),
        root.display().to_string(),
        "--device-plugin-path".into(),
        dir.display().to_string(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    Cli::try_parse_from(argv).expect("valid command line")
}

/// A `version: v1` config file sharing `nvidia.com/gpu` as `replicas` time-slices, and the
/// `--config=` flag naming it (the file lives as long as the returned handle).
pub fn time_slicing_config(replicas: u32) -> (tempfile::NamedTempFile, String) {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"),
    )
    .unwrap();
    let flag = format!("--config={}", config.path().display());
    (config, flag)
}

/// Builds the resource for `root` with `args` (no kubelet).
pub async fn resource(root: &Path, args: &[&str]) -> anyhow::Result<Arc<GpuResource>> {
    let dir = tempfile::tempdir()?;
    let cli = cli(root, dir.path(), args);
    build_gpu_resource(&cli.root, &cli.resource_name, &cli.gpu).await
}

impl Plugin {
    /// Starts the fake kubelet and the plugin; returns once the resource is registered.
    pub async fn start(root: &Path, args: &[&str]) -> Plugin {
        let dir = tempfile::Builder::new().prefix("dp-").tempdir().unwrap();
        let kubelet = FakeKubelet::start(dir.path()).await.expect("fake kubelet");
        let cli = cli(root, dir.path(), args);
        let resource = build_gpu_resource(&cli.root, &cli.resource_name, &cli.gpu)
            .await
            .expect("GPU resource");
        let name = resource.name().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let options = cli.lifecycle_options();
        let stats = options.stats.clone();
        let task = tokio::spawn(serve(resource.clone(), options, async move {
            let _ = stopped.await;
        }));
        kubelet
            .wait_for_registration(&name, WAIT)
            .await
            .expect("registration");
        Plugin {
            kubelet,
            resource,
            name,
            stats,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    /// The device list the kubelet has now.
    pub fn devices(&self) -> Vec<Device> {
        self.kubelet.devices(&self.name)
    }

    /// Waits until the kubelet's list satisfies `pred`.
    pub async fn wait_devices(&self, what: &str, pred: impl Fn(&[Device]) -> bool) {
        let name = self.name.clone();
        self.kubelet
            .wait_until(what, WAIT, |k| pred(&k.devices(&name)))
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Waits until device `id` has health `health` in the kubelet's view.
    pub async fn wait_health(&self, id: &str, health: &str) {
        self.wait_devices(&format!("{id} {health}"), |d| {
            d.iter().any(|x| x.id == id && x.health == health)
        })
        .await;
    }

    pub async fn allocate(&self, ids: &[&str]) -> Result<ContainerAllocateResponse, tonic::Status> {
        self.kubelet.allocate(&self.name, ids).await
    }

    /// Stops the plugin and checks that it shut down cleanly.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task
            .take()
            .unwrap()
            .await
            .expect("join")
            .expect("clean shutdown");
    }
}

/// IDs of devices that are Healthy.
pub fn healthy_ids(devices: &[Device]) -> Vec<String> {
    devices
        .iter()
        .filter(|d| d.health == HEALTHY)
        .map(|d| d.id.clone())
        .collect()
}

pub fn ids(devices: &[Device]) -> Vec<String> {
    devices.iter().map(|d| d.id.clone()).collect()
}

/// The DeviceSpecs of a response as host paths, sorted.
pub fn spec_paths(r: &ContainerAllocateResponse) -> Vec<String> {
    let mut v: Vec<String> = r.devices.iter().map(|d| d.host_path.clone()).collect();
    v.sort();
    v
}
