//! containerd's TOML configuration: the system containerd's config.toml (and the files it
//! imports) and k3s's `config*.toml.tmpl` templates. Read into a [`Description`] (what the
//! file decides about runtimes, with lines) and edited with `toml_edit` so that comments,
//! key order and formatting stay.
//!
//! Templates are Go text/template files. Before parsing, every line that is not plain TOML
//! outside a control structure is replaced by a comment that stands in for it (a
//! `key = {{ ... }}` line keeps its key), and restored byte for byte afterwards; an edit
//! never lands inside `{{ if }}`/`{{ range }}`/... (checked on the result).

use std::collections::BTreeMap;
use std::path::Path;

use toml_edit::{DocumentMut, ImDocument, InlineTable, Item, Table, Value};

use super::go_template::{self, ActionKind};
use super::Edit;

mod cdi;
mod copy;
mod node;
use crate::error::{line_column, Result, SetupError};
use crate::RuntimeSpec;
pub use cdi::{edit_cdi, CdiWant, Setting};
pub use copy::{copy_from_plugin, legacy_default_type, runtime_copy, RuntimeCopy};
pub use node::Node;

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

/// The CRI plugin's name in config version 1, 2 and 3: the table that holds the
/// runtimes (containerd docs/cri/config.md, docs/PLUGINS.md).
pub const CRI_V1: &str = "cri";
pub const CRI_V2: &str = "io.containerd.grpc.v1.cri";
pub const CRI_V3: &str = "io.containerd.cri.v1.runtime";

/// The config version whose CRI plugin table is named `plugin`.
pub fn version_of_cri_plugin(plugin: &str) -> i64 {
    match plugin {
        CRI_V1 => 1,
        CRI_V2 => 2,
        _ => 3,
    }
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
            1 => CRI_V1,
            2 => CRI_V2,
            _ => CRI_V3,
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

    /// `plugins."<cri>".containerd`, as a person would write the table header.
    fn containerd_header(self) -> String {
        format!("plugins.\"{}\".containerd", self.plugin)
    }
}

/// How one template line was replaced.
#[derive(Debug, Clone)]
enum TemplateLine {
    /// The whole line became a comment.
    Line(String),
    /// Only the value of `key = value` was replaced; holds the original value text.
    Value(String),
}

/// A template turned into parseable TOML, and what its Go-template parts decide.
#[derive(Debug, Clone, Default)]
struct Skeleton {
    /// TOML with one line per template line.
    text: String,
    lines: Vec<TemplateLine>,
    /// 0-based line of `{{ template "base" . }}` (outside any control structure).
    base_line: Option<usize>,
    /// 0-based line of the first action that reads k3s's `--default-runtime`.
    default_from_k3s: Option<usize>,
    /// 0-based line of a `{{ range }}` over k3s's detected runtimes (`.ExtraRuntimes`).
    extra_runtimes_loop: Option<usize>,
    /// Lines replaced by a stand-in comment: (0-based line, original text).
    opaque: Vec<(usize, String)>,
}

/// `{{ template "base" . }}`, possibly with trim markers, comments (`{{/* */}}` or a
/// TOML `#` comment) or blanks around it on its line.
fn is_base_line(line: &go_template::Line) -> bool {
    let mut base = false;
    for a in &line.actions {
        match &a.kind {
            ActionKind::Template(name) if name == "base" => base = true,
            ActionKind::Comment => {}
            _ => return false,
        }
    }
    let rest = line.literal();
    let rest = rest.trim();
    base && (rest.is_empty() || rest.starts_with('#'))
}

/// `Some(index of '=')` when the line is `key = value` with the markup in the value.
fn value_assignment(line: &go_template::Line) -> Option<usize> {
    let body = line.text;
    let eq = body.find('=')?;
    let key = body[..eq].trim();
    let markup = line.actions.first()?.start;
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\'' | ' '));
    (key_ok && eq < markup).then_some(eq)
}

