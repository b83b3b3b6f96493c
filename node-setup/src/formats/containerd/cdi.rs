//! The CDI settings of containerd's CRI plugin: `enable_cdi` and `cdi_spec_dirs`, keys of
//! the CRI plugin table itself — `plugins.cri` (config version 1) and
//! `plugins."io.containerd.grpc.v1.cri"` (2) in containerd 1.7 (pkg/cri/config
//! `PluginConfig`), `plugins."io.containerd.cri.v1.runtime"` (3) in containerd 2.x
//! (internal/cri/config `RuntimeConfig`; 2.x moves a version-2 CRI table there when it
//! loads it, plugins/cri/runtime/plugin.go). Read here into the file's description;
//! the edit is in `edit_cdi`.

use std::path::Path;

use toml_edit::Item;

use super::template::{template_value, Skeleton, VALUE_PLACEHOLDER};
use super::toml::{get, span_line};
use super::version::CriKeys;
use edgegpu_host::error::{Result, SetupError};

/// A setting one file decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting<T> {
    /// Written in the file (1-based line).
    Literal { value: T, line: usize },
    /// Decided by a template expression or inside a control structure: only rendering
    /// can tell (1-based line and its text).
    Unknown { line: usize, text: String },
}

/// `enable_cdi` and `cdi_spec_dirs` of one file.
pub(super) type Settings = (Option<Setting<bool>>, Option<Setting<Vec<String>>>);

/// `enable_cdi` and `cdi_spec_dirs` as `root` (a parsed skeleton of `file`) says them.
pub(super) fn read(file: &Path, sk: &Skeleton, root: &Item, keys: CriKeys) -> Result<Settings> {
    let cri = get(root, &["plugins", keys.plugin]);
    let key = |name: &str| cri.and_then(|c| get(c, &[name]));
    // The template text behind a value stood in for.
    let template_text = |item: &Item| {
        item.as_str()
            .filter(|v| v.starts_with(VALUE_PLACEHOLDER))
            .and_then(|v| template_value(sk, v))
    };
    // A line stood in for (a control structure, an expression) that mentions the key.
    let hidden = |name: &str| {
        sk.opaque
            .iter()
            .find(|(_, t)| t.contains(name))
            .map(|(l, t)| (l + 1, t.trim().to_string()))
    };
    let enable = match key("enable_cdi") {
        Some(item) => {
            let line = span_line(&sk.text, item.span());
            match item.as_bool() {
                Some(value) => Some(Setting::Literal { value, line }),
                None => Some(template_text(item).map(|text| Setting::Unknown { line, text }).ok_or_else(|| {
                    SetupError::invalid(
                        file,
                        format!(
                            "line {line}: enable_cdi must be true or false (containerd would not start), not {}",
                            item.to_string().trim()
                        ),
                    )
                })?),
            }
        }
        None => hidden("enable_cdi").map(|(line, text)| Setting::Unknown { line, text }),
    };
    let dirs = match key("cdi_spec_dirs") {
        Some(item) => {
            let line = span_line(&sk.text, item.span());
            let list: Option<Vec<String>> = item.as_array().and_then(|a| {
                a.iter()
                    .map(|v| v.as_str().map(String::from))
                    .collect::<Option<Vec<_>>>()
            });
            match list {
                Some(list) if list.iter().any(|d| d.starts_with(VALUE_PLACEHOLDER)) => {
                    Some(Setting::Unknown {
                        line,
                        text: item.to_string().trim().to_string(),
                    })
                }
                Some(value) => Some(Setting::Literal { value, line }),
                None => Some(template_text(item).map(|text| Setting::Unknown { line, text }).ok_or_else(|| {
                    SetupError::invalid(
                        file,
                        format!(
                            "line {line}: cdi_spec_dirs must be a list of directories (containerd would not start), not {}",
                            item.to_string().trim()
                        ),
                    )
                })?),
            }
        }
        None => hidden("cdi_spec_dirs").map(|(line, text)| Setting::Unknown { line, text }),
    };
    Ok((enable, dirs))
}
