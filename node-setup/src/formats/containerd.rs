//! containerd's TOML configuration (system containerd and k3s's `config*.toml.tmpl`
//! templates), edited with `toml_edit` so that comments, key order and formatting stay.

use std::path::Path;

use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};

use super::Edit;
use crate::error::{line_column, Result, SetupError};
use crate::RuntimeSpec;

/// Runtime names k3s registers by itself when it finds the binary on its PATH
/// (k3s pkg/agent/containerd/runtimes.go); the `base` template emits their tables, so a
/// template must never declare them again.
const K3S_AUTODETECTED_RUNTIMES: [&str; 3] = ["nvidia", "nvidia-experimental", "nvidia-cdi"];

/// The runc v2 shim: NVIDIA's runtime is runc-compatible and runs under it.
const RUNC_V2: &str = "io.containerd.runc.v2";

/// Prefix of the comment that stands in for a Go-template line while the TOML is parsed.
const PLACEHOLDER: &str = "#edgegpu-node-setup:template-line:";
/// A `key = {{ ... }}` line keeps its key (so it stays in its table while tables are
/// added around it); only the value is replaced by this string.
const VALUE_PLACEHOLDER: &str = "@@edgegpu-node-setup:template-value:";

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
    fn implied_versions(self) -> (i64, i64) {
        match self {
            // NVIDIA's rule: no `version` key means 1; a new file is written as 2.
            Flavor::System => (1, 2),
            Flavor::K3sTemplate { version } => (version, version),
        }
    }
}

/// What a file already provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub version: i64,
    pub runtime: bool,
    pub default: bool,
}

/// Key paths of the CRI plugin's `containerd` table, which differ only in the plugin's
/// name per config version: `cri` (1), `io.containerd.grpc.v1.cri` (2),
/// `io.containerd.cri.v1.runtime` (3) (containerd docs/cri/config.md, docs/PLUGINS.md).
#[derive(Debug, Clone, Copy)]
struct CriKeys {
    plugin: &'static str,
}

impl CriKeys {
    fn for_version(version: i64) -> CriKeys {
        let plugin = match version {
            1 => "cri",
            2 => "io.containerd.grpc.v1.cri",
            _ => "io.containerd.cri.v1.runtime",
        };
        CriKeys { plugin }
    }

    /// `plugins.<cri>.containerd`: holds `default_runtime_name` and `runtimes`.
    fn containerd(self) -> [&'static str; 3] {
        ["plugins", self.plugin, "containerd"]
    }

    /// `plugins.<cri>.containerd.runtimes.<name>`.
    fn runtime(self, name: &str) -> [&str; 5] {
        ["plugins", self.plugin, "containerd", "runtimes", name]
    }

    /// `plugins.<cri>.containerd.runtimes.<name>.options.<key>`.
    fn runtime_option<'a>(self, name: &'a str, key: &'a str) -> [&'a str; 7] {
        let [a, b, c, d, e] = self.runtime(name);
        [a, b, c, d, e, "options", key]
    }

    /// `plugins."<cri>".containerd`, as a person would write the table header.
    fn containerd_header(self) -> String {
        format!("plugins.\"{}\".containerd", self.plugin)
    }
}

/// How one Go-template line was replaced.
enum TemplateLine {
    /// The whole line became a comment.
    Line(String),
    /// Only the value of `key = value` was replaced; holds the original value text.
    Value(String),
}

/// Template bookkeeping: Go-template lines replaced by TOML stand-ins, restored after
/// editing.
struct Stripped {
    text: String,
    lines: Vec<TemplateLine>,
    /// 0-based line index of `{{ template "base" . }}`.
    base_line: Option<usize>,
}

impl Stripped {
    /// The original template lines and values, for conflict checks.
    fn originals(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(|l| match l {
            TemplateLine::Line(s) | TemplateLine::Value(s) => s.as_str(),
        })
    }
}

