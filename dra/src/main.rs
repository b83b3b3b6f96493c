use std::process::ExitCode;

use clap::Parser;
use edgegpu_dra::cli::Cli;
use edgegpu_node::{logging, runtime};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("edgegpu-dra-driver: cannot set up logging: {e}");
    }
    runtime::run_to_exit(edgegpu_dra::run::run(cli))
}
