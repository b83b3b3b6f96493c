//! `edgegpu-node-setup`: see docs/node-setup.md. All logic lives in the library.

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

/// Whether log lines on stderr carry ANSI colour codes: only when stderr is a terminal (a pod's
/// log, a pipe or a file gets plain text) and `NO_COLOR` is unset or empty
/// (<https://no-color.org>); the device plugin's and the labeller's logs decide the same way
/// (edgegpu_plugin::logging, which this crate does not link).
fn colour(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.map_or(true, OsStr::is_empty)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // tracing-subscriber colours by default, whatever stderr is.
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EDGEGPU_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = edgegpu_node_setup::cli::Cli::parse();
    let code = edgegpu_node_setup::run(
        cli,
        &mut edgegpu_node_setup::restart::Systemctl,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }
}
