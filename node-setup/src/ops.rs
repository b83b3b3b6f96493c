//! Carrying out a plan (`apply`) and undoing it (`revert`).

use std::path::Path;

use crate::lock::RunLock;
use crate::plan::{FileChange, Plan};
use crate::restart::{self, ServiceManager};
use crate::state::{self, Entry, Manifest};
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::fsops;
use edgegpu_host::root::{read_optional, HostRoot};

/// Whether services get restarted, and if not, why.
pub enum Restarts<'a> {
    Run(&'a mut dyn ServiceManager),
    Skip(&'static str),
}

/// What `apply` or `revert` did. A failed restart is not an error here (the files are
/// written by then): it is in `restarts` (see [`Report::restart_failed`]), and the
/// caller reports it.
#[derive(Debug, Default)]
pub struct Report {
    /// Host paths written (or removed, for revert).
    pub written: Vec<String>,
    /// apply: the backup of each written file's original (host paths; `None`: the
    /// file is new), in the order of `written`.
    pub backups: Vec<Option<String>>,
    /// systemctl commands run successfully.
    pub restarted: Vec<String>,
    /// The services to pick up the change, in order.
    pub services: Vec<restart::Service>,
    /// What running them did (`None` when they were not run).
    pub restarts: Option<restart::Run>,
    /// systemctl commands not run, and why.
    pub restart_skipped: Option<(String, Vec<String>)>,
}

impl Report {
    /// The restart that failed, if one did.
    pub fn restart_failed(&self) -> Option<&restart::Outcome> {
        self.restarts.as_ref().and_then(|r| r.failed())
    }

    /// The commands still to run after a failed restart: the failed one, then those it
    /// stopped.
    pub fn restarts_left(&self) -> Vec<String> {
        let Some(run) = &self.restarts else {
            return Vec::new();
        };
        run.failed()
            .map(|o| &o.service)
            .into_iter()
            .chain(run.not_run.iter())
            .map(|s| s.command())
            .collect()
    }
}

fn commands(services: &[restart::Service]) -> Vec<String> {
    restart::ordered(services.to_vec())
        .iter()
        .map(|s| format!("systemctl {}", s.systemctl_args().join(" ")))
        .collect()
}

fn do_restarts(report: &mut Report, services: &[restart::Service], restarts: Restarts) {
    report.services = restart::ordered(services.to_vec());
    if services.is_empty() {
        return;
    }
    match restarts {
        Restarts::Run(manager) => {
            let run = restart::run_each(services, manager);
            report.restarted = run
                .outcomes
                .iter()
                .filter(|o| o.result.is_ok())
                .map(|o| o.service.command())
                .collect();
            report.restarts = Some(run);
        }
        Restarts::Skip(why) => report.restart_skipped = Some((why.to_string(), commands(services))),
    }
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> SetupError {
    move |e| SetupError::io(context, e)
}

/// Refuses early when a directory we must write into is not writable.
fn preflight(host: &HostRoot, dirs: impl IntoIterator<Item = std::path::PathBuf>) -> Result<()> {
    for dir in dirs {
        if !fsops::dir_writable(&dir) {
            let shown = dir.strip_prefix(host.root()).map_or_else(
                |_| dir.display().to_string(),
                |p| format!("/{}", p.display()),
            );
            return Err(SetupError::Refused(format!(
                "cannot write in {shown}: permission denied (run as root); nothing was written"
            )));
        }
    }
    Ok(())
}

/// Removes what a killed run left half-written in the directories this run writes to,
/// and in those of every file an earlier apply wrote (the manifest lists them: a killed
/// apply or revert may have been writing there while this run writes elsewhere).
fn clean_stale_temps(
    host: &HostRoot,
    dirs: impl IntoIterator<Item = std::path::PathBuf>,
) -> Result<()> {
    let recorded: Vec<std::path::PathBuf> = Manifest::load(host)
        .ok()
        .flatten()
        .map(|m| {
            m.entries
                .iter()
                .filter_map(|e| host.path(&e.path).parent().map(Path::to_path_buf))
                .collect()
        })
        .unwrap_or_default();
    let mut seen = Vec::new();
    let written = dirs.into_iter().map(|d| (d, true));
    for (dir, must) in written.chain(recorded.into_iter().map(|d| (d, false))) {
        if seen.contains(&dir) {
            continue;
        }
        let removed = match fsops::remove_stale_temps(&dir) {
            Ok(removed) => removed,
            Err(e) if must => {
                return Err(SetupError::io(
                    format!("cleaning temporary files in {}", dir.display()),
                    e,
                ))
            }
            // (A directory this run does not write to: what it cannot clean stays.)
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not look for temporary files");
                Vec::new()
            }
        };
        crate::lock::log_removed_temps(host, &removed);
        seen.push(dir);
    }
    Ok(())
}

/// Writes the plan (the caller holds `lock` and planned under it): backups and manifest
/// first, then the files; on a write error the files already written are put back.
/// Then restarts.
pub fn apply(plan: &Plan, host: &HostRoot, restarts: Restarts, lock: &RunLock) -> Result<Report> {
    let mut report = Report::default();
    if plan.changes.is_empty() {
        return Ok(report);
    }
    clean_stale_temps(
        host,
        plan.changes
            .iter()
            .filter_map(|c| c.write_path.parent().map(Path::to_path_buf))
            .chain([host.path(state::STATE_DIR), host.path(state::BACKUP_DIR)]),
    )?;
    // Every file must still be what the plan was computed from: a change made since
    // (by hand, or by a run that did not wait for the lock) would be lost.
    for c in &plan.changes {
        let now = read_optional(&c.write_path)?;
        if now != c.old {
            return Err(SetupError::Refused(format!(
                "{} changed since it was planned; nothing was written. Run apply again",
                c.host_path
            )));
        }
    }
    preflight(
        host,
        plan.changes
            .iter()
            .filter_map(|c| c.write_path.parent().map(Path::to_path_buf))
            .chain([host.path(state::BACKUP_DIR)]),
    )?;
    for c in &plan.changes {
        if c.write_path.is_dir() {
            return Err(SetupError::Refused(format!(
                "{} is a directory; nothing was written",
                c.target
            )));
        }
    }
    let previous = read_optional(&host.path(state::MANIFEST))?;
    let mut manifest = Manifest::load(host)?.unwrap_or_default();
    for d in &lock.created_dirs {
        if !manifest.created_dirs.contains(d) {
            manifest.created_dirs.push(d.clone());
        }
    }
    manifest.format = 1;
    manifest.tool = env!("CARGO_PKG_VERSION").to_string();
    let mut backups = Vec::new();
    for c in &plan.changes {
        let written = fsops::digest(c.new.as_bytes());
        match manifest.entries.iter_mut().find(|e| e.path == c.target) {
            // Keep the backup of the state before the *first* apply.
            Some(e) => {
                e.written = written;
                e.services.extend(c.services.iter().cloned());
                e.services = restart::ordered(std::mem::take(&mut e.services));
            }
            None => {
                let backup = c.old.as_ref().map(|old| {
                    let b = state::backup_path(&c.target);
                    backups.push((b.clone(), old.clone()));
                    b
                });
                manifest.entries.push(Entry {
                    path: c.target.clone(),
                    backup,
                    written,
                    services: restart::ordered(c.services.clone()),
                });
            }
        }
    }
    let mut services = manifest.services.clone();
    services.extend(plan.services.iter().cloned());
    manifest.services = restart::ordered(services);

    let mut undo = Undo {
        host,
        previous_manifest: previous.as_deref(),
        manifest_written: None,
        backups: Vec::new(),
        dirs: Vec::new(),
        written: 0,
    };
    let result = write_all(plan, host, &mut manifest, &backups, &mut undo);
    if let Err(e) = result {
        undo.roll_back(&plan.changes, lock);
        return Err(e);
    }
    report.written = plan.changes.iter().map(|c| c.host_path.clone()).collect();
    report.backups = plan
        .changes
        .iter()
        .map(|c| {
            manifest
                .entries
                .iter()
                .find(|e| e.path == c.target)
                .and_then(|e| e.backup.clone())
        })
        .collect();
    do_restarts(&mut report, &plan.services, restarts);
    Ok(report)
}

/// What a failing apply has to take back.
struct Undo<'a> {
    host: &'a HostRoot,
    previous_manifest: Option<&'a str>,
    /// Digest of the manifest this run wrote, if it got that far.
    manifest_written: Option<String>,
    backups: Vec<std::path::PathBuf>,
    dirs: Vec<std::path::PathBuf>,
    /// Number of plan changes written so far.
    written: usize,
}

