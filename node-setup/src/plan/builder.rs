//! The plan under construction: records each file's edit with its check and the
//! services that must pick it up, holds the edits both modes share (k3s switched to
//! docker, the k3s base template's own tables), and finishes every plan by checking its
//! result on a view of the host with the planned files written.

use std::path::Path;

use super::model::{CheckItem, FileChange, Options, Plan};
use crate::effective::inventory::Inventory;
use crate::effective::k3s::{K3s, K3sEngine, Role};
use crate::effective::k3s_template::{Template, BASE_IMPORTS_DROP_INS};
use crate::formats::containerd::Description;
use crate::formats::unit::{self, UnitFile};
use crate::formats::{k3s_yaml, Edit};
use crate::restart::Service;
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

/// Used when k3s has no systemd unit to add `--docker` to (OpenRC, custom service).
const K3S_DOCKER_DROP_IN: &str = "99-edgegpu-docker.yaml";

pub(super) struct Builder<'a> {
    pub(super) opts: &'a Options,
    pub(super) inv: &'a Inventory,
    pub(super) plan: Plan,
}

/// The steps every plan ends with. A refusal while planning is a blocker for `check`
/// (the changes planned so far are dropped) and an error for `apply`. `report` records
/// what the engines use now; then, unless planning was refused, `problems` says what
/// the engines would get wrong with the planned files written (computed on a view of
/// the host that has them, by the same code): `apply` refuses naming each, `check`
/// lists them as blockers.
pub(super) fn finish_plan(
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

impl Builder<'_> {
    pub(super) fn host(&self) -> &HostRoot {
        &self.opts.host
    }

    pub(super) fn spec(&self) -> &RuntimeSpec {
        &self.opts.spec
    }

    /// Records the check and the edit's notes and, if the content differs, the change.
    pub(super) fn file(
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
    pub(super) fn k3s_units(&self) -> Vec<Service> {
        self.inv
            .k3s
            .iter()
            .filter_map(|k| k.unit.as_ref())
            .map(|u| Service::K3s(u.name.clone()))
            .collect()
    }

    /// What a template with the base line declares that the base (or k3s's newer base)
    /// declares too: refused, since k3s would not start.
    pub(super) fn base_conflicts(&mut self, t: &Template, desc: &Description) -> Result<()> {
        if let Some((line, what)) = &desc.redeclares_base_table {
            return Err(SetupError::Refused(format!(
                "{}:{line}: the template declares [{what}], which the base template already emits: containerd refuses a table (or key) declared twice and k3s would not start. Remove it (the base has it) and run apply again",
                t.path
            )));
        }
        if let Some(line) = desc.imports_before_base {
            let why = format!(
                "{}:{line}: the template sets imports before the base line; k3s releases whose base imports {}/*.toml itself (k3s PR #13680, from {BASE_IMPORTS_DROP_INS}) then declare imports twice and containerd does not start",
                t.path,
                t.drop_in_dir()
            );
            match self.inv.version() {
                Some(v) if v < BASE_IMPORTS_DROP_INS => self.plan.notes.push(format!(
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

    /// Restarting the system containerd: containerd, then the k3s units that use it.
    pub(super) fn system_containerd_services(&self) -> Vec<Service> {
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

    /// k3s must talk to docker (cri-dockerd) for docker's default runtime to matter:
    /// `--docker` after the subcommand of each k3s unit's effective ExecStart, or (no
    /// unit) `docker: true` in a drop-in.
    pub(super) fn k3s_uses_docker(&mut self) -> Result<()> {
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
}
