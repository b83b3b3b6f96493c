//! Planning: read every file involved, compute the new content in memory and the checks
//! that `check` reports, from the effective configuration (see [`crate::effective`]).
//! Nothing here writes; any error stops the run before a write.

use std::path::PathBuf;

use serde::Serialize;

use crate::detect::{Choice, ContainerdTarget, Inventory, K3sEngine, Mode, K3S_TEMPLATES};
use crate::effective::containerd::{default_of, load_with_imports, Containerd, Loaded};
use crate::effective::docker::Docker;
use crate::effective::k3s::{K3s, Role};
use crate::effective::systemd::{Unit, DEFAULT_PATH};
use crate::effective::{Source, Sourced};
use crate::error::{Result, SetupError};
use crate::formats::containerd::{self, DefaultRuntime, Description, Flavor, Want};
use crate::formats::unit::{self, UnitFile};
use crate::formats::{daemon_json, k3s_yaml, Edit};
use crate::host::HostRoot;
use crate::restart::Service;
use crate::RuntimeSpec;

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

/// Everything `plan` needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    pub host: HostRoot,
    pub mode: crate::detect::ModeRequest,
    pub spec: RuntimeSpec,
    /// Allow a default runtime whose binary is missing.
    pub force: bool,
    pub k3s_version: Option<String>,
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
    /// The binary the runtime named `--runtime-name` runs, if the engine has it.
    pub runtime_binary: Option<Sourced<String>>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub choice: Choice,
    pub spec: RuntimeSpec,
    pub runtime_present: bool,
    pub changes: Vec<FileChange>,
    pub checks: Vec<CheckItem>,
    /// Services to restart when the changes are written, in any order (see restart).
    pub services: Vec<Service>,
    pub notes: Vec<String>,
    /// What the engines use now (before any change).
    pub effective: Vec<Effective>,
    /// Settings node-setup does not own that stop it (check: reported; apply: refused).
    pub blockers: Vec<String>,
}

impl Plan {
    pub fn configured(&self) -> bool {
        self.blockers.is_empty() && self.checks.iter().all(|c| c.ok)
    }
}

struct Builder<'a> {
    opts: &'a Options,
    inv: &'a Inventory,
    plan: Plan,
}

/// Builds the plan. With `for_check`, a missing runtime binary is a failed check instead
/// of an error, and a setting that stops node-setup is a blocker instead of an error.
pub fn build(opts: &Options, for_check: bool) -> Result<Plan> {
    validate_spec(&opts.spec)?;
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
        plan: Plan {
            choice: choice.clone(),
            spec: opts.spec.clone(),
            runtime_present,
            changes: Vec::new(),
            checks: vec![CheckItem {
                file: opts.spec.path.clone(),
                what: format!(
                    "runtime binary for '{}' exists and is executable",
                    opts.spec.name
                ),
                ok: runtime_present,
            }],
            services: Vec::new(),
            notes: Vec::new(),
            effective: Vec::new(),
            blockers: Vec::new(),
        },
    };
    let planned = match &choice.mode {
        Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => {
            b.k3s_containerd()
        }
        Mode::Containerd(ContainerdTarget::System) => b.system_containerd(),
        Mode::Docker => b.docker(),
    };
    match planned {
        Err(SetupError::Refused(why)) if for_check => {
            b.plan.changes.clear();
            b.plan.blockers.push(why);
        }
        other => other?,
    }
    b.report_effective()?;
    Ok(b.plan)
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

