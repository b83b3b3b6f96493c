//! Command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::detect::ModeRequest;

/// `--version` text: version, commit and target, set by build-support/version.rs.
const VERSION: &str = env!("EDGEGPU_LONG_VERSION");

const AFTER_HELP: &str = "\
Modes (auto picks one from what is installed under --root and prints why):
  k3s-default-runtime  k3s >= v1.29 registers the nvidia runtime itself; a drop-in
                       /etc/rancher/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml makes it
                       the default, and a RuntimeClass manifest is added on servers that need it.
  containerd           adds the runtime to /etc/containerd/config.toml (system containerd) or to
                       k3s's config-v3.toml.tmpl / config.toml.tmpl, keeping comments and order.
  docker               adds --docker to k3s.service / k3s-agent.service ExecStart and merges
                       runtimes.<name> and default-runtime into /etc/docker/daemon.json.

CDI mode (--cdi; with apply, check): instead of the NVIDIA runtime, the engine injects
GPUs itself from the CDI spec `cdi generate` writes to /var/run/cdi. containerd:
enable_cdi = true in the CRI plugin table (on by default from containerd 2.0, so k3s with
containerd 2 needs nothing; k3s's base template cannot set it for containerd 1.x: refused),
/var/run/cdi kept in cdi_spec_dirs; docker (25+): features.cdi = true (on by default from
28.2), /var/run/cdi kept in cdi-spec-dirs. The default runtime is left alone. Pair it with
the device plugin's --device-list-strategy cdi-cri (or cdi-annotations for containerd).

Decisions come from what the services actually load: units with their drop-ins and
environment files, k3s's command line and config files (K3S_CONFIG_FILE, config.yaml.d),
containerd's imports, dockerd's flags. When something node-setup does not own overrides the
result, apply refuses naming that file, line or flag, and check fails naming it.

Safety: everything is planned before anything is written; files are replaced atomically
(mode, owner and symlinks kept) after a backup under <root>/var/lib/edgegpu/node-setup/;
one run at a time (a lock there); a second apply writes nothing; `revert` restores the
originals.

Exit codes:
  0  success (check: the node is fully configured)
  1  check: the node is not fully configured, or something blocks it (`blocked:`);
     apply/revert --dry-run --exit-code: changes are pending
  2  invalid command line
  3  refused, nothing written: a file cannot be read (not root?) or parsed, missing
     runtime binary, conflicting setting, nothing to configure; check: it cannot tell
     (a file cannot be read or parsed)
  4  failed: a write or a service restart failed

Logs go to stderr: EDGEGPU_LOG=info (a tracing filter; default warn) shows more; colour
only when stderr is a terminal and NO_COLOR is unset or empty.

Typical use on a k3s host:  sudo edgegpu-node-setup apply
See docs/node-setup.md for details.";

#[derive(Debug, Parser)]
#[command(
    name = "edgegpu-node-setup",
    version = VERSION,
    about = "Wires the NVIDIA container runtime into k3s, containerd or docker: safely, idempotently, reversibly",
    after_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Root of the host tree to configure: `/` for this machine, or a mounted image or
    /// test tree. Services are only restarted when this is `/`.
    #[arg(
        long,
        global = true,
        env = "EDGEGPU_ROOT",
        default_value = "/",
        value_name = "DIR"
    )]
    pub root: PathBuf,

    /// Which configuration to write; `auto` picks from what is installed and explains why.
    #[arg(
        long,
        global = true,
        env = "EDGEGPU_NODE_SETUP_MODE",
        value_enum,
        default_value = "auto"
    )]
    pub mode: ModeRequest,

    /// Absolute path of the NVIDIA runtime binary (as seen on the booted host).
    #[arg(
        long,
        global = true,
        env = "EDGEGPU_RUNTIME_PATH",
        default_value = "/usr/bin/nvidia-container-runtime",
        value_name = "PATH"
    )]
    pub runtime_path: String,

    /// Name under which the runtime is registered (containerd runtime, docker runtime,
    /// RuntimeClass handler).
    #[arg(
        long,
        global = true,
        env = "EDGEGPU_RUNTIME_NAME",
        default_value = "nvidia",
        value_name = "NAME"
    )]
    pub runtime_name: String,

    /// Do not restart or reload any service (print the systemctl commands instead).
    #[arg(long, global = true, env = "EDGEGPU_NO_RESTART", value_parser = env_bool)]
    pub no_restart: bool,

    /// Make the runtime the default one (the default).
    #[arg(long, global = true, overrides_with = "no_set_default")]
    pub set_default: bool,

    /// Register the runtime without making it the default (pods then select it with
    /// `runtimeClassName`). [env: EDGEGPU_NO_SET_DEFAULT=1]
    #[arg(long, global = true, overrides_with = "set_default")]
    pub no_set_default: bool,

    /// EDGEGPU_NO_SET_DEFAULT, read apart from `--no-set-default`: clap takes a flag
    /// given by its environment variable and the other flag on the command line for a
    /// conflict (overrides are applied to the command line only), while the command line
    /// must win.
    #[arg(
        long = "no-set-default-from-env",
        global = true,
        hide = true,
        env = "EDGEGPU_NO_SET_DEFAULT",
        value_parser = env_bool
    )]
    pub no_set_default_env: bool,

    /// apply: make the runtime the default even if its binary is missing under --root.
    /// revert: restore originals even if the files changed after apply.
    #[arg(long, global = true, env = "EDGEGPU_FORCE", value_parser = env_bool)]
    pub force: bool,

    /// CDI mode: configure the engine to inject GPUs from CDI specs itself (containerd
    /// enable_cdi, docker features.cdi; /var/run/cdi among the spec dirs) instead of
    /// registering the NVIDIA runtime. The runtime options do not apply; check checks
    /// this state; revert undoes any apply.
    #[arg(long, global = true, env = "EDGEGPU_CDI", value_parser = env_bool)]
    pub cdi: bool,

    /// k3s version to assume instead of reading it from the k3s binary (e.g. v1.30.4+k3s1).
    #[arg(
        long,
        global = true,
        env = "EDGEGPU_K3S_VERSION",
        value_name = "VERSION"
    )]
    pub k3s_version: Option<String>,
}

