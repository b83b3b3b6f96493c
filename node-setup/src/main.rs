//! `edgegpu-node-setup`: see docs/node-setup.md. All logic lives in the library.

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use std::str::FromStr;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Whether log lines on stderr carry ANSI colour codes: only when stderr is a terminal (a pod's
/// log, a pipe or a file gets plain text) and `NO_COLOR` is unset or empty
/// (<https://no-color.org>); the device plugin's and the labeller's logs decide the same way
/// (edgegpu_plugin::logging, which this crate does not link).
fn colour(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.map_or(true, OsStr::is_empty)
}

/// `EDGEGPU_LOG`'s `target=level` directives (`debug`, `warn,edgegpu_node_setup::cdi=debug`),
/// read with tracing-subscriber's `Targets` as every edgegpu program reads them: no regex
/// engine (span and field filters are not supported). Unset or unreadable: warnings only.
fn log_filter(value: Option<&str>) -> Targets {
    value
        .and_then(|v| Targets::from_str(v).ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::WARN))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // tracing-subscriber colours by default, whatever stderr is.
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        // The level is the filter's alone (the builder would cap it at INFO).
        .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
        .finish()
        .with(log_filter(std::env::var("EDGEGPU_LOG").ok().as_deref()))
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
    fn log_filter_reads_target_directives_and_defaults_to_warnings() {
        use tracing::Level;
        let f = log_filter(Some("info,edgegpu_node_setup::cdi=debug"));
        assert!(f.would_enable("edgegpu_node_setup::cdi", &Level::DEBUG));
        assert!(!f.would_enable("edgegpu_node_setup::apply", &Level::DEBUG));
        assert!(f.would_enable("edgegpu_node_setup::apply", &Level::INFO));
        for unset_or_bad in [None, Some("=== not a filter")] {
            let f = log_filter(unset_or_bad);
            assert!(f.would_enable("edgegpu_node_setup", &Level::WARN));
            assert!(!f.would_enable("edgegpu_node_setup", &Level::INFO));
        }
    }

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }
}
