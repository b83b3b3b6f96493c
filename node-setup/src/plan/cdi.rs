//! CDI mode (`--cdi`): instead of registering the NVIDIA runtime, the engine that runs
//! the containers (k3s's containerd, the system containerd, or docker) injects the GPUs
//! itself from the CDI spec `cdi generate` writes to `/var/run/cdi`. Whatever the engine
//! needs for that is planned here: CDI switched on and `/var/run/cdi` among the spec
//! directories it reads, decided from the effective configuration exactly as the
//! NVIDIA-runtime mode decides the default runtime, with the same refusals, check items,
//! backups and revert.
//!
//! The default runtime is left alone. With CDI the engine edits the container's OCI spec
//! before any runtime runs, so plain runc is enough (NVIDIA: "if the CDI mode in
//! Containerd is used, then the NVIDIA Container Runtime is not used",
//! nvidia-container-toolkit issue #79); an NVIDIA runtime left as the default also hands
//! every GPU to containers whose image sets `NVIDIA_VISIBLE_DEVICES=all`, allocated or
//! not, so it is reported in a note.

use std::path::Path;

use serde::Serialize;

use super::{
    docker_conflicts, finish_plan, json_line, k3s_not_on_docker, Builder, CheckItem, Options, Plan,
    View,
};
use crate::detect::{Choice, ContainerdTarget, Inventory, Mode, ModeRequest};
use crate::effective::containerd::{effective_cdi, load_with_imports, Cdi, Containerd, Loaded};
use crate::effective::docker::Docker;
use crate::effective::k3s::K3s;
use crate::effective::packages::{self, Installed, Release};
use crate::effective::systemd::Unit;
use crate::effective::{Source, Sourced};
use crate::error::{Result, SetupError};
use crate::formats::containerd::{self, CdiWant, Flavor};
use crate::formats::daemon_json::{self, DaemonJson};
use crate::host::HostRoot;
use crate::restart::Service;

/// Where CDI runtimes look for specs by default (the CDI library's DefaultSpecDirs, used
/// by containerd and dockerd alike); `check` looks for ours there.
pub const DEFAULT_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// The directory `cdi generate` writes to: every engine must read it.
pub fn spec_dir() -> &'static str {
    crate::cdi::DEFAULT_OUTPUT
        .rsplit_once('/')
        .map_or("/", |(dir, _)| dir)
}

/// Packages that install dockerd (Debian and Docker's repository; Yocto's
/// meta-virtualization), in order of preference.
const DOCKER_PACKAGES: [&str; 6] = [
    "docker-ce",
    "docker.io",
    "moby-engine",
    "docker-engine",
    "docker-moby",
    "docker",
];
/// Packages that install containerd.
const CONTAINERD_PACKAGES: [&str; 3] = ["containerd", "containerd.io", "containerd-opencontainers"];
/// Docker Engine 25.0 added CDI (moby PR #45134, behind `features.cdi`).
const DOCKER_CDI: Release = Release(25, 0, 0);
/// Docker Engine 28.2 turns CDI on unless `features.cdi` is false (moby PR #49963,
/// cmd/dockerd/daemon.go cdiEnabled).
const DOCKER_CDI_BY_DEFAULT: Release = Release(28, 2, 0);
/// containerd 1.7 added `enable_cdi` (pkg/cri/config); 2.0 turned it on by default.
const CONTAINERD_CDI: Release = Release(1, 7, 0);
const CONTAINERD_CDI_BY_DEFAULT: Release = Release(2, 0, 0);

