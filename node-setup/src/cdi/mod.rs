//! `edgegpu-node-setup cdi generate`: a CDI spec (kind `nvidia.com/gpu`) for the GPUs of this
//! host, on every platform, without `nvidia-ctk` or `nvidia-smi` (which JetPack 5/6 lack).
//!
//! - Jetson ([`csv`]): the device nodes, libraries, directories and symlinks L4T's container
//!   CSV lists name, only those that exist; devices `0` and `all` (and the GPU's UUID on
//!   OpenRM Jetsons, whose driver publishes one), as `nvidia-ctk cdi generate --mode=csv`
//!   names them.
//! - NVIDIA driver hosts ([`driver`]): one device per GPU by index and by UUID, one per MIG
//!   device (`<gpu index>:gi<G>:ci<C>`), and `all`; the control nodes and the driver's
//!   libraries and programs for the running driver version.
//!
//! Hooks (`create-symlinks`, `update-ldcache`) only when a hook program is installed
//! (`nvidia-cdi-hook`, or `nvidia-ctk hook`); without one, symlinks are bind-mounted at their
//! own path instead. The spec claims the minimum `cdiVersion` its content needs
//! ([`spec::minimum_version`]); the output is deterministic and written atomically; a bad or
//! missing input is an error naming it, and then nothing is written.

pub mod csv;
pub mod driver;
pub mod spec;
mod yaml;

use std::io::Write;
use std::path::{Path, PathBuf};

use edgegpu_platform::host::{CONTAINER_CSV_DIR, DRIVER_LIB_DIRS, NV_TEGRA_RELEASE};

use crate::error::{exit_code, Result, SetupError};
use crate::fsops;
use crate::host::HostRoot;
use spec::{ContainerEdits, Device, DeviceNode, Hook, Mount, Spec};

/// Where runtimes look for generated specs (CDI `SPEC.md`: `/etc/cdi` for static ones,
/// `/var/run/cdi` for generated ones).
pub const DEFAULT_OUTPUT: &str = "/var/run/cdi/nvidia.yaml";

/// Hook programs, preferred first: (path, argv prefix).
const HOOK_PROGRAMS: [(&str, &[&str]); 2] = [
    ("/usr/bin/nvidia-cdi-hook", &["nvidia-cdi-hook"]),
    ("/usr/bin/nvidia-ctk", &["nvidia-ctk", "hook"]),
];

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// A generated spec and what went into it.
#[derive(Debug, Clone)]
pub struct Generated {
    pub spec: Spec,
    /// Where the content came from, in words.
    pub source: String,
    /// Entries named by the inputs that are not on this host.
    pub skipped: Vec<String>,
    /// The hook program used, if any.
    pub hook_program: Option<String>,
    pub notes: Vec<String>,
}

