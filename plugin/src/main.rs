use std::process::ExitCode;

use clap::Parser;
use edgegpu_plugin::{logging, runtime, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("edgegpu-device-plugin: cannot set up logging: {e}");
    }
    runtime::run_to_exit(edgegpu_plugin::run(cli))
}
