//! What the examples share: logging to stderr and a two-worker runtime.

use std::future::Future;
use std::process::ExitCode;

/// Logs to stderr at `filter` (`Targets` syntax, as `EDGEGPU_LOG`).
pub fn init_logging(filter: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter: tracing_subscriber::filter::Targets = filter.parse().unwrap_or_default();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .finish()
        .with(filter)
        .init();
}

/// Runs `program` on a two-worker runtime; an error is printed after `name: `.
pub fn run_to_exit(name: &str, program: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match runtime.block_on(program) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}
