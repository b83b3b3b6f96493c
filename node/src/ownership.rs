//! One allocator per device kind on a node. The device plugin (extended resources) and the
//! DRA driver (ResourceClaims) each hand devices to pods without knowing about the other; if
//! both served the same GPU, the scheduler would count it twice and two pods could get it.
//! So whichever program serves a kind first holds an exclusive `flock(2)` on
//! `<dir>/<kind>.lock` (by default `/run/edgegpu/gpu.lock`, a tmpfs: locks never outlive a
//! boot), and the other does not serve that kind while it is held. The kernel drops the lock
//! when its holder exits, however it exits, so a crashed holder never blocks the next one.
//! The file's text names the holder, for the other program's message.
//!
//! The DRA driver holds its kinds shared ([`Holding::Shared`]) rather than exclusively: during
//! a rolling update of its DaemonSet two of its pods run on the node at once, one allocator
//! with one checkpoint (docs/dra.md, "Rolling updates"), and the new pod must serve the kinds
//! from its start or the kubelet, which calls the newest pod, would find no device there. The
//! device plugin's exclusive lock keeps them all out, and any of them keeps the plugin out.

use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use edgegpu_host::flock::{self, TryLock};

/// Where the lock files live unless `--ownership-dir` says otherwise: a tmpfs both programs
/// (and both DaemonSets, as a hostPath) see.
pub const DEFAULT_DIR: &str = "/run/edgegpu";

