//! `edgegpu-node-setup cdi generate`: a CDI spec (kind `nvidia.com/gpu`) for the GPUs of this
//! host, on every platform, without `nvidia-ctk` or `nvidia-smi` (which JetPack 4/5 lack).
//!
//! - Jetson ([`jetson`]): the device nodes, libraries, directories and symlinks L4T's
//!   container CSV lists name, only those that exist; devices `0` and `all` (and the GPU's
//!   UUID and MIG devices on OpenRM Jetsons, whose driver publishes them; discrete GPUs next
//!   to the Jetson as `1`, `2`, …), as `nvidia-ctk cdi generate --mode=csv` names them.
//! - NVIDIA driver hosts ([`driver`]): one device per GPU by index and by UUID, one per MIG
//!   device (`<gpu index>:gi<G>:ci<C>`), and `all`; the control nodes and the driver's
//!   libraries and programs for the running driver version.
//!
//! Hooks (`create-symlinks`, `update-ldcache`) only when a hook program is installed
//! (`nvidia-cdi-hook`, or `nvidia-ctk hook`); without one, symlinks are bind-mounted at their
//! own path instead ([`edits`]). The spec claims the minimum `cdiVersion` its content needs
//! ([`spec::minimum_version`]); the output is deterministic and written atomically; a bad or
//! missing input is an error naming it, and then nothing is written.
//!
//! On a Jetson with DLA cores or PVA instances, their specs (kinds `nvidia.com/dla` and
//! `nvidia.com/pva`, [`engines`]) are written beside the GPU's, one file per kind; not with
//! `--output -`, which prints the GPU's spec only.

pub mod csv;
pub mod driver;
pub mod edits;
pub mod engines;
pub mod jetson;
pub mod spec;
mod yaml;

use std::io::Write;
use std::path::{Path, PathBuf};

use edgegpu_platform::host::CONTAINER_CSV_DIR;
use edgegpu_platform::procfs::GPUS_DIR;

use crate::error::{exit_code, Result, SetupError};
use crate::fsops;
use crate::root::HostRoot;
use edits::EditsBuilder;
use spec::Spec;

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
    /// What makes the spec less useful than it should be (a required node missing).
    pub warnings: Vec<String>,
    /// On a Jetson: the DLA and PVA specs (one per kind the host has, [`engines`]); each
    /// kind listed, `None` where the host has none of it (its file is removed).
    pub engines: Vec<(edgegpu_platform::engines::EngineKind, Option<Spec>)>,
}

/// The CDI spec for the host under `root`.
pub fn generate(root: &HostRoot) -> Result<Generated> {
    let csv_files = csv::files(&root.path(CONTAINER_CSV_DIR))?;
    let procfs = driver::gpus(root)?;
    let hook = HOOK_PROGRAMS
        .iter()
        .find(|(path, _)| root.path(path).is_file());
    let mut edits = EditsBuilder::default();
    let mut skipped = Vec::new();
    let mut notes = Vec::new();
    let mut warnings = Vec::new();
    if !procfs.excluded.is_empty() {
        notes.push(format!(
            "GPU(s) {} excluded by the driver (GPU Excluded: Yes): not in the spec, no index",
            procfs.excluded.join(", ")
        ));
    }
    let (devices, source) = if !csv_files.is_empty() {
        let devices = jetson::devices(
            root,
            &csv_files,
            &procfs,
            &mut edits,
            &mut skipped,
            &mut warnings,
        )?;
        let mut source = format!(
            "L4T container CSV files in {CONTAINER_CSV_DIR}: {}",
            csv::names(&csv_files)
        );
        if !procfs.gpus.is_empty() {
            source.push_str(&format!(
                "; the NVIDIA driver's procfs ({GPUS_DIR}, {} GPU(s))",
                procfs.gpus.len()
            ));
        }
        (devices, source)
    } else if !procfs.gpus.is_empty() {
        let devices = driver::devices(root, &procfs, &mut edits, &mut notes)?;
        let source = format!(
            "the NVIDIA driver's procfs ({GPUS_DIR}, {} GPU(s))",
            procfs.gpus.len()
        );
        (devices, source)
    } else {
        return Err(SetupError::Refused(format!(
            "no NVIDIA GPU found under {}: neither L4T's container CSV files ({}) nor the NVIDIA driver's procfs ({}) exist{}",
            root.root().display(),
            root.path(CONTAINER_CSV_DIR).display(),
            root.path(GPUS_DIR).display(),
            if procfs.excluded.is_empty() { "" } else { " (every GPU there is excluded)" }
        )));
    };
    let spec = Spec::new(devices, edits.finish(hook));
    spec.validate()
        .map_err(|m| SetupError::Refused(format!("the generated spec is invalid: {m}")))?;
    let mut engine_specs = Vec::new();
    if !csv_files.is_empty() {
        for kind in edgegpu_platform::engines::EngineKind::ALL {
            let engine_spec = engines::spec(root, kind);
            if let Some(s) = &engine_spec {
                s.validate().map_err(|m| {
                    SetupError::Refused(format!("the generated {} spec is invalid: {m}", s.kind))
                })?;
            }
            engine_specs.push((kind, engine_spec));
        }
    }
    Ok(Generated {
        spec,
        source,
        skipped,
        hook_program: hook.map(|(p, _)| p.to_string()),
        notes,
        warnings,
        engines: engine_specs,
    })
}