fn is_base_line(line: &str) -> bool {
    let t = line.trim();
    let Some(inner) = t.strip_prefix("{{").and_then(|s| s.strip_suffix("}}")) else {
        return false;
    };
    let inner = inner.trim_start_matches('-').trim_end_matches('-');
    inner.split_whitespace().collect::<Vec<_>>() == ["template", "\"base\"", "."]
}

/// `Some(index of '=')` when the line is `key = value` with the markup in the value.
fn value_assignment(body: &str) -> Option<usize> {
    let eq = body.find('=')?;
    let key = body[..eq].trim();
    let markup = body.find("{{")?;
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\'' | ' '));
    (key_ok && eq < markup).then_some(eq)
}

fn strip_template(text: &str) -> Stripped {
    let mut lines = Vec::new();
    let mut base_line = None;
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if !body.contains("{{") {
            out.push_str(line);
            continue;
        }
        let n = lines.len();
        match value_assignment(body) {
            Some(eq) => {
                let value = &body[eq + 1..];
                let lead = &value[..value.len() - value.trim_start().len()];
                out.push_str(&format!(
                    "{}{lead}\"{VALUE_PLACEHOLDER}{n}@@\"{nl}",
                    &body[..=eq]
                ));
                lines.push(TemplateLine::Value(value.trim_start().to_string()));
            }
            None => {
                if base_line.is_none() && is_base_line(body) {
                    base_line = Some(i);
                }
                out.push_str(&format!("{PLACEHOLDER}{n}{nl}"));
                lines.push(TemplateLine::Line(body.to_string()));
            }
        }
    }
    Stripped {
        text: out,
        lines,
        base_line,
    }
}

fn restore_template(file: &Path, text: &str, lines: &[TemplateLine]) -> Result<String> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut next_line = 0;
    let mut values_seen = vec![false; lines.len()];
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if let Some(n) = body.trim().strip_prefix(PLACEHOLDER) {
            // Whole-line stand-ins must come back once each, in their order.
            while matches!(lines.get(next_line), Some(TemplateLine::Value(_))) {
                next_line += 1;
            }
            match (n.parse::<usize>().ok(), lines.get(next_line)) {
                (Some(n), Some(TemplateLine::Line(original))) if n == next_line => {
                    out.push_str(original);
                    out.push_str(nl);
                    next_line += 1;
                    continue;
                }
                _ => {
                    return Err(SetupError::invalid(
                        file,
                        "template lines were reordered while editing; edit the template by hand",
                    ))
                }
            }
        }
        let mut restored = body.to_string();
        while let Some(start) = restored.find(&format!("\"{VALUE_PLACEHOLDER}")) {
            let rest = &restored[start + 1 + VALUE_PLACEHOLDER.len()..];
            let end = rest.find("@@\"").ok_or_else(|| {
                SetupError::invalid(file, "template value placeholder damaged while editing")
            })?;
            let n: usize = rest[..end].parse().map_err(|_| {
                SetupError::invalid(file, "template value placeholder damaged while editing")
            })?;
            let Some(TemplateLine::Value(original)) = lines.get(n) else {
                return Err(SetupError::invalid(
                    file,
                    "template value placeholder damaged while editing",
                ));
            };
            values_seen[n] = true;
            let token_len = 1 + VALUE_PLACEHOLDER.len() + end + 3;
            restored.replace_range(start..start + token_len, original);
        }
        out.push_str(&restored);
        out.push_str(nl);
    }
    let lines_left = lines[next_line.min(lines.len())..]
        .iter()
        .any(|l| matches!(l, TemplateLine::Line(_)));
    let values_lost = lines
        .iter()
        .zip(&values_seen)
        .any(|(l, seen)| matches!(l, TemplateLine::Value(_)) && !seen);
    if lines_left || values_lost {
        return Err(SetupError::invalid(
            file,
            "template lines were lost while editing",
        ));
    }
    Ok(out)
}

