//! The text output, for people: the plan (mode, why, what was found, effective settings),
//! then what each command did or would do.

use std::io::Write;

use super::emit::{emit, say};
use super::outcome::{Applied, Checked, Reverted};
use crate::ops::Report;
use crate::plan::Plan;

/// The plan: the mode and why, what was found, the runtime or the CDI specs, notes, what
/// the engines use now, what blocks.
pub fn describe(plan: &Plan, out: &mut dyn Write) {
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

/// What apply did or would do, after the plan ([`describe`]d while it ran).
pub fn applied(applied: &Applied, out: &mut dyn Write) {
    match applied {
        Applied::AlreadyConfigured {
            after_wait: false, ..
        } => say!(
            out,
            "already configured: nothing to change, no file written"
        ),
        Applied::AlreadyConfigured {
            after_wait: true, ..
        } => say!(
            out,
            "already configured (by the run we waited for): nothing to change, no file written"
        ),
        Applied::WouldChange { plan, .. } => {
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
            }
        }
        Applied::Written {
            plan,
            report,
            state_dir,
            ..
        } => {
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
            say!(out, "backups and manifest: {}", state_dir.display());
            restarts(report, out);
        }
    }
}

/// What revert did or would do.
pub fn reverted(reverted: &Reverted, out: &mut dyn Write) {
    match reverted {
        Reverted::NothingToRevert { manifest } => say!(
            out,
            "nothing to revert: no manifest at {}",
            manifest.display()
        ),
        Reverted::WouldRevert { files, .. } => {
            say!(
                out,
                "dry run: {} file(s) would be restored, nothing written",
                files.len()
            );
            for f in files {
                let s = &f.step;
                let d = diff(&s.path, s.current.as_deref(), s.restore.as_deref());
                emit(out, format_args!("{d}"));
            }
        }
        Reverted::Done { files, report, .. } => {
            for f in files {
                say!(
                    out,
                    "{} {}",
                    if f.step.restore.is_some() {
                        "restored"
                    } else {
                        "removed"
                    },
                    f.step.path
                );
            }
            restarts(report, out);
        }
    }
}

/// The restarts run, or why not and what to run instead.
fn restarts(report: &Report, out: &mut dyn Write) {
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

/// What check found: the plan, each check, and the answer.
pub fn checked(checked: &Checked, out: &mut dyn Write) {
    for u in &checked.unreadable {
        say!(
            out,
            "unreadable: {}: {} (run check as root); the answer below is computed as if it did not exist",
            u.file,
            u.error
        );
    }
    describe(&checked.plan, out);
    for item in &checked.plan.checks {
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
        cannot_tell(checked).as_deref().unwrap_or(verdict(checked))
    );
}

/// check's answer.
fn verdict(checked: &Checked) -> &'static str {
    match (checked.configured, checked.plan.cdi.is_some()) {
        (true, _) => "node is fully configured",
        (false, false) => "node is NOT fully configured (run: edgegpu-node-setup apply)",
        (false, true) => "node is NOT fully configured (run: edgegpu-node-setup apply --cdi)",
    }
}

/// check's answer when files could not be read: which, and the answer without them. Also
/// told on stderr, whatever the output format.
pub fn cannot_tell(checked: &Checked) -> Option<String> {
    let unreadable = &checked.unreadable;
    (!unreadable.is_empty()).then(|| {
        format!(
            "cannot tell: {} could not be read (permission denied: run check as root); without {}: {}",
            unreadable
                .iter()
                .map(|u| u.file.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if unreadable.len() == 1 { "it" } else { "them" },
            verdict(checked)
        )
    })
}
