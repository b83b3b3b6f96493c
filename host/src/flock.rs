//! Exclusive `flock(2)` locks on lock files: one holder at a time, released by the kernel
//! when the holder closes the file or dies however it dies, so a crashed holder never blocks
//! the next. node-setup's one-run-at-a-time lock and the node programs' device-kind ownership
//! both take theirs here.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The held lock (released when dropped).
pub type Held = Flock<File>;

/// What trying the lock found.
#[derive(Debug)]
pub enum TryLock {
    /// We hold it now.
    Locked(Held),
    /// Someone else does; the file is open (to read what the holder wrote into it, or to
    /// wait with [`wait`]).
    Busy(File),
}

/// Opens (creating) `path` for locking. Never truncated on open: what the file says
/// belongs to whoever holds the lock.
fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Takes the exclusive lock on `path` without waiting.
pub fn try_lock(path: &Path) -> io::Result<TryLock> {
    match Flock::lock(open(path)?, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Ok(TryLock::Locked(held)),
        Err((file, Errno::EWOULDBLOCK)) => Ok(TryLock::Busy(file)),
        Err((_, e)) => Err(e.into()),
    }
}

/// Waits for the lock on a file [`try_lock`] found busy.
pub fn wait(file: File) -> io::Result<Held> {
    Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn one_holder_at_a_time_and_the_lock_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let mut first = match try_lock(&path).unwrap() {
            TryLock::Locked(held) => held,
            other => panic!("{other:?}"),
        };
        writeln!(first, "first").unwrap();
        // flock locks belong to the open file description: a second open in this process
        // conflicts as another process's would.
        match try_lock(&path).unwrap() {
            TryLock::Busy(mut file) => {
                let mut text = String::new();
                file.read_to_string(&mut text).unwrap();
                assert_eq!(text, "first\n", "opening for the lock truncates nothing");
                drop(first);
                let _second = wait(file).unwrap();
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(try_lock(&path).unwrap(), TryLock::Locked(_)));
    }

    #[test]
    fn an_unusable_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(try_lock(&dir.path().join("missing-dir").join("x.lock")).is_err());
    }
}
