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

use super::builder::{finish_plan, Builder};
use super::model::{CheckItem, Options, Plan};
use crate::detect::{Choice, ModeRequest};
use crate::effective::cdi::{docker_release, has_dir, spec_dir, Specs, View, DEFAULT_SPEC_DIRS};
use crate::effective::containerd::{effective_cdi, load_with_imports, Cdi, Containerd};
use crate::effective::docker::Docker;
use crate::effective::engine::DOCKER;
use crate::effective::inventory::Inventory;
use crate::effective::k3s::K3s;
use crate::effective::k3s_template;
use crate::effective::runtime;
use crate::effective::Source;
use crate::formats::containerd::{self, CdiWant, Flavor};
use crate::formats::daemon_json::{self, DaemonJson};
use crate::mode::{ContainerdTarget, Mode};
use crate::restart::Service;
use edgegpu_host::error::{Result, SetupError};

/// A plan for CDI mode: its first requirement is a spec to inject.
pub(super) fn new_plan(opts: &Options, specs: Specs, choice: Option<Choice>) -> Plan {
    let mut plan = Plan::new(&opts.spec, false, choice);
    plan.checks = vec![CheckItem {
        file: specs.dirs.join(" or "),
        what: format!(
            "a CDI spec of kind {} (edgegpu-node-setup cdi generate writes {})",
            edgegpu_host::cdi::spec::KIND,
            edgegpu_host::cdi::DEFAULT_OUTPUT
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
    let now = View {
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
        |host, inv| View { host, inv }.problems(&choice.mode),
    )?;
    Ok(b.plan)
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
                edgegpu_host::cdi::spec::KIND,
                DEFAULT_SPEC_DIRS.join(" or ")
            ));
        }
        let runtimes = runtime::View {
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
        let services: Vec<K3s> = k3s_template::services(self.inv)
            .into_iter()
            .cloned()
            .collect();
        for k in &services {
            let view = View {
                host: self.host(),
                inv: self.inv,
            };
            let t = k3s_template::template(self.host(), self.inv, k)?;
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
        let c = Containerd::load(self.host())?;
        let view = View {
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
        let d = Docker::load(self.host())?;
        let release = docker_release(self.host())?;
        match &release {
            Some(r) if r.release < DOCKER.cdi.added => {
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
        let now = View {
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
