//! Planning: read every file involved, compute the new content in memory and the checks
//! that `check` reports, from the effective configuration (see [`crate::effective`]).
//! Then the effective configuration is computed again as it would be with the planned
//! files written: unless every engine would use the runtime asked for, the plan is
//! refused (`check`: blocked), naming what decides otherwise. Nothing here writes; any
//! error stops the run before a write.

use std::path::Path;
use std::path::PathBuf;

use serde::Serialize;

use crate::detect::{
    Choice, ContainerdTarget, Inventory, K3sEngine, K3sVersion, Mode, K3S_TEMPLATES,
};
use crate::effective::containerd::{
    effective_cri, load_with_imports, system_merges, Containerd, Layer, Loaded, Merge, MergedCri,
};
use crate::effective::docker::Docker;
use crate::effective::k3s::{K3s, Role};
use crate::effective::systemd::{Unit, DEFAULT_PATH};
use crate::effective::{Source, Sourced};
use crate::error::{Result, SetupError};
use crate::formats::containerd::{self, CopyFrom, DefaultRuntime, Flavor, RuntimeCopy, Want};
use crate::formats::unit::{self, UnitFile};
use crate::formats::{daemon_json, k3s_yaml, Edit};
use crate::host::HostRoot;
use crate::restart::Service;
use crate::RuntimeSpec;

pub mod cdi;

/// Our k3s drop-in (in the `.d` directory of the config file k3s reads); `99-` so that
/// it sorts after the usual ones (later wins).
const K3S_DROP_IN: &str = "99-edgegpu-nvidia-runtime.yaml";
/// Used when k3s has no systemd unit to add `--docker` to (OpenRC, custom service).
const K3S_DOCKER_DROP_IN: &str = "99-edgegpu-docker.yaml";
const K3S_MANIFESTS_DIR: &str = "/var/lib/rancher/k3s/server/manifests";
/// RuntimeClasses k3s ≥ v1.29.0 deploys itself (`runtimes.yaml`).
const K3S_RUNTIME_CLASSES: [&str; 2] = ["nvidia", "nvidia-experimental"];
/// Runtimes k3s registers by itself when it finds their binary, and that binary's name
/// (k3s pkg/agent/containerd/runtimes.go).
const K3S_DETECTED: [(&str, &str); 3] = [
    ("nvidia", "nvidia-container-runtime"),
    (
        "nvidia-experimental",
        "nvidia-container-runtime-experimental",
    ),
    ("nvidia-cdi", "nvidia-container-runtime.cdi"),
];
/// Searched by k3s for the NVIDIA runtimes besides its PATH (the GPU Operator's toolkit).
const K3S_EXTRA_SEARCH_DIRS: [&str; 1] = ["/usr/local/nvidia/toolkit"];
/// The first k3s release whose base template imports `<template>.d/*.toml` itself: k3s
/// PR #13680 was merged into the main branch in February 2026, after v1.35 branched
/// (backports to older minors unverified).
const K3S_BASE_IMPORTS_DROP_INS: K3sVersion = K3sVersion::new(1, 36, 0);

/// Everything `plan` needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    pub host: HostRoot,
    pub mode: crate::detect::ModeRequest,
    pub spec: RuntimeSpec,
    /// Allow a default runtime whose binary is missing.
    pub force: bool,
    pub k3s_version: Option<String>,
    /// CDI mode (`--cdi`): the engine injects the GPUs from CDI specs (see [`cdi`])
    /// instead of running the NVIDIA runtime.
    pub cdi: bool,
}

/// One file to write.
#[derive(Debug, Clone)]
pub struct FileChange {
    /// Host-absolute path as the operator knows it (may be a symlink).
    pub host_path: String,
    /// Host-absolute path of the file actually replaced (symlinks followed).
    pub target: String,
    /// On-disk path of `target`.
    pub write_path: PathBuf,
    pub old: Option<String>,
    pub new: String,
    pub purpose: String,
    /// What must pick this file up (recorded in the manifest, for revert).
    pub services: Vec<Service>,
}

/// One requirement and whether the host meets it now.
#[derive(Debug, Clone, Serialize)]
pub struct CheckItem {
    pub file: String,
    pub what: String,
    pub ok: bool,
}

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

#[derive(Debug, Clone)]
pub struct Plan {
    /// The mode and why; `None` when choosing it was refused (`check` only).
    pub choice: Option<Choice>,
    pub spec: RuntimeSpec,
    pub runtime_present: bool,
    pub changes: Vec<FileChange>,
    pub checks: Vec<CheckItem>,
    /// Services to restart when the changes are written, in any order (see restart).
    pub services: Vec<Service>,
    pub notes: Vec<String>,
    /// What the engines use now (before any change).
    pub effective: Vec<Effective>,
    /// What stops node-setup from configuring the host (check: reported; apply:
    /// refused), each naming the file, line or flag to change.
    pub blockers: Vec<String>,
    /// CDI mode: the specs found (`None` in the NVIDIA-runtime mode).
    pub cdi: Option<cdi::Specs>,
    /// CDI mode: what the engines do about CDI now (before any change).
    pub effective_cdi: Vec<cdi::EffectiveCdi>,
}

