//! Command line of `edgegpu-device-plugin`. Every flag has an environment variable;
//! precedence is flag > environment > default.

use std::path::PathBuf;

use clap::Parser;
use edgegpu_kubelet_api::podresources::POD_RESOURCES_SOCKET;
use edgegpu_kubelet_api::v1beta1::{DEVICE_PLUGIN_PATH, KUBELET_SOCKET_NAME};

use crate::kubelet::lifecycle::LifecycleOptions;
use edgegpu_node::config::GpuArgs;
use edgegpu_node::labels::feature_file;
use edgegpu_node::logging::LogFormat;

/// `--version` text: version, git commit and target triple.
pub const VERSION: &str = env!("EDGEGPU_LONG_VERSION");

/// Kubelet device plugin advertising NVIDIA GPUs (Jetson/Tegra and discrete GPUs).
///
/// Serves the kubelet's device-plugin API v1beta1 on a uniquely named socket in the
/// device-plugin directory, registers with the kubelet, and re-registers by itself after
/// every kubelet restart (inotify on the directory). See docs/device-plugin.md.
#[derive(Debug, Clone, Parser)]
#[command(name = "edgegpu-device-plugin", version = VERSION, max_term_width = 100)]
pub struct Cli {
    /// The kubelet's device-plugin directory; the plugin creates its socket here.
    #[arg(
        long,
        env = "DEVICE_PLUGIN_PATH",
        value_name = "DIR",
        default_value = DEVICE_PLUGIN_PATH
    )]
    pub device_plugin_path: PathBuf,

    /// The kubelet's registration socket [default: DIR/kubelet.sock, DIR being
    /// --device-plugin-path].
    #[arg(long, env = "KUBELET_SOCKET", value_name = "PATH")]
    pub kubelet_socket: Option<PathBuf>,

    /// Register through the kubelet's plugin watcher in this directory (usually
    /// /var/lib/kubelet/plugins_registry) instead of calling Register on kubelet.sock.
    #[arg(long, env = "PLUGINS_REGISTRY", value_name = "DIR")]
    pub plugins_registry: Option<PathBuf>,

    /// Extended resource name advertised to the kubelet.
    #[arg(
        long,
        env = "RESOURCE_NAME",
        value_name = "NAME",
        default_value = "nvidia.com/gpu"
    )]
    pub resource_name: String,

    /// Host root prefix for every host file the plugin reads (device nodes, /proc, /sys,
    /// driver libraries); a container that mounts the host at /host sets --root /host.
    #[arg(long, env = "HOST_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// Log output format (EDGEGPU_LOG sets the level, default info). Text is coloured only
    /// when stderr is a terminal, never with NO_COLOR set to a non-empty value.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Serve Prometheus metrics (GET /metrics) on HOST:PORT or [IPv6]:PORT; `:PORT` listens on
    /// every address, IPv6 and IPv4 (one dual-stack socket; IPv4 only on a host without IPv6),
    /// as the manifests' :9400 (dcgm-exporter's port) does. Empty: no metrics endpoint. See
    /// docs/metrics.md.
    #[arg(
        long,
        env = "METRICS_BIND_ADDRESS",
        value_name = "HOST:PORT",
        default_value = ""
    )]
    pub metrics_bind_address: String,

    /// The kubelet's pod-resources socket: which pod holds which GPU, for the metrics' pod,
    /// namespace and container labels. Empty: metrics without pod labels.
    #[arg(
        long,
        env = "POD_RESOURCES_SOCKET",
        value_name = "PATH",
        default_value = POD_RESOURCES_SOCKET
    )]
    pub pod_resources_socket: String,

    /// Write the node's GPU labels (GPU Feature Discovery's nvidia.com/ keys and edgegpu.io/
    /// keys) to this Node Feature Discovery local feature file at start; skipped when its
    /// directory does not exist (NFD not installed). Empty: never. See docs/labels.md.
    #[arg(
        long,
        env = "FEATURE_FILE",
        value_name = "PATH",
        default_value = feature_file::DEFAULT_PATH
    )]
    pub feature_file: String,

    /// The node's name, for the metrics' Hostname label (the DaemonSet passes it from the
    /// downward API) [default: the kernel's host name].
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,

    /// Where the per-kind locks live that keep this plugin and the DRA driver
    /// (edgegpu-dra-driver) from both serving a node's GPUs: a directory both see, on a tmpfs.
    /// A kind locked by the other program is not advertised until it stops. Empty: no locks
    /// (only where no DRA driver can run). See docs/dra.md.
    #[arg(
        long,
        env = "OWNERSHIP_DIR",
        value_name = "DIR",
        default_value = edgegpu_node::ownership::DEFAULT_DIR
    )]
    pub ownership_dir: String,

    /// GPU discovery, allocation and sharing settings.
    #[command(flatten)]
    pub gpu: GpuArgs,

    /// Run as another program than the device plugin.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The companion programs the plugin binary also is.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Run the MPS control daemons the device plugin asks for (`<mps-root>/desired/daemons.json`):
    /// start the host's `nvidia-cuda-mps-control -f` for each MPS-shared resource with its
    /// default limits, restart it when it dies, stop it on SIGTERM, and report each in
    /// `<mps-root>/<resource>/status.json`. Runs beside the plugin (the Helm chart's
    /// `mps.enabled` adds it as a privileged container; docs/sharing.md). Needs the GPU's
    /// device nodes, the host's driver files (it chroots into --root) and the host's PID
    /// namespace.
    MpsControlDaemon(MpsDaemonArgs),
}

