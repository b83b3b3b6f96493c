//! Reading files that less privileged programs write (the plugin's and the companion's files
//! under the MPS root, CDI specs the DRA driver writes, the kubelet's checkpoint) as root,
//! without being led elsewhere: the file is first opened as a path only (`O_PATH`), without
//! following a link at its last component, and checked to be a regular file before it is
//! opened for reading (through `/proc/self/fd`), so that neither a link to `/etc/shadow` nor a
//! device (a watchdog arms on open) nor a FIFO (which would block) is ever opened; and it is
//! read bounded.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use edgegpu_host::root::HostRoot;
use nix::fcntl::OFlag;

/// Where host file `host_path` is on this machine: its folder resolved inside the host root
/// (`/var/run` is a link to `/run`), its own name not (see [`read`]).
pub fn on_disk(host: &HostRoot, host_path: &str) -> std::path::PathBuf {
    let (dir, name) = host_path.rsplit_once('/').unwrap_or(("", host_path));
    let dir = if dir.is_empty() { "/" } else { dir };
    host.resolve(dir)
        .unwrap_or_else(|_| host.path(dir))
        .join(name)
}

/// A regular file's first `max` bytes, and whether there was more.
pub struct Bounded {
    pub bytes: Vec<u8>,
    pub cut: bool,
}

/// Reads the regular file at `path` (a path on this machine), at most `max` bytes. A link at
/// the last component is refused unless `follow_last_link` (system configuration such as
/// L4T's `/etc/nvpmodel.conf`, a link only root can make).
pub fn read(path: &Path, max: u64, follow_last_link: bool) -> std::io::Result<Bounded> {
    let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if !follow_last_link {
        flags |= OFlag::O_NOFOLLOW;
    }
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)?;
    let kind = handle.metadata()?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::other(if kind.is_symlink() {
            "a symbolic link, not followed"
        } else {
            "not a regular file"
        }));
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))?;
    read_bounded(file, max)
}

fn read_bounded(file: File, max: u64) -> std::io::Result<Bounded> {
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    let cut = bytes.len() as u64 > max;
    bytes.truncate(max as usize);
    Ok(Bounded { bytes, cut })
}

/// [`read`] as text (lossy UTF-8), refusing a file larger than `max`.
pub fn read_text(path: &Path, max: u64) -> std::io::Result<String> {
    let b = read(path, max, false)?;
    if b.cut {
        return Err(std::io::Error::other(format!(
            "larger than {max} bytes, not read"
        )));
    }
    Ok(String::from_utf8_lossy(&b.bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_devices_are_not_opened() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, "0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(read_text(&real, 100).unwrap(), "0123456789");
        assert!(read_text(&link, 100)
            .unwrap_err()
            .to_string()
            .contains("link"));
        assert!(read(&link, 100, true).is_ok(), "followed where asked");
        assert!(read_text(&fifo, 100).is_err());
        assert!(read_text(Path::new("/dev/null"), 100).is_err());
        assert!(read_text(dir.path(), 100).is_err());
        let cut = read(&real, 4, false).unwrap();
        assert_eq!((cut.bytes.as_slice(), cut.cut), (&b"0123"[..], true));
        assert!(read_text(&real, 4).is_err());
    }
}
