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
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::{build_gpu_resource, build_gpu_resources, GpuResource};
use edgegpu_plugin::{serve, serve_all, Cli};
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
    serving: Serving,
    _dir: TempDir,
}

/// A running `serve`/`serve_all` task and the way to stop it.
struct Serving {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Serving {
    /// Stops serving and checks that it shut down cleanly.
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("join").expect("clean shutdown");
    }
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
    config_file(&format!("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"))
}

/// A config file holding `yaml`, and the `--config=` flag naming it.
pub fn config_file(yaml: &str) -> (tempfile::NamedTempFile, String) {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), yaml).unwrap();
    let flag = format!("--config={}", config.path().display());
    (config, flag)
}

/// Builds the resource for `root` with `args` (no kubelet).
pub async fn resource(root: &Path, args: &[&str]) -> anyhow::Result<Arc<GpuResource>> {
    let dir = tempfile::tempdir()?;
    let cli = cli(root, dir.path(), args);
    build_gpu_resource(&cli.root, &cli.resource_name, &cli.gpu).await
}

/// Builds every resource for `root` with `args` (no kubelet).
pub async fn resources(root: &Path, args: &[&str]) -> anyhow::Result<Vec<Arc<GpuResource>>> {
    let dir = tempfile::tempdir()?;
    let cli = cli(root, dir.path(), args);
    Ok(build_gpu_resources(&cli.root, &cli.resource_name, &cli.gpu)
        .await?
        .resources)
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
            serving: Serving { stop, task },
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
    pub async fn stop(self) {
        self.serving.stop().await;
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

/// Every resource of a node served to a fake kubelet.
pub struct Node {
    pub kubelet: FakeKubelet,
    pub resources: Vec<Arc<GpuResource>>,
    /// The lifecycles' registration counters.
    pub stats: Arc<KubeletStats>,
    serving: Serving,
    _dir: tempfile::TempDir,
}

impl Node {
    pub async fn start(root: &std::path::Path, args: &[&str]) -> anyhow::Result<Node> {
        let dir = tempfile::Builder::new().prefix("dp-").tempdir()?;
        let kubelet = FakeKubelet::start(dir.path()).await?;
        let cli = cli(root, dir.path(), args);
        let node = build_gpu_resources(&cli.root, &cli.resource_name, &cli.gpu).await?;
        let served: Vec<Arc<dyn Resource>> = node
            .resources
            .iter()
            .map(|r| r.clone() as Arc<dyn Resource>)
            .collect();
        let (stop, stopped) = oneshot::channel::<()>();
        let options = cli.lifecycle_options();
        let stats = options.stats.clone();
        let task = tokio::spawn(serve_all(served, options, async move {
            let _ = stopped.await;
        }));
        for r in &node.resources {
            kubelet.wait_for_registration(r.name(), WAIT).await?;
        }
        Ok(Node {
            kubelet,
            resources: node.resources,
            stats,
            serving: Serving { stop, task },
            _dir: dir,
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.resources
            .iter()
            .map(|r| r.name().to_string())
            .collect()
    }

    pub async fn wait_health(&self, resource: &str, id: &str, health: &str) {
        self.kubelet
            .wait_until(&format!("{resource} {id} {health}"), WAIT, |k| {
                k.devices(resource)
                    .iter()
                    .any(|d| d.id == id && d.health == health)
            })
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    pub async fn stop(self) {
        self.serving.stop().await;
    }
}
