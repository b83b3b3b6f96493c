//! The whole program as a function: one command in, its exit code out (main.rs and the tests
//! call it).

use std::io::Write;

use crate::cli::Cli;
use crate::commands;
use crate::ops::Restarts;
use crate::restart::ServiceManager;

/// Runs one command; returns the exit code. Services are restarted through `manager`
/// only for `--root /` without `--no-restart`. Errors and restart progress are printed
/// to `err`.
pub fn run(
    cli: Cli,
    manager: &mut dyn ServiceManager,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let restarts = commands::restarts(&cli, manager);
    run_with(cli, restarts, out, err)
}

/// [`run`] with the restart decision made by the caller (tests restart through a
/// recorder on a tree that is not `/`).
pub fn run_with(cli: Cli, restarts: Restarts, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
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