/// Turns a template into TOML: plain lines outside control structures stay, the rest is
/// stood in for. After a line that may emit a table header we cannot see (the base
/// template, a header inside `{{ if }}`, a printed value), keys before the next visible
/// header belong to an unknown table and are stood in for too.
fn skeleton(file: &Path, text: &str) -> Result<Skeleton> {
    let lines = go_template::lines(text).map_err(|e| {
        let (line, column) = line_column(text, e.offset);
        SetupError::Malformed {
            file: file.to_path_buf(),
            line,
            column,
            message: format!("invalid Go template: {}", e.message),
        }
    })?;
    let mut sk = Skeleton::default();
    let mut unknown_table = false;
    let raw_lines: Vec<&str> = text.split_inclusive('\n').collect();
    for line in &lines {
        let nl = if raw_lines[line.index].ends_with('\n') {
            "\n"
        } else {
            ""
        };
        for a in &line.actions {
            if a.body.contains(".NodeConfig.DefaultRuntime") {
                sk.default_from_k3s.get_or_insert(line.index);
            }
            if a.kind == ActionKind::Open
                && a.body.starts_with("range")
                && a.body.contains(".ExtraRuntimes")
            {
                sk.extra_runtimes_loop.get_or_insert(line.index);
            }
        }
        let trimmed = line.text.trim();
        let plain = line.actions.is_empty() && line.at_top_level();
        if plain {
            let is_header = trimmed.starts_with('[');
            let is_blank = trimmed.is_empty() || trimmed.starts_with('#');
            if is_header {
                unknown_table = false;
            }
            if is_header || is_blank || !unknown_table {
                sk.text.push_str(line.text);
                sk.text.push_str(nl);
                continue;
            }
        }
        let n = sk.lines.len();
        if line.at_top_level() && !unknown_table {
            if let Some(eq) = value_assignment(line) {
                let value = &line.text[eq + 1..];
                let lead = &value[..value.len() - value.trim_start().len()];
                sk.text.push_str(&format!(
                    "{}{lead}\"{VALUE_PLACEHOLDER}{n}@@\"{nl}",
                    &line.text[..=eq]
                ));
                sk.lines
                    .push(TemplateLine::Value(value.trim_start().to_string()));
                continue;
            }
        }
        if line.at_top_level() && is_base_line(line) {
            sk.base_line.get_or_insert(line.index);
            unknown_table = true;
        } else if !(line.at_top_level()
            && line.actions.iter().all(|a| a.kind == ActionKind::Comment)
            && {
                let l = line.literal();
                let l = l.trim();
                l.is_empty() || l.starts_with('#')
            })
        {
            sk.opaque.push((line.index, line.text.to_string()));
            let literal = line.literal();
            let prints = line
                .actions
                .iter()
                .any(|a| matches!(a.kind, ActionKind::Output | ActionKind::Template(_)));
            if literal.trim_start().starts_with('[') || (prints && literal.trim().is_empty()) {
                unknown_table = true;
            }
        }
        sk.text.push_str(&format!("{PLACEHOLDER}{n}{nl}"));
        sk.lines.push(TemplateLine::Line(line.text.to_string()));
    }
    Ok(sk)
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
    text.parse::<DocumentMut>()
        .map_err(|e| malformed(file, text, &e, line_offset))
}

fn malformed(file: &Path, text: &str, e: &toml_edit::TomlError, line_offset: usize) -> SetupError {
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

fn get<'a>(item: &'a Item, path: &[&str]) -> Option<&'a Item> {
    path.iter()
        .try_fold(item, |cur, key| cur.as_table_like()?.get(key))
}

/// How a file decides the default runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultRuntime {
    /// Not set: containerd's own default, `runc`.
    Unset,
    /// `default_runtime_name = "<name>"` written in the file (1-based line).
    Literal { name: String, line: usize },
    /// k3s fills it in from its `default-runtime` setting (the `base` template, or an
    /// expression reading `.NodeConfig.DefaultRuntime`) (1-based line).
    FromK3sSetting { line: usize },
    /// Decided by a template expression or inside a control structure: only rendering
    /// can tell (1-based line and its text).
    Unknown { line: usize, text: String },
}

/// A runtime table the file declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// `options.BinaryName`; `None` when absent or set by a template expression.
    pub binary: Option<String>,
    /// `runtime_type`; `None` when absent or set by a template expression.
    pub runtime_type: Option<String>,
    /// 1-based line of the table (0 when unknown).
    pub line: usize,
}

/// What a containerd config or k3s template decides about runtimes.
#[derive(Debug, Clone)]
pub struct Description {
    /// The config version the file is read with (its `version` key, else what its
    /// flavor implies; see [`describe_as`] for imported files).
    pub version: i64,
    /// The `version` key as written (`None`: none). containerd reads a file without one
    /// as version 1 when it is the main config, and with the merged config's version
    /// when it is imported (services/server/config/config.go).
    pub version_key: Option<i64>,
    /// Every CRI plugin table the file has, under any of its three names (version 1, 2,
    /// 3), whatever the file's own version: which one counts depends on how containerd
    /// merges the files it loads (see effective::containerd).
    pub cri_plugins: Vec<(String, Node<usize>)>,
    /// 1-based line of `{{ template "base" . }}`.
    pub base_line: Option<usize>,
    pub default: DefaultRuntime,
    /// Runtime tables written in the file (outside control structures).
    pub runtimes: BTreeMap<String, Declared>,
    /// 1-based line of a `{{ range }}` over k3s's detected runtimes: the template emits
    /// a table for each runtime k3s finds, as the base does.
    pub extra_runtimes_loop: Option<usize>,
    /// 1-based line of the file's CRI plugin table (or first key of it), if it has one:
    /// with containerd `imports`, the last file that has it decides the whole CRI plugin
    /// (before containerd 2.1 an imported plugin table replaces the earlier one).
    pub cri_table: Option<usize>,
    /// `enable_cdi` in the CRI plugin table (see [`cdi`]).
    pub enable_cdi: Option<Setting<bool>>,
    /// `cdi_spec_dirs` in the CRI plugin table.
    pub cdi_spec_dirs: Option<Setting<Vec<String>>>,
    /// Top-level `imports`.
    pub imports: Vec<String>,
    /// 1-based line of a top-level `imports` before the base line: k3s releases whose
    /// base imports `<template>.d` themselves (k3s PR #13680) then declare it twice.
    pub imports_before_base: Option<usize>,
    /// A table written after the base line, or a top-level key before it, that the base
    /// already emits (1-based line and table or key): containerd refuses either twice.
    pub redeclares_base_table: Option<(usize, String)>,
    /// Stood-in template lines that mention runtimes: (1-based line, text).
    opaque_runtime_lines: Vec<(usize, String)>,
    /// Table headers on stood-in template lines (inside a control structure or after a
    /// printed value): (1-based line, key path).
    hidden_tables: Vec<(usize, Vec<String>)>,
    /// Tables declared (with a header or a key) outside control structures: (key path,
    /// 1-based line).
    visible_tables: Vec<(Vec<String>, usize)>,
}

