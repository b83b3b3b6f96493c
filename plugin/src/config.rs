//! GPU-side settings: discovery, device IDs, allocation strategies, health checks,
//! sharing, and the `--config` file (NVIDIA's `version: v1` shape).
//! Precedence: flag > environment variable > config file > built-in default.
//!
//! The clap fields are `Option`s without clap defaults on purpose: `None` means "neither the
//! flag nor its environment variable was given", which is the only way to let the config file
//! fill the value in. The defaults are applied by [`GpuArgs::resolve`] and shown in `--help`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

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
}

/// `--discovery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscoveryStrategy {
    Auto,
    Tegra,
    Nvml,
}

/// `--mig-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigStrategy {
    None,
    Single,
    Mixed,
}

/// `--device-id-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceIdStrategy {
    Uuid,
    Index,
}

/// One entry of `--device-list-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceListStrategy {
    Envvar,
    CdiAnnotations,
    CdiCri,
}

impl DeviceListStrategy {
    fn parse(word: &str) -> anyhow::Result<Self> {
        match word.trim() {
            "envvar" => Ok(Self::Envvar),
            "cdi-annotations" => Ok(Self::CdiAnnotations),
            "cdi-cri" => Ok(Self::CdiCri),
            // NVIDIA's plugin answers Allocate with /dev/null mounts at
            // /var/run/nvidia-container-devices/<id> (the kubelet and runtime mount them); the
            // NVIDIA runtime reads them only with accept-nvidia-visible-devices-as-volume-mounts
            // on, off by default. Not implemented here: CDI serves the same purpose.
            "volume-mounts" => anyhow::bail!(
                "device list strategy `volume-mounts` is not supported (the NVIDIA runtime honours it \
                 only with accept-nvidia-visible-devices-as-volume-mounts, off by default); use \
                 cdi-annotations or cdi-cri for GPUs a pod's environment cannot choose, or envvar"
            ),
            other => anyhow::bail!(
                "unknown device list strategy `{other}`; expected envvar, cdi-annotations or cdi-cri"
            ),
        }
    }

    /// Parses a comma-separated list (duplicates removed, order kept).
    pub fn parse_list(list: &str) -> anyhow::Result<Vec<Self>> {
        let mut out = Vec::new();
        for word in list.split(',').filter(|w| !w.trim().is_empty()) {
            let s = Self::parse(word)?;
            if !out.contains(&s) {
                out.push(s);
            }
        }
        anyhow::ensure!(!out.is_empty(), "empty device list strategy");
        Ok(out)
    }

    pub fn is_cdi(self) -> bool {
        matches!(self, Self::CdiAnnotations | Self::CdiCri)
    }
}

/// `--shared-devices-allocation-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocationPolicy {
    Distributed,
    Packed,
}

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
    pub sharing: Option<TimeSlicing>,
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
            Some(path) => Some(ConfigFile::load(path)?),
            None => None,
        };
        let flags = file
            .as_ref()
            .and_then(|f| f.flags.clone())
            .unwrap_or_default();
        let plugin = flags.plugin.clone().unwrap_or_default();
        let ignored = flags
            .ignored_keys()
            .into_iter()
            .chain(plugin.ignored_keys())
            .collect::<Vec<_>>();
        if !ignored.is_empty() {
            tracing::warn!(
                "config file: NVIDIA plugin settings without effect in edgegpu are ignored: {}",
                ignored.join(", ")
            );
        }
        let defaults = Config::default();

        let device_list_strategy = match (&self.device_list_strategy, &plugin.device_list_strategy)
        {
            (Some(list), _) => DeviceListStrategy::parse_list(list)
                .context("invalid --device-list-strategy / DEVICE_LIST_STRATEGY")?,
            (None, Some(from_file)) => from_file.0.clone(),
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
                .or(plugin.device_id_strategy)
                .unwrap_or(defaults.device_id_strategy),
            device_list_strategy,
            pass_device_specs: self
                .pass_device_specs
                .or(plugin.pass_device_specs)
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
                .or(plugin.shared_devices_allocation_policy)
                .unwrap_or(defaults.shared_devices_allocation_policy),
            sharing: file.and_then(|f| f.sharing).and_then(|s| s.time_slicing),
        })
    }
}

