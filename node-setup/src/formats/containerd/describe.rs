//! What a containerd config or k3s template decides about runtimes and CDI, with lines:
//! its config version, CRI plugin tables, default runtime, declared runtimes, imports,
//! and what a template with the base line declares that the base already emits.

use std::collections::BTreeMap;
use std::path::Path;

use toml_edit::{ImDocument, Item};

use super::cdi::{self, Setting};
use super::copy::{copy_from_plugin, RuntimeCopy};
use super::node::{self, Node};
use super::template::{prepare, template_value, VALUE_PLACEHOLDER};
use super::toml::{dotted, get, malformed, span_line};
use super::version::{CriKeys, Flavor, CRI_V1, CRI_V2, CRI_V3};
use edgegpu_host::error::{Result, SetupError};

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
    pub(super) opaque_runtime_lines: Vec<(usize, String)>,
    /// Table headers on stood-in template lines (inside a control structure or after a
    /// printed value): (1-based line, key path).
    pub(super) hidden_tables: Vec<(usize, Vec<String>)>,
    /// Tables declared (with a header or a key) outside control structures: (key path,
    /// 1-based line).
    pub(super) visible_tables: Vec<(Vec<String>, usize)>,
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