impl Description {
    /// A stood-in template line that declares runtime `name`'s table, if any.
    pub fn hidden_runtime_table(&self, name: &str) -> Option<(usize, &str)> {
        let plain = format!("runtimes.{name}");
        let quoted = format!("runtimes.\"{name}\"");
        let single = format!("runtimes.'{name}'");
        self.opaque_runtime_lines
            .iter()
            .find(|(_, t)| {
                t.contains(&format!("{plain}]"))
                    || t.contains(&format!("{plain}."))
                    || t.contains(&quoted)
                    || t.contains(&single)
            })
            .map(|(l, t)| (*l, t.as_str()))
    }

    /// What a new runtime `new_runtime` copies from this file alone (see [`copy`]).
    pub fn own_copy(&self, new_runtime: &str) -> Option<RuntimeCopy> {
        let plugin = CriKeys::for_version(self.version).plugin;
        let table = self
            .cri_plugins
            .iter()
            .find(|(p, _)| p == plugin)
            .map(|(_, n)| n);
        // The deprecated default_runtime table exists in config versions 1 and 2 only.
        copy_from_plugin(table, new_runtime, self.version < 3)
    }
}

/// The config version `text` is read with: an empty file or a `base` template has the
/// version its flavor implies, anything else its `version` key (NVIDIA's rule: no
/// `version` key means 1).
fn file_version(file: &Path, text: &str, base: bool, doc: &Item, flavor: Flavor) -> Result<i64> {
    let (if_missing, empty_version) = flavor.implied_versions();
    if text.trim().is_empty() {
        return Ok(empty_version);
    }
    if base {
        return Ok(if_missing);
    }
    match get(doc, &["version"]) {
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

/// Splits off the template skeleton; template markup is refused outside k3s templates.
fn prepare(file: &Path, text: &str, flavor: Flavor) -> Result<Skeleton> {
    let sk = skeleton(file, text)?;
    if flavor == Flavor::System && !sk.lines.is_empty() {
        return Err(SetupError::invalid(
            file,
            "contains Go-template markup ({{ ... }}); only k3s templates may",
        ));
    }
    Ok(sk)
}

fn span_line(text: &str, span: Option<std::ops::Range<usize>>) -> usize {
    span.map_or(0, |s| line_column(text, s.start).0)
}

/// Top-level keys the k3s `base` template starts with (k3s pkg/agent/templates): a key
/// of the same name before the base line is a key given twice.
const BASE_TOP_LEVEL_KEYS: [&str; 3] = ["version", "root", "state"];

/// Every table the k3s `base` template may emit for a config version, from k3s
/// pkg/agent/templates (templates.go, templates_linux.go) across the releases that have
/// the base (September 2023 on); `*` stands for any one key (a registry host). Which of
/// them a node gets depends on k3s's settings (snapshotter, registries.yaml, rootless,
/// --default-runtime), so a template may declare none of them again. The runtimes k3s
/// finds on its PATH come on top; plan checks those against the binaries.
fn base_tables(version: i64) -> Vec<Vec<&'static str>> {
    // Key paths, one key per word.
    const ALWAYS: [&str; 15] = [
        "grpc",
        "plugins io.containerd.internal.v1.opt",
        "plugins io.containerd.grpc.v1.cri",
        "plugins io.containerd.service.v1.tasks-service",
        "plugins io.containerd.nri.v1.nri",
        "plugins io.containerd.snapshotter.v1.stargz",
        "plugins io.containerd.snapshotter.v1.stargz cri_keychain",
        "plugins io.containerd.snapshotter.v1.stargz registry",
        "plugins io.containerd.snapshotter.v1.stargz registry mirrors",
        "plugins io.containerd.snapshotter.v1.stargz registry mirrors *",
        "plugins io.containerd.snapshotter.v1.stargz registry mirrors * rewrite",
        "plugins io.containerd.snapshotter.v1.stargz registry configs * auth",
        "plugins io.containerd.snapshotter.v1.stargz registry configs * tls",
        "plugins io.containerd.snapshotter.v1.nix",
        "plugins io.containerd.snapshotter.v1.nix image_service",
    ];
    // The CRI settings: one plugin in version 2, split into runtime and images in 3.
    const CRI_V2: [&str; 11] = [
        "plugins io.containerd.grpc.v1.cri containerd",
        "plugins io.containerd.grpc.v1.cri containerd runtimes runc",
        "plugins io.containerd.grpc.v1.cri containerd runtimes runc options",
        "plugins io.containerd.grpc.v1.cri containerd runtimes runhcs-wcow-process",
        "plugins io.containerd.grpc.v1.cri cni",
        "plugins io.containerd.grpc.v1.cri registry",
        "plugins io.containerd.grpc.v1.cri registry configs * auth",
        // Releases before `config_path` wrote mirrors and TLS into the CRI plugin.
        "plugins io.containerd.grpc.v1.cri registry configs * tls",
        "plugins io.containerd.grpc.v1.cri registry mirrors",
        "plugins io.containerd.grpc.v1.cri registry mirrors *",
        "plugins io.containerd.grpc.v1.cri registry mirrors * rewrite",
    ];
    const CRI_V3: [&str; 10] = [
        "plugins io.containerd.cri.v1.runtime",
        "plugins io.containerd.cri.v1.runtime containerd",
        "plugins io.containerd.cri.v1.runtime containerd runtimes runc",
        "plugins io.containerd.cri.v1.runtime containerd runtimes runc options",
        "plugins io.containerd.cri.v1.runtime containerd runtimes runhcs-wcow-process",
        "plugins io.containerd.cri.v1.runtime cni",
        "plugins io.containerd.cri.v1.images",
        "plugins io.containerd.cri.v1.images pinned_images",
        "plugins io.containerd.cri.v1.images registry",
        "plugins io.containerd.cri.v1.images registry configs * auth",
    ];
    let cri: &[&str] = if version >= 3 { &CRI_V3 } else { &CRI_V2 };
    ALWAYS
        .iter()
        .chain(cri)
        .map(|t| t.split(' ').collect())
        .collect()
}

/// Whether table `path` is one of `patterns` (`*` matching any one key).
fn emitted_by_base(patterns: &[Vec<&str>], path: &[String]) -> bool {
    patterns
        .iter()
        .any(|p| p.len() == path.len() && p.iter().zip(path).all(|(p, k)| *p == "*" || *p == k))
}

/// Explicit table headers of a document, with their 1-based lines.
fn explicit_tables(
    text: &str,
    item: &Item,
    path: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, usize)>,
) {
    let Some(table) = item.as_table() else {
        return;
    };
    if !table.is_implicit() && !path.is_empty() {
        out.push((path.clone(), span_line(text, table.span())));
    }
    for (k, v) in table.iter() {
        path.push(k.to_string());
        explicit_tables(text, v, path, out);
        path.pop();
    }
}

