//! What is installed under the root, and which mode `auto` picks from it — with the
//! reasons, so the operator can see why.

use std::fmt;
use std::io::Read;

use crate::error::{Result, SetupError};
use crate::formats::k3s_yaml;
use crate::formats::unit::{self, UnitFile};
use crate::host::HostRoot;

/// Where systemd looks for units, highest priority first.
pub const UNIT_DIRS: [&str; 3] = [
    "/etc/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
];
const K3S_BINARIES: [&str; 3] = ["/usr/local/bin/k3s", "/opt/bin/k3s", "/usr/bin/k3s"];
const BIN_DIRS: [&str; 4] = ["/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin"];
pub const DOCKER_DAEMON_JSON: &str = "/etc/docker/daemon.json";
pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
const K3S_TEMPLATE_DIR: &str = "/var/lib/rancher/k3s/agent/etc/containerd";
/// k3s uses `config-v3.toml.tmpl` first, then `config.toml.tmpl` (reference §3.1).
const K3S_TEMPLATES: [(&str, i64); 2] = [("config-v3.toml.tmpl", 3), ("config.toml.tmpl", 2)];

/// A k3s release number such as `v1.29.3+k3s1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct K3sVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl K3sVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        K3sVersion {
            major,
            minor,
            patch,
        }
    }

    /// Parses `v1.29.3+k3s1`, `1.29.3`, `v1.29.3-rc1+k3s1`.
    pub fn parse(s: &str) -> Option<K3sVersion> {
        let s = s.trim().trim_start_matches('v');
        let core = s.split(['+', '-']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
        let v = K3sVersion::new(parts.next()??, parts.next()??, parts.next()??);
        if parts.next().is_some() {
            return None;
        }
        Some(v)
    }

    /// `default-runtime` exists from v1.29.0 (backports to 1.25–1.28 are unverified, so
    /// they are not relied on).
    pub fn has_default_runtime(self) -> bool {
        self >= K3sVersion::new(1, 29, 0)
    }

    /// `{{ template "base" . }}` exists from the September 2023 releases.
    pub fn has_base_template(self) -> bool {
        let first_patch = match (self.major, self.minor) {
            (1, 24) => 17,
            (1, 25) => 13,
            (1, 26) => 8,
            (1, 27) => 5,
            (1, 28) => 1,
            (1, m) if m > 28 => 0,
            _ => return false,
        };
        self.patch >= first_patch
    }

    /// k3s ships containerd 2.0 (config version 3) from v1.31.6 / v1.32.2.
    fn uses_containerd2(self) -> bool {
        match (self.major, self.minor) {
            (1, 31) => self.patch >= 6,
            (1, 32) => self.patch >= 2,
            (1, m) => m > 32,
            _ => false,
        }
    }
}

impl fmt::Display for K3sVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Server or agent, from the unit's subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Agent,
}

#[derive(Debug, Clone)]
pub struct K3sUnit {
    pub host_path: String,
    pub name: String,
    pub role: Role,
    pub uses_docker: bool,
    /// `Requires=`/`After=containerd.service`: meta-virtualization's layout, where the
    /// system containerd serves k3s.
    pub wants_system_containerd: bool,
    /// One `ExecStart=` line (meta-virtualization) rather than the installer's layout.
    pub single_line: bool,
    /// The file whose `ExecStart=` systemd uses: the unit, or a drop-in overriding it.
    pub exec_file: String,
    pub binary: String,
}

#[derive(Debug, Default)]
pub struct Inventory {
    pub k3s_binary: Option<String>,
    pub k3s_version: Option<(K3sVersion, String)>,
    pub k3s_units: Vec<K3sUnit>,
    pub k3s_docker_setting: Option<k3s_yaml::Setting>,
    /// Existing k3s templates, in k3s's order of preference: (path, config version).
    pub k3s_templates: Vec<(String, i64)>,
    pub docker: Option<String>,
    pub system_containerd: Option<String>,
    pub k3s_server_dir: bool,
}

fn find_unit(host: &HostRoot, name: &str) -> Option<String> {
    UNIT_DIRS
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| host.exists(p))
}