// ---------------------------------------------------------------------------------------
// The config file. Unknown keys are errors (`deny_unknown_fields`); keys NVIDIA's plugin
// knows but we do not act on are accepted and reported, so existing ConfigMaps still load.
// Validation runs inside deserialisation (`try_from`), so serde_yaml attaches the line,
// column and key path to every error.
// ---------------------------------------------------------------------------------------

/// The parsed `--config` file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawConfigFile")]
pub struct ConfigFile {
    pub flags: Option<FileFlags>,
    pub sharing: Option<Sharing>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfigFile {
    version: Option<Version>,
    flags: Option<FileFlags>,
    sharing: Option<Sharing>,
    /// NVIDIA parses this section (resource renaming for MIG) but ignores it; so do we.
    #[serde(default)]
    #[allow(dead_code)]
    resources: Option<serde_yaml::Value>,
}

impl TryFrom<RawConfigFile> for ConfigFile {
    type Error = String;
    fn try_from(raw: RawConfigFile) -> Result<Self, String> {
        if raw.version.is_none() {
            return Err("missing version field (expected `version: v1`)".into());
        }
        Ok(Self {
            flags: raw.flags,
            sharing: raw.sharing,
        })
    }
}

/// `version:`, checked while parsing so that the error carries the line of the value.
struct Version;

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = String::deserialize(d)?;
        if v == "v1" {
            Ok(Version)
        } else {
            Err(serde::de::Error::custom(format!("unknown version: {v}")))
        }
    }
}

/// `flags:` of the config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileFlags {
    pub fail_on_init_error: Option<bool>,
    pub device_discovery_strategy: Option<DiscoveryStrategy>,
    /// edgegpu extension (NVIDIA has no equivalent).
    pub health_checks: Option<bool>,
    /// edgegpu extension.
    pub health_recovery_seconds: Option<u64>,
    pub plugin: Option<FilePluginFlags>,
    pub mig_strategy: Option<MigStrategy>,
    // Accepted for compatibility with NVIDIA's ConfigMaps, not used by edgegpu.
    pub nvidia_driver_root: Option<String>,
    pub nvidia_dev_root: Option<String>,
    pub mps_root: Option<String>,
    pub gdrcopy_enabled: Option<bool>,
    pub gds_enabled: Option<bool>,
    pub mofed_enabled: Option<bool>,
    pub use_node_feature_api: Option<bool>,
    pub gfd: Option<serde_yaml::Value>,
}

impl FileFlags {
    /// NVIDIA keys that were set but do nothing here (for the start-up warning).
    fn ignored_keys(&self) -> Vec<&'static str> {
        let set = [
            ("flags.nvidiaDriverRoot", self.nvidia_driver_root.is_some()),
            ("flags.nvidiaDevRoot", self.nvidia_dev_root.is_some()),
            ("flags.mpsRoot", self.mps_root.is_some()),
            ("flags.gdrcopyEnabled", self.gdrcopy_enabled.is_some()),
            ("flags.gdsEnabled", self.gds_enabled.is_some()),
            ("flags.mofedEnabled", self.mofed_enabled.is_some()),
            (
                "flags.useNodeFeatureAPI",
                self.use_node_feature_api.is_some(),
            ),
            ("flags.gfd", self.gfd.is_some()),
        ];
        set.into_iter()
            .filter(|(_, is_set)| *is_set)
            .map(|(k, _)| k)
            .collect()
    }
}