fn parse(file: &Path, text: &str, line_offset: usize) -> Result<DocumentMut> {
    text.parse::<DocumentMut>().map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        let (line, column) = line_column(text, offset);
        let message = e.message().trim().to_string();
        SetupError::Malformed {
            file: file.to_path_buf(),
            line: line + line_offset,
            column,
            message: format!("invalid TOML: {message}"),
        }
    })
}

/// Config version by NVIDIA's rule: no `version` key means 1.
fn config_version(file: &Path, doc: &DocumentMut, if_missing: i64) -> Result<i64> {
    match doc.get("version") {
        None => Ok(if_missing),
        Some(item) => match item.as_integer() {
            Some(v @ 1..=3) => Ok(v),
            _ => Err(SetupError::invalid(
                file,
                format!(
                    "unsupported containerd config version {}; expected 1, 2 or 3",
                    item.to_string().trim()
                ),
            )),
        },
    }
}

fn get<'a>(item: &'a Item, path: &[&str]) -> Option<&'a Item> {
    path.iter()
        .try_fold(item, |cur, key| cur.as_table_like()?.get(key))
}

/// Inspects a (stripped) document.
fn status(doc: &DocumentMut, version: i64, spec: &RuntimeSpec) -> Status {
    let keys = CriKeys::for_version(version);
    let root = doc.as_item();
    let binary = get(root, &keys.runtime_option(&spec.name, "BinaryName")).and_then(|i| i.as_str());
    let default = get(root, &keys.containerd())
        .and_then(|c| get(c, &["default_runtime_name"]))
        .and_then(|i| i.as_str());
    Status {
        version,
        runtime: binary == Some(spec.path.as_str()),
        default: default == Some(spec.name.as_str()),
    }
}

/// The config version `text` is read with: an empty file or a `base` template has the
/// version its flavor implies, anything else its `version` key.
fn file_version(
    file: &Path,
    text: &str,
    stripped: &Stripped,
    doc: &DocumentMut,
    flavor: Flavor,
) -> Result<i64> {
    let (if_missing, empty_version) = flavor.implied_versions();
    if text.trim().is_empty() {
        Ok(empty_version)
    } else if stripped.base_line.is_some() {
        Ok(if_missing)
    } else {
        config_version(file, doc, if_missing)
    }
}

/// Reads the status of a containerd config or k3s template without changing it.
/// For a `base` template, runtimes k3s registers itself count as present.
pub fn inspect(
    file: &Path,
    text: Option<&str>,
    spec: &RuntimeSpec,
    flavor: Flavor,
) -> Result<Status> {
    let text = text.unwrap_or("");
    let stripped = strip_template(text);
    let doc = parse(file, &stripped.text, 0)?;
    let version = file_version(file, text, &stripped, &doc, flavor)?;
    let mut st = status(&doc, version, spec);
    if stripped.base_line.is_some() && K3S_AUTODETECTED_RUNTIMES.contains(&spec.name.as_str()) {
        st.runtime = true;
    }
    Ok(st)
}

/// Descends into table `key` of `parent`, creating it (without a header of its own) when
/// missing. Fails when the key holds something that is not a table.
fn child<'a>(file: &Path, parent: &'a mut Item, key: &str, path: &str) -> Result<&'a mut Item> {
    let inline = parent.is_inline_table();
    let table = parent
        .as_table_like_mut()
        .ok_or_else(|| SetupError::invalid(file, format!("{path} is not a table")))?;
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
    let item = table.get_mut(key).expect("inserted above");
    if !item.is_table_like() {
        return Err(SetupError::invalid(
            file,
            format!("{path}.{key} is not a table"),
        ));
    }
    Ok(item)
}

