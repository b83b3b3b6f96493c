//! The command line of `edgegpu-dra-driver`.

use std::path::PathBuf;

use clap::Parser;
use edgegpu_apiclient::args::ApiArgs;
use edgegpu_node::config::GpuArgs;
use edgegpu_node::logging::LogFormat;
use edgegpu_node::ownership::DeviceKind;

use crate::kubelet::rolling::PodUid;

/// The `--version` line: version, commit and target.
pub const VERSION: &str = env!("EDGEGPU_LONG_VERSION");

/// A Kubernetes Dynamic Resource Allocation driver (resource.k8s.io v1, v1beta2 or v1beta1:
/// Kubernetes 1.32+) for
/// this node's NVIDIA devices: a Jetson's GPU, DLA cores and PVA, discrete GPUs and MIG devices.
/// It publishes them as ResourceSlices, registers with the kubelet through its plugin watcher
/// and, when a pod's ResourceClaim is allocated here, writes a CDI spec for the claim and
/// hands its device IDs to the kubelet. See docs/dra.md.
#[derive(Debug, Parser)]
#[command(name = "edgegpu-dra-driver", version = VERSION)]
pub struct Cli {
    /// This node's name and the API server (NODE_NAME, --api-server, --token-file,
    /// --ca-file).
    #[command(flatten)]
    pub api: ApiArgs,

    /// Host root prefix for every host file read (as the device plugin's --root).
    #[arg(long, env = "HOST_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// The kubelet's plugin-watcher directory, where the registration socket
    /// `edgegpu.io-reg.sock` is created (with --rolling-update-pod-uid, one named after the
    /// pod).
    #[arg(
        long,
        env = "KUBELET_REGISTRY_DIR",
        value_name = "DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    pub kubelet_registry_dir: PathBuf,

    /// The kubelet's plugins directory: the DRA socket is `<DIR>/edgegpu.io/dra.sock` (with
    /// --rolling-update-pod-uid, one named after the pod) and the checkpoint
    /// `<DIR>/edgegpu.io/checkpoint.json`. The same path must be used inside and outside the
    /// container.
    #[arg(
        long,
        env = "KUBELET_PLUGINS_DIR",
        value_name = "DIR",
        default_value = "/var/lib/kubelet/plugins"
    )]
    pub kubelet_plugins_dir: PathBuf,

    /// This pod's UID (the DaemonSet passes metadata.uid) when the DaemonSet updates with
    /// maxSurge, so that the old and the new pod serve the kubelet side by side: the sockets
    /// become `<driver>-<UID>-reg.sock` and `dra-<UID>.sock`. Needs a kubelet of 1.33 or
    /// newer. Unset: the fixed names `edgegpu.io-reg.sock` and `dra.sock`. See docs/dra.md,
    /// "Rolling updates".
    #[arg(
        long,
        env = "POD_UID",
        value_name = "UID",
        value_parser = PodUid::parse
    )]
    pub rolling_update_pod_uid: Option<PodUid>,

    /// Where the per-claim CDI specs are written (a directory the container runtime reads CDI
    /// specs from; /var/run/cdi is in containerd's and CRI-O's default list).
    #[arg(
        long,
        env = "CDI_DIR",
        value_name = "DIR",
        default_value = "/var/run/cdi"
    )]
    pub cdi_dir: PathBuf,

    /// The kinds of device to publish, comma-separated: `gpu` (GPUs and MIG devices), `dla`
    /// (Jetson DLA cores), `pva` (Jetson PVA). Kinds left out stay free for the device plugin.
    #[arg(
        long,
        env = "DEVICES",
        value_name = "KINDS",
        value_delimiter = ',',
        value_parser = parse_kind,
        default_value = "gpu,dla,pva"
    )]
    pub devices: Vec<DeviceKind>,

    /// Where the per-kind locks live that keep this driver and the device plugin
    /// (edgegpu-device-plugin) from both serving a device kind: a directory both see, on a
    /// tmpfs. A kind the plugin holds is not published until the plugin stops. Empty: no
    /// locks (only where no device plugin can run). See docs/dra.md.
    #[arg(
        long,
        env = "OWNERSHIP_DIR",
        value_name = "DIR",
        default_value = edgegpu_node::ownership::DEFAULT_DIR
    )]
    pub ownership_dir: String,

    /// Ask the node's MPS companion (`edgegpu-device-plugin mps-control-daemon`) for one CUDA
    /// MPS control daemon serving the GPUs this driver publishes, where the platform runs MPS
    /// (Jetson Orin on L4T R36.4+, Thor, discrete GPUs from Volta; no MIG devices): written to
    /// `<--mps-root>/desired/daemons.json` while this driver holds the node's GPUs. Claims
    /// with `sharing.strategy: MPS` join it; they fail to prepare until it is ready. See
    /// docs/dra.md.
    #[arg(long, env = "MPS", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL", default_value = "false")]
    pub mps: bool,

    /// Log output format (EDGEGPU_LOG sets the level, default info). Text is coloured only
    /// when stderr is a terminal, never with NO_COLOR set to a non-empty value.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Share each whole GPU (not in MIG mode) between claims by memory: it is published with
    /// `allowMultipleAllocations` and a consumable `memory` capacity, a claim asks for
    /// `capacity.requests.memory` (rounded up to --memory-share-step), the scheduler counts
    /// what is left, and prepare gives the claim's containers that much as their MPS
    /// memory limit (accounted, not enforced, where MPS does not run). Needs Kubernetes
    /// 1.34+ with the DRAConsumableCapacity feature gate (on by default from 1.36); left out
    /// elsewhere. See docs/dra.md.
    #[arg(long, env = "MEMORY_SHARES")]
    pub memory_shares: bool,

    /// The unit of memory shares (a quantity, at least 1Mi: MPS limits are whole MiB).
    #[arg(
        long,
        env = "MEMORY_SHARE_STEP",
        value_name = "QUANTITY",
        default_value = "256Mi",
        value_parser = parse_step
    )]
    pub memory_share_step: u64,

    /// The device plugin's GPU settings (same flags and environment variables): devices are
    /// discovered as the plugin would discover them, MIG devices published with a MIG
    /// strategy.
    #[command(flatten)]
    pub gpu: GpuArgs,
}