fn write_all(
    plan: &Plan,
    host: &HostRoot,
    manifest: &mut Manifest,
    backups: &[(String, String)],
    undo: &mut Undo,
) -> Result<()> {
    let record_dirs =
        |created: Vec<std::path::PathBuf>, manifest: &mut Manifest, undo: &mut Undo| {
            for d in created {
                if let Ok(rel) = d.strip_prefix(host.root()) {
                    let host_dir = format!("/{}", rel.display());
                    if !manifest.created_dirs.contains(&host_dir) {
                        manifest.created_dirs.push(host_dir);
                    }
                }
                undo.dirs.push(d);
            }
        };
    let backup_dir = host.path(state::BACKUP_DIR);
    let created = fsops::create_dirs(&backup_dir)
        .map_err(io(format!("creating {}", backup_dir.display())))?;
    record_dirs(created, manifest, undo);
    for (b, content) in backups {
        let p = host.path(b);
        fsops::atomic_write(&p, content.as_bytes(), 0o600)
            .map_err(io(format!("writing backup {}", p.display())))?;
        undo.backups.push(p);
    }
    for c in &plan.changes {
        if let Some(dir) = c.write_path.parent() {
            let created =
                fsops::create_dirs(dir).map_err(io(format!("creating {}", dir.display())))?;
            record_dirs(created, manifest, undo);
        }
    }
    let manifest_path = host.path(state::MANIFEST);
    let rendered = manifest.render();
    fsops::atomic_write(&manifest_path, rendered.as_bytes(), 0o600)
        .map_err(io(format!("writing {}", manifest_path.display())))?;
    undo.manifest_written = Some(fsops::digest(rendered.as_bytes()));
    for c in &plan.changes {
        fsops::atomic_write(&c.write_path, c.new.as_bytes(), 0o644).map_err(io(format!(
            "writing {} (every file written before it was put back)",
            c.write_path.display()
        )))?;
        tracing::info!(file = %c.write_path.display(), purpose = %c.purpose, "wrote");
        undo.written += 1;
    }
    Ok(())
}