impl Plan {
    pub fn configured(&self) -> bool {
        self.blockers.is_empty() && self.checks.iter().all(|c| c.ok)
    }

    fn new(spec: &RuntimeSpec, runtime_present: bool, choice: Option<Choice>) -> Plan {
        Plan {
            choice,
            spec: spec.clone(),
            runtime_present,
            changes: Vec::new(),
            checks: vec![CheckItem {
                file: spec.path.clone(),
                what: format!(
                    "runtime binary for '{}' exists and is executable",
                    spec.name
                ),
                ok: runtime_present,
            }],
            services: Vec::new(),
            notes: Vec::new(),
            effective: Vec::new(),
            blockers: Vec::new(),
            cdi: None,
            effective_cdi: Vec::new(),
        }
    }
}

struct Builder<'a> {
    opts: &'a Options,
    inv: &'a Inventory,
    plan: Plan,
}

/// Builds the plan. With `for_check`, a missing runtime binary is a failed check instead
/// of an error, and whatever stops node-setup (a refusal) is a blocker instead of an
/// error; only files that cannot be read or parsed stay errors.
pub fn build(opts: &Options, for_check: bool) -> Result<Plan> {
    let mut plan = build_either(opts, for_check)?;
    note_temp_files(&mut plan, &opts.host);
    Ok(plan)
}

/// Notes the temporary files interrupted runs left next to the files this plan reads or
/// writes and in node-setup's state directory (`apply` and `revert` remove them before
/// they write; one that finds nothing to change leaves them).
fn note_temp_files(plan: &mut Plan, host: &HostRoot) {
    let mut dirs: Vec<PathBuf> = vec![
        host.path(crate::state::STATE_DIR),
        host.path(crate::state::BACKUP_DIR),
    ];
    let files = plan.changes.iter().map(|c| c.write_path.clone()).chain(
        plan.checks
            .iter()
            .filter(|c| c.file.starts_with('/'))
            .map(|c| host.path(c.file.split([':', ' ']).next().unwrap_or_default())),
    );
    for f in files {
        if let Some(d) = f.parent() {
            if !dirs.iter().any(|x| x == d) {
                dirs.push(d.to_path_buf());
            }
        }
    }
    for dir in dirs {
        for f in crate::fsops::temp_files(&dir).unwrap_or_default() {
            let pid = f
                .file_name()
                .and_then(|n| crate::fsops::temp_file_pid(&n.to_string_lossy()))
                .unwrap_or_default();
            let shown = f
                .strip_prefix(host.root())
                .map_or_else(|_| f.display().to_string(), |p| format!("/{}", p.display()));
            plan.notes.push(format!(
                "{shown} is a temporary file an interrupted edgegpu-node-setup run (pid {pid}) left; apply and revert remove it before they write"
            ));
        }
    }
}

fn build_either(opts: &Options, for_check: bool) -> Result<Plan> {
    if opts.cdi {
        return match cdi::build(opts, for_check) {
            Err(SetupError::Refused(why)) if for_check => {
                let mut plan = cdi::new_plan(opts, cdi::Specs::find(&opts.host)?, None);
                plan.blockers.push(why);
                Ok(plan)
            }
            other => other,
        };
    }
    validate_spec(&opts.spec)?;
    match build_for_host(opts, for_check) {
        Err(SetupError::Refused(why)) if for_check => {
            let mut plan = Plan::new(&opts.spec, opts.host.is_executable(&opts.spec.path), None);
            plan.blockers.push(why);
            Ok(plan)
        }
        other => other,
    }
}

fn build_for_host(opts: &Options, for_check: bool) -> Result<Plan> {
    let inv = Inventory::scan(&opts.host, opts.k3s_version.as_deref())?;
    let choice = crate::detect::choose(&inv, opts.mode)?;
    if choice.mode == Mode::Docker
        && daemon_json::DOCKER_BUILTIN_RUNTIMES.contains(&opts.spec.name.as_str())
    {
        return Err(SetupError::Refused(format!(
            "runtime name '{}' is reserved by docker",
            opts.spec.name
        )));
    }
    let runtime_present = opts.host.is_executable(&opts.spec.path);
    if opts.spec.set_default && !runtime_present && !opts.force && !for_check {
        return Err(SetupError::Refused(format!(
            "the runtime binary {} does not exist under {} (or is not executable): making '{}' the default runtime would stop every container from starting. Install the NVIDIA container toolkit first, or pass --force",
            opts.spec.path,
            opts.host.root().display(),
            opts.spec.name
        )));
    }
    let mut b = Builder {
        opts,
        inv: &inv,
        plan: Plan::new(&opts.spec, runtime_present, Some(choice.clone())),
    };
    let planned = match &choice.mode {
        Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => {
            b.k3s_containerd()
        }
        Mode::Containerd(ContainerdTarget::System) => b.system_containerd(),
        Mode::Docker => b.docker(),
    };
    let now = View {
        host: &opts.host,
        inv: &inv,
        spec: &opts.spec,
    };
    finish_plan(
        &mut b,
        planned,
        for_check,
        |b| {
            b.plan.effective = now.effective(&choice.mode)?;
            b.report_effective();
            Ok(())
        },
        |host, inv| {
            View {
                host,
                inv,
                spec: &opts.spec,
            }
            .problems(&choice.mode)
        },
    )?;
    Ok(b.plan)
}

