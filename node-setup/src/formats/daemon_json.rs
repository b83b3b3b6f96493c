//! Docker's `/etc/docker/daemon.json`: merge `runtimes.<name>` and `default-runtime`,
//! keeping every other key and the key order (serde_json with `preserve_order`).

use std::path::Path;

use serde_json::{Map, Value};

use super::Edit;
use crate::error::{Result, SetupError};
use crate::RuntimeSpec;

/// Runtime names dockerd reserves for itself (moby daemon/config: `runtime name 'runc' is
/// reserved`).
pub const DOCKER_BUILTIN_RUNTIMES: [&str; 2] = ["runc", "io.containerd.runc.v2"];

/// Parsed daemon.json plus what is needed to write it back in the same style.
#[derive(Debug)]
pub struct DaemonJson {
    pub root: Map<String, Value>,
    indent: String,
}

impl DaemonJson {
    /// Parses daemon.json. Empty or whitespace-only content is `{}` (dockerd accepts it);
    /// a UTF-8 byte-order mark is skipped like dockerd does.
    pub fn parse(file: &Path, text: &str) -> Result<DaemonJson> {
        let body = text.strip_prefix('\u{feff}').unwrap_or(text);
        let indent = detect_indent(body);
        if body.trim().is_empty() {
            return Ok(DaemonJson {
                root: Map::new(),
                indent,
            });
        }
        let value: Value = serde_json::from_str(body).map_err(|e| SetupError::Malformed {
            file: file.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: format!("invalid JSON: {e}")
                .replace(&format!(" at line {} column {}", e.line(), e.column()), ""),
        })?;
        let Value::Object(root) = value else {
            return Err(SetupError::Malformed {
                file: file.to_path_buf(),
                line: 1,
                column: 1,
                message: "the top level must be a JSON object".into(),
            });
        };
        if let Some(r) = root.get("runtimes") {
            if !r.is_object() {
                return Err(SetupError::invalid(
                    file,
                    "\"runtimes\" must be a JSON object",
                ));
            }
        }
        if let Some(d) = root.get("default-runtime") {
            if !d.is_string() {
                return Err(SetupError::invalid(
                    file,
                    "\"default-runtime\" must be a string",
                ));
            }
        }
        Ok(DaemonJson { root, indent })
    }

    /// Whether `runtimes.<name>` runs `path` the way we configure it.
    fn runtime_configured(&self, spec: &RuntimeSpec) -> bool {
        let Some(entry) = self
            .root
            .get("runtimes")
            .and_then(|r| r.get(&spec.name))
            .and_then(|e| e.as_object())
        else {
            return false;
        };
        entry.get("path").and_then(|p| p.as_str()) == Some(spec.path.as_str())
            && !entry.contains_key("runtimeType")
            && !entry.contains_key("options")
            && entry.get("runtimeArgs").map_or(true, |a| a.is_array())
    }

    fn default_runtime(&self) -> Option<&str> {
        self.root.get("default-runtime").and_then(|d| d.as_str())
    }

    /// Applies the change in memory; true if anything changed.
    fn merge(&mut self, spec: &RuntimeSpec) -> bool {
        let mut changed = false;
        if !self.runtime_configured(spec) {
            let runtimes = self
                .root
                .entry("runtimes")
                .or_insert_with(|| Value::Object(Map::new()));
            let runtimes = runtimes.as_object_mut().expect("checked in parse");
            // Replace the whole entry: a `runtimeType` or `options` left next to `path`
            // would stop dockerd. Inserting an existing key keeps its position.
            let mut entry = Map::new();
            entry.insert("path".into(), Value::String(spec.path.clone()));
            entry.insert("runtimeArgs".into(), Value::Array(Vec::new()));
            runtimes.insert(spec.name.clone(), Value::Object(entry));
            changed = true;
        }
        if spec.set_default && self.default_runtime() != Some(spec.name.as_str()) {
            self.root
                .insert("default-runtime".into(), Value::String(spec.name.clone()));
            changed = true;
        }
        changed
    }

    /// Pretty-printed with the indentation the file used (default two spaces), ending
    /// in a newline.
    fn render(&self) -> String {
        use serde::Serialize;
        let mut out = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(self.indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
        Value::Object(self.root.clone())
            .serialize(&mut ser)
            .expect("serialising a JSON value to memory cannot fail");
        let mut text = String::from_utf8(out).expect("serde_json writes UTF-8");
        text.push('\n');
        text
    }
}

/// The indentation of the first indented line (spaces or tabs), default two spaces.
fn detect_indent(text: &str) -> String {
    text.lines()
        .skip(1)
        .map(|l| &l[..l.len() - l.trim_start_matches([' ', '\t']).len()])
        .find(|i| !i.is_empty())
        .unwrap_or("  ")
        .to_string()
}

/// Plans the daemon.json edit; no change when already configured.
pub fn edit(file: &Path, text: Option<&str>, spec: &RuntimeSpec) -> Result<Edit> {
    let mut doc = DaemonJson::parse(file, text.unwrap_or(""))?;
    if !doc.merge(spec) {
        return Ok(Edit::unchanged());
    }
    let rendered = doc.render();
    // Round-trip our own output before it may be written.
    let check = DaemonJson::parse(file, &rendered)?;
    if !check.runtime_configured(spec)
        || (spec.set_default && check.default_runtime() != Some(&spec.name))
    {
        return Err(SetupError::invalid(
            file,
            "internal error: merged JSON does not round-trip",
        ));
    }
    Ok(Edit::replace(text, rendered))
}
