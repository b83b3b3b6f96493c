//! The reading primitives of the `--config` file, shared by [`super::file`] (the plain
//! sections) and [`super::sharing`] (the `sharing` section): the error type, the section
//! walker that matches keys NVIDIA's way and collects notes, and the scalar and name checks.
//! Kept apart so that both readers depend on it and neither on the other.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::yaml::{Node, Value};

/// NVIDIA's resource-name prefix, added to names given without it.
const RESOURCE_PREFIX: &str = "nvidia.com/";

/// A config file that could not be used: names the file, the line/column and the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid config file {}{}: {message}", path.display(), location(*line, *column))]
pub struct ConfigFileError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The key path (e.g. `sharing.timeSlicing.resources[0].replicas`) and what is wrong.
    pub message: String,
}

fn location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(", line {l}, column {c}"),
        (Some(l), None) => format!(", line {l}"),
        _ => String::new(),
    }
}

pub(super) fn fail<T>(node: &Node, message: String) -> Result<T, ConfigFileError> {
    Err(ConfigFileError {
        path: PathBuf::new(),
        line: Some(node.line),
        column: Some(node.column),
        message,
    })
}

/// Walks the tree, collecting notes.
#[derive(Default)]
pub(super) struct Reader {
    pub(super) notes: Vec<String>,
}

/// How a section matches its keys.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Keys {
    /// Go struct fields: case-insensitive, exact spelling preferred.
    AnyCase,
    /// Go `map[string]…` lookups: exact.
    Exact,
}

impl Reader {
    pub(super) fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// The entries of a mapping section (null = empty) by known key; the last of repeated
    /// keys wins, as in NVIDIA's reader. Unknown keys are noted and skipped.
    pub(super) fn section<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        known: &[&'static str],
        keys: Keys,
    ) -> Result<BTreeMap<&'static str, &'n Node>, ConfigFileError> {
        let mut found = BTreeMap::new();
        if node.is_null() {
            return Ok(found);
        }
        let Value::Map(entries) = &node.value else {
            return fail(
                node,
                format!("{path}: expected a mapping, found {}", node.kind()),
            );
        };
        for (key, value) in entries {
            let Value::Scalar { text, .. } = &key.value else {
                return fail(key, format!("{path}: keys must be strings"));
            };
            let exact = known.iter().find(|k| **k == text.as_str());
            let folded = known.iter().find(|k| k.eq_ignore_ascii_case(text));
            let matched = match keys {
                Keys::AnyCase => exact.or(folded),
                Keys::Exact => exact,
            };
            match matched {
                Some(k) => {
                    if found.insert(*k, value).is_some() {
                        self.note(format!(
                            "{}: `{path}.{k}` is set twice; the later value (line {}) is used",
                            at(key),
                            key.line
                        ));
                    }
                }
                None => {
                    let hint = match folded {
                        Some(k) => format!(
                            " (keys here are case-sensitive, as in NVIDIA's parser: did you mean `{k}`?)"
                        ),
                        None => String::new(),
                    };
                    self.note(format!(
                        "{}: unknown key `{path}.{text}` ignored{hint}",
                        at(key)
                    ));
                }
            }
        }
        Ok(found)
    }
}

/// `line L, column C` of a node, for notes.
pub(super) fn at(node: &Node) -> String {
    format!("line {}, column {}", node.line, node.column)
}

/// Reads an optional entry with `read`, which gets the node and its key path.
pub(super) fn opt<T>(
    section: &BTreeMap<&'static str, &Node>,
    key: &str,
    path: &str,
    read: impl Fn(&Node, &str) -> Result<Option<T>, ConfigFileError>,
) -> Result<Option<T>, ConfigFileError> {
    match section.get(key) {
        Some(node) => read(node, &format!("{path}.{key}")),
        None => Ok(None),
    }
}

/// A boolean: YAML 1.1's plain spellings (NVIDIA reads YAML 1.1); null is unset.
pub(super) fn boolean(node: &Node, path: &str) -> Result<Option<bool>, ConfigFileError> {
    if node.is_null() {
        return Ok(None);
    }
    if let Value::Scalar { text, plain: true } = &node.value {
        match text.as_str() {
            "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "y" | "Y" | "on" | "On" | "ON" => {
                return Ok(Some(true))
            }
            "false" | "False" | "FALSE" | "no" | "No" | "NO" | "n" | "N" | "off" | "Off"
            | "OFF" => return Ok(Some(false)),
            _ => {}
        }
    }
    fail(
        node,
        format!(
            "{path}: invalid value {}: expected true or false",
            shown(node)
        ),
    )
}

