//! GPU-side settings: discovery, device IDs, allocation strategies, health checks,
//! sharing, and the `--config` file (NVIDIA's `version: v1` shape).
//! Precedence: flag > environment variable > config file > built-in default.
//!
//! The clap fields are `Option`s without clap defaults on purpose: `None` means "neither the
//! flag nor its environment variable was given", which is the only way to let the config file
//! fill the value in. The defaults are applied by [`GpuArgs::resolve`] and shown in `--help`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

mod file;
mod read;
mod sharing;
mod strategy;
mod yaml;

pub use file::{ConfigFile, FileFlags, Imex};
pub use read::ConfigFileError;
pub use sharing::{
    GpuMemorySharing, MemoryEnforcement, MemoryResource, MpsResource, MpsSharing,
    ReplicatedResource, TimeSlicing, DEFAULT_MEMORY_UNIT, MAX_MPS_CLIENTS,
};
pub use strategy::{
    AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, DiscoveryStrategy, MigStrategy,
};

/// Command-line flags (each with an environment variable) for the GPU side of the plugin.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GpuArgs {
    /// Config file in NVIDIA's `version: v1` format (YAML or JSON): flags and
    /// `sharing.timeSlicing`. Flags and environment variables override its values.
    #[arg(
        long = "config",
        visible_alias = "config-file",
        env = "CONFIG_FILE",
        value_name = "FILE"
    )]
    pub config_file: Option<PathBuf>,

    /// How GPUs are found: `tegra` reads the Jetson device tree, sysfs and
    /// /etc/nv_tegra_release (no NVML needed); `nvml` loads libnvidia-ml.so.1; `auto` tries NVML
    /// and falls back to Tegra. [default: auto]
    #[arg(
        long = "discovery",
        visible_alias = "device-discovery-strategy",
        env = "DEVICE_DISCOVERY_STRATEGY",
        value_enum
    )]
    pub discovery: Option<DiscoveryStrategy>,

    /// MIG devices (A100/H100-class GPUs, Jetson Thor), NVIDIA's semantics: `none` serves
    /// every GPU whole as nvidia.com/gpu; `single` serves the MIG devices as nvidia.com/gpu
    /// (every MIG-enabled GPU must hold MIG devices of one profile, and no GPU may be without
    /// MIG); `mixed` serves GPUs without MIG as nvidia.com/gpu and each MIG profile as its
    /// own resource nvidia.com/mig-<profile> (e.g. nvidia.com/mig-1g.10gb), one socket each.
    /// [default: none]
    #[arg(long, env = "MIG_STRATEGY", value_enum)]
    pub mig_strategy: Option<MigStrategy>,

    /// Advertised device IDs: `uuid` (GPU-…, MIG-…; `tegra` on Jetson) or `index` (`0`, `1`,
    /// MIG `<gpu>:<mig>`). [default: uuid]
    #[arg(long, env = "DEVICE_ID_STRATEGY", value_enum)]
    pub device_id_strategy: Option<DeviceIdStrategy>,

    /// How Allocate tells the container runtime which GPUs to inject, comma-separated list of
    /// `envvar` (NVIDIA_VISIBLE_DEVICES), `cdi-annotations` (cdi.k8s.io/… annotation),
    /// `cdi-cri` (CDI devices in the CRI response). [default: envvar]
    #[arg(
        long,
        env = "DEVICE_LIST_STRATEGY",
        value_name = "STRATEGY[,STRATEGY…]"
    )]
    pub device_list_strategy: Option<String>,

    /// Also return the GPU's /dev nodes as DeviceSpecs, so pods work without the NVIDIA
    /// runtime as default runtime. [default: false]
    #[arg(long, env = "PASS_DEVICE_SPECS", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL")]
    pub pass_device_specs: Option<bool>,

    /// Exit with an error when no GPU is found; with `false` the plugin keeps running and
    /// advertises zero devices. [default: true]
    #[arg(long, env = "FAIL_ON_INIT_ERROR", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL")]
    pub fail_on_init_error: Option<bool>,

    /// Watch GPU health (Tegra: device nodes and sysfs; NVML: critical XID events and lost
    /// GPUs) and advertise unhealthy GPUs as `Unhealthy`. `DP_DISABLE_HEALTHCHECKS=all` (or
    /// `xids`) also disables it; any other value of it is a comma list of extra XIDs to
    /// ignore. [default: true]
    #[arg(long, env = "HEALTH_CHECKS", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL")]
    pub health_checks: Option<bool>,

    /// Seconds a GPU marked unhealthy by an NVML XID event must keep answering before it is
    /// advertised as Healthy again. [default: 60]
    #[arg(long, env = "HEALTH_RECOVERY_SECONDS", value_name = "SECONDS")]
    pub health_recovery_seconds: Option<u64>,

    /// With time-slicing replicas: `distributed` spreads a pod's replicas over the physical
    /// GPUs with the fewest replicas in use, `packed` fills one GPU first.
    /// [default: distributed]
    #[arg(long, env = "SHARED_DEVICES_ALLOCATION_POLICY", value_enum)]
    pub shared_devices_allocation_policy: Option<AllocationPolicy>,

    /// With MPS (`sharing.mps`, or `sharing.gpuMemory` enforced by MPS): the directory of the
    /// MPS control daemons' pipe, log and shared-memory directories,
    /// `<DIR>/<resource>/{pipe,log,shm}`, and of `<DIR>/desired/daemons.json`, the daemons the
    /// plugin (or the DRA driver with `--mps`) asks the companion for (the only file either
    /// writes there). The same path on the host, in the plugin, in the daemon and in client
    /// containers (MPS needs it identical). [default: /run/edgegpu/mps]
    #[arg(long, env = "MPS_ROOT", value_name = "DIR")]
    pub mps_root: Option<PathBuf>,

    /// On Jetson: also advertise the DLA cores as `nvidia.com/dla` (IDs dla0, dla1) and the
    /// PVA instances as `nvidia.com/pva` (pva0, …), each only where the host has one. A
    /// container gets the engine's device nodes and its index in `EDGEGPU_DLA_CORES` /
    /// `EDGEGPU_PVA_INSTANCES` (docs/engines.md). `false` serves the GPU resource only.
    /// [default: true]
    #[arg(long, env = "ENGINES", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new(),
          value_name = "BOOL")]
    pub engines: Option<bool>,

    /// On Jetson: how often to re-read the power mode (nvpmodel's status and configuration,
    /// the GPU's devfreq ceiling), so that labels and DRA attributes follow an
    /// `nvpmodel -m` without a restart (docs/power.md). A read of a few small files.
    /// [default: 15]
    #[arg(long, env = "POWER_RECHECK_SECONDS", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub power_recheck_seconds: Option<u64>,
}

