//! A systemd service as systemd loads it: the unit file found first on the unit search
//! path, plus its drop-ins, merged in systemd's order; its environment (`Environment=`,
//! then `EnvironmentFile=`, which wins); its `ExecStart=` with specifiers and `$VARS`
//! expanded. Rules from systemd.unit(5) ("Unit File Load Path", drop-ins) and
//! systemd.exec(5) (`Environment=`, `EnvironmentFile=`, command lines).

use std::collections::BTreeMap;
use std::path::Path;

use super::{Source, Sourced};
use crate::formats::unit::{exec_start_of, split_words, strip_exec_prefixes, Assignment, UnitFile};
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

/// Where systemd's system manager looks for units, highest priority first (the subset
/// that holds packaged and administrator units; `/lib` for split-usr systems).
pub const UNIT_DIRS: [&str; 5] = [
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
];

/// `$PATH` the system manager gives services that do not set one (systemd.exec(5)).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The unit file systemd loads for `name`: the first in [`UNIT_DIRS`] (a symlink there,
/// even to /dev/null, hides the ones below it).
pub fn find_unit_file(host: &HostRoot, name: &str) -> Option<String> {
    UNIT_DIRS
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| host.exists(p) || host.is_symlink(p))
}

/// One word of a command line and the file line it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    pub text: String,
    /// Host path and 1-based line.
    pub file: String,
    pub line: usize,
}

/// A loaded service unit.
#[derive(Debug, Clone)]
pub struct Unit {
    /// e.g. `k3s.service`.
    pub name: String,
    /// Host path of the unit file.
    pub path: String,
    /// The unit file first, then the drop-ins in the order systemd applies them.
    files: Vec<(String, UnitFile)>,
}

/// An environment variable's value and where it was set.
pub type Environment = BTreeMap<String, Sourced<String>>;

impl Unit {
    /// Loads `name` from the first unit directory that has it, with its drop-ins. `None`
    /// when there is no such unit or it is masked (linked to /dev/null or empty).
    pub fn load(host: &HostRoot, name: &str) -> Result<Option<Unit>> {
        let Some(path) = find_unit_file(host, name) else {
            return Ok(None);
        };
        let text = host.read(&path)?.unwrap_or_default();
        if text.trim().is_empty() {
            return Ok(None);
        }
        let mut files = vec![(path.clone(), UnitFile::parse(Path::new(&path), &text)?)];
        for drop_in in drop_ins(host, name)? {
            let text = host.read(&drop_in)?.unwrap_or_default();
            let parsed = UnitFile::parse(Path::new(&drop_in), &text)?;
            files.push((drop_in, parsed));
        }
        Ok(Some(Unit {
            name: name.to_string(),
            path,
            files,
        }))
    }

