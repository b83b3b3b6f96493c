//! What is installed under the root: the k3s services with their settings, k3s's release,
//! docker, the system containerd, k3s's containerd templates. `detect` picks the mode from
//! this; the effective views and the planners read the services from it.

use super::engine::{CONTAINERD, DOCKER, K3S};
use super::k3s::{K3s, K3sEngine, Role, K3S_TEMPLATES};
use super::k3s_version::{version_from_binary, K3sVersion};
use super::systemd::{find_unit_file, Unit};
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

const K3S_BINARIES: [&str; 3] = ["/usr/local/bin/k3s", "/opt/bin/k3s", "/usr/bin/k3s"];
const BIN_DIRS: [&str; 4] = ["/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin"];

#[derive(Debug, Default)]
pub struct Inventory {
    pub k3s_binary: Option<String>,
    pub k3s_version: Option<(K3sVersion, String)>,
    /// Each k3s service: one per systemd unit found, or (no unit) k3s's config files.
    pub k3s: Vec<K3s>,
    pub docker: Option<String>,
    pub system_containerd: Option<String>,
    pub k3s_server_dir: bool,
    /// Paths (under the root) of the k3s templates that exist.
    pub existing: Vec<String>,
}

/// The unit file of `name` when one is installed (not masked).
fn find_unit(host: &HostRoot, name: &str) -> Option<String> {
    find_unit_file(host, name).filter(|p| host.exists(p))
}

fn find_binary(host: &HostRoot, name: &str) -> Option<String> {
    BIN_DIRS
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| host.exists(p))
}

impl Inventory {
    pub fn scan(host: &HostRoot, k3s_version_override: Option<&str>) -> Result<Inventory> {
        let mut inv = Inventory::default();
        for name in K3S.units {
            if let Some(unit) = Unit::load(host, name)? {
                inv.k3s.push(K3s::read(host, Some(unit))?);
            }
        }
        inv.k3s_binary = inv
            .k3s
            .iter()
            .filter_map(|k| k.binary.clone())
            .chain(K3S_BINARIES.iter().map(|s| s.to_string()))
            .find(|p| p.starts_with('/') && host.exists(p));
        if inv.k3s.is_empty() && inv.k3s_binary.is_some() {
            // k3s without a systemd unit (OpenRC, a custom service): its config files.
            inv.k3s.push(K3s::read(host, None)?);
        }
        inv.k3s_version = match k3s_version_override {
            Some(v) => Some((
                K3sVersion::parse(v).ok_or_else(|| {
                    SetupError::Refused(format!(
                        "--k3s-version {v:?} is not a version like v1.29.3+k3s1"
                    ))
                })?,
                "--k3s-version".to_string(),
            )),
            None => match &inv.k3s_binary {
                Some(bin) => version_from_binary(host, bin)?.map(|v| (v, bin.clone())),
                None => None,
            },
        };
        inv.docker = [DOCKER.config.to_string()]
            .into_iter()
            .find(|p| host.exists(p) || host.is_symlink(p))
            .or_else(|| find_binary(host, "dockerd"))
            .or_else(|| find_unit(host, DOCKER.unit()));
        inv.system_containerd = [CONTAINERD.config.to_string()]
            .into_iter()
            .find(|p| host.exists(p) || host.is_symlink(p))
            .or_else(|| find_binary(host, "containerd"))
            .or_else(|| find_unit(host, CONTAINERD.unit()));
        inv.k3s_server_dir = host.exists("/var/lib/rancher/k3s/server");
        for k in &inv.k3s {
            for (n, _) in K3S_TEMPLATES {
                let p = format!("{}/{n}", k.template_dir());
                if host.exists(&p) {
                    inv.existing.push(p);
                }
            }
        }
        Ok(inv)
    }

    /// Whether `path` is one of the k3s templates the scan found.
    pub fn host_has(&self, path: &str) -> bool {
        self.existing.iter().any(|p| p == path)
    }

    pub fn has_k3s(&self) -> bool {
        !self.k3s.is_empty()
    }

    /// A k3s server runs here (its auto-deploy manifests folder is read on this node).
    pub fn is_k3s_server(&self) -> bool {
        self.k3s
            .iter()
            .any(|k| k.unit.is_some() && k.role == Role::Server)
            || (self.k3s.iter().all(|k| k.unit.is_none()) && self.k3s_server_dir)
    }

    pub fn version(&self) -> Option<K3sVersion> {
        self.k3s_version.as_ref().map(|(v, _)| *v)
    }

    /// The engines of the k3s services, with the service's name.
    pub fn engines(&self) -> Vec<(&K3s, K3sEngine)> {
        self.k3s.iter().map(|k| (k, K3sEngine::of(k))).collect()
    }

    /// What was found, one line each, for the explanation.
    pub fn findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        match (&self.k3s_binary, &self.k3s_version) {
            (Some(bin), Some((v, src))) => {
                out.push(format!("k3s binary {bin}, version {v} (from {src})"))
            }
            (Some(bin), None) => out.push(format!("k3s binary {bin}, version not found in it")),
            (None, Some((v, src))) => {
                out.push(format!("k3s version {v} (from {src}), binary not found"))
            }
            (None, None) => {}
        }
        for (k, engine) in self.engines() {
            let role = if k.role == Role::Server {
                "server"
            } else {
                "agent"
            };
            let Some(u) = &k.unit else {
                out.push(format!("k3s {role} without a systemd unit"));
                continue;
            };
            let mut extra = String::new();
            if let Ok((file, _, exec)) = u.exec_start() {
                if file != u.path {
                    extra.push_str(&format!(", ExecStart from {file}"));
                }
                if exec.line_count() == 1 {
                    extra.push_str(", single-line ExecStart");
                }
            }
            match &engine {
                K3sEngine::Docker(src) => extra.push_str(&format!(", runs with --docker ({src})")),
                K3sEngine::SystemContainerd(e) | K3sEngine::UnknownEndpoint(e) => extra.push_str(
                    &format!(", container-runtime-endpoint {} ({})", e.value, e.source),
                ),
                K3sEngine::RequiresContainerdService(_) => {
                    extra.push_str(", requires containerd.service")
                }
                K3sEngine::Embedded => {}
            }
            if k.config_file.value != K3S.config {
                extra.push_str(&format!(
                    ", config file {} ({})",
                    k.config_file.value, k.config_file.source
                ));
            }
            out.push(format!("{} (k3s {role}{extra})", u.path));
        }
        if let Some(d) = &self.docker {
            out.push(format!("docker ({d})"));
        }
        if let Some(c) = &self.system_containerd {
            out.push(format!("system containerd ({c})"));
        }
        out
    }
}
