//! dockerd's effective settings: the flags of docker.service's `ExecStart=` (after its
//! drop-ins and `$DOCKER_OPTS`-style variables; Debian's unit passes `$DOCKER_OPTS` from
//! /etc/default/docker) and the daemon.json they point at (`--config-file`, else
//! /etc/docker/daemon.json). A flag and the same setting in daemon.json stop dockerd
//! (moby daemon/config: "specified both as a flag and in the configuration file").

use super::systemd::{Arg, Unit};
use super::{Source, Sourced};
use crate::error::Result;
use crate::host::HostRoot;

pub const DEFAULT_DAEMON_JSON: &str = "/etc/docker/daemon.json";

#[derive(Debug, Clone)]
pub struct Docker {
    /// The daemon.json dockerd reads and why that one.
    pub daemon_json: Sourced<String>,
    /// `--default-runtime`.
    pub default_flag: Option<Sourced<String>>,
    /// `--add-runtime name=path` flags.
    pub runtime_flags: Vec<Sourced<(String, String)>>,
    /// The name (without `--`) of every long flag on the command line: a daemon.json key
    /// of the same name stops dockerd.
    pub flags: Vec<Sourced<String>>,
}

impl Docker {
    pub fn read(host: &HostRoot, unit: Option<&Unit>) -> Result<Docker> {
        let args = match unit {
            Some(u) => u.command_line(&u.environment(host)?)?,
            None => Vec::new(),
        };
        let mut docker = Docker {
            daemon_json: Sourced::new(
                DEFAULT_DAEMON_JSON.into(),
                Source::default(format!("dockerd's default {DEFAULT_DAEMON_JSON}")),
            ),
            default_flag: None,
            runtime_flags: Vec::new(),
            flags: Vec::new(),
        };
        let mut words = args.iter().skip(1);
        while let Some(a) = words.next() {
            let (name, inline) = match a.text.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (a.text.as_str(), None),
            };
            if let Some(long) = name.strip_prefix("--").filter(|n| !n.is_empty()) {
                docker
                    .flags
                    .push(Sourced::new(long.to_string(), flag_source(a, name)));
            }
            if !matches!(
                name,
                "--config-file" | "--default-runtime" | "--add-runtime"
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

fn flag_source(a: &Arg, flag: &str) -> Source {
    Source::Flag {
        file: a.file.clone(),
        line: a.line,
        flag: flag.to_string(),
    }
}