/// `mps-control-daemon` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct MpsDaemonArgs {
    /// The host's root: the companion chroots into it (unless --chroot=false), so the host's
    /// nvidia-cuda-mps-control runs with the host's driver libraries.
    #[arg(long, env = "HOST_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// Where the plugin's desired/daemons.json and each resource's pipe, log and shared
    /// memory directories and status.json live (a host path, the same in every container).
    #[arg(long, env = "MPS_ROOT", value_name = "DIR", default_value = edgegpu_node::config::DEFAULT_MPS_ROOT)]
    pub mps_root: PathBuf,

    /// nvidia-cuda-mps-control as a host path [default: the first found in /usr/bin,
    /// /usr/sbin, /usr/local/nvidia/bin, /usr/local/cuda/bin, /bin].
    #[arg(long, env = "MPS_CONTROL_BINARY", value_name = "PATH")]
    pub mps_control_binary: Option<PathBuf>,

    /// chroot into --root before starting anything. [default: true unless --root is /]
    #[arg(long, env = "MPS_CHROOT", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL")]
    pub chroot: Option<bool>,

    /// Give each resource's daemon <mps-root>/<resource>/shm as its /dev/shm, in a private
    /// mount namespace: its client containers get the same directory as /dev/shm, and no
    /// one the host's or another resource's. Needs CAP_SYS_ADMIN. [default: true]
    #[arg(long, env = "MPS_PRIVATE_SHM", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL")]
    pub mps_private_shm: Option<bool>,

    /// Log output format (EDGEGPU_LOG sets the level, default info). Text is coloured only
    /// when stderr is a terminal, never with NO_COLOR set to a non-empty value.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl MpsDaemonArgs {
    /// Whether each daemon gets its resource's `shm/` as `/dev/shm`.
    pub fn private_shm(&self) -> bool {
        self.mps_private_shm.unwrap_or(true)
    }

    /// Whether to chroot into --root.
    pub fn chroot(&self) -> bool {
        self.chroot
            .unwrap_or(self.root != std::path::Path::new("/"))
    }

    /// The root the companion sees the host under once [`edgegpu_node::mps::daemon::isolate`] ran.
    pub fn effective_root(&self) -> PathBuf {
        if self.chroot() {
            PathBuf::from("/")
        } else {
            self.root.clone()
        }
    }
}