impl Undo<'_> {
    /// Best effort: puts back everything a failed apply wrote, newest first. It goes on
    /// after a failure (every file it can restore counts) and logs what it could not do.
    fn roll_back(&self, changes: &[FileChange], lock: &RunLock) {
        for c in changes[..self.written].iter().rev() {
            let result = match &c.old {
                Some(old) => fsops::atomic_write(&c.write_path, old.as_bytes(), 0o644),
                None => fsops::remove_file(&c.write_path),
            };
            log_rollback_failure(&c.write_path, result);
        }
        // Put the manifest back only if it is still the one this run wrote: never undo
        // another run's record.
        let manifest = self.host.path(state::MANIFEST);
        let on_disk = read_optional(&manifest).ok().flatten();
        let ours = match (&self.manifest_written, &on_disk) {
            (Some(written), Some(text)) => *written == fsops::digest(text.as_bytes()),
            _ => false,
        };
        if ours {
            let result = match self.previous_manifest {
                Some(text) => fsops::atomic_write(&manifest, text.as_bytes(), 0o600),
                None => fsops::remove_if_exists(&manifest).map(drop),
            };
            log_rollback_failure(&manifest, result);
        }
        for b in &self.backups {
            log_rollback_failure(b, fsops::remove_if_exists(b).map(drop));
        }
        for d in self.dirs.iter().rev() {
            log_rollback_failure(d, fsops::remove_dir_if_empty(d));
        }
        if self.previous_manifest.is_none() {
            // No earlier apply: the state directory held only what this run made.
            if let Err(e) = lock.remove_file() {
                tracing::error!(error = %e, "could not roll back");
            }
            for d in lock.created_dirs.iter().rev() {
                let path = self.host.path(d);
                log_rollback_failure(&path, fsops::remove_dir_if_empty(&path));
            }
        }
    }
}

fn log_rollback_failure(path: &Path, result: std::io::Result<()>) {
    if let Err(e) = result {
        tracing::error!(file = %path.display(), error = %e, "could not roll back");
    }
}

/// One file revert will restore or remove.
#[derive(Debug)]
pub struct RevertStep {
    pub path: String,
    pub current: Option<String>,
    /// `None`: remove the file (apply created it).
    pub restore: Option<String>,
}