/// `flags.plugin:` of the config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FilePluginFlags {
    pub pass_device_specs: Option<bool>,
    pub device_list_strategy: Option<FileDeviceListStrategy>,
    #[serde(rename = "deviceIDStrategy")]
    pub device_id_strategy: Option<DeviceIdStrategy>,
    /// edgegpu extension (NVIDIA only has the flag).
    pub shared_devices_allocation_policy: Option<AllocationPolicy>,
    // Accepted for compatibility with NVIDIA's ConfigMaps, not used by edgegpu.
    pub cdi_annotation_prefix: Option<String>,
    #[serde(rename = "nvidiaCTKPath")]
    pub nvidia_ctk_path: Option<String>,
    #[serde(rename = "nvidiaCDIHookPath")]
    pub nvidia_cdi_hook_path: Option<String>,
    pub container_driver_root: Option<String>,
}

impl FilePluginFlags {
    /// NVIDIA keys that were set but do nothing here (for the start-up warning).
    fn ignored_keys(&self) -> Vec<&'static str> {
        let set = [
            (
                "flags.plugin.cdiAnnotationPrefix",
                self.cdi_annotation_prefix.is_some(),
            ),
            ("flags.plugin.nvidiaCTKPath", self.nvidia_ctk_path.is_some()),
            (
                "flags.plugin.nvidiaCDIHookPath",
                self.nvidia_cdi_hook_path.is_some(),
            ),
            (
                "flags.plugin.containerDriverRoot",
                self.container_driver_root.is_some(),
            ),
        ];
        set.into_iter()
            .filter(|(_, is_set)| *is_set)
            .map(|(k, _)| k)
            .collect()
    }
}

/// `deviceListStrategy` in the file: a string (comma list allowed) or a YAML list, as in NVIDIA's.
#[derive(Debug, Clone, PartialEq)]
pub struct FileDeviceListStrategy(pub Vec<DeviceListStrategy>);

impl<'de> Deserialize<'de> for FileDeviceListStrategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        let joined = match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => s,
            OneOrMany::Many(v) => v.join(","),
        };
        DeviceListStrategy::parse_list(&joined)
            .map(FileDeviceListStrategy)
            .map_err(|e| serde::de::Error::custom(format!("deviceListStrategy: {e:#}")))
    }
}

/// `sharing:` of the config file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Sharing {
    pub time_slicing: Option<TimeSlicing>,
    /// MPS needs a control daemon per GPU, which edgegpu does not run.
    #[serde(default, deserialize_with = "reject_mps")]
    pub mps: Option<()>,
}

fn reject_mps<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<()>, D::Error> {
    let _ = serde_yaml::Value::deserialize(d)?;
    Err(serde::de::Error::custom(
        "sharing.mps is not supported; use sharing.timeSlicing",
    ))
}