/// The steps every plan ends with. A refusal while planning is a blocker for `check`
/// (the changes planned so far are dropped) and an error for `apply`. `report` records
/// what the engines use now; then, unless planning was refused, `problems` says what
/// the engines would get wrong with the planned files written (computed on a view of
/// the host that has them, by the same code): `apply` refuses naming each, `check`
/// lists them as blockers.
fn finish_plan(
    b: &mut Builder,
    planned: Result<()>,
    for_check: bool,
    report: impl FnOnce(&mut Builder) -> Result<()>,
    problems: impl FnOnce(&HostRoot, &Inventory) -> Result<Vec<String>>,
) -> Result<()> {
    let planning_refused = match planned {
        Err(SetupError::Refused(why)) if for_check => {
            b.plan.changes.clear();
            b.plan.blockers.push(why);
            true
        }
        other => {
            other?;
            false
        }
    };
    report(b)?;
    if planning_refused {
        return Ok(());
    }
    let opts = b.opts;
    let host = opts.host.with_files(
        b.plan
            .changes
            .iter()
            .map(|c| (c.target.clone(), c.new.clone())),
    );
    let inv = Inventory::scan(&host, opts.k3s_version.as_deref())?;
    let problems = problems(&host, &inv)?;
    if !problems.is_empty() {
        if !for_check {
            return Err(SetupError::Refused(format!(
                "{}\nnothing was written",
                problems.join("\n")
            )));
        }
        b.plan.blockers.extend(problems);
    }
    Ok(())
}

fn validate_spec(spec: &RuntimeSpec) -> Result<()> {
    let name_ok = !spec.name.is_empty()
        && spec
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        return Err(SetupError::Refused(format!(
            "--runtime-name {:?}: use letters, digits, '-', '_' or '.'",
            spec.name
        )));
    }
    if !spec.path.starts_with('/') || spec.path.contains(['\n', '"', '\'']) {
        return Err(SetupError::Refused(format!(
            "--runtime-path {:?} must be an absolute path",
            spec.path
        )));
    }
    Ok(())
}

/// A k3s template: its path, the config version its base renders, whether it exists.
struct Template {
    path: String,
    version: i64,
    text: Option<String>,
}

impl Template {
    /// The directory of drop-ins k3s's base template imports (k3s PR #13680):
    /// `config-v3.toml.d` next to `config-v3.toml.tmpl`, `config.toml.d` next to
    /// `config.toml.tmpl`.
    fn drop_in_dir(&self) -> String {
        format!("{}.d", self.path.trim_end_matches(".tmpl"))
    }
}

/// The distinct executables named `name` in `dirs`, in order (a second path to a file
/// already found, through a symlink, is left out).
fn executables_in<'d>(
    host: &HostRoot,
    dirs: impl IntoIterator<Item = &'d str>,
    name: &str,
) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut files = Vec::new();
    for dir in dirs {
        let candidate = format!("{}/{name}", dir.trim_end_matches('/'));
        if !dir.starts_with('/') || !host.is_executable(&candidate) {
            continue;
        }
        let file = host.resolve(&candidate).ok();
        if !files.contains(&file) {
            files.push(file);
            found.push(candidate);
        }
    }
    found
}

