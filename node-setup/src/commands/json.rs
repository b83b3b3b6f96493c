//! The JSON output (`--output json`), for scripts: one document on stdout per command,
//! described in docs/node-setup.md. Made from the commands' outcomes (`outcome`).

use std::io::Write;

use serde::Serialize;

use super::emit::say;
use super::outcome::{Applied, Checked, Reverted, Stopped, UNDO_APPLY, UNDO_REVERT};
use super::text::diff;
use crate::ops::Report;
use crate::plan::{self, FileChange, Plan};
use crate::restart;
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::error::{exit_code, Result, SetupError};

/// The JSON document of `apply` and `revert` (`--output json`), described in
/// docs/node-setup.md.
#[derive(Serialize)]
pub struct RunDoc {
    command: &'static str,
    dry_run: bool,
    /// applied, already-configured, reverted, nothing-to-revert, changes-pending (dry
    /// run), refused (nothing written), failed (a write failed; what was written is put
    /// back), restart-failed (written, but a restart failed: see `to_finish`).
    result: &'static str,
    /// apply: the mode and why (`null` when refused before it was chosen).
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<Decision>,
    /// Each file written (or, in a dry run, to be written), with its backup.
    files: Vec<FileDoc>,
    /// Each service to pick the change up, in order, and what became of it.
    restarts: Vec<RestartDoc>,
    /// Why the services were not restarted (then `to_finish` lists the commands).
    restarts_skipped: Option<String>,
    /// Commands the operator still has to run for the change to take effect.
    to_finish: Vec<String>,
    /// After a failed restart: how to undo what was written instead.
    to_undo: Option<String>,
    error: Option<String>,
    exit_code: u8,
    exit_meaning: &'static str,
}

#[derive(Serialize)]
struct Decision {
    mode: Option<String>,
    cdi: bool,
    reason: Option<String>,
    findings: Vec<String>,
    /// What the choice does beyond the runtime (auto moving k3s to docker), with what to
    /// pass instead.
    warnings: Vec<String>,
    notes: Vec<String>,
}

impl Decision {
    fn of(plan: &Plan) -> Decision {
        Decision {
            mode: plan.choice.as_ref().map(|c| c.mode.name().to_string()),
            cdi: plan.cdi.is_some(),
            reason: plan.choice.as_ref().map(|c| c.reason.clone()),
            findings: plan
                .choice
                .as_ref()
                .map_or_else(Vec::new, |c| c.findings.clone()),
            warnings: plan
                .choice
                .as_ref()
                .map_or_else(Vec::new, |c| c.warnings.clone()),
            notes: plan.notes.clone(),
        }
    }
}

#[derive(Serialize)]
struct FileDoc {
    /// Host path as the operator knows it.
    path: String,
    /// The file really written (symlinks followed).
    target: String,
    /// create, update (apply); restore, remove (revert).
    action: &'static str,
    /// apply: what the change is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    purpose: Option<String>,
    /// apply: the backup of the original (`null`: the file is new); revert: the backup
    /// it is restored from.
    backup: Option<String>,
    /// Whether the file was written (false in a dry run).
    written: bool,
    /// Dry run: the unified diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<String>,
}

impl FileDoc {
    /// apply's entry for one planned change: `update` or `create`, with its backup.
    fn of_change(
        change: &FileChange,
        backup: &Option<String>,
        written: bool,
        diff: Option<String>,
    ) -> FileDoc {
        FileDoc {
            path: change.host_path.clone(),
            target: change.target.clone(),
            action: if change.old.is_some() {
                "update"
            } else {
                "create"
            },
            purpose: Some(change.purpose.clone()),
            backup: backup.clone(),
            written,
            diff,
        }
    }
}

