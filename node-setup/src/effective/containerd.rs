//! The system containerd's effective configuration: its config file (containerd's
//! `--config`/`-c` in containerd.service, else /etc/containerd/config.toml) and the files
//! it `imports` (globs, relative to the importing file's directory, loaded after it;
//! containerd services/server/config/config.go). Before containerd 2.1 an imported file's
//! plugin table replaces the same plugin's table read earlier, so the last file that has
//! the CRI plugin decides every CRI setting, the runtimes and the default included
//! (how each release merges them: `containerd_merge`).

use std::path::Path;

use super::engine::CONTAINERD;
use super::systemd::Unit;
use super::{Source, Sourced};
use crate::formats::containerd::{
    describe, describe_as, DefaultRuntime, Description, Flavor, Setting,
};
use edgegpu_host::error::Result;
use edgegpu_host::root::HostRoot;

/// One file containerd loads.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Host path.
    pub path: String,
    pub text: Option<String>,
    pub description: Description,
}

impl Loaded {
    /// When the file has the CRI plugin table: what a setting it leaves out comes from
    /// (its table replaces the earlier ones before containerd 2.1).
    fn replaces_cri(&self) -> Option<Source> {
        self.description.cri_table.map(|line| Source::Replaced {
            file: self.path.clone(),
            line,
        })
    }
}

#[derive(Debug, Clone)]
pub struct Containerd {
    /// The main config file and why that one.
    pub config: Sourced<String>,
    /// The main file, then the imported ones in load order.
    pub files: Vec<Loaded>,
}

impl Containerd {
    /// Reads the config of the system containerd as its unit runs it.
    pub fn load(host: &HostRoot) -> Result<Containerd> {
        let unit = Unit::load(host, CONTAINERD.unit())?;
        Containerd::read(host, unit.as_ref())
    }

    /// Reads the config of the system containerd (`unit`: containerd.service, for a
    /// `--config` flag).
    pub fn read(host: &HostRoot, unit: Option<&Unit>) -> Result<Containerd> {
        let mut config = Sourced::new(
            CONTAINERD.config.to_string(),
            Source::default(format!("containerd's default config {}", CONTAINERD.config)),
        );
        if let Some(u) = unit {
            let args = u.command_line(&u.environment(host)?)?;
            let mut words = args.iter().skip(1);
            while let Some(a) = words.next() {
                let value = match a.text.as_str() {
                    "--config" | "-c" => words.next().map(|v| v.text.clone()),
                    t => t.strip_prefix("--config=").map(String::from),
                };
                if let Some(v) = value {
                    config = Sourced::new(
                        v,
                        Source::Flag {
                            file: a.file.clone(),
                            line: a.line,
                            flag: "--config".into(),
                        },
                    );
                }
            }
        }
        Ok(Containerd {
            files: load_with_imports(host, &config.value, Flavor::System)?,
            config,
        })
    }

    /// The file whose CRI plugin table containerd uses: the last one that has it, else
    /// the main file.
    pub fn cri_owner(&self) -> &Loaded {
        self.files
            .iter()
            .rev()
            .find(|f| f.description.cri_table.is_some())
            .unwrap_or(&self.files[0])
    }
}

/// The default runtime and the binary of runtime `name` after loading `files` in order,
/// starting from `start` (what came before them; `None`: containerd's own defaults).
/// A file with the CRI plugin table decides both; one that leaves either unset counts as
/// resetting it, as containerd before 2.1 does (an imported plugin table replaces the
/// earlier one; 2.1 merges them, so this is the outcome to plan for).
pub fn effective_cri(
    files: &[Loaded],
    name: &str,
    start: Option<(Sourced<String>, Sourced<Option<String>>)>,
) -> (Sourced<String>, Sourced<Option<String>>) {
    let mut before_any = start.is_none();
    let (mut default, mut binary) = start.unwrap_or_else(|| {
        (
            Sourced::new(
                "runc".into(),
                Source::default("containerd's default (no file sets default_runtime_name)"),
            ),
            Sourced::new(
                None,
                Source::default(format!("no containerd file declares runtime '{name}'")),
            ),
        )
    });
    for f in files {
        let Some(replaced) = f.replaces_cri() else {
            continue;
        };
        default = match (&f.description.default, before_any) {
            (DefaultRuntime::Unset, false) => Sourced::new("runc".into(), replaced.clone()),
            _ => default_of(f),
        };
        binary = match (f.description.runtimes.get(name), before_any) {
            (Some(d), _) => Sourced::new(
                Some(d.binary.clone().unwrap_or_else(|| "(no BinaryName)".into())),
                Source::file(&f.path, d.line),
            ),
            (None, true) => Sourced::new(
                None,
                Source::default(format!("{} declares no runtime '{name}'", f.path)),
            ),
            (None, false) => Sourced::new(None, replaced),
        };
        before_any = false;
    }
    (default, binary)
}

/// CDI in the CRI plugin: whether it is on, and the directories it reads specs from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cdi {
    pub enabled: Sourced<bool>,
    pub spec_dirs: Sourced<Vec<String>>,
}

/// The spec directories containerd reads when `cdi_spec_dirs` is not set (1.7 and 2.x
/// alike: pkg/cri/config/config_unix.go, internal/cri/config/config_unix.go).
pub const DEFAULT_CDI_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