    /// Host paths of the unit file and its drop-ins, in the order they apply.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|(p, _)| p.as_str())
    }

    /// Every assignment of `section`/`key` across the files, in order.
    fn assignments<'a>(
        &'a self,
        section: &'a str,
        key: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a UnitFile, &'a Assignment)> + 'a {
        self.files.iter().flat_map(move |(path, unit)| {
            unit.assignments
                .iter()
                .filter(move |a| a.section == section && a.key == key)
                .map(move |a| (path.as_str(), unit, a))
        })
    }

    /// The values of a list setting (`Environment=`, `Requires=`, ...): assignments add
    /// up, an empty one clears what came before.
    pub fn list(&self, section: &str, key: &str) -> Vec<Sourced<String>> {
        let mut out = Vec::new();
        for (path, _, a) in self.assignments(section, key) {
            if a.value.trim().is_empty() {
                out.clear();
            } else {
                out.push(Sourced::new(
                    self.expand_specifiers(&a.value),
                    Source::file(path, a.line + 1),
                ));
            }
        }
        out
    }

    /// Units named in `Requires=`, `BindsTo=`, `Wants=` or `After=`.
    pub fn depends_on(&self, unit: &str) -> bool {
        ["Requires", "BindsTo", "Wants", "After"].iter().any(|k| {
            self.list("Unit", k)
                .iter()
                .any(|v| v.value.split_whitespace().any(|u| u == unit))
        })
    }

    /// The file holding the `ExecStart=` systemd runs, and that assignment. A service
    /// that is not `Type=oneshot` has exactly one.
    pub fn exec_start(&self) -> Result<(&str, &UnitFile, &Assignment)> {
        let found = self
            .assignments("Service", "ExecStart")
            .map(|(path, unit, a)| ((path, unit), a));
        match exec_start_of(found) {
            Ok(((path, unit), a)) => Ok((path, unit, a)),
            Err(None) => Err(SetupError::invalid(
                &self.path,
                "no ExecStart= in [Service] (unit and drop-ins)",
            )),
            Err(Some(((path, _), second))) => Err(SetupError::Malformed {
                file: path.into(),
                line: second.line + 1,
                column: 1,
                message: format!(
                    "a second ExecStart= for {} (a drop-in must reset it with an empty ExecStart= first)",
                    self.name
                ),
            }),
        }
    }

    /// `%n`, `%N`, `%p` and `%%` (systemd.unit(5) "Specifiers"); others are kept.
    fn expand_specifiers(&self, value: &str) -> String {
        let full = self.name.as_str();
        let stem = full.rsplit_once('.').map_or(full, |(s, _)| s);
        let prefix = stem.split_once('@').map_or(stem, |(p, _)| p);
        let mut out = String::with_capacity(value.len());
        let mut chars = value.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n') => out.push_str(full),
                Some('N') => out.push_str(stem),
                Some('p') => out.push_str(prefix),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        out
    }

    /// The service's environment: `Environment=` assignments, then the
    /// `EnvironmentFile=` files in order, whose values win (systemd.exec(5)).
    pub fn environment(&self, host: &HostRoot) -> Result<Environment> {
        let mut env = Environment::new();
        for v in self.list("Service", "Environment") {
            let Source::File { file, line } = &v.source else {
                continue;
            };
            let words = split_words(&v.value).map_err(|_| {
                SetupError::invalid(
                    format!("{file}:{line}"),
                    "unterminated quote in Environment=",
                )
            })?;
            for w in words {
                if let Some((k, val)) = w.text.split_once('=') {
                    env.insert(
                        k.to_string(),
                        Sourced::new(val.to_string(), v.source.clone()),
                    );
                }
            }
        }
        for v in self.list("Service", "EnvironmentFile") {
            for spec in v.value.split_whitespace() {
                let optional = spec.starts_with('-');
                let path = spec.trim_start_matches('-');
                let files = expand_glob(host, path)?;
                if files.is_empty() && !optional {
                    return Err(SetupError::Refused(format!(
                        "{}: EnvironmentFile={path} does not exist: systemd would not start {}",
                        v.source, self.name
                    )));
                }
                for file in files {
                    if let Some(text) = host.read(&file)? {
                        for (k, val, line) in parse_env_file(&text) {
                            env.insert(k, Sourced::new(val, Source::file(&file, line)));
                        }
                    }
                }
            }
        }
        Ok(env)
    }

    /// The words of the effective `ExecStart=`, with specifiers and `$VAR` / `${VAR}`
    /// expanded from `env`, each with the line that wrote it. The program's `-@:+!`
    /// prefixes are removed.
    pub fn command_line(&self, env: &Environment) -> Result<Vec<Arg>> {
        let (path, unit, exec) = self.exec_start()?;
        let value = self.expand_specifiers(&exec.value);
        let words = split_words(&value).map_err(|offset| {
            let (line, column) = unit.position(exec, offset);
            SetupError::Malformed {
                file: path.into(),
                line,
                column,
                message: "unterminated quote in ExecStart=".into(),
            }
        })?;
        let mut args = Vec::new();
        for w in words {
            let (line, _) = unit.position(exec, w.start.min(exec.value.len()));
            let here = |text: String| Arg {
                text,
                file: path.to_string(),
                line,
            };
            if let Some(name) = w.text.strip_prefix('$').filter(|n| is_var_name(n)) {
                // `$VAR` alone: the value split at whitespace, zero or more words.
                if let Some(v) = env.get(name) {
                    let (file, line) = match &v.source {
                        Source::File { file, line } => (file.clone(), *line),
                        _ => (path.to_string(), line),
                    };
                    args.extend(v.value.split_whitespace().map(|t| Arg {
                        text: t.to_string(),
                        file: file.clone(),
                        line,
                    }));
                }
                continue;
            }
            args.push(here(expand_braced(&w.text, env)));
        }
        if let Some(first) = args.first_mut() {
            first.text = strip_exec_prefixes(&first.text);
        }
        Ok(args)
    }
}

