//! The `--config` file: NVIDIA's `version: v1` format, read with NVIDIA's rules so that a
//! ConfigMap written for NVIDIA's plugin means the same here.
//!
//! NVIDIA's reader (`api/config/v1` in NVIDIA/k8s-device-plugin) turns YAML into JSON
//! (`sigs.k8s.io/yaml`, YAML 1.1 scalars) and decodes that with Go's `encoding/json`. What
//! follows from it, and what this module does the same way:
//! - an empty file, or one without `version`, is version `v1` with every default; any other
//!   version is refused (`unknown version: …`);
//! - keys of the plain sections (top level, `flags`, `flags.plugin`, `flags.gfd`, `imex`,
//!   `resources`) match case-insensitively (`useNodeFeatureAPI` = `useNodeFeatureApi`); the
//!   keys of `sharing.timeSlicing`/`sharing.mps` and of their resources are looked up exactly
//!   (NVIDIA decodes them through a `map[string]…`);
//! - unknown keys are ignored — here also reported, with their line, so a typo is visible;
//! - booleans take YAML 1.1's spellings (`yes`, `on`, …) unquoted; a quoted `"true"` is a
//!   string and refused, as Go refuses it; string settings take any scalar;
//! - a resource name without the `nvidia.com/` prefix gets it (`gpu` → `nvidia.com/gpu`); the
//!   name must be a DNS subdomain and 63 characters at most with the prefix;
//! - `replicas` is required and ≥ 2; `devices` must be `all`, a count > 0 or a list of GPU
//!   indexes / MIG indexes / UUIDs; anything but `all`, and `rename`, is then ignored with a
//!   warning (NVIDIA's `DisableResourceNamingInConfig`); the top-level `resources` section is
//!   checked and ignored likewise;
//! - `imex.channelIDs` must be `[]` or `[0]`.
//!
//! The `sharing` section (time-slicing, MPS and edgegpu's memory-sized sharing) is read in
//! [`super::sharing`]. `imex` is checked at start (see [`crate::node`]). Every error names the
//! line and column and the key path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::read::{
    at, boolean, fail, integer, opt, resource_name, seq, string, ConfigFileError, Keys, Reader,
};
use super::sharing::{GpuMemorySharing, MpsSharing, TimeSlicing};
use super::strategy::{
    AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, DiscoveryStrategy, MigStrategy,
};
use super::yaml::{self, Node, Value};

/// The parsed `--config` file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigFile {
    pub flags: FileFlags,
    /// `sharing.timeSlicing` (`None` when `sharing.mps` is set: MPS wins, as in NVIDIA's).
    pub time_slicing: Option<TimeSlicing>,
    /// `sharing.mps`.
    pub mps: Option<MpsSharing>,
    /// `sharing.gpuMemory` (edgegpu: GPU memory in units).
    pub gpu_memory: Option<GpuMemorySharing>,
    pub imex: Imex,
    /// Settings that have no effect here and keys nobody knows, each with its position,
    /// for the start-up log.
    pub notes: Vec<String>,
}

/// `flags:` (and `flags.plugin:`) as far as edgegpu acts on them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileFlags {
    pub fail_on_init_error: Option<bool>,
    pub device_discovery_strategy: Option<DiscoveryStrategy>,
    pub mig_strategy: Option<MigStrategy>,
    /// edgegpu extension (NVIDIA has no equivalent).
    pub health_checks: Option<bool>,
    /// edgegpu extension.
    pub health_recovery_seconds: Option<u64>,
    pub pass_device_specs: Option<bool>,
    pub device_list_strategy: Option<Vec<DeviceListStrategy>>,
    pub device_id_strategy: Option<DeviceIdStrategy>,
    pub shared_devices_allocation_policy: Option<AllocationPolicy>,
    /// `flags.mpsRoot`.
    pub mps_root: Option<PathBuf>,
}

/// `imex:`: IMEX channels to hand every GPU container (NVIDIA's README, "IMEX Support").
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Imex {
    /// `[]` or `[0]`.
    #[serde(rename = "channelIDs")]
    pub channel_ids: Vec<u32>,
    /// A requested channel that does not exist stops the plugin instead of being skipped.
    pub required: bool,
}

