//! How containerd combines the files it loads into one CRI plugin configuration, per
//! release family (containerd 1.x replaces a plugin table with the one read last, 2.x
//! merges key by key), and what the merged result decides: the default runtime, the
//! runtime's binary, what a new runtime copies, and settings that stop containerd.

use toml_edit::Value;

use super::containerd::Loaded;
use super::engine::CONTAINERD;
use super::{Source, Sourced};
use crate::formats::containerd::{
    copy_from_plugin, legacy_default_type, version_of_cri_plugin, Node, RuntimeCopy, CRI_V1,
    CRI_V2, CRI_V3,
};
use edgegpu_host::error::Result;
use edgegpu_host::root::HostRoot;

/// How a containerd release combines the files it loads (the main config, then its
/// `imports`, breadth-first, each file once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Merge {
    /// containerd before 2.0 (services/server/config/config.go, mergeConfig): an imported
    /// file's plugin table replaces the same plugin's table read before it. The merged
    /// config's version — 1, unless a file's `version` says otherwise (the last non-zero
    /// one wins) — names the CRI plugin: `cri` for 1, `io.containerd.grpc.v1.cri` else
    /// (Config.Decode); a merged version 2 or 3 with a `cri` table stops containerd
    /// (ValidateV2: "invalid plugin key URI").
    Replace,
    /// containerd 2.0 and later (cmd/containerd/server/config/config.go, mergeConfig since
    /// containerd commit a21e379b6 "Allow sections of Plugins to be merged"): plugin
    /// tables merge key by key, the later file's value winning. A file with version 0 or
    /// 1 is first migrated to the merged version (`cri` becomes
    /// `io.containerd.grpc.v1.cri`); the merged version is 3 unless a file says 2 (the
    /// last one wins). Only a merged version 2 moves the `io.containerd.grpc.v1.cri`
    /// runtime settings into `io.containerd.cri.v1.runtime`, and only the keys that
    /// table lacks — `runtimes` as a whole (plugins/cri/runtime/plugin.go,
    /// configMigration).
    Keys,
}

impl Merge {
    /// Which releases these are, for messages.
    pub fn releases(self) -> &'static str {
        match self {
            Merge::Replace => "containerd 1.x",
            Merge::Keys => "containerd 2.x",
        }
    }
}

/// The legacy shim of config version 1.
const LINUX_V1: &str = "io.containerd.runtime.v1.linux";

/// What told how the system containerd merges its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A dpkg or opkg status under the root.
    Package,
    /// The package paths its binary holds ([`super::embedded`]).
    Binary,
    /// A config version 3 (only containerd 2 reads it).
    ConfigVersion,
    /// Nothing: both ways are planned for.
    Unknown,
}

/// How the system containerd merges its files, and why.
#[derive(Debug, Clone)]
pub struct SystemMerges {
    pub merges: Vec<Merge>,
    /// For messages: the release and what said so.
    pub why: String,
    pub signal: Signal,
}

/// How the system containerd merges its files: from its release in the package status
/// under the root; without one, from the generation its binary holds
/// ([`super::embedded`]); else from its config (only containerd 2 reads version 3); else
/// both ways, and node-setup plans for both.
pub fn system_merges(host: &HostRoot, main: &Loaded) -> Result<SystemMerges> {
    let merge_of = |major: u32| {
        if major >= 2 {
            Merge::Keys
        } else {
            Merge::Replace
        }
    };
    if let Some(i) = super::packages::installed(host, CONTAINERD.packages)? {
        return Ok(SystemMerges {
            merges: vec![merge_of(i.release.0)],
            why: i.describe(),
            signal: Signal::Package,
        });
    }
    if let Some(g) = super::embedded::containerd_generation(host) {
        let merge = merge_of(g.major);
        return Ok(SystemMerges {
            merges: vec![merge],
            why: format!(
                "{} (no dpkg or opkg status under the root lists containerd; {})",
                merge.releases(),
                g.signal
            ),
            signal: Signal::Binary,
        });
    }
    Ok(if main.description.version_key == Some(3) {
        SystemMerges {
            merges: vec![Merge::Keys],
            why: format!(
                "config version 3 in {} (only containerd 2 reads it)",
                main.path
            ),
            signal: Signal::ConfigVersion,
        }
    } else {
        SystemMerges {
            merges: vec![Merge::Replace, Merge::Keys],
            why: "containerd's release is not known (no dpkg or opkg status under the root lists it, and no containerd binary holds its package paths): planning for containerd 1.x and 2.x".into(),
            signal: Signal::Unknown,
        }
    })
}

/// One file as the merge sees it: its `version` key and its CRI plugin tables, every
/// value with where it comes from.
#[derive(Debug, Clone)]
pub struct Layer {
    pub path: String,
    pub version_key: Option<i64>,
    pub plugins: Vec<(String, Node<Source>)>,
}

