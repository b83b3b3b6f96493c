//! Files beneath a directory held open, for the parts of the MPS root that someone less
//! trusted can write: the plugin writes `desired/`, client pods write their resource's
//! `pipe/` and `shm/`, and the companion that reads and writes there is privileged.
//!
//! - Paths are walked one component at a time from the open directory with `O_NOFOLLOW`: a
//!   planted symbolic link is an error ([`BeneathError::Symlink`]), never followed. Names
//!   with `..`, `.`, an empty part or a leading `/` are refused before any system call.
//! - Files are read only when they are regular files of bounded size, and opened with
//!   `O_NONBLOCK`, so a FIFO or a device in their place cannot stall the reader.
//! - Files are written through a temporary file created `O_EXCL | O_NOFOLLOW` under an
//!   unpredictable name, then renamed over the target: a link planted at either name is
//!   replaced or refused, its target never written.
//!
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` does the walk in one call, but only from
//! Linux 5.6; Jetson Nano and TX2 run 4.9. The component walk works on every kernel.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{
    fchmod, fstat, mkdirat, openat, renameat, statat, unlinkat, AtFlags, FileType, Mode, OFlags,
    CWD,
};
use rustix::io::Errno;

/// Why a file beneath the directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    #[error("{0}: a symbolic link, which is never followed here")]
    Symlink(PathBuf),
    #[error("{path}: not a {expected} but a {found}")]
    WrongType {
        path: PathBuf,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{path}: larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path:?}: not a plain relative path beneath {base} (no `..`, `.`, empty parts or leading `/`)")]
    BadName { path: String, base: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl BeneathError {
    fn io(path: PathBuf, errno: Errno) -> BeneathError {
        if errno == Errno::LOOP {
            return BeneathError::Symlink(path);
        }
        BeneathError::Io {
            path,
            source: errno.into(),
        }
    }

    /// Whether the error is a missing file or directory.
    pub fn is_not_found(&self) -> bool {
        matches!(self, BeneathError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// A directory held open; everything beneath it is reached through it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// For messages only: what the directory was called when it was opened.
    path: PathBuf,
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Dir {
    /// Opens `path`, a trusted path (a flag's value): symbolic links on the way to it are
    /// followed, unlike anything beneath it.
    pub fn open(path: &Path) -> Result<Dir, BeneathError> {
        let fd = openat(
            CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| BeneathError::io(path.to_path_buf(), e))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// What the directory was called when opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The components of `relative`, each a plain name.
    fn components<'a>(&self, relative: &'a str) -> Result<Vec<&'a str>, BeneathError> {
        let parts: Vec<&str> = relative.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(BeneathError::BadName {
                path: relative.to_string(),
                base: self.path.clone(),
            });
        }
        Ok(parts)
    }

    fn child(&self, name: &str) -> Result<Dir, BeneathError> {
        let path = self.path.join(name);
        match openat(self.as_fd(), name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd, path }),
            // O_DIRECTORY on a link answers ENOTDIR before O_NOFOLLOW's ELOOP: say which.
            Err(Errno::NOTDIR) => {
                let found = statat(self.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode));
                Err(match found {
                    Ok(FileType::Symlink) => BeneathError::Symlink(path),
                    Ok(kind) => BeneathError::WrongType {
                        path,
                        expected: "directory",
                        found: kind_name(kind),
                    },
                    Err(e) => BeneathError::io(path, e),
                })
            }
            Err(e) => Err(BeneathError::io(path, e)),
        }
    }

    /// The existing directory `relative` beneath this one; `Ok(None)` when a part is missing.
    pub fn open_dir(&self, relative: &str) -> Result<Option<Dir>, BeneathError> {
        let mut dir = self.child_walk_start()?;
        for part in self.components(relative)? {
            match dir.child(part) {
                Ok(d) => dir = d,
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(dir))
    }

    /// Opens, creating what is missing, the directory `relative` beneath this one. Parts it
    /// creates get mode 0755; the last one gets `mode` whether it was created or not (set on
    /// the open descriptor, so never on a link's target).
    pub fn create_dir_all(&self, relative: &str, mode: u32) -> Result<Dir, BeneathError> {
        let mut dir = self.child_walk_start()?;
        for part in self.components(relative)? {
            match mkdirat(dir.as_fd(), part, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(BeneathError::io(dir.path.join(part), e)),
            }
            dir = dir.child(part)?;
        }
        fchmod(dir.as_fd(), Mode::from_raw_mode(mode))
            .map_err(|e| BeneathError::io(dir.path.clone(), e))?;
        Ok(dir)
    }

    /// A second descriptor of this directory, to walk from.
    fn child_walk_start(&self) -> Result<Dir, BeneathError> {
        let fd = self.fd.try_clone().map_err(|source| BeneathError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(Dir {
            fd,
            path: self.path.clone(),
        })
    }

    /// Reads the regular file `name` in this directory, at most `limit` bytes; `Ok(None)`
    /// when it does not exist. A link, FIFO, socket or device there is an error, and the
    /// open never waits (`O_NONBLOCK`).
    pub fn read_file(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, BeneathError> {
        let [name] = self.components(name)?[..] else {
            return Err(BeneathError::BadName {
                path: name.to_string(),
                base: self.path.clone(),
            });
        };
        let path = self.path.join(name);
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match openat(self.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(BeneathError::io(path, e)),
        };
        let stat = fstat(&fd).map_err(|e| BeneathError::io(path.clone(), e))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind != FileType::RegularFile {
            return Err(BeneathError::WrongType {
                path,
                expected: "regular file",
                found: kind_name(kind),
            });
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| BeneathError::Io {
                path: path.clone(),
                source,
            })?;
        if bytes.len() as u64 > limit {
            return Err(BeneathError::TooLarge { path, limit });
        }
        Ok(Some(bytes))
    }

    /// Replaces `name` in this directory with `bytes` (mode 0644), atomically: readers see
    /// the old file or the new one. Whatever was planted at `name` is replaced, not
    /// followed.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), BeneathError> {
        let [name] = self.components(name)?[..] else {
            return Err(BeneathError::BadName {
                path: name.to_string(),
                base: self.path.clone(),
            });
        };
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut attempt = 0;
        let (tmp, fd) = loop {
            let tmp = format!(".{name}.{:016x}", unpredictable());
            match openat(
                self.as_fd(),
                tmp.as_str(),
                flags,
                Mode::from_raw_mode(0o644),
            ) {
                Ok(fd) => break (tmp, fd),
                // Someone took the name first: another name.
                Err(Errno::EXIST) if attempt < 8 => attempt += 1,
                Err(e) => return Err(BeneathError::io(self.path.join(tmp), e)),
            }
        };
        let mut file = File::from(fd);
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .map_err(|source| BeneathError::Io {
                path: self.path.join(&tmp),
                source,
            })
            .and_then(|()| {
                renameat(self.as_fd(), tmp.as_str(), self.as_fd(), name)
                    .map_err(|e| BeneathError::io(self.path.join(name), e))
            });
        if written.is_err() {
            let _ = unlinkat(self.as_fd(), tmp.as_str(), AtFlags::empty());
        }
        written
    }

    /// Removes the file (or link) `name` in this directory; a missing one is fine.
    pub fn remove_file(&self, name: &str) -> Result<(), BeneathError> {
        let [name] = self.components(name)?[..] else {
            return Err(BeneathError::BadName {
                path: name.to_string(),
                base: self.path.clone(),
            });
        };
        match unlinkat(self.as_fd(), name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(BeneathError::io(self.path.join(name), e)),
        }
    }
}

/// Reads the regular file at `path` (its directory a trusted path), at most `limit` bytes,
/// with the same checks as [`Dir::read_file`]; `Ok(None)` when the file or its directory is
/// missing.
pub fn read_file(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, BeneathError> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(BeneathError::BadName {
            path: path.display().to_string(),
            base: PathBuf::new(),
        });
    };
    let dir = match Dir::open(dir) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    dir.read_file(&name.to_string_lossy(), limit)
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Symlink => "symbolic link",
        FileType::Unknown => "file of another kind",
    }
}

/// 64 bits no one can guess in advance: std's hash keys come from the operating system's
/// random source (no extra crate for the temporary files' names).
fn unpredictable() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn names_with_dot_dot_or_a_leading_slash_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        for bad in ["../x", "/abs", "a/../b", "a//b", ".", ""] {
            let e = dir.create_dir_all(bad, 0o755).unwrap_err();
            assert!(matches!(e, BeneathError::BadName { .. }), "{bad}: {e}");
        }
        assert!(dir.read_file("a/b", 10).is_err(), "one name only");
        assert!(!tmp.path().parent().unwrap().join("x").exists());
    }

    #[test]
    fn links_are_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        symlink(outside.path(), tmp.path().join("linked")).unwrap();
        symlink(&victim, tmp.path().join("file")).unwrap();
        let dir = Dir::open(tmp.path()).unwrap();

        let e = dir.create_dir_all("linked/pipe", 0o777).unwrap_err();
        assert!(matches!(e, BeneathError::Symlink(_)), "{e}");
        assert!(!outside.path().join("pipe").exists());
        let e = dir.read_file("file", 100).unwrap_err();
        assert!(matches!(e, BeneathError::Symlink(_)), "{e}");
        // The link itself is replaced; its target keeps its bytes.
        dir.write_file("file", b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("file")).unwrap(),
            "new"
        );
        assert!(!tmp.path().join("file").is_symlink());
        dir.remove_file("file").unwrap();
        dir.remove_file("file").unwrap();
        // A directory's mode is set on the directory, never on a link's target.
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let before = mode(outside.path());
        assert!(dir.create_dir_all("linked", 0o1777).is_err());
        assert_eq!(mode(outside.path()), before);
        let made = dir.create_dir_all("a/b", 0o1777).unwrap();
        assert_eq!(mode(made.path()), 0o1777);
        assert_eq!(mode(&tmp.path().join("a")), 0o755);
    }

    #[test]
    fn only_bounded_regular_files_are_read_and_a_fifo_does_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        assert!(dir.read_file("missing", 10).unwrap().is_none());
        nix::unistd::mkfifo(
            &tmp.path().join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = dir.read_file("fifo", 10).unwrap_err();
        assert!(
            e.to_string().contains("not a regular file but a FIFO"),
            "{e}"
        );
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        assert!(dir.read_file("sub", 10).is_err());
        std::fs::write(tmp.path().join("big"), [b'x'; 11]).unwrap();
        let e = dir.read_file("big", 10).unwrap_err();
        assert!(matches!(e, BeneathError::TooLarge { limit: 10, .. }), "{e}");
        std::fs::write(tmp.path().join("ok"), "1234\n").unwrap();
        assert_eq!(dir.read_file("ok", 10).unwrap().unwrap(), b"1234\n");
        assert_eq!(
            read_file(&tmp.path().join("ok"), 10).unwrap().unwrap(),
            b"1234\n"
        );
        assert!(read_file(&tmp.path().join("nodir/ok"), 10)
            .unwrap()
            .is_none());
    }

    #[test]
    fn temporary_names_differ_and_are_left_nowhere() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        assert_ne!(unpredictable(), unpredictable());
        for i in 0..3 {
            dir.write_file("status.json", format!("{i}").as_bytes())
                .unwrap();
        }
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["status.json"]);
    }
}