impl Builder<'_> {
    fn host(&self) -> &HostRoot {
        &self.opts.host
    }

    fn spec(&self) -> &RuntimeSpec {
        &self.opts.spec
    }

    /// The host as it is now.
    fn now(&self) -> View<'_> {
        View {
            host: &self.opts.host,
            inv: self.inv,
            spec: &self.opts.spec,
        }
    }

    /// Records the check and the edit's notes and, if the content differs, the change.
    fn file(
        &mut self,
        host_path: &str,
        old: Option<String>,
        edit: Edit,
        what: String,
        services: Vec<Service>,
    ) -> Result<()> {
        self.plan.notes.extend(edit.notes);
        self.plan.checks.push(CheckItem {
            file: host_path.to_string(),
            what: what.clone(),
            ok: edit.new.is_none(),
        });
        if let Some(new) = edit.new {
            // Restart only what reads a file that changes.
            self.plan.services.extend(services.iter().cloned());
            let resolved = self.host().resolve_for_write(host_path)?;
            self.plan.changes.push(FileChange {
                host_path: host_path.to_string(),
                target: resolved.host_path,
                write_path: resolved.disk,
                old,
                new,
                purpose: what,
                services,
            });
        }
        Ok(())
    }

    /// Restarting k3s: every k3s unit found.
    fn k3s_units(&self) -> Vec<Service> {
        self.inv
            .k3s
            .iter()
            .filter_map(|k| k.unit.as_ref())
            .map(|u| Service::K3s(u.name.clone()))
            .collect()
    }

    /// Whether k3s registers `--runtime-name` with `--runtime-path` by itself; refuses
    /// when it would register it with another binary (a template cannot declare the
    /// same runtime again).
    fn k3s_registers(&self, k: &K3s) -> Result<bool> {
        let found = self.now().k3s_detects(k);
        let spec_file = self.host().resolve(&self.spec().path).ok();
        let same = |p: &String| p == &self.spec().path || self.host().resolve(p).ok() == spec_file;
        match found.as_slice() {
            [] => Ok(false),
            [one] if same(one) => Ok(true),
            _ => {
                let others: Vec<&String> = found.iter().filter(|p| !same(p)).collect();
                let path = k.path();
                Err(SetupError::Refused(format!(
                    "k3s registers runtime '{}' by itself with the first {} it finds on its PATH ({}: {}) or in {}; it finds {}, not --runtime-path {}. Remove the other binary (a leftover of the GPU Operator's toolkit?), or pass --runtime-path {} (or another --runtime-name)",
                    self.spec().name,
                    found[0].rsplit('/').next().unwrap_or_default(),
                    path.source,
                    path.value,
                    K3S_EXTRA_SEARCH_DIRS.join(", "),
                    others.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" and "),
                    self.spec().path,
                    others[0]
                )))
            }
        }
    }

    /// What a template with the base line declares that the base (or k3s's newer base)
    /// declares too: refused, since k3s would not start.
    fn base_conflicts(&mut self, t: &Template, desc: &containerd::Description) -> Result<()> {
        if let Some((line, what)) = &desc.redeclares_base_table {
            return Err(SetupError::Refused(format!(
                "{}:{line}: the template declares [{what}], which the base template already emits: containerd refuses a table (or key) declared twice and k3s would not start. Remove it (the base has it) and run apply again",
                t.path
            )));
        }
        if let Some(line) = desc.imports_before_base {
            let why = format!(
                "{}:{line}: the template sets imports before the base line; k3s releases whose base imports {}/*.toml itself (k3s PR #13680, from {K3S_BASE_IMPORTS_DROP_INS}) then declare imports twice and containerd does not start",
                t.path,
                t.drop_in_dir()
            );
            match self.inv.version() {
                Some(v) if v < K3S_BASE_IMPORTS_DROP_INS => self.plan.notes.push(format!(
                    "{why}: move the imported files into {} before upgrading k3s",
                    t.drop_in_dir()
                )),
                _ => {
                    return Err(SetupError::Refused(format!(
                        "{why}. Remove that line (put the imported files into that directory) and run apply again"
                    )))
                }
            }
        }
        Ok(())
    }

    /// k3s's own containerd: the runtime is registered by k3s itself or declared in its
    /// template, and made the default in the template or through k3s's `default-runtime`.
    fn k3s_containerd(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let services: Vec<K3s> = self.now().k3s_services().into_iter().cloned().collect();
        for k in &services {
            let t = self.now().template(k)?;
            let flavor = Flavor::K3sTemplate { version: t.version };
            let desc = containerd::describe(Path::new(&t.path), t.text.as_deref(), flavor)?;
            let new_or_base =
                t.text.as_deref().map_or(true, |s| s.trim().is_empty()) || desc.base_line.is_some();
            self.base_conflicts(&t, &desc)?;
            let emits_detected = new_or_base || desc.extra_runtimes_loop.is_some();
            let by_k3s = emits_detected && self.k3s_registers(k)?;
            if by_k3s {
                if let Some(d) = desc.runtimes.get(&spec.name) {
                    return Err(SetupError::Refused(format!(
                        "{}:{}: the template declares runtime '{}', which k3s also declares (it finds the binary on its PATH): containerd refuses a table declared twice. Remove that table and run apply again",
                        t.path, d.line, spec.name
                    )));
                }
                self.plan.notes.push(format!(
                    "k3s registers runtime '{}' itself ({} is on its PATH); not declaring it again",
                    spec.name, spec.path
                ));
            } else if !new_or_base || desc.runtimes.contains_key(&spec.name) {
                // A full template declares the runtimes itself.
            } else {
                self.plan.notes.push(format!(
                    "k3s does not register runtime '{}' with {} by itself (not one of its names, or not on its PATH {}): declaring it in {}",
                    spec.name, spec.path, k.path().value, t.path
                ));
            }
            let default_via_k3s = spec.set_default
                && (new_or_base || matches!(desc.default, DefaultRuntime::FromK3sSetting { .. }));
            let default_in_file = spec.set_default && !default_via_k3s;
            let declare = !by_k3s;
            let changes_file = t.text.is_some() || declare;
            if t.text.is_none() && declare {
                if let Some(v) = self.inv.version() {
                    if !v.has_base_template() {
                        return Err(SetupError::Refused(format!(
                            "k3s {v} predates {{{{ template \"base\" . }}}} (v1.24.17, v1.25.13, v1.26.8, v1.27.5, v1.28.1): a new {} would have to copy k3s's whole config. Use --mode docker or upgrade k3s",
                            t.path
                        )));
                    }
                }
            }
            if changes_file {
                let want = Want {
                    spec: &spec,
                    declare_runtime: declare,
                    set_default: default_in_file,
                    version: None,
                    copy: CopyFrom::ThisFile,
                };
                let edit = containerd::edit(Path::new(&t.path), t.text.as_deref(), flavor, want)?;
                let what = runtime_change(
                    "containerd",
                    &spec,
                    default_in_file.then_some("the default"),
                );
                let services = self.k3s_units();
                self.file(&t.path, t.text.clone(), edit, what, services)?;
            }
            if default_via_k3s {
                if new_or_base {
                    self.plan.notes.push(
                        "the base template emits the table holding default_runtime_name; the default is set through k3s's default-runtime setting instead".into(),
                    );
                }
                if let Some(v) = self.inv.version() {
                    if !v.has_default_runtime() {
                        return Err(SetupError::Refused(format!(
                            "k3s {v}: the base template owns default_runtime_name and this k3s has no default-runtime setting (v1.29.0+). Pass --no-set-default (pods then use runtimeClassName: {}) or use --mode docker",
                            spec.name
                        )));
                    }
                }
                self.k3s_default_setting(k)?;
            }
        }
        self.runtime_class()
    }

    /// `default-runtime: <name>` through our drop-in in the `.d` directory of the config
    /// file k3s reads, unless k3s's effective setting already says so. (A flag or a file
    /// read after ours that says otherwise is found by the check of the planned result.)
    fn k3s_default_setting(&mut self, k: &K3s) -> Result<()> {
        let name = self.spec().name.clone();
        let path = format!("{}/{K3S_DROP_IN}", k.drop_in_dir());
        let ours = self.host().read(&path)?;
        let content = k3s_yaml::drop_in(
            "containers run with the NVIDIA runtime by default",
            "default-runtime",
            &name,
        );
        let edit = match k.setting(&["default-runtime"]) {
            Some(s) if s.value == name => Edit::unchanged(),
            _ => Edit::replace(ours.as_deref(), content),
        };
        let services = self.k3s_units();
        self.file(
            &path,
            ours,
            edit,
            format!("k3s default-runtime is '{name}'"),
            services,
        )
    }

    /// A RuntimeClass so pods can ask for the runtime by name (servers only; k3s ≥ v1.29
    /// deploys its own for the names it detects).
    fn runtime_class(&mut self) -> Result<()> {
        let name = self.spec().name.clone();
        if !self.inv.is_k3s_server() {
            self.plan
                .notes
                .push("agent node: the RuntimeClass is deployed from a server".into());
            return Ok(());
        }
        if let Some(v) = self.inv.version() {
            if v.has_default_runtime() && K3S_RUNTIME_CLASSES.contains(&name.as_str()) {
                self.plan.notes.push(format!(
                    "k3s {v} deploys RuntimeClass '{name}' itself (runtimes.yaml); not adding another"
                ));
                return Ok(());
            }
        }
        let path = format!("{K3S_MANIFESTS_DIR}/edgegpu-runtimeclass-{name}.yaml");
        let content = format!(
            "# Written by edgegpu-node-setup: lets pods select the NVIDIA runtime with runtimeClassName: {name}\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {name}\nhandler: {name}\n"
        );
        let old = self.host().read(&path)?;
        let edit = Edit::replace(old.as_deref(), content);
        // k3s's deploy controller watches the folder: no restart needed.
        self.file(
            &path,
            old,
            edit,
            format!("RuntimeClass '{name}' manifest"),
            Vec::new(),
        )
    }

    /// The system containerd: the file whose CRI plugin table takes effect, as containerd
    /// merges its files (see [`Merge`]: before 2.0 the last file with the table the
    /// merged version names; from 2.0 the last one with a table that wins the merge) gets
    /// the runtime and the default. When the release is not known and the two rules
    /// name different files, the first edit that works under both is planned (else the
    /// first, which the check of the planned result refuses, naming what decides).
    fn system_containerd(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let unit = Unit::load(self.host(), "containerd.service")?;
        let c = Containerd::read(self.host(), unit.as_ref())?;
        let (merges, release) = system_merges(self.host(), &c.files[0])?;
        let layers: Vec<Layer> = c.files.iter().map(Layer::of).collect();
        let merged: Vec<MergedCri> = merges.iter().map(|m| MergedCri::of(&layers, *m)).collect();
        if spec.set_default {
            legacy_default_settings(&merged, &spec)?;
        }
        let copy = merged[0].copy(&spec.name);
        let mut owners: Vec<(usize, Option<i64>)> = Vec::new();
        for m in &merged {
            let (file, version) = m.owner;
            let empty = c.files[file]
                .text
                .as_deref()
                .map_or(true, |t| t.trim().is_empty());
            // An empty file is written with a version of its own (2, read by both).
            let owner = (file, (!empty).then_some(version));
            if !owners.contains(&owner) {
                owners.push(owner);
            }
        }
        let mut planned = Vec::new();
        for &owner in &owners {
            let edit = self.system_edit(&c, owner, copy.as_ref())?;
            let works = owners.len() == 1 || self.works_everywhere(&c, owner.0, &edit, &merges)?;
            planned.push((owner, edit));
            if works {
                let last = planned.len() - 1;
                planned.swap(0, last);
                break;
            }
        }
        let ((file, _), edit) = planned.swap_remove(0);
        let owner = c.files[file].clone();
        if c.files.len() > 1 {
            self.plan.notes.push(format!(
                "containerd imports files; how they merge: {release}"
            ));
        }
        if owner.path != c.config.value {
            let how = match merges.as_slice() {
                [Merge::Keys] => "containerd 2 merges imported tables key by key and this is the last file with the CRI plugin table",
                _ => "its CRI plugin table replaces the earlier one before containerd 2.0",
            };
            self.plan.notes.push(format!(
                "{} is imported by {} ({how}): editing {}",
                owner.path, c.config.value, owner.path
            ));
        }
        if let Some(copy) = &copy {
            self.plan.notes.push(format!(
                "runtime '{}' copies the settings of runtime '{}', which pods use now (SystemdCgroup included)",
                spec.name, copy.from
            ));
        }
        let what = runtime_change(
            "containerd",
            &spec,
            spec.set_default.then_some("the default"),
        );
        let services = self.system_containerd_services();
        self.file(&owner.path, owner.text.clone(), edit, what, services)
    }

    /// The edit of the system containerd's file `owner` (index in `c.files`, and the
    /// config version whose CRI plugin name to write under, `None`: the file's own).
    fn system_edit(
        &self,
        c: &Containerd,
        owner: (usize, Option<i64>),
        copy: Option<&RuntimeCopy>,
    ) -> Result<Edit> {
        let spec = self.spec();
        let f = &c.files[owner.0];
        let want = Want {
            spec,
            declare_runtime: true,
            set_default: spec.set_default,
            version: owner.1,
            copy: CopyFrom::Given(copy),
        };
        containerd::edit(Path::new(&f.path), f.text.as_deref(), Flavor::System, want)
    }

    /// Whether, with `edit` written to file `index`, containerd would use the runtime (as
    /// the default, if asked) however it merges its files (`merges`).
    fn works_everywhere(
        &self,
        c: &Containerd,
        index: usize,
        edit: &Edit,
        merges: &[Merge],
    ) -> Result<bool> {
        let spec = self.spec();
        let mut files = c.files.clone();
        if let Some(new) = &edit.new {
            let f = &mut files[index];
            f.description = containerd::describe(Path::new(&f.path), Some(new), Flavor::System)?;
            f.text = Some(new.clone());
        }
        let layers: Vec<Layer> = files.iter().map(Layer::of).collect();
        Ok(merges.iter().all(|m| {
            let merged = MergedCri::of(&layers, *m);
            (!spec.set_default || merged.default().value == spec.name)
                && merged.binary(&spec.name).value.as_deref() == Some(spec.path.as_str())
        }))
    }

    /// Restarting the system containerd: containerd, then the k3s units that use it.
    fn system_containerd_services(&self) -> Vec<Service> {
        std::iter::once(Service::Containerd)
            .chain(
                self.inv
                    .engines()
                    .into_iter()
                    .filter(|(_, e)| {
                        matches!(
                            e,
                            K3sEngine::SystemContainerd(_)
                                | K3sEngine::RequiresContainerdService(_)
                        )
                    })
                    .filter_map(|(k, _)| k.unit.as_ref().map(|u| Service::K3s(u.name.clone()))),
            )
            .collect()
    }

    fn docker(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let unit = Unit::load(self.host(), "docker.service")?;
        let d = Docker::read(self.host(), unit.as_ref())?;
        // A --default-runtime flag decides, and the same setting in daemon.json would
        // stop dockerd: then the default is not written (the planned result says
        // whether the flag's value is the one asked for).
        let default_in_file = spec.set_default && d.default_flag.is_none();
        self.k3s_uses_docker()?;
        let path = d.daemon_json.value.clone();
        let old = self.host().read(&path)?;
        // JetPack's daemon.json names the runtime by its bare name, which dockerd looks
        // up on its PATH: fine when that finds --runtime-path.
        let basename = spec.path.rsplit('/').next().unwrap_or_default();
        let bare_name_ok = executables_in(self.host(), DEFAULT_PATH.split(':'), basename)
            .first()
            .is_some_and(|p| *p == spec.path);
        let want = daemon_json::Want {
            set_default: default_in_file,
            bare_name_ok,
        };
        let edit = daemon_json::edit(Path::new(&path), old.as_deref(), &spec, want)?;
        let what = runtime_change(
            "docker",
            &spec,
            default_in_file.then_some("default-runtime"),
        );
        // A reload picks up what apply adds; whatever it cannot carry out (see
        // reload_applies) gets a restart.
        let service = match &edit.new {
            Some(new) if !daemon_json::reload_applies(old.as_deref(), Some(new)) => {
                Service::DockerRestart
            }
            _ => Service::Docker,
        };
        self.file(&path, old, edit, what, vec![service])?;
        if self.inv.docker.is_none() {
            self.plan
                .notes
                .push("docker was not found under the root; daemon.json is prepared for it".into());
        }
        Ok(())
    }

    /// k3s must talk to docker (cri-dockerd) for docker's default runtime to matter:
    /// `--docker` after the subcommand of each k3s unit's effective ExecStart, or (no
    /// unit) `docker: true` in a drop-in.
    fn k3s_uses_docker(&mut self) -> Result<()> {
        let services: Vec<K3s> = self.inv.k3s.clone();
        for k in &services {
            if let Some(s) = k.enabled("docker") {
                self.plan.checks.push(CheckItem {
                    file: s.source.to_string(),
                    what: format!("{} uses docker (--docker)", k.name()),
                    ok: true,
                });
                continue;
            }
            let Some(u) = &k.unit else {
                let path = format!("{}/{K3S_DOCKER_DROP_IN}", k.drop_in_dir());
                let old = self.host().read(&path)?;
                let content =
                    k3s_yaml::drop_in("k3s runs containers through docker", "docker", "true");
                let edit = Edit::replace(old.as_deref(), content);
                self.file(
                    &path,
                    old,
                    edit,
                    "k3s uses docker (docker: true)".into(),
                    Vec::new(),
                )?;
                continue;
            };
            let (exec_file, _, _) = u.exec_start()?;
            let exec_file = exec_file.to_string();
            let old = self.host().read(&exec_file)?.unwrap_or_default();
            let parsed = UnitFile::parse(Path::new(&exec_file), &old)?;
            let edit = unit::add_k3s_docker_flag(&parsed)?;
            let role = if k.role == Role::Server {
                "server"
            } else {
                "agent"
            };
            self.file(
                &exec_file,
                Some(old),
                edit,
                format!("k3s {role} ExecStart has --docker"),
                vec![Service::DaemonReload, Service::K3s(u.name.clone())],
            )?;
        }
        Ok(())
    }

    /// What each engine uses now, added to the checks: `check` never says "configured"
    /// while the effective default runtime (or the runtime's binary) is another.
    fn report_effective(&mut self) {
        let spec = self.spec().clone();
        for e in self.plan.effective.clone() {
            if spec.set_default {
                self.plan.checks.push(CheckItem {
                    file: e.default_runtime.source.to_string(),
                    what: format!(
                        "{}: effective default runtime is '{}' (now: '{}')",
                        e.engine, spec.name, e.default_runtime.value
                    ),
                    ok: e.default_runtime.value == spec.name,
                });
            }
            let now = e
                .runtime_binary
                .value
                .clone()
                .unwrap_or_else(|| "not registered".into());
            self.plan.checks.push(CheckItem {
                file: e.runtime_binary.source.to_string(),
                what: format!(
                    "{}: runtime '{}' runs {} (now: {now})",
                    e.engine, spec.name, spec.path
                ),
                ok: now == spec.path,
            });
        }
    }
}