/// The CDI spec for the host under `root`.
pub fn generate(root: &HostRoot) -> Result<Generated> {
    let csv_files = csv::files(&root.path(CONTAINER_CSV_DIR))?;
    let gpus = driver::gpus(root)?;
    let hook = HOOK_PROGRAMS
        .iter()
        .find(|(path, _)| root.path(path).is_file());
    let mut edits = EditsBuilder::default();
    let mut skipped = Vec::new();
    let mut notes = Vec::new();
    let mut devices = Vec::new();
    let source;
    if !csv_files.is_empty() {
        // Jetson: the CSV lists.
        let mut entries = Vec::new();
        for file in &csv_files {
            let text = std::fs::read_to_string(file)
                .map_err(|e| SetupError::io(format!("reading {}", file.display()), e))?;
            entries.extend(csv::parse(file, &text)?);
        }
        for entry in &entries {
            let found = csv::expand(root, &entry.pattern);
            if found.is_empty() {
                skipped.push(entry.pattern.clone());
            }
            for path in found {
                edits.add_csv(root, entry.kind, &path, &mut skipped);
            }
        }
        // The runtime always mounts the L4T release file (nvidia-container-toolkit does).
        if root.path(NV_TEGRA_RELEASE).is_file() {
            edits.add_mount(Mount::bind(NV_TEGRA_RELEASE));
        }
        if edits.nodes.is_empty() {
            return Err(SetupError::Refused(format!(
                "none of the `dev` entries of {} exists under {}: no GPU device node to give containers",
                names(&csv_files),
                root.root().display()
            )));
        }
        let nodes = std::mem::take(&mut edits.nodes);
        let with = |name: &str| Device {
            name: name.to_string(),
            container_edits: ContainerEdits {
                device_nodes: nodes.clone(),
                ..Default::default()
            },
        };
        devices.push(with("0"));
        // OpenRM Jetsons (Thor) publish the iGPU's UUID in the driver's procfs.
        if let Some(uuid) = gpus.first().and_then(|g| g.info.uuid.clone()) {
            devices.push(with(&uuid));
        }
        devices.push(with("all"));
        source = format!(
            "L4T container CSV files in {CONTAINER_CSV_DIR}: {}",
            names(&csv_files)
        );
    } else if !gpus.is_empty() {
        // NVIDIA driver: procfs.
        for node in driver::CONTROL_NODES {
            if root.path(node).exists() {
                edits.add_node(node);
            }
        }
        if !edits.nodes.iter().any(|n| n.path == "/dev/nvidiactl") {
            return Err(SetupError::Refused(format!(
                "{} does not exist: the NVIDIA driver's control node is missing (is the driver loaded? nvidia-modprobe creates the nodes)",
                root.path("/dev/nvidiactl").display()
            )));
        }
        let mut all = Vec::new();
        for gpu in &gpus {
            let node = gpu.node();
            if !root.path(&node).exists() {
                return Err(SetupError::Refused(format!(
                    "{} does not exist for GPU {} ({}): create it (nvidia-modprobe -c {}) and generate again",
                    root.path(&node).display(),
                    gpu.index,
                    gpu.info.bus,
                    gpu.info.minor
                )));
            }
            let one = |name: String, paths: &[String]| Device {
                name,
                container_edits: ContainerEdits {
                    device_nodes: paths
                        .iter()
                        .map(|p| DeviceNode { path: p.clone() })
                        .collect(),
                    ..Default::default()
                },
            };
            devices.push(one(gpu.index.to_string(), std::slice::from_ref(&node)));
            if let Some(uuid) = &gpu.info.uuid {
                devices.push(one(uuid.clone(), std::slice::from_ref(&node)));
            }
            for mig in &gpu.migs {
                for caps in &mig.caps_nodes {
                    if !root.path(caps).exists() {
                        return Err(SetupError::Refused(format!(
                            "{} does not exist for MIG device gi{} ci{} of GPU {}: create it (nvidia-modprobe -f …) and generate again",
                            root.path(caps).display(),
                            mig.gpu_instance,
                            mig.compute_instance,
                            gpu.index
                        )));
                    }
                }
                let name = format!(
                    "{}:gi{}:ci{}",
                    gpu.index, mig.gpu_instance, mig.compute_instance
                );
                let paths = [
                    node.clone(),
                    mig.caps_nodes[0].clone(),
                    mig.caps_nodes[1].clone(),
                ];
                devices.push(one(name, &paths));
            }
            all.push(DeviceNode { path: node });
        }
        devices.push(Device {
            name: "all".into(),
            container_edits: ContainerEdits {
                device_nodes: all,
                ..Default::default()
            },
        });
        match driver::version(root) {
            Some(version) => edits.add_driver_files(root, &version, &mut notes),
            None => notes.push(format!(
                "{} is missing or unreadable: no driver libraries mounted",
                root.path(edgegpu_platform::procfs::VERSION).display()
            )),
        }
        source = format!(
            "the NVIDIA driver's procfs ({}, {} GPU(s))",
            edgegpu_platform::procfs::GPUS_DIR,
            gpus.len()
        );
    } else {
        return Err(SetupError::Refused(format!(
            "no NVIDIA GPU found under {}: neither L4T's container CSV files ({}) nor the NVIDIA driver's procfs ({}) exist",
            root.root().display(),
            root.path(CONTAINER_CSV_DIR).display(),
            root.path(edgegpu_platform::procfs::GPUS_DIR).display()
        )));
    }
    let spec = Spec::new(devices, edits.finish(hook));
    spec.validate()
        .map_err(|m| SetupError::Refused(format!("the generated spec is invalid: {m}")))?;
    Ok(Generated {
        spec,
        source,
        skipped,
        hook_program: hook.map(|(p, _)| p.to_string()),
        notes,
    })
}

