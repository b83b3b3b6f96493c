//! dockerd's effective settings: the flags of docker.service's `ExecStart=` (after its
//! drop-ins and `$DOCKER_OPTS`-style variables; Debian's unit passes `$DOCKER_OPTS` from
//! /etc/default/docker) and the daemon.json they point at (`--config-file`, else
//! /etc/docker/daemon.json). A flag and the same setting in daemon.json stop dockerd
//! (moby daemon/config: "specified both as a flag and in the configuration file").

use super::engine::DOCKER;
use super::systemd::{Arg, Unit};
use super::{Source, Sourced};
use crate::formats::daemon_json::DaemonJson;
use edgegpu_host::error::Result;
use edgegpu_host::root::HostRoot;

/// Flags whose daemon.json key has another name (moby cmd/dockerd/config.go,
/// config_unix.go, options.go: their values are `NamedOption`s, and dockerd compares the
/// option's name with the file's keys). Every other long flag is its own key.
const NAMED_OPTIONS: [(&str, &str); 16] = [
    ("add-runtime", "runtimes"),
    ("authorization-plugin", "authorization-plugins"),
    ("cdi-spec-dir", "cdi-spec-dirs"),
    ("default-network-opt", "default-network-opts"),
    ("default-ulimit", "default-ulimits"),
    ("dns-opt", "dns-opts"),
    ("exec-opt", "exec-opts"),
    ("feature", "features"),
    ("host", "hosts"),
    ("host-gateway-ip", "host-gateway-ips"),
    ("insecure-registry", "insecure-registries"),
    ("label", "labels"),
    ("log-opt", "log-opts"),
    ("node-generic-resource", "node-generic-resources"),
    ("registry-mirror", "registry-mirrors"),
    ("storage-opt", "storage-opts"),
];

/// The daemon.json key a flag sets.
fn config_key(flag: &str) -> &str {
    NAMED_OPTIONS
        .iter()
        .find(|(f, _)| *f == flag)
        .map_or(flag, |(_, key)| key)
}

#[derive(Debug, Clone)]
pub struct Docker {
    /// The daemon.json dockerd reads and why that one.
    pub daemon_json: Sourced<String>,
    /// `--default-runtime`.
    pub default_flag: Option<Sourced<String>>,
    /// `--add-runtime name=path` flags.
    pub runtime_flags: Vec<Sourced<(String, String)>>,
    /// The daemon.json key of every long flag on the command line (the flag's name
    /// without `--`, or its option name, `--feature` → `features`): the same key in
    /// daemon.json stops dockerd.
    pub flags: Vec<Sourced<String>>,
    /// `--feature NAME[=BOOL]` values (Docker 28.0+), in order.
    pub feature_flags: Vec<Sourced<String>>,
    /// `--cdi-spec-dir DIR` values (Docker 25+), in order.
    pub cdi_spec_dir_flags: Vec<Sourced<String>>,
}

impl Docker {
    /// Reads dockerd's settings as its unit runs it.
    pub fn load(host: &HostRoot) -> Result<Docker> {
        let unit = Unit::load(host, DOCKER.unit())?;
        Docker::read(host, unit.as_ref())
    }

    /// Reads dockerd's settings from `unit` (docker.service) and its daemon.json.
    pub fn read(host: &HostRoot, unit: Option<&Unit>) -> Result<Docker> {
        let args = match unit {
            Some(u) => u.command_line(&u.environment(host)?)?,
            None => Vec::new(),
        };
        let mut docker = Docker {
            daemon_json: Sourced::new(
                DOCKER.config.into(),
                Source::default(format!("dockerd's default {}", DOCKER.config)),
            ),
            default_flag: None,
            runtime_flags: Vec::new(),
            flags: Vec::new(),
            feature_flags: Vec::new(),
            cdi_spec_dir_flags: Vec::new(),
        };
        let mut words = args.iter().skip(1);
        while let Some(a) = words.next() {
            let (name, inline) = match a.text.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (a.text.as_str(), None),
            };
            if let Some(long) = name.strip_prefix("--").filter(|n| !n.is_empty()) {
                docker.flags.push(Sourced::new(
                    config_key(long).to_string(),
                    flag_source(a, name),
                ));
            }
            if !matches!(
                name,
                "--config-file"
                    | "--default-runtime"
                    | "--add-runtime"
                    | "--feature"
                    | "--cdi-spec-dir"
            ) {
                continue;
            }
            let Some(value) = inline.or_else(|| words.next().map(|w| w.text.clone())) else {
                continue;
            };
            let source = flag_source(a, name);
            match name {
                "--config-file" => docker.daemon_json = Sourced::new(value, source),
                "--default-runtime" => docker.default_flag = Some(Sourced::new(value, source)),
                "--feature" => docker.feature_flags.push(Sourced::new(value, source)),
                "--cdi-spec-dir" => docker.cdi_spec_dir_flags.push(Sourced::new(value, source)),
                _ => {
                    if let Some((n, p)) = value.split_once('=') {
                        docker
                            .runtime_flags
                            .push(Sourced::new((n.to_string(), p.to_string()), source));
                    }
                }
            }
        }
        Ok(docker)
    }
}

impl Docker {
    /// What the `--feature` flags say about feature `name` (the last one wins; `NAME`
    /// alone is true, `NAME=BOOL` is Go's strconv.ParseBool: moby internal/opts SetOpts).
    pub fn feature_flag(&self, name: &str) -> Option<Sourced<bool>> {
        self.feature_flags.iter().rev().find_map(|f| {
            let (key, value) = match f.value.split_once('=') {
                Some((k, v)) => (k, matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")),
                None => (f.value.as_str(), true),
            };
            (key == name).then(|| Sourced::new(value, f.source.clone()))
        })
    }
}

/// The 1-based line of daemon.json `text` where `"key"` first appears (0: nowhere).
pub fn json_line(text: Option<&str>, key: &str) -> usize {
    let needle = format!("\"{key}\"");
    text.and_then(|t| t.lines().position(|l| l.contains(&needle)))
        .map_or(0, |i| i + 1)
}

/// Settings given both as a dockerd flag and in daemon.json (`text`, parsed as `json`):
/// dockerd refuses to start then, equal values included (moby daemon/config,
/// findConfigurationConflicts; `runtimes` merge since 19.03).
pub fn conflicts(d: &Docker, json: &DaemonJson, text: Option<&str>) -> Vec<String> {
    let path = &d.daemon_json.value;
    d.flags
        .iter()
        .filter(|f| f.value != "runtimes" && json.root.contains_key(&f.value))
        .map(|f| {
            format!(
                "{} and {path}:{}: dockerd would not start: '{}' is given both as a flag and in the configuration file. Remove one of them",
                f.source,
                json_line(text, &f.value),
                f.value
            )
        })
        .collect()
}

fn flag_source(a: &Arg, flag: &str) -> Source {
    Source::Flag {
        file: a.file.clone(),
        line: a.line,
        flag: flag.to_string(),
    }
}
