//! k3s's own configuration: `/etc/rancher/k3s/config.yaml` plus the drop-ins in
//! `config.yaml.d/*.yaml` (applied in name order, later value wins).
//!
//! Only flat top-level `key: value` lines are read: the keys this tool cares about
//! (`default-runtime`, `docker`) are scalars, and a full YAML parser would not let us
//! write the drop-in any more safely.

use crate::error::Result;
use crate::host::HostRoot;

const CONFIG_FILE: &str = "/etc/rancher/k3s/config.yaml";
const DROP_IN_DIR: &str = "/etc/rancher/k3s/config.yaml.d";

/// A scalar setting and the file that set it last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub value: String,
    pub file: String,
}

/// config.yaml first, then the drop-ins by name: the order k3s applies them.
fn sort_like_k3s(files: &mut [String]) {
    files.sort_by(|a, b| (a != CONFIG_FILE, a.as_str()).cmp(&(b != CONFIG_FILE, b.as_str())));
}

/// The config files in the order k3s applies them.
fn files(host: &HostRoot) -> Result<Vec<String>> {
    let mut files = Vec::new();
    if host.exists(CONFIG_FILE) {
        files.push(CONFIG_FILE.to_string());
    }
    files.extend(host.list_dir(DROP_IN_DIR, ".yaml")?);
    files.extend(host.list_dir(DROP_IN_DIR, ".yml")?);
    sort_like_k3s(&mut files);
    Ok(files)
}

/// Top-level scalar value of `key` in one YAML text.
fn scalar(text: &str, key: &str) -> Option<String> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t', '#', '-']) {
            continue;
        }
        let Some(rest) = line.strip_prefix(key) else {
            continue;
        };
        let Some(value) = rest.trim_start().strip_prefix(':') else {
            continue;
        };
        let value = value.split(" #").next().unwrap_or("").trim();
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        found = Some(value.to_string());
    }
    found
}

/// The effective value of `key` over config.yaml and its drop-ins, optionally pretending
/// that `extra` (path, content) exists too.
pub fn effective(
    host: &HostRoot,
    key: &str,
    extra: Option<(&str, &str)>,
) -> Result<Option<Setting>> {
    let mut files = files(host)?;
    if let Some((path, _)) = extra {
        if !files.iter().any(|f| f == path) {
            files.push(path.to_string());
            sort_like_k3s(&mut files);
        }
    }
    let mut last = None;
    for file in files {
        let text = match extra {
            Some((path, content)) if path == file => Some(content.to_string()),
            _ => host.read(&file)?,
        };
        if let Some(value) = text.as_deref().and_then(|t| scalar(t, key)) {
            last = Some(Setting { value, file });
        }
    }
    Ok(last)
}

/// Content of a drop-in of ours that sets one `key: value`, with a comment saying why.
pub fn drop_in(why: &str, key: &str, value: &str) -> String {
    format!(
        "# Written by edgegpu-node-setup: {why}.\n# Undo with `edgegpu-node-setup revert`.\n{key}: {value}\n"
    )
}