fn names(files: &[PathBuf]) -> String {
    files
        .iter()
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The spec-level edits being collected: nodes (moved to the devices), mounts, symlinks and
/// library directories (for the hooks).
#[derive(Default)]
struct EditsBuilder {
    nodes: Vec<DeviceNode>,
    mounts: Vec<Mount>,
    /// `target::link` pairs for `create-symlinks`.
    links: Vec<String>,
    /// Directories of mounted libraries, for `update-ldcache`.
    lib_dirs: Vec<String>,
}

impl EditsBuilder {
    fn add_node(&mut self, path: &str) {
        if !self.nodes.iter().any(|n| n.path == path) {
            self.nodes.push(DeviceNode {
                path: path.to_string(),
            });
        }
    }

    fn add_mount(&mut self, mount: Mount) {
        if !self
            .mounts
            .iter()
            .any(|m| m.container_path == mount.container_path)
        {
            self.mounts.push(mount);
        }
    }

    fn add_lib(&mut self, path: &str) {
        self.add_mount(Mount::bind(path));
        let dir = parent(path);
        if !self.lib_dirs.contains(&dir) {
            self.lib_dirs.push(dir);
        }
    }

    /// A symlink on the host: its final target is mounted; the link is recreated by the
    /// hook, or (no hook program) bind-mounted at its own path.
    fn add_symlink(&mut self, root: &HostRoot, link: &str, skipped: &mut Vec<String>) {
        let Ok(target) = std::fs::read_link(root.path(link)) else {
            // Not a symlink after all (the CSV says `sym` for a plain file): mount it.
            self.add_lib(link);
            return;
        };
        let Some(resolved) = resolve_in_root(root, link) else {
            skipped.push(format!("{link} (dangling symlink)"));
            return;
        };
        if root.path(&resolved).is_dir() {
            self.add_mount(Mount::bind(&resolved));
        } else {
            self.add_lib(&resolved);
        }
        self.links
            .push(format!("{}::{link}", target.to_string_lossy()));
        self.mounts.retain(|m| m.container_path != link);
        self.mounts.push(Mount::bind_at(&resolved, link));
    }

    fn add_csv(&mut self, root: &HostRoot, kind: csv::Kind, path: &str, skipped: &mut Vec<String>) {
        let on_disk = root.path(path);
        match kind {
            csv::Kind::Dev if on_disk.is_dir() => {
                // Directories of device nodes (`/dev/dri/by-path`) hold links, not nodes.
                self.add_mount(Mount::bind(path));
            }
            csv::Kind::Dev => self.add_node(path),
            csv::Kind::Dir => self.add_mount(Mount::bind(path)),
            csv::Kind::Lib if on_disk.is_dir() => self.add_mount(Mount::bind(path)),
            csv::Kind::Lib => {
                if std::fs::symlink_metadata(&on_disk).is_ok_and(|m| m.file_type().is_symlink()) {
                    self.add_symlink(root, path, skipped);
                } else {
                    self.add_lib(path);
                }
            }
            csv::Kind::Sym => self.add_symlink(root, path, skipped),
        }
    }

    /// The driver's libraries (and their soname links), programs and firmware of `version`.
    fn add_driver_files(&mut self, root: &HostRoot, version: &str, notes: &mut Vec<String>) {
        let mut libs = 0;
        for dir in DRIVER_LIB_DIRS {
            for lib in driver::DRIVER_LIBS {
                let file = format!("{dir}/{lib}.so.{version}");
                if !root.path(&file).is_file() {
                    continue;
                }
                self.add_lib(&file);
                libs += 1;
                let soname = format!("{dir}/{lib}.so.1");
                if std::fs::symlink_metadata(root.path(&soname))
                    .is_ok_and(|m| m.file_type().is_symlink())
                {
                    let mut ignored = Vec::new();
                    self.add_symlink(root, &soname, &mut ignored);
                }
            }
        }
        if libs == 0 {
            notes.push(format!(
                "no driver library of version {version} found in {}",
                DRIVER_LIB_DIRS.join(", ")
            ));
        }
        for program in driver::DRIVER_BINARIES {
            if root.path(program).is_file() {
                self.add_mount(Mount::bind(program));
            }
        }
        let firmware = format!("/lib/firmware/nvidia/{version}");
        if root.path(&firmware).is_dir() {
            self.add_mount(Mount::bind(&firmware));
        }
    }

    fn finish(self, hook: Option<&(&str, &[&str])>) -> ContainerEdits {
        let mut hooks = Vec::new();
        let mut mounts = self.mounts;
        if let Some((path, prefix)) = hook {
            let make = |args: Vec<String>| Hook {
                hook_name: "createContainer".into(),
                path: path.to_string(),
                args: prefix.iter().map(|s| s.to_string()).chain(args).collect(),
            };
            if !self.links.is_empty() {
                // The hook makes the links; the link paths are not mounted then.
                let links: Vec<&str> = self
                    .links
                    .iter()
                    .map(|l| l.rsplit_once("::").map_or("", |(_, link)| link))
                    .collect();
                mounts.retain(|m| !links.contains(&m.container_path.as_str()));
                let mut args = vec!["create-symlinks".to_string()];
                for l in &self.links {
                    args.push("--link".into());
                    args.push(l.clone());
                }
                hooks.push(make(args));
            }
            if !self.lib_dirs.is_empty() {
                let mut args = vec!["update-ldcache".to_string()];
                for d in &self.lib_dirs {
                    args.push("--folder".into());
                    args.push(d.clone());
                }
                hooks.push(make(args));
            }
        }
        ContainerEdits {
            device_nodes: self.nodes,
            hooks,
            mounts,
            ..Default::default()
        }
    }
}

fn parent(path: &str) -> String {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/".into(),
        Some((dir, _)) => dir.into(),
    }
}

