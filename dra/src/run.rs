//! The driver's life: discover the node's devices, publish them, serve the kubelet, keep the
//! slices and health current, and on SIGTERM/SIGINT remove the sockets and exit.

use crate::cli::Cli;

/// Runs the driver until SIGTERM/SIGINT.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let _ = cli;
    anyhow::bail!("not yet wired")
}
