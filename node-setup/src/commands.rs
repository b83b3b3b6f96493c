//! The three commands and how their results are shown.

use std::io::Write;

use serde::Serialize;

use crate::cli::{CdiCommand, Cli, Command, OutputFormat};
use crate::error::{exit_code, Result};
use crate::host::HostRoot;
use crate::lock::RunLock;
use crate::ops::{self, Report, Restarts};
use crate::plan::{self, Plan};
use crate::restart::{self, ServiceManager};
use crate::RuntimeSpec;

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

pub fn run(cli: Cli, manager: &mut dyn ServiceManager, out: &mut dyn Write) -> Result<u8> {
    let opts = options(&cli);
    let restarts = match restart::restart_blocked(opts.host.is_live_system(), cli.global.no_restart)
    {
        Some(why) => Restarts::Skip(why),
        None => Restarts::Run(manager),
    };
    match cli.command {
        Command::Apply { dry_run } => apply(&opts, dry_run, restarts, out),
        Command::Check { output } => check(&opts, output, out),
        Command::Revert { dry_run } => revert(&opts, dry_run, restarts, out),
        Command::Cdi {
            command: CdiCommand::Generate { output, format },
        } => crate::cdi::run(&opts.host, output.as_deref(), format, out),
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
        }
        None => say!(out, "mode: none{cdi} (see blocked)"),
    }
    match &plan.cdi {
        Some(specs) if specs.found.is_empty() => say!(
            out,
            "cdi: no spec of kind {} in {} (MISSING)",
            crate::cdi::spec::KIND,
            specs.dirs.join(" or ")
        ),
        Some(specs) => say!(
            out,
            "cdi: spec of kind {}: {}",
            crate::cdi::spec::KIND,
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

fn apply(
    opts: &plan::Options,
    dry_run: bool,
    restarts: Restarts,
    out: &mut dyn Write,
) -> Result<u8> {
    let plan = plan::build(opts, false)?;
    describe(&plan, out);
    if plan.changes.is_empty() {
        say!(
            out,
            "already configured: nothing to change, no file written"
        );
        return Ok(exit_code::OK);
    }
    if dry_run {
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
            emit(
                out,
                format_args!("{}", diff(&c.host_path, c.old.as_deref(), Some(&c.new))),
            );
        }
        return Ok(exit_code::OK);
    }
    // Write under the lock, from a plan made under it (another run may have changed
    // the files since the first look).
    let lock = RunLock::acquire(&opts.host, &mut |msg| say!(out, "{msg}"))?;
    let plan = match plan::build(opts, false) {
        Ok(plan) if !plan.changes.is_empty() => plan,
        Ok(_) => {
            lock.release_unused(&opts.host);
            say!(
                out,
                "already configured (by the run we waited for): nothing to change, no file written"
            );
            return Ok(exit_code::OK);
        }
        Err(e) => {
            lock.release_unused(&opts.host);
            return Err(e);
        }
    };
    let report = match ops::apply(&plan, &opts.host, restarts, &lock) {
        Ok(report) => report,
        Err(e) => {
            lock.release_unused(&opts.host);
            return Err(e);
        }
    };
    for c in &plan.changes {
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
    }
    say!(
        out,
        "backups and manifest: {}",
        opts.host.path(crate::state::STATE_DIR).display()
    );
    report_restarts(&report, out);
    Ok(exit_code::OK)
}

#[derive(Serialize)]
struct CheckJson<'a> {
    configured: bool,
    /// `null` when choosing the mode was refused (see `blockers`).
    mode: Option<&'a str>,
    /// CDI mode (`--cdi`): `runtime` is left out, `cdi_specs` says what was found.
    cdi: bool,
    reason: Option<&'a str>,
    findings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a RuntimeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_present: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cdi_specs: Option<&'a plan::cdi::Specs>,
    items: &'a [plan::CheckItem],
    notes: &'a [String],
    /// What each engine uses now, and where that is decided.
    effective: EffectiveJson<'a>,
    /// Settings node-setup does not own that stop it, naming them.
    blockers: &'a [String],
}

/// Per engine: the default runtime and the runtime's binary, or (CDI mode) whether CDI
/// is on and the spec dirs.
#[derive(Serialize)]
#[serde(untagged)]
enum EffectiveJson<'a> {
    Runtime(&'a [plan::Effective]),
    Cdi(&'a [plan::cdi::EffectiveCdi]),
}

fn check(opts: &plan::Options, format: OutputFormat, out: &mut dyn Write) -> Result<u8> {
    let plan = plan::build(opts, true)?;
    let configured = plan.configured();
    match format {
        OutputFormat::Json => {
            let cdi = plan.cdi.is_some();
            let json = CheckJson {
                configured,
                mode: plan.choice.as_ref().map(|c| c.mode.name()),
                cdi,
                reason: plan.choice.as_ref().map(|c| c.reason.as_str()),
                findings: plan.choice.as_ref().map_or(&[], |c| &c.findings),
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
            };
            say!(
                out,
                "{}",
                serde_json::to_string_pretty(&json).expect("serialisable")
            );
        }
        OutputFormat::Text => {
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
            say!(
                out,
                "{}",
                match (configured, plan.cdi.is_some()) {
                    (true, _) => "node is fully configured",
                    (false, false) =>
                        "node is NOT fully configured (run: edgegpu-node-setup apply)",
                    (false, true) =>
                        "node is NOT fully configured (run: edgegpu-node-setup apply --cdi)",
                }
            );
        }
    }
    Ok(if configured {
        exit_code::OK
    } else {
        exit_code::NOT_CONFIGURED
    })
}

fn revert(
    opts: &plan::Options,
    dry_run: bool,
    restarts: Restarts,
    out: &mut dyn Write,
) -> Result<u8> {
    if !opts.host.exists(crate::state::MANIFEST) {
        say!(
            out,
            "nothing to revert: no manifest at {}",
            opts.host.path(crate::state::MANIFEST).display()
        );
        return Ok(exit_code::OK);
    }
    let lock = if dry_run {
        None
    } else {
        Some(RunLock::acquire(&opts.host, &mut |msg| say!(out, "{msg}"))?)
    };
    let Some((manifest, steps)) = ops::plan_revert(&opts.host, opts.force)? else {
        // The run we waited for reverted everything.
        if let Some(lock) = lock {
            lock.release_unused(&opts.host);
        }
        say!(
            out,
            "nothing to revert: no manifest at {}",
            opts.host.path(crate::state::MANIFEST).display()
        );
        return Ok(exit_code::OK);
    };
    if dry_run {
        say!(
            out,
            "dry run: {} file(s) would be restored, nothing written",
            steps.len()
        );
        for s in &steps {
            emit(
                out,
                format_args!(
                    "{}",
                    diff(&s.path, s.current.as_deref(), s.restore.as_deref())
                ),
            );
        }
        return Ok(exit_code::OK);
    }
    let Some(lock) = lock else {
        unreachable!("a dry run returned above")
    };
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
    }
    report_restarts(&report, out);
    Ok(exit_code::OK)
}