/// `host_path` with every symlink resolved inside `root` (an absolute target is taken
/// relative to the root, as on the booted system); `None` when it dangles or loops.
pub fn resolve_in_root(root: &HostRoot, host_path: &str) -> Option<String> {
    resolve(root, host_path, false)
}

/// [`resolve_in_root`] for a path that may not exist yet (a file to create): the existing part
/// is resolved, the rest appended as it is.
pub fn resolve_for_write(root: &HostRoot, host_path: &str) -> Option<String> {
    resolve(root, host_path, true)
}

fn resolve(root: &HostRoot, host_path: &str, missing_ok: bool) -> Option<String> {
    let mut resolved: Vec<String> = Vec::new();
    let mut pending: Vec<String> = host_path
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(str::to_string)
        .collect();
    let mut hops = 0;
    while let Some(component) = pending.pop() {
        match component.as_str() {
            "." => continue,
            ".." => {
                resolved.pop();
                continue;
            }
            _ => {}
        }
        resolved.push(component);
        let current = format!("/{}", resolved.join("/"));
        let meta = match std::fs::symlink_metadata(root.path(&current)) {
            Ok(m) => m,
            Err(_) if missing_ok => {
                resolved.extend(pending.drain(..).rev());
                break;
            }
            Err(_) => return None,
        };
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return None;
            }
            let target = std::fs::read_link(root.path(&current)).ok()?;
            resolved.pop();
            let target = target.to_string_lossy().into_owned();
            if target.starts_with('/') {
                resolved.clear();
            }
            pending.extend(
                target
                    .split('/')
                    .filter(|c| !c.is_empty())
                    .rev()
                    .map(str::to_string),
            );
        }
    }
    Some(format!("/{}", resolved.join("/")))
}

