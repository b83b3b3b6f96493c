//! k3s's effective settings for one k3s service, the way k3s computes them
//! (k3s pkg/configfilearg/parser.go, pkg/cli/cmds): the config file is `$K3S_CONFIG_FILE`
//! if set, else the first `--config`/`-c` on the command line, else
//! `/etc/rancher/k3s/config.yaml`; that file (if it exists) and then
//! `<file>.d/*.yaml|*.yml` in name order are applied, a later value replacing an earlier
//! one and `key+:` appending; the resulting flags are inserted before the command line's
//! own, so a flag on the command line beats every config file, and any flag beats the
//! flag's environment variable (`K3S_DATA_DIR` for `--data-dir`).

use std::path::Path;

use super::engine::{CONTAINERD, K3S};
use super::systemd::{Arg, Environment, Unit, DEFAULT_PATH};
use super::{Source, Sourced};
use crate::formats::k3s_yaml::{self, Entry};
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

pub const DEFAULT_DATA_DIR: &str = "/var/lib/rancher/k3s";
/// Where k3s's containerd sockets and templates live, below the data dir.
pub const TEMPLATE_SUBDIR: &str = "agent/etc/containerd";
/// k3s renders its containerd config from `config-v3.toml.tmpl` if it exists, else
/// `config.toml.tmpl` (config versions 3 and 2), else from its built-in template
/// (k3s pkg/agent/containerd/config_linux.go).
pub const K3S_TEMPLATES: [(&str, i64); 2] = [("config-v3.toml.tmpl", 3), ("config.toml.tmpl", 2)];

/// Server or agent, from the unit's subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Agent,
}

/// Flags read as booleans: given without `=value` they mean true, and they never take
/// the next word as their value (Go's flag package).
const BOOL_FLAGS: [&str; 1] = ["docker"];

/// The settings node-setup reads; a value of another shape under one of these keys
/// stops it (k3s ignores config keys that are no flag of its, so other keys do not).
const READ_KEYS: [&str; 5] = [
    "default-runtime",
    "docker",
    "container-runtime-endpoint",
    "data-dir",
    "d",
];

/// The settings of one k3s service.
#[derive(Debug, Clone)]
pub struct K3s {
    /// The systemd unit, when k3s runs from one.
    pub unit: Option<Unit>,
    pub role: Role,
    /// The program ExecStart= runs.
    pub binary: Option<String>,
    pub env: Environment,
    /// Command-line words after the subcommand.
    args: Vec<Arg>,
    /// The config file k3s reads and why that one.
    pub config_file: Sourced<String>,
    /// Entries of every config file read, in k3s's order, with their file.
    entries: Vec<(String, Entry)>,
}

impl K3s {
    /// Reads the settings of k3s started by `unit` (or, without a unit, from the config
    /// files alone).
    pub fn read(host: &HostRoot, unit: Option<Unit>) -> Result<K3s> {
        let (env, words) = match &unit {
            Some(u) => {
                let env = u.environment(host)?;
                let words = u.command_line(&env)?;
                (env, words)
            }
            None => (Environment::new(), Vec::new()),
        };
        let binary = words.first().map(|w| w.text.clone());
        let sub = words
            .iter()
            .position(|w| w.text == "server" || w.text == "agent");
        let role = match sub.map(|i| words[i].text.as_str()) {
            Some("agent") => Role::Agent,
            _ => Role::Server,
        };
        let args = sub.map_or(Vec::new(), |i| words[i + 1..].to_vec());
        let config_file = match env.get("K3S_CONFIG_FILE").filter(|v| !v.value.is_empty()) {
            Some(v) => v.clone(),
            None => config_flag(words.get(1..).unwrap_or_default()).unwrap_or_else(|| {
                Sourced::new(
                    K3S.config.into(),
                    Source::default(format!("k3s's default config file {}", K3S.config)),
                )
            }),
        };
        if config_file.value.contains("://") {
            return Err(SetupError::Refused(format!(
                "{}: k3s reads its config from {}; node-setup only reads local files",
                config_file.source, config_file.value
            )));
        }
        let mut k3s = K3s {
            unit,
            role,
            binary,
            env,
            args,
            config_file,
            entries: Vec::new(),
        };
        for file in k3s.config_files(host)? {
            let text = host.read(&file)?.unwrap_or_default();
            for e in k3s_yaml::parse(Path::new(&file), &text)? {
                if let (Some((line, what)), true) =
                    (e.unsupported, READ_KEYS.contains(&e.key.as_str()))
                {
                    return Err(SetupError::Malformed {
                        file: file.into(),
                        line,
                        column: 1,
                        message: format!("{what} as the value of {}: k3s takes a string", e.key),
                    });
                }
                k3s.entries.push((file.clone(), e));
            }
        }
        Ok(k3s)
    }

