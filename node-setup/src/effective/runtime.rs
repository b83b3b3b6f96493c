//! Which runtime each engine will actually use, and why the engines would not run
//! containers with the runtime asked for: the effective default runtime and the binary
//! behind `--runtime-name`, per engine, each with the file, line or flag that decides it.
//! `plan` computes this for the host as it is and again with the planned files written.

use std::path::Path;

use serde::Serialize;

use super::containerd::{effective_cri, load_with_imports, Containerd};
use super::containerd_merge::{system_merges, Layer, Merge, MergedCri};
use super::docker::{self, Docker};
use super::engine::{CONTAINERD, DOCKER, K3S};
use super::inventory::Inventory;
use super::k3s::{K3s, K3sEngine};
use super::k3s_template;
use super::systemd::DEFAULT_PATH;
use super::{Source, Sourced};
use crate::formats::containerd::{DefaultRuntime, Flavor};
use crate::formats::daemon_json;
use crate::mode::{ContainerdTarget, Mode};
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::error::Result;
use edgegpu_host::root::HostRoot;

/// The runtime an engine will actually use, and where that is decided.
#[derive(Debug, Clone, Serialize)]
pub struct Effective {
    /// e.g. "k3s containerd (k3s.service)", "system containerd", "docker".
    pub engine: String,
    pub default_runtime: Sourced<String>,
    /// The binary the runtime named `--runtime-name` runs (`null`: not registered), and
    /// what decides that.
    pub runtime_binary: Sourced<Option<String>>,
    /// Settings that stop the engine from starting at all, naming them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// Tables the engine ignores, each naming its file and line and why (said when the
    /// runtime is not what was asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
    /// The default comes from containerd 1.x's deprecated `default_runtime` table.
    #[serde(skip)]
    pub legacy_default: bool,
}

/// One state of the host (as it is, or with the planned files written) and what is
/// installed on it: computes what each engine would use.
pub struct View<'a> {
    pub host: &'a HostRoot,
    pub inv: &'a Inventory,
    pub spec: &'a RuntimeSpec,
}