impl Cdi {
    /// containerd's own defaults: CDI is on from containerd 2.0 (`enable_cdi` defaults to
    /// true there, false in 1.7), reading [`DEFAULT_CDI_SPEC_DIRS`]. `why` says which
    /// containerd that is and how it is known.
    pub fn containerd_default(enabled: bool, why: &str) -> Cdi {
        Cdi {
            enabled: Sourced::new(enabled, Source::default(why.to_string())),
            spec_dirs: Sourced::new(
                DEFAULT_CDI_SPEC_DIRS.map(String::from).to_vec(),
                Source::default("containerd's default cdi_spec_dirs"),
            ),
        }
    }
}

/// CDI after loading `files` in order, starting from `start` (what came before them;
/// `None`: `defaults`). As for the runtimes, a file with the CRI plugin table decides:
/// a setting it leaves out is containerd's default again (before containerd 2.1 the
/// imported table replaces the earlier one).
pub fn effective_cdi(files: &[Loaded], start: Option<Cdi>, defaults: &Cdi) -> Cdi {
    let mut before_any = start.is_none();
    let mut cdi = start.unwrap_or_else(|| defaults.clone());
    for f in files {
        let Some(replaced) = f.replaces_cri() else {
            continue;
        };
        cdi.enabled = match &f.description.enable_cdi {
            Some(Setting::Literal { value, line }) => {
                Sourced::new(*value, Source::file(&f.path, *line))
            }
            // Only rendering can tell: counted as off, naming the line.
            Some(Setting::Unknown { line, .. }) => {
                Sourced::new(false, Source::file(&f.path, *line))
            }
            None if before_any => defaults.enabled.clone(),
            None => Sourced::new(defaults.enabled.value, replaced.clone()),
        };
        cdi.spec_dirs = match &f.description.cdi_spec_dirs {
            Some(Setting::Literal { value, line }) => {
                Sourced::new(value.clone(), Source::file(&f.path, *line))
            }
            Some(Setting::Unknown { line, .. }) => {
                Sourced::new(Vec::new(), Source::file(&f.path, *line))
            }
            None if before_any => defaults.spec_dirs.clone(),
            None => Sourced::new(defaults.spec_dirs.value.clone(), replaced),
        };
        before_any = false;
    }
    cdi
}

/// The default runtime one file decides (containerd's default `runc` when it says none).
fn default_of(f: &Loaded) -> Sourced<String> {
    match &f.description.default {
        DefaultRuntime::Literal { name, line } => {
            Sourced::new(name.clone(), Source::file(&f.path, *line))
        }
        DefaultRuntime::Unknown { line, text } => {
            Sourced::new(format!("(set by {text})"), Source::file(&f.path, *line))
        }
        DefaultRuntime::FromK3sSetting { line } => Sourced::new(
            "(k3s's default-runtime setting)".into(),
            Source::file(&f.path, *line),
        ),
        DefaultRuntime::Unset => Sourced::new(
            "runc".into(),
            Source::default(format!(
                "containerd's default (nothing sets default_runtime_name in {})",
                f.path
            )),
        ),
    }
}

/// Loads `main` and, breadth-first, the files it imports (each file once).
pub fn load_with_imports(host: &HostRoot, main: &str, flavor: Flavor) -> Result<Vec<Loaded>> {
    let mut files: Vec<Loaded> = Vec::new();
    let mut pending = vec![main.to_string()];
    while !pending.is_empty() {
        let path = pending.remove(0);
        if files.iter().any(|f| f.path == path) {
            continue;
        }
        let text = host.read(&path)?;
        let file_flavor = if files.is_empty() {
            flavor
        } else {
            Flavor::System
        };
        let description = describe(Path::new(&path), text.as_deref(), file_flavor)?;
        let dir = path.rsplit_once('/').map_or("/", |(d, _)| d).to_string();
        for pattern in &description.imports {
            let absolute = if pattern.starts_with('/') {
                pattern.clone()
            } else {
                format!("{dir}/{pattern}")
            };
            pending.extend(glob(host, &absolute)?);
        }
        files.push(Loaded {
            path,
            text,
            description,
        });
    }
    // An imported file without a `version` key is read with the merged config's version
    // (the main file's, unless an import's non-zero `version` says otherwise): its CRI
    // table is named for that version, not for version 1.
    let mut merged = files[0].description.version;
    for f in &files[1..] {
        if let Some(v) = f.description.version_key.filter(|v| *v != 0) {
            merged = v;
        }
    }
    for f in files.iter_mut().skip(1) {
        if f.description.version_key.is_none() && f.description.version != merged {
            f.description = describe_as(
                Path::new(&f.path),
                f.text.as_deref(),
                Flavor::System,
                Some(merged),
            )?;
        }
    }
    Ok(files)
}

/// Files matching `pattern` (wildcards `*` and `?` in the last component), sorted.
fn glob(host: &HostRoot, pattern: &str) -> Result<Vec<String>> {
    let (dir, name) = pattern.rsplit_once('/').unwrap_or(("", pattern));
    if !name.contains(['*', '?']) {
        return Ok(if host.exists(pattern) {
            vec![pattern.to_string()]
        } else {
            Vec::new()
        });
    }
    Ok(host
        .list_dir(dir, "")?
        .into_iter()
        .filter(|p| wildcard(name, p.rsplit('/').next().unwrap_or("")))
        .collect())
}

/// `*` and `?` matching of one file name.
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    fn go(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(&p, &n)
}