impl ConfigFile {
    /// Reads and checks `path` (YAML; JSON is YAML too). Blocking: call it off the async
    /// runtime.
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
        let (doc, more) = yaml::parse(text).map_err(|e| ConfigFileError {
            path: PathBuf::new(),
            line: Some(e.line),
            column: Some(e.column),
            message: e.message,
        })?;
        let mut reader = Reader::default();
        if more {
            reader.note("the file holds several YAML documents; only the first is read".into());
        }
        let mut file = match doc {
            Some(doc) => reader.file(&doc)?,
            None => ConfigFile::default(),
        };
        file.notes = reader.notes;
        Ok(file)
    }
}

impl Reader {
    fn file(&mut self, doc: &Node) -> Result<ConfigFile, ConfigFileError> {
        let top = self.section(
            doc,
            "(top level)",
            &["version", "flags", "resources", "sharing", "imex"],
            Keys::AnyCase,
        )?;
        if let Some(v) = top.get("version") {
            match string(v, "version")? {
                Some(v) if v == "v1" => {}
                None => {}
                Some(other) => return fail(v, format!("unknown version: {other}")),
            }
        }
        let flags = match top.get("flags") {
            Some(f) => self.flags(f)?,
            None => FileFlags::default(),
        };
        if let Some(r) = top.get("resources") {
            self.resources(r)?;
        }
        let sharing = match top.get("sharing") {
            Some(s) => self.sharing(s)?,
            None => Default::default(),
        };
        let imex = match top.get("imex") {
            Some(i) => self.imex(i)?,
            None => Imex::default(),
        };
        Ok(ConfigFile {
            flags,
            time_slicing: sharing.time_slicing,
            mps: sharing.mps,
            gpu_memory: sharing.gpu_memory,
            imex,
            notes: Vec::new(),
        })
    }

    fn flags(&mut self, node: &Node) -> Result<FileFlags, ConfigFileError> {
        let f = self.section(
            node,
            "flags",
            &[
                "migStrategy",
                "failOnInitError",
                "mpsRoot",
                "nvidiaDriverRoot",
                "nvidiaDevRoot",
                "gdrcopyEnabled",
                "gdsEnabled",
                "mofedEnabled",
                "useNodeFeatureAPI",
                "deviceDiscoveryStrategy",
                "plugin",
                "gfd",
                "healthChecks",
                "healthRecoverySeconds",
            ],
            Keys::AnyCase,
        )?;
        self.without_effect(&f, "flags", &["nvidiaDriverRoot", "nvidiaDevRoot"], string)?;
        self.without_effect(
            &f,
            "flags",
            &[
                "gdrcopyEnabled",
                "gdsEnabled",
                "mofedEnabled",
                "useNodeFeatureAPI",
            ],
            boolean,
        )?;
        if let Some(v) = f.get("gfd") {
            self.section(
                v,
                "flags.gfd",
                &[
                    "oneshot",
                    "noTimestamp",
                    "sleepInterval",
                    "outputFile",
                    "machineTypeFile",
                ],
                Keys::AnyCase,
            )?;
            if !v.is_null() {
                self.note(format!(
                    "{}: `flags.gfd` configures gpu-feature-discovery; the plugin ignores it, as NVIDIA's does",
                    at(v)
                ));
            }
        }
        // NVIDIA's message for a value it does not know (`validateFlags`), not `choice`'s.
        let mig_strategy = match f.get("migStrategy") {
            Some(v) => match string(v, "flags.migStrategy")?.as_deref() {
                None => None,
                Some("none") => Some(MigStrategy::None),
                Some("single") => Some(MigStrategy::Single),
                Some("mixed") => Some(MigStrategy::Mixed),
                Some(other) => return fail(v, format!("unknown MIG strategy: {other}")),
            },
            None => None,
        };
        let mut flags = FileFlags {
            fail_on_init_error: opt(&f, "failOnInitError", "flags", boolean)?,
            device_discovery_strategy: opt(&f, "deviceDiscoveryStrategy", "flags", |v, p| {
                choice(
                    v,
                    p,
                    &[
                        ("auto", DiscoveryStrategy::Auto),
                        ("tegra", DiscoveryStrategy::Tegra),
                        ("nvml", DiscoveryStrategy::Nvml),
                    ],
                )
            })?,
            mig_strategy,
            health_checks: opt(&f, "healthChecks", "flags", boolean)?,
            health_recovery_seconds: opt(&f, "healthRecoverySeconds", "flags", |v, p| {
                integer(v, p)?
                    .map(|n| u64::try_from(n).or_else(|_| fail(v, format!("{p}: must be >= 0"))))
                    .transpose()
            })?,
            // NVIDIA's host directory of the MPS pipe and log directories: ours too.
            mps_root: opt(&f, "mpsRoot", "flags", string)?
                .filter(|r| !r.is_empty())
                .map(PathBuf::from),
            ..FileFlags::default()
        };
        if let Some(p) = f.get("plugin") {
            self.plugin(p, &mut flags)?;
        }
        Ok(flags)
    }

