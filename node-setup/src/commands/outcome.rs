//! What each command decides and does, as typed results that the text and JSON renderers
//! (`text`, `json`) show: nothing here prints. What happens while a command runs (apply's
//! plan as soon as it is made, a wait for the lock, each restart) is told to a [`Watch`]
//! as it happens, since a wait or a restart can take long.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::lock::RunLock;
use crate::ops::{self, Report, Restarts, RevertStep};
use crate::plan::{self, FileChange, Plan};
use crate::restart::{self, ServiceManager};
use crate::state::{self, Manifest};
use edgegpu_host::error::{exit_code, Result, SetupError};
use edgegpu_host::root::Unreadable;

/// What undoes an apply, told when a restart failed after writing.
pub const UNDO_APPLY: &str = "edgegpu-node-setup revert";
/// What undoes a revert.
pub const UNDO_REVERT: &str = "edgegpu-node-setup apply";

/// What a command tells while it runs, before its outcome.
pub trait Watch {
    /// apply's plan, as soon as it is made: before the wait for the lock.
    fn planned(&mut self, plan: &Plan);
    /// Another run holds the lock: this one waits for it.
    fn waiting(&mut self, message: &str);
    /// A restart (`systemctl <args>`) starts.
    fn restarting(&mut self, args: &[String]);
    /// It ended, after `took`.
    fn restarted(
        &mut self,
        args: &[String],
        took: Duration,
        result: &std::result::Result<(), String>,
    );
}

/// What `apply` did, or in a dry run would do.
pub enum Applied {
    /// Nothing to change. `plan` is the one shown; `after_wait`: the run this one waited
    /// for configured the node meanwhile.
    AlreadyConfigured { plan: Plan, after_wait: bool },
    /// Dry run: `plan.changes` would be written (`backups[i]`: the backup apply would keep
    /// of change i's original, `None`: a new file) and `plan.services` restarted.
    WouldChange {
        plan: Plan,
        backups: Vec<Option<String>>,
    },
    /// Written from `plan`, made again under the lock (`report.backups` aligned with
    /// `plan.changes`; backups and manifest in `state_dir`). `restart_failed`: a restart
    /// failed afterwards (the files stay written), what to run to finish or undo.
    Written {
        plan: Plan,
        report: Box<Report>,
        state_dir: PathBuf,
        restart_failed: Option<SetupError>,
    },
}

/// A file revert restores from its backup, or removes (apply created it).
pub struct RevertFile {
    pub step: RevertStep,
    /// The backup it is restored from.
    pub backup: Option<String>,
}

/// What `revert` did, or in a dry run would do.
pub enum Reverted {
    /// No manifest (at `manifest`): nothing was applied here, or the run this one waited
    /// for reverted it.
    NothingToRevert { manifest: PathBuf },
    /// Dry run: the files that would be restored or removed, the services to restart.
    WouldRevert {
        files: Vec<RevertFile>,
        services: Vec<restart::Service>,
    },
    /// Restored and removed; `restart_failed` as in [`Applied::Written`].
    Done {
        files: Vec<RevertFile>,
        report: Box<Report>,
        restart_failed: Option<SetupError>,
    },
}

/// What apply and revert have in common once they end.
pub trait Writing {
    /// A dry run found files to change (`--exit-code` exits 1 then).
    fn pending(&self) -> bool;
    /// The error the command ends with although it wrote: a restart that failed.
    fn into_restart_failed(self) -> Option<SetupError>;
}

impl Writing for Applied {
    fn pending(&self) -> bool {
        matches!(self, Applied::WouldChange { .. })
    }

    fn into_restart_failed(self) -> Option<SetupError> {
        match self {
            Applied::Written { restart_failed, .. } => restart_failed,
            _ => None,
        }
    }
}

impl Writing for Reverted {
    fn pending(&self) -> bool {
        matches!(self, Reverted::WouldRevert { .. })
    }

    fn into_restart_failed(self) -> Option<SetupError> {
        match self {
            Reverted::Done { restart_failed, .. } => restart_failed,
            _ => None,
        }
    }
}

/// A command stopped by `error` before it had an outcome, with the plan it had decided
/// on by then (apply; the JSON document reports its decision).
pub struct Stopped {
    pub plan: Option<Box<Plan>>,
    pub error: SetupError,
}