impl View<'_> {
    /// What each engine of `mode` uses.
    pub fn effective(&self, mode: &Mode) -> Result<Vec<Effective>> {
        match mode {
            Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => {
                k3s_template::services(self.inv)
                    .into_iter()
                    .map(|k| self.effective_k3s(k))
                    .collect::<Result<Vec<_>>>()
                    .map(|v| v.into_iter().flatten().collect())
            }
            Mode::Containerd(ContainerdTarget::System) => {
                let c = Containerd::load(self.host)?;
                let merges = system_merges(self.host, &c.files[0])?.merges;
                let layers: Vec<Layer> = c.files.iter().map(Layer::of).collect();
                Ok(merged_effective(
                    CONTAINERD.name,
                    &layers,
                    &merges,
                    &self.spec.name,
                ))
            }
            Mode::Docker => Ok(vec![self.effective_docker()?]),
        }
    }

    /// Why the engines of `mode` would not run containers with the runtime asked for,
    /// each naming what decides it and what to change; empty when they would.
    pub fn problems(&self, mode: &Mode) -> Result<Vec<String>> {
        let spec = self.spec;
        let mut out = Vec::new();
        for e in self.effective(mode)? {
            out.extend(e.conflicts.iter().cloned());
            let default = &e.default_runtime;
            let binary_ok = e.runtime_binary.value.as_deref() == Some(spec.path.as_str());
            if (spec.set_default && default.value != spec.name) || !binary_ok {
                // What the engine ignores may be why.
                out.extend(e.ignored.iter().cloned());
            }
            if spec.set_default && e.legacy_default {
                out.push(format!(
                    "{}: {} would use the deprecated default_runtime table as its default runtime (named 'default'), whatever default_runtime_name says (containerd 1.x, pkg/cri/config ValidatePluginConfig); move its settings into a runtimes table and remove it, then run apply again; or pass --no-set-default to only register the runtime",
                    default.source, e.engine
                ));
            } else if spec.set_default && default.value != spec.name {
                let fix = match &default.source {
                    Source::Flag { .. } => format!(
                        "a command-line flag beats every config file; remove the flag (or set it to {})",
                        spec.name
                    ),
                    Source::File { .. } => format!(
                        "that file is read after what node-setup writes; remove that setting (or set it to {})",
                        spec.name
                    ),
                    Source::Replaced { .. } => replaced_fix(spec),
                    Source::Default { .. } => "node-setup cannot set it here".to_string(),
                };
                out.push(format!(
                    "{}: {} would use default runtime '{}', not '{}': {fix}; or pass --no-set-default to only register the runtime",
                    default.source, e.engine, default.value, spec.name
                ));
            }
            let binary = &e.runtime_binary;
            match (&binary.value, &binary.source) {
                (Some(path), _) if *path == spec.path => {}
                (Some(path), source) => out.push(format!(
                    "{source}: in {} runtime '{}' runs {path}, not --runtime-path {}; change that (or pass --runtime-path {path})",
                    e.engine, spec.name, spec.path
                )),
                (None, source @ Source::Replaced { .. }) => out.push(format!(
                    "{source}: {} would not know runtime '{}': {}",
                    e.engine,
                    spec.name,
                    replaced_fix(spec)
                )),
                (None, source) => out.push(format!(
                    "{}: runtime '{}' would not be registered ({source})",
                    e.engine, spec.name
                )),
            }
        }
        if *mode == Mode::Docker {
            out.extend(k3s_not_on_docker(self.inv));
        }
        Ok(out)
    }

    fn effective_k3s(&self, k: &K3s) -> Result<Vec<Effective>> {
        let spec = self.spec;
        let t = k3s_template::template(self.host, self.inv, k)?;
        let setting = || {
            k.setting(&["default-runtime"]).unwrap_or_else(|| {
                Sourced::new(
                    "runc".into(),
                    Source::default(format!(
                        "containerd's default (no default-runtime for {} and no default_runtime_name in its template)",
                        k.name()
                    )),
                )
            })
        };
        let detected = || {
            match k3s_template::detects(self.host, k, &spec.name).first() {
            Some(p) => Sourced::new(
                Some(p.clone()),
                Source::default(format!(
                    "k3s finds it on its PATH ({}) and registers it",
                    k.path().source
                )),
            ),
            None => Sourced::new(
                None,
                Source::default(format!(
                    "k3s does not register runtime '{}' by itself (not a name it detects, or its binary is not on its PATH {})",
                    spec.name,
                    k.path().value
                )),
            ),
        }
        };
        let (default_runtime, runtime_binary, uses_base, mut imported) = match &t.text {
            None => (setting(), detected(), true, Vec::new()),
            Some(text) => {
                let files = load_with_imports(
                    self.host,
                    &t.path,
                    Flavor::K3sTemplate { version: t.version },
                )?;
                let desc = &files[0].description;
                let uses_base = desc.base_line.is_some() || text.trim().is_empty();
                let (in_file, declared) = effective_cri(&files[..1], &spec.name, None);
                let default = match &desc.default {
                    DefaultRuntime::FromK3sSetting { .. } => setting(),
                    _ => in_file,
                };
                let binary = match desc.runtimes.get(&spec.name) {
                    Some(d) => Sourced::new(
                        Some(
                            d.binary
                                .clone()
                                .unwrap_or_else(|| "(a template expression)".into()),
                        ),
                        Source::file(&t.path, d.line),
                    ),
                    None if uses_base || desc.extra_runtimes_loop.is_some() => detected(),
                    None => declared,
                };
                (default, binary, uses_base, files[1..].to_vec())
            }
        };
        k3s_template::add_drop_ins(self.host, &t, uses_base, &mut imported)?;
        let engine = K3S.name_for(k.name());
        if imported.is_empty() {
            return Ok(vec![Effective {
                engine,
                default_runtime,
                runtime_binary,
                conflicts: Vec::new(),
                ignored: Vec::new(),
                legacy_default: false,
            }]);
        }
        // k3s's containerd merges the files the template imports as its release does
        // (only containerd 2 reads a version-3 template).
        let merges = match self.inv.version() {
            _ if t.version >= 3 => vec![Merge::Keys],
            Some(v) if v.uses_containerd2() => vec![Merge::Keys],
            Some(_) => vec![Merge::Replace],
            None => vec![Merge::Replace, Merge::Keys],
        };
        let layers: Vec<Layer> = std::iter::once(Layer::k3s_template(
            &t.path,
            t.version,
            &spec.name,
            &default_runtime,
            &runtime_binary,
        ))
        .chain(imported.iter().map(Layer::of))
        .collect();
        Ok(merged_effective(&engine, &layers, &merges, &spec.name))
    }

    fn effective_docker(&self) -> Result<Effective> {
        let spec = self.spec;
        let d = Docker::load(self.host)?;
        let path = d.daemon_json.value.clone();
        let text = self.host.read(&path)?;
        let json = daemon_json::DaemonJson::parse(Path::new(&path), text.as_deref().unwrap_or(""))?;
        let line_of = |key: &str| docker::json_line(text.as_deref(), key);
        let conflicts = docker::conflicts(&d, &json, text.as_deref());
        let default_runtime = match (&d.default_flag, json.default_runtime()) {
            (Some(f), _) => f.clone(),
            (None, Some(v)) => Sourced::new(
                v.to_string(),
                Source::file(&path, line_of("default-runtime")),
            ),
            (None, None) => Sourced::new(
                "runc".into(),
                Source::default(format!(
                    "dockerd's default (no default-runtime in {path} or its flags)"
                )),
            ),
        };
        let basename = spec.path.rsplit('/').next().unwrap_or_default();
        let runtime_binary = match json.runtime_path(&spec.name) {
            Some(p) => {
                // JetPack names the binary bare; dockerd looks it up on its PATH.
                let p = if !p.contains('/') && p == basename {
                    self.host
                        .executables_in(DEFAULT_PATH.split(':'), p)
                        .into_iter()
                        .next()
                        .unwrap_or_else(|| p.to_string())
                } else {
                    p.to_string()
                };
                Sourced::new(Some(p), Source::file(&path, line_of(&spec.name)))
            }
            None => match d.runtime_flags.iter().find(|f| f.value.0 == spec.name) {
                Some(f) => Sourced::new(Some(f.value.1.clone()), f.source.clone()),
                None => Sourced::new(
                    None,
                    Source::default(format!(
                        "no runtime '{}' in {path} or dockerd's --add-runtime flags",
                        spec.name
                    )),
                ),
            },
        };
        Ok(Effective {
            engine: DOCKER.name.into(),
            default_runtime,
            runtime_binary,
            conflicts,
            ignored: Vec::new(),
            legacy_default: false,
        })
    }
}

