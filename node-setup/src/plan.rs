//! Planning: read every file involved, compute the new content in memory and the checks
//! that `check` reports. Nothing here writes; any error stops the run before a write.

use std::path::PathBuf;

use serde::Serialize;

use crate::detect::{
    Choice, ContainerdTarget, Inventory, Mode, ModeRequest, Role, DOCKER_DAEMON_JSON, UNIT_DIRS,
};
use crate::error::{Result, SetupError};
use crate::formats::containerd::{self, Flavor};
use crate::formats::unit::{self, UnitFile};
use crate::formats::{daemon_json, k3s_yaml, Edit};
use crate::host::HostRoot;
use crate::restart::Service;
use crate::RuntimeSpec;

/// Our k3s drop-in; `99-` so that it sorts after the usual ones (later wins).
const K3S_DROP_IN: &str = "/etc/rancher/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml";
/// Used when k3s has no systemd unit to add `--docker` to (OpenRC, custom service).
const K3S_DOCKER_DROP_IN: &str = "/etc/rancher/k3s/config.yaml.d/99-edgegpu-docker.yaml";
const K3S_MANIFESTS_DIR: &str = "/var/lib/rancher/k3s/server/manifests";
/// RuntimeClasses k3s ≥ v1.29.0 deploys itself (`runtimes.yaml`).
const K3S_RUNTIME_CLASSES: [&str; 2] = ["nvidia", "nvidia-experimental"];

/// Everything `plan` needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    pub host: HostRoot,
    pub mode: ModeRequest,
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
}

impl Plan {
    pub fn configured(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

struct Builder<'a> {
    opts: &'a Options,
    inv: &'a Inventory,
    plan: Plan,
}

/// Builds the plan. With `for_check`, a missing runtime binary is a failed check instead
/// of an error.
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
        },
    };
    match &choice.mode {
        Mode::K3sDefaultRuntime => b.k3s_default_runtime()?,
        Mode::Containerd(target) => b.containerd(target)?,
        Mode::Docker => b.docker()?,
    }
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

