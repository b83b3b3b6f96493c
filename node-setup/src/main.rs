//! `edgegpu-node-setup`: see docs/node-setup.md. All logic lives in the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EDGEGPU_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = edgegpu_node_setup::cli::Cli::parse();
    let code = edgegpu_node_setup::run(
        cli,
        &mut edgegpu_node_setup::restart::Systemctl,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    ExitCode::from(code)
}
