use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use edgegpu_plugin::{logging, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("edgegpu-device-plugin: cannot set up logging: {e}");
    }
    // One thread: the plugin mostly sleeps; a single-threaded runtime keeps RSS and
    // wake-ups minimal (blocking work goes to tokio's lazily started blocking pool).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Blocking-pool threads (file-system calls) are rare; do not keep idle ones around.
        .thread_keep_alive(Duration::from_secs(1))
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(edgegpu_plugin::run(cli));
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