/// What a containerd engine uses after merging `layers` as each of `merges` does: one
/// entry when they agree, else one per release family, named after it.
fn merged_effective(
    engine: &str,
    layers: &[Layer],
    merges: &[Merge],
    name: &str,
) -> Vec<Effective> {
    let all: Vec<(Merge, Effective)> = merges
        .iter()
        .map(|m| {
            let merged = MergedCri::of(layers, *m);
            let e = Effective {
                engine: engine.to_string(),
                default_runtime: merged.default(),
                runtime_binary: merged.binary(name),
                conflicts: merged.conflicts.clone(),
                ignored: merged.ignored.clone(),
                legacy_default: merged.legacy_default.is_some()
                    && merged.default().source == *merged.legacy_default.as_ref().expect("checked"),
            };
            (*m, e)
        })
        .collect();
    let same = all.windows(2).all(|w| {
        w[0].1.default_runtime.value == w[1].1.default_runtime.value
            && w[0].1.runtime_binary.value == w[1].1.runtime_binary.value
    });
    if same {
        let mut iter = all.into_iter().map(|(_, e)| e);
        let mut first = iter.next().expect("at least one merge");
        for e in iter {
            for c in e.conflicts {
                if !first.conflicts.contains(&c) {
                    first.conflicts.push(c);
                }
            }
        }
        return vec![first];
    }
    all.into_iter()
        .map(|(m, mut e)| {
            e.engine = format!("{engine} (if {})", m.releases());
            e
        })
        .collect()
}

/// The k3s services that would not run their containers through docker: in docker mode
/// docker's settings only matter for k3s with `--docker`.
pub fn k3s_not_on_docker(inv: &Inventory) -> Vec<String> {
    inv.engines()
        .into_iter()
        .filter(|(_, engine)| !matches!(engine, K3sEngine::Docker(_)))
        .map(|(k, _)| {
            format!(
                "{}: k3s would still not run containers through docker (--docker)",
                k.unit.as_ref().map_or("k3s", |u| u.path.as_str())
            )
        })
        .collect()
}

/// What to do about a file that replaces the CRI plugin table without the setting.
fn replaced_fix(spec: &RuntimeSpec) -> String {
    format!(
        "containerd before 2.0 replaces the whole CRI plugin table with the one of the file it imports last, so what came before it is lost; set default_runtime_name = \"{}\" and declare runtime '{}' in that file too, or remove its CRI plugin table",
        spec.name, spec.name
    )
}
