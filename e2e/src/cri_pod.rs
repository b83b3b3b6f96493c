//! A CRI client (runtime.v1 over containerd's socket) that runs one pod the way the kubelet
//! does: RunPodSandbox (host network, so no CNI runs), CreateContainer with the device
//! plugin's converted options, StartContainer, wait for the exit, read the CRI log file
//! (`<timestamp> <stream> <tag> <message>` lines) and remove the sandbox.

use crate::containerd_instance::Containerd;
use crate::kubelet_conversion::DeviceOptions;
use anyhow::{ensure, Context, Result};
use edgegpu_kubelet_api::cri::{self, runtime_service_client::RuntimeServiceClient};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

pub type Client = RuntimeServiceClient<Channel>;

/// Connects to a containerd's CRI socket.
pub async fn connect(socket: &Path) -> Result<Client> {
    let socket = socket.to_path_buf();
    let channel = Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .context("connect to containerd's CRI")?;
    Ok(RuntimeServiceClient::new(channel))
}

/// What one container did.
pub struct Outcome {
    pub exit_code: i32,
    /// The messages of the CRI log lines, one per line.
    pub log: String,
}

/// Runs `image` in a fresh host-network pod named `name` on `node` with `options`; returns its
/// outcome.
pub async fn run_pod(
    client: &mut Client,
    node: &Containerd,
    name: &str,
    image: &str,
    options: &DeviceOptions,
) -> Result<Outcome> {
    run_pod_with_args(client, node, name, image, &[], options).await
}

/// [`run_pod`] with `args` for the image's entrypoint (a pod spec's `args`).
pub async fn run_pod_with_args(
    client: &mut Client,
    node: &Containerd,
    name: &str,
    image: &str,
    args: &[&str],
    options: &DeviceOptions,
) -> Result<Outcome> {
    let log_dir: PathBuf = node.log_dir().join(name);
    std::fs::create_dir_all(&log_dir)?;
    let host_ns = cri::NamespaceOption {
        network: cri::NamespaceMode::Node as i32,
        pid: cri::NamespaceMode::Container as i32,
        ipc: cri::NamespaceMode::Pod as i32,
        ..Default::default()
    };
    let pod_config = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        // No hostname: a host-network pod shares the node's UTS namespace (runc refuses to set
        // one there); the kubelet leaves it to the node's too.
        log_directory: log_dir.display().to_string(),
        linux: Some(cri::LinuxPodSandboxConfig {
            // The kubelet's pod cgroup, here one per containerd instance (removed with it).
            cgroup_parent: node.cgroup_parent(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(host_ns),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox = client
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(pod_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .context("RunPodSandbox")?
        .into_inner()
        .pod_sandbox_id;
    let result = run_container(client, &sandbox, &pod_config, image, args, options).await;
    let _ = client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: sandbox.clone(),
        })
        .await;
    let _ = client
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: sandbox,
        })
        .await;
    let (exit_code, log_path) = result?;
    let raw = std::fs::read_to_string(&log_path)
        .with_context(|| format!("read {}", log_path.display()))?;
    let log = raw
        .lines()
        .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Outcome { exit_code, log })
}

async fn run_container(
    client: &mut Client,
    sandbox: &str,
    pod_config: &cri::PodSandboxConfig,
    image: &str,
    args: &[&str],
    o: &DeviceOptions,
) -> Result<(i32, PathBuf)> {
    let config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "probe".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        args: args.iter().map(|a| a.to_string()).collect(),
        envs: o.envs.clone(),
        mounts: o.mounts.clone(),
        devices: o.devices.clone(),
        annotations: o.annotations.clone().into_iter().collect(),
        cdi_devices: o.cdi_devices.clone(),
        log_path: "probe/0.log".into(),
        ..Default::default()
    };
    let id = client
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(config),
            sandbox_config: Some(pod_config.clone()),
        })
        .await
        .context("CreateContainer")?
        .into_inner()
        .container_id;
    client
        .start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .context("StartContainer")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = client
            .container_status(cri::ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status
            .context("no status")?;
        if status.state == cri::ContainerState::ContainerExited as i32 {
            return Ok((status.exit_code, PathBuf::from(status.log_path)));
        }
        ensure!(
            Instant::now() < deadline,
            "container still running after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
