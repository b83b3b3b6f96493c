//! Planning: read every file involved, compute the new content in memory and the checks
//! that `check` reports, from the effective configuration (see [`crate::effective`]).
//! Then the effective configuration is computed again as it would be with the planned
//! files written: unless every engine would use the runtime asked for, the plan is
//! refused (`check`: blocked), naming what decides otherwise. Nothing here writes; any
//! error stops the run before a write.
//!
//! [`runtime`] plans the NVIDIA-runtime mode, [`cdi`] CDI mode (`--cdi`); both build on
//! [`builder`], which records the edits and checks the planned result.

use std::path::PathBuf;

use crate::effective::cdi::Specs;
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

mod builder;
pub mod cdi;
mod model;
mod runtime;

pub use model::{CheckItem, FileChange, Options, Plan};

/// Builds the plan. With `for_check`, a missing runtime binary is a failed check instead
/// of an error, and whatever stops node-setup (a refusal) is a blocker instead of an
/// error; only files that cannot be read or parsed stay errors.
pub fn build(opts: &Options, for_check: bool) -> Result<Plan> {
    let mut plan = build_either(opts, for_check)?;
    note_temp_files(&mut plan, &opts.host);
    Ok(plan)
}

/// Notes the temporary files interrupted runs left next to the files this plan reads or
/// writes and in node-setup's state directory (`apply` and `revert` remove them before
/// they write; one that finds nothing to change leaves them).
fn note_temp_files(plan: &mut Plan, host: &HostRoot) {
    let mut dirs: Vec<PathBuf> = vec![
        host.path(crate::state::STATE_DIR),
        host.path(crate::state::BACKUP_DIR),
    ];
    let files = plan.changes.iter().map(|c| c.write_path.clone()).chain(
        plan.checks
            .iter()
            .filter(|c| c.file.starts_with('/'))
            .map(|c| host.path(c.file.split([':', ' ']).next().unwrap_or_default())),
    );
    for f in files {
        if let Some(d) = f.parent() {
            if !dirs.iter().any(|x| x == d) {
                dirs.push(d.to_path_buf());
            }
        }
    }
    for dir in dirs {
        for f in edgegpu_host::fsops::temp_files(&dir).unwrap_or_default() {
            let pid = f
                .file_name()
                .and_then(|n| edgegpu_host::fsops::temp_file_pid(&n.to_string_lossy()))
                .unwrap_or_default();
            let shown = f
                .strip_prefix(host.root())
                .map_or_else(|_| f.display().to_string(), |p| format!("/{}", p.display()));
            plan.notes.push(format!(
                "{shown} is a temporary file an interrupted edgegpu-node-setup run (pid {pid}) left; apply and revert remove it before they write"
            ));
        }
    }
}

fn build_either(opts: &Options, for_check: bool) -> Result<Plan> {
    if opts.cdi {
        return match cdi::build(opts, for_check) {
            Err(SetupError::Refused(why)) if for_check => {
                let mut plan = cdi::new_plan(opts, Specs::find(&opts.host)?, None);
                plan.blockers.push(why);
                Ok(plan)
            }
            other => other,
        };
    }
    runtime::validate_spec(&opts.spec)?;
    match runtime::build(opts, for_check) {
        Err(SetupError::Refused(why)) if for_check => {
            let mut plan = Plan::new(&opts.spec, opts.host.is_executable(&opts.spec.path), None);
            plan.blockers.push(why);
            Ok(plan)
        }
        other => other,
    }
}