    fn plugin(&mut self, node: &Node, flags: &mut FileFlags) -> Result<(), ConfigFileError> {
        let p = self.section(
            node,
            "flags.plugin",
            &[
                "passDeviceSpecs",
                "deviceListStrategy",
                "deviceIDStrategy",
                "cdiAnnotationPrefix",
                "nvidiaCTKPath",
                "nvidiaCDIHookPath",
                "containerDriverRoot",
                "sharedDevicesAllocationPolicy",
            ],
            Keys::AnyCase,
        )?;
        self.without_effect(
            &p,
            "flags.plugin",
            &[
                "cdiAnnotationPrefix",
                "nvidiaCTKPath",
                "nvidiaCDIHookPath",
                "containerDriverRoot",
            ],
            string,
        )?;
        flags.pass_device_specs = opt(&p, "passDeviceSpecs", "flags.plugin", boolean)?;
        flags.device_list_strategy = opt(
            &p,
            "deviceListStrategy",
            "flags.plugin",
            device_list_strategy,
        )?;
        flags.device_id_strategy = opt(&p, "deviceIDStrategy", "flags.plugin", |v, path| {
            choice(
                v,
                path,
                &[
                    ("uuid", DeviceIdStrategy::Uuid),
                    ("index", DeviceIdStrategy::Index),
                ],
            )
        })?;
        flags.shared_devices_allocation_policy = opt(
            &p,
            "sharedDevicesAllocationPolicy",
            "flags.plugin",
            |v, path| {
                choice(
                    v,
                    path,
                    &[
                        ("distributed", AllocationPolicy::Distributed),
                        ("packed", AllocationPolicy::Packed),
                    ],
                )
            },
        )?;
        Ok(())
    }

    /// NVIDIA settings edgegpu does not act on: read for their type (NVIDIA refuses a wrongly
    /// typed value), then noted when set.
    fn without_effect<T>(
        &mut self,
        section: &BTreeMap<&'static str, &Node>,
        path: &str,
        keys: &[&str],
        read: impl Fn(&Node, &str) -> Result<Option<T>, ConfigFileError>,
    ) -> Result<(), ConfigFileError> {
        for key in keys {
            let Some(node) = section.get(key) else {
                continue;
            };
            let key_path = format!("{path}.{key}");
            if read(node, &key_path)?.is_some() {
                self.note(format!(
                    "{}: `{key_path}` is an NVIDIA plugin setting without effect in edgegpu; ignored",
                    at(node)
                ));
            }
        }
        Ok(())
    }

    /// `resources:` (resource renaming by pattern): checked as NVIDIA checks it, then
    /// ignored as NVIDIA ignores it.
    fn resources(&mut self, node: &Node) -> Result<(), ConfigFileError> {
        let r = self.section(node, "resources", &["gpus", "mig"], Keys::AnyCase)?;
        let mut any = false;
        for (key, list) in r {
            let path = format!("resources.{key}");
            for (i, item) in seq(list, &path)?.iter().enumerate() {
                let path = format!("{path}[{i}]");
                let entry = self.section(item, &path, &["pattern", "name"], Keys::AnyCase)?;
                let Some(pattern) = entry.get("pattern") else {
                    return fail(
                        item,
                        format!("{path}: resources must have a 'pattern' field set"),
                    );
                };
                string(pattern, &format!("{path}.pattern"))?;
                let Some(name) = entry.get("name") else {
                    return fail(
                        item,
                        format!("{path}: resources must have a 'name' field set"),
                    );
                };
                resource_name(name, &format!("{path}.name"))?;
                any = true;
            }
        }
        if any {
            self.note(format!(
                "{}: customizing the 'resources' field is not supported; ignored, as NVIDIA's plugin does",
                at(node)
            ));
        }
        Ok(())
    }

