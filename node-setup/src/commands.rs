//! The commands and how their results are shown: text for people, or (`--output
//! json`) one JSON document on stdout for scripts. Restart progress goes to stderr.

use std::io::Write;
use std::time::Instant;

use serde::Serialize;

use crate::cli::{CdiCommand, Cli, Command, OutputFormat};
use crate::lock::RunLock;
use crate::ops::{self, Report, Restarts, RevertStep};
use crate::plan::{self, FileChange, Plan};
use crate::restart::{self, ServiceManager};
use crate::runtime_spec::RuntimeSpec;
use crate::state::{self, Manifest};
use edgegpu_host::error::{exit_code, Result, SetupError};
use edgegpu_host::root::HostRoot;

/// Writes to the output. A reader that went away (`| head`) is no failure of the command,
/// whose effect does not depend on its output; other write errors are logged.
fn emit(out: &mut dyn Write, text: std::fmt::Arguments) {
    if let Err(e) = out.write_fmt(text) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            tracing::warn!(error = %e, "writing the output failed");
        }
    }
}

/// One line of output (see [`emit`]).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        emit($out, format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub fn options(cli: &Cli) -> plan::Options {
    let g = &cli.global;
    plan::Options {
        host: HostRoot::new(&g.root),
        mode: g.mode,
        spec: RuntimeSpec {
            name: g.runtime_name.clone(),
            path: g.runtime_path.clone(),
            set_default: g.set_default(),
        },
        force: g.force,
        k3s_version: g.k3s_version.clone(),
        cdi: g.cdi,
    }
}

/// Whether services get restarted for `cli`: only on the live system (`--root /`) and
/// without `--no-restart`.
pub fn restarts<'a>(cli: &Cli, manager: &'a mut dyn ServiceManager) -> Restarts<'a> {
    let live = HostRoot::new(&cli.global.root).is_live_system();
    match restart::restart_blocked(live, cli.global.no_restart) {
        Some(why) => Restarts::Skip(why),
        None => Restarts::Run(manager),
    }
}

/// Runs one command. `out` gets the result (text or JSON), `err` the progress of
/// restarts.
pub fn run(cli: Cli, restarts: Restarts, out: &mut dyn Write, err: &mut dyn Write) -> Result<u8> {
    let opts = options(&cli);
    match cli.command {
        Command::Apply {
            dry_run,
            exit_code,
            output,
        } => run_writing(
            "apply", apply, &opts, dry_run, exit_code, output, restarts, out, err,
        ),
        Command::Check { output } => {
            let result = check(&opts, output, out, err);
            if output == OutputFormat::Json {
                if let Err(e) = &result {
                    error_doc("check", e, out);
                }
            }
            result
        }
        Command::Revert {
            dry_run,
            exit_code,
            output,
        } => run_writing(
            "revert", revert, &opts, dry_run, exit_code, output, restarts, out, err,
        ),
        Command::Cdi {
            command: CdiCommand::Generate { output, format },
        } => edgegpu_host::cdi::run(&opts.host, output.as_deref(), format, out),
    }
}

/// `--dry-run --exit-code`: a dry run that would write exits 1 (like `git diff
/// --exit-code`), so that scripts can check for drift.
fn pending(flag: bool, doc: &RunDoc, result: Result<u8>) -> Result<u8> {
    match result {
        Ok(exit_code::OK) if flag && doc.result == "changes-pending" => {
            Ok(exit_code::CHANGES_PENDING)
        }
        other => other,
    }
}

/// Where the text output goes: `out`, or nowhere when the result is JSON.
fn text_out<'a>(format: OutputFormat, out: &'a mut dyn Write) -> Box<dyn Write + 'a> {
    match format {
        OutputFormat::Text => Box::new(out),
        OutputFormat::Json => Box::new(std::io::sink()),
    }
}

/// Tells the operator on stderr what each restart does while it runs — at any log level,
/// since a restart can take long or hang — and how it ended, with the time it took.
struct Progress<'a> {
    inner: &'a mut dyn ServiceManager,
    err: &'a mut dyn Write,
}

