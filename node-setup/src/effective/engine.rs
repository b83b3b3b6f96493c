//! What node-setup knows about each container engine, one table per engine: how plans
//! and checks name it, its systemd units, its main config file, the packages it comes
//! in and the releases that brought CDI. Code reads these instead of spelling them out
//! at each use (the NVIDIA-runtime and CDI views, the planners, restarts, detection).

use super::packages::Release;

/// One container engine.
#[derive(Debug)]
pub struct Engine {
    /// How plans and `check` name it (k3s's with the unit added).
    pub name: &'static str,
    /// Its systemd units; the first is the usual one.
    pub units: &'static [&'static str],
    /// The config file it reads when no flag names another.
    pub config: &'static str,
    /// The packages that install it (Debian, the vendor's repository, Yocto), in order
    /// of preference; empty where it comes as a binary.
    pub packages: &'static [&'static str],
    /// The releases that added CDI and that turned it on by default (k3s: those of the
    /// containerd it ships, known from the k3s release).
    pub cdi: CdiReleases,
}

/// When an engine got CDI.
#[derive(Debug, Clone, Copy)]
pub struct CdiReleases {
    pub added: Release,
    pub on_by_default: Release,
}

impl Engine {
    /// The systemd unit that runs it.
    pub fn unit(&self) -> &'static str {
        self.units[0]
    }

    /// Its name for one of its services: `k3s containerd (k3s.service)`.
    pub fn name_for(&self, service: &str) -> String {
        format!("{} ({service})", self.name)
    }
}

/// The system containerd. containerd 1.7 added `enable_cdi` (pkg/cri/config); 2.0
/// turned it on by default.
pub const CONTAINERD: Engine = Engine {
    name: "system containerd",
    units: &["containerd.service"],
    config: "/etc/containerd/config.toml",
    packages: &["containerd", "containerd.io", "containerd-opencontainers"],
    cdi: CdiReleases {
        added: Release(1, 7, 0),
        on_by_default: Release(2, 0, 0),
    },
};

/// dockerd. Docker Engine 25.0 added CDI (moby PR #45134, behind `features.cdi`); 28.2
/// turns it on unless `features.cdi` is false (moby PR #49963, cmd/dockerd/daemon.go
/// cdiEnabled).
pub const DOCKER: Engine = Engine {
    name: "docker",
    units: &["docker.service"],
    config: "/etc/docker/daemon.json",
    packages: &[
        "docker-ce",
        "docker.io",
        "moby-engine",
        "docker-engine",
        "docker-moby",
        "docker",
    ],
    cdi: CdiReleases {
        added: Release(25, 0, 0),
        on_by_default: Release(28, 2, 0),
    },
};

/// k3s's own containerd, configured through k3s's template and settings; one per k3s
/// service (server or agent).
pub const K3S: Engine = Engine {
    name: "k3s containerd",
    units: &["k3s.service", "k3s-agent.service"],
    config: "/etc/rancher/k3s/config.yaml",
    packages: &[],
    cdi: CONTAINERD.cdi,
};
