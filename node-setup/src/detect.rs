//! What is installed under the root, and which mode `auto` picks from it — with the
//! reasons, so the operator can see why.

use std::fmt;
use std::io::Read;

use crate::effective::engine::{CONTAINERD, DOCKER, K3S};
use crate::effective::k3s::{K3s, Role};
use crate::effective::systemd::{find_unit_file, Unit};
use crate::effective::{Source, Sourced};
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

const K3S_BINARIES: [&str; 3] = ["/usr/local/bin/k3s", "/opt/bin/k3s", "/usr/bin/k3s"];
const BIN_DIRS: [&str; 4] = ["/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin"];
/// k3s renders its containerd config from `config-v3.toml.tmpl` if it exists, else
/// `config.toml.tmpl` (config versions 3 and 2), else from its built-in template
/// (k3s pkg/agent/containerd/config_linux.go).
pub const K3S_TEMPLATES: [(&str, i64); 2] = [("config-v3.toml.tmpl", 3), ("config.toml.tmpl", 2)];

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
    pub fn uses_containerd2(self) -> bool {
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

/// How one k3s service runs its containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum K3sEngine {
    /// `--docker`: cri-dockerd and docker, whose default runtime decides.
    Docker(Source),
    /// `--container-runtime-endpoint` to the system containerd's socket.
    SystemContainerd(Sourced<String>),
    /// `--container-runtime-endpoint` to a socket node-setup does not know.
    UnknownEndpoint(Sourced<String>),
    /// The unit requires containerd.service (meta-virtualization's layout, where the
    /// image's containerd serves k3s).
    RequiresContainerdService(String),
    /// k3s's own containerd, configured from its templates.
    Embedded,
}

impl K3sEngine {
    pub fn of(k: &K3s) -> K3sEngine {
        if let Some(d) = k.enabled("docker") {
            return K3sEngine::Docker(d.source);
        }
        if let Some(e) = k.setting(&["container-runtime-endpoint"]) {
            let socket = e.value.trim_start_matches("unix://");
            let system = [
                "/run/containerd/containerd.sock",
                "/var/run/containerd/containerd.sock",
            ];
            return if system.contains(&socket) {
                K3sEngine::SystemContainerd(e)
            } else {
                K3sEngine::UnknownEndpoint(e)
            };
        }
        if let Some(u) = &k.unit {
            if u.depends_on(CONTAINERD.unit()) {
                return K3sEngine::RequiresContainerdService(u.path.clone());
            }
        }
        K3sEngine::Embedded
    }
}

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

    fn host_has(&self, path: &str) -> bool {
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
            .map_err(|e| SetupError::unreadable(bin, e))?;
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
    /// The system containerd's config (with its imports).
    System,
    /// k3s's own containerd: its templates in the data dir.
    K3sTemplate,
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
    /// What the choice does beyond the runtime that the operator must know before
    /// applying it (auto moving k3s to another container engine), with what to pass
    /// instead.
    pub warnings: Vec<String>,
}

/// What `--mode` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModeRequest {
    /// Pick from what is installed (explained in the output).
    Auto,
    /// k3s config.yaml.d drop-in `default-runtime` (k3s >= v1.29.0) plus a RuntimeClass.
    K3sDefaultRuntime,
    /// containerd TOML: the system config.toml, or k3s's config*.toml.tmpl.
    Containerd,
    /// `--docker` in the k3s units and docker's daemon.json.
    Docker,
}

/// The engine every k3s service uses, or a refusal when they differ or one is unknown.
fn k3s_engine(inv: &Inventory) -> Result<Option<(K3sEngine, String)>> {
    let mut found: Option<(K3sEngine, String)> = None;
    for (k, engine) in inv.engines() {
        if let K3sEngine::UnknownEndpoint(e) = &engine {
            return Err(SetupError::Refused(format!(
                "{}: {} uses the CRI socket {} (container-runtime-endpoint), which is neither k3s's containerd nor the system containerd: node-setup cannot tell which runtime serves it. Configure that runtime by hand, or remove the setting",
                e.source,
                k.name(),
                e.value
            )));
        }
        let same_kind =
            |a: &K3sEngine, b: &K3sEngine| std::mem::discriminant(a) == std::mem::discriminant(b);
        match &found {
            // A run that was interrupted while adding --docker to the units: finish it.
            Some((K3sEngine::Docker(_), _)) if engine == K3sEngine::Embedded => {}
            Some((K3sEngine::Embedded, _)) if matches!(engine, K3sEngine::Docker(_)) => {
                found = Some((engine, k.name().to_string()));
            }
            Some((other, name)) if !same_kind(other, &engine) => {
                return Err(SetupError::Refused(format!(
                    "{name} and {} run containers differently ({other:?} / {engine:?}); configure them one at a time with --mode",
                    k.name()
                )));
            }
            Some(_) => {}
            None => found = Some((engine, k.name().to_string())),
        }
    }
    Ok(found)
}

