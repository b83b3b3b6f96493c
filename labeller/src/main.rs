use std::process::ExitCode;

use clap::Parser;
use edgegpu_labeller::Args;
use edgegpu_plugin::logging;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = logging::init(args.log_format) {
        eprintln!("edgegpu-labeller: cannot set up logging: {e}");
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(edgegpu_labeller::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