/// What one engine does about CDI, and where that is decided.
#[derive(Debug, Clone, Serialize)]
pub struct EffectiveCdi {
    /// e.g. "k3s containerd (k3s.service)", "system containerd", "docker".
    pub engine: String,
    pub enabled: Sourced<bool>,
    pub spec_dirs: Sourced<Vec<String>>,
    /// Settings that stop the engine from starting at all, naming them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

/// The CDI specs of kind `nvidia.com/gpu` in the default spec directories.
#[derive(Debug, Clone, Serialize)]
pub struct Specs {
    /// Directories looked in.
    pub dirs: Vec<String>,
    /// Host paths of the specs found.
    pub found: Vec<String>,
}

impl Specs {
    /// Looks in [`DEFAULT_SPEC_DIRS`] for `.yaml`/`.yml`/`.json` files (what the CDI
    /// library loads) whose `kind` is `nvidia.com/gpu`. A file that does not parse is
    /// not counted (the runtimes skip it too).
    pub fn find(host: &HostRoot) -> Result<Specs> {
        let mut found = Vec::new();
        for dir in DEFAULT_SPEC_DIRS {
            for f in host.list_dir(dir, "")? {
                let is_spec = [".yaml", ".yml", ".json"].iter().any(|e| f.ends_with(e));
                if !is_spec || host.is_dir(&f) {
                    continue;
                }
                let Ok(Some(text)) = host.read(&f) else {
                    continue;
                };
                let kind = if f.ends_with(".json") {
                    serde_json::from_str::<serde_json::Value>(&text)
                        .ok()
                        .and_then(|v| v["kind"].as_str().map(String::from))
                } else {
                    yaml_rust2::YamlLoader::load_from_str(&text)
                        .ok()
                        .and_then(|docs| {
                            docs.first()
                                .and_then(|d| d["kind"].as_str().map(String::from))
                        })
                };
                if kind.as_deref() == Some(crate::cdi::spec::KIND) {
                    found.push(f);
                }
            }
        }
        Ok(Specs {
            dirs: DEFAULT_SPEC_DIRS.map(String::from).to_vec(),
            found,
        })
    }
}

/// A plan for CDI mode: its first requirement is a spec to inject.
pub(super) fn new_plan(opts: &Options, specs: Specs, choice: Option<Choice>) -> Plan {
    let mut plan = Plan::new(&opts.spec, false, choice);
    plan.checks = vec![CheckItem {
        file: specs.dirs.join(" or "),
        what: format!(
            "a CDI spec of kind {} (edgegpu-node-setup cdi generate writes {})",
            crate::cdi::spec::KIND,
            crate::cdi::DEFAULT_OUTPUT
        ),
        ok: !specs.found.is_empty(),
    }];
    plan.cdi = Some(specs);
    plan
}

/// The engine CDI mode configures. k3s-default-runtime mode is about k3s's default
/// runtime; in CDI mode k3s's own containerd is configured through its template.
fn choose(inv: &Inventory, request: ModeRequest) -> Result<Choice> {
    if request == ModeRequest::K3sDefaultRuntime {
        return Err(SetupError::Refused(
            "--mode k3s-default-runtime sets k3s's default runtime, which CDI mode leaves alone; with --cdi use --mode containerd (k3s's own containerd, through its template) or auto".into(),
        ));
    }
    let mut choice = crate::detect::choose(inv, request)?;
    if choice.mode == Mode::K3sDefaultRuntime {
        let version = inv.version().map_or_else(
            || "version unknown, assumed current".to_string(),
            |v| format!("{v}"),
        );
        choice.mode = Mode::Containerd(ContainerdTarget::K3sTemplate);
        choice.reason = format!(
            "k3s ({version}) runs its own containerd: CDI mode on it, through k3s's template (never the generated config.toml)"
        );
    }
    Ok(choice)
}

pub(super) fn build(opts: &Options, for_check: bool) -> Result<Plan> {
    let inv = Inventory::scan(&opts.host, opts.k3s_version.as_deref())?;
    let choice = choose(&inv, opts.mode)?;
    let specs = Specs::find(&opts.host)?;
    let mut b = Builder {
        opts,
        inv: &inv,
        plan: new_plan(opts, specs, Some(choice.clone())),
    };
    let planned = match &choice.mode {
        Mode::Containerd(ContainerdTarget::System) => b.cdi_system_containerd(),
        Mode::Docker => b.cdi_docker(),
        Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => b.cdi_k3s(),
    };
    let now = CdiView {
        host: &opts.host,
        inv: &inv,
    };
    finish_plan(
        &mut b,
        planned,
        for_check,
        |b| {
            b.plan.effective_cdi = now.engines(&choice.mode)?;
            b.report_cdi();
            b.cdi_notes(&choice.mode)
        },
        |host, inv| CdiView { host, inv }.problems(&choice.mode),
    )?;
    Ok(b.plan)
}

/// Whether `dirs` has `dir`, as written or through the host's symlinks (`/var/run` is
/// usually a link to `/run`).
fn has_dir(host: &HostRoot, dirs: &[String], dir: &str) -> bool {
    let norm = |d: &str| d.trim_end_matches('/').to_string();
    let resolved = |d: &str| host.resolve_full(d).ok().map(|r| r.host_path);
    dirs.iter()
        .any(|d| norm(d) == norm(dir) || (resolved(d).is_some() && resolved(d) == resolved(dir)))
}

/// What to change when `source` decides against CDI (`change`: the edit that would do,
/// e.g. "set it to true").
fn fix(source: &Source, change: &str) -> String {
    match source {
        Source::Flag { .. } => {
            format!("a command-line flag beats every config file; remove the flag or {change}")
        }
        Source::File { .. } => format!(
            "that file decides after (or instead of) what node-setup writes; {change} (or remove that setting)"
        ),
        Source::Replaced { .. } => format!(
            "containerd before 2.0 replaces the whole CRI plugin table with the one of the file it imports last, so what came before it is lost; {change} in that file too, or remove its CRI plugin table"
        ),
        Source::Default { .. } => "node-setup cannot set it here".to_string(),
    }
}

impl Builder<'_> {
    /// The check items of CDI mode: per engine, CDI on and our spec directory read.
    fn report_cdi(&mut self) {
        let dir = spec_dir();
        for e in self.plan.effective_cdi.clone() {
            self.plan.checks.push(CheckItem {
                file: e.enabled.source.to_string(),
                what: format!(
                    "{}: CDI is enabled (now: {})",
                    e.engine,
                    if e.enabled.value { "on" } else { "off" }
                ),
                ok: e.enabled.value,
            });
            self.plan.checks.push(CheckItem {
                file: e.spec_dirs.source.to_string(),
                what: format!(
                    "{}: CDI spec dirs include {dir} (now: {})",
                    e.engine,
                    e.spec_dirs.value.join(", ")
                ),
                ok: has_dir(self.host(), &e.spec_dirs.value, dir),
            });
        }
    }

