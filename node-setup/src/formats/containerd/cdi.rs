//! The CDI settings of containerd's CRI plugin: `enable_cdi` and `cdi_spec_dirs`, keys of
//! the CRI plugin table itself — `plugins.cri` (config version 1) and
//! `plugins."io.containerd.grpc.v1.cri"` (2) in containerd 1.7 (pkg/cri/config
//! `PluginConfig`), `plugins."io.containerd.cri.v1.runtime"` (3) in containerd 2.x
//! (internal/cri/config `RuntimeConfig`; 2.x moves a version-2 CRI table there when it
//! loads it, plugins/cri/runtime/plugin.go). Read into the file's [`Description`] and
//! edited like the runtimes: comments, order and template lines stay.

use std::path::Path;

use toml_edit::{Item, Value};

use super::{
    child, describe_as, finish_edit, get, parse, place_new_tables_last, prepare, set, span_line,
    template_value, CriKeys, Description, Flavor, Skeleton, VALUE_PLACEHOLDER,
};
use crate::error::{Result, SetupError};
use crate::formats::Edit;

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

/// What a CDI edit must achieve in one file.
#[derive(Debug, Clone, Copy)]
pub struct CdiWant<'a> {
    /// Write `enable_cdi = true` into the CRI plugin table.
    pub enable: bool,
    /// Add this directory to the `cdi_spec_dirs` the file sets (a file that does not set
    /// them keeps containerd's default, which has it).
    pub spec_dir: Option<&'a str>,
    /// The config version whose CRI plugin name the file is read and written under, when
    /// not its own (an import without `version` is read with the merged config's).
    pub version: Option<i64>,
}

/// Plans the CDI edit of a containerd config (`flavor` System) or of a k3s template that
/// declares the CRI plugin table itself (a template with the base line cannot: the base
/// emits that table, and declaring it again stops containerd).
pub fn edit_cdi(file: &Path, text: Option<&str>, flavor: Flavor, want: CdiWant) -> Result<Edit> {
    let original = text.unwrap_or("");
    let sk = prepare(file, original, flavor)?;
    if sk.base_line.is_some() {
        return Err(SetupError::invalid(
            file,
            "internal error: the base template emits the CRI plugin table; it cannot be edited here",
        ));
    }
    let before = describe_as(file, Some(original), flavor, want.version)?;
    let by_hand = |what: &str, line: usize, text: &str| {
        SetupError::Refused(format!(
            "{}:{line}: {what} is decided by a template expression or inside a control structure ({text}); node-setup cannot change it. Edit the template by hand",
            file.display()
        ))
    };
    if want.enable {
        if let Some(Setting::Unknown { line, text }) = &before.enable_cdi {
            return Err(by_hand("enable_cdi", *line, text));
        }
    }
    if want.spec_dir.is_some() {
        if let Some(Setting::Unknown { line, text }) = &before.cdi_spec_dirs {
            return Err(by_hand("cdi_spec_dirs", *line, text));
        }
    }
    let keys = CriKeys::for_version(before.version);
    let mut doc = parse(file, &sk.text, 0)?;
    if original.trim().is_empty() && before.version != 1 {
        // Without a version key containerd would read the file as version 1.
        doc.insert("version", Item::Value(Value::from(before.version)));
    }
    let plugins = child(file, doc.as_item_mut(), "plugins", "")?;
    let cri = child(file, plugins, keys.plugin, "plugins")?;
    if want.enable {
        let new = cri
            .as_table_like()
            .map_or(true, |t| !t.contains_key("enable_cdi"));
        set(cri, "enable_cdi", Value::from(true));
        if new {
            indent_like_siblings(cri, "enable_cdi");
        }
    }
    if let Some(dir) = want.spec_dir {
        let table = cri.as_table_like_mut().expect("checked by child()");
        if let Some(list) = table.get_mut("cdi_spec_dirs").and_then(Item::as_array_mut) {
            if !list.iter().any(|d| d.as_str() == Some(dir)) {
                list.push(dir);
            }
        }
    }
    if matches!(flavor, Flavor::K3sTemplate { .. }) {
        place_new_tables_last(&mut doc);
    }
    let Some((out, after)) = finish_edit(
        file,
        original,
        original,
        &sk,
        &before,
        &doc.to_string(),
        flavor,
    )?
    else {
        return Ok(Edit::unchanged());
    };
    if !achieves(&after, want) {
        return Err(SetupError::invalid(
            file,
            "internal error: the edited configuration does not enable CDI as planned",
        ));
    }
    Ok(Edit {
        new: Some(out),
        notes: Vec::new(),
    })
}

/// Gives the new key `key` of `table` the indentation of the table's other keys, so that
/// the line we add looks like its neighbours.
fn indent_like_siblings(table: &mut Item, key: &str) {
    let Some(t) = table.as_table_mut() else {
        return;
    };
    let indent = t
        .iter()
        .filter(|(k, v)| *k != key && v.is_value())
        .find_map(|(k, _)| {
            let prefix = t.key(k)?.leaf_decor().prefix()?.as_str()?;
            let line = prefix.rsplit('\n').next().unwrap_or(prefix);
            line.chars()
                .all(|c| c == ' ' || c == '\t')
                .then(|| line.to_string())
        });
    if let (Some(indent), Some(mut k)) = (indent, t.key_mut(key)) {
        k.leaf_decor_mut().set_prefix(indent);
    }
}

/// Whether a file's description says what `want` asks.
fn achieves(d: &Description, want: CdiWant) -> bool {
    let enabled = matches!(d.enable_cdi, Some(Setting::Literal { value: true, .. }));
    let dirs = match (&d.cdi_spec_dirs, want.spec_dir) {
        (_, None) | (None, _) => true,
        (Some(Setting::Literal { value, .. }), Some(dir)) => value.iter().any(|d| d == dir),
        (Some(Setting::Unknown { .. }), Some(_)) => false,
    };
    (!want.enable || enabled) && dirs
}