impl Layer {
    pub fn of(f: &Loaded) -> Layer {
        Layer {
            path: f.path.clone(),
            version_key: f.description.version_key,
            plugins: f
                .description
                .cri_plugins
                .iter()
                .map(|(k, n)| {
                    (
                        k.clone(),
                        n.map_at(&|line: &usize| Source::file(&f.path, *line)),
                    )
                })
                .collect(),
        }
    }

    /// What a k3s template renders, as far as node-setup knows it: config version
    /// `version`, the CRI plugin table with `runtimes` (the base always emits runc), and
    /// the default and runtime `name` as decided for the template (`default`, `binary`;
    /// set only where something sets them).
    pub fn k3s_template(
        path: &str,
        version: i64,
        name: &str,
        default: &Sourced<String>,
        binary: &Sourced<Option<String>>,
    ) -> Layer {
        let at = Source::file(path, 0);
        let mut containerd = Node::empty_table(at.clone());
        if !matches!(default.source, Source::Default { .. }) {
            containerd.insert(
                "default_runtime_name",
                Node::Value {
                    value: Value::from(default.value.as_str()),
                    at: default.source.clone(),
                },
            );
        }
        let mut runtimes = Node::empty_table(at.clone());
        if let Some(b) = &binary.value {
            let mut options = Node::empty_table(binary.source.clone());
            options.insert(
                "BinaryName",
                Node::Value {
                    value: Value::from(b.as_str()),
                    at: binary.source.clone(),
                },
            );
            let mut runtime = Node::empty_table(binary.source.clone());
            runtime.insert("options", options);
            runtimes.insert(name, runtime);
        }
        containerd.insert("runtimes", runtimes);
        let mut plugin = Node::empty_table(at);
        plugin.insert("containerd", containerd);
        let key = if version >= 3 { CRI_V3 } else { CRI_V2 };
        Layer {
            path: path.to_string(),
            version_key: Some(version),
            plugins: vec![(key.to_string(), plugin)],
        }
    }
}

/// The CRI plugin's runtime settings as containerd has them after loading every file.
#[derive(Debug, Clone)]
pub struct MergedCri {
    pub merge: Merge,
    /// The merged config's version.
    pub version: i64,
    /// The CRI plugin table containerd uses (`None`: no file has one).
    pub plugin: Option<Node<Source>>,
    /// The file whose CRI plugin table supplies it (Replace; `None` for Keys).
    replaced_by: Option<Source>,
    /// A deprecated `default_runtime` table that makes its own runtime the default
    /// (containerd 1.x): where it is.
    pub legacy_default: Option<Source>,
    /// Where a runtime setting takes effect: the index of the layer to write it into and
    /// the config version whose CRI plugin name to write it under.
    pub owner: (usize, i64),
    /// CRI plugin tables that containerd ignores, each explained.
    pub ignored: Vec<String>,
    /// What stops containerd from starting at all.
    pub conflicts: Vec<String>,
}

/// The `file:line` a source names, if any.
fn file_line(source: &Source) -> Option<(String, usize)> {
    match source {
        Source::File { file, line } | Source::Replaced { file, line } => {
            Some((file.clone(), *line))
        }
        _ => None,
    }
}

impl MergedCri {
    /// Merges `layers` (in load order) the way `merge` does.
    pub fn of(layers: &[Layer], merge: Merge) -> MergedCri {
        match merge {
            Merge::Replace => Self::replace(layers),
            Merge::Keys => Self::keys(layers),
        }
    }

