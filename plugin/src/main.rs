use std::process::ExitCode;

use clap::Parser;
use edgegpu_node::{logging, runtime};
use edgegpu_plugin::cli::Command;
use edgegpu_plugin::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::MpsControlDaemon(args)) = cli.command {
        if let Err(e) = logging::init(args.log_format) {
            eprintln!("edgegpu-device-plugin: cannot set up logging: {e}");
        }
        // Before any thread exists: a private mount namespace covers the whole process only
        // then.
        if let Err(e) =
            edgegpu_node::mps::daemon::isolate(&args.root, args.private_shm(), args.chroot())
        {
            tracing::error!("{e:#}");
            return ExitCode::FAILURE;
        }
        return runtime::run_to_exit(edgegpu_plugin::run_mps_daemon(args));
    }
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("edgegpu-device-plugin: cannot set up logging: {e}");
    }
    runtime::run_to_exit(edgegpu_plugin::run(cli))
}
