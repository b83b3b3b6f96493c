//! What each engine does about CDI, as it will load its configuration: whether CDI is
//! on and which spec directories it reads, each with what decides it (a flag, a file and
//! line, or the release's default), and why the engines would not inject the GPUs from
//! the spec `cdi generate` writes. Also which specs of ours are there to inject.

use std::path::Path;

use serde::Serialize;

use super::containerd::{
    effective_cdi, load_with_imports, Cdi, Containerd, Loaded, DEFAULT_CDI_SPEC_DIRS,
};
use super::docker::{self, Docker};
use super::engine::{CONTAINERD, DOCKER, K3S};
use super::inventory::Inventory;
use super::k3s::K3s;
use super::k3s_template;
use super::packages::{self, Installed};
use super::runtime::k3s_not_on_docker;
use super::{Source, Sourced};
use crate::formats::containerd::Flavor;
use crate::formats::daemon_json::DaemonJson;
use crate::mode::{ContainerdTarget, Mode};
use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

/// Where CDI runtimes look for specs by default (the CDI library's DefaultSpecDirs, used
/// by containerd and dockerd alike); `check` looks for ours there.
pub const DEFAULT_SPEC_DIRS: [&str; 2] = DEFAULT_CDI_SPEC_DIRS;

/// The directory `cdi generate` writes to: every engine must read it.
pub fn spec_dir() -> &'static str {
    edgegpu_host::cdi::DEFAULT_OUTPUT
        .rsplit_once('/')
        .map_or("/", |(dir, _)| dir)
}

/// What one engine does about CDI, and where that is decided.
#[derive(Debug, Clone, Serialize)]
pub struct EffectiveCdi {
    /// e.g. "k3s containerd (k3s.service)", "system containerd", "docker".
    pub engine: String,
    pub enabled: Sourced<bool>,
    pub spec_dirs: Sourced<Vec<String>>,
    /// Settings that stop the engine from starting at all, naming them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

/// The CDI specs of kind `nvidia.com/gpu` in the default spec directories.
#[derive(Debug, Clone, Serialize)]
pub struct Specs {
    /// Directories looked in.
    pub dirs: Vec<String>,
    /// Host paths of the specs found.
    pub found: Vec<String>,
}

impl Specs {
    /// Looks in [`DEFAULT_SPEC_DIRS`] for `.yaml`/`.yml`/`.json` files (what the CDI
    /// library loads) whose `kind` is `nvidia.com/gpu`. A file that does not parse is
    /// not counted (the runtimes skip it too).
    pub fn find(host: &HostRoot) -> Result<Specs> {
        let mut found = Vec::new();
        for dir in DEFAULT_SPEC_DIRS {
            for f in host.list_dir(dir, "")? {
                let is_spec = [".yaml", ".yml", ".json"].iter().any(|e| f.ends_with(e));
                if !is_spec || host.is_dir(&f) {
                    continue;
                }
                let Ok(Some(text)) = host.read(&f) else {
                    continue;
                };
                let kind = if f.ends_with(".json") {
                    serde_json::from_str::<serde_json::Value>(&text)
                        .ok()
                        .and_then(|v| v["kind"].as_str().map(String::from))
                } else {
                    yaml_rust2::YamlLoader::load_from_str(&text)
                        .ok()
                        .and_then(|docs| {
                            docs.first()
                                .and_then(|d| d["kind"].as_str().map(String::from))
                        })
                };
                if kind.as_deref() == Some(edgegpu_host::cdi::spec::KIND) {
                    found.push(f);
                }
            }
        }
        Ok(Specs {
            dirs: DEFAULT_SPEC_DIRS.map(String::from).to_vec(),
            found,
        })
    }
}

/// Whether `dirs` has `dir`, as written or through the host's symlinks (`/var/run` is
/// usually a link to `/run`).
pub fn has_dir(host: &HostRoot, dirs: &[String], dir: &str) -> bool {
    let norm = |d: &str| d.trim_end_matches('/').to_string();
    let resolved = |d: &str| host.resolve_full(d).ok().map(|r| r.host_path);
    dirs.iter()
        .any(|d| norm(d) == norm(dir) || (resolved(d).is_some() && resolved(d) == resolved(dir)))
}

/// What to change when `source` decides against CDI (`change`: the edit that would do,
/// e.g. "set it to true").
fn fix(source: &Source, change: &str) -> String {
    match source {
        Source::Flag { .. } => {
            format!("a command-line flag beats every config file; remove the flag or {change}")
        }
        Source::File { .. } => format!(
            "that file decides after (or instead of) what node-setup writes; {change} (or remove that setting)"
        ),
        Source::Replaced { .. } => format!(
            "containerd before 2.0 replaces the whole CRI plugin table with the one of the file it imports last, so what came before it is lost; {change} in that file too, or remove its CRI plugin table"
        ),
        Source::Default { .. } => "node-setup cannot set it here".to_string(),
    }
}

/// The installed docker, from the package status files.
pub fn docker_release(host: &HostRoot) -> Result<Option<Installed>> {
    packages::installed(host, DOCKER.packages)
}

/// One state of the host (as it is, or with the planned files written): what each
/// engine does about CDI.
pub struct View<'a> {
    pub host: &'a HostRoot,
    pub inv: &'a Inventory,
}