impl Stopped {
    fn after(plan: Plan, error: SetupError) -> Stopped {
        Stopped {
            plan: Some(Box::new(plan)),
            error,
        }
    }
}

impl From<SetupError> for Stopped {
    fn from(error: SetupError) -> Stopped {
        Stopped { plan: None, error }
    }
}

/// What `check` found.
pub struct Checked {
    pub plan: Plan,
    pub configured: bool,
    /// Files that could not be read for lack of permission (not root): the answer is
    /// computed without them, and cannot be told for sure.
    pub unreadable: Vec<Unreadable>,
}

impl Checked {
    pub fn exit_code(&self) -> u8 {
        if !self.unreadable.is_empty() {
            exit_code::REFUSED
        } else if self.configured {
            exit_code::OK
        } else {
            exit_code::NOT_CONFIGURED
        }
    }
}

/// Tells a [`Watch`] about each restart while it runs.
struct Watched<'a> {
    inner: &'a mut dyn ServiceManager,
    watch: &'a mut dyn Watch,
}

impl ServiceManager for Watched<'_> {
    fn systemctl(&mut self, args: &[String]) -> std::result::Result<(), String> {
        self.watch.restarting(args);
        let start = Instant::now();
        let result = self.inner.systemctl(args);
        self.watch.restarted(args, start.elapsed(), &result);
        result
    }
}

/// The restarts, each told to `watch` while it runs.
fn watched<'a, 'r: 'a>(
    restarts: Restarts<'r>,
    slot: &'a mut Option<Watched<'a>>,
    watch: &'a mut dyn Watch,
) -> Restarts<'a> {
    match restarts {
        Restarts::Run(inner) => Restarts::Run(slot.insert(Watched { inner, watch })),
        Restarts::Skip(why) => Restarts::Skip(why),
    }
}

/// Plans, and (unless `dry_run`) writes under the lock from a plan made again under it,
/// then restarts.
pub fn apply(
    opts: &plan::Options,
    dry_run: bool,
    restarts: Restarts,
    watch: &mut dyn Watch,
) -> std::result::Result<Applied, Stopped> {
    let plan = plan::build(opts, false)?;
    watch.planned(&plan);
    if plan.changes.is_empty() {
        return Ok(Applied::AlreadyConfigured {
            plan,
            after_wait: false,
        });
    }
    if dry_run {
        // The manifest (root-only) only names the backups here: a drift check by a user
        // who cannot read it still answers, with the backup paths apply would use.
        let manifest = match Manifest::load(&opts.host) {
            Err(e) if e.is_permission_denied() => {
                tracing::warn!("{e}: backups shown as apply would name them");
                None
            }
            Err(e) => return Err(Stopped::after(plan, e)),
            Ok(manifest) => manifest,
        };
        let backups = plan
            .changes
            .iter()
            .map(|c| backup_of(manifest.as_ref(), c))
            .collect();
        return Ok(Applied::WouldChange { plan, backups });
    }
    // Write under the lock, from a plan made under it (another run may have changed
    // the files since the first look).
    let lock = match RunLock::acquire(&opts.host, &mut |msg| watch.waiting(&msg)) {
        Ok(lock) => lock,
        Err(e) => return Err(Stopped::after(plan, e)),
    };
    let plan = match plan::build(opts, false) {
        Ok(again) if !again.changes.is_empty() => again,
        Ok(_) => {
            lock.release_unused(&opts.host);
            return Ok(Applied::AlreadyConfigured {
                plan,
                after_wait: true,
            });
        }
        Err(e) => {
            lock.release_unused(&opts.host);
            return Err(Stopped::after(plan, e));
        }
    };
    let mut slot = None;
    let restarts = watched(restarts, &mut slot, watch);
    let report = match ops::apply(&plan, &opts.host, restarts, &lock) {
        Ok(report) => report,
        Err(e) => {
            lock.release_unused(&opts.host);
            return Err(Stopped::after(plan, e));
        }
    };
    let restart_failed = restart_failed(&report, "written", UNDO_APPLY);
    Ok(Applied::Written {
        plan,
        report: Box::new(report),
        state_dir: opts.host.path(state::STATE_DIR),
        restart_failed,
    })
}