/// Reads what a containerd config or k3s template decides about runtimes.
pub fn describe(file: &Path, text: Option<&str>, flavor: Flavor) -> Result<Description> {
    describe_as(file, text, flavor, None)
}

/// [`describe`], reading the runtimes under the CRI plugin name of config version
/// `version` instead of the file's own (an imported file without a `version` key is read
/// with the merged config's version).
pub fn describe_as(
    file: &Path,
    text: Option<&str>,
    flavor: Flavor,
    version: Option<i64>,
) -> Result<Description> {
    let text = text.unwrap_or("");
    let sk = prepare(file, text, flavor)?;
    let doc = ImDocument::parse(sk.text.as_str()).map_err(|e| malformed(file, &sk.text, &e, 0))?;
    let root = doc.as_item();
    let own_version = file_version(file, text, sk.base_line.is_some(), root, flavor)?;
    let version = version.unwrap_or(own_version);
    let version_key = get(root, &["version"]).and_then(Item::as_integer);
    let cri_plugins = [CRI_V1, CRI_V2, CRI_V3]
        .into_iter()
        .filter_map(|p| {
            let item = get(root, &["plugins", p])?;
            Some((p.to_string(), node::from_item(&sk.text, item)?))
        })
        .collect();
    let keys = CriKeys::for_version(version);
    let at = |i: usize| i + 1;
    let default =
        match get(root, &keys.containerd()).and_then(|c| get(c, &["default_runtime_name"])) {
            Some(item) => {
                let line = span_line(&sk.text, item.span());
                match item.as_str() {
                    Some(v) if v.starts_with(VALUE_PLACEHOLDER) => {
                        let original = template_value(&sk, v).unwrap_or_default();
                        if original.contains(".NodeConfig.DefaultRuntime") {
                            DefaultRuntime::FromK3sSetting { line }
                        } else {
                            DefaultRuntime::Unknown {
                                line,
                                text: original,
                            }
                        }
                    }
                    Some(v) => DefaultRuntime::Literal {
                        name: v.to_string(),
                        line,
                    },
                    None => DefaultRuntime::Unknown {
                        line,
                        text: item.to_string().trim().to_string(),
                    },
                }
            }
            None => {
                let hidden = sk
                    .opaque
                    .iter()
                    .find(|(_, t)| t.contains("default_runtime_name"));
                match (sk.default_from_k3s, hidden, sk.base_line) {
                    (Some(l), _, _) => DefaultRuntime::FromK3sSetting { line: at(l) },
                    (None, Some((l, t)), _) => DefaultRuntime::Unknown {
                        line: at(*l),
                        text: t.trim().to_string(),
                    },
                    (None, None, Some(l)) => DefaultRuntime::FromK3sSetting { line: at(l) },
                    (None, None, None) => DefaultRuntime::Unset,
                }
            }
        };
    let mut runtimes = BTreeMap::new();
    if let Some(table) = get(root, &keys.runtime("")[..4]).and_then(|r| r.as_table_like()) {
        for (name, rt) in table.iter() {
            let binary = get(rt, &["options", "BinaryName"])
                .and_then(|b| b.as_str())
                .filter(|b| !b.starts_with(VALUE_PLACEHOLDER))
                .map(String::from);
            let runtime_type = get(rt, &["runtime_type"])
                .and_then(|t| t.as_str())
                .filter(|t| !t.starts_with(VALUE_PLACEHOLDER))
                .map(String::from);
            let line = match rt {
                Item::Table(t) => span_line(&sk.text, t.span()),
                other => span_line(&sk.text, other.span()),
            };
            runtimes.insert(
                name.to_string(),
                Declared {
                    binary,
                    runtime_type,
                    line,
                },
            );
        }
    }
    let (enable_cdi, cdi_spec_dirs) = cdi::read(file, &sk, root, keys)?;
    let imports = get(root, &["imports"])
        .and_then(|i| i.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut redeclares_base_table = None;
    let mut imports_before_base = None;
    let mut tables = Vec::new();
    explicit_tables(&sk.text, root, &mut Vec::new(), &mut tables);
    let visible_tables = tables.clone();
    if sk.base_line.is_some() {
        let top_level: Vec<(&str, &Item)> = root
            .as_table()
            .map(|t| t.iter().filter(|(_, v)| v.is_value()).collect())
            .unwrap_or_default();
        let line_of = |item: &Item| span_line(&sk.text, item.span());
        redeclares_base_table = top_level
            .iter()
            .find(|(k, _)| BASE_TOP_LEVEL_KEYS.contains(k))
            .map(|(k, v)| (line_of(v), k.to_string()));
        imports_before_base = top_level
            .iter()
            .find(|(k, _)| *k == "imports")
            .map(|(_, v)| line_of(v));
        let emitted = base_tables(version);
        redeclares_base_table = redeclares_base_table.or_else(|| {
            tables
                .into_iter()
                .find(|(path, _)| emitted_by_base(&emitted, path))
                .map(|(path, line)| (line, dotted(&path)))
        });
    }
    Ok(Description {
        version,
        version_key,
        cri_plugins,
        base_line: sk.base_line.map(at),
        default,
        runtimes,
        extra_runtimes_loop: sk.extra_runtimes_loop.map(at),
        cri_table: get(root, &["plugins", keys.plugin]).map(|t| match t {
            Item::Table(t) if t.span().is_some() => span_line(&sk.text, t.span()),
            // Declared through sub-tables only: the first of them.
            _ => visible_tables
                .iter()
                .find(|(p, _)| p.len() > 1 && p[1] == keys.plugin)
                .map_or(0, |(_, l)| *l),
        }),
        enable_cdi,
        cdi_spec_dirs,
        imports,
        imports_before_base,
        redeclares_base_table,
        opaque_runtime_lines: sk
            .opaque
            .iter()
            .filter(|(_, t)| t.contains("runtimes"))
            .map(|(l, t)| (at(*l), t.clone()))
            .collect(),
        visible_tables,
        hidden_tables: sk
            .opaque
            .iter()
            .filter_map(|(l, t)| header_path(t).map(|p| (at(*l), p)))
            .collect(),
    })
}

/// The key path of a `[table.header]` line (quotes removed); `None` for anything else or
/// a header built by a template expression.
fn header_path(line: &str) -> Option<Vec<String>> {
    let t = line.trim();
    let inner = t.strip_prefix('[')?.split(']').next()?;
    if t.starts_with("[[") || inner.contains("{{") {
        return None;
    }
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in inner.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '.') => parts.push(std::mem::take(&mut cur).trim().to_string()),
            (None, c) => cur.push(c),
        }
    }
    parts.push(cur.trim().to_string());
    Some(parts)
}