#[derive(Serialize)]
struct RestartDoc {
    /// `null` for `systemctl daemon-reload`.
    unit: Option<String>,
    /// daemon-reload, reload, restart.
    action: &'static str,
    command: String,
    /// done, failed, not-run (stopped by an earlier failure), to-run (not restarted:
    /// see `restarts_skipped`), planned (dry run).
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl RunDoc {
    fn new(command: &'static str, dry_run: bool) -> RunDoc {
        RunDoc {
            command,
            dry_run,
            result: "failed",
            decision: None,
            files: Vec::new(),
            restarts: Vec::new(),
            restarts_skipped: None,
            to_finish: Vec::new(),
            to_undo: None,
            error: None,
            exit_code: exit_code::FAILED,
            exit_meaning: "",
        }
    }

    /// apply's document, but for the outcome's error and exit code ([`finish`]).
    pub fn applied(ended: &std::result::Result<Applied, Stopped>, dry_run: bool) -> RunDoc {
        let mut doc = RunDoc::new("apply", dry_run);
        match ended {
            Err(stopped) => doc.decision = stopped.plan.as_deref().map(Decision::of),
            Ok(Applied::AlreadyConfigured { plan, .. }) => {
                doc.decision = Some(Decision::of(plan));
                doc.result = "already-configured";
            }
            Ok(Applied::WouldChange { plan, backups }) => {
                doc.decision = Some(Decision::of(plan));
                for (c, backup) in plan.changes.iter().zip(backups) {
                    let diff = diff(&c.host_path, c.old.as_deref(), Some(&c.new));
                    doc.files
                        .push(FileDoc::of_change(c, backup, false, Some(diff)));
                }
                doc.planned(&plan.services);
                doc.result = "changes-pending";
            }
            Ok(Applied::Written {
                plan,
                report,
                restart_failed,
                ..
            }) => {
                doc.decision = Some(Decision::of(plan));
                for (c, backup) in plan.changes.iter().zip(&report.backups) {
                    doc.files.push(FileDoc::of_change(c, backup, true, None));
                }
                doc.restarts(report);
                doc.result = "applied";
                if restart_failed.is_some() {
                    doc.to_undo = Some(UNDO_APPLY.into());
                }
            }
        }
        doc
    }

    /// revert's document, but for the outcome's error and exit code ([`finish`]).
    pub fn reverted(ended: &std::result::Result<Reverted, Stopped>, dry_run: bool) -> RunDoc {
        let mut doc = RunDoc::new("revert", dry_run);
        let Ok(reverted) = ended else {
            return doc;
        };
        let file_doc =
            |f: &super::outcome::RevertFile, written: bool, diff: Option<String>| FileDoc {
                path: f.step.path.clone(),
                target: f.step.path.clone(),
                action: if f.step.restore.is_some() {
                    "restore"
                } else {
                    "remove"
                },
                purpose: None,
                backup: f.backup.clone(),
                written,
                diff,
            };
        match reverted {
            Reverted::NothingToRevert { .. } => doc.result = "nothing-to-revert",
            Reverted::WouldRevert { files, services } => {
                for f in files {
                    let s = &f.step;
                    let d = diff(&s.path, s.current.as_deref(), s.restore.as_deref());
                    doc.files.push(file_doc(f, false, Some(d)));
                }
                doc.planned(services);
                doc.result = "changes-pending";
            }
            Reverted::Done {
                files,
                report,
                restart_failed,
            } => {
                for f in files {
                    doc.files
                        .push(file_doc(f, report.written.contains(&f.step.path), None));
                }
                doc.restarts(report);
                doc.result = "reverted";
                if restart_failed.is_some() {
                    doc.to_undo = Some(UNDO_REVERT.into());
                }
            }
        }
        doc
    }

    /// The services as planned, not run (dry run).
    fn planned(&mut self, services: &[restart::Service]) {
        self.restarts = restart::ordered(services.to_vec())
            .iter()
            .map(|s| restart_doc(s, "planned"))
            .collect();
    }

    fn restarts(&mut self, report: &Report) {
        self.restarts.clear();
        if let Some(run) = &report.restarts {
            for o in &run.outcomes {
                let mut d =
                    restart_doc(&o.service, if o.result.is_ok() { "done" } else { "failed" });
                d.seconds = Some((o.elapsed.as_secs_f64() * 1000.0).round() / 1000.0);
                d.error = o.result.clone().err();
                self.restarts.push(d);
            }
            for s in &run.not_run {
                self.restarts.push(restart_doc(s, "not-run"));
            }
            self.to_finish = report.restarts_left();
        } else {
            self.restarts = report
                .services
                .iter()
                .map(|s| restart_doc(s, "to-run"))
                .collect();
            if let Some((why, cmds)) = &report.restart_skipped {
                self.restarts_skipped = Some(why.clone());
                self.to_finish = cmds.clone();
            }
        }
    }
}

fn restart_doc(s: &restart::Service, status: &'static str) -> RestartDoc {
    RestartDoc {
        unit: s.unit().map(str::to_string),
        action: s.action(),
        command: s.command(),
        status,
        seconds: None,
        error: None,
    }
}

/// What exit code `code` of `command` means (in the words of the exit-code table).
fn meaning(command: &str, dry_run: bool, code: u8) -> &'static str {
    match (command, code) {
        ("check", exit_code::OK) => "the node is fully configured",
        ("check", exit_code::NOT_CONFIGURED) => {
            "the node is not fully configured, or something blocks it"
        }
        ("check", exit_code::REFUSED) => "cannot tell: a file cannot be read or parsed",
        (_, exit_code::OK) if dry_run => "success: nothing written",
        (_, exit_code::OK) => "success",
        (_, exit_code::CHANGES_PENDING) => "changes pending (--dry-run --exit-code)",
        (_, exit_code::REFUSED) => "refused: nothing written",
        (_, exit_code::FAILED) => "failed: a write or a service restart failed",
        _ => exit_code::meaning(code),
    }
}

