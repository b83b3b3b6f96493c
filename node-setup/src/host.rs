//! The host tree we operate on: `/` on a live node, or a mounted image / test tree given by
//! `--root`. Every path the tool knows is a host-absolute path (`/etc/docker/daemon.json`);
//! this module maps it onto the disk, following symlinks *inside* the root.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::{Result, SetupError};

/// Symlink chains longer than this are treated as loops (Linux uses 40 as well).
const MAX_SYMLINK_HOPS: usize = 40;

#[derive(Debug, Clone)]
pub struct HostRoot {
    root: PathBuf,
    live: bool,
}

impl HostRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        // `--root /` (or a path that resolves to it) means the running system: only then
        // may services be restarted.
        let live = std::fs::canonicalize(&root)
            .map(|p| p == Path::new("/"))
            .unwrap_or(false);
        HostRoot { root, live }
    }

    /// True when the tree is the running system (`--root /`).
    pub fn is_live_system(&self) -> bool {
        self.live
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// On-disk path of host-absolute `host_path`, without following symlinks.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.root.join(host_path.trim_start_matches('/'))
    }

    /// On-disk path of the file that a write to `host_path` must replace: symlinks are
    /// followed (an absolute link target is taken relative to the root, as it would be on
    /// the booted image) so that the link itself stays in place.
    pub fn resolve(&self, host_path: &str) -> Result<PathBuf> {
        let mut current = PathBuf::from("/").join(host_path.trim_start_matches('/'));
        for _ in 0..MAX_SYMLINK_HOPS {
            let on_disk = self.path(&current.to_string_lossy());
            match std::fs::symlink_metadata(&on_disk) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&on_disk).map_err(|e| {
                        SetupError::io(format!("reading symlink {}", on_disk.display()), e)
                    })?;
                    let next = if target.is_absolute() {
                        target
                    } else {
                        current.parent().unwrap_or(Path::new("/")).join(target)
                    };
                    current = normalize(&next);
                }
                Ok(_) => return Ok(on_disk),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(on_disk),
                Err(e) => {
                    return Err(SetupError::io(
                        format!("inspecting {}", on_disk.display()),
                        e,
                    ))
                }
            }
        }
        Err(SetupError::Refused(format!(
            "{}: too many levels of symbolic links",
            self.path(host_path).display()
        )))
    }

    /// Reads `host_path` (through symlinks). `Ok(None)` when the file does not exist.
    pub fn read(&self, host_path: &str) -> Result<Option<String>> {
        let path = self.resolve(host_path)?;
        read_optional(&path)
    }

    pub fn exists(&self, host_path: &str) -> bool {
        self.resolve(host_path).map(|p| p.exists()).unwrap_or(false)
    }

    /// True when `host_path` is a regular file with an execute bit (through symlinks).
    pub fn is_executable(&self, host_path: &str) -> bool {
        use std::os::unix::fs::PermissionsExt;
        self.resolve(host_path)
            .ok()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }

    /// Host-absolute paths of the entries of directory `host_dir` whose names end with
    /// `suffix`, sorted by name. Missing directory: empty.
    pub fn list_dir(&self, host_dir: &str, suffix: &str) -> Result<Vec<String>> {
        let dir = match self.resolve(host_dir) {
            Ok(d) => d,
            Err(_) => return Ok(Vec::new()),
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SetupError::io(format!("listing {}", dir.display()), e)),
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(suffix) && !n.starts_with('.'))
            .collect();
        names.sort();
        let base = host_dir.trim_end_matches('/');
        Ok(names.into_iter().map(|n| format!("{base}/{n}")).collect())
    }
}

/// Reads a file as UTF-8; `Ok(None)` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|e| {
            let offset = e.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(&e.into_bytes()[..offset]).into_owned();
            let (line, column) = crate::error::line_column(&text, offset);
            SetupError::Malformed {
                file: path.to_path_buf(),
                line,
                column,
                message: "file is not valid UTF-8".into(),
            }
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SetupError::io(format!("reading {}", path.display()), e)),
    }
}

/// Lexically removes `.` and `..` (never above `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}
