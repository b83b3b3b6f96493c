//! Link 3: will k3s, containerd or docker really run GPU containers? What `check` decides,
//! from the files and flags the engines load, in the NVIDIA-runtime mode and, when that is
//! not configured, in CDI mode (a node set up with `apply --cdi` is configured that way).

use crate::plan::{self, Plan};

use super::finding::{Facts, Finding, Link, Verdict};

/// Checks the runtime configuration; notes in `facts` whether CDI mode is the one in place.
pub fn check(opts: &plan::Options, facts: &mut Facts) -> Finding {
    let runtime = plan::build(opts, true);
    if let Ok(plan) = &runtime {
        if engines_configured(plan) {
            facts.cdi_mode = opts.cdi;
            return configured(plan, opts.cdi);
        }
    }
    // Not the NVIDIA runtime: maybe CDI mode (unless `--cdi` asked for that already). Only
    // where a GPU spec is there: containerd 2 has CDI on by default, and a node nobody set up
    // for CDI would pass (its pods, asking for the NVIDIA runtime, fail).
    if !opts.cdi {
        let cdi_opts = plan::Options {
            cdi: true,
            ..opts.clone()
        };
        if let Ok(plan) = plan::build(&cdi_opts, true) {
            let has_spec = plan.cdi.as_ref().is_some_and(|s| !s.found.is_empty());
            if has_spec && engines_configured(&plan) {
                facts.cdi_mode = true;
                return configured(&plan, true).detail(format!(
                    "the NVIDIA runtime is not the default ({}): only pods whose devices come through CDI get GPUs (the device plugin's cdi-cri or cdi-annotations strategy, the DRA driver)",
                    fix_for(false)
                ));
            }
        }
    }
    let fix = fix_for(opts.cdi);
    match runtime {
        Err(e) => Finding::new(
            Link::Runtime,
            Verdict::Broken,
            "the container runtime configuration cannot be read",
        )
        .source("edgegpu-node-setup check")
        .detail(e.to_string())
        .fix(format!("fix the file the line above names, then: {fix}")),
        Ok(plan) => {
            let f = Finding::new(
                Link::Runtime,
                Verdict::Broken,
                format!(
                    "{} will not start GPU containers {}",
                    engines(&plan),
                    if opts.cdi {
                        "with devices from CDI specs"
                    } else {
                        "with the NVIDIA runtime"
                    }
                ),
            )
            .source("edgegpu-node-setup check")
            .sources(files(&plan))
            .details(evidence(&plan))
            .details(plan.blockers.iter().map(|b| format!("blocked: {b}")));
            if plan.blockers.is_empty() {
                f.fix(fix)
            } else {
                f.fix(format!("change what \"blocked\" names above, then: {fix}"))
            }
        }
    }
}

fn fix_for(cdi: bool) -> &'static str {
    if cdi {
        "sudo edgegpu-node-setup apply --cdi"
    } else {
        "sudo edgegpu-node-setup apply"
    }
}

/// Whether the engines are configured. In CDI mode the spec itself is the next link's
/// business (cdi-spec), so that a missing spec is named there, not here.
fn engines_configured(plan: &Plan) -> bool {
    let spec_check = plan.cdi.as_ref().map(|specs| specs.dirs.join(" or "));
    plan.blockers.is_empty()
        && plan
            .checks
            .iter()
            .all(|c| c.ok || spec_check.as_deref() == Some(c.file.as_str()))
}

fn configured(plan: &Plan, cdi: bool) -> Finding {
    let how = if cdi {
        "inject GPUs from CDI specs".to_string()
    } else {
        format!("use the '{}' runtime ({})", plan.spec.name, plan.spec.path)
    };
    Finding::new(
        Link::Runtime,
        Verdict::Ok,
        format!("{} will {how}", engines(plan)),
    )
    .source("edgegpu-node-setup check")
    .sources(files(plan))
    .details(evidence(plan))
}

/// The files `check`'s requirements name (some name a program's default instead), each once.
fn files(plan: &Plan) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for c in &plan.checks {
        let file = c.file.split(':').next().unwrap_or("");
        if file.starts_with('/') && !file.contains(' ') && !files.iter().any(|f| f == file) {
            files.push(file.to_string());
        }
    }
    files
}

/// "k3s containerd (k3s.service)", the engines the plan looked at.
fn engines(plan: &Plan) -> String {
    let names: Vec<&str> = plan.effective.iter().map(|e| e.engine.as_str()).collect();
    match (names.is_empty(), &plan.choice) {
        (false, _) => names.join(" and "),
        (true, Some(c)) => format!("{} mode", c.mode.name()),
        (true, None) => "the container runtime".into(),
    }
}

/// What `check` says, line by line.
fn evidence(plan: &Plan) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(c) = &plan.choice {
        lines.push(format!("mode: {} ({})", c.mode.name(), c.reason));
    }
    for e in &plan.effective {
        lines.push(format!(
            "{}: default runtime {} (from {})",
            e.engine, e.default_runtime.value, e.default_runtime.source
        ));
    }
    for c in &plan.checks {
        lines.push(format!(
            "[{}] {}: {}",
            if c.ok { "ok" } else { "missing" },
            c.file,
            c.what
        ));
    }
    lines
}