/// Plans the revert: checks every file is as apply left it (else refuses, unless `force`)
/// and that every backup is readable. `Ok(None)`: nothing was applied.
pub fn plan_revert(host: &HostRoot, force: bool) -> Result<Option<(Manifest, Vec<RevertStep>)>> {
    let Some(manifest) = Manifest::load(host)? else {
        return Ok(None);
    };
    let mut steps = Vec::new();
    for e in manifest.entries.iter().rev() {
        let current = read_optional(&host.path(&e.path))?;
        let digest = current.as_deref().map(|c| fsops::digest(c.as_bytes()));
        if digest.as_deref() != Some(e.written.as_str()) && !force {
            return Err(SetupError::Refused(format!(
                "{} changed after apply; not reverting anything (pass --force to restore the original anyway)",
                e.path
            )));
        }
        let restore = match &e.backup {
            Some(b) => Some(read_optional(&host.path(b))?.ok_or_else(|| {
                SetupError::Refused(format!(
                    "backup {b} of {} is missing; not reverting anything",
                    e.path
                ))
            })?),
            None => None,
        };
        steps.push(RevertStep {
            path: e.path.clone(),
            current,
            restore,
        });
    }
    Ok(Some((manifest, steps)))
}

/// Restores the originals, removes what apply created, then the state directory (the
/// lock file included: the caller holds `lock`).
pub fn revert(
    host: &HostRoot,
    manifest: &Manifest,
    steps: &[RevertStep],
    restarts: Restarts,
    lock: &RunLock,
) -> Result<Report> {
    let mut report = Report::default();
    clean_stale_temps(
        host,
        steps
            .iter()
            .filter_map(|s| host.path(&s.path).parent().map(Path::to_path_buf))
            .chain([host.path(state::STATE_DIR), host.path(state::BACKUP_DIR)]),
    )?;
    preflight(
        host,
        steps
            .iter()
            .filter_map(|s| host.path(&s.path).parent().map(Path::to_path_buf)),
    )?;
    for s in steps {
        let disk = host.path(&s.path);
        // A file already as it was before apply is left alone (and not reported written).
        match &s.restore {
            Some(content) if s.current.as_deref() != Some(content.as_str()) => {
                fsops::atomic_write(&disk, content.as_bytes(), 0o644)
                    .map_err(io(format!("restoring {}", disk.display())))?;
            }
            None if s.current.is_some() => {
                fsops::remove_file(&disk).map_err(io(format!("removing {}", disk.display())))?;
            }
            _ => continue,
        }
        report.written.push(s.path.clone());
    }
    for e in &manifest.entries {
        if let Some(b) = &e.backup {
            let path = host.path(b);
            fsops::remove_if_exists(&path)
                .map_err(io(format!("removing backup {}", path.display())))?;
        }
    }
    let manifest_path = host.path(state::MANIFEST);
    fsops::remove_file(&manifest_path)
        .map_err(io(format!("removing {}", manifest_path.display())))?;
    lock.remove_file()?;
    // Directories only if empty: something else may have put files there since.
    let dirs = [state::BACKUP_DIR, state::STATE_DIR]
        .into_iter()
        .chain(manifest.created_dirs.iter().rev().map(String::as_str));
    for d in dirs {
        let path = host.path(d);
        fsops::remove_dir_if_empty(&path)
            .map_err(io(format!("removing directory {}", path.display())))?;
    }
    do_restarts(&mut report, &revert_services(manifest, steps), restarts);
    Ok(report)
}

/// What revert restarts: what apply restarted, except that dockerd is restarted instead
/// of reloaded when a reload would not undo the change to its daemon.json (a reload never
/// removes a runtime or the default runtime, see
/// [`crate::formats::daemon_json::reload_applies`]), or when the manifest does not say
/// which file is daemon.json (written by an older release).
pub fn revert_services(manifest: &Manifest, steps: &[RevertStep]) -> Vec<restart::Service> {
    use restart::Service;
    let mut services = manifest.services.clone();
    if services.contains(&Service::Docker) {
        let daemon_json: Vec<&Entry> = manifest
            .entries
            .iter()
            .filter(|e| e.services.contains(&Service::Docker))
            .collect();
        // A file changed after apply (a forced revert) says nothing of what the running
        // dockerd loaded: only a restart is sure to leave it on the restored file.
        let reload_undoes = !daemon_json.is_empty()
            && daemon_json.iter().all(|e| {
                steps.iter().filter(|s| s.path == e.path).all(|s| {
                    let as_applied = s
                        .current
                        .as_deref()
                        .is_some_and(|c| fsops::digest(c.as_bytes()) == e.written);
                    as_applied
                        && crate::formats::daemon_json::reload_applies(
                            s.current.as_deref(),
                            s.restore.as_deref(),
                        )
                })
            });
        if !reload_undoes {
            services.push(Service::DockerRestart);
        }
    }
    restart::ordered(services)
}