/// Drop-ins of unit `name` (`<dir>/<name>.d/*.conf`) in the order systemd applies them:
/// by file name, a name in a higher-priority directory hiding the same name below it.
fn drop_ins(host: &HostRoot, name: &str) -> Result<Vec<String>> {
    let mut by_name: std::collections::BTreeMap<String, String> = Default::default();
    for dir in UNIT_DIRS.iter().rev() {
        for path in host.list_dir(&format!("{dir}/{name}.d"), ".conf")? {
            let file = path.rsplit('/').next().unwrap_or_default().to_string();
            by_name.insert(file, path);
        }
    }
    Ok(by_name.into_values().collect())
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
        for name in ["k3s.service", "k3s-agent.service"] {
            let Some(path) = find_unit(host, name) else {
                continue;
            };
            let text = host.read(&path)?.unwrap_or_default();
            if text.trim().is_empty() {
                // Masked (linked to /dev/null) or empty: systemd will not start it.
                continue;
            }
            let unit_file = UnitFile::parse(&host.resolve(&path)?, &text)?;
            // A drop-in that sets ExecStart= replaces the unit's: edit the file that wins.
            let mut exec_file = path.clone();
            let mut exec_unit = unit_file.clone();
            for drop_in in drop_ins(host, name)? {
                let text = host.read(&drop_in)?.unwrap_or_default();
                let parsed = UnitFile::parse(&host.resolve(&drop_in)?, &text)?;
                if parsed
                    .values("Service", "ExecStart")
                    .any(|v| !v.trim().is_empty())
                {
                    exec_file = drop_in;
                    exec_unit = parsed;
                }
            }
            let words = exec_unit.exec_start_words()?;
            let role = match unit::k3s_subcommand(&words).map(|i| words[i].text.as_str()) {
                Some("agent") => Role::Agent,
                _ => Role::Server,
            };
            let deps: Vec<&str> = ["Requires", "After", "BindsTo", "Wants"]
                .iter()
                .flat_map(|k| unit_file.values("Unit", k))
                .collect();
            inv.k3s_units.push(K3sUnit {
                host_path: path,
                name: name.to_string(),
                role,
                uses_docker: unit::k3s_uses_docker(&words),
                wants_system_containerd: deps
                    .iter()
                    .any(|d| d.split_whitespace().any(|u| u == "containerd.service")),
                single_line: exec_unit.exec_start()?.line_count() == 1,
                exec_file,
                binary: words.first().map(|w| w.text.clone()).unwrap_or_default(),
            });
        }
        inv.k3s_binary = inv
            .k3s_units
            .iter()
            .map(|u| u.binary.clone())
            .chain(K3S_BINARIES.iter().map(|s| s.to_string()))
            .find(|p| p.starts_with('/') && host.exists(p));
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
        inv.k3s_docker_setting =
            k3s_yaml::effective(host, "docker", None)?.filter(|s| s.value == "true");
        for (name, version) in K3S_TEMPLATES {
            let path = format!("{K3S_TEMPLATE_DIR}/{name}");
            if host.exists(&path) {
                inv.k3s_templates.push((path, version));
            }
        }
        inv.docker = [DOCKER_DAEMON_JSON.to_string()]
            .into_iter()
            .find(|p| host.exists(p))
            .or_else(|| find_binary(host, "dockerd"))
            .or_else(|| find_unit(host, "docker.service"));
        inv.system_containerd = [CONTAINERD_CONFIG.to_string()]
            .into_iter()
            .find(|p| host.exists(p))
            .or_else(|| find_binary(host, "containerd"))
            .or_else(|| find_unit(host, "containerd.service"));
        inv.k3s_server_dir = host.exists("/var/lib/rancher/k3s/server");
        Ok(inv)
    }

    pub fn has_k3s(&self) -> bool {
        self.k3s_binary.is_some() || !self.k3s_units.is_empty()
    }

    pub fn k3s_uses_docker(&self) -> bool {
        self.k3s_units.iter().any(|u| u.uses_docker) || self.k3s_docker_setting.is_some()
    }

    /// A k3s server runs here (its auto-deploy manifests folder is read on this node).
    pub fn is_k3s_server(&self) -> bool {
        self.k3s_units.iter().any(|u| u.role == Role::Server)
            || (self.k3s_units.is_empty() && self.k3s_server_dir)
    }

    fn version(&self) -> Option<K3sVersion> {
        self.k3s_version.as_ref().map(|(v, _)| *v)
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
        for u in &self.k3s_units {
            let from = if u.exec_file != u.host_path {
                format!(", ExecStart from {}", u.exec_file)
            } else {
                String::new()
            };
            out.push(format!(
                "{} ({} {}, {} layout{}{}{from})",
                u.host_path,
                "k3s",
                if u.role == Role::Server {
                    "server"
                } else {
                    "agent"
                },
                if u.single_line {
                    "single-line ExecStart"
                } else {
                    "installer"
                },
                if u.uses_docker {
                    ", runs with --docker"
                } else {
                    ""
                },
                if u.wants_system_containerd {
                    ", requires containerd.service"
                } else {
                    ""
                },
            ));
        }
        if let Some(s) = &self.k3s_docker_setting {
            out.push(format!("docker: true in {}", s.file));
        }
        for (t, v) in &self.k3s_templates {
            out.push(format!("k3s containerd template {t} (config version {v})"));
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

/// Reads the k3s release number embedded in the binary (`v1.29.3+k3s1`), scanning it in
/// blocks so a 70 MB binary never sits in memory at once.
fn version_from_binary(host: &HostRoot, bin: &str) -> Result<Option<K3sVersion>> {
    const MARK: &[u8] = b"+k3s";
    const OVERLAP: usize = 32;
    let path = host.resolve(bin)?;
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(_) => return Ok(None),
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut keep = 0;
    loop {
        let n = file
            .read(&mut buf[keep..])
            .map_err(|e| SetupError::io(format!("reading {}", path.display()), e))?;
        let filled = keep + n;
        let window = &buf[..filled];
        let mut from = 0;
        while let Some(pos) = window[from..].windows(MARK.len()).position(|w| w == MARK) {
            let at = from + pos;
            if let Some(v) = version_before(&window[..at]) {
                return Ok(Some(v));
            }
            from = at + 1;
        }
        if n == 0 {
            return Ok(None);
        }
        keep = filled.min(OVERLAP);
        buf.copy_within(filled - keep..filled, 0);
    }
}

/// `v1.2.3` ending exactly at the end of `bytes`.
fn version_before(bytes: &[u8]) -> Option<K3sVersion> {
    let start = bytes.len().saturating_sub(20);
    let tail = &bytes[start..];
    let v = tail.iter().rposition(|&b| b == b'v')?;
    let candidate = std::str::from_utf8(&tail[v + 1..]).ok()?;
    if !candidate.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    K3sVersion::parse(candidate)
}

/// The three ways of wiring the runtime in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    K3sDefaultRuntime,
    Containerd(ContainerdTarget),
    Docker,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerdTarget {
    /// `/etc/containerd/config.toml` of the system containerd.
    System,
    /// A k3s template (existing or to be created) and the config version it renders.
    K3sTemplate { path: String, version: i64 },
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::K3sDefaultRuntime => "k3s-default-runtime",
            Mode::Containerd(_) => "containerd",
            Mode::Docker => "docker",
        }
    }
}

