//! SIGTERM / SIGINT (shut down) and SIGHUP (rebuild: discover again and re-register, as
//! NVIDIA's plugin restarts on SIGHUP).

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Installed signal handlers; install them before any slow start-up work so that a
/// SIGTERM during discovery is not fatal.
pub struct ShutdownSignals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

impl ShutdownSignals {
    /// Installs handlers for SIGTERM, SIGINT and SIGHUP.
    pub fn install() -> std::io::Result<Self> {
        Ok(ShutdownSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Completes on the next signal: `true` for SIGTERM/SIGINT (shut down), `false` for
    /// SIGHUP (rebuild).
    pub async fn shutdown_or_hangup(&mut self) -> bool {
        let name = tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.hangup.recv() => {
                tracing::info!("Received SIGHUP, restarting.");
                return false;
            }
        };
        tracing::info!("Received {name}, shutting down.");
        true
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