    fn imex(&mut self, node: &Node) -> Result<Imex, ConfigFileError> {
        let i = self.section(node, "imex", &["channelIDs", "required"], Keys::AnyCase)?;
        let mut imex = Imex::default();
        if let Some(list) = i.get("channelIDs") {
            for (n, item) in seq(list, "imex.channelIDs")?.iter().enumerate() {
                let path = format!("imex.channelIDs[{n}]");
                let Some(id) = integer(item, &path)? else {
                    return fail(item, format!("{path}: expected an integer, found null"));
                };
                imex.channel_ids.push(u32::try_from(id).unwrap_or(u32::MAX));
            }
            if !(imex.channel_ids.is_empty() || imex.channel_ids == [0]) {
                return fail(
                    list,
                    format!(
                        "invalid IMEX channel IDs: channelIDs must be [] or [0]; found {:?}",
                        imex.channel_ids
                    ),
                );
            }
        }
        imex.required = opt(&i, "required", "imex", boolean)?.unwrap_or(false);
        Ok(imex)
    }
}

/// One of `choices`, by its exact name.
fn choice<T: Copy>(
    node: &Node,
    path: &str,
    choices: &[(&str, T)],
) -> Result<Option<T>, ConfigFileError> {
    let Some(text) = string(node, path)? else {
        return Ok(None);
    };
    match choices.iter().find(|(name, _)| *name == text) {
        Some((_, value)) => Ok(Some(*value)),
        None => {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            fail(
                node,
                format!(
                    "{path}: invalid value `{text}`: expected {}",
                    names.join(", ")
                ),
            )
        }
    }
}

/// `deviceListStrategy`: a string or a list of strings, as in NVIDIA's; a comma list in the
/// string is accepted too (as on the command line).
fn device_list_strategy(
    node: &Node,
    path: &str,
) -> Result<Option<Vec<DeviceListStrategy>>, ConfigFileError> {
    let joined = match &node.value {
        _ if node.is_null() => return Ok(None),
        Value::Scalar { text, .. } => text.clone(),
        Value::Seq(items) => {
            let mut words = Vec::new();
            for item in items {
                match string(item, path)? {
                    Some(w) => words.push(w),
                    None => return fail(item, format!("{path}: null in the list")),
                }
            }
            words.join(",")
        }
        Value::Map(_) => return fail(node, format!("{path}: expected a string or a list")),
    };
    DeviceListStrategy::parse_list(&joined)
        .map(Some)
        .or_else(|e| fail(node, format!("{path}: {e:#}")))
}

// The sharing section read through the whole file reader: here rather than in sharing.rs,
// so that sharing does not depend on this module.
#[cfg(test)]
mod tests {
    use super::ConfigFile;

    #[test]
    fn memory_sizes_are_kubernetes_quantities_in_whole_mib() {
        let size = |text: &str| {
            let f = ConfigFile::parse(&format!(
                "sharing:\n  gpuMemory:\n    unit: {text}\n    resources: [{{name: gpu}}]\n"
            ));
            f.map(|f| f.gpu_memory.unwrap().unit)
        };
        assert_eq!(size("256Mi").unwrap(), 268_435_456);
        assert_eq!(size("1Gi").unwrap(), 1_073_741_824);
        assert_eq!(size("1048576").unwrap(), 1_048_576);
        // 512M = 512 000 000 bytes = 488.28 MiB: rounded down.
        assert_eq!(size("512M").unwrap(), 488 << 20);
        assert!(size("1000").unwrap_err().message.contains("less than 1Mi"));
        assert!(size("1.5Gi").unwrap_err().message.contains("256Mi, 1Gi"));
        assert!(size("Gi").is_err());
        assert!(size("12Xi").is_err());
        assert!(size("99999999999Ti").is_err());
    }
}