impl View<'_> {
    /// What each engine of `mode` does about CDI.
    pub fn engines(&self, mode: &Mode) -> Result<Vec<EffectiveCdi>> {
        match mode {
            Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => {
                k3s_template::services(self.inv)
                    .into_iter()
                    .map(|k| self.k3s(k))
                    .collect()
            }
            Mode::Containerd(ContainerdTarget::System) => {
                let c = Containerd::load(self.host)?;
                let cdi = effective_cdi(&c.files, None, &self.system_defaults(&c)?);
                Ok(vec![EffectiveCdi {
                    engine: CONTAINERD.name.into(),
                    enabled: cdi.enabled,
                    spec_dirs: cdi.spec_dirs,
                    conflicts: Vec::new(),
                }])
            }
            Mode::Docker => {
                let d = Docker::load(self.host)?;
                let path = &d.daemon_json.value;
                let text = self.host.read(path)?;
                let json = DaemonJson::parse(Path::new(path), text.as_deref().unwrap_or(""))?;
                let release = docker_release(self.host)?;
                let cdi = self.docker_cdi(&d, &json, text.as_deref(), release.as_ref())?;
                Ok(vec![EffectiveCdi {
                    engine: DOCKER.name.into(),
                    enabled: cdi.enabled,
                    spec_dirs: cdi.spec_dirs,
                    conflicts: docker::conflicts(&d, &json, text.as_deref()),
                }])
            }
        }
    }

    /// CDI as k3s's containerd has it when nothing sets it: k3s's containerd release
    /// decides (the version unknown: assumed current, as everywhere else).
    pub fn k3s_defaults(&self) -> Cdi {
        match self.inv.version() {
            Some(v) if !v.uses_containerd2() => Cdi::containerd_default(
                false,
                &format!("k3s {v} ships containerd 1.x (containerd 2 from v1.31.6 / v1.32.2), whose enable_cdi defaults to false"),
            ),
            Some(v) => Cdi::containerd_default(
                true,
                &format!("k3s {v} ships containerd 2, whose enable_cdi defaults to true"),
            ),
            None => Cdi::containerd_default(
                true,
                "k3s version unknown, assumed current (containerd 2, whose enable_cdi defaults to true; set --k3s-version to override)",
            ),
        }
    }

    /// CDI as the system containerd has it when nothing sets it, from its release (the
    /// package status under the root), else from the generation its binary holds, else
    /// from its config: only containerd 2 reads config version 3. containerd before 1.7
    /// has no CDI: refused.
    pub fn system_defaults(&self, c: &Containerd) -> Result<Cdi> {
        let installed = packages::installed(self.host, CONTAINERD.packages)?;
        // Without a package status, the generation its binary holds.
        let binary = installed
            .is_none()
            .then(|| super::embedded::containerd_generation(self.host))
            .flatten();
        if let Some(g) = binary {
            let on = g.major >= 2;
            return Ok(Cdi::containerd_default(
                on,
                &format!(
                    "containerd {}.x ({}; no dpkg or opkg status under the root lists containerd): enable_cdi defaults to {on} (true from containerd 2.0)",
                    g.major, g.signal
                ),
            ));
        }
        Ok(match installed {
            Some(i) if i.release < CONTAINERD.cdi.added => {
                return Err(SetupError::Refused(format!(
                    "{} has no CDI support (enable_cdi came with containerd 1.7). Upgrade containerd, or apply without --cdi (the NVIDIA runtime)",
                    i.describe()
                )))
            }
            Some(i) => {
                let on = i.release >= CONTAINERD.cdi.on_by_default;
                Cdi::containerd_default(
                    on,
                    &format!(
                        "{}: enable_cdi defaults to {on} (true from containerd 2.0)",
                        i.describe()
                    ),
                )
            }
            None if c.files[0].description.version >= 3 => Cdi::containerd_default(
                true,
                &format!(
                    "containerd 2's default (only containerd 2 reads config version 3, as {} is): enable_cdi defaults to true",
                    c.config.value
                ),
            ),
            None => Cdi::containerd_default(
                false,
                "containerd 1.7's default, enable_cdi = false (containerd's version is not known: no dpkg or opkg status under the root lists it)",
            ),
        })
    }

    fn k3s(&self, k: &K3s) -> Result<EffectiveCdi> {
        let t = k3s_template::template(self.host, self.inv, k)?;
        let defaults = self.k3s_defaults();
        let flavor = Flavor::K3sTemplate { version: t.version };
        let (files, uses_base) = match &t.text {
            None => (Vec::new(), true),
            Some(text) => {
                let files = load_with_imports(self.host, &t.path, flavor)?;
                let base = files[0].description.base_line.is_some() || text.trim().is_empty();
                (files, base)
            }
        };
        let mut cdi = if uses_base {
            defaults.clone()
        } else {
            effective_cdi(&files[..1], None, &defaults)
        };
        let mut imported: Vec<Loaded> = files.into_iter().skip(1).collect();
        k3s_template::add_drop_ins(self.host, &t, uses_base, &mut imported)?;
        cdi = effective_cdi(&imported, Some(cdi), &defaults);
        Ok(EffectiveCdi {
            engine: K3S.name_for(k.name()),
            enabled: cdi.enabled,
            spec_dirs: cdi.spec_dirs,
            conflicts: Vec::new(),
        })
    }

    /// dockerd's CDI: a `--feature cdi[=BOOL]` flag, else `features.cdi` in daemon.json,
    /// else on from Docker 28.2; spec dirs from `--cdi-spec-dir` flags, else
    /// `cdi-spec-dirs`, else the CDI library's defaults (moby cmd/dockerd/daemon.go).
    pub fn docker_cdi(
        &self,
        d: &Docker,
        json: &DaemonJson,
        text: Option<&str>,
        release: Option<&Installed>,
    ) -> Result<Cdi> {
        let path = &d.daemon_json.value;
        let file = Path::new(path);
        let enabled = match (d.feature_flag("cdi"), json.feature(file, "cdi")?) {
            (Some(flag), _) => flag,
            (None, Some(v)) => Sourced::new(v, Source::file(path, docker::json_line(text, "features"))),
            (None, None) => match release {
                Some(r) if r.release >= DOCKER.cdi.on_by_default => Sourced::new(
                    true,
                    Source::default(format!(
                        "dockerd's default from Docker 28.2 ({}; no features.cdi in {path})",
                        r.describe()
                    )),
                ),
                _ => Sourced::new(
                    false,
                    Source::default(format!(
                        "dockerd's default before Docker 28.2 (no features.cdi in {path} or its flags)"
                    )),
                ),
            },
        };
        let spec_dirs = match (d.cdi_spec_dir_flags.first(), json.cdi_spec_dirs(file)?) {
            (Some(first), _) => Sourced::new(
                d.cdi_spec_dir_flags
                    .iter()
                    .map(|f| f.value.clone())
                    .collect(),
                first.source.clone(),
            ),
            (None, Some(dirs)) => Sourced::new(
                dirs,
                Source::file(path, docker::json_line(text, "cdi-spec-dirs")),
            ),
            (None, None) => Sourced::new(
                DEFAULT_SPEC_DIRS.map(String::from).to_vec(),
                Source::default(format!(
                    "dockerd's default (no cdi-spec-dirs in {path} or its flags)"
                )),
            ),
        };
        Ok(Cdi { enabled, spec_dirs })
    }

    /// Why the engines of `mode` would not inject GPUs from our CDI spec, each naming
    /// what decides it and what to change; empty when they would.
    pub fn problems(&self, mode: &Mode) -> Result<Vec<String>> {
        let dir = spec_dir();
        let mut out = Vec::new();
        for e in self.engines(mode)? {
            out.extend(e.conflicts.iter().cloned());
            if !e.enabled.value {
                out.push(format!(
                    "{}: {} would not have CDI enabled: {}",
                    e.enabled.source,
                    e.engine,
                    fix(&e.enabled.source, "set it to true")
                ));
            }
            if !has_dir(self.host, &e.spec_dirs.value, dir) {
                out.push(format!(
                    "{}: {} would not read CDI specs from {dir} (its spec dirs: {}): {}",
                    e.spec_dirs.source,
                    e.engine,
                    e.spec_dirs.value.join(", "),
                    fix(&e.spec_dirs.source, &format!("add {dir} to it"))
                ));
            }
        }
        if *mode == Mode::Docker {
            out.extend(k3s_not_on_docker(self.inv));
        }
        Ok(out)
    }
}
