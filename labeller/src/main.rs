use std::process::ExitCode;

use clap::Parser;
use edgegpu_labeller::Args;
use edgegpu_node::{logging, runtime};

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = logging::init(args.log_format) {
        eprintln!("edgegpu-labeller: cannot set up logging: {e}");
    }
    runtime::run_to_exit(edgegpu_labeller::run(args))
}