/// A key path as a TOML header writes it (`plugins."io.containerd.grpc.v1.cri"`).
fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|k| {
            if k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                k.clone()
            } else {
                format!("\"{k}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The original template text behind a value placeholder.
fn template_value(sk: &Skeleton, placeholder: &str) -> Option<String> {
    let n: usize = placeholder
        .strip_prefix(VALUE_PLACEHOLDER)?
        .strip_suffix("@@")?
        .parse()
        .ok()?;
    match sk.lines.get(n)? {
        TemplateLine::Value(v) => Some(v.clone()),
        TemplateLine::Line(_) => None,
    }
}

/// What an edit must achieve.
#[derive(Debug, Clone, Copy)]
pub struct Want<'a> {
    pub spec: &'a RuntimeSpec,
    /// Write the runtime's table in this file (false: k3s declares it itself).
    pub declare_runtime: bool,
    /// Write `default_runtime_name` in this file.
    pub set_default: bool,
    /// The config version whose CRI plugin name the file's runtimes are read and written
    /// under, when it is not the file's own: containerd reads an imported file with the
    /// merged config's version (see effective::containerd). `None`: the file's own.
    pub version: Option<i64>,
    /// What the runtime's table copies from the runtime pods use now.
    pub copy: CopyFrom<'a>,
}

/// Where the new runtime's copied settings come from (see [`copy`]).
#[derive(Debug, Clone, Copy)]
pub enum CopyFrom<'a> {
    /// The runtime pods use now as this file alone says.
    ThisFile,
    /// As the caller found it, other files included (containerd merges its imports):
    /// `None` when no runtime qualifies.
    Given(Option<&'a RuntimeCopy>),
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

/// Whether two values say the same thing: strings by content (containerd 2 writes
/// `'nvidia'` where others write `"nvidia"`), anything else by its TOML text.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_str(), b.as_str()) {
        (Some(a), Some(b)) => a == b,
        _ => a.to_string().trim() == b.to_string().trim(),
    }
}