/// `sharing.timeSlicing:` — replicas of each GPU advertised as `<id>::<n>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawTimeSlicing", rename_all = "camelCase")]
pub struct TimeSlicing {
    pub rename_by_default: bool,
    pub fail_requests_greater_than_one: bool,
    pub resources: Vec<ReplicatedResource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTimeSlicing {
    #[serde(default)]
    rename_by_default: bool,
    #[serde(default)]
    fail_requests_greater_than_one: bool,
    resources: Option<Vec<ReplicatedResource>>,
}

impl TryFrom<RawTimeSlicing> for TimeSlicing {
    type Error = String;
    fn try_from(raw: RawTimeSlicing) -> Result<Self, String> {
        let resources = raw.resources.unwrap_or_default();
        if resources.is_empty() {
            return Err(
                "no resources specified (timeSlicing.resources is missing or empty)".into(),
            );
        }
        Ok(Self {
            rename_by_default: raw.rename_by_default,
            fail_requests_greater_than_one: raw.fail_requests_greater_than_one,
            resources,
        })
    }
}

/// One `sharing.timeSlicing.resources[]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawReplicatedResource")]
pub struct ReplicatedResource {
    pub name: String,
    pub replicas: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplicatedResource {
    name: Option<String>,
    replicas: Option<i64>,
    /// NVIDIA: values other than `all` are logged and ignored.
    devices: Option<serde_yaml::Value>,
    /// NVIDIA: logged and ignored.
    rename: Option<String>,
}

impl TryFrom<RawReplicatedResource> for ReplicatedResource {
    type Error = String;
    fn try_from(raw: RawReplicatedResource) -> Result<Self, String> {
        let name = raw
            .name
            .filter(|n| !n.is_empty())
            .ok_or("no resource name specified")?;
        let replicas = raw
            .replicas
            .ok_or_else(|| format!("no replicas specified (resource {name})"))?;
        if replicas < 2 {
            return Err(format!(
                "number of replicas must be >= 2 (resource {name}: replicas {replicas})"
            ));
        }
        let replicas =
            u32::try_from(replicas).map_err(|_| format!("too many replicas: {replicas}"))?;
        if let Some(devices) = raw.devices {
            if devices.as_str() != Some("all") {
                tracing::warn!(resource = %name, "sharing: `devices` other than `all` is ignored; every GPU is shared");
            }
        }
        if let Some(rename) = raw.rename {
            tracing::warn!(resource = %name, %rename, "sharing: per-resource `rename` is ignored (use renameByDefault)");
        }
        Ok(Self { name, replicas })
    }
}

/// A config file that could not be used: names the file, the line/column and the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid config file {}{}: {message}", path.display(), location(*line, *column))]
pub struct ConfigFileError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The key path (e.g. `sharing.timeSlicing.resources[0]`) and what is wrong with it.
    pub message: String,
}

fn location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(", line {l}, column {c}"),
        (Some(l), None) => format!(", line {l}"),
        _ => String::new(),
    }
}

impl ConfigFile {
    /// Reads and validates `path` (YAML; JSON is accepted as YAML).
    pub fn load(path: &Path) -> Result<Self, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigFileError {
            path: path.to_path_buf(),
            line: None,
            column: None,
            message: format!("cannot read it: {e}"),
        })?;
        Self::parse(&text).map_err(|e| ConfigFileError {
            path: path.to_path_buf(),
            ..e
        })
    }

    /// Parses config text; errors carry an empty path.
    pub fn parse(text: &str) -> Result<Self, ConfigFileError> {
        if text.trim().is_empty() {
            return Err(ConfigFileError {
                path: PathBuf::new(),
                line: None,
                column: None,
                message: "the file is empty (expected at least `version: v1`)".into(),
            });
        }
        serde_yaml::from_str::<ConfigFile>(text).map_err(|e| {
            let loc = e.location();
            // serde_yaml appends " at line L column C"; we print the location ourselves.
            let mut message = e.to_string();
            if let Some(l) = &loc {
                let suffix = format!(" at line {} column {}", l.line(), l.column());
                if let Some(stripped) = message.strip_suffix(&suffix) {
                    message = stripped.to_string();
                }
            }
            ConfigFileError {
                path: PathBuf::new(),
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                message,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_keys_without_effect_are_accepted_and_reported() {
        let f = ConfigFile::parse(
            "version: v1\nflags:\n  nvidiaDriverRoot: /run/nvidia/driver\n  gfd: {oneshot: true}\n  plugin:\n    nvidiaCTKPath: /usr/bin/nvidia-ctk\n",
        )
        .unwrap();
        let flags = f.flags.unwrap();
        assert_eq!(
            flags.ignored_keys(),
            vec!["flags.nvidiaDriverRoot", "flags.gfd"]
        );
        assert_eq!(
            flags.plugin.unwrap().ignored_keys(),
            vec!["flags.plugin.nvidiaCTKPath"]
        );
    }

    #[test]
    fn mig_strategy_from_file_flag_and_default() {
        let f = ConfigFile::parse("version: v1\nflags:\n  migStrategy: mixed\n").unwrap();
        assert_eq!(f.flags.unwrap().mig_strategy, Some(MigStrategy::Mixed));
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