impl ServiceManager for Progress<'_> {
    fn systemctl(&mut self, args: &[String]) -> std::result::Result<(), String> {
        let command = format!("systemctl {}", args.join(" "));
        let unit = args.iter().skip(1).last().map_or("systemd", String::as_str);
        let (doing, done) = match args.first().map(String::as_str) {
            Some("daemon-reload") => ("reloading unit files", "unit files reloaded"),
            Some("try-reload-or-restart") => ("reloading", "reloaded"),
            _ => ("restarting", "restarted"),
        };
        say!(
            self.err,
            "edgegpu-node-setup: {unit}: {doing} ({command}) ..."
        );
        let start = Instant::now();
        let result = self.inner.systemctl(args);
        let took = start.elapsed().as_secs_f64();
        match &result {
            Ok(()) => say!(
                self.err,
                "edgegpu-node-setup: {unit}: {done} in {took:.1} s"
            ),
            Err(e) => say!(
                self.err,
                "edgegpu-node-setup: {unit}: FAILED after {took:.1} s: {e}"
            ),
        }
        result
    }
}

fn describe(plan: &Plan, out: &mut dyn Write) {
    let cdi = if plan.cdi.is_some() { ", CDI" } else { "" };
    match &plan.choice {
        Some(c) => {
            say!(out, "mode: {}{cdi}", c.mode.name());
            say!(out, "  why: {}", c.reason);
            for f in &c.findings {
                say!(out, "  found: {f}");
            }
            for w in &c.warnings {
                say!(out, "warning: {w}");
            }
        }
        None => say!(out, "mode: none{cdi} (see blocked)"),
    }
    match &plan.cdi {
        Some(specs) if specs.found.is_empty() => say!(
            out,
            "cdi: no spec of kind {} in {} (MISSING)",
            edgegpu_host::cdi::spec::KIND,
            specs.dirs.join(" or ")
        ),
        Some(specs) => say!(
            out,
            "cdi: spec of kind {}: {}",
            edgegpu_host::cdi::spec::KIND,
            specs.found.join(", ")
        ),
        None => say!(
            out,
            "runtime: {} = {} ({}){}",
            plan.spec.name,
            plan.spec.path,
            if plan.runtime_present {
                "present"
            } else {
                "MISSING"
            },
            if plan.spec.set_default {
                ", as the default"
            } else {
                ""
            }
        ),
    }
    for n in &plan.notes {
        say!(out, "note: {n}");
    }
    for e in &plan.effective {
        say!(
            out,
            "effective: {}: default runtime '{}' ({}); runtime '{}' {}",
            e.engine,
            e.default_runtime.value,
            e.default_runtime.source,
            plan.spec.name,
            match &e.runtime_binary.value {
                Some(b) => format!("runs {b} ({})", e.runtime_binary.source),
                None => format!("is not registered ({})", e.runtime_binary.source),
            }
        );
    }
    for e in &plan.effective_cdi {
        say!(
            out,
            "effective: {}: CDI {} ({}); spec dirs {} ({})",
            e.engine,
            if e.enabled.value { "on" } else { "off" },
            e.enabled.source,
            e.spec_dirs.value.join(", "),
            e.spec_dirs.source
        );
    }
    for b in &plan.blockers {
        say!(out, "blocked: {b}");
    }
}

/// Unified diff of one planned change.
pub fn diff(path: &str, old: Option<&str>, new: Option<&str>) -> String {
    let from = if old.is_some() {
        format!("a{path}")
    } else {
        "/dev/null".into()
    };
    let to = if new.is_some() {
        format!("b{path}")
    } else {
        "/dev/null".into()
    };
    similar::TextDiff::from_lines(old.unwrap_or(""), new.unwrap_or(""))
        .unified_diff()
        .context_radius(3)
        .header(&from, &to)
        .to_string()
}

