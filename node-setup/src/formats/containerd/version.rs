//! Which config version a containerd file is read with, and the CRI plugin's name and
//! key paths in each version (containerd docs/cri/config.md, docs/PLUGINS.md).

/// What kind of file is being edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// A plain containerd config.toml. A missing or empty file is written as version 2
    /// (read by containerd 1.x and migrated by 2.x).
    System,
    /// A k3s template; `version` is the config version its `base` template renders
    /// (3 for `config-v3.toml.tmpl`, 2 for `config.toml.tmpl`).
    K3sTemplate { version: i64 },
}

impl Flavor {
    /// The config version of a file without a `version` key, and of a missing or empty
    /// file (which we write with an explicit version).
    pub(super) fn implied_versions(self) -> (i64, i64) {
        match self {
            // NVIDIA's rule: no `version` key means 1; a new file is written as 2.
            Flavor::System => (1, 2),
            Flavor::K3sTemplate { version } => (version, version),
        }
    }
}

/// The CRI plugin's name in config version 1, 2 and 3: the table that holds the
/// runtimes (containerd docs/cri/config.md, docs/PLUGINS.md).
pub const CRI_V1: &str = "cri";
pub const CRI_V2: &str = "io.containerd.grpc.v1.cri";
pub const CRI_V3: &str = "io.containerd.cri.v1.runtime";

/// The config version whose CRI plugin table is named `plugin`.
pub fn version_of_cri_plugin(plugin: &str) -> i64 {
    match plugin {
        CRI_V1 => 1,
        CRI_V2 => 2,
        _ => 3,
    }
}

/// Key paths of the CRI plugin's `containerd` table, which differ only in the plugin's
/// name per config version: `cri` (1), `io.containerd.grpc.v1.cri` (2),
/// `io.containerd.cri.v1.runtime` (3) (containerd docs/cri/config.md, docs/PLUGINS.md).
#[derive(Debug, Clone, Copy)]
pub(super) struct CriKeys {
    pub(super) plugin: &'static str,
}

impl CriKeys {
    pub(super) fn for_version(version: i64) -> CriKeys {
        let plugin = match version {
            1 => CRI_V1,
            2 => CRI_V2,
            _ => CRI_V3,
        };
        CriKeys { plugin }
    }

    /// `plugins.<cri>.containerd`: holds `default_runtime_name` and `runtimes`.
    pub(super) fn containerd(self) -> [&'static str; 3] {
        ["plugins", self.plugin, "containerd"]
    }

    /// `plugins.<cri>.containerd.runtimes.<name>`.
    pub(super) fn runtime(self, name: &str) -> [&str; 5] {
        ["plugins", self.plugin, "containerd", "runtimes", name]
    }
}
