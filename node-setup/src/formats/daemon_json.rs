//! Docker's `/etc/docker/daemon.json`: merge `runtimes.<name>` and `default-runtime`,
//! keeping every other key and the key order (serde_json with `preserve_order`).
//! A key written twice is refused: dockerd keeps the last one silently, and which one
//! the operator meant is unknown.

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::Edit;
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::error::{Result, SetupError};

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
        let value = serde_json::from_str::<Strict>(body)
            .map_err(|e| {
                let what = if e.is_data() { "" } else { "invalid JSON: " };
                SetupError::Malformed {
                    file: file.to_path_buf(),
                    line: e.line(),
                    column: e.column(),
                    message: format!("{what}{e}")
                        .replace(&format!(" at line {} column {}", e.line(), e.column()), ""),
                }
            })?
            .0;
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

    /// The `path` of runtime `name`, if it is a path runtime.
    pub fn runtime_path(&self, name: &str) -> Option<&str> {
        self.root
            .get("runtimes")
            .and_then(|r| r.get(name))
            .and_then(|e| e.get("path"))
            .and_then(|p| p.as_str())
    }

    /// Whether `runtimes.<name>` runs `path` the way we configure it. With
    /// `bare_name_ok`, a path without a slash that names the binary counts (JetPack
    /// writes `"path": "nvidia-container-runtime"`, which dockerd looks up on its PATH;
    /// the caller checked that this finds the same binary).
    fn runtime_configured(&self, spec: &RuntimeSpec, bare_name_ok: bool) -> bool {
        let Some(entry) = self
            .root
            .get("runtimes")
            .and_then(|r| r.get(&spec.name))
            .and_then(|e| e.as_object())
        else {
            return false;
        };
        let path = entry.get("path").and_then(|p| p.as_str());
        let basename = spec.path.rsplit('/').next();
        let path_ok = path == Some(spec.path.as_str()) || (bare_name_ok && path == basename);
        path_ok
            && !entry.contains_key("runtimeType")
            && !entry.contains_key("options")
            && entry.get("runtimeArgs").map_or(true, |a| a.is_array())
    }

    /// `features.<name>`: `Some(bool)` when the file sets it. dockerd decodes `features`
    /// into a map of booleans, so anything else there would stop it.
    pub fn feature(&self, file: &Path, name: &str) -> Result<Option<bool>> {
        let Some(features) = self.root.get("features") else {
            return Ok(None);
        };
        let Some(map) = features.as_object() else {
            return Err(SetupError::invalid(
                file,
                "\"features\" must be a JSON object of booleans",
            ));
        };
        match map.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(SetupError::invalid(
                file,
                format!("\"features\".\"{name}\" must be true or false, not {other}"),
            )),
        }
    }

    /// `cdi-spec-dirs` (Docker 25+): `Some(list)` when the file sets it.
    pub fn cdi_spec_dirs(&self, file: &Path) -> Result<Option<Vec<String>>> {
        let Some(dirs) = self.root.get("cdi-spec-dirs") else {
            return Ok(None);
        };
        dirs.as_array()
            .and_then(|a| {
                a.iter()
                    .map(|d| d.as_str().map(String::from))
                    .collect::<Option<Vec<_>>>()
            })
            .map(Some)
            .ok_or_else(|| {
                SetupError::invalid(file, "\"cdi-spec-dirs\" must be a list of directories")
            })
    }

    pub fn default_runtime(&self) -> Option<&str> {
        self.root.get("default-runtime").and_then(|d| d.as_str())
    }

    /// Applies the change in memory; true if anything changed.
    fn merge(&mut self, spec: &RuntimeSpec, want: Want) -> bool {
        let mut changed = false;
        if !self.runtime_configured(spec, want.bare_name_ok) {
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
        if want.set_default && self.default_runtime() != Some(spec.name.as_str()) {
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

/// Whether reloading dockerd (`systemctl reload docker`: SIGHUP) makes a dockerd
/// running on daemon.json `old` use the runtimes and default runtime it would start with
/// from `new` (`None`: no file). dockerd's reload adds and changes, but never removes:
/// it replaces `runtimes` only when the file sets that key, and the default runtime only
/// when the file names one; without the file it fails (`--config-file` given) or keeps
/// everything (moby daemon/reload_unix.go, reloadPlatform, and daemon/config/config.go,
/// Reload; the same from v20.10 to the current release). So a change that takes the
/// `runtimes` key or `default-runtime` away, or the file itself, needs a restart: after a
/// reload the running daemon would keep the old runtime, and as its default. A file that
/// does not parse gets a restart too (it is never reload's job to tell).
pub fn reload_applies(old: Option<&str>, new: Option<&str>) -> bool {
    let parse = |text: &str| DaemonJson::parse(Path::new("daemon.json"), text).ok();
    let Some(new) = new.and_then(parse) else {
        return false;
    };
    let old = match old {
        Some(text) => match parse(text) {
            Some(doc) => doc,
            None => return false,
        },
        None => DaemonJson {
            root: Map::new(),
            indent: String::new(),
        },
    };
    let names_default = |d: &DaemonJson| d.default_runtime().is_some_and(|r| !r.is_empty());
    let runtimes_reach = new.root.contains_key("runtimes") || !old.root.contains_key("runtimes");
    let default_reaches = names_default(&new) || !names_default(&old);
    runtimes_reach && default_reaches
}

/// What the daemon.json edit must achieve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// Write `default-runtime` (false when only registering, or when a dockerd flag
    /// sets it: dockerd refuses the same setting in both places).
    pub set_default: bool,
    /// An existing entry whose `path` is the binary's bare name is kept (it resolves to
    /// the runtime on dockerd's PATH).
    pub bare_name_ok: bool,
}

/// Plans the daemon.json edit; no change when already configured.
pub fn edit(file: &Path, text: Option<&str>, spec: &RuntimeSpec, want: Want) -> Result<Edit> {
    let mut doc = DaemonJson::parse(file, text.unwrap_or(""))?;
    if !doc.merge(spec, want) {
        return Ok(Edit::unchanged());
    }
    let rendered = doc.render();
    // Round-trip our own output before it may be written.
    let check = DaemonJson::parse(file, &rendered)?;
    if !check.runtime_configured(spec, want.bare_name_ok)
        || (want.set_default && check.default_runtime() != Some(&spec.name))
    {
        return Err(SetupError::invalid(
            file,
            "internal error: merged JSON does not round-trip",
        ));
    }
    Ok(Edit::replace(text, rendered))
}

/// What the daemon.json edit for CDI must achieve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CdiWant<'a> {
    /// Set `features.cdi` to true, keeping the other features (false when a `--feature`
    /// flag decides: dockerd refuses `features` given both ways).
    pub enable: bool,
    /// Add this directory to the `cdi-spec-dirs` the file sets (a file that does not set
    /// them keeps dockerd's default, which has it).
    pub spec_dir: Option<&'a str>,
}

/// Plans the daemon.json edit for CDI mode; no change when the file already says it.
pub fn edit_cdi(file: &Path, text: Option<&str>, want: CdiWant) -> Result<Edit> {
    let mut doc = DaemonJson::parse(file, text.unwrap_or(""))?;
    let mut changed = false;
    if want.enable && doc.feature(file, "cdi")? != Some(true) {
        let features = doc
            .root
            .entry("features")
            .or_insert_with(|| Value::Object(Map::new()));
        features
            .as_object_mut()
            .expect("checked by feature()")
            .insert("cdi".into(), Value::Bool(true));
        changed = true;
    }
    if let Some(dir) = want.spec_dir {
        if let Some(dirs) = doc.cdi_spec_dirs(file)? {
            if !dirs.iter().any(|d| d == dir) {
                doc.root
                    .get_mut("cdi-spec-dirs")
                    .and_then(Value::as_array_mut)
                    .expect("checked by cdi_spec_dirs()")
                    .push(Value::String(dir.to_string()));
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(Edit::unchanged());
    }
    let rendered = doc.render();
    // Round-trip our own output before it may be written.
    let check = DaemonJson::parse(file, &rendered)?;
    let dirs_ok = match (want.spec_dir, check.cdi_spec_dirs(file)?) {
        (Some(dir), Some(dirs)) => dirs.iter().any(|d| d == dir),
        _ => true,
    };
    if (want.enable && check.feature(file, "cdi")? != Some(true)) || !dirs_ok {
        return Err(SetupError::invalid(
            file,
            "internal error: merged JSON does not round-trip",
        ));
    }
    Ok(Edit::replace(text, rendered))
}

/// A JSON value read with duplicate object keys refused (serde_json keeps the last one
/// silently, as dockerd does).
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "duplicate key \"{key}\": dockerd would silently use the last one; remove one of them"
                )));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}
