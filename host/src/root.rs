//! The host tree we operate on: `/` on a live node, or a mounted image / test tree given by
//! `--root`. Every path the tool knows is a host-absolute path (`/etc/docker/daemon.json`);
//! this module maps it onto the disk, following symlinks *inside* the root. A view of the
//! host can carry planned file contents ([`HostRoot::with_files`]), so that what the
//! services would load after a change is computed by the same code that reads the host.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Result, SetupError};

/// Symlink chains longer than this are treated as loops (Linux uses 40 as well).
const MAX_SYMLINK_HOPS: usize = 40;

/// Where a host path leads once every symlink is followed.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// On-disk path (under the root).
    pub disk: PathBuf,
    /// Host-absolute path of the file itself.
    pub host_path: String,
    /// A symlink on the way whose target does not exist: (the link, where it points),
    /// host paths. Whatever lies behind it would be created at a place nobody made.
    pub dangling: Option<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct HostRoot {
    root: PathBuf,
    live: bool,
    /// Planned contents by host path of the file itself (symlinks resolved): read as if
    /// they were on disk.
    planned: Arc<BTreeMap<String, String>>,
    /// When set ([`HostRoot::tolerating_unreadable`]): files and directories that could
    /// not be read for lack of permission, read as if they did not exist.
    unreadable: Option<Arc<Mutex<Vec<Unreadable>>>>,
    /// When set ([`HostRoot::recording_reads`]): the host paths of the files read, for
    /// `doctor --bundle`, which packs the files its findings came from.
    reads: Option<Arc<Mutex<BTreeSet<String>>>>,
}

/// A file that could not be read for lack of permission.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unreadable {
    /// Host path.
    pub file: String,
    pub error: String,
}

