//! `edgegpu-node-setup`: wires the NVIDIA container runtime into k3s, containerd or docker
//! on one node, or (`--cdi`) turns on their own CDI injection instead. Plan first, then
//! write atomically with backups; `check` and `revert`.
//!
//! Module map: [`cdi`] (`cdi generate`: CDI specs for every platform), [`effective`] (what
//! the services actually load: units with drop-ins, k3s's settings, containerd imports,
//! dockerd flags, and from those the runtime and CDI each engine uses), [`detect`] (what is
//! installed, which mode), [`plan`] (compute every change in memory; `plan::cdi` for CDI
//! mode), [`ops`]
//! (write / revert), [`formats`] (one module per file format: systemd unit, daemon.json,
//! containerd TOML and k3s's Go templates, k3s YAML), [`state`] (manifest and backups),
//! [`lock`] (one run at a time), [`restart`] (systemctl, injectable), [`fsops`] (atomic
//! writes), [`host`] (the `--root` tree, symlinks), [`commands`] (what each command prints).

pub mod cdi;
pub mod cli;
pub mod commands;
pub mod detect;
pub mod effective;
pub mod error;
pub mod formats;
pub mod fsops;
pub mod host;
pub mod lock;
pub mod ops;
pub mod plan;
pub mod restart;
pub mod state;

pub use error::{exit_code, SetupError};

/// The runtime to register.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeSpec {
    pub name: String,
    /// Absolute path on the booted host.
    pub path: String,
    pub set_default: bool,
}

/// Runs one command; returns the exit code. Services are restarted through `manager`
/// only for `--root /` without `--no-restart`. Errors and restart progress are printed
/// to `err`.
pub fn run(
    cli: cli::Cli,
    manager: &mut dyn restart::ServiceManager,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    let restarts = commands::restarts(&cli, manager);
    run_with(cli, restarts, out, err)
}

/// [`run`] with the restart decision made by the caller (tests restart through a
/// recorder on a tree that is not `/`).
pub fn run_with(
    cli: cli::Cli,
    restarts: ops::Restarts,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    match commands::run(cli, restarts, out, err) {
        Ok(code) => code,
        Err(e) => {
            if let Err(write_error) = writeln!(err, "edgegpu-node-setup: error: {e}") {
                // stderr itself is gone: the exit code is all that is left to say it.
                tracing::debug!(error = %write_error, "could not print the error");
            }
            e.exit_code()
        }
    }
}