    /// What the operator should know in CDI mode: a missing spec, an NVIDIA runtime
    /// still the default, and how the device plugin must hand the GPUs over.
    fn cdi_notes(&mut self, mode: &Mode) -> Result<()> {
        if self.plan.cdi.as_ref().is_some_and(|s| s.found.is_empty()) {
            self.plan.notes.push(format!(
                "no CDI spec of kind {} in {} yet: run `edgegpu-node-setup cdi generate` (edgegpu-cdi-refresh.service does at every boot)",
                crate::cdi::spec::KIND,
                DEFAULT_SPEC_DIRS.join(" or ")
            ));
        }
        let runtimes = View {
            host: self.host(),
            inv: self.inv,
            spec: self.spec(),
        };
        for e in runtimes.effective(mode)? {
            let default = &e.default_runtime;
            if default.value.starts_with("nvidia") {
                self.plan.notes.push(format!(
                    "{}: the default runtime is '{}' ({}): with CDI the engine injects the GPUs itself and runc is enough; an NVIDIA runtime as the default also gives every GPU to containers whose image sets NVIDIA_VISIBLE_DEVICES=all (CUDA images do), allocated or not. If an earlier `edgegpu-node-setup apply` made it the default, `edgegpu-node-setup revert` undoes that",
                    e.engine, default.value, default.source
                ));
            }
        }
        let docker = *mode == Mode::Docker;
        self.plan.notes.push(format!(
            "run the device plugin with --device-list-strategy cdi-cri (the kubelet passes the CDI device names to the container runtime: Kubernetes 1.29+, or 1.28 with the DevicePluginCDIDevices feature gate){}; the NVIDIA runtime is not needed",
            if docker {
                "; docker gets them only from a cri-dockerd that passes CDI devices on (Mirantis/cri-dockerd PR #522), and it does not read CDI annotations"
            } else {
                ", or cdi-annotations"
            }
        ));
        Ok(())
    }

