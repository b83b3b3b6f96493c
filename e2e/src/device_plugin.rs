//! The real device plugin binary (dist/) against a testkit fake host root, registered with
//! testkit's in-process fake kubelet; [`PluginRun::allocate`] is the kubelet's Allocate call.

use anyhow::{Context, Result};
use edgegpu_kubelet_api::v1beta1::ContainerAllocateResponse;
use edgegpu_testkit::kubelet::FakeKubelet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const RESOURCE: &str = "nvidia.com/gpu";

pub struct PluginRun {
    pub kubelet: FakeKubelet,
    /// The resource allocated from (`nvidia.com/gpu`, or a MIG profile's under `mixed`).
    pub resource: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl PluginRun {
    /// Starts `binary --root <root> <args>` and waits until it registered `nvidia.com/gpu`.
    pub async fn start(binary: &Path, root: &Path, args: &[&str]) -> Result<PluginRun> {
        Self::start_for(binary, root, args, RESOURCE).await
    }

    /// The same, waiting for (and allocating from) `resource`.
    pub async fn start_for(
        binary: &Path,
        root: &Path,
        args: &[&str],
        resource: &str,
    ) -> Result<PluginRun> {
        let dir = tempfile::tempdir()?;
        let kubelet = FakeKubelet::start(dir.path()).await?;
        let child = Command::new(binary)
            .arg("--root")
            .arg(root)
            .arg("--device-plugin-path")
            .arg(dir.path())
            .args(args)
            .env("NO_COLOR", "1")
            // No device-kind locks in /run: several e2e pods' plugins run at once.
            .env(edgegpu_testkit::process::OWNERSHIP_DIR_ENV, "")
            .stdout(Stdio::null())
            .stderr(if crate::verbose() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .context("start the device plugin")?;
        let run = PluginRun {
            kubelet,
            resource: resource.to_string(),
            child,
            _dir: dir,
        };
        run.kubelet
            .wait_for_registration(resource, Duration::from_secs(30))
            .await
            .context("the plugin registers")?;
        run.kubelet
            .wait_until("devices advertised", Duration::from_secs(30), |k| {
                !k.devices(resource).is_empty()
            })
            .await
            .context("the plugin advertises devices")?;
        Ok(run)
    }

    pub fn device_ids(&self) -> Vec<String> {
        self.kubelet
            .devices(&self.resource)
            .into_iter()
            .map(|d| d.id)
            .collect()
    }

    pub async fn allocate(&self, ids: &[&str]) -> Result<ContainerAllocateResponse> {
        Ok(self.kubelet.allocate(&self.resource, ids).await?)
    }
}

impl Drop for PluginRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
