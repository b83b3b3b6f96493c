//! Log output: human-readable text (default) or one JSON object per line.

use tracing_subscriber::EnvFilter;

/// The `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `2024-01-01T00:00:00Z  INFO edgegpu_plugin::…: message`
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global subscriber, writing to stderr. `RUST_LOG` overrides the default
/// level (`info`). Does nothing if a subscriber is already installed (tests).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,loona_hpack=warn,h2=warn,hyper=warn,tower=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