/// The kinds of device that are allocated as a whole by one program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// GPUs and their MIG devices (`nvidia.com/gpu`, `nvidia.com/mig-*`, shared replicas).
    Gpu,
    /// Jetson deep-learning accelerator cores.
    Dla,
    /// Jetson programmable vision accelerators.
    Pva,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 3] = [DeviceKind::Gpu, DeviceKind::Dla, DeviceKind::Pva];

    /// The kind's name in lock files, flags and messages.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Dla => "dla",
            DeviceKind::Pva => "pva",
        }
    }

    /// The kind named `name` (`gpu`, `dla`, `pva`).
    pub fn from_name(name: &str) -> Option<DeviceKind> {
        DeviceKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// DLA cores and PVA instances are allocated as their own kinds.
impl From<crate::engines::EngineKind> for DeviceKind {
    fn from(kind: crate::engines::EngineKind) -> Self {
        match kind {
            crate::engines::EngineKind::Dla => DeviceKind::Dla,
            crate::engines::EngineKind::Pva => DeviceKind::Pva,
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a program holds the kinds it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Alone: no other process holds the kind (the device plugin).
    Exclusive,
    /// Together with other instances of the same program, which share one allocator's state
    /// (the DRA driver's pods during a rolling update); never beside an exclusive holder.
    Shared,
}

/// This process serves `kind` on this node until the value is dropped (or the process exits).
#[derive(Debug)]
pub struct Ownership {
    kind: DeviceKind,
    _lock: flock::Held,
}

impl Ownership {
    pub fn kind(&self) -> DeviceKind {
        self.kind
    }
}

/// The answer of [`try_own`].
#[derive(Debug)]
pub enum Owned {
    /// This process now serves the kind.
    Yes(Ownership),
    /// Another process does: what its lock file says (`edgegpu-dra-driver pid 4242`).
    HeldBy { path: PathBuf, holder: String },
}

/// Takes `kind` for `holder` (the program's name) without waiting, exclusively. Errors are
/// I/O errors on the directory or file (not "someone else has it", which is
/// [`Owned::HeldBy`]).
pub fn try_own(dir: &Path, kind: DeviceKind, holder: &str) -> std::io::Result<Owned> {
    try_own_as(dir, kind, holder, Holding::Exclusive)
}

/// [`try_own`] with the [`Holding`] of the program. A shared holder rewrites the file's text
/// too: it names one of the instances, which is all a message needs.
pub fn try_own_as(
    dir: &Path,
    kind: DeviceKind,
    holder: &str,
    holding: Holding,
) -> std::io::Result<Owned> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{}.lock", kind.name()));
    let tried = match holding {
        Holding::Exclusive => flock::try_lock(&path)?,
        Holding::Shared => flock::try_lock_shared(&path)?,
    };
    match tried {
        TryLock::Locked(mut lock) => {
            lock.set_len(0)?;
            lock.seek(SeekFrom::Start(0))?;
            writeln!(lock, "{holder} pid {}", std::process::id())?;
            Ok(Owned::Yes(Ownership { kind, _lock: lock }))
        }
        TryLock::Busy(mut file) => {
            let mut text = String::new();
            // Best effort: the holder may be between truncating and writing its name.
            let _ = file.read_to_string(&mut text);
            let holder = match text.trim() {
                "" => "another process".to_string(),
                t => t.to_string(),
            };
            Ok(Owned::HeldBy { path, holder })
        }
    }
}

/// The message for a kind another program serves.
pub fn held_message(kind: DeviceKind, path: &Path, holder: &str) -> String {
    format!(
        "the {kind} devices of this node are served by {holder} (it holds {}); not serving them \
         here, since two allocators would give one device to two pods. Run either the device \
         plugin or the DRA driver for {kind} on a node (docs/dra.md, \"The device plugin and \
         the DRA driver on one node\"); this program takes them over when the other stops",
        path.display()
    )
}

/// How often a program that lacks a kind checks whether it has become free.
pub const TAKEOVER_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// The kinds one program holds, and the ones it is waiting for.
#[derive(Debug)]
pub struct Ownerships {
    /// `None`: ownership is off (`--ownership-dir ""`), every kind counts as held.
    dir: Option<PathBuf>,
    holder: &'static str,
    holding: Holding,
    held: std::collections::BTreeMap<DeviceKind, Ownership>,
    /// Kinds whose holder was already reported (once per holder, not every poll).
    reported: std::collections::BTreeMap<DeviceKind, String>,
}

impl Ownerships {
    /// `holder` is the program's name, written into the lock files. Kinds are held
    /// exclusively unless [`Ownerships::shared_among_instances`] says otherwise.
    pub fn new(dir: Option<PathBuf>, holder: &'static str) -> Self {
        Ownerships {
            dir,
            holder,
            holding: Holding::Exclusive,
            held: Default::default(),
            reported: Default::default(),
        }
    }

    /// Holds the kinds shared ([`Holding::Shared`]): other instances of this program may
    /// hold them at the same time.
    pub fn shared_among_instances(mut self) -> Self {
        self.holding = Holding::Shared;
        self
    }

    /// Whether this program may serve `kind`.
    pub fn holds(&self, kind: DeviceKind) -> bool {
        self.dir.is_none() || self.held.contains_key(&kind)
    }

    /// Tries to take every kind of `wanted` not held yet (one non-blocking `flock` each on a
    /// tmpfs: no I/O worth moving off the caller's thread). A kind someone else holds is
    /// reported once, as an error; an unusable directory is an error.
    pub fn acquire(&mut self, wanted: &[DeviceKind]) -> anyhow::Result<()> {
        let Some(dir) = self.dir.clone() else {
            return Ok(());
        };
        for &kind in wanted {
            if self.held.contains_key(&kind) {
                continue;
            }
            match try_own_as(&dir, kind, self.holder, self.holding) {
                Ok(Owned::Yes(ownership)) => {
                    if self.reported.remove(&kind).is_some() {
                        tracing::info!("took over the {kind} devices of this node");
                    }
                    self.held.insert(kind, ownership);
                }
                Ok(Owned::HeldBy { path, holder }) => {
                    if self.reported.get(&kind) != Some(&holder) {
                        tracing::error!("{}", held_message(kind, &path, &holder));
                        self.reported.insert(kind, holder);
                    }
                }
                Err(e) => anyhow::bail!(
                    "cannot lock {}: {e} (--ownership-dir must be a writable directory shared with the other edgegpu programs of this node)",
                    dir.join(format!("{kind}.lock")).display()
                ),
            }
        }
        Ok(())
    }

    /// The kinds of `wanted` this program does not hold.
    pub fn missing(&self, wanted: &[DeviceKind]) -> Vec<DeviceKind> {
        let mut missing: Vec<DeviceKind> =
            wanted.iter().copied().filter(|k| !self.holds(*k)).collect();
        missing.sort();
        missing.dedup();
        missing
    }

    /// Completes once one of `wanted`'s missing kinds has been taken over (polling every
    /// [`TAKEOVER_POLL`]); never when nothing is missing or on an error (logged).
    pub async fn take_over(&mut self, wanted: &[DeviceKind]) -> Takeover {
        loop {
            let missing = self.missing(wanted);
            if missing.is_empty() {
                return std::future::pending().await;
            }
            tokio::time::sleep(TAKEOVER_POLL).await;
            // Who held them, as their lock file said when last seen (acquire forgets it).
            let holders = self.reported.clone();
            if let Err(e) = self.acquire(&missing) {
                tracing::error!("{e:#}");
                continue;
            }
            if let Some(kind) = missing.into_iter().find(|k| self.holds(*k)) {
                return Takeover {
                    kind,
                    previous_holder: holders.get(&kind).cloned(),
                };
            }
        }
    }
}

/// A kind of device this program now holds, and who held it before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    pub kind: DeviceKind,
    /// The previous holder's lock-file text (`edgegpu-dra-driver pid 42`), where it was read.
    pub previous_holder: Option<String>,
}

impl std::fmt::Display for Takeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.previous_holder {
            Some(holder) => write!(f, "took over the {} devices {holder} served", self.kind),
            None => write!(f, "took over the {} devices", self.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_lock_goes_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = match try_own(dir.path(), DeviceKind::Gpu, "edgegpu-dra-driver").unwrap() {
            Owned::Yes(o) => o,
            other => panic!("{other:?}"),
        };
        assert_eq!(first.kind(), DeviceKind::Gpu);
        // flock locks belong to the open file description: a second open in this process
        // conflicts just as another process's would.
        match try_own(dir.path(), DeviceKind::Gpu, "edgegpu-device-plugin").unwrap() {
            Owned::HeldBy { path, holder } => {
                assert_eq!(path, dir.path().join("gpu.lock"));
                assert_eq!(
                    holder,
                    format!("edgegpu-dra-driver pid {}", std::process::id())
                );
                let message = held_message(DeviceKind::Gpu, &path, &holder);
                assert!(message.contains("gpu.lock") && message.contains("edgegpu-dra-driver"));
            }
            other => panic!("{other:?}"),
        }
        // Another kind is free.
        assert!(matches!(
            try_own(dir.path(), DeviceKind::Dla, "edgegpu-device-plugin").unwrap(),
            Owned::Yes(_)
        ));
        drop(first);
        match try_own(dir.path(), DeviceKind::Gpu, "edgegpu-device-plugin").unwrap() {
            Owned::Yes(_) => {}
            other => panic!("{other:?}"),
        }
        let text = std::fs::read_to_string(dir.path().join("gpu.lock")).unwrap();
        assert_eq!(
            text,
            format!("edgegpu-device-plugin pid {}\n", std::process::id())
        );
    }

    #[test]
    fn ownerships_hold_report_and_take_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut dra = Ownerships::new(Some(dir.path().into()), "edgegpu-dra-driver");
        dra.acquire(&[DeviceKind::Gpu]).unwrap();
        assert!(dra.holds(DeviceKind::Gpu) && !dra.holds(DeviceKind::Dla));
        let mut plugin = Ownerships::new(Some(dir.path().into()), "edgegpu-device-plugin");
        plugin.acquire(&[DeviceKind::Gpu, DeviceKind::Dla]).unwrap();
        assert!(!plugin.holds(DeviceKind::Gpu) && plugin.holds(DeviceKind::Dla));
        assert_eq!(
            plugin.missing(&[DeviceKind::Gpu, DeviceKind::Dla, DeviceKind::Gpu]),
            vec![DeviceKind::Gpu]
        );
        drop(dra);
        plugin.acquire(&[DeviceKind::Gpu]).unwrap();
        assert!(plugin.holds(DeviceKind::Gpu));
        // Off: everything counts as held.
        let off = Ownerships::new(None, "x");
        assert!(off.holds(DeviceKind::Pva));
        assert!(off.missing(&DeviceKind::ALL).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn take_over_completes_when_the_holder_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = Ownerships::new(Some(dir.path().into()), "first");
        first.acquire(&[DeviceKind::Gpu]).unwrap();
        let mut second = Ownerships::new(Some(dir.path().into()), "second");
        second.acquire(&[DeviceKind::Gpu]).unwrap();
        let waiting =
            tokio::time::timeout(TAKEOVER_POLL * 3, second.take_over(&[DeviceKind::Gpu])).await;
        assert!(waiting.is_err(), "taken over while held");
        drop(first);
        let taken = tokio::time::timeout(TAKEOVER_POLL * 2, second.take_over(&[DeviceKind::Gpu]))
            .await
            .expect("taken over after the holder went");
        assert_eq!(taken.kind, DeviceKind::Gpu);
        assert!(second.holds(DeviceKind::Gpu));
        // The message names whoever held them, not a program assumed to.
        let first_pid = format!("first pid {}", std::process::id());
        assert_eq!(taken.previous_holder.as_deref(), Some(first_pid.as_str()));
        assert_eq!(
            taken.to_string(),
            format!("took over the gpu devices {first_pid} served")
        );
    }

    /// Two DRA driver instances (a rolling update) hold a kind together; the device plugin
    /// gets it only once both are gone, and while it has it neither gets it back.
    #[test]
    fn shared_holders_serve_together_and_exclude_an_exclusive_one() {
        let dir = tempfile::tempdir().unwrap();
        let dra = || {
            Ownerships::new(Some(dir.path().into()), "edgegpu-dra-driver").shared_among_instances()
        };
        let (mut old, mut new) = (dra(), dra());
        old.acquire(&[DeviceKind::Gpu]).unwrap();
        new.acquire(&[DeviceKind::Gpu]).unwrap();
        assert!(old.holds(DeviceKind::Gpu) && new.holds(DeviceKind::Gpu));
        let mut plugin = Ownerships::new(Some(dir.path().into()), "edgegpu-device-plugin");
        plugin.acquire(&[DeviceKind::Gpu]).unwrap();
        assert!(!plugin.holds(DeviceKind::Gpu));
        drop(old);
        plugin.acquire(&[DeviceKind::Gpu]).unwrap();
        assert!(
            !plugin.holds(DeviceKind::Gpu),
            "the new instance still holds it"
        );
        drop(new);
        plugin.acquire(&[DeviceKind::Gpu]).unwrap();
        assert!(plugin.holds(DeviceKind::Gpu));
        let mut late = dra();
        late.acquire(&[DeviceKind::Gpu]).unwrap();
        assert!(!late.holds(DeviceKind::Gpu), "the plugin holds it alone");
    }

    #[test]
    fn kinds_by_name() {
        for kind in DeviceKind::ALL {
            assert_eq!(DeviceKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(DeviceKind::from_name("tpu"), None);
        // An engine is allocated as its own kind, by the same name.
        for engine in [
            crate::engines::EngineKind::Dla,
            crate::engines::EngineKind::Pva,
        ] {
            assert_eq!(DeviceKind::from(engine).name(), engine.name());
        }
    }

    #[test]
    fn an_unusable_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "").unwrap();
        assert!(try_own(&file, DeviceKind::Gpu, "x").is_err());
    }
}