impl HostRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        // `--root /` (or a path that resolves to it) means the running system: only then
        // may services be restarted.
        let live = std::fs::canonicalize(&root)
            .map(|p| p == Path::new("/"))
            .unwrap_or(false);
        HostRoot {
            root,
            live,
            planned: Arc::default(),
            unreadable: None,
            reads: None,
        }
    }

    /// This host, noting every file [`HostRoot::read`] finds ([`HostRoot::files_read`]).
    pub fn recording_reads(&self) -> HostRoot {
        HostRoot {
            reads: Some(Arc::default()),
            ..self.clone()
        }
    }

    /// The host paths read since [`HostRoot::recording_reads`], sorted, each once.
    pub fn files_read(&self) -> Vec<String> {
        self.reads
            .as_ref()
            .map(|r| {
                r.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Notes that `host_path` was read (see [`HostRoot::recording_reads`]).
    pub fn note_read(&self, host_path: &str) {
        if let Some(reads) = &self.reads {
            reads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(host_path.to_string());
        }
    }

    /// This host, with files and directories that cannot be read for lack of permission
    /// (`check` run by a user who is not root, on a host with root-only files such as
    /// the k3s installer's `k3s.service.env`) read as if they did not exist instead of
    /// stopping the run; [`HostRoot::unreadable`] lists them.
    pub fn tolerating_unreadable(&self) -> HostRoot {
        HostRoot {
            unreadable: Some(Arc::default()),
            ..self.clone()
        }
    }

    /// What could not be read (see [`HostRoot::tolerating_unreadable`]), each once.
    pub fn unreadable(&self) -> Vec<Unreadable> {
        self.unreadable
            .as_ref()
            .map(|u| u.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default()
    }

    /// Whether a permission error on `host_path` is to be read as "absent"; records it.
    fn tolerate(&self, host_path: &str, error: &SetupError) -> bool {
        let (Some(list), SetupError::Unreadable { source, .. }) = (&self.unreadable, error) else {
            return false;
        };
        if !error.is_permission_denied() {
            return false;
        }
        let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
        if !list.iter().any(|u| u.file == host_path) {
            list.push(Unreadable {
                file: host_path.to_string(),
                error: source.to_string(),
            });
        }
        true
    }

    /// This host as it would be with `files` (host path of the file itself, content)
    /// written: reads, listings and existence checks see the new contents.
    pub fn with_files(&self, files: impl IntoIterator<Item = (String, String)>) -> HostRoot {
        let mut planned = (*self.planned).clone();
        planned.extend(files);
        HostRoot {
            planned: Arc::new(planned),
            ..self.clone()
        }
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

    /// Follows every symlink on the way to host-absolute `host_path`, component by
    /// component and inside the root (an absolute link target is taken relative to the
    /// root, as it would be on the booted image; `..` never climbs above it), so that a
    /// write replaces the file the link points to and the link itself stays in place.
    pub fn resolve_full(&self, host_path: &str) -> Result<Resolved> {
        // Components still to walk; `Some(link)` marks those that came from the target
        // of a symlink (the link and its target, host paths).
        let mut pending: Vec<(String, Option<(String, String)>)> = components(host_path)
            .into_iter()
            .rev()
            .map(|c| (c, None))
            .collect();
        let mut current = PathBuf::from("/");
        let mut hops = 0;
        let mut dangling = None;
        while let Some((part, from_link)) = pending.pop() {
            if part == ".." {
                current.pop();
                continue;
            }
            let next = current.join(&part);
            let on_disk = self.path(&next.to_string_lossy());
            match std::fs::symlink_metadata(&on_disk) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(SetupError::Refused(format!(
                            "{host_path}: too many levels of symbolic links"
                        )));
                    }
                    let target = std::fs::read_link(&on_disk)
                        .map_err(|e| SetupError::unreadable(next.display().to_string(), e))?;
                    let target = target.to_string_lossy();
                    let base = if target.starts_with('/') {
                        PathBuf::from("/")
                    } else {
                        current.clone()
                    };
                    let link = (
                        next.to_string_lossy().into_owned(),
                        normalize(&base, &target),
                    );
                    current = base;
                    pending.extend(
                        components(&target)
                            .into_iter()
                            .rev()
                            .map(|c| (c, Some(link.clone()))),
                    );
                }
                Ok(_) => current = next,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // The rest does not exist: it is taken as written. Missing where a
                    // link pointed: that link dangles.
                    dangling = from_link;
                    current = next;
                    for (rest, _) in pending.drain(..).rev() {
                        if rest == ".." {
                            current.pop();
                        } else {
                            current.push(rest);
                        }
                    }
                }
                Err(e) => return Err(SetupError::unreadable(next.display().to_string(), e)),
            }
        }
        let host = current.to_string_lossy().into_owned();
        Ok(Resolved {
            disk: self.path(&host),
            host_path: host,
            dangling,
        })
    }

    /// Where the entry `host_path` names really lives: every symlink among its parent
    /// directories followed (inside the root), the last component kept as it is, so that a
    /// symlink is located and not followed.
    pub fn locate(&self, host_path: &str) -> Result<String> {
        let mut parts = components(host_path);
        match parts.pop() {
            Some(name) if name != ".." => {
                let parent = self.resolve_full(&format!("/{}", parts.join("/")))?;
                Ok(format!("{}/{name}", parent.host_path.trim_end_matches('/')))
            }
            _ => Ok(self.resolve_full(host_path)?.host_path),
        }
    }

    /// When `host_path` itself is a symlink: its target as written, and the host path that
    /// target names (relative targets taken from the link's directory; not resolved further).
    pub fn link_target(&self, host_path: &str) -> Option<(String, String)> {
        let target = std::fs::read_link(self.path(host_path)).ok()?;
        let target = target.to_string_lossy().into_owned();
        let dir = Path::new(host_path).parent().unwrap_or(Path::new("/"));
        let names = normalize(dir, &target);
        Some((target, names))
    }

    /// On-disk path of the file a write to `host_path` must replace (see
    /// [`HostRoot::resolve_full`]).
    pub fn resolve(&self, host_path: &str) -> Result<PathBuf> {
        Ok(self.resolve_full(host_path)?.disk)
    }

    /// Resolves `host_path` for writing, refusing what a write could not make last: a
    /// file on a filesystem that is emptied at every boot, and a file behind a symlink
    /// whose target does not exist (we never create files or directories there).
    pub fn resolve_for_write(&self, host_path: &str) -> Result<Resolved> {
        let r = self.resolve_full(host_path)?;
        if let Some(why) = self.volatile(&r.host_path) {
            let shown = if r.host_path == host_path {
                host_path.to_string()
            } else {
                format!("{host_path} (a symlink to {})", r.host_path)
            };
            return Err(SetupError::Refused(format!(
                "{shown} lives on {why}, which is regenerated at boot: the change would be lost at the next boot. Make the file persistent (or point the link at a persistent file) and run apply again"
            )));
        }
        if let Some((link, target)) = &r.dangling {
            let what = if *link == host_path {
                "file"
            } else {
                "file or directory"
            };
            return Err(SetupError::Refused(format!(
                "{link} is a symlink to {target}, which does not exist: node-setup never creates a {what} at a dangling symlink's target. Create {target} (or replace the link) and run apply again"
            )));
        }
        Ok(r)
    }

    /// Why `host_path` is on a filesystem that does not survive a reboot, if it is: the
    /// tmpfs mount points of systemd (file-hierarchy(7)) and of Yocto images
    /// (`/var/volatile`), and on the running system any tmpfs.
    fn volatile(&self, host_path: &str) -> Option<String> {
        for dir in ["/run", "/var/run", "/tmp", "/dev/shm", "/var/volatile"] {
            if host_path == dir || host_path.starts_with(&format!("{dir}/")) {
                return Some(format!("{dir} (a tmpfs)"));
            }
        }
        if self.live {
            let mut probe = Some(Path::new(host_path));
            while let Some(p) = probe {
                if let Ok(fs) = nix::sys::statfs::statfs(p) {
                    return (fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
                        .then(|| format!("a tmpfs ({})", p.display()));
                }
                probe = p.parent();
            }
        }
        None
    }

    /// True when `host_path` is a directory (through symlinks).
    pub fn is_dir(&self, host_path: &str) -> bool {
        self.resolve(host_path).map(|p| p.is_dir()).unwrap_or(false)
    }

    /// True when `host_path` itself is a symlink (dangling or not).
    pub fn is_symlink(&self, host_path: &str) -> bool {
        std::fs::symlink_metadata(self.path(host_path))
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false)
    }

    /// Reads `host_path` (through symlinks; planned contents first). `Ok(None)` when the
    /// file does not exist. Errors name the host path.
    pub fn read(&self, host_path: &str) -> Result<Option<String>> {
        let r = match self.resolve_full(host_path) {
            Err(e) if self.tolerate(host_path, &e) => return Ok(None),
            other => other?,
        };
        if let Some(text) = self.planned.get(&r.host_path) {
            return Ok(Some(text.clone()));
        }
        let read = read_optional(&r.disk);
        if let Ok(Some(_)) = &read {
            self.note_read(&r.host_path);
        }
        if let Err(e) = &read {
            if self.tolerate(host_path, e) {
                return Ok(None);
            }
        }
        read.map_err(|e| match e {
            SetupError::Malformed {
                line,
                column,
                message,
                ..
            } => SetupError::Malformed {
                file: PathBuf::from(host_path),
                line,
                column,
                message,
            },
            SetupError::Unreadable { source, .. } => SetupError::unreadable(host_path, source),
            other => other,
        })
    }

    pub fn exists(&self, host_path: &str) -> bool {
        self.resolve_full(host_path)
            .map(|r| self.planned.contains_key(&r.host_path) || r.disk.exists())
            .unwrap_or(false)
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

    /// The distinct executables named `name` in `dirs`, in order (a second path to a file
    /// already found, through a symlink, is left out): what a PATH lookup can find.
    pub fn executables_in<'d>(
        &self,
        dirs: impl IntoIterator<Item = &'d str>,
        name: &str,
    ) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        let mut files = Vec::new();
        for dir in dirs {
            let candidate = format!("{}/{name}", dir.trim_end_matches('/'));
            if !dir.starts_with('/') || !self.is_executable(&candidate) {
                continue;
            }
            let file = self.resolve(&candidate).ok();
            if !files.contains(&file) {
                files.push(file);
                found.push(candidate);
            }
        }
        found
    }

    /// Host-absolute paths of the entries of directory `host_dir` whose names end with
    /// `suffix` (planned files included), sorted by name. Missing directory: empty.
    pub fn list_dir(&self, host_dir: &str, suffix: &str) -> Result<Vec<String>> {
        let dir = match self.resolve_full(host_dir) {
            Ok(d) => d,
            Err(_) => return Ok(Vec::new()),
        };
        let mut names: Vec<String> = match std::fs::read_dir(&dir.disk) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                let e = SetupError::unreadable(host_dir, e);
                if !self.tolerate(host_dir, &e) {
                    return Err(e);
                }
                Vec::new()
            }
        };
        let prefix = format!("{}/", dir.host_path.trim_end_matches('/'));
        names.extend(
            self.planned
                .keys()
                .filter_map(|p| p.strip_prefix(&prefix))
                .filter(|n| !n.contains('/'))
                .map(str::to_string),
        );
        names.retain(|n| n.ends_with(suffix) && !n.starts_with('.'));
        names.sort();
        names.dedup();
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
        Err(e) => Err(SetupError::unreadable(path.display().to_string(), e)),
    }
}

/// `target` (a link's target, relative to `base` unless absolute) as a host path, `.`
/// and `..` folded.
fn normalize(base: &Path, target: &str) -> String {
    let mut out = if target.starts_with('/') {
        PathBuf::from("/")
    } else {
        base.to_path_buf()
    };
    for c in components(target) {
        if c == ".." {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out.to_string_lossy().into_owned()
}

/// The names in a path, without `.` and empty parts (`..` kept).
fn components(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect()
}