    /// k3s's own containerd. With k3s's base template (or no template) k3s renders the
    /// CRI plugin table itself, so a template cannot set CDI there: containerd 2 (k3s
    /// v1.31.6 / v1.32.2 on) has it on by default, containerd 1.x cannot get it from a
    /// template and is refused. A template without the base line declares the CRI table
    /// itself and is edited.
    fn cdi_k3s(&mut self) -> Result<()> {
        let services: Vec<K3s> = self.now().k3s_services().into_iter().cloned().collect();
        for k in &services {
            let view = CdiView {
                host: self.host(),
                inv: self.inv,
            };
            let t = self.now().template(k)?;
            let flavor = Flavor::K3sTemplate { version: t.version };
            let desc = containerd::describe(Path::new(&t.path), t.text.as_deref(), flavor)?;
            let uses_base =
                t.text.as_deref().map_or(true, |s| s.trim().is_empty()) || desc.base_line.is_some();
            let defaults = view.k3s_defaults();
            if uses_base {
                if t.text.is_some() {
                    self.base_conflicts(&t, &desc)?;
                }
                if !defaults.enabled.value {
                    let release = self
                        .inv
                        .version()
                        .map_or_else(|| "k3s".to_string(), |v| format!("k3s {v}"));
                    return Err(SetupError::Refused(format!(
                        "{}: {release} runs containerd 1.x (k3s ships containerd 2 from v1.31.6 / v1.32.2), where CDI is off unless enable_cdi = true is set in the CRI plugin table (containerd pkg/cri/config); k3s's base template emits that table, and a template with {{{{ template \"base\" . }}}} cannot declare it again. Upgrade k3s to a containerd 2 release (CDI on by default), or use --mode docker --cdi (Docker 25+), or apply without --cdi (the NVIDIA runtime; k3s also registers nvidia-cdi, the runtime that injects from CDI specs itself), or write a full template without the base line",
                        k.name()
                    )));
                }
                self.plan.notes.push(format!(
                    "{}: {}; k3s's base template leaves enable_cdi and cdi_spec_dirs to containerd, which reads {}: nothing to write in {}",
                    k.name(),
                    defaults.enabled.source,
                    defaults.spec_dirs.value.join(" and "),
                    t.path
                ));
                continue;
            }
            // A template without the base line: what the template itself decides (files
            // it imports come after it and are checked on the planned result).
            let files = load_with_imports(self.host(), &t.path, flavor)?;
            let own = effective_cdi(&files[..1], None, &defaults);
            let want = CdiWant {
                enable: !own.enabled.value,
                spec_dir: self.missing_spec_dir(&own, &t.path),
                version: None,
            };
            let edit = containerd::edit_cdi(Path::new(&t.path), t.text.as_deref(), flavor, want)?;
            let services = self.k3s_units();
            self.file(
                &t.path,
                t.text.clone(),
                edit,
                format!("containerd CDI on, reading {}", spec_dir()),
                services,
            )?;
        }
        Ok(())
    }