/// `cdi generate`: writes the spec to `output` (a path on this machine; default
/// [`DEFAULT_OUTPUT`] under `--root`; `-` for standard output) and says what it wrote.
pub fn run(
    root: &HostRoot,
    output: Option<&Path>,
    format: Option<Format>,
    out: &mut dyn Write,
) -> Result<u8> {
    let generated = generate(root)?;
    let format = format.unwrap_or_else(|| match output {
        Some(p) if p.extension().is_some_and(|e| e == "json") => Format::Json,
        _ => Format::Yaml,
    });
    let text = match format {
        Format::Yaml => generated.spec.to_yaml(),
        Format::Json => generated.spec.to_json(),
    };
    if output == Some(Path::new("-")) {
        let _ = out.write_all(text.as_bytes());
        return Ok(exit_code::OK);
    }
    let target = match output {
        Some(p) => p.to_path_buf(),
        None => {
            // `/var/run` is a link to `/run` on most systems: follow it inside the root (an
            // image's absolute link must not lead to this machine's `/run`).
            let host = resolve_for_write(root, DEFAULT_OUTPUT).ok_or_else(|| {
                SetupError::Refused(format!(
                    "{DEFAULT_OUTPUT} under {} is a symlink loop",
                    root.root().display()
                ))
            })?;
            root.path(&host)
        }
    };
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        fsops::create_dirs(dir)
            .map_err(|e| SetupError::io(format!("creating {}", dir.display()), e))?;
    }
    let unchanged = std::fs::read(&target).is_ok_and(|old| old == text.as_bytes());
    if !unchanged {
        fsops::atomic_write(&target, text.as_bytes(), 0o644)
            .map_err(|e| SetupError::io(format!("writing {}", target.display()), e))?;
    }
    let spec = &generated.spec;
    let _ = writeln!(
        out,
        "{} {} (cdiVersion {}, kind {})",
        if unchanged { "unchanged:" } else { "wrote" },
        target.display(),
        spec.cdi_version,
        spec.kind
    );
    let _ = writeln!(out, "  source: {}", generated.source);
    let _ = writeln!(out, "  devices: {}", spec.device_names().join(", "));
    let nodes: usize = spec
        .devices
        .iter()
        .map(|d| d.container_edits.device_nodes.len())
        .max()
        .unwrap_or(0)
        + spec.container_edits.device_nodes.len();
    let _ = writeln!(
        out,
        "  device nodes: {nodes}, mounts: {}, hooks: {} ({})",
        spec.container_edits.mounts.len(),
        spec.container_edits.hooks.len(),
        generated
            .hook_program
            .as_deref()
            .unwrap_or("no nvidia-cdi-hook or nvidia-ctk: symlinks are bind-mounted")
    );
    if !generated.skipped.is_empty() {
        let _ = writeln!(
            out,
            "  skipped (not on this host): {} entr{}: {}",
            generated.skipped.len(),
            if generated.skipped.len() == 1 {
                "y"
            } else {
                "ies"
            },
            generated.skipped.join(", ")
        );
    }
    for note in &generated.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    Ok(exit_code::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        std::fs::create_dir_all(dir.path().join("var")).unwrap();
        // An image's absolute link: inside the root it means <root>/run.
        std::os::unix::fs::symlink("/run", dir.path().join("var/run")).unwrap();
        assert_eq!(resolve_in_root(&root, "/var/run").as_deref(), Some("/run"));
        assert_eq!(resolve_in_root(&root, "/var/run/cdi"), None);
        assert_eq!(
            resolve_for_write(&root, "/var/run/cdi/nvidia.yaml").as_deref(),
            Some("/run/cdi/nvidia.yaml")
        );
        std::os::unix::fs::symlink("../lib/x", dir.path().join("run/link")).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib/x"), "").unwrap();
        assert_eq!(
            resolve_in_root(&root, "/var/run/link").as_deref(),
            Some("/lib/x")
        );
        std::os::unix::fs::symlink("loop", dir.path().join("run/loop")).unwrap();
        assert_eq!(resolve_in_root(&root, "/run/loop"), None);
    }
}