/// A `--devices` entry that names no device kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not a device kind (gpu, dla or pva)")]
pub struct UnknownDeviceKind {
    pub name: String,
}

/// A memory-share step that is not a quantity of at least 1Mi.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a memory share step: {why}")]
pub struct InvalidStep {
    pub text: String,
    pub why: String,
}

fn parse_step(text: &str) -> Result<u64, InvalidStep> {
    let invalid = |why: String| InvalidStep {
        text: text.to_string(),
        why,
    };
    let bytes = edgegpu_node::quantity::parse_bytes(text).map_err(|e| invalid(e.to_string()))?;
    if bytes < 1 << 20 {
        return Err(invalid(
            "at least 1Mi (MPS memory limits are whole MiB)".into(),
        ));
    }
    Ok(bytes)
}

fn parse_kind(name: &str) -> Result<DeviceKind, UnknownDeviceKind> {
    DeviceKind::from_name(name.trim()).ok_or_else(|| UnknownDeviceKind {
        name: name.to_string(),
    })
}

impl Cli {
    /// This driver's directory in the kubelet's plugins directory: `dra.sock`, the checkpoint.
    pub fn plugin_dir(&self) -> PathBuf {
        self.kubelet_plugins_dir.join(crate::DRIVER_NAME)
    }

    /// How GPUs are shared between claims (`--memory-shares`).
    pub fn share_options(&self) -> crate::inventory::ShareOptions {
        crate::inventory::ShareOptions {
            memory_step: self.memory_shares.then_some(self.memory_share_step),
        }
    }

    /// `--ownership-dir`; `None` when empty.
    pub fn ownership_dir(&self) -> Option<PathBuf> {
        (!self.ownership_dir.is_empty()).then(|| PathBuf::from(&self.ownership_dir))
    }

    /// Refuses values that would only fail later: a node name that is not a DNS subdomain
    /// (it is a pool name and part of URLs), no device kind.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.api.check_node_name()?;
        anyhow::ensure!(!self.devices.is_empty(), "--devices names no device kind");
        Ok(())
    }
}