    /// Our spec directory, when the spec dirs that `file` sets leave it out (dirs that
    /// come from a default or another file are not this file's to change).
    fn missing_spec_dir(&self, cdi: &Cdi, file: &str) -> Option<&'static str> {
        let from_file = matches!(&cdi.spec_dirs.source, Source::File { file: f, .. } if f == file);
        (from_file && !has_dir(self.host(), &cdi.spec_dirs.value, spec_dir())).then(spec_dir)
    }

    /// The system containerd: the file that owns the CRI plugin table (the main config,
    /// or the last import that has the table) gets `enable_cdi` and the spec dir.
    fn cdi_system_containerd(&mut self) -> Result<()> {
        let unit = Unit::load(self.host(), "containerd.service")?;
        let c = Containerd::read(self.host(), unit.as_ref())?;
        let view = CdiView {
            host: self.host(),
            inv: self.inv,
        };
        let defaults = view.system_defaults(&c)?;
        let owner = c.cri_owner().clone();
        if owner.path != c.config.value {
            self.plan.notes.push(format!(
                "{} is imported by {} and has the CRI plugin table, which replaces the earlier one (containerd imports): editing {}",
                owner.path, c.config.value, owner.path
            ));
        }
        let now = effective_cdi(&c.files, None, &defaults);
        if now.enabled.value && matches!(now.enabled.source, Source::Default { .. }) {
            self.plan.notes.push(format!(
                "system containerd: {}: no enable_cdi to write",
                now.enabled.source
            ));
        }
        let want = CdiWant {
            enable: !now.enabled.value,
            spec_dir: self.missing_spec_dir(&now, &owner.path),
            version: Some(owner.description.version),
        };
        let edit = containerd::edit_cdi(
            Path::new(&owner.path),
            owner.text.as_deref(),
            Flavor::System,
            want,
        )?;
        let services = self.system_containerd_services();
        self.file(
            &owner.path,
            owner.text.clone(),
            edit,
            format!("containerd CDI on, reading {}", spec_dir()),
            services,
        )
    }

    /// docker (Docker 25+): `features.cdi` (unless a `--feature` flag decides, or
    /// Docker 28.2+ has it on by default) and our spec dir in the `cdi-spec-dirs` the
    /// file sets; k3s must run its containers through docker.
    fn cdi_docker(&mut self) -> Result<()> {
        let unit = Unit::load(self.host(), "docker.service")?;
        let d = Docker::read(self.host(), unit.as_ref())?;
        let release = docker_release(self.host())?;
        match &release {
            Some(r) if r.release < DOCKER_CDI => {
                return Err(SetupError::Refused(format!(
                    "{} has no CDI support (Docker 25.0 added it, moby PR #45134). Upgrade docker to 25 or later, or apply without --cdi (the NVIDIA runtime)",
                    r.describe()
                )))
            }
            Some(_) => {}
            None => self.plan.notes.push(
                "docker's version is not known (no dpkg or opkg status under the root lists it): CDI needs Docker 25 or later, which older dockerd ignores".into(),
            ),
        }
        self.k3s_uses_docker()?;
        if self.inv.has_k3s() {
            self.plan.notes.push(
                "k3s runs its containers through cri-dockerd: docker gets the device plugin's CDI devices only from a cri-dockerd that passes them on (Mirantis/cri-dockerd PR #522, 2025); check on the node that GPU pods get their devices".into(),
            );
        }
        let path = d.daemon_json.value.clone();
        let old = self.host().read(&path)?;
        let json = DaemonJson::parse(Path::new(&path), old.as_deref().unwrap_or(""))?;
        let now = CdiView {
            host: self.host(),
            inv: self.inv,
        }
        .docker_cdi(&d, &json, old.as_deref(), release.as_ref())?;
        // With --feature flags (Docker 28+) daemon.json may not say `features` at all:
        // dockerd refuses a setting given both ways. (`--feature cdi=false` itself is
        // named by the check of the planned result.)
        let cdi_flag = d.feature_flag("cdi").is_some();
        if let (false, false, Some(flag)) = (now.enabled.value, cdi_flag, d.feature_flags.first()) {
            return Err(SetupError::Refused(format!(
                "{}: dockerd gets --feature flags, so node-setup cannot add features.cdi to {path} (dockerd refuses a setting given as a flag and in the file). Add --feature cdi to those flags",
                flag.source
            )));
        }
        let want = daemon_json::CdiWant {
            enable: !cdi_flag && !now.enabled.value,
            spec_dir: self.missing_spec_dir(&now, &path),
        };
        let edit = daemon_json::edit_cdi(Path::new(&path), old.as_deref(), want)?;
        self.file(
            &path,
            old,
            edit,
            format!("docker CDI on (features.cdi), reading {}", spec_dir()),
            vec![Service::DockerRestart],
        )?;
        if self.inv.docker.is_none() {
            self.plan
                .notes
                .push("docker was not found under the root; daemon.json is prepared for it".into());
        }
        Ok(())
    }
}

/// The installed docker, from the package status files.
fn docker_release(host: &HostRoot) -> Result<Option<Installed>> {
    packages::installed(host, &DOCKER_PACKAGES)
}

/// One state of the host (as it is, or with the planned files written): what each
/// engine does about CDI.
struct CdiView<'a> {
    host: &'a HostRoot,
    inv: &'a Inventory,
}