/// One state of the host (as it is, or with the planned files written) and what is
/// installed on it: computes what each engine would use.
struct View<'a> {
    host: &'a HostRoot,
    inv: &'a Inventory,
    spec: &'a RuntimeSpec,
}

impl View<'_> {
    /// k3s services that render their own containerd config, one per template dir.
    fn k3s_services(&self) -> Vec<&K3s> {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for k in &self.inv.k3s {
            let key = (k.template_dir(), k.drop_in_dir());
            if !seen.contains(&key) {
                seen.push(key);
                out.push(k);
            }
        }
        out
    }

    /// The template k3s uses (the first that exists), or the one we would create.
    fn template(&self, k: &K3s) -> Result<Template> {
        let dir = k.template_dir();
        for (name, version) in K3S_TEMPLATES {
            let path = format!("{dir}/{name}");
            if let Some(text) = self.host.read(&path)? {
                return Ok(Template {
                    path,
                    version,
                    text: Some(text),
                });
            }
        }
        let v3 = self.inv.version().map_or(true, |v| v.uses_containerd2());
        let (name, version) = if v3 {
            K3S_TEMPLATES[0]
        } else {
            K3S_TEMPLATES[1]
        };
        Ok(Template {
            path: format!("{dir}/{name}"),
            version,
            text: None,
        })
    }

    /// The binaries k3s finds for runtime `--runtime-name` on its own (k3s looks the
    /// NVIDIA runtimes' binaries up on its PATH, plus the GPU Operator's toolkit
    /// directory), distinct files only, in PATH order. Empty for other names.
    fn k3s_detects(&self, k: &K3s) -> Vec<String> {
        let Some((_, binary)) = K3S_DETECTED.iter().find(|(n, _)| *n == self.spec.name) else {
            return Vec::new();
        };
        let path = k.path();
        let dirs = path.value.split(':').chain(K3S_EXTRA_SEARCH_DIRS);
        executables_in(self.host, dirs, binary)
    }

    /// What each engine of `mode` uses.
    fn effective(&self, mode: &Mode) -> Result<Vec<Effective>> {
        match mode {
            Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => self
                .k3s_services()
                .into_iter()
                .map(|k| self.effective_k3s(k))
                .collect::<Result<Vec<_>>>()
                .map(|v| v.into_iter().flatten().collect()),
            Mode::Containerd(ContainerdTarget::System) => {
                let unit = Unit::load(self.host, "containerd.service")?;
                let c = Containerd::read(self.host, unit.as_ref())?;
                let (merges, _) = system_merges(self.host, &c.files[0])?;
                let layers: Vec<Layer> = c.files.iter().map(Layer::of).collect();
                Ok(merged_effective(
                    "system containerd",
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
    fn problems(&self, mode: &Mode) -> Result<Vec<String>> {
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

    /// Files the template imports (`imported`, in load order), and, when k3s's base is
    /// used, the template drop-in directory the base imports (k3s PR #13680): they load
    /// after the template and override it.
    fn add_drop_ins(
        &self,
        t: &Template,
        uses_base: bool,
        imported: &mut Vec<Loaded>,
    ) -> Result<()> {
        if uses_base {
            for f in self.host.list_dir(&t.drop_in_dir(), ".toml")? {
                if !imported.iter().any(|l: &Loaded| l.path == f) {
                    imported.extend(load_with_imports(self.host, &f, Flavor::System)?);
                }
            }
        }
        Ok(())
    }

    fn effective_k3s(&self, k: &K3s) -> Result<Vec<Effective>> {
        let spec = self.spec;
        let t = self.template(k)?;
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
            match self.k3s_detects(k).first() {
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
        self.add_drop_ins(&t, uses_base, &mut imported)?;
        let engine = format!("k3s containerd ({})", k.name());
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
        let unit = Unit::load(self.host, "docker.service")?;
        let d = Docker::read(self.host, unit.as_ref())?;
        let path = d.daemon_json.value.clone();
        let text = self.host.read(&path)?;
        let json = daemon_json::DaemonJson::parse(Path::new(&path), text.as_deref().unwrap_or(""))?;
        let line_of = |key: &str| json_line(text.as_deref(), key);
        let conflicts = docker_conflicts(&d, &json, text.as_deref());
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
                    executables_in(self.host, DEFAULT_PATH.split(':'), p)
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
            engine: "docker".into(),
            default_runtime,
            runtime_binary,
            conflicts,
            ignored: Vec::new(),
            legacy_default: false,
        })
    }
}

/// Refuses to make a runc v2 runtime the default where containerd 1.x's deprecated CRI
/// settings decide the default (a `default_runtime` table) or need it under the legacy
/// shim (`systemd_cgroup`, `no_pivot`: the CRI plugin would not load), naming them as
/// the files say now (pkg/cri/config ValidatePluginConfig).
fn legacy_default_settings(merged: &[MergedCri], spec: &RuntimeSpec) -> Result<()> {
    let mut why = Vec::new();
    for m in merged {
        if let Some(at) = &m.legacy_default {
            why.push(format!(
                "{at}: {} uses the deprecated default_runtime table as its default runtime (named 'default'), whatever default_runtime_name says (pkg/cri/config ValidatePluginConfig): node-setup cannot make '{}' the default. Move its settings into a runtimes table (and default_runtime_name) and remove it, then run apply again; or pass --no-set-default to only register the runtime",
                m.merge.releases(),
                spec.name
            ));
        }
        for (key, at) in m.legacy_switches() {
            why.push(format!(
                "{at}: with runtime '{}' (io.containerd.runc.v2) as the default, {}'s CRI plugin would not load: the deprecated {key} only works while the default runtime runs under io.containerd.runtime.v1.linux (pkg/cri/config ValidatePluginConfig). Remove {key} (for systemd_cgroup: set SystemdCgroup = true in the options of each runtime instead) and run apply again; or pass --no-set-default to only register the runtime",
                spec.name,
                m.merge.releases()
            ));
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(SetupError::Refused(why.join("\n")))
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
/// How the plan lists a runtime entry written to `engine`'s config file: the runtime, its
/// binary and, where the same file makes it the default, the setting that does.
fn runtime_change(engine: &str, spec: &RuntimeSpec, default_setting: Option<&str>) -> String {
    let entry = format!("{engine} runtime '{}' → {}", spec.name, spec.path);
    match default_setting {
        Some(setting) => format!("{entry} and {setting}"),
        None => entry,
    }
}

fn k3s_not_on_docker(inv: &Inventory) -> Vec<String> {
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

/// The 1-based line of daemon.json `text` where `"key"` first appears (0: nowhere).
fn json_line(text: Option<&str>, key: &str) -> usize {
    let needle = format!("\"{key}\"");
    text.and_then(|t| t.lines().position(|l| l.contains(&needle)))
        .map_or(0, |i| i + 1)
}

/// Settings given both as a dockerd flag and in daemon.json (`text`, parsed as `json`):
/// dockerd refuses to start then, equal values included (moby daemon/config,
/// findConfigurationConflicts; `runtimes` merge since 19.03).
fn docker_conflicts(d: &Docker, json: &daemon_json::DaemonJson, text: Option<&str>) -> Vec<String> {
    let path = &d.daemon_json.value;
    d.flags
        .iter()
        .filter(|f| f.value != "runtimes" && json.root.contains_key(&f.value))
        .map(|f| {
            format!(
                "{} and {path}:{}: dockerd would not start: '{}' is given both as a flag and in the configuration file. Remove one of them",
                f.source,
                json_line(text, &f.value),
                f.value
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
