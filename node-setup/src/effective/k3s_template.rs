//! k3s's own containerd config: the template k3s renders it from, the drop-ins k3s's
//! base template imports, and the NVIDIA runtimes k3s registers by itself when it finds
//! their binaries. Shared by both modes' effective views and by `plan`.

use super::containerd::{load_with_imports, Loaded};
use super::inventory::Inventory;
use super::k3s::{K3s, K3S_TEMPLATES};
use super::k3s_version::K3sVersion;
use crate::formats::containerd::Flavor;
use edgegpu_host::error::Result;
use edgegpu_host::root::HostRoot;

/// Runtimes k3s registers by itself when it finds their binary, and that binary's name
/// (k3s pkg/agent/containerd/runtimes.go).
const DETECTED: [(&str, &str); 3] = [
    ("nvidia", "nvidia-container-runtime"),
    (
        "nvidia-experimental",
        "nvidia-container-runtime-experimental",
    ),
    ("nvidia-cdi", "nvidia-container-runtime.cdi"),
];
/// Searched by k3s for the NVIDIA runtimes besides its PATH (the GPU Operator's toolkit).
pub const EXTRA_SEARCH_DIRS: [&str; 1] = ["/usr/local/nvidia/toolkit"];
/// The first k3s release whose base template imports `<template>.d/*.toml` itself: k3s
/// PR #13680 was merged into the main branch in February 2026, after v1.35 branched
/// (backports to older minors unverified).
pub const BASE_IMPORTS_DROP_INS: K3sVersion = K3sVersion::new(1, 36, 0);

/// A k3s template: its path, the config version its base renders, whether it exists.
pub struct Template {
    pub path: String,
    pub version: i64,
    pub text: Option<String>,
}

impl Template {
    /// The directory of drop-ins k3s's base template imports (k3s PR #13680):
    /// `config-v3.toml.d` next to `config-v3.toml.tmpl`, `config.toml.d` next to
    /// `config.toml.tmpl`.
    pub fn drop_in_dir(&self) -> String {
        format!("{}.d", self.path.trim_end_matches(".tmpl"))
    }
}

/// k3s services that render their own containerd config, one per template dir.
pub fn services(inv: &Inventory) -> Vec<&K3s> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for k in &inv.k3s {
        let key = (k.template_dir(), k.drop_in_dir());
        if !seen.contains(&key) {
            seen.push(key);
            out.push(k);
        }
    }
    out
}

/// The template k3s uses (the first that exists), or the one we would create.
pub fn template(host: &HostRoot, inv: &Inventory, k: &K3s) -> Result<Template> {
    let dir = k.template_dir();
    for (name, version) in K3S_TEMPLATES {
        let path = format!("{dir}/{name}");
        if let Some(text) = host.read(&path)? {
            return Ok(Template {
                path,
                version,
                text: Some(text),
            });
        }
    }
    let v3 = inv.version().map_or(true, |v| v.uses_containerd2());
    let (name, version) = if v3 {
        K3S_TEMPLATES[0]
    } else {
        K3S_TEMPLATES[1]
    };
    Ok(Template {
        path: format!("{dir}/{name}"),
        version,
        text: None,
    })
}

/// The binaries k3s finds for runtime `name` on its own (k3s looks the NVIDIA runtimes'
/// binaries up on its PATH, plus the GPU Operator's toolkit directory), distinct files
/// only, in PATH order. Empty for other names.
pub fn detects(host: &HostRoot, k: &K3s, name: &str) -> Vec<String> {
    let Some((_, binary)) = DETECTED.iter().find(|(n, _)| *n == name) else {
        return Vec::new();
    };
    let path = k.path();
    let dirs = path.value.split(':').chain(EXTRA_SEARCH_DIRS);
    host.executables_in(dirs, binary)
}

/// Files the template imports (`imported`, in load order), and, when k3s's base is
/// used, the template drop-in directory the base imports (k3s PR #13680): they load
/// after the template and override it.
pub fn add_drop_ins(
    host: &HostRoot,
    t: &Template,
    uses_base: bool,
    imported: &mut Vec<Loaded>,
) -> Result<()> {
    if uses_base {
        for f in host.list_dir(&t.drop_in_dir(), ".toml")? {
            if !imported.iter().any(|l: &Loaded| l.path == f) {
                imported.extend(load_with_imports(host, &f, Flavor::System)?);
            }
        }
    }
    Ok(())
}