fn is_var_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// Replaces `${VAR}` inside a word (unset: empty) and `$$` by `$`.
fn expand_braced(word: &str, env: &Environment) -> String {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after
            .strip_prefix('{')
            .and_then(|a| a.split_once('}'))
            .filter(|(n, _)| is_var_name(n))
        {
            if let Some(v) = env.get(name) {
                out.push_str(&v.value);
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Host paths matching `pattern` (a `*` in the last component only); the path itself
/// when it has no wildcard and exists.
fn expand_glob(host: &HostRoot, pattern: &str) -> Result<Vec<String>> {
    let Some((dir, name)) = pattern.rsplit_once('/') else {
        return Ok(Vec::new());
    };
    if !name.contains('*') {
        return Ok(if host.exists(pattern) {
            vec![pattern.to_string()]
        } else {
            Vec::new()
        });
    }
    let (before, after) = name.split_once('*').unwrap_or((name, ""));
    Ok(host
        .list_dir(dir, "")?
        .into_iter()
        .filter(|p| {
            let n = p.rsplit('/').next().unwrap_or("");
            n.len() >= before.len() + after.len() && n.starts_with(before) && n.ends_with(after)
        })
        .collect())
}

/// `KEY=VALUE` lines of an environment file (systemd.exec(5) `EnvironmentFile=`):
/// `#`/`;` comments, optional single or double quotes around the value, a trailing
/// backslash continues the line. Returns (key, value, 1-based line).
pub fn parse_env_file(text: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, raw)) = lines.next() {
        let mut line = raw.trim().to_string();
        while line.ends_with('\\') {
            line.pop();
            match lines.next() {
                Some((_, more)) => line.push_str(more.trim()),
                None => break,
            }
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if !is_var_name(key) {
            continue;
        }
        let value = value.trim();
        let value = match split_words(value) {
            Ok(words) if value.starts_with(['"', '\'']) => words
                .into_iter()
                .map(|w| w.text)
                .collect::<Vec<_>>()
                .join(" "),
            _ => value.to_string(),
        };
        out.push((key.to_string(), value, i + 1));
    }
    out
}

/// Drop-ins of unit `name` in the order systemd applies them: every `*.conf` in
/// `<dir>/<name>.d/`, in the prefix directories of a dashed name (`k3s-.service.d/`)
/// and in the type directory (`service.d/`), sorted by file name; a file name in a
/// higher-priority directory hides the same name below it.
fn drop_ins(host: &HostRoot, name: &str) -> Result<Vec<String>> {
    let (stem, kind) = name.rsplit_once('.').unwrap_or((name, "service"));
    // Most specific first: `k3s-agent.service.d`, `k3s-.service.d`, `service.d`.
    let mut dir_names = vec![format!("{name}.d")];
    let mut prefix = stem;
    while let Some(i) = prefix.rfind('-') {
        prefix = &prefix[..i];
        dir_names.push(format!("{prefix}-.{kind}.d"));
    }
    dir_names.push(format!("{kind}.d"));
    let mut by_name: BTreeMap<String, String> = BTreeMap::new();
    for dir in UNIT_DIRS {
        for d in &dir_names {
            for path in host.list_dir(&format!("{dir}/{d}"), ".conf")? {
                let file = path.rsplit('/').next().unwrap_or_default().to_string();
                by_name.entry(file).or_insert(path);
            }
        }
    }
    Ok(by_name.into_values().collect())
}