    /// The config files k3s reads, in order: the file itself, then its drop-ins.
    pub fn config_files(&self, host: &HostRoot) -> Result<Vec<String>> {
        let mut files = Vec::new();
        if host.exists(&self.config_file.value) {
            files.push(self.config_file.value.clone());
        }
        files.extend(
            host.list_dir(&self.drop_in_dir(), "")?
                .into_iter()
                .filter(|f| {
                    let lower = f.to_ascii_lowercase();
                    (lower.ends_with(".yaml") || lower.ends_with(".yml")) && !host.is_dir(f)
                }),
        );
        Ok(files)
    }

    /// `<config file>.d`: where a drop-in of ours must go to be read.
    pub fn drop_in_dir(&self) -> String {
        format!("{}.d", self.config_file.value)
    }

    /// The effective value of a string flag (any of `names`, e.g. `data-dir` and `d`):
    /// the command line, else the config files in k3s's order (a repeated flag keeps its
    /// last value, appended or not).
    pub fn setting(&self, names: &[&str]) -> Option<Sourced<String>> {
        let from_files = self
            .entries
            .iter()
            .rev()
            .filter(|(_, e)| names.contains(&e.key.as_str()))
            .find_map(|(file, e)| {
                let v = e.values.last()?;
                Some(Sourced::new(v.clone(), Source::file(file, e.line)))
            });
        flag_value(&self.args, names).or(from_files)
    }

    /// A boolean flag: `Some(true)` when set to a true value.
    pub fn enabled(&self, name: &str) -> Option<Sourced<bool>> {
        self.setting(&[name])
            .map(|s| Sourced::new(parse_bool(&s.value), s.source))
            .filter(|s| s.value)
    }

    /// `--data-dir` / `-d`, else `$K3S_DATA_DIR`, else k3s's default.
    pub fn data_dir(&self) -> Sourced<String> {
        self.setting(&["data-dir", "d"])
            .or_else(|| {
                self.env
                    .get("K3S_DATA_DIR")
                    .filter(|v| !v.value.is_empty())
                    .cloned()
            })
            .unwrap_or_else(|| {
                Sourced::new(
                    DEFAULT_DATA_DIR.into(),
                    Source::default(format!("k3s's default data dir {DEFAULT_DATA_DIR}")),
                )
            })
    }

    /// Directory of k3s's containerd templates.
    pub fn template_dir(&self) -> String {
        format!(
            "{}/{TEMPLATE_SUBDIR}",
            self.data_dir().value.trim_end_matches('/')
        )
    }

    /// The `$PATH` k3s looks up runtime binaries in (its service's, else systemd's).
    pub fn path(&self) -> Sourced<String> {
        self.env.get("PATH").cloned().unwrap_or_else(|| {
            Sourced::new(
                DEFAULT_PATH.into(),
                Source::default("systemd's default PATH for services".to_string()),
            )
        })
    }

    /// A short name for messages: the unit, or "k3s".
    pub fn name(&self) -> &str {
        self.unit.as_ref().map_or("k3s", |u| u.name.as_str())
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

/// Go's strconv.ParseBool, which k3s's flag parser uses (config-file values arrive as
/// yaml.v2 gives them: see [`k3s_yaml`]).
fn parse_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// The config file named on the command line: the first `--config` / `-c` (with the
/// value after `=` or as the next word), as k3s's configfilearg finds it before any
/// flag parsing (so `-config` and `--c` do not count there).
fn config_flag(words: &[Arg]) -> Option<Sourced<String>> {
    words.iter().enumerate().find_map(|(i, a)| {
        let (flag, value) = ["--config", "-c"].iter().find_map(|f| {
            if a.text == *f {
                Some((*f, words.get(i + 1)?.text.clone()))
            } else {
                Some((*f, a.text.strip_prefix(f)?.strip_prefix('=')?.to_string()))
            }
        })?;
        Some(Sourced::new(
            value,
            Source::Flag {
                file: a.file.clone(),
                line: a.line,
                flag: flag.to_string(),
            },
        ))
    })
}

/// The last value of flag `names` on a command line: `--name=v`, `--name v`, `-name v`
/// (Go's flag package accepts one or two dashes); a bool flag alone means true.
fn flag_value(args: &[Arg], names: &[&str]) -> Option<Sourced<String>> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let at = &args[i];
        i += 1;
        let word = at.text.as_str();
        let Some(flag) = word.strip_prefix("--").or_else(|| word.strip_prefix('-')) else {
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        if !names.contains(&name) {
            continue;
        }
        let value = match inline {
            Some(v) => Some(v),
            None if BOOL_FLAGS.contains(&name) => Some("true".into()),
            None => {
                let v = args.get(i).map(|a| a.text.clone());
                i += 1;
                v
            }
        };
        if let Some(value) = value {
            found = Some(Sourced::new(
                value,
                Source::Flag {
                    file: at.file.clone(),
                    line: at.line,
                    flag: word.split('=').next().unwrap_or(word).to_string(),
                },
            ));
        }
    }
    found
}
