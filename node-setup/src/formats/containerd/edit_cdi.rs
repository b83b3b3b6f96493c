//! The CDI edit: `enable_cdi = true` and our spec directory in the `cdi_spec_dirs` of the
//! CRI plugin table, edited like the runtimes (comments, order and template lines stay).

use std::path::Path;

use toml_edit::{Item, Value};

use super::cdi::Setting;
use super::describe::{describe_as, Description};
use super::edit::finish_edit;
use super::template::{place_new_tables_last, prepare};
use super::toml::{self, parse};
use super::version::{CriKeys, Flavor};
use crate::formats::Edit;
use edgegpu_host::error::{Result, SetupError};

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
    let root = doc.as_item_mut();
    let cri = ["plugins", keys.plugin];
    let cri_table = toml::table_mut(file, root, &cri)?;
    if want.enable {
        let new = cri_table
            .as_table_like()
            .map_or(true, |t| !t.contains_key("enable_cdi"));
        toml::set(file, root, &cri, "enable_cdi", Value::from(true))?;
        if new {
            indent_like_siblings(toml::table_mut(file, root, &cri)?, "enable_cdi");
        }
    }
    let dirs = [&cri[..], &["cdi_spec_dirs"]].concat();
    if let (Some(dir), Some(Item::Value(Value::Array(list)))) =
        (want.spec_dir, toml::get_mut(root, &dirs))
    {
        if !list.iter().any(|d| d.as_str() == Some(dir)) {
            list.push(dir);
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
