//! The command line of `edgegpu-dra-driver`.

use std::path::PathBuf;

use clap::Parser;
use edgegpu_plugin::logging::LogFormat;

/// The `--version` line: version, commit and target.
pub const VERSION: &str = env!("EDGEGPU_LONG_VERSION");

/// A Kubernetes Dynamic Resource Allocation driver (resource.k8s.io/v1, Kubernetes 1.34+) for
/// this node's NVIDIA devices: a Jetson's GPU, DLA cores and PVA, discrete GPUs and MIG devices.
/// It publishes them as ResourceSlices, registers with the kubelet through its plugin watcher
/// and, when a pod's ResourceClaim is allocated here, writes a CDI spec for the claim and
/// hands its device IDs to the kubelet. See docs/dra.md.
#[derive(Debug, Parser)]
#[command(name = "edgegpu-dra-driver", version = VERSION)]
pub struct Cli {
    /// This node's name (the downward API's spec.nodeName): the pool name and owner of the
    /// published ResourceSlices.
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: String,

    /// Host root prefix for every host file read (as the device plugin's --root).
    #[arg(long, env = "HOST_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// The API server [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT].
    #[arg(long, env = "API_SERVER", value_name = "URL")]
    pub api_server: Option<String>,

    /// The bearer token.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub token_file: PathBuf,

    /// The CA bundle (PEM) the API server's certificate chains to.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    pub ca_file: PathBuf,

    /// The kubelet's plugin-watcher directory, where the registration socket
    /// `edgegpu.io-reg.sock` is created.
    #[arg(
        long,
        env = "KUBELET_REGISTRY_DIR",
        value_name = "DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    pub kubelet_registry_dir: PathBuf,

    /// The kubelet's plugins directory: the DRA socket is `<DIR>/edgegpu.io/dra.sock` and the
    /// checkpoint `<DIR>/edgegpu.io/checkpoint.json`. The same path must be used inside and
    /// outside the container.
    #[arg(
        long,
        env = "KUBELET_PLUGINS_DIR",
        value_name = "DIR",
        default_value = "/var/lib/kubelet/plugins"
    )]
    pub kubelet_plugins_dir: PathBuf,

    /// Where the per-claim CDI specs are written (a directory the container runtime reads CDI
    /// specs from; /var/run/cdi is in containerd's and CRI-O's default list).
    #[arg(
        long,
        env = "CDI_DIR",
        value_name = "DIR",
        default_value = "/var/run/cdi"
    )]
    pub cdi_dir: PathBuf,

    /// Log output format (EDGEGPU_LOG sets the level, default info). Text is coloured only
    /// when stderr is a terminal, never with NO_COLOR set to a non-empty value.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}