/// The mode and the reasons for it.
#[derive(Debug, Clone)]
pub struct Choice {
    pub mode: Mode,
    pub findings: Vec<String>,
    pub reason: String,
}

/// What `--mode` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModeRequest {
    /// Pick from what is installed (explained in the output).
    Auto,
    /// k3s config.yaml.d drop-in `default-runtime` (k3s ≥ v1.29.0) plus a RuntimeClass.
    K3sDefaultRuntime,
    /// containerd TOML: the system config.toml, or k3s's config*.toml.tmpl.
    Containerd,
    /// `--docker` in the k3s units and docker's daemon.json.
    Docker,
}

fn containerd_target(inv: &Inventory) -> Result<(ContainerdTarget, String)> {
    let uses_system = inv.k3s_units.iter().any(|u| u.wants_system_containerd);
    if !inv.has_k3s() || uses_system {
        let why = if uses_system {
            "the k3s unit requires containerd.service (meta-virtualization layout), so the system containerd serves k3s: editing /etc/containerd/config.toml"
        } else {
            "no k3s: editing the system containerd's /etc/containerd/config.toml"
        };
        return Ok((ContainerdTarget::System, why.into()));
    }
    if let Some((path, version)) = inv.k3s_templates.first() {
        return Ok((
            ContainerdTarget::K3sTemplate {
                path: path.clone(),
                version: *version,
            },
            format!("k3s renders its containerd config from the existing template {path}; editing it (never the generated config.toml)"),
        ));
    }
    let v3 = inv.version().map_or(true, |v| v.uses_containerd2());
    let (name, version) = if v3 {
        K3S_TEMPLATES[0]
    } else {
        K3S_TEMPLATES[1]
    };
    let path = format!("{K3S_TEMPLATE_DIR}/{name}");
    Ok((
        ContainerdTarget::K3sTemplate { path: path.clone(), version },
        format!(
            "k3s {} uses config version {version}: a new template {path} starting from the base template",
            inv.version().map_or("(version unknown, assumed current)".to_string(), |v| v.to_string())
        ),
    ))
}

