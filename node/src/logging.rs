//! Log output: human-readable text (default) or one JSON object per line.

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `2024-01-01T00:00:00Z  INFO edgegpu_node::gpu::…: message`
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The environment variable with the log filter, shared by every edgegpu program:
/// `EDGEGPU_LOG=debug`, `EDGEGPU_LOG=info,edgegpu_node::gpu=debug` (`RUST_LOG`'s
/// `target=level` directives). The plugin reads it with tracing-subscriber's `Targets`, which
/// has no regex engine (a third of a megabyte of code, most of it resident): span and field
/// filters (`[span]{field}`) are not supported.
pub const LOG_ENV: &str = "EDGEGPU_LOG";

/// Set to any non-empty value, turns the text format's colours off even at a terminal
/// (<https://no-color.org>).
pub const NO_COLOR_ENV: &str = "NO_COLOR";

/// Whether log lines written to stderr carry ANSI colour codes: only when stderr is a terminal
/// (a container log, a pipe or a file gets plain text) and [`NO_COLOR_ENV`] is unset or empty.
/// The labeller decides the same way, through [`init`].
pub fn stderr_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os(NO_COLOR_ENV).as_deref(),
    )
}

/// [`stderr_colour`]'s rule: a terminal, and `NO_COLOR` unset or empty.
pub fn colour(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.map_or(true, OsStr::is_empty)
}

/// Used when [`LOG_ENV`] is unset or cannot be read.
const DEFAULT_FILTER: &str = "info,loona_hpack=warn,h2=warn,hyper=warn,tower=warn";

/// Installs the global subscriber, writing to stderr, in colour only where [`stderr_colour`]
/// says so. [`LOG_ENV`] overrides the default level (`info`); a value that cannot be read is
/// reported and the default used. Fails when a subscriber is already installed.
pub fn init(format: LogFormat) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (filter, problem) = match std::env::var(LOG_ENV) {
        Ok(value) => match Targets::from_str(&value) {
            Ok(filter) => (filter, None),
            Err(e) => (
                default_filter(),
                Some(format!(
                    "{LOG_ENV}={value:?}: {e}; using {DEFAULT_FILTER:?}"
                )),
            ),
        },
        Err(_) => (default_filter(), None),
    };
    // tracing-subscriber colours by default, whatever stderr is: every line of a container
    // log would start with escape codes.
    // The fmt builder stops at INFO unless told otherwise, which silently capped every
    // `EDGEGPU_LOG=…=debug`: the level is the filter's alone.
    let builder = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
        .with_writer(std::io::stderr)
        .with_ansi(stderr_colour());
    match format {
        LogFormat::Text => builder.finish().with(filter).try_init()?,
        LogFormat::Json => builder.json().finish().with(filter).try_init()?,
    }
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
    Ok(())
}

fn default_filter() -> Targets {
    Targets::from_str(DEFAULT_FILTER).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn rust_log_style_directives() {
        let f = Targets::from_str("info,edgegpu_plugin::kubelet=debug").unwrap();
        assert!(f.would_enable("edgegpu_plugin::kubelet::lifecycle", &Level::DEBUG));
        assert!(!f.would_enable("edgegpu_plugin::gpu", &Level::DEBUG));
        assert!(f.would_enable("edgegpu_plugin::gpu", &Level::INFO));
        let d = default_filter();
        assert!(!d.would_enable("h2::codec", &Level::INFO));
        assert!(d.would_enable("edgegpu_plugin", &Level::INFO));
    }

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        assert!(colour(true, None));
        // https://no-color.org: set and not empty disables, whatever the value.
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(true, Some(OsStr::new("0"))));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(OsStr::new(""))));
    }
}