/// Sets `key` to `value` unless it already has it; keeps the old value's comments.
fn set(table: &mut Item, key: &str, value: Value) -> bool {
    let table = table.as_table_like_mut().expect("checked by child()");
    if let Some(old) = table.get_mut(key) {
        if let Some(old_value) = old.as_value() {
            if old_value.to_string().trim() == value.to_string().trim() {
                return false;
            }
            let decor = old_value.decor().clone();
            let mut value = value;
            *value.decor_mut() = decor;
            *old = Item::Value(value);
            return true;
        }
    }
    table.insert(key, Item::Value(value));
    true
}

/// Adds the runtime table (and, if allowed, the default) to `doc`. Returns whether the
/// document changed.
fn add_runtime(
    file: &Path,
    doc: &mut DocumentMut,
    version: i64,
    spec: &RuntimeSpec,
    runtime: bool,
    default: bool,
) -> Result<bool> {
    let keys = CriKeys::for_version(version);
    // SystemdCgroup must match the runc runtime or pods are unstable (nvidia-docker #1788).
    let systemd_cgroup = get(doc.as_item(), &keys.runtime_option("runc", "SystemdCgroup"))
        .and_then(|i| i.as_value())
        .cloned();
    let mut changed = false;
    let plugins = child(file, doc.as_item_mut(), "plugins", "")?;
    let cri_item = child(file, plugins, keys.plugin, "plugins")?;
    let ctrd_path = keys.containerd_header();
    let containerd = child(
        file,
        cri_item,
        "containerd",
        &format!("plugins.\"{}\"", keys.plugin),
    )?;
    if runtime {
        let runtimes = child(file, containerd, "runtimes", &ctrd_path)?;
        let rt_path = format!("{ctrd_path}.runtimes.{}", spec.name);
        let rt = child(file, runtimes, &spec.name, &format!("{ctrd_path}.runtimes"))?;
        changed |= set(rt, "runtime_type", Value::from(RUNC_V2));
        let options = child(file, rt, "options", &rt_path)?;
        changed |= set(options, "BinaryName", Value::from(spec.path.as_str()));
        if let Some(sc) = systemd_cgroup {
            let has = options
                .as_table_like()
                .is_some_and(|t| t.contains_key("SystemdCgroup"));
            if !has {
                changed |= set(options, "SystemdCgroup", sc.clone());
            }
        }
    }
    if default {
        let containerd = get_mut_path(doc, &keys.containerd());
        changed |= set(
            containerd,
            "default_runtime_name",
            Value::from(spec.name.as_str()),
        );
    }
    Ok(changed)
}

fn get_mut_path<'a>(doc: &'a mut DocumentMut, path: &[&str]) -> &'a mut Item {
    path.iter().fold(doc.as_item_mut(), |cur, key| {
        cur.as_table_like_mut()
            .and_then(|t| t.get_mut(key))
            .expect("created by child()")
    })
}