/// The JSON document of `apply` and `revert` (`--output json`), described in
/// docs/node-setup.md.
#[derive(Serialize)]
struct RunDoc {
    /// The document is printed (`--output json`): messages meant for the text output
    /// that matter while waiting go to stderr instead.
    #[serde(skip)]
    json: bool,
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
    fn new(command: &'static str, dry_run: bool, format: OutputFormat) -> RunDoc {
        RunDoc {
            json: format == OutputFormat::Json,
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

    fn decide(&mut self, plan: &Plan) {
        self.decision = Some(Decision {
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
        });
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

/// Prints the JSON document of `apply` / `revert` when asked for, with the outcome.
fn finish(
    format: OutputFormat,
    mut doc: RunDoc,
    result: Result<u8>,
    out: &mut dyn Write,
) -> Result<u8> {
    if format == OutputFormat::Json {
        let code = match &result {
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
    result
}

/// The JSON document of a command that failed before it had anything else to say.
fn error_doc(command: &str, e: &SetupError, out: &mut dyn Write) {
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

/// The backup apply keeps (or would keep) of `c`'s original: the one an earlier apply
/// made, else a new one when the file exists.
fn backup_of(manifest: Option<&Manifest>, c: &FileChange) -> Option<String> {
    match manifest.and_then(|m| m.entries.iter().find(|e| e.path == c.target)) {
        Some(e) => e.backup.clone(),
        None => c.old.as_ref().map(|_| state::backup_path(&c.target)),
    }
}

fn report_restarts(report: &Report, out: &mut dyn Write) {
    for r in &report.restarted {
        say!(out, "ran: {r}");
    }
    if let Some((why, cmds)) = &report.restart_skipped {
        say!(
            out,
            "not restarting services ({why}); to apply the change run:"
        );
        for c in cmds {
            say!(out, "  {c}");
        }
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

/// Wraps the restarts so each one reports its progress on `err`.
fn with_progress<'a, 'r: 'a>(
    restarts: Restarts<'r>,
    slot: &'a mut Option<Progress<'a>>,
    err: &'a mut dyn Write,
) -> Restarts<'a> {
    match restarts {
        Restarts::Run(inner) => Restarts::Run(slot.insert(Progress { inner, err })),
        Restarts::Skip(why) => Restarts::Skip(why),
    }
}

/// `apply` or `revert` (`command`, carried out by `run`): their result in text or JSON,
/// with `--exit-code`'s meaning of pending changes.
type WritingCommand = fn(
    &plan::Options,
    bool,
    Restarts,
    Box<dyn Write + '_>,
    &mut dyn Write,
    &mut RunDoc,
) -> Result<u8>;

#[allow(clippy::too_many_arguments)]
fn run_writing(
    command: &'static str,
    run: WritingCommand,
    opts: &plan::Options,
    dry_run: bool,
    exit_code: bool,
    output: OutputFormat,
    restarts: Restarts,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8> {
    let mut doc = RunDoc::new(command, dry_run, output);
    let result = run(
        opts,
        dry_run,
        restarts,
        text_out(output, out),
        err,
        &mut doc,
    );
    let result = pending(exit_code, &doc, result);
    finish(output, doc, result, out)
}

fn apply(
    opts: &plan::Options,
    dry_run: bool,
    restarts: Restarts,
    mut out: Box<dyn Write + '_>,
    err: &mut dyn Write,
    doc: &mut RunDoc,
) -> Result<u8> {
    let out = &mut *out;
    let plan = plan::build(opts, false)?;
    doc.decide(&plan);
    describe(&plan, out);
    if plan.changes.is_empty() {
        say!(
            out,
            "already configured: nothing to change, no file written"
        );
        doc.result = "already-configured";
        return Ok(exit_code::OK);
    }
    if dry_run {
        // The manifest (root-only) only names the backups here: a drift check by a user
        // who cannot read it still answers, with the backup paths apply would use.
        let manifest = match Manifest::load(&opts.host) {
            Err(e) if e.is_permission_denied() => {
                tracing::warn!("{e}: backups shown as apply would name them");
                None
            }
            other => other?,
        };
        say!(
            out,
            "dry run: {} file(s) would change, nothing written",
            plan.changes.len()
        );
        for c in &plan.changes {
            let shown = if c.target != c.host_path {
                format!("{} (symlink to {})", c.host_path, c.target)
            } else {
                c.host_path.clone()
            };
            say!(out, "# {shown}: {}", c.purpose);
            let d = diff(&c.host_path, c.old.as_deref(), Some(&c.new));
            emit(out, format_args!("{d}"));
            doc.files.push(FileDoc {
                path: c.host_path.clone(),
                target: c.target.clone(),
                action: if c.old.is_some() { "update" } else { "create" },
                purpose: Some(c.purpose.clone()),
                backup: backup_of(manifest.as_ref(), c),
                written: false,
                diff: Some(d),
            });
        }
        doc.planned(&plan.services);
        doc.result = "changes-pending";
        return Ok(exit_code::OK);
    }
    // Write under the lock, from a plan made under it (another run may have changed
    // the files since the first look).
    let json = doc.json;
    let lock = RunLock::acquire(&opts.host, &mut |msg| {
        say!(out, "{msg}");
        if json {
            say!(err, "edgegpu-node-setup: {msg}");
        }
    })?;
    let plan = match plan::build(opts, false) {
        Ok(plan) if !plan.changes.is_empty() => plan,
        Ok(_) => {
            lock.release_unused(&opts.host);
            say!(
                out,
                "already configured (by the run we waited for): nothing to change, no file written"
            );
            doc.result = "already-configured";
            return Ok(exit_code::OK);
        }
        Err(e) => {
            lock.release_unused(&opts.host);
            return Err(e);
        }
    };
    doc.decide(&plan);
    let mut slot = None;
    let restarts = with_progress(restarts, &mut slot, err);
    let report = match ops::apply(&plan, &opts.host, restarts, &lock) {
        Ok(report) => report,
        Err(e) => {
            lock.release_unused(&opts.host);
            return Err(e);
        }
    };
    for (c, backup) in plan.changes.iter().zip(&report.backups) {
        say!(
            out,
            "wrote {} ({}{})",
            c.host_path,
            c.purpose,
            if c.old.is_some() {
                "; original backed up"
            } else {
                "; new file"
            }
        );
        doc.files.push(FileDoc {
            path: c.host_path.clone(),
            target: c.target.clone(),
            action: if c.old.is_some() { "update" } else { "create" },
            purpose: Some(c.purpose.clone()),
            backup: backup.clone(),
            written: true,
            diff: None,
        });
    }
    say!(
        out,
        "backups and manifest: {}",
        opts.host.path(crate::state::STATE_DIR).display()
    );
    report_restarts(&report, out);
    doc.restarts(&report);
    doc.result = "applied";
    if let Some(e) = restart_failed(&report, "written", "edgegpu-node-setup revert") {
        doc.to_undo = Some("edgegpu-node-setup revert".into());
        return Err(e);
    }
    Ok(exit_code::OK)
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

fn check(
    opts: &plan::Options,
    format: OutputFormat,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8> {
    // A user who is not root may not read every file (the k3s installer's environment
    // files are root-only): check answers without them, names them, and exits 3
    // (cannot tell) instead of stopping at the first one.
    let tolerant = plan::Options {
        host: opts.host.tolerating_unreadable(),
        ..opts.clone()
    };
    let plan = plan::build(&tolerant, true)?;
    let unreadable = tolerant.host.unreadable();
    let configured = plan.configured();
    let code = if unreadable.is_empty() {
        check_code(configured)
    } else {
        exit_code::REFUSED
    };
    let verdict = match (configured, plan.cdi.is_some()) {
        (true, _) => "node is fully configured",
        (false, false) => "node is NOT fully configured (run: edgegpu-node-setup apply)",
        (false, true) => "node is NOT fully configured (run: edgegpu-node-setup apply --cdi)",
    };
    let cannot_tell = (!unreadable.is_empty()).then(|| {
        format!(
            "cannot tell: {} could not be read (permission denied: run check as root); without {}: {verdict}",
            unreadable
                .iter()
                .map(|u| u.file.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if unreadable.len() == 1 { "it" } else { "them" }
        )
    });
    match format {
        OutputFormat::Json => {
            let cdi = plan.cdi.is_some();
            let json = CheckJson {
                command: "check",
                configured,
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
                unreadable: &unreadable,
                exit_code: code,
                exit_meaning: if unreadable.is_empty() {
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
        OutputFormat::Text => {
            for u in &unreadable {
                say!(
                    out,
                    "unreadable: {}: {} (run check as root); the answer below is computed as if it did not exist",
                    u.file,
                    u.error
                );
            }
            describe(&plan, out);
            for item in &plan.checks {
                say!(
                    out,
                    "[{}] {}: {}",
                    if item.ok { "ok" } else { "missing" },
                    item.file,
                    item.what
                );
            }
            say!(out, "{}", cannot_tell.as_deref().unwrap_or(verdict));
        }
    }
    if let Some(why) = &cannot_tell {
        say!(err, "edgegpu-node-setup: {why}");
    }
    Ok(code)
}

fn check_code(configured: bool) -> u8 {
    if configured {
        exit_code::OK
    } else {
        exit_code::NOT_CONFIGURED
    }
}

fn revert(
    opts: &plan::Options,
    dry_run: bool,
    restarts: Restarts,
    mut out: Box<dyn Write + '_>,
    err: &mut dyn Write,
    doc: &mut RunDoc,
) -> Result<u8> {
    let out = &mut *out;
    let nothing = |out: &mut dyn Write, doc: &mut RunDoc| {
        say!(
            out,
            "nothing to revert: no manifest at {}",
            opts.host.path(crate::state::MANIFEST).display()
        );
        doc.result = "nothing-to-revert";
        Ok(exit_code::OK)
    };
    if !opts.host.exists(crate::state::MANIFEST) {
        return nothing(out, doc);
    }
    let lock = if dry_run {
        None
    } else {
        let json = doc.json;
        Some(RunLock::acquire(&opts.host, &mut |msg| {
            say!(out, "{msg}");
            if json {
                say!(err, "edgegpu-node-setup: {msg}");
            }
        })?)
    };
    let Some((manifest, steps)) = ops::plan_revert(&opts.host, opts.force)? else {
        // The run we waited for reverted everything.
        if let Some(lock) = lock {
            lock.release_unused(&opts.host);
        }
        return nothing(out, doc);
    };
    let backup_of = |s: &RevertStep| {
        manifest
            .entries
            .iter()
            .find(|e| e.path == s.path)
            .and_then(|e| e.backup.clone())
    };
    let file_doc = |s: &RevertStep, written: bool, diff: Option<String>| FileDoc {
        path: s.path.clone(),
        target: s.path.clone(),
        action: if s.restore.is_some() {
            "restore"
        } else {
            "remove"
        },
        purpose: None,
        backup: backup_of(s),
        written,
        diff,
    };
    if dry_run {
        say!(
            out,
            "dry run: {} file(s) would be restored, nothing written",
            steps.len()
        );
        for s in &steps {
            let d = diff(&s.path, s.current.as_deref(), s.restore.as_deref());
            emit(out, format_args!("{d}"));
            doc.files.push(file_doc(s, false, Some(d)));
        }
        doc.planned(&ops::revert_services(&manifest, &steps));
        doc.result = "changes-pending";
        return Ok(exit_code::OK);
    }
    let Some(lock) = lock else {
        unreachable!("a dry run returned above")
    };
    let mut slot = None;
    let restarts = with_progress(restarts, &mut slot, err);
    let report = ops::revert(&opts.host, &manifest, &steps, restarts, &lock)?;
    for s in &steps {
        say!(
            out,
            "{} {}",
            if s.restore.is_some() {
                "restored"
            } else {
                "removed"
            },
            s.path
        );
        doc.files
            .push(file_doc(s, report.written.contains(&s.path), None));
    }
    report_restarts(&report, out);
    doc.restarts(&report);
    doc.result = "reverted";
    if let Some(e) = restart_failed(
        &report,
        "restored or removed",
        "edgegpu-node-setup apply (applies again)",
    ) {
        doc.to_undo = Some("edgegpu-node-setup apply".into());
        return Err(e);
    }
    Ok(exit_code::OK)
}
