//! Restarting what reads the changed files, in dependency order: systemd re-reads units,
//! then containerd/docker (k3s talks to them), then k3s. The runner is a trait so tests
//! record the calls instead of running systemctl.

use serde::{Deserialize, Serialize};

use crate::effective::engine::{CONTAINERD, DOCKER};
use edgegpu_host::error::{Result, SetupError};

/// Something that must pick up a changed file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// `systemctl daemon-reload` after a unit file changed.
    DaemonReload,
    Containerd,
    /// dockerd re-reads `runtimes` and `default-runtime` on SIGHUP (reload), but a
    /// reload only adds and changes them (see
    /// [`crate::formats::daemon_json::reload_applies`]): a change a reload cannot carry
    /// out gets [`Service::DockerRestart`].
    Docker,
    /// dockerd restarted: for what a reload cannot do. dockerd registers its CDI device
    /// driver (with `cdi-spec-dirs`) only when it starts (moby cmd/dockerd/daemon.go,
    /// RegisterCDIDriver): a reload updates the `features` map but registers nothing,
    /// so CDI needs a restart. And a reload never removes a runtime or the default
    /// runtime, so undoing an apply (revert) restarts dockerd.
    DockerRestart,
    /// A k3s unit (`k3s.service`, `k3s-agent.service`).
    K3s(String),
}

impl Service {
    /// The systemctl arguments. `try-` variants leave a stopped service stopped.
    pub fn systemctl_args(&self) -> Vec<String> {
        let args: Vec<&str> = match self {
            Service::DaemonReload => vec!["daemon-reload"],
            Service::Containerd => vec!["try-restart", CONTAINERD.unit()],
            Service::Docker => vec!["try-reload-or-restart", DOCKER.unit()],
            Service::DockerRestart => vec!["try-restart", DOCKER.unit()],
            Service::K3s(unit) => vec!["try-restart", unit.as_str()],
        };
        args.into_iter().map(String::from).collect()
    }
}

impl Service {
    /// The unit it acts on (`None`: systemd itself, for `daemon-reload`).
    pub fn unit(&self) -> Option<&str> {
        match self {
            Service::DaemonReload => None,
            Service::Containerd => Some(CONTAINERD.unit()),
            Service::Docker | Service::DockerRestart => Some(DOCKER.unit()),
            Service::K3s(unit) => Some(unit),
        }
    }

    /// What the command does: `daemon-reload`, `reload` (dockerd re-reads its
    /// configuration, restarted only if it cannot reload) or `restart`.
    pub fn action(&self) -> &'static str {
        match self {
            Service::DaemonReload => "daemon-reload",
            Service::Docker => "reload",
            _ => "restart",
        }
    }

    /// The whole command, as printed and run: `systemctl try-restart k3s.service`.
    pub fn command(&self) -> String {
        format!("systemctl {}", self.systemctl_args().join(" "))
    }
}

/// Sorted, without duplicates: the order is the derive order of [`Service`]. A docker
/// restart makes the reload needless.
pub fn ordered(mut services: Vec<Service>) -> Vec<Service> {
    services.sort();
    services.dedup();
    if services.contains(&Service::DockerRestart) {
        services.retain(|s| *s != Service::Docker);
    }
    services
}

/// Runs systemctl (or, in tests, records what would run).
pub trait ServiceManager {
    fn systemctl(&mut self, args: &[String]) -> std::result::Result<(), String>;
}

/// The real runner.
#[derive(Debug, Default)]
pub struct Systemctl;

impl ServiceManager for Systemctl {
    fn systemctl(&mut self, args: &[String]) -> std::result::Result<(), String> {
        let status = std::process::Command::new("systemctl")
            .args(args)
            .status()
            .map_err(|e| format!("cannot run systemctl: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("systemctl {} failed ({status})", args.join(" ")))
        }
    }
}

/// Why services are (not) restarted.
pub fn restart_blocked(live_system: bool, no_restart: bool) -> Option<&'static str> {
    if no_restart {
        Some("--no-restart")
    } else if !live_system {
        Some("--root is not /")
    } else {
        None
    }
}

/// One command run: which, how it ended, how long it took.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub service: Service,
    pub elapsed: std::time::Duration,
    /// `Err`: why it failed.
    pub result: std::result::Result<(), String>,
}

/// What [`run_each`] did.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Each command run, in order; only the last one may have failed.
    pub outcomes: Vec<Outcome>,
    /// The commands not run because one before them failed.
    pub not_run: Vec<Service>,
}

impl Run {
    pub fn failed(&self) -> Option<&Outcome> {
        self.outcomes.last().filter(|o| o.result.is_err())
    }
}

/// Runs `services` in order; stops at the first failure (a later service depends on an
/// earlier one).
pub fn run_each(services: &[Service], manager: &mut dyn ServiceManager) -> Run {
    let mut run = Run::default();
    let mut todo = ordered(services.to_vec()).into_iter();
    for s in todo.by_ref() {
        let args = s.systemctl_args();
        tracing::info!(command = %args.join(" "), "systemctl");
        let start = std::time::Instant::now();
        let result = manager.systemctl(&args);
        let outcome = Outcome {
            service: s,
            elapsed: start.elapsed(),
            result,
        };
        let failed = outcome.result.is_err();
        run.outcomes.push(outcome);
        if failed {
            break;
        }
    }
    run.not_run = todo.collect();
    run
}

/// Restarts `services` in order; stops at the first failure (a later service depends on
/// an earlier one). Returns the commands run.
pub fn restart(services: &[Service], manager: &mut dyn ServiceManager) -> Result<Vec<String>> {
    let run = run_each(services, manager);
    if let Some(failed) = run.failed() {
        let e = failed.result.clone().unwrap_err();
        return Err(SetupError::Restart(format!(
            "{e}; files are written, restart by hand"
        )));
    }
    Ok(run.outcomes.iter().map(|o| o.service.command()).collect())
}