/// A string: any scalar; null is unset.
pub(super) fn string(node: &Node, path: &str) -> Result<Option<String>, ConfigFileError> {
    match &node.value {
        _ if node.is_null() => Ok(None),
        Value::Scalar { text, .. } => Ok(Some(text.clone())),
        _ => fail(
            node,
            format!("{path}: expected a string, found {}", node.kind()),
        ),
    }
}

/// An integer (plain decimal scalar); null is unset.
pub(super) fn integer(node: &Node, path: &str) -> Result<Option<i64>, ConfigFileError> {
    if node.is_null() {
        return Ok(None);
    }
    if let Value::Scalar { text, plain: true } = &node.value {
        if let Ok(n) = text.strip_prefix('+').unwrap_or(text).parse::<i64>() {
            return Ok(Some(n));
        }
    }
    fail(
        node,
        format!("{path}: invalid value {}: expected an integer", shown(node)),
    )
}

/// A list; null is empty.
pub(super) fn seq<'n>(node: &'n Node, path: &str) -> Result<&'n [Node], ConfigFileError> {
    match &node.value {
        _ if node.is_null() => Ok(&[]),
        Value::Seq(items) => Ok(items),
        _ => fail(
            node,
            format!("{path}: expected a list, found {}", node.kind()),
        ),
    }
}

/// A resource name, NVIDIA's way: `nvidia.com/` is prepended when missing; the part after
/// the prefix must be a DNS subdomain and the whole at most 63 characters. Names with another
/// prefix (which NVIDIA refuses) are kept as they are, for `--resource-name` other than
/// `nvidia.com/…`.
pub(super) fn resource_name(node: &Node, path: &str) -> Result<String, ConfigFileError> {
    let raw = match string(node, path)? {
        Some(n) if !n.is_empty() => n,
        _ => return fail(node, format!("{path}: no resource name specified")),
    };
    let full = if raw.contains('/') {
        raw.clone()
    } else {
        format!("{RESOURCE_PREFIX}{raw}")
    };
    if let Err(why) = crate::resource_name::check(&full) {
        return fail(node, format!("{path}: {why}"));
    }
    Ok(full)
}

/// A `devices` list entry NVIDIA accepts: GPU index, MIG index (`0:1`), GPU or MIG UUID.
pub(super) fn is_device_ref(s: &str) -> bool {
    let uint = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let uuid = |p: &str| {
        let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
        let parts: Vec<&str> = p.split('-').collect();
        match parts.as_slice() {
            [a, b, c, d, e] => hex(a, 8) && hex(b, 4) && hex(c, 4) && hex(d, 4) && hex(e, 12),
            [one] => hex(one, 32),
            _ => false,
        }
    };
    let gpu_uuid = |p: &str| p.strip_prefix("GPU-").is_some_and(uuid);
    if uint(s) || gpu_uuid(s) {
        return true;
    }
    if let Some((a, b)) = s.split_once(':') {
        return uint(a) && uint(b);
    }
    match s.strip_prefix("MIG-") {
        Some(rest) if uuid(rest) => true,
        Some(rest) => {
            let parts: Vec<&str> = rest.splitn(3, '/').collect();
            matches!(parts.as_slice(), [g, a, b] if gpu_uuid(g) && uint(a) && uint(b))
        }
        None => false,
    }
}

/// A scalar's text for messages.
pub(super) fn shown(node: &Node) -> String {
    match &node.value {
        Value::Scalar { text, plain: true } => format!("`{text}`"),
        Value::Scalar { text, plain: false } => format!("\"{text}\" (quoted: a string)"),
        _ => node.kind().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_refs_as_nvidia_accepts_them() {
        for ok in [
            "0",
            "0:0",
            "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
            "MIG-3eb87630-93d5-b2b6-b8ff-9b359caf4ee2",
            "MIG-GPU-662077db-fa3f-0d8f-9502-21ab0ef058a2/10/0",
        ] {
            assert!(is_device_ref(ok), "{ok}");
        }
        for bad in [
            "-1",
            "invalid-UUID",
            "GPU-UUID",
            "MIG-UUID",
            "MIG-GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
        ] {
            assert!(!is_device_ref(bad), "{bad}");
        }
    }
}