/// The JSON document of a command that failed before it had anything else to say.
pub fn error_doc(command: &str, e: &SetupError, out: &mut dyn Write) {
    let code = e.exit_code();
    let doc = serde_json::json!({
        "command": command,
        "result": if code == exit_code::REFUSED { "refused" } else { "failed" },
        "error": e.to_string(),
        "exit_code": code,
        "exit_meaning": meaning(command, false, code),
    });
    say!(
        out,
        "{}",
        serde_json::to_string_pretty(&doc).expect("serialisable")
    );
}

/// Prints the document of `apply` / `revert` with how the command ended.
pub fn finish(mut doc: RunDoc, result: &Result<u8>, out: &mut dyn Write) {
    let code = match result {
        Ok(code) => *code,
        Err(e) => {
            doc.error = Some(e.to_string());
            doc.result = match e {
                // The files are written; the services did not all pick them up.
                SetupError::Restart(_) => "restart-failed",
                e if e.exit_code() == exit_code::REFUSED => "refused",
                _ => "failed",
            };
            e.exit_code()
        }
    };
    doc.exit_code = code;
    doc.exit_meaning = meaning(doc.command, doc.dry_run, code);
    say!(
        out,
        "{}",
        serde_json::to_string_pretty(&doc).expect("serialisable")
    );
}

#[derive(Serialize)]
struct CheckJson<'a> {
    command: &'static str,
    configured: bool,
    /// `null` when choosing the mode was refused (see `blockers`).
    mode: Option<&'a str>,
    /// CDI mode (`--cdi`): `runtime` is left out, `cdi_specs` says what was found.
    cdi: bool,
    reason: Option<&'a str>,
    findings: &'a [String],
    /// What the mode does beyond the runtime (auto moving k3s to docker).
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a RuntimeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_present: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cdi_specs: Option<&'a crate::effective::cdi::Specs>,
    items: &'a [plan::CheckItem],
    notes: &'a [String],
    /// What each engine uses now, and where that is decided.
    effective: EffectiveJson<'a>,
    /// Settings node-setup does not own that stop it, naming them.
    blockers: &'a [String],
    /// Files that could not be read for lack of permission (not root): the answer
    /// above is computed without them, and the exit code is 3 (cannot tell).
    unreadable: &'a [edgegpu_host::root::Unreadable],
    exit_code: u8,
    exit_meaning: &'static str,
}

/// Per engine: the default runtime and the runtime's binary, or (CDI mode) whether CDI
/// is on and the spec dirs.
#[derive(Serialize)]
#[serde(untagged)]
enum EffectiveJson<'a> {
    Runtime(&'a [crate::effective::runtime::Effective]),
    Cdi(&'a [crate::effective::cdi::EffectiveCdi]),
}

/// Prints check's document.
pub fn checked(checked: &Checked, out: &mut dyn Write) {
    let plan = &checked.plan;
    let cdi = plan.cdi.is_some();
    let code = checked.exit_code();
    let json = CheckJson {
        command: "check",
        configured: checked.configured,
        mode: plan.choice.as_ref().map(|c| c.mode.name()),
        cdi,
        reason: plan.choice.as_ref().map(|c| c.reason.as_str()),
        findings: plan.choice.as_ref().map_or(&[], |c| &c.findings),
        warnings: plan.choice.as_ref().map_or(&[], |c| &c.warnings),
        runtime: (!cdi).then_some(&plan.spec),
        runtime_present: (!cdi).then_some(plan.runtime_present),
        cdi_specs: plan.cdi.as_ref(),
        items: &plan.checks,
        notes: &plan.notes,
        effective: if cdi {
            EffectiveJson::Cdi(&plan.effective_cdi)
        } else {
            EffectiveJson::Runtime(&plan.effective)
        },
        blockers: &plan.blockers,
        unreadable: &checked.unreadable,
        exit_code: code,
        exit_meaning: if checked.unreadable.is_empty() {
            meaning("check", false, code)
        } else {
            "cannot tell: files in `unreadable` could not be read (run as root); `configured` is the answer without them"
        },
    };
    say!(
        out,
        "{}",
        serde_json::to_string_pretty(&json).expect("serialisable")
    );
}