/// Sets `key` to `value` unless it already has it; keeps the old value's comments.
fn set(table: &mut Item, key: &str, value: Value) -> bool {
    let table = table.as_table_like_mut().expect("checked by child()");
    if let Some(old) = table.get_mut(key) {
        if let Some(old_value) = old.as_value() {
            if same_value(old_value, &value) {
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

/// Adds the runtime table (with what `copy` says the runtime pods use now has) and, if
/// asked, the default to `doc`. An existing table of the runtime keeps what it says,
/// except: `BinaryName` is ours, a type other than the runc shim's becomes
/// `io.containerd.runc.v2`, keys it lacks are copied, and `SystemdCgroup` is made the
/// copied runtime's (a pod moved to the NVIDIA runtime must keep its cgroup driver).
/// `extra_options` are added where missing. Returns whether the document changed.
fn add_runtime(
    file: &Path,
    doc: &mut DocumentMut,
    version: i64,
    want: Want,
    copy: Option<&RuntimeCopy>,
    extra_options: &[(&str, Value)],
) -> Result<bool> {
    let keys = CriKeys::for_version(version);
    let spec = want.spec;
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
    if want.declare_runtime {
        let runtimes = child(file, containerd, "runtimes", &ctrd_path)?;
        let rt_path = format!("{ctrd_path}.runtimes.{}", spec.name);
        let rt = child(file, runtimes, &spec.name, &format!("{ctrd_path}.runtimes"))?;
        let runc_type = rt
            .get("runtime_type")
            .and_then(Item::as_str)
            .is_some_and(|t| t == RUNC_V2 || t == "io.containerd.runc.v1");
        if !runc_type {
            changed |= set(rt, "runtime_type", Value::from(RUNC_V2));
        }
        let has = |t: &Item, k: &str| t.as_table_like().is_some_and(|t| t.contains_key(k));
        for (k, v) in copy.iter().flat_map(|c| &c.top) {
            if !has(rt, k) {
                changed |= set(rt, k, v.clone());
            }
        }
        let options = child(file, rt, "options", &rt_path)?;
        changed |= set(options, "BinaryName", Value::from(spec.path.as_str()));
        let copied = copy
            .iter()
            .flat_map(|c| c.options.iter().map(|(k, v)| (k.as_str(), v)));
        // The cgroup driver is made the default runtime's; with the runtime already the
        // default (or a stand-in for a default that is not runc) what it has stays.
        let keep_driver = copy.is_some_and(|c| c.is_default) || !extra_options.is_empty();
        for (k, v) in copied.chain(extra_options.iter().map(|(k, v)| (*k, v))) {
            // (A value a template expression renders is the template's to decide.)
            let templated = options
                .get(k)
                .and_then(Item::as_str)
                .is_some_and(|t| t.starts_with(VALUE_PLACEHOLDER));
            if !has(options, k) || (k == "SystemdCgroup" && keep_driver && !templated) {
                changed |= set(options, k, v.clone());
            }
        }
    }
    if want.set_default {
        let containerd = get_mut_path(doc, &keys.containerd());
        changed |= set(
            containerd,
            "default_runtime_name",
            Value::from(want.spec.name.as_str()),
        );
    }
    Ok(changed)
}

/// Marks where the tables an edit adds to a template begin, until the template lines
/// are restored ([`guard_new_tables`]).
const NEW_TABLES_MARK: &str = "#edgegpu-node-setup:new-tables";

/// Written between a template line that ends in a right trim marker (`-}}`, which eats
/// the line breaks after it) and the tables an edit adds after it, so that the first new
/// header still starts a line when Go renders the template. It renders as nothing.
const TRIM_GUARD: &str = "{{/* edgegpu-node-setup: keeps the next table on its own line */}}";

/// Moves the tables an edit created behind every table of the template, and behind the
/// template lines that end it. toml_edit puts a new table right after its sibling tables
/// and keeps the lines after the last key as the document's trailing text; either way a
/// template line that emits keys for the table before it (`{{- if }}` ... `{{- end }}`)
/// would end up in the new table when Go renders it.
fn place_new_tables_last(doc: &mut DocumentMut) {
    fn last_position(t: &Table) -> usize {
        t.iter()
            .filter_map(|(_, v)| v.as_table())
            .map(last_position)
            .fold(t.position().unwrap_or(0), usize::max)
    }
    /// Numbers the new tables that print a header; returns the first one's position.
    fn number(t: &mut Table, next: &mut usize, first: &mut Option<usize>) {
        let hidden = t.is_implicit() && t.get_values().is_empty();
        let printed = !t.is_dotted() && !hidden;
        if t.position().is_none() && printed {
            *next += 1;
            t.set_position(*next);
            first.get_or_insert(*next);
        }
        for (_, v) in t.iter_mut() {
            if let Some(child) = v.as_table_mut() {
                number(child, next, first);
            }
        }
    }
    fn at(t: &mut Table, position: usize) -> Option<&mut Table> {
        if t.position() == Some(position) {
            return Some(t);
        }
        t.iter_mut()
            .filter_map(|(_, v)| v.as_table_mut())
            .find_map(|c| at(c, position))
    }
    let mut next = last_position(doc.as_table());
    let mut first = None;
    // The root (top-level keys, no header) keeps its place.
    for (_, v) in doc.as_table_mut().iter_mut() {
        if let Some(t) = v.as_table_mut() {
            number(t, &mut next, &mut first);
        }
    }
    let Some(first) = first else {
        return;
    };
    let trailing = doc.trailing().as_str().unwrap_or_default().to_string();
    doc.set_trailing("");
    if let Some(t) = at(doc.as_table_mut(), first) {
        t.decor_mut()
            .set_prefix(format!("{trailing}{NEW_TABLES_MARK}\n\n"));
    }
}

/// Replaces the mark [`place_new_tables_last`] left by [`TRIM_GUARD`] where the line
/// before it trims the line break, and removes it everywhere else.
fn guard_new_tables(text: &str) -> String {
    let mark = format!("{NEW_TABLES_MARK}\n");
    let Some(at) = text.find(&mark) else {
        return text.to_string();
    };
    let (before, after) = (&text[..at], &text[at + mark.len()..]);
    if before.trim_end().ends_with("-}}") {
        format!("{before}{TRIM_GUARD}\n{after}")
    } else {
        format!("{before}{after}")
    }
}

/// A template line (0-based index, text) and the table header in effect before it.
type LineInTable<'a> = (usize, &'a str, Option<&'a str>);

/// The template lines of `text` (lines with actions, or inside a control structure)
/// that render something, each with the table header in effect before it: what Go
/// renders there lands in that table.
fn template_line_tables(text: &str) -> Result<Vec<LineInTable<'_>>, go_template::LexError> {
    let mut header = None;
    let mut out = Vec::new();
    for line in go_template::lines(text)? {
        let plain = line.actions.is_empty() && line.at_top_level();
        if plain {
            if line.text.trim_start().starts_with('[') {
                header = Some(line.text.trim());
            }
            continue;
        }
        let renders_nothing = line.at_top_level()
            && line.actions.iter().all(|a| a.kind == ActionKind::Comment)
            && line.literal().trim().is_empty();
        if !renders_nothing {
            out.push((line.index, line.text, header));
        }
    }
    Ok(out)
}

/// Checks that every template line renders under the same table header after the edit
/// as before it (lines the edit adds, such as `SystemdCgroup = {{ .SystemdCgroup }}`,
/// are skipped).
fn template_lines_keep_their_tables(file: &Path, old: &str, new: &str) -> Result<()> {
    let lex = |e: go_template::LexError| {
        SetupError::invalid(
            file,
            format!("internal error: template does not lex: {}", e.message),
        )
    };
    let before = template_line_tables(old).map_err(lex)?;
    let after = template_line_tables(new).map_err(lex)?;
    let mut rest = after.iter();
    for (line, text, was) in &before {
        let Some((_, _, now)) = rest.find(|(_, t, _)| t == text) else {
            return Err(SetupError::invalid(
                file,
                format!(
                    "internal error: template line {} was lost while editing",
                    line + 1
                ),
            ));
        };
        if now != was {
            return Err(SetupError::Refused(format!(
                "{}:{}: node-setup's edit would put this template line ({}) under {} instead of {}; edit the template by hand",
                file.display(),
                line + 1,
                text.trim(),
                now.unwrap_or("the top level"),
                was.unwrap_or("the top level")
            )));
        }
    }
    Ok(())
}

/// Checks that every line an edit changed or added lies outside every control structure
/// of the template (an edit inside `{{ if }}` or `{{ range }}` would render zero or many
/// times).
fn edits_at_top_level(file: &Path, old: &str, new: &str) -> Result<()> {
    let lines = go_template::lines(new).map_err(|e| {
        SetupError::invalid(
            file,
            format!(
                "internal error: edited template does not lex: {}",
                e.message
            ),
        )
    })?;
    let diff = similar::TextDiff::from_lines(old, new);
    for op in diff.ops() {
        for change in diff.iter_changes(op) {
            if change.tag() != similar::ChangeTag::Insert {
                continue;
            }
            let Some(i) = change.new_index() else {
                continue;
            };
            if let Some(line) = lines.get(i) {
                if !line.at_top_level() {
                    return Err(SetupError::invalid(
                        file,
                        format!(
                            "line {} would land inside a template control structure ({{{{ if }}}}/{{{{ range }}}}); edit the template by hand",
                            i + 1
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What every edit does with its TOML output before it may be written: the template
/// lines are put back, nothing landed inside a control structure or moved to another
/// table, and no table a control structure may emit is now declared outside it too.
/// `None` when the output equals `original`; else the output and its description.
fn finish_edit(
    file: &Path,
    original: &str,
    source: &str,
    sk: &Skeleton,
    before: &Description,
    edited: &str,
    flavor: Flavor,
) -> Result<Option<(String, Description)>> {
    let out = guard_new_tables(&restore_template(file, edited, &sk.lines)?);
    if out == original {
        return Ok(None);
    }
    if matches!(flavor, Flavor::K3sTemplate { .. }) {
        edits_at_top_level(file, original, &out)?;
        template_lines_keep_their_tables(file, source, &out)?;
    }
    // Validate our own output before it may be written.
    let after = describe_as(file, Some(&out), flavor, Some(before.version))?;
    // A table we now write outside every control structure must not be one a control
    // structure may emit as well (a table declared twice).
    if let Some((line, path)) = before.hidden_tables.iter().find(|(_, p)| {
        after.visible_tables.iter().any(|(v, _)| v == p)
            && !before.visible_tables.iter().any(|(v, _)| v == p)
    }) {
        return Err(SetupError::Refused(format!(
            "{}:{line}: the template declares [{}] inside a template control structure; node-setup cannot add to it there, and declaring it again would make a table declared twice. Edit the template by hand (or move that table out of the control structure)",
            file.display(),
            dotted(path)
        )));
    }
    Ok(Some((out, after)))
}

/// Plans the edit of a containerd config (`flavor` System) or a k3s template so that it
/// does what `want` asks. A new or empty k3s template starts from the base template.
pub fn edit(file: &Path, text: Option<&str>, flavor: Flavor, want: Want) -> Result<Edit> {
    let original = text.unwrap_or("");
    let is_template = matches!(flavor, Flavor::K3sTemplate { .. });
    let source = if is_template && original.trim().is_empty() {
        "{{ template \"base\" . }}\n".to_string()
    } else {
        original.to_string()
    };
    let mut sk = prepare(file, &source, flavor)?;
    let before = describe_as(file, Some(&source), flavor, want.version)?;
    let spec = want.spec;
    let has_runtime = before
        .runtimes
        .get(&spec.name)
        .is_some_and(|r| r.binary.as_deref() == Some(spec.path.as_str()));
    let declare = want.declare_runtime;
    if declare && !has_runtime {
        if let Some((line, text)) = before.hidden_runtime_table(&spec.name) {
            return Err(SetupError::Refused(format!(
                "{}:{line}: a template line declares runtime '{}' ({}) where node-setup cannot edit it (a template expression or control structure); edit the template by hand",
                file.display(),
                spec.name,
                text.trim()
            )));
        }
    }
    if want.set_default {
        match &before.default {
            DefaultRuntime::Unknown { line, text } => {
                return Err(SetupError::Refused(format!(
                    "{}:{line}: default_runtime_name is decided by a template expression or inside a control structure ({text}); node-setup cannot change it. Edit the template by hand",
                    file.display()
                )))
            }
            DefaultRuntime::FromK3sSetting { .. } => {
                return Err(SetupError::invalid(
                    file,
                    "internal error: the default of this template comes from k3s's default-runtime setting",
                ))
            }
            DefaultRuntime::Unset | DefaultRuntime::Literal { .. } => {}
        }
    }
    let version = before.version;
    let mut result = Edit::unchanged();
    let out = if let Some(base) = sk.base_line {
        if !declare || has_runtime {
            // Nothing to add after the base: leave the file (or its absence) alone.
            return Ok(result);
        }
        // Only new tables go after the base, at the end. The base renders runc's
        // SystemdCgroup from k3s's data; the new runtime gets the same.
        let split = sk
            .text
            .split_inclusive('\n')
            .take(base + 1)
            .map(str::len)
            .sum::<usize>();
        let (head, tail) = sk.text.split_at(split);
        let mut tail_doc = parse(file, tail, base + 1)?;
        let n = sk.lines.len();
        sk.lines
            .push(TemplateLine::Value("{{ .SystemdCgroup }}".into()));
        let systemd_cgroup = Value::from(format!("{VALUE_PLACEHOLDER}{n}@@"));
        let declare_only = Want {
            set_default: false,
            ..want
        };
        add_runtime(
            file,
            &mut tail_doc,
            version,
            declare_only,
            None,
            &[("SystemdCgroup", systemd_cgroup)],
        )?;
        place_new_tables_last(&mut tail_doc);
        let mut text = head.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        // (The new tables start with a blank line: see place_new_tables_last.)
        text.push_str(&tail_doc.to_string());
        text
    } else {
        let mut doc = parse(file, &sk.text, 0)?;
        let empty = original.trim().is_empty();
        if empty && version != 1 {
            // Without a version key containerd would read the file as version 1.
            doc.insert("version", Item::Value(Value::from(version)));
        }
        let own;
        let copy = match want.copy {
            CopyFrom::Given(copy) => copy,
            CopyFrom::ThisFile => {
                own = before.own_copy(&spec.name);
                own.as_ref()
            }
        };
        let want = Want {
            declare_runtime: declare,
            ..want
        };
        add_runtime(file, &mut doc, version, want, copy, &[])?;
        if is_template {
            place_new_tables_last(&mut doc);
        }
        if version == 1 {
            result
                .notes
                .push("config version 1 is legacy (containerd 1.x only)".into());
        }
        doc.to_string()
    };
    let Some((out, after)) = finish_edit(file, original, &source, &sk, &before, &out, flavor)?
    else {
        return Ok(result);
    };
    let declared = after
        .runtimes
        .get(&spec.name)
        .is_some_and(|r| r.binary.as_deref() == Some(spec.path.as_str()));
    let defaulted =
        matches!(&after.default, DefaultRuntime::Literal { name, .. } if *name == spec.name);
    if (want.declare_runtime && !declared) || (want.set_default && !defaulted) {
        return Err(SetupError::invalid(
            file,
            "internal error: the edited configuration does not contain the runtime",
        ));
    }
    result.new = Some(out);
    Ok(result)
}

fn get_mut_path<'a>(doc: &'a mut DocumentMut, path: &[&str]) -> &'a mut Item {
    path.iter().fold(doc.as_item_mut(), |cur, key| {
        cur.as_table_like_mut()
            .and_then(|t| t.get_mut(key))
            .expect("created by child()")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last guard of a template edit: a template line that would render under another
    /// table than before is refused, naming its line (the placement of new tables makes
    /// this unreachable through `edit`, which is why it is checked here directly).
    #[test]
    fn a_template_line_moved_under_another_table_is_refused() {
        let old = "[a]\nx = 1\n{{- if .X }}\ny = 2\n{{- end }}\n";
        let moved = "[a]\nx = 1\n\n[b]\nz = 3\n{{- if .X }}\ny = 2\n{{- end }}\n";
        let err = template_lines_keep_their_tables(Path::new("t"), old, moved).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("t:3: ") && msg.contains("under [b] instead of [a]"),
            "{msg}"
        );
        // Lines added by the edit (a new table after the template's own lines) are fine.
        let added = format!("{old}\n[b]\nz = {{{{ .SystemdCgroup }}}}\n");
        template_lines_keep_their_tables(Path::new("t"), old, &added).unwrap();
    }
}