/// Picks the mode (or checks the requested one against the host).
pub fn choose(inv: &Inventory, request: ModeRequest) -> Result<Choice> {
    let findings = inv.findings();
    let (mode, reason) = match request {
        ModeRequest::Docker => (Mode::Docker, "--mode docker".to_string()),
        ModeRequest::Containerd => {
            let (target, why) = containerd_target(inv)?;
            (
                Mode::Containerd(target),
                format!("--mode containerd: {why}"),
            )
        }
        ModeRequest::K3sDefaultRuntime => {
            if !inv.has_k3s() {
                return Err(SetupError::Refused(
                    "--mode k3s-default-runtime: k3s is not installed under this root".into(),
                ));
            }
            (
                Mode::K3sDefaultRuntime,
                "--mode k3s-default-runtime".to_string(),
            )
        }
        ModeRequest::Auto => auto(inv)?,
    };
    Ok(Choice {
        mode,
        findings,
        reason,
    })
}

fn auto(inv: &Inventory) -> Result<(Mode, String)> {
    if inv.has_k3s() {
        if inv.k3s_uses_docker() {
            return Ok((
                Mode::Docker,
                "k3s runs with --docker, so docker's default runtime decides: docker mode".into(),
            ));
        }
        if inv.k3s_units.iter().any(|u| u.wants_system_containerd)
            && inv.system_containerd.is_some()
        {
            let (t, why) = containerd_target(inv)?;
            return Ok((Mode::Containerd(t), format!("containerd mode: {why}")));
        }
        if !inv.k3s_templates.is_empty() {
            let (t, why) = containerd_target(inv)?;
            return Ok((Mode::Containerd(t), format!("containerd mode: {why}")));
        }
        return Ok(match inv.version() {
            Some(v) if v.has_default_runtime() => (
                Mode::K3sDefaultRuntime,
                format!("k3s {v} detects the NVIDIA runtime itself and has the default-runtime setting (v1.29.0+): k3s-default-runtime mode, no unit or TOML edits"),
            ),
            Some(v) if inv.docker.is_some() => (
                Mode::Docker,
                format!("k3s {v} predates the default-runtime setting (v1.29.0) and docker is installed: docker mode (the Wind River procedure)"),
            ),
            Some(v) => {
                let (t, why) = containerd_target(inv)?;
                (Mode::Containerd(t), format!("k3s {v} predates the default-runtime setting (v1.29.0): containerd mode: {why}"))
            }
            None => (
                Mode::K3sDefaultRuntime,
                "k3s version unknown, assumed current (set --k3s-version or --mode to override): k3s-default-runtime mode".into(),
            ),
        });
    }
    if inv.docker.is_some() {
        return Ok((
            Mode::Docker,
            "no k3s; docker is installed: docker mode (daemon.json)".into(),
        ));
    }
    if inv.system_containerd.is_some() {
        return Ok((
            Mode::Containerd(ContainerdTarget::System),
            "no k3s; containerd is installed: containerd mode (/etc/containerd/config.toml)".into(),
        ));
    }
    Err(SetupError::Refused(
        "nothing to configure: no k3s, containerd or docker found under the root".into(),
    ))
}