impl CdiView<'_> {
    /// A view of the NVIDIA-runtime mode on the same host, for what both modes read
    /// alike (k3s's services and templates); the runtime is not looked at.
    fn runtimes<'s>(&'s self, spec: &'s crate::RuntimeSpec) -> View<'s> {
        View {
            host: self.host,
            inv: self.inv,
            spec,
        }
    }

    fn engines(&self, mode: &Mode) -> Result<Vec<EffectiveCdi>> {
        let spec = crate::RuntimeSpec {
            name: String::new(),
            path: String::new(),
            set_default: false,
        };
        match mode {
            Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => {
                let view = self.runtimes(&spec);
                view.k3s_services()
                    .into_iter()
                    .map(|k| self.k3s(&view, k))
                    .collect()
            }
            Mode::Containerd(ContainerdTarget::System) => {
                let unit = Unit::load(self.host, "containerd.service")?;
                let c = Containerd::read(self.host, unit.as_ref())?;
                let cdi = effective_cdi(&c.files, None, &self.system_defaults(&c)?);
                Ok(vec![EffectiveCdi {
                    engine: "system containerd".into(),
                    enabled: cdi.enabled,
                    spec_dirs: cdi.spec_dirs,
                    conflicts: Vec::new(),
                }])
            }
            Mode::Docker => {
                let unit = Unit::load(self.host, "docker.service")?;
                let d = Docker::read(self.host, unit.as_ref())?;
                let path = &d.daemon_json.value;
                let text = self.host.read(path)?;
                let json = DaemonJson::parse(Path::new(path), text.as_deref().unwrap_or(""))?;
                let release = docker_release(self.host)?;
                let cdi = self.docker_cdi(&d, &json, text.as_deref(), release.as_ref())?;
                Ok(vec![EffectiveCdi {
                    engine: "docker".into(),
                    enabled: cdi.enabled,
                    spec_dirs: cdi.spec_dirs,
                    conflicts: docker_conflicts(&d, &json, text.as_deref()),
                }])
            }
        }
    }

    /// CDI as k3s's containerd has it when nothing sets it: k3s's containerd release
    /// decides (the version unknown: assumed current, as everywhere else).
    fn k3s_defaults(&self) -> Cdi {
        match self.inv.version() {
            Some(v) if !v.uses_containerd2() => Cdi::containerd_default(
                false,
                &format!("k3s {v} ships containerd 1.x (containerd 2 from v1.31.6 / v1.32.2), whose enable_cdi defaults to false"),
            ),
            Some(v) => Cdi::containerd_default(
                true,
                &format!("k3s {v} ships containerd 2, whose enable_cdi defaults to true"),
            ),
            None => Cdi::containerd_default(
                true,
                "k3s version unknown, assumed current (containerd 2, whose enable_cdi defaults to true; set --k3s-version to override)",
            ),
        }
    }

    /// CDI as the system containerd has it when nothing sets it, from its release (the
    /// package status under the root), else from its config: only containerd 2 reads
    /// config version 3. containerd before 1.7 has no CDI: refused.
    fn system_defaults(&self, c: &Containerd) -> Result<Cdi> {
        let installed = packages::installed(self.host, &CONTAINERD_PACKAGES)?;
        Ok(match installed {
            Some(i) if i.release < CONTAINERD_CDI => {
                return Err(SetupError::Refused(format!(
                    "{} has no CDI support (enable_cdi came with containerd 1.7). Upgrade containerd, or apply without --cdi (the NVIDIA runtime)",
                    i.describe()
                )))
            }
            Some(i) => {
                let on = i.release >= CONTAINERD_CDI_BY_DEFAULT;
                Cdi::containerd_default(
                    on,
                    &format!(
                        "{}: enable_cdi defaults to {on} (true from containerd 2.0)",
                        i.describe()
                    ),
                )
            }
            None if c.files[0].description.version >= 3 => Cdi::containerd_default(
                true,
                &format!(
                    "containerd 2's default (only containerd 2 reads config version 3, as {} is): enable_cdi defaults to true",
                    c.config.value
                ),
            ),
            None => Cdi::containerd_default(
                false,
                "containerd 1.7's default, enable_cdi = false (containerd's version is not known: no dpkg or opkg status under the root lists it)",
            ),
        })
    }

    fn k3s(&self, view: &View, k: &K3s) -> Result<EffectiveCdi> {
        let t = view.template(k)?;
        let defaults = self.k3s_defaults();
        let flavor = Flavor::K3sTemplate { version: t.version };
        let (files, uses_base) = match &t.text {
            None => (Vec::new(), true),
            Some(text) => {
                let files = load_with_imports(self.host, &t.path, flavor)?;
                let base = files[0].description.base_line.is_some() || text.trim().is_empty();
                (files, base)
            }
        };
        let mut cdi = if uses_base {
            defaults.clone()
        } else {
            effective_cdi(&files[..1], None, &defaults)
        };
        let mut imported: Vec<Loaded> = files.into_iter().skip(1).collect();
        view.add_drop_ins(&t, uses_base, &mut imported)?;
        cdi = effective_cdi(&imported, Some(cdi), &defaults);
        Ok(EffectiveCdi {
            engine: format!("k3s containerd ({})", k.name()),
            enabled: cdi.enabled,
            spec_dirs: cdi.spec_dirs,
            conflicts: Vec::new(),
        })
    }

    /// dockerd's CDI: a `--feature cdi[=BOOL]` flag, else `features.cdi` in daemon.json,
    /// else on from Docker 28.2; spec dirs from `--cdi-spec-dir` flags, else
    /// `cdi-spec-dirs`, else the CDI library's defaults (moby cmd/dockerd/daemon.go).
    fn docker_cdi(
        &self,
        d: &Docker,
        json: &DaemonJson,
        text: Option<&str>,
        release: Option<&Installed>,
    ) -> Result<Cdi> {
        let path = &d.daemon_json.value;
        let file = Path::new(path);
        let enabled = match (d.feature_flag("cdi"), json.feature(file, "cdi")?) {
            (Some(flag), _) => flag,
            (None, Some(v)) => Sourced::new(v, Source::file(path, json_line(text, "features"))),
            (None, None) => match release {
                Some(r) if r.release >= DOCKER_CDI_BY_DEFAULT => Sourced::new(
                    true,
                    Source::default(format!(
                        "dockerd's default from Docker 28.2 ({}; no features.cdi in {path})",
                        r.describe()
                    )),
                ),
                _ => Sourced::new(
                    false,
                    Source::default(format!(
                        "dockerd's default before Docker 28.2 (no features.cdi in {path} or its flags)"
                    )),
                ),
            },
        };
        let spec_dirs = match (d.cdi_spec_dir_flags.first(), json.cdi_spec_dirs(file)?) {
            (Some(first), _) => Sourced::new(
                d.cdi_spec_dir_flags
                    .iter()
                    .map(|f| f.value.clone())
                    .collect(),
                first.source.clone(),
            ),
            (None, Some(dirs)) => {
                Sourced::new(dirs, Source::file(path, json_line(text, "cdi-spec-dirs")))
            }
            (None, None) => Sourced::new(
                DEFAULT_SPEC_DIRS.map(String::from).to_vec(),
                Source::default(format!(
                    "dockerd's default (no cdi-spec-dirs in {path} or its flags)"
                )),
            ),
        };
        Ok(Cdi { enabled, spec_dirs })
    }

    /// Why the engines of `mode` would not inject GPUs from our CDI spec, each naming
    /// what decides it and what to change; empty when they would.
    fn problems(&self, mode: &Mode) -> Result<Vec<String>> {
        let dir = spec_dir();
        let mut out = Vec::new();
        for e in self.engines(mode)? {
            out.extend(e.conflicts.iter().cloned());
            if !e.enabled.value {
                out.push(format!(
                    "{}: {} would not have CDI enabled: {}",
                    e.enabled.source,
                    e.engine,
                    fix(&e.enabled.source, "set it to true")
                ));
            }
            if !has_dir(self.host, &e.spec_dirs.value, dir) {
                out.push(format!(
                    "{}: {} would not read CDI specs from {dir} (its spec dirs: {}): {}",
                    e.spec_dirs.source,
                    e.engine,
                    e.spec_dirs.value.join(", "),
                    fix(&e.spec_dirs.source, &format!("add {dir} to it"))
                ));
            }
        }
        if *mode == Mode::Docker {
            out.extend(k3s_not_on_docker(self.inv));
        }
        Ok(out)
    }
}