/// Puts back what apply changed (unless `dry_run`), under the lock, then restarts.
pub fn revert(
    opts: &plan::Options,
    dry_run: bool,
    restarts: Restarts,
    watch: &mut dyn Watch,
) -> std::result::Result<Reverted, Stopped> {
    let nothing = || Reverted::NothingToRevert {
        manifest: opts.host.path(state::MANIFEST),
    };
    let lock = if !opts.host.exists(state::MANIFEST) {
        // Nothing applied; but a run killed before its first write may have left temporary
        // files in the state folder, which taking the lock cleans. Best effort: where the
        // lock cannot be taken (not root, a read-only root) there is still nothing to revert.
        if dry_run || !opts.host.exists(state::STATE_DIR) {
            return Ok(nothing());
        }
        let Ok(lock) = RunLock::acquire(&opts.host, &mut |msg| watch.waiting(&msg)) else {
            return Ok(nothing());
        };
        // An apply we waited for may have written a manifest meanwhile: revert it.
        if !opts.host.exists(state::MANIFEST) {
            lock.release_unused(&opts.host);
            return Ok(nothing());
        }
        Some(lock)
    } else if dry_run {
        None
    } else {
        Some(RunLock::acquire(&opts.host, &mut |msg| {
            watch.waiting(&msg)
        })?)
    };
    let Some((manifest, steps)) = ops::plan_revert(&opts.host, opts.force)? else {
        // The run we waited for reverted everything.
        if let Some(lock) = lock {
            lock.release_unused(&opts.host);
        }
        return Ok(nothing());
    };
    let files = |steps: Vec<RevertStep>| {
        steps
            .into_iter()
            .map(|step| RevertFile {
                backup: manifest
                    .entries
                    .iter()
                    .find(|e| e.path == step.path)
                    .and_then(|e| e.backup.clone()),
                step,
            })
            .collect()
    };
    if dry_run {
        return Ok(Reverted::WouldRevert {
            services: ops::revert_services(&manifest, &steps),
            files: files(steps),
        });
    }
    let Some(lock) = lock else {
        unreachable!("a dry run returned above")
    };
    let mut slot = None;
    let restarts = watched(restarts, &mut slot, watch);
    let report = ops::revert(&opts.host, &manifest, &steps, restarts, &lock)?;
    let restart_failed = restart_failed(
        &report,
        "restored or removed",
        &format!("{UNDO_REVERT} (applies again)"),
    );
    Ok(Reverted::Done {
        files: files(steps),
        report: Box::new(report),
        restart_failed,
    })
}

/// Plans without writing: is the node configured, and what stops it.
pub fn check(opts: &plan::Options) -> Result<Checked> {
    // A user who is not root may not read every file (the k3s installer's environment
    // files are root-only): check answers without them, names them, and exits 3
    // (cannot tell) instead of stopping at the first one.
    let tolerant = plan::Options {
        host: opts.host.tolerating_unreadable(),
        ..opts.clone()
    };
    let plan = plan::build(&tolerant, true)?;
    Ok(Checked {
        configured: plan.configured(),
        plan,
        unreadable: tolerant.host.unreadable(),
    })
}

/// The backup apply keeps (or would keep) of `c`'s original: the one an earlier apply
/// made, else a new one when the file exists.
fn backup_of(manifest: Option<&Manifest>, c: &FileChange) -> Option<String> {
    match manifest.and_then(|m| m.entries.iter().find(|e| e.path == c.target)) {
        Some(e) => e.backup.clone(),
        None => c.old.as_ref().map(|_| state::backup_path(&c.target)),
    }
}

/// The error for a restart that failed after the files were written: what is written,
/// what ran, and the commands to finish (or to undo instead).
fn restart_failed(report: &Report, written: &str, undo: &str) -> Option<SetupError> {
    let failed = report.restart_failed()?;
    let mut msg = format!(
        "{} failed: {}",
        failed.service.command(),
        failed.result.clone().err().unwrap_or_default()
    );
    msg.push_str(&format!("\n  {written}: {}", report.written.join(", ")));
    if !report.restarted.is_empty() {
        msg.push_str(&format!(
            "\n  already done: {}",
            report.restarted.join(", ")
        ));
    }
    msg.push_str("\n  to finish, fix the cause and run:");
    for c in report.restarts_left() {
        msg.push_str(&format!("\n    {c}"));
    }
    msg.push_str(&format!("\n  or undo instead: {undo}"));
    Some(SetupError::Restart(msg))
}