/// Why k3s uses the system containerd, when it does.
fn uses_system_containerd(engine: &K3sEngine, unit: &str) -> Option<String> {
    match engine {
        K3sEngine::SystemContainerd(e) => Some(format!(
            "{unit} uses the system containerd's socket {} ({}): editing the system containerd's config",
            e.value, e.source
        )),
        K3sEngine::RequiresContainerdService(path) => Some(format!(
            "{path} requires containerd.service (meta-virtualization layout), so the system containerd serves k3s: editing the system containerd's config"
        )),
        _ => None,
    }
}

fn containerd_target(inv: &Inventory) -> Result<(ContainerdTarget, String)> {
    let Some((engine, unit)) = k3s_engine(inv)? else {
        return Ok((
            ContainerdTarget::System,
            "no k3s: editing the system containerd's config".into(),
        ));
    };
    if let K3sEngine::Docker(src) = &engine {
        return Err(SetupError::Refused(format!(
            "--mode containerd: {unit} runs with docker ({src}), so containerd's default runtime does not apply; use --mode docker (or remove the docker setting)"
        )));
    }
    if let Some(why) = uses_system_containerd(&engine, &unit) {
        return Ok((ContainerdTarget::System, why));
    }
    let mut why = format!(
        "{unit} runs its own containerd (no container-runtime-endpoint): editing its template (never the generated config.toml)"
    );
    if inv.system_containerd.is_some() {
        why.push_str(&format!(
            "; not editing {}: k3s does not use the system containerd",
            CONTAINERD.config
        ));
    }
    Ok((ContainerdTarget::K3sTemplate, why))
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
            match k3s_engine(inv)? {
                Some((K3sEngine::Docker(src), unit)) => {
                    return Err(SetupError::Refused(format!(
                        "--mode k3s-default-runtime: {unit} runs with docker ({src}); k3s's default-runtime only applies to its own containerd. Use --mode docker"
                    )))
                }
                Some((e, unit)) if uses_system_containerd(&e, &unit).is_some() => {
                    return Err(SetupError::Refused(format!(
                        "--mode k3s-default-runtime: {}; k3s's default-runtime does not apply to it. Use --mode containerd",
                        uses_system_containerd(&e, &unit).unwrap_or_default()
                    )))
                }
                _ => {}
            }
            (
                Mode::K3sDefaultRuntime,
                "--mode k3s-default-runtime".to_string(),
            )
        }
        ModeRequest::Auto => auto(inv)?,
    };
    let warnings = match (request, &mode) {
        (ModeRequest::Auto, Mode::Docker) => engine_switch(inv).into_iter().collect(),
        _ => Vec::new(),
    };
    Ok(Choice {
        mode,
        findings,
        reason,
        warnings,
    })
}

/// When auto's docker mode moves k3s services that run their own containerd to docker:
/// what that means and what to pass to keep containerd.
fn engine_switch(inv: &Inventory) -> Option<String> {
    let moved: Vec<String> = inv
        .engines()
        .into_iter()
        .filter(|(_, e)| *e == K3sEngine::Embedded)
        .map(|(k, _)| {
            k.unit
                .as_ref()
                .map_or("k3s".to_string(), |u| u.name.clone())
        })
        .collect();
    if moved.is_empty() {
        return None;
    }
    Some(format!(
        "auto moves {} from k3s's own containerd to docker: apply adds --docker to k3s, and after the restart its pods run under docker (images pulled into k3s's containerd are not in docker's image store). To keep k3s on containerd, pass --mode containerd --no-set-default (the runtime is registered, not made the default: pods ask for it with runtimeClassName), or upgrade k3s to v1.29.0 or later and run apply again (k3s-default-runtime mode)",
        moved.join(" and ")
    ))
}

fn auto(inv: &Inventory) -> Result<(Mode, String)> {
    if let Some((engine, unit)) = k3s_engine(inv)? {
        if let K3sEngine::Docker(src) = &engine {
            return Ok((
                Mode::Docker,
                format!("{unit} runs with docker ({src}), so docker's default runtime decides: docker mode"),
            ));
        }
        if let Some(why) = uses_system_containerd(&engine, &unit) {
            return Ok((
                Mode::Containerd(ContainerdTarget::System),
                format!("containerd mode: {why}"),
            ));
        }
        let template = inv.k3s.iter().find_map(|k| {
            K3S_TEMPLATES
                .iter()
                .map(|(n, _)| format!("{}/{n}", k.template_dir()))
                .find(|p| inv.host_has(p))
        });
        if let Some(path) = template {
            return Ok((
                Mode::Containerd(ContainerdTarget::K3sTemplate),
                format!("containerd mode: k3s renders its containerd config from the existing template {path}; editing it (never the generated config.toml)"),
            ));
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
            Some(v) => (
                Mode::Containerd(ContainerdTarget::K3sTemplate),
                format!("k3s {v} predates the default-runtime setting (v1.29.0): containerd mode on k3s's template"),
            ),
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