/// The value of an on/off option's environment variable (`EDGEGPU_FORCE=1`): `1`,
/// `true`, `yes`, `on`, `y`, `t` turn it on and `0`, `false`, `no`, `off`, `n`, `f` or
/// an empty value leave it off (any case; clap's boolish words, plus empty = unset as
/// in shells); anything else is an invalid command line. The flag itself (`--force`)
/// arrives here as `true`.
pub fn env_bool(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" | "off" | "n" | "f" => Ok(false),
        "1" | "true" | "yes" | "on" | "y" | "t" => Ok(true),
        _ => Err(
            "use 1, true, yes or on to turn it on; 0, false, no, off or empty to leave it off"
                .into(),
        ),
    }
}

impl GlobalArgs {
    /// `--set-default` / `--no-set-default` (the last one given), else
    /// EDGEGPU_NO_SET_DEFAULT, else make it the default.
    pub fn set_default(&self) -> bool {
        if self.set_default || self.no_set_default {
            self.set_default
        } else {
            !self.no_set_default_env
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Detect the host, plan every change, write them (with backups), restart what needs it.
    #[command(after_help = AFTER_HELP)]
    Apply {
        /// Print the plan as unified diffs and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// With --dry-run: exit 1 when a file would change, 0 when nothing would (like
        /// `git diff --exit-code`): a drift check.
        #[arg(long, requires = "dry_run")]
        exit_code: bool,
        /// Output format (json: one document on stdout, see docs/node-setup.md).
        #[arg(long, value_enum, default_value = "text", env = "EDGEGPU_OUTPUT")]
        output: OutputFormat,
    },
    /// Report what is configured, what each engine actually uses (and which file, line or
    /// flag decides it), and what is missing; exit 0 only when fully configured.
    #[command(after_help = AFTER_HELP)]
    Check {
        /// Output format.
        #[arg(long, value_enum, default_value = "text", env = "EDGEGPU_OUTPUT")]
        output: OutputFormat,
    },
    /// Restore exactly what apply changed, from its backups, and restart what needs it.
    #[command(after_help = AFTER_HELP)]
    Revert {
        /// Print what would be restored as unified diffs and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// With --dry-run: exit 1 when something would be restored or removed, 0 when
        /// nothing was applied.
        #[arg(long, requires = "dry_run")]
        exit_code: bool,
        /// Output format (json: one document on stdout, see docs/node-setup.md).
        #[arg(long, value_enum, default_value = "text", env = "EDGEGPU_OUTPUT")]
        output: OutputFormat,
    },
    /// Walk the chain a GPU pod depends on and say which link is broken, with the command
    /// that fixes it: board and driver release, device nodes, runtime configuration, CDI
    /// specs, device plugin or DRA driver registration, MPS daemons, labels (--cluster),
    /// power mode. Reads files only (no network unless --cluster); root sees more.
    #[command(after_help = DOCTOR_AFTER_HELP)]
    Doctor(DoctorArgs),
    /// Container Device Interface (CDI) specs for the GPUs of this host.
    Cdi {
        #[command(subcommand)]
        command: CdiCommand,
    },
}

const DOCTOR_AFTER_HELP: &str = "\
Links, in order (each checked whatever the others found):
  platform      the Jetson (generation, L4T release, known to this edgegpu?) or the NVIDIA driver
  device-nodes  the GPU's device nodes, as `cdi generate` finds them
  runtime       what `check` decides: k3s, containerd or docker will use the nvidia runtime (or CDI)
  cdi-spec      CDI specs in /etc/cdi and /var/run/cdi against the driver files now (stale after
                an upgrade?)
  kubelet       the kubelet, a device plugin answering on its socket with GPUs registered in
                kubelet_internal_checkpoint, or the DRA driver registered
  mps           each MPS daemon the device plugin wants, ready (<mps-root>/<resource>/status.json)
  labels        with --cluster: the Node's edgegpu.io/gpu and power-mode labels and allocatable GPUs
  power         a Jetson's nvpmodel mode and a change waiting for a reboot
Verdicts: ok, skipped (not used here), warning, unknown (could not be read: run as root),
broken; each not-ok finding names its files and the command that fixes it.

Exit codes: 0 nothing broken (warnings allowed), 1 a link is broken, 2 invalid command line,
3 nothing found broken but a link could not be checked (run as root), 4 --bundle, --textfile
or --feature-file could not be written.
See docs/troubleshooting.md.";

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Output format (json: one document on stdout, see docs/troubleshooting.md).
    #[arg(long, value_enum, default_value = "text", env = "EDGEGPU_OUTPUT")]
    pub output: OutputFormat,
    /// Show the evidence of every finding, not only of those that are not ok.
    #[arg(long, short)]
    pub verbose: bool,
    /// Also write a support bundle (tar.gz): the findings and the files and command outputs
    /// they came from, secrets redacted.
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// The kubelet's root directory (k3s's default too).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_dir: String,
    /// The device plugin's --mps-root.
    #[arg(
        long,
        env = "MPS_ROOT",
        value_name = "DIR",
        default_value = "/run/edgegpu/mps"
    )]
    pub mps_root: String,
    /// Also compare the Node's labels and allocatable GPUs, read with kubectl (network).
    #[arg(long)]
    pub cluster: bool,
    /// The kubectl command for --cluster [default: kubectl, else k3s kubectl].
    #[arg(long, value_name = "COMMAND", requires = "cluster")]
    pub kubectl: Option<String>,
    /// This Node's name for --cluster [default: NODE_NAME, else the host name].
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// Write the verdicts for node exporter's textfile collector (Prometheus text format).
    #[arg(long, value_name = "FILE")]
    pub textfile: Option<PathBuf>,
    /// Write the verdicts as a Node Feature Discovery feature file (labels
    /// edgegpu.io/node-doctor and edgegpu.io/node-doctor.broken).
    #[arg(long, value_name = "FILE")]
    pub feature_file: Option<PathBuf>,
}

