//! What a plan is: the options it is built from, the files to write, the checks
//! `check` reports, and what the engines use now.

use std::path::PathBuf;

use serde::Serialize;

use crate::detect::Choice;
use crate::effective::cdi::{EffectiveCdi, Specs};
use crate::effective::runtime::Effective;
use crate::restart::Service;
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::root::HostRoot;

/// Everything `plan` needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    pub host: HostRoot,
    pub mode: crate::detect::ModeRequest,
    pub spec: RuntimeSpec,
    /// Allow a default runtime whose binary is missing.
    pub force: bool,
    pub k3s_version: Option<String>,
    /// CDI mode (`--cdi`): the engine injects the GPUs from CDI specs (see [`crate::plan::cdi`])
    /// instead of running the NVIDIA runtime.
    pub cdi: bool,
}

/// One file to write.
#[derive(Debug, Clone)]
pub struct FileChange {
    /// Host-absolute path as the operator knows it (may be a symlink).
    pub host_path: String,
    /// Host-absolute path of the file actually replaced (symlinks followed).
    pub target: String,
    /// On-disk path of `target`.
    pub write_path: PathBuf,
    pub old: Option<String>,
    pub new: String,
    pub purpose: String,
    /// What must pick this file up (recorded in the manifest, for revert).
    pub services: Vec<Service>,
}

/// One requirement and whether the host meets it now.
#[derive(Debug, Clone, Serialize)]
pub struct CheckItem {
    pub file: String,
    pub what: String,
    pub ok: bool,
}

#[derive(Debug, Clone)]
pub struct Plan {
    /// The mode and why; `None` when choosing it was refused (`check` only).
    pub choice: Option<Choice>,
    pub spec: RuntimeSpec,
    pub runtime_present: bool,
    pub changes: Vec<FileChange>,
    pub checks: Vec<CheckItem>,
    /// Services to restart when the changes are written, in any order (see restart).
    pub services: Vec<Service>,
    pub notes: Vec<String>,
    /// What the engines use now (before any change).
    pub effective: Vec<Effective>,
    /// What stops node-setup from configuring the host (check: reported; apply:
    /// refused), each naming the file, line or flag to change.
    pub blockers: Vec<String>,
    /// CDI mode: the specs found (`None` in the NVIDIA-runtime mode).
    pub cdi: Option<Specs>,
    /// CDI mode: what the engines do about CDI now (before any change).
    pub effective_cdi: Vec<EffectiveCdi>,
}

impl Plan {
    pub fn configured(&self) -> bool {
        self.blockers.is_empty() && self.checks.iter().all(|c| c.ok)
    }

    pub(super) fn new(spec: &RuntimeSpec, runtime_present: bool, choice: Option<Choice>) -> Plan {
        Plan {
            choice,
            spec: spec.clone(),
            runtime_present,
            changes: Vec::new(),
            checks: vec![CheckItem {
                file: spec.path.clone(),
                what: format!(
                    "runtime binary for '{}' exists and is executable",
                    spec.name
                ),
                ok: runtime_present,
            }],
            services: Vec::new(),
            notes: Vec::new(),
            effective: Vec::new(),
            blockers: Vec::new(),
            cdi: None,
            effective_cdi: Vec::new(),
        }
    }
}