impl GpuArgs {
    /// `--power-recheck-seconds`, or its default.
    pub fn power_recheck(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.power_recheck_seconds.unwrap_or(15))
    }
}

/// `--mps-root` when not set: under /run, a tmpfs on every systemd host, so the MPS
/// shared-memory directory is in memory and nothing outlives a reboot.
pub const DEFAULT_MPS_ROOT: &str = "/run/edgegpu/mps";

/// The effective configuration after merging flags, environment and file.
/// Logged as JSON after `Running with config:` (NVIDIA's log line).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    pub config_file: Option<PathBuf>,
    pub discovery: DiscoveryStrategy,
    pub mig_strategy: MigStrategy,
    pub device_id_strategy: DeviceIdStrategy,
    pub device_list_strategy: Vec<DeviceListStrategy>,
    pub pass_device_specs: bool,
    pub fail_on_init_error: bool,
    pub health_checks: bool,
    /// XIDs ignored on top of NVIDIA's application XIDs (from `DP_DISABLE_HEALTHCHECKS`).
    pub extra_ignored_xids: BTreeSet<u64>,
    pub health_recovery_seconds: u64,
    pub shared_devices_allocation_policy: AllocationPolicy,
    /// `sharing.timeSlicing` (kept under NVIDIA's historical key name in the logged config).
    pub sharing: Option<TimeSlicing>,
    /// `sharing.mps`.
    pub mps: Option<MpsSharing>,
    /// `sharing.gpuMemory`.
    pub gpu_memory: Option<GpuMemorySharing>,
    /// `--mps-root`: where the MPS control daemons' pipe and log directories live.
    pub mps_root: PathBuf,
    pub imex: Imex,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            config_file: None,
            discovery: DiscoveryStrategy::Auto,
            mig_strategy: MigStrategy::None,
            device_id_strategy: DeviceIdStrategy::Uuid,
            device_list_strategy: vec![DeviceListStrategy::Envvar],
            pass_device_specs: false,
            fail_on_init_error: true,
            health_checks: true,
            extra_ignored_xids: BTreeSet::new(),
            health_recovery_seconds: 60,
            shared_devices_allocation_policy: AllocationPolicy::Distributed,
            sharing: None,
            mps: None,
            gpu_memory: None,
            mps_root: PathBuf::from(DEFAULT_MPS_ROOT),
            imex: Imex::default(),
        }
    }
}