impl Builder<'_> {
    fn host(&self) -> &HostRoot {
        &self.opts.host
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
            let write_path = self.host().resolve(host_path)?;
            let target = write_path
                .strip_prefix(self.host().root())
                .map(|p| format!("/{}", p.display()))
                .unwrap_or_else(|_| host_path.to_string());
            self.plan.changes.push(FileChange {
                host_path: host_path.to_string(),
                target,
                write_path,
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
            .k3s_units
            .iter()
            .map(|u| Service::K3s(u.name.clone()))
            .collect()
    }

    /// `default-runtime: <name>` through our config.yaml.d drop-in, unless the effective
    /// k3s configuration already says so.
    fn k3s_default_setting(&mut self) -> Result<()> {
        let name = self.opts.spec.name.clone();
        let current = k3s_yaml::effective(self.host(), "default-runtime", None)?;
        let ours = self.host().read(K3S_DROP_IN)?;
        let content = k3s_yaml::drop_in(
            "containers run with the NVIDIA runtime by default",
            "default-runtime",
            &name,
        );
        let edit = match &current {
            Some(s) if s.value == name => Edit::unchanged(),
            _ => {
                // Our drop-in must be the one k3s reads last for this key.
                let after = k3s_yaml::effective(
                    self.host(),
                    "default-runtime",
                    Some((K3S_DROP_IN, &content)),
                )?;
                if let Some(s) = after.filter(|s| s.value != name) {
                    return Err(SetupError::invalid(
                        self.host().path(&s.file),
                        format!("sets default-runtime: {} and is read after {K3S_DROP_IN}; remove that line first", s.value),
                    ));
                }
                Edit::replace(ours.as_deref(), content)
            }
        };
        self.file(
            K3S_DROP_IN,
            ours,
            edit,
            format!("k3s default-runtime is '{name}'"),
            self.k3s_units(),
        )?;
        if let Some((v, _)) = &self.inv.k3s_version {
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
        let name = self.opts.spec.name.clone();
        if !self.inv.is_k3s_server() {
            self.plan
                .notes
                .push("agent node: the RuntimeClass is deployed from a server".into());
            return Ok(());
        }
        if let Some((v, _)) = &self.inv.k3s_version {
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

    fn k3s_default_runtime(&mut self) -> Result<()> {
        if self.opts.spec.set_default {
            self.k3s_default_setting()?;
        }
        self.runtime_class()
    }

    fn containerd(&mut self, target: &ContainerdTarget) -> Result<()> {
        let spec = self.opts.spec.clone();
        let (path, flavor) = match target {
            ContainerdTarget::System => {
                (crate::detect::CONTAINERD_CONFIG.to_string(), Flavor::System)
            }
            ContainerdTarget::K3sTemplate { path, version } => {
                (path.clone(), Flavor::K3sTemplate { version: *version })
            }
        };
        let old = self.host().read(&path)?;
        let file = self.host().resolve(&path)?;
        let base_owns_default = containerd::base_owns_default(old.as_deref(), flavor);
        let edit = containerd::edit(&file, old.as_deref(), &spec, flavor)?;
        if old.is_none() && edit.new.is_some() {
            if let Some((v, _)) = &self.inv.k3s_version {
                if !v.has_base_template() {
                    return Err(SetupError::Refused(format!(
                        "k3s {v} predates {{{{ template \"base\" . }}}} (v1.24.17, v1.25.13, v1.26.8, v1.27.5, v1.28.1): a new {path} would have to copy k3s's whole config. Use --mode docker or upgrade k3s"
                    )));
                }
            }
        }
        let default_needs_k3s_setting = spec.set_default && base_owns_default;
        let what = if spec.set_default && !default_needs_k3s_setting {
            format!(
                "containerd runtime '{}' → {} and the default",
                spec.name, spec.path
            )
        } else {
            format!("containerd runtime '{}' → {}", spec.name, spec.path)
        };
        let services = match flavor {
            Flavor::System => std::iter::once(Service::Containerd)
                .chain(
                    self.inv
                        .k3s_units
                        .iter()
                        .filter(|u| u.wants_system_containerd)
                        .map(|u| Service::K3s(u.name.clone())),
                )
                .collect(),
            Flavor::K3sTemplate { .. } => self.k3s_units(),
        };
        self.file(&path, old, edit, what, services)?;
        match flavor {
            Flavor::System => {}
            Flavor::K3sTemplate { .. } => {
                if default_needs_k3s_setting {
                    if let Some((v, _)) = &self.inv.k3s_version {
                        if !v.has_default_runtime() {
                            return Err(SetupError::Refused(format!(
                                "k3s {v}: the base template owns default_runtime_name and this k3s has no default-runtime setting (v1.29.0+). Pass --no-set-default (pods then use runtimeClassName: {}) or use --mode docker",
                                spec.name
                            )));
                        }
                    }
                    self.k3s_default_setting()?;
                }
                self.runtime_class()?;
            }
        }
        Ok(())
    }

    fn docker(&mut self) -> Result<()> {
        let spec = self.opts.spec.clone();
        if spec.set_default {
            self.refuse_dockerd_flag_conflict()?;
        }
        // k3s must talk to docker (cri-dockerd) for docker's default runtime to matter.
        if self.inv.has_k3s() {
            if let Some(s) = &self.inv.k3s_docker_setting {
                self.plan.checks.push(CheckItem {
                    file: s.file.clone(),
                    what: "k3s uses docker (docker: true)".into(),
                    ok: true,
                });
            } else if self.inv.k3s_units.is_empty() {
                // No systemd unit to edit (OpenRC, custom service): k3s's own config file.
                let old = self.host().read(K3S_DOCKER_DROP_IN)?;
                let content =
                    k3s_yaml::drop_in("k3s runs containers through docker", "docker", "true");
                let edit = Edit::replace(old.as_deref(), content);
                let services = self.k3s_units();
                self.file(
                    K3S_DOCKER_DROP_IN,
                    old,
                    edit,
                    "k3s uses docker (docker: true)".into(),
                    services,
                )?;
            }
            let units = self.inv.k3s_units.clone();
            for u in &units {
                let old = self.host().read(&u.exec_file)?.unwrap_or_default();
                let file = self.host().resolve(&u.exec_file)?;
                let parsed = UnitFile::parse(&file, &old)?;
                let edit = if self.inv.k3s_docker_setting.is_some() {
                    Edit::unchanged()
                } else {
                    unit::add_k3s_docker_flag(&parsed)?
                };
                let role = if u.role == Role::Server {
                    "server"
                } else {
                    "agent"
                };
                if self.inv.k3s_docker_setting.is_none() {
                    self.file(
                        &u.exec_file,
                        Some(old),
                        edit,
                        format!("k3s {role} ExecStart has --docker"),
                        vec![Service::DaemonReload, Service::K3s(u.name.clone())],
                    )?;
                }
            }
        }
        let old = self.host().read(DOCKER_DAEMON_JSON)?;
        let file = self.host().resolve(DOCKER_DAEMON_JSON)?;
        let edit = daemon_json::edit(&file, old.as_deref(), &spec)?;
        let what = if spec.set_default {
            format!(
                "docker runtime '{}' → {} and default-runtime",
                spec.name, spec.path
            )
        } else {
            format!("docker runtime '{}' → {}", spec.name, spec.path)
        };
        self.file(DOCKER_DAEMON_JSON, old, edit, what, vec![Service::Docker])?;
        if self.inv.docker.is_none() {
            self.plan
                .notes
                .push("docker was not found under the root; daemon.json is prepared for it".into());
        }
        Ok(())
    }

    /// dockerd refuses to start when an option is given both as a flag and in daemon.json
    /// (moby daemon/config `findConfigurationConflicts`): look for `--default-runtime` in docker.service and its drop-ins.
    fn refuse_dockerd_flag_conflict(&self) -> Result<()> {
        let mut files = Vec::new();
        for dir in UNIT_DIRS {
            files.push(format!("{dir}/docker.service"));
            files.extend(
                self.host()
                    .list_dir(&format!("{dir}/docker.service.d"), ".conf")?,
            );
        }
        for f in files {
            let Some(text) = self.host().read(&f)? else {
                continue;
            };
            let path = self.host().resolve(&f)?;
            let parsed = UnitFile::parse(&path, &text)?;
            for value in parsed.values("Service", "ExecStart") {
                let words = unit::split_words(value)
                    .map_err(|_| SetupError::invalid(&path, "unterminated quote in ExecStart="))?;
                if words.iter().any(|w| {
                    w.text == "--default-runtime" || w.text.starts_with("--default-runtime=")
                }) {
                    return Err(SetupError::invalid(
                        path,
                        "dockerd is started with --default-runtime; setting default-runtime in daemon.json as well would stop dockerd. Remove the flag or pass --no-set-default",
                    ));
                }
            }
        }
        Ok(())
    }
}