const CDI_AFTER_HELP: &str = "\
Sources (read under --root; see docs/cdi.md):
  Jetson        L4T's container CSV lists in
                /etc/nvidia-container-runtime/host-files-for-container.d/*.csv: dev, lib, sym
                and dir entries that exist on the host (globs expanded, links followed);
                devices 0 and all (and, from the driver's procfs, the GPU's UUID and MIG
                devices 0:gi<G>:ci<C> on Thor, discrete GPUs next to the Jetson as 1, 2, ...).
  NVIDIA driver /proc/driver/nvidia/gpus/*/information (UUID, bus, minor; excluded GPUs
                skipped), MIG instances from /proc/driver/nvidia/capabilities and
                /proc/driver/nvidia-caps/mig-minors, driver libraries of the version in
                /proc/driver/nvidia/version; devices by index, by UUID, MIG <gpu>:gi<G>:ci<C>,
                and all (every GPU and MIG device).
Hooks only where /usr/bin/nvidia-cdi-hook or /usr/bin/nvidia-ctk exists. Nothing is written
when an input is bad or missing (exit code 3).";

#[derive(Debug, Subcommand)]
pub enum CdiCommand {
    /// Write the CDI spec (kind nvidia.com/gpu) for this host's GPUs, atomically.
    #[command(after_help = CDI_AFTER_HELP)]
    Generate {
        /// Where to write the spec (a path on this machine; `-` for standard output)
        /// [default: /var/run/cdi/nvidia.yaml under --root].
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Output format [default: json for a .json output file, else yaml].
        #[arg(long, value_enum)]
        format: Option<edgegpu_host::cdi::Format>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}