impl Cli {
    /// The kubelet socket, defaulting to `<device-plugin-path>/kubelet.sock`.
    pub fn kubelet_socket(&self) -> PathBuf {
        self.kubelet_socket
            .clone()
            .unwrap_or_else(|| self.device_plugin_path.join(KUBELET_SOCKET_NAME))
    }

    /// `--metrics-bind-address`, parsed; `None` when empty.
    pub fn metrics_address(&self) -> anyhow::Result<Option<crate::metrics::server::BindAddress>> {
        if self.metrics_bind_address.trim().is_empty() {
            return Ok(None);
        }
        crate::metrics::server::parse_bind_address(&self.metrics_bind_address).map(Some)
    }

    /// `--ownership-dir`; `None` when empty.
    pub fn ownership_dir(&self) -> Option<PathBuf> {
        (!self.ownership_dir.is_empty()).then(|| PathBuf::from(&self.ownership_dir))
    }

    /// `--pod-resources-socket`; `None` when empty.
    pub fn pod_resources_socket(&self) -> Option<PathBuf> {
        (!self.pod_resources_socket.is_empty()).then(|| PathBuf::from(&self.pod_resources_socket))
    }

    /// `--feature-file`; `None` when empty.
    pub fn feature_file(&self) -> Option<&std::path::Path> {
        (!self.feature_file.is_empty()).then_some(std::path::Path::new(&self.feature_file))
    }

    /// `--node-name`, else the kernel's host name.
    pub fn node_name(&self) -> String {
        self.node_name
            .clone()
            .filter(|n| !n.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into())
    }

    /// The lifecycle settings these flags describe.
    pub fn lifecycle_options(&self) -> LifecycleOptions {
        LifecycleOptions {
            device_plugin_dir: self.device_plugin_path.clone(),
            kubelet_socket: self.kubelet_socket(),
            plugins_registry: self.plugins_registry.clone(),
            socket_prefix: None,
            stats: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn kubelet_socket_defaults_into_the_plugin_dir() {
        let cli = Cli::try_parse_from(["x", "--device-plugin-path", "/tmp/dp"]).unwrap();
        assert_eq!(cli.kubelet_socket(), PathBuf::from("/tmp/dp/kubelet.sock"));
        let cli = Cli::try_parse_from(["x", "--kubelet-socket", "/run/k.sock"]).unwrap();
        assert_eq!(cli.kubelet_socket(), PathBuf::from("/run/k.sock"));
        assert_eq!(cli.resource_name, "nvidia.com/gpu");
        assert_eq!(cli.root, PathBuf::from("/"));
    }

    #[test]
    fn telemetry_flags_default_and_turn_off() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.metrics_address().unwrap(), None);
        assert_eq!(
            cli.pod_resources_socket(),
            Some(PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"))
        );
        assert_eq!(
            cli.feature_file(),
            Some(std::path::Path::new(
                "/etc/kubernetes/node-feature-discovery/features.d/edgegpu"
            ))
        );
        let cli = Cli::try_parse_from([
            "x",
            "--metrics-bind-address=:9400",
            "--pod-resources-socket=",
            "--feature-file=",
            "--node-name=n1",
        ])
        .unwrap();
        assert_eq!(
            cli.metrics_address().unwrap(),
            Some(crate::metrics::server::BindAddress::AnyAddress(9400))
        );
        assert_eq!(cli.pod_resources_socket(), None);
        assert_eq!(cli.feature_file(), None);
        assert_eq!(cli.node_name(), "n1");
        let cli = Cli::try_parse_from(["x", "--metrics-bind-address", "nowhere"]).unwrap();
        assert!(cli.metrics_address().is_err());
    }

    #[test]
    fn bad_log_format_is_refused() {
        let err = Cli::try_parse_from(["x", "--log-format", "xml"]).unwrap_err();
        assert!(err.to_string().contains("xml"), "{err}");
    }
}
