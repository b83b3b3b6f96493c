//! `flock(2)` locks on lock files, released by the kernel when the holder closes the file or
//! dies however it dies, so a crashed holder never blocks the next. Exclusive: one holder at a
//! time (node-setup's one-run-at-a-time lock, the device plugin's device kinds, the DRA
//! driver's prepare/unprepare across its instances); shared: any number of shared holders, but
//! none beside an exclusive one (the DRA driver's device kinds, which the instances of a
//! rolling update serve together).

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

/// Takes a shared lock on `path` without waiting: it is `Busy` only while someone holds the
/// lock exclusively, and an exclusive [`try_lock`] is `Busy` while any shared holder remains.
pub fn try_lock_shared(path: &Path) -> io::Result<TryLock> {
    match Flock::lock(open(path)?, FlockArg::LockSharedNonblock) {
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
    fn shared_holders_exclude_an_exclusive_one_and_the_reverse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = match try_lock_shared(&path).unwrap() {
            TryLock::Locked(held) => held,
            other => panic!("{other:?}"),
        };
        let second = match try_lock_shared(&path).unwrap() {
            TryLock::Locked(held) => held,
            other => panic!("a second shared holder: {other:?}"),
        };
        assert!(matches!(try_lock(&path).unwrap(), TryLock::Busy(_)));
        drop(first);
        assert!(
            matches!(try_lock(&path).unwrap(), TryLock::Busy(_)),
            "one shared holder is enough to keep an exclusive one out"
        );
        drop(second);
        let exclusive = match try_lock(&path).unwrap() {
            TryLock::Locked(held) => held,
            other => panic!("{other:?}"),
        };
        assert!(matches!(try_lock_shared(&path).unwrap(), TryLock::Busy(_)));
        drop(exclusive);
        assert!(matches!(
            try_lock_shared(&path).unwrap(),
            TryLock::Locked(_)
        ));
    }

    #[test]
    fn an_unusable_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("x.lock");
        assert!(try_lock(&path).is_err());
        assert!(try_lock_shared(&path).is_err());
    }
}
