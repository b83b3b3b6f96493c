//! SIGTERM / SIGINT handling.

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Installed signal handlers; install them before any slow start-up work so that a
/// SIGTERM during discovery is not fatal.
pub struct ShutdownSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl ShutdownSignals {
    /// Installs handlers for SIGTERM and SIGINT.
    pub fn install() -> std::io::Result<Self> {
        Ok(ShutdownSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes on the first SIGTERM or SIGINT.
    pub async fn recv(&mut self) {
        let name = tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        };
        tracing::info!("Received {name}, shutting down.");
    }
}
