//! `edgegpu-node-setup`: wires the NVIDIA container runtime into k3s, containerd or docker
//! on one node. Plan first, then write atomically with backups; `check` and `revert`.
//!
//! Module map: [`cdi`] (`cdi generate`: CDI specs for every platform), [`detect`] (what is
//! installed, which mode), [`plan`] (compute every change
//! in memory), [`ops`] (write / revert), [`unit`], [`daemon_json`], [`containerd`],
//! [`k3s_config`] (the three file formats and k3s's config), [`state`] (manifest and
//! backups), [`restart`] (systemctl, injectable), [`fsops`] (atomic writes), [`host`]
//! (the `--root` tree).

pub mod cdi;
pub mod cli;
pub mod commands;
pub mod containerd;
pub mod daemon_json;
pub mod detect;
pub mod error;
pub mod fsops;
pub mod host;
pub mod k3s_config;
pub mod ops;
pub mod plan;
pub mod restart;
pub mod state;
pub mod unit;

pub use error::{exit_code, SetupError};

/// The runtime to register.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeSpec {
    pub name: String,
    /// Absolute path on the booted host.
    pub path: String,
    pub set_default: bool,
}

/// Runs one command; returns the exit code. Errors are printed to `err`.
pub fn run(
    cli: cli::Cli,
    manager: &mut dyn restart::ServiceManager,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    match commands::run(cli, manager, out) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "edgegpu-node-setup: error: {e}");
            e.exit_code()
        }
    }
}