    fn replace(layers: &[Layer]) -> MergedCri {
        let mut version = 1;
        for l in layers {
            if let Some(v) = l.version_key.filter(|v| *v != 0) {
                version = v;
            }
        }
        let key = if version == 1 { CRI_V1 } else { CRI_V2 };
        let tables: Vec<(usize, &Node<Source>)> = layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                l.plugins
                    .iter()
                    .filter(|(k, _)| k == key)
                    .map(move |(_, n)| (i, n))
            })
            .collect();
        let last = tables.last().copied();
        let replaced_by = match (tables.len(), last) {
            (2.., Some((_, n))) => {
                file_line(n.at()).map(|(file, line)| Source::Replaced { file, line })
            }
            _ => None,
        };
        let mut ignored = Vec::new();
        let mut conflicts = Vec::new();
        for l in layers {
            for (k, n) in &l.plugins {
                let at = n.at();
                if k == CRI_V1 && version != 1 {
                    conflicts.push(format!(
                        "{at}: containerd 1.x would not start: the merged config is version {version}, where [plugins.cri] (a version-1 table) is refused (invalid plugin key URI \"cri\"). Rename it [plugins.\"{CRI_V2}\"]"
                    ));
                } else if k != key && k != CRI_V1 {
                    ignored.push(format!(
                        "{at}: containerd 1.x ignores [plugins.\"{k}\"] here (it reads the CRI settings from [plugins.{}] in a config merged as version {version})",
                        if key == CRI_V1 { key.to_string() } else { format!("\"{key}\"") }
                    ));
                }
            }
        }
        let plugin = last.map(|(_, n)| n.clone());
        let legacy_default = plugin
            .as_ref()
            .and_then(|p| p.path(&["containerd", "default_runtime"]))
            .filter(|t| legacy_default_type(t).is_some())
            .map(|t| t.at().clone());
        let mut merged = MergedCri {
            merge: Merge::Replace,
            version,
            plugin,
            replaced_by,
            legacy_default,
            owner: (last.map_or(0, |(i, _)| i), version_of_cri_plugin(key)),
            ignored,
            conflicts,
        };
        merged.conflicts.extend(merged.legacy_options_conflicts());
        merged
    }

    /// containerd 1.x's CRI plugin does not load (pkg/cri/config ValidatePluginConfig)
    /// when its deprecated `systemd_cgroup` or `no_pivot` is on and the default runtime
    /// does not run under the legacy `io.containerd.runtime.v1.linux` shim.
    fn legacy_options_conflicts(&self) -> Vec<String> {
        let switches = self.legacy_switches();
        if switches.is_empty() {
            return Vec::new();
        }
        let default = self.default();
        let name = if self.legacy_default.is_some() {
            "default"
        } else {
            default.value.as_str()
        };
        let runtime_type = match self.containerd() {
            Some(c) if self.legacy_default.is_some() => c
                .get("default_runtime")
                .and_then(legacy_default_type)
                .map(String::from),
            Some(c) => c
                .path(&["runtimes", name, "runtime_type"])
                .and_then(Node::as_str)
                .map(String::from),
            None => None,
        }
        // (runc, containerd's own default, runs under io.containerd.runc.v2.)
        .unwrap_or_else(|| "io.containerd.runc.v2".into());
        if runtime_type == LINUX_V1 {
            return Vec::new();
        }
        switches
            .into_iter()
            .map(|(key, at)| format!(
                "{at}: containerd 1.x's CRI plugin would not load: the deprecated {key} only works while the default runtime runs under {LINUX_V1}, and '{name}' runs under {runtime_type} (pkg/cri/config ValidatePluginConfig). Remove {key} (for systemd_cgroup: set SystemdCgroup = true in the options of each runtime instead) and run apply again"
            ))
            .collect()
    }

    /// The deprecated CRI plugin switches that are on (containerd 1.x: `systemd_cgroup`,
    /// `no_pivot`), which need a default runtime under the legacy shim.
    pub fn legacy_switches(&self) -> Vec<(&'static str, Source)> {
        let Some(plugin) = self
            .plugin
            .as_ref()
            .filter(|_| self.merge == Merge::Replace)
        else {
            return Vec::new();
        };
        ["systemd_cgroup", "no_pivot"]
            .into_iter()
            .filter_map(|key| {
                let setting = plugin.get(key)?;
                setting
                    .value()?
                    .as_bool()
                    .filter(|on| *on)
                    .map(|_| (key, setting.at().clone()))
            })
            .collect()
    }

    fn keys(layers: &[Layer]) -> MergedCri {
        let mut version = 3;
        let mut grpc: Option<Node<Source>> = None;
        let mut runtime: Option<Node<Source>> = None;
        let (mut last_grpc, mut last_runtime) = (None, None);
        let mut ignored = Vec::new();
        for (i, l) in layers.iter().enumerate() {
            let own = l.version_key.unwrap_or(0);
            let migrated = own <= 1;
            if !migrated {
                version = own;
            }
            for (k, n) in &l.plugins {
                // (The last file with a table, and the name it gives it: containerd
                // renames a migrated file's `cri`, which is where an edit goes.)
                let (target, last) = match k.as_str() {
                    CRI_V1 if migrated => (&mut grpc, &mut last_grpc),
                    CRI_V1 => {
                        ignored.push(format!(
                            "{}: containerd 2 ignores [plugins.cri] in a file of config version {own}",
                            n.at()
                        ));
                        continue;
                    }
                    CRI_V2 => (&mut grpc, &mut last_grpc),
                    _ => (&mut runtime, &mut last_runtime),
                };
                match target {
                    Some(t) => t.merge_from(n),
                    None => *target = Some(n.clone()),
                }
                *last = Some((i, version_of_cri_plugin(k)));
            }
        }
        if version >= 3 {
            if let Some(g) = grpc.as_ref().and_then(|g| g.get("containerd")) {
                ignored.push(format!(
                    "{}: containerd 2 ignores the runtime settings of this version-1 or version-2 CRI table ([plugins.cri] or [plugins.\"{CRI_V2}\"]) in a config merged as version {version}: it reads [plugins.\"{CRI_V3}\"], and moves the older table's settings there only when the merged version is 2",
                    g.at()
                ));
            }
        } else if let Some(g) = &grpc {
            migrate_v2_runtime_settings(
                g,
                runtime.get_or_insert_with(|| Node::empty_table(g.at().clone())),
            );
        }
        let owner = match (last_runtime, last_grpc) {
            (Some(last), _) => last,
            (None, Some(last)) if version < 3 => last,
            _ => (0, version.min(3)),
        };
        MergedCri {
            merge: Merge::Keys,
            version,
            plugin: runtime,
            replaced_by: None,
            legacy_default: None,
            owner,
            ignored,
            conflicts: Vec::new(),
        }
    }

    fn containerd(&self) -> Option<&Node<Source>> {
        self.plugin.as_ref()?.get("containerd")
    }

    /// The default runtime and what decides it.
    pub fn default(&self) -> Sourced<String> {
        if let (Some(at), Some(legacy)) = (
            &self.legacy_default,
            self.containerd().and_then(|c| c.get("default_runtime")),
        ) {
            return Sourced::new(
                format!(
                    "default (the deprecated default_runtime table, runtime_type {})",
                    legacy_default_type(legacy).unwrap_or_default()
                ),
                at.clone(),
            );
        }
        match self
            .containerd()
            .and_then(|c| c.get("default_runtime_name"))
        {
            Some(n) => Sourced::new(
                n.as_str().map_or_else(
                    || n.value().map(|v| v.to_string()).unwrap_or_default(),
                    String::from,
                ),
                n.at().clone(),
            ),
            None => match &self.replaced_by {
                Some(r) => Sourced::new("runc".into(), r.clone()),
                None => Sourced::new(
                    "runc".into(),
                    Source::default("containerd's default (no file sets default_runtime_name)"),
                ),
            },
        }
    }

    /// The binary runtime `name` runs, and what decides it.
    pub fn binary(&self, name: &str) -> Sourced<Option<String>> {
        let runtime = self.containerd().and_then(|c| c.path(&["runtimes", name]));
        match runtime {
            Some(r) => match r.path(&["options", "BinaryName"]) {
                Some(b) => Sourced::new(
                    Some(b.as_str().unwrap_or("(not a string)").to_string()),
                    b.at().clone(),
                ),
                None => Sourced::new(Some("(no BinaryName)".into()), r.at().clone()),
            },
            None => match &self.replaced_by {
                Some(r) => Sourced::new(None, r.clone()),
                None => Sourced::new(
                    None,
                    Source::default(format!("no containerd file declares runtime '{name}'")),
                ),
            },
        }
    }

    /// What a new runtime `new_runtime` copies from the runtime pods use now.
    pub fn copy(&self, new_runtime: &str) -> Option<RuntimeCopy> {
        copy_from_plugin(
            self.plugin.as_ref(),
            new_runtime,
            self.merge == Merge::Replace,
        )
    }
}