/// The temporary files earlier runs left next to `target` (`.<name>.edgegpu-tmp.<pid>`,
/// see fsops::atomic_write) whose process is gone: a run killed while writing the spec
/// (the refresh unit at boot, a power cut). `cdi generate` takes no lock, so the file of
/// a run still going (its process exists) stays. A writer in another PID namespace can look
/// gone: its write then fails at the rename, leaving the spec as it was, and it says so.
/// Returns those removed, with their pid.
fn remove_interrupted_writes(target: &Path) -> Vec<(PathBuf, u32)> {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Vec::new();
    };
    let prefix = format!(".{}.edgegpu-tmp.", name.to_string_lossy());
    let mut removed = Vec::new();
    for f in fsops::temp_files(dir).unwrap_or_default() {
        let file_name = f.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(pid) = file_name
            .filter(|n| n.starts_with(&prefix))
            .and_then(|n| fsops::temp_file_pid(&n))
        else {
            continue;
        };
        let gone = i32::try_from(pid).is_ok_and(|p| {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None)
                == Err(nix::errno::Errno::ESRCH)
        });
        if gone && fsops::remove_if_exists(&f).unwrap_or(false) {
            removed.push((f, pid));
        }
    }
    removed
}

/// Writes (or, where the host has no engine of a kind, removes) the engine specs in the GPU
/// spec's directory, atomically and only when changed, and says so.
fn write_engine_specs(
    gpu_target: &Path,
    format: Format,
    generated: &Generated,
    out: &mut dyn Write,
) -> Result<()> {
    let dir = gpu_target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for (kind, spec) in &generated.engines {
        let target = dir.join(engines::file_name(*kind, format == Format::Json));
        match spec {
            Some(spec) => {
                let text = match format {
                    Format::Yaml => spec.to_yaml(),
                    Format::Json => spec.to_json(),
                };
                remove_interrupted_writes(&target);
                let unchanged = std::fs::read(&target).is_ok_and(|old| old == text.as_bytes());
                if !unchanged {
                    fsops::atomic_write(&target, text.as_bytes(), 0o644)
                        .map_err(|e| SetupError::io(format!("writing {}", target.display()), e))?;
                }
                let _ = writeln!(
                    out,
                    "{} {} (cdiVersion {}, kind {}): devices {}",
                    if unchanged { "unchanged:" } else { "wrote" },
                    target.display(),
                    spec.cdi_version,
                    spec.kind,
                    spec.device_names().join(", ")
                );
            }
            None => {
                if fsops::remove_if_exists(&target)
                    .map_err(|e| SetupError::io(format!("removing {}", target.display()), e))?
                {
                    let _ = writeln!(
                        out,
                        "removed {}: this host has no {} engine",
                        target.display(),
                        kind.name()
                    );
                }
            }
        }
    }
    Ok(())
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
    for warning in &generated.warnings {
        tracing::warn!("{warning}");
    }
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
            root.resolve_full(DEFAULT_OUTPUT)?.disk
        }
    };
    // The write replaces the path with a new file: never do that to a device, FIFO or directory
    // (`--output /dev/null` would otherwise turn the host's /dev/null into a regular file).
    if let Ok(meta) = std::fs::metadata(&target) {
        if !meta.is_file() {
            return Err(SetupError::Refused(format!(
                "{} exists and is not a regular file; cdi generate writes a spec file there \
                 (use --output - for standard output)",
                target.display()
            )));
        }
    }
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        fsops::create_dirs(dir)
            .map_err(|e| SetupError::io(format!("creating {}", dir.display()), e))?;
    }
    let removed = remove_interrupted_writes(&target);
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
    for (f, pid) in &removed {
        let _ = writeln!(
            out,
            "  removed {}: a temporary file an interrupted run (pid {pid}) left",
            f.display()
        );
    }
    write_engine_specs(&target, format, &generated, out)?;
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
    for warning in &generated.warnings {
        let _ = writeln!(out, "  warning: {warning}");
    }
    Ok(exit_code::OK)
}