impl GpuArgs {
    /// Merges flags/env (already combined by clap), the config file and the defaults.
    /// Reads `DP_DISABLE_HEALTHCHECKS` from the process environment.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        self.resolve_with_env(|name| std::env::var(name).ok())
    }

    /// [`GpuArgs::resolve`] with an explicit environment lookup (for env-only settings).
    pub fn resolve_with_env(&self, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Config> {
        let file = match &self.config_file {
            Some(path) => {
                let file = ConfigFile::load(path)?;
                for note in &file.notes {
                    tracing::warn!("config file {}: {note}", path.display());
                }
                file
            }
            None => ConfigFile::default(),
        };
        let flags = &file.flags;
        let defaults = Config::default();

        let device_list_strategy = match (&self.device_list_strategy, &flags.device_list_strategy) {
            (Some(list), _) => DeviceListStrategy::parse_list(list)
                .context("invalid --device-list-strategy / DEVICE_LIST_STRATEGY")?,
            (None, Some(from_file)) => from_file.clone(),
            (None, None) => defaults.device_list_strategy,
        };

        let mut health_checks = self
            .health_checks
            .or(flags.health_checks)
            .unwrap_or(defaults.health_checks);
        let mut extra_ignored_xids = BTreeSet::new();
        if let Some(value) = env("DP_DISABLE_HEALTHCHECKS") {
            let value = value.trim().to_ascii_lowercase();
            if value == "all" || value == "xids" {
                health_checks = false;
            } else {
                for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                    let xid = word.parse::<u64>().with_context(|| {
                        format!("DP_DISABLE_HEALTHCHECKS: `{word}` is neither `all`, `xids` nor an XID number")
                    })?;
                    extra_ignored_xids.insert(xid);
                }
            }
        }

        Ok(Config {
            config_file: self.config_file.clone(),
            discovery: self
                .discovery
                .or(flags.device_discovery_strategy)
                .unwrap_or(defaults.discovery),
            mig_strategy: self
                .mig_strategy
                .or(flags.mig_strategy)
                .unwrap_or(defaults.mig_strategy),
            device_id_strategy: self
                .device_id_strategy
                .or(flags.device_id_strategy)
                .unwrap_or(defaults.device_id_strategy),
            device_list_strategy,
            pass_device_specs: self
                .pass_device_specs
                .or(flags.pass_device_specs)
                .unwrap_or(defaults.pass_device_specs),
            fail_on_init_error: self
                .fail_on_init_error
                .or(flags.fail_on_init_error)
                .unwrap_or(defaults.fail_on_init_error),
            health_checks,
            extra_ignored_xids,
            health_recovery_seconds: self
                .health_recovery_seconds
                .or(flags.health_recovery_seconds)
                .unwrap_or(defaults.health_recovery_seconds),
            shared_devices_allocation_policy: self
                .shared_devices_allocation_policy
                .or(flags.shared_devices_allocation_policy)
                .unwrap_or(defaults.shared_devices_allocation_policy),
            sharing: file.time_slicing,
            mps: file.mps,
            gpu_memory: file.gpu_memory,
            mps_root: self
                .mps_root
                .clone()
                .or_else(|| flags.mps_root.clone())
                .unwrap_or_else(|| PathBuf::from(DEFAULT_MPS_ROOT)),
            imex: file.imex,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_strategy_from_file_flag_and_default() {
        let f = ConfigFile::parse("version: v1\nflags:\n  migStrategy: mixed\n").unwrap();
        assert_eq!(f.flags.mig_strategy, Some(MigStrategy::Mixed));
        let err = ConfigFile::parse("version: v1\nflags:\n  migStrategy: some\n").unwrap_err();
        assert_eq!(err.line, Some(3), "{err}");
        assert!(err.message.contains("some"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "version: v1\nflags:\n  migStrategy: single\n").unwrap();
        let args = GpuArgs {
            config_file: Some(file.clone()),
            ..GpuArgs::default()
        };
        let no_env = |_: &str| None;
        assert_eq!(
            args.resolve_with_env(no_env).unwrap().mig_strategy,
            MigStrategy::Single
        );
        let args = GpuArgs {
            config_file: Some(file),
            mig_strategy: Some(MigStrategy::None),
            ..GpuArgs::default()
        };
        assert_eq!(
            args.resolve_with_env(no_env).unwrap().mig_strategy,
            MigStrategy::None
        );
        assert_eq!(Config::default().mig_strategy, MigStrategy::None);
    }

    #[test]
    fn device_list_strategy_lists() {
        use DeviceListStrategy::*;
        assert_eq!(
            DeviceListStrategy::parse_list("envvar, cdi-cri,envvar").unwrap(),
            vec![Envvar, CdiCri]
        );
        assert!(DeviceListStrategy::parse_list("volume-mounts").is_err());
        assert!(DeviceListStrategy::parse_list(",").is_err());
    }
}
