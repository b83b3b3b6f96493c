//! The async runtime the programs run on (the plugin and edgegpu-labeller).

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

/// Runs `program` to completion on a single-threaded runtime and turns its result into the
/// exit status, logging the error. One thread: the programs mostly sleep; a single-threaded
/// runtime keeps RSS and wake-ups minimal (blocking work goes to tokio's lazily started
/// blocking pool).
pub fn run_to_exit<F>(program: F) -> ExitCode
where
    F: Future<Output = anyhow::Result<()>>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Blocking-pool threads (file-system calls, scrapes) are rare; do not keep idle ones
        // around.
        .thread_keep_alive(Duration::from_secs(1))
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(program);
    // Do not wait for blocking tasks (e.g. a driver event wait) on the way out.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