/// Plans the edit of a containerd config (`flavor` System) or a k3s template.
pub fn edit(file: &Path, text: Option<&str>, spec: &RuntimeSpec, flavor: Flavor) -> Result<Edit> {
    let original = text.unwrap_or("");
    let new_template;
    let source = match (flavor, original.trim().is_empty()) {
        // A new (or empty) template starts from k3s's stock configuration.
        (Flavor::K3sTemplate { .. }, true) => {
            new_template = "{{ template \"base\" . }}\n".to_string();
            new_template.as_str()
        }
        _ => original,
    };
    let stripped = strip_template(source);
    if flavor == Flavor::System && !stripped.lines.is_empty() {
        return Err(SetupError::invalid(
            file,
            "contains Go-template markup ({{ ... }}); only k3s templates may",
        ));
    }
    // Whole-file parse first: syntax errors get the line numbers the user sees.
    let whole = parse(file, &stripped.text, 0)?;
    let mut result = Edit::unchanged();
    let base_owns_default = stripped.base_line.is_some() && spec.set_default;
    let out = if let Some(base) = stripped.base_line {
        let Flavor::K3sTemplate { version } = flavor else {
            unreachable!("System rejects template markup above")
        };
        // Everything the base emits is off limits: only new tables go after it.
        let register = !K3S_AUTODETECTED_RUNTIMES.contains(&spec.name.as_str());
        if !register {
            result.notes.push(format!(
                "k3s registers runtime '{}' itself (base template); not declaring it again",
                spec.name
            ));
        }
        if base_owns_default {
            result.notes.push(
                "the base template emits the table holding default_runtime_name; the default is set through k3s's default-runtime setting instead".into(),
            );
        }
        let split = stripped
            .text
            .split_inclusive('\n')
            .take(base + 1)
            .map(str::len)
            .sum::<usize>();
        let (head, tail) = stripped.text.split_at(split);
        let mut tail_doc = parse(file, tail, base + 1)?;
        if register && !status(&whole, version, spec).runtime {
            if let Some(line) = stripped
                .originals()
                .find(|l| l.contains(&spec.name) && l.contains("runtimes"))
            {
                return Err(SetupError::invalid(
                    file,
                    format!("a template expression already declares the runtime: {line}"),
                ));
            }
            add_runtime(file, &mut tail_doc, version, spec, true, false)?;
        } else {
            // Nothing to add after the base: leave the file (or its absence) alone.
            return Ok(result);
        }
        let mut text = head.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        if tail.trim().is_empty() {
            // A blank line between the base and our tables, as a person would write it.
            text.push('\n');
        }
        text.push_str(&tail_doc.to_string());
        text
    } else {
        let mut doc = whole;
        let empty = original.trim().is_empty();
        let version = file_version(file, original, &stripped, &doc, flavor)?;
        let keys = CriKeys::for_version(version);
        let templated = |path: &[&str]| {
            get(doc.as_item(), path)
                .and_then(|i| i.as_str())
                .is_some_and(|v| v.starts_with(VALUE_PLACEHOLDER))
        };
        let by_template = stripped.originals().find(|l| {
            l.contains("default_runtime_name") || l.contains(&format!("runtimes.{}", spec.name))
        });
        let [p, c, d] = keys.containerd();
        let key_templated = templated(&[p, c, d, "default_runtime_name"])
            || templated(&keys.runtime_option(&spec.name, "BinaryName"));
        if by_template.is_some() || key_templated {
            return Err(SetupError::invalid(
                file,
                format!(
                    "a template expression sets what we would set{}; edit the template by hand",
                    by_template.map(|l| format!(" ({l})")).unwrap_or_default()
                ),
            ));
        }
        if empty && version != 1 {
            // Without a version key containerd would read the file as version 1.
            doc.insert("version", Item::Value(Value::from(version)));
        }
        add_runtime(file, &mut doc, version, spec, true, spec.set_default)?;
        if version == 1 {
            result
                .notes
                .push("config version 1 is legacy (containerd 1.x only)".into());
        }
        doc.to_string()
    };
    let out = restore_template(file, &out, &stripped.lines)?;
    if out == original {
        return Ok(result);
    }
    // Validate our own output before it may be written.
    let status = inspect(file, Some(&out), spec, flavor)?;
    let want_default = spec.set_default && !base_owns_default;
    if !status.runtime || (want_default && !status.default) {
        return Err(SetupError::invalid(
            file,
            "internal error: the edited configuration does not contain the runtime",
        ));
    }
    result.new = Some(out);
    Ok(result)
}

/// Whether the default runtime of this k3s template is owned by k3s's `base` template (and
/// so must be set through k3s's `default-runtime` setting rather than in the file). A
/// missing or empty template counts: we would create it from the base.
pub fn base_owns_default(text: Option<&str>, flavor: Flavor) -> bool {
    match flavor {
        Flavor::System => false,
        Flavor::K3sTemplate { .. } => {
            let text = text.unwrap_or("");
            text.trim().is_empty() || strip_template(text).base_line.is_some()
        }
    }
}
