//! The TOML layer under containerd's config: parsing with file-and-line errors, and
//! reading and editing tables and values addressed by a path of keys, e.g.
//! `["plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "nvidia"]`.
//! Edits go through `toml_edit`, so comments, key order and formatting stay; missing
//! tables on the way are created without a header of their own.

use std::path::Path;

use toml_edit::{DocumentMut, InlineTable, Item, Table, TomlError, Value};

use edgegpu_host::error::{line_column, Result, SetupError};

/// Parses `text` (lines of `file` from `line_offset` on).
pub(super) fn parse(file: &Path, text: &str, line_offset: usize) -> Result<DocumentMut> {
    text.parse::<DocumentMut>()
        .map_err(|e| malformed(file, text, &e, line_offset))
}

/// A TOML error as the operator needs it: file, line and column.
pub(super) fn malformed(file: &Path, text: &str, e: &TomlError, line_offset: usize) -> SetupError {
    let offset = e.span().map_or(0, |s| s.start);
    let (line, column) = line_column(text, offset);
    let message = e.message().trim().to_string();
    SetupError::Malformed {
        file: file.to_path_buf(),
        line: line + line_offset,
        column,
        message: format!("invalid TOML: {message}"),
    }
}

/// The 1-based line of `span` in `text` (0: no span).
pub(super) fn span_line(text: &str, span: Option<std::ops::Range<usize>>) -> usize {
    span.map_or(0, |s| line_column(text, s.start).0)
}

/// A key path as a TOML header writes it (`plugins."io.containerd.grpc.v1.cri"`).
pub(super) fn dotted<S: AsRef<str>>(path: &[S]) -> String {
    path.iter()
        .map(|k| {
            let k = k.as_ref();
            if k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                k.to_string()
            } else {
                format!("\"{k}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The table or value at `path` under `item` (tables and inline tables alike).
pub(super) fn get<'a>(item: &'a Item, path: &[&str]) -> Option<&'a Item> {
    path.iter()
        .try_fold(item, |cur, key| cur.as_table_like()?.get(key))
}

/// [`get`], for changing what is there.
pub(super) fn get_mut<'a>(item: &'a mut Item, path: &[&str]) -> Option<&'a mut Item> {
    path.iter()
        .try_fold(item, |cur, key| cur.as_table_like_mut()?.get_mut(key))
}

/// The table at `path` under `root`, creating the missing ones on the way (implicit
/// tables, or inline ones inside an inline table). Fails, naming the path, where a key
/// on the way holds something that is not a table.
pub(super) fn table_mut<'a>(
    file: &Path,
    root: &'a mut Item,
    path: &[&str],
) -> Result<&'a mut Item> {
    let not_a_table =
        |keys: &[&str]| SetupError::invalid(file, format!("{} is not a table", dotted(keys)));
    let mut cur = root;
    for (i, key) in path.iter().enumerate() {
        let inline = cur.is_inline_table();
        let table = cur
            .as_table_like_mut()
            .ok_or_else(|| not_a_table(&path[..i]))?;
        if table.get(key).is_none() {
            let new = if inline {
                Item::Value(Value::InlineTable(InlineTable::new()))
            } else {
                let mut t = Table::new();
                t.set_implicit(true);
                Item::Table(t)
            };
            table.insert(key, new);
        }
        cur = table.get_mut(key).expect("inserted above");
        if !cur.is_table_like() {
            return Err(not_a_table(&path[..=i]));
        }
    }
    Ok(cur)
}

/// Whether two values say the same thing: strings by content (containerd 2 writes
/// `'nvidia'` where others write `"nvidia"`), anything else by its TOML text.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_str(), b.as_str()) {
        (Some(a), Some(b)) => a == b,
        _ => a.to_string().trim() == b.to_string().trim(),
    }
}

/// Sets `key` of the table at `path` (created as needed) to `value` unless it already
/// says that; an old value's comments stay. Returns whether anything changed.
pub(super) fn set(
    file: &Path,
    root: &mut Item,
    path: &[&str],
    key: &str,
    value: Value,
) -> Result<bool> {
    let table = table_mut(file, root, path)?
        .as_table_like_mut()
        .expect("checked by table_mut");
    if let Some(old) = table.get_mut(key) {
        if let Some(old_value) = old.as_value() {
            if same_value(old_value, &value) {
                return Ok(false);
            }
            let decor = old_value.decor().clone();
            let mut value = value;
            *value.decor_mut() = decor;
            *old = Item::Value(value);
            return Ok(true);
        }
    }
    table.insert(key, Item::Value(value));
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRI: [&str; 3] = ["plugins", "io.containerd.grpc.v1.cri", "containerd"];

    #[test]
    fn paths_create_tables_and_set_values() {
        let file = Path::new("c.toml");
        let mut doc = parse(file, "version = 2\n", 0).unwrap();
        let root = doc.as_item_mut();
        let runtime = [&CRI[..], &["runtimes", "nvidia"]].concat();
        assert!(set(
            file,
            root,
            &runtime,
            "runtime_type",
            "io.containerd.runc.v2".into()
        )
        .unwrap());
        // The same value again changes nothing.
        assert!(!set(
            file,
            root,
            &runtime,
            "runtime_type",
            "io.containerd.runc.v2".into()
        )
        .unwrap());
        assert_eq!(
            doc.to_string(),
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n"
        );
        let root = doc.as_item_mut();
        let at = [&runtime[..], &["runtime_type"]].concat();
        assert_eq!(
            get(root, &at).and_then(Item::as_str),
            Some("io.containerd.runc.v2")
        );
        // Tables on the way that exist are not created again.
        assert!(set(file, root, &CRI, "default_runtime_name", "nvidia".into()).unwrap());
        assert_eq!(
            get_mut(root, &CRI)
                .and_then(|t| t.get("default_runtime_name"))
                .and_then(Item::as_str),
            Some("nvidia")
        );
    }

    #[test]
    fn a_value_on_the_path_is_named() {
        let file = Path::new("c.toml");
        let text = "[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd = \"oops\"\n";
        let mut doc = parse(file, text, 0).unwrap();
        let err = table_mut(file, doc.as_item_mut(), &CRI)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("plugins.\"io.containerd.grpc.v1.cri\".containerd is not a table"),
            "{err}"
        );
    }
}