impl Builder<'_> {
    fn host(&self) -> &HostRoot {
        &self.opts.host
    }

    fn spec(&self) -> &RuntimeSpec {
        &self.opts.spec
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
            self.plan.services.extend(services);
            let resolved = self.host().resolve_for_write(host_path)?;
            self.plan.changes.push(FileChange {
                host_path: host_path.to_string(),
                target: resolved.host_path,
                write_path: resolved.disk,
                old,
                new,
                purpose: what,
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

    /// k3s services that render their own containerd config, one per template dir.
    fn k3s_services(&self) -> Vec<&'_ K3s> {
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
            if let Some(text) = self.host().read(&path)? {
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
        let Some((_, binary)) = K3S_DETECTED.iter().find(|(n, _)| *n == self.spec().name) else {
            return Vec::new();
        };
        let path = k.path();
        let mut found: Vec<String> = Vec::new();
        let mut files = Vec::new();
        for dir in path.value.split(':').chain(K3S_EXTRA_SEARCH_DIRS) {
            let candidate = format!("{}/{binary}", dir.trim_end_matches('/'));
            if !dir.starts_with('/') || !self.host().is_executable(&candidate) {
                continue;
            }
            let file = self.host().resolve(&candidate).ok();
            if !files.contains(&file) {
                files.push(file);
                found.push(candidate);
            }
        }
        found
    }

    /// Whether k3s registers `--runtime-name` with `--runtime-path` by itself; refuses
    /// when it would register it with another binary (a template cannot declare the
    /// same runtime again).
    fn k3s_registers(&self, k: &K3s) -> Result<bool> {
        let found = self.k3s_detects(k);
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

    /// k3s's own containerd: the runtime is registered by k3s itself or declared in its
    /// template, and made the default in the template or through k3s's `default-runtime`.
    fn k3s_containerd(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let services: Vec<K3s> = self.k3s_services().into_iter().cloned().collect();
        for k in &services {
            let t = self.template(k)?;
            let flavor = Flavor::K3sTemplate { version: t.version };
            let desc = containerd::describe(&self.host().path(&t.path), t.text.as_deref(), flavor)?;
            let new_or_base =
                t.text.as_deref().map_or(true, |s| s.trim().is_empty()) || desc.base_line.is_some();
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
                };
                let edit =
                    containerd::edit(&self.host().path(&t.path), t.text.as_deref(), flavor, want)?;
                let what = if default_in_file {
                    format!(
                        "containerd runtime '{}' → {} and the default",
                        spec.name, spec.path
                    )
                } else {
                    format!("containerd runtime '{}' → {}", spec.name, spec.path)
                };
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
    /// file k3s reads, unless k3s's effective setting already says so. Refuses when a
    /// command-line flag or a config file read after ours sets something else.
    fn k3s_default_setting(&mut self, k: &K3s) -> Result<()> {
        let name = self.spec().name.clone();
        let path = format!("{}/{K3S_DROP_IN}", k.drop_in_dir());
        let current = k.setting(&["default-runtime"]);
        let ours = self.host().read(&path)?;
        let content = k3s_yaml::drop_in(
            "containers run with the NVIDIA runtime by default",
            "default-runtime",
            &name,
        );
        let entries = k3s_yaml::parse(&self.host().path(&path), &content)?;
        let after = k.setting_with(&["default-runtime"], Some((&path, &entries)));
        if let Some(s) = after.filter(|s| s.value != name) {
            let fix = match &s.source {
                Source::Flag { .. } => "command-line flags beat every k3s config file; remove the flag (or set it to the NVIDIA runtime)",
                _ => "that file is read after ours; remove that line",
            };
            return Err(SetupError::Refused(format!(
                "{}: sets default-runtime: {} for {}, which overrides {path}: {fix}, then run apply again",
                s.source,
                s.value,
                k.name()
            )));
        }
        let edit = match &current {
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
        )?;
        if let Some(v) = self.inv.version() {
            if !v.has_default_runtime() {
                self.plan.notes.push(format!(
                    "k3s {v} may not know the default-runtime setting (added in v1.29.0, backported to some 1.25-1.28 releases)"
                ));
            }
        }
        Ok(())
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

    /// The system containerd: the file that owns the CRI plugin table (the main config,
    /// or the last import that has the table) gets the runtime and the default.
    fn system_containerd(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let unit = Unit::load(self.host(), "containerd.service")?;
        let c = Containerd::read(self.host(), unit.as_ref())?;
        let owner = c.cri_owner().clone();
        if owner.path != c.config.value {
            self.plan.notes.push(format!(
                "{} is imported by {} and has the CRI plugin table, which replaces the earlier one (containerd imports): editing {}",
                owner.path, c.config.value, owner.path
            ));
        }
        let want = Want {
            spec: &spec,
            declare_runtime: true,
            set_default: spec.set_default,
        };
        let edit = containerd::edit(
            &self.host().path(&owner.path),
            owner.text.as_deref(),
            Flavor::System,
            want,
        )?;
        let what = if spec.set_default {
            format!(
                "containerd runtime '{}' → {} and the default",
                spec.name, spec.path
            )
        } else {
            format!("containerd runtime '{}' → {}", spec.name, spec.path)
        };
        let services = std::iter::once(Service::Containerd)
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
            .collect();
        self.file(&owner.path, owner.text.clone(), edit, what, services)
    }

    fn docker(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let unit = Unit::load(self.host(), "docker.service")?;
        let d = Docker::read(self.host(), unit.as_ref())?;
        let default_in_file = match (&d.default_flag, spec.set_default) {
            (_, false) => false,
            (Some(f), true) if f.value == spec.name => false,
            (Some(f), true) => {
                return Err(SetupError::Refused(format!(
                    "{}: dockerd is started with --default-runtime {}; setting default-runtime in daemon.json as well would stop dockerd (a setting given both as a flag and in the file). Remove the flag (or set it to {}), or pass --no-set-default",
                    f.source, f.value, spec.name
                )))
            }
            (None, true) => true,
        };
        self.k3s_uses_docker()?;
        let path = d.daemon_json.value.clone();
        let old = self.host().read(&path)?;
        let file = self.host().path(&path);
        // JetPack's daemon.json names the runtime by its bare name, which dockerd looks
        // up on its PATH: fine when that finds --runtime-path.
        let basename = spec.path.rsplit('/').next().unwrap_or_default();
        let bare_name_ok =
            self.first_on_path(DEFAULT_PATH, basename).as_deref() == Some(spec.path.as_str());
        let want = daemon_json::Want {
            set_default: default_in_file,
            bare_name_ok,
        };
        let edit = daemon_json::edit(&file, old.as_deref(), &spec, want)?;
        let what = if spec.set_default {
            format!(
                "docker runtime '{}' → {} and default-runtime",
                spec.name, spec.path
            )
        } else {
            format!("docker runtime '{}' → {}", spec.name, spec.path)
        };
        self.file(&path, old, edit, what, vec![Service::Docker])?;
        if self.inv.docker.is_none() {
            self.plan
                .notes
                .push("docker was not found under the root; daemon.json is prepared for it".into());
        }
        Ok(())
    }

    /// The first `dir/name` on a `:`-separated PATH that is executable under the root.
    fn first_on_path(&self, path: &str, name: &str) -> Option<String> {
        path.split(':')
            .map(|d| format!("{}/{name}", d.trim_end_matches('/')))
            .find(|p| self.host().is_executable(p))
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
            let parsed = UnitFile::parse(&self.host().path(&exec_file), &old)?;
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
    fn report_effective(&mut self) -> Result<()> {
        let mut found = Vec::new();
        match &self.plan.choice.mode {
            Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => {
                let services: Vec<K3s> = self.k3s_services().into_iter().cloned().collect();
                for k in &services {
                    found.push(self.effective_k3s(k)?);
                }
            }
            Mode::Containerd(ContainerdTarget::System) => {
                let unit = Unit::load(self.host(), "containerd.service")?;
                let c = Containerd::read(self.host(), unit.as_ref())?;
                found.push(effective_of_file(
                    "system containerd",
                    c.cri_owner(),
                    &self.spec().name,
                ));
            }
            Mode::Docker => found.push(self.effective_docker()?),
        }
        let spec = self.spec().clone();
        for e in &found {
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
            let (file, now) = match &e.runtime_binary {
                Some(b) => (b.source.to_string(), b.value.clone()),
                None => (e.engine.clone(), "not registered".into()),
            };
            self.plan.checks.push(CheckItem {
                file,
                what: format!(
                    "{}: runtime '{}' runs {} (now: {now})",
                    e.engine, spec.name, spec.path
                ),
                ok: now == spec.path,
            });
        }
        self.plan.effective = found;
        Ok(())
    }

    fn effective_k3s(&self, k: &K3s) -> Result<Effective> {
        let spec = self.spec();
        let t = self.template(k)?;
        let flavor = Flavor::K3sTemplate { version: t.version };
        let engine = format!("k3s containerd ({})", k.name());
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
            self.k3s_detects(k).first().map(|p| {
                Sourced::new(
                    p.clone(),
                    Source::default(format!(
                        "k3s finds it on its PATH ({}) and registers it",
                        k.path().source
                    )),
                )
            })
        };
        if t.text.is_none() {
            return Ok(Effective {
                engine,
                default_runtime: setting(),
                runtime_binary: detected(),
            });
        }
        let files = load_with_imports(self.host(), &t.path, flavor)?;
        let desc: &Description = &files[0].description;
        let mut default_runtime = match &desc.default {
            DefaultRuntime::FromK3sSetting { .. } => setting(),
            _ => default_of(&files[0]),
        };
        let mut runtime_binary = match desc.runtimes.get(&spec.name) {
            Some(d) => Some(Sourced::new(
                d.binary
                    .clone()
                    .unwrap_or_else(|| "(a template expression)".into()),
                Source::file(&t.path, d.line),
            )),
            None if desc.base_line.is_some() || desc.extra_runtimes_loop.is_some() => detected(),
            None => None,
        };
        // Files the template imports (and k3s's template drop-in directory, which
        // newer k3s imports itself) override what the template renders.
        let mut imported: Vec<Loaded> = files[1..].to_vec();
        let drop_in_dir = format!("{}.d", t.path.trim_end_matches(".tmpl"));
        for f in self.host().list_dir(&drop_in_dir, ".toml")? {
            if !imported.iter().any(|l| l.path == f) {
                imported.extend(load_with_imports(self.host(), &f, Flavor::System)?);
            }
        }
        for f in &imported {
            if let DefaultRuntime::Literal { .. } | DefaultRuntime::Unknown { .. } =
                f.description.default
            {
                default_runtime = default_of(f);
            }
            if let Some(d) = f.description.runtimes.get(&spec.name) {
                runtime_binary = Some(Sourced::new(
                    d.binary.clone().unwrap_or_default(),
                    Source::file(&f.path, d.line),
                ));
            }
        }
        Ok(Effective {
            engine,
            default_runtime,
            runtime_binary,
        })
    }

    fn effective_docker(&self) -> Result<Effective> {
        let spec = self.spec();
        let unit = Unit::load(self.host(), "docker.service")?;
        let d = Docker::read(self.host(), unit.as_ref())?;
        let path = d.daemon_json.value.clone();
        let text = self.host().read(&path)?;
        let json = daemon_json::DaemonJson::parse(
            &self.host().path(&path),
            text.as_deref().unwrap_or(""),
        )?;
        let line_of = |needle: &str| {
            text.as_deref()
                .and_then(|t| t.lines().position(|l| l.contains(needle)))
                .map_or(0, |i| i + 1)
        };
        let default_runtime = match (&d.default_flag, json.default_runtime()) {
            (Some(f), _) => f.clone(),
            (None, Some(v)) => Sourced::new(
                v.to_string(),
                Source::file(&path, line_of("\"default-runtime\"")),
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
                let p = if !p.contains('/') && p == basename {
                    self.first_on_path(DEFAULT_PATH, p)
                        .unwrap_or_else(|| p.to_string())
                } else {
                    p.to_string()
                };
                Some(Sourced::new(
                    p,
                    Source::file(&path, line_of(&format!("\"{}\"", spec.name))),
                ))
            }
            None => d
                .runtime_flags
                .iter()
                .find(|f| f.value.0 == spec.name)
                .map(|f| Sourced::new(f.value.1.clone(), f.source.clone())),
        };
        Ok(Effective {
            engine: "docker".into(),
            default_runtime,
            runtime_binary,
        })
    }
}

/// What one containerd file (the owner of the CRI plugin table) decides.
fn effective_of_file(engine: &str, f: &Loaded, name: &str) -> Effective {
    Effective {
        engine: engine.to_string(),
        default_runtime: default_of(f),
        runtime_binary: f.description.runtimes.get(name).map(|d| {
            Sourced::new(
                d.binary.clone().unwrap_or_else(|| "(no BinaryName)".into()),
                Source::file(&f.path, d.line),
            )
        }),
    }
}
