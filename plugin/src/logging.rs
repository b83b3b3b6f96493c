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

/// The environment variable with the log filter, shared by every edgegpu program:
/// `EDGEGPU_LOG=debug`, `EDGEGPU_LOG=info,edgegpu_plugin::kubelet=debug` (`RUST_LOG` syntax,
/// tracing-subscriber's `EnvFilter`).
pub const LOG_ENV: &str = "EDGEGPU_LOG";

/// Installs the global subscriber, writing to stderr. [`LOG_ENV`] overrides the default
/// level (`info`). Fails when a subscriber is already installed.
pub fn init(format: LogFormat) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| EnvFilter::new("info,loona_hpack=warn,h2=warn,hyper=warn,tower=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
}