/// containerd 2's move of a version-2 CRI table's runtime settings into the runtime
/// plugin's table (plugins/cri/runtime/plugin.go, migrateConfig): keys the destination
/// lacks, except those that moved to other plugins; `containerd` key by key (not its
/// image keys), `runtimes` as a whole.
fn migrate_v2_runtime_settings(src: &Node<Source>, dst: &mut Node<Source>) {
    const MOVED_ELSEWHERE: [&str; 14] = [
        "cni",
        "containerd",
        "sandbox_image",
        "registry",
        "image_decryption",
        "max_concurrent_downloads",
        "image_pull_progress_timeout",
        "image_pull_with_sync_fs",
        "stats_collect_period",
        "disable_tcp_service",
        "stream_server_address",
        "stream_server_port",
        "stream_idle_timeout",
        "enable_tls_streaming",
    ];
    for (k, v) in src.entries() {
        if !MOVED_ELSEWHERE.contains(&k.as_str())
            && k != "x509_key_pair_streaming"
            && dst.get(k).is_none()
        {
            dst.insert(k, v.clone());
        }
    }
    let Some(from) = src.get("containerd") else {
        return;
    };
    if dst.get("containerd").is_none() {
        dst.insert("containerd", Node::empty_table(from.at().clone()));
    }
    let to = dst.get_mut("containerd").expect("inserted above");
    for (k, v) in from.entries() {
        let image_key = matches!(
            k.as_str(),
            "snapshotter" | "disable_snapshot_annotations" | "discard_unpacked_layers"
        );
        if !image_key && to.get(k).is_none() {
            to.insert(k, v.clone());
        }
    }
}
