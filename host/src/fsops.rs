//! Crash-safe file replacement. Every byte this tool writes goes through [`atomic_write`],
//! which also counts writes so tests and the benchmark can prove that an idempotent run
//! writes nothing.

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

thread_local! {
    // Per thread: node-setup writes from one thread, and tests that run in parallel in
    // one process must not count each other's writes.
    static WRITES: Cell<u64> = const { Cell::new(0) };
}

/// Number of files written (replaced, created or removed) by the calling thread so far.
pub fn write_count() -> u64 {
    WRITES.with(Cell::get)
}

fn count_write() {
    WRITES.with(|w| w.set(w.get() + 1));
}

/// Replaces `path` (which must not be a symlink: resolve it first) with `contents`:
/// temporary file in the same directory, fsync, rename over the target, fsync the
/// directory. An existing file's mode and owner are kept; a new file gets `new_mode`.
pub fn atomic_write(path: &Path, contents: &[u8], new_mode: u32) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let existing = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let tmp = dir.join(format!(
        ".{}.edgegpu-tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = write_temp_and_rename(&tmp, path, dir, contents, existing.as_ref(), new_mode);
    match &result {
        Ok(()) => {
            count_write();
        }
        Err(_) => {
            // The write's own error is what the caller needs; a temp file we could not
            // remove is logged (the next run removes it).
            if let Err(e) = remove_if_exists(&tmp) {
                tracing::warn!(file = %tmp.display(), error = %e, "could not remove a temporary file");
            }
        }
    }
    result
}

fn write_temp_and_rename(
    tmp: &Path,
    target: &Path,
    dir: &Path,
    contents: &[u8],
    existing: Option<&std::fs::Metadata>,
    new_mode: u32,
) -> io::Result<()> {
    // A stale temp file from a killed run would make create_new fail.
    remove_if_exists(tmp)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)?;
    file.write_all(contents)?;
    match existing {
        Some(meta) => {
            // Owner first: chown clears set-id bits, the chmod after restores them.
            std::os::unix::fs::fchown(&file, Some(meta.uid()), Some(meta.gid()))?;
            file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
        None => file.set_permissions(std::fs::Permissions::from_mode(new_mode))?,
    }
    file.sync_all()?;
    drop(file);
    std::fs::rename(tmp, target)?;
    File::open(dir)?.sync_all()
}

/// Creates `dir` and its missing parents (mode 0755). Returns the directories created,
/// outermost first, so that `revert` can remove them again.
pub fn create_dirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cur = d.parent();
    }
    missing.reverse();
    let mut created = Vec::new();
    for d in missing {
        match std::fs::DirBuilder::new().mode(0o755).create(&d) {
            Ok(()) => {}
            // Made meanwhile by someone else (a run waiting for the lock): not ours.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => continue,
            Err(e) => return Err(e),
        }
        if let Some(parent) = d.parent() {
            File::open(parent)?.sync_all()?;
        }
        created.push(d);
    }
    Ok(created)
}

/// The process id in the name of a temporary file [`atomic_write`] makes
/// (`.<file>.edgegpu-tmp.<pid>`), or `None` for any other name.
pub fn temp_file_pid(name: &str) -> Option<u32> {
    let (file, pid) = name.strip_prefix('.')?.rsplit_once(".edgegpu-tmp.")?;
    if file.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// The temporary files of [`atomic_write`] in `dir` (regular files named
/// `.<file>.edgegpu-tmp.<pid>`; a directory, link or other file of such a name is not
/// ours). A missing directory has none.
pub fn temp_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_file() && temp_file_pid(&name).is_some() {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

/// Removes the temporary files a killed run left in `dir` (see [`temp_files`]). Only
/// called while holding the run lock, so no other run is writing them. Returns the
/// files removed.
pub fn remove_stale_temps(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for f in temp_files(dir)? {
        if remove_if_exists(&f)? {
            removed.push(f);
        }
    }
    Ok(removed)
}

/// Removes `path` if it exists (without counting it as a write: only temporary files and
/// our own state go through here). Returns whether it existed.
pub fn remove_if_exists(path: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes directory `dir` if it is empty; a missing or non-empty directory is left as it
/// is (something else may have put files there).
pub fn remove_dir_if_empty(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::libc::ENOTEMPTY)
                || e.raw_os_error() == Some(nix::libc::EEXIST) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Removes `path` and fsyncs its directory.
pub fn remove_file(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path)?;
    count_write();
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Whether the current user may create files in `dir` (or, if it does not exist yet, in
/// its nearest existing ancestor). Used to refuse a plan before writing anything.
pub fn dir_writable(dir: &Path) -> bool {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.exists() {
            return nix::unistd::access(d, nix::unistd::AccessFlags::W_OK).is_ok();
        }
        cur = d.parent();
    }
    false
}

/// A 64-bit FNV-1a digest, used in the manifest to notice files changed after `apply`.
/// Not a security measure (no adversary here), so no crypto crate is pulled in for it.
pub fn digest(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fnv1a64:{hash:016x}")
}
