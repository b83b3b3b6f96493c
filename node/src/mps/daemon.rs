//! The companion, `edgegpu-device-plugin mps-control-daemon`: runs one
//! `nvidia-cuda-mps-control -f` per entry of the plugin's `desired/daemons.json`, with that
//! entry's default limits; restarts a daemon that dies or stops answering (backing off up to
//! 30 s); replaces a daemon whose settings changed once its clients are gone (MPS applies
//! defaults to new servers only, and a daemon told to `quit` waits for its clients); and on
//! SIGTERM asks every daemon to quit. It reports each daemon in `<resource>/status.json`.
//!
//! In a container it runs chrooted into the host (`--root`), so the host's driver binaries
//! and libraries run as on the host, in a private mount namespace in which each daemon gets
//! its resource's `shm/` as `/dev/shm`: a daemon and its clients share that directory and
//! nothing else of the host's, or another resource's, shared memory ([`isolate`]).
//!
//! The companion is privileged and the MPS root is not only its own: the plugin writes
//! `desired/`, client pods write their `pipe/` and `shm/`. So every file there is reached
//! through [`beneath`] (no link followed, bounded non-blocking reads), `daemons.json` is
//! validated before use, and a pid file is believed only when it names a control daemon on
//! this resource's pipe directory (docs/security.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use nvml_wrapper::Nvml;

use super::beneath::{BeneathError, Dir};
use super::compute_mode;
use super::control::{CommandError, Control, SpawnError};
use super::plan::{DaemonSettings, Readback};
use super::status::{self, Desired, State, Status};
use super::support::NoControlBinary;
use super::{MpsPaths, LOG_DIR, PIPE_DIR, SHM_DIR};

/// How often a ready daemon is asked whether it still answers.
const PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a fresh daemon may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long SIGTERM waits for each daemon to quit (one with clients drains them after we
/// exit: on a host it outlives us, in a container the runtime stops it with us).
const QUIT_WAIT: Duration = Duration::from_secs(5);

/// The longest pid file read (a number and a newline).
const PID_FILE_BYTES: u64 = 32;
/// The longest `/proc/<pid>/environ` read when checking a pid file's process.
const ENVIRON_BYTES: u64 = 256 * 1024;

/// What the companion needs: where the files are and which binary to run (both as seen
/// after [`isolate`]).
#[derive(Debug, Clone)]
pub struct Options {
    pub mps_root: PathBuf,
    /// `nvidia-cuda-mps-control`, or why the host has none.
    pub binary: Result<PathBuf, NoControlBinary>,
    /// The host's NVML, for discrete GPUs' compute mode (`None` on a Jetson without NVML).
    pub nvml: Option<Arc<Nvml>>,
    /// Give each daemon its resource's `shm/` as `/dev/shm` (in a mount namespace of its
    /// own; needs CAP_SYS_ADMIN and [`isolate`] with `private_shm`).
    pub private_shm: bool,
}

/// The daemons this companion started and has not reaped yet, by resource: a replaced
/// daemon drains its clients while the next one for the resource waits for it.
type Live = Arc<Mutex<BTreeMap<String, u32>>>;

/// Runs the companion until `shutdown` resolves.
pub async fn run(
    options: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let root = options.mps_root.clone();
    let held = {
        let root = root.clone();
        Arc::new(tokio::task::spawn_blocking(move || prepare_root(&root)).await??)
    };
    let mut changes = watch_desired(&root)?;
    match &options.binary {
        Ok(binary) => {
            tracing::info!(binary = %binary.display(), mps_root = %root.display(), "MPS control daemon companion started")
        }
        Err(why) => tracing::error!("{why}; every MPS daemon is refused"),
    }
    let live: Live = Arc::default();
    let mut running: BTreeMap<String, Supervisor> = BTreeMap::new();
    tokio::pin!(shutdown);
    loop {
        let desired = {
            let held = held.clone();
            tokio::task::spawn_blocking(move || status::read_desired_in(&held)).await?
        };
        match desired.map(Option::unwrap_or_default) {
            Ok(desired) => match desired.validate() {
                Ok(()) => reconcile(&options, &held, &live, &mut running, desired),
                Err(e) => tracing::warn!(
                    "{}: {e}; keeping the daemons as they are",
                    status::desired_path(&root).display()
                ),
            },
            Err(e) => tracing::warn!("{e}; keeping the daemons as they are"),
        }
        tokio::select! {
            _ = &mut shutdown => break,
            event = changes.recv() => if event.is_none() {
                anyhow::bail!("the watch on {} ended", root.display());
            },
        }
    }
    tracing::info!("Stopping {} MPS control daemon(s)", running.len());
    let stopping: Vec<_> = running.into_values().map(Supervisor::stop).collect();
    for task in stopping {
        let _ = task.await;
    }
    Ok(())
}

/// Creates `--mps-root` (a trusted path) and the plugin's folder in it, and holds the root
/// open: everything beneath is reached through it.
fn prepare_root(root: &Path) -> anyhow::Result<Dir> {
    std::fs::create_dir_all(root)?;
    let held = Dir::open(root)?;
    // In a container the plugin's folder is a read-only mount here already; on a host the
    // companion may be first.
    if held.open_dir(status::DESIRED_DIR)?.is_none() {
        held.create_dir_all(status::DESIRED_DIR, 0o755)?;
    }
    Ok(held)
}

/// Events on the plugin's folder (its `daemons.json` replaced or removed, or the folder
/// itself replaced), as a channel. Links are not followed.
fn watch_desired(root: &Path) -> anyhow::Result<tokio::sync::mpsc::Receiver<()>> {
    use futures_util::StreamExt;
    use inotify::{Inotify, WatchMask};
    let folder = root.join(status::DESIRED_DIR);
    let file_events = WatchMask::MOVED_TO
        | WatchMask::CLOSE_WRITE
        | WatchMask::DELETE
        | WatchMask::CREATE
        | WatchMask::DONT_FOLLOW
        | WatchMask::ONLYDIR;
    let inotify = Inotify::init()?;
    inotify.watches().add(
        root,
        WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::DELETE | WatchMask::ONLYDIR,
    )?;
    inotify.watches().add(&folder, file_events)?;
    let mut stream = inotify.into_event_stream([0u8; 1024])?;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            let name = match &event {
                Ok(e) => e.name.as_deref().map(|n| n.to_os_string()),
                Err(_) => None,
            };
            let relevant = match name.as_deref().and_then(|n| n.to_str()) {
                Some(status::DESIRED_FILE) => true,
                Some(status::DESIRED_DIR) => {
                    // A new folder: watch it instead (a link or a file is refused).
                    let _ = stream.watches().add(&folder, file_events);
                    true
                }
                _ => false,
            };
            if relevant && tx.try_send(()).is_err() && tx.is_closed() {
                return;
            }
        }
    });
    Ok(rx)
}

/// Starts, keeps or stops supervisors so that exactly `desired` (validated) runs.
fn reconcile(
    options: &Options,
    root: &Arc<Dir>,
    live: &Live,
    running: &mut BTreeMap<String, Supervisor>,
    desired: Desired,
) {
    let wanted: BTreeMap<String, DaemonSettings> = desired
        .daemons
        .into_iter()
        .map(|d| (d.resource.clone(), d))
        .collect();
    let stale: Vec<String> = running
        .iter()
        .filter(|(name, s)| wanted.get(*name) != Some(&s.settings))
        .map(|(name, _)| name.clone())
        .collect();
    for name in stale {
        if let Some(s) = running.remove(&name) {
            tracing::info!(resource = %name, "MPS settings changed or removed: stopping its daemon");
            // Not awaited: the daemon drains its clients while the new one waits for it.
            drop(s.stop());
        }
    }
    for (name, settings) in wanted {
        if running.contains_key(&name) {
            continue;
        }
        let binary = match unknown_gpus(&settings, options.nvml.as_deref()) {
            Some(why) => Err(why),
            None => options.binary.clone().map_err(Refusal::from),
        };
        tracing::info!(resource = %name, commands = ?settings.commands(), "starting an MPS control daemon");
        let daemon = Daemon {
            resource: name.clone(),
            paths: MpsPaths::new(&options.mps_root, &name),
            root: root.clone(),
            live: live.clone(),
            private_shm: options.private_shm,
        };
        running.insert(
            name,
            Supervisor::start(settings, daemon, binary, options.nvml.clone()),
        );
    }
}

/// Why `settings` name a GPU this node does not have (NVML's view; without NVML only the
/// form of the names was checked).
fn unknown_gpus(settings: &DaemonSettings, nvml: Option<&Nvml>) -> Option<Refusal> {
    let nvml = nvml?;
    let count = nvml.device_count().unwrap_or(0);
    if let Some(l) = settings
        .pinned_memory_limits
        .iter()
        .find(|l| l.ordinal >= count)
    {
        return Some(Refusal::UnknownOrdinal {
            ordinal: l.ordinal,
            count,
        });
    }
    settings
        .uuids()
        .find(|uuid| nvml.device_by_uuid(*uuid).is_err())
        .map(|uuid| Refusal::UnknownGpu {
            uuid: uuid.to_string(),
        })
}

/// Why the companion does not run a daemon at all (its status says `refused`; not retried).
#[derive(Debug, Clone, thiserror::Error)]
enum Refusal {
    #[error(transparent)]
    MissingBinary(#[from] NoControlBinary),
    /// The settings name a GPU ordinal NVML does not have.
    #[error("GPU ordinal {ordinal} does not exist on this node ({count} GPUs)")]
    UnknownOrdinal { ordinal: u32, count: u32 },
    #[error("GPU {uuid} does not exist on this node")]
    UnknownGpu { uuid: String },
}

/// One resource's daemon: its paths, the MPS root it is reached through, and what it
/// shares with the other supervisors.
struct Daemon {
    /// The resource name (validated): also its folder beneath the root.
    resource: String,
    paths: MpsPaths,
    root: Arc<Dir>,
    live: Live,
    private_shm: bool,
}

impl Daemon {
    fn resource(&self) -> String {
        self.resource.clone()
    }
}

/// One daemon's supervising task.
struct Supervisor {
    settings: DaemonSettings,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Supervisor {
    fn start(
        settings: DaemonSettings,
        daemon: Daemon,
        binary: Result<PathBuf, Refusal>,
        nvml: Option<Arc<Nvml>>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(supervise(settings.clone(), daemon, binary, nvml, stopped));
        Supervisor {
            settings,
            stop,
            task,
        }
    }

    /// Asks the daemon to quit; the task ends once it did (or [`QUIT_WAIT`] passed).
    fn stop(self) -> tokio::task::JoinHandle<()> {
        let _ = self.stop.send(true);
        self.task
    }
}

/// Reports `state` for the daemon in its resource folder (a failure to write is logged:
/// the plugin then keeps the devices unhealthy, which is the safe side).
async fn report(folder: &Arc<Dir>, status: Status) {
    let dir = folder.clone();
    let result = tokio::task::spawn_blocking(move || status::write_in(&dir, &status)).await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cannot write the MPS status: {e}"),
        Err(e) => tracing::warn!("cannot write the MPS status: {e}"),
    }
}

/// The resource's folder beneath the MPS root, created where missing; `None` (logged) when
/// something planted there makes it unusable.
async fn resource_folder(daemon: &Daemon) -> Option<Arc<Dir>> {
    let (root, resource) = (daemon.root.clone(), daemon.resource());
    let opened = tokio::task::spawn_blocking(move || root.create_dir_all(&resource, 0o755)).await;
    match opened {
        Ok(Ok(dir)) => Some(Arc::new(dir)),
        Ok(Err(e)) => {
            tracing::error!(resource = %daemon.resource(), "cannot use the resource's MPS folder: {e}; its daemon is not started");
            None
        }
        Err(e) => {
            tracing::error!("{e}");
            None
        }
    }
}

async fn supervise(
    settings: DaemonSettings,
    daemon: Daemon,
    binary: Result<PathBuf, Refusal>,
    nvml: Option<Arc<Nvml>>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(folder) = resource_folder(&daemon).await else {
        stopped(&mut stop).await;
        return;
    };
    match binary {
        Ok(binary) => {
            let exclusive = exclusive_gpus(&settings, nvml.clone()).await;
            keep_running(&settings, &daemon, &folder, &binary, &mut stop).await;
            if let (Some(nvml), Some(exclusive)) = (nvml, exclusive) {
                let problems =
                    tokio::task::spawn_blocking(move || compute_mode::restore(&nvml, exclusive))
                        .await
                        .unwrap_or_default();
                for p in problems {
                    tracing::warn!(resource = %settings.resource, "{p}");
                }
            }
        }
        Err(why) => {
            tracing::error!(resource = %settings.resource, "MPS daemon refused: {why}");
            let refused = Status {
                state: State::Refused,
                reason: Some(why.to_string()),
                pid: None,
                restarts: 0,
                settings: settings.clone(),
            };
            report(&folder, refused).await;
            stopped(&mut stop).await;
        }
    }
    let _ = tokio::task::spawn_blocking(move || status::remove_in(&folder)).await;
}

/// Puts the daemon's discrete GPUs in `EXCLUSIVE_PROCESS` ([`compute_mode`]); `None` when
/// there are none or NVML is missing (logged: MPS then works without that fence).
async fn exclusive_gpus(
    settings: &DaemonSettings,
    nvml: Option<Arc<Nvml>>,
) -> Option<compute_mode::Exclusive> {
    if settings.exclusive_gpus.is_empty() {
        return None;
    }
    let Some(nvml) = nvml else {
        tracing::warn!(
            resource = %settings.resource,
            "NVML is not available: the GPUs stay in their compute mode, and a process that leaves MPS escapes its limits"
        );
        return None;
    };
    let uuids = settings.exclusive_gpus.clone();
    let (exclusive, problems) =
        tokio::task::spawn_blocking(move || compute_mode::enter(&nvml, &uuids))
            .await
            .ok()?;
    for p in problems {
        tracing::warn!(resource = %settings.resource, "{p}; a process that leaves MPS escapes its limits");
    }
    tracing::info!(resource = %settings.resource, gpus = ?settings.exclusive_gpus, "GPUs in EXCLUSIVE_PROCESS compute mode while MPS serves them");
    Some(exclusive)
}

/// Starts the daemon and keeps it running (restarting it with backoff) until `stop`.
async fn keep_running(
    settings: &DaemonSettings,
    daemon: &Daemon,
    folder: &Arc<Dir>,
    binary: &Path,
    stop: &mut watch::Receiver<bool>,
) {
    let resource = settings.resource.clone();
    let status = |state: State, reason: Option<String>, pid: Option<u32>, restarts: u64| Status {
        state,
        reason,
        pid,
        restarts,
        settings: settings.clone(),
    };
    let mut restarts = 0u64;
    let mut backoff = Duration::from_secs(1);
    loop {
        report(folder, status(State::Starting, None, None, restarts)).await;
        match prepare_dirs(folder, daemon.private_shm).await {
            Err(e) => {
                let why = format!("cannot create the MPS directories: {e}");
                tracing::error!(resource = %resource, "{why}");
                report(folder, status(State::Failed, Some(why), None, restarts)).await;
            }
            Ok(shm) => {
                let control = Control::new(binary, &daemon.paths, shm);
                if wait_for_previous(daemon, folder, binary, stop, |why| {
                    report(folder, status(State::Starting, Some(why), None, restarts))
                })
                .await
                {
                    match start(&control, settings, daemon).await {
                        Ok((mut child, live)) => {
                            let pid = child.id();
                            tracing::info!(resource = %resource, pid = ?pid, "MPS control daemon ready");
                            report(folder, status(State::Ready, None, pid, restarts)).await;
                            backoff = Duration::from_secs(1);
                            let why = loop {
                                tokio::select! {
                                    exit = child.wait() => break match exit {
                                        Ok(s) => format!("the MPS control daemon exited ({s})"),
                                        Err(e) => format!("waiting for the MPS control daemon: {e}"),
                                    },
                                    _ = stopped(stop) => {
                                        quit(&control, child, live, &resource).await;
                                        return;
                                    }
                                    _ = tokio::time::sleep(PROBE_INTERVAL) => {
                                        if !control.answers().await {
                                            let _ = child.start_kill();
                                            let _ = child.wait().await;
                                            break "the MPS control daemon stopped answering; killed".to_string();
                                        }
                                    }
                                }
                            };
                            tracing::error!(resource = %resource, "{why}; restarting it");
                            restarts += 1;
                            report(folder, status(State::Failed, Some(why), None, restarts)).await;
                        }
                        Err(why) => {
                            tracing::error!(resource = %resource, "{why}");
                            restarts += 1;
                            let why = why.to_string();
                            report(folder, status(State::Failed, Some(why), None, restarts)).await;
                        }
                    }
                }
            }
        }
        let stopping = *stop.borrow();
        if stopping {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stopped(stop) => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Resolves once the supervisor is asked to stop (the borrow guard never crosses an await).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Why the daemon's directories could not be made.
#[derive(Debug, thiserror::Error)]
enum DirsError {
    #[error(transparent)]
    Beneath(#[from] BeneathError),
    /// The blocking task that makes them panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// The pipe and log directories (clients of any user reach the daemon's sockets) and the
/// shared-memory directory (sticky and world-writable, as `/dev/shm` is: clients of any user
/// create segments), all beneath the resource's folder; returns the shared-memory directory
/// held open when each daemon gets it as `/dev/shm`.
async fn prepare_dirs(folder: &Arc<Dir>, private_shm: bool) -> Result<Option<Arc<Dir>>, DirsError> {
    let folder = folder.clone();
    let made = tokio::task::spawn_blocking(move || -> Result<_, BeneathError> {
        folder.create_dir_all(PIPE_DIR, 0o755)?;
        folder.create_dir_all(LOG_DIR, 0o755)?;
        let shm = folder.create_dir_all(SHM_DIR, 0o1777)?;
        Ok(private_shm.then(|| Arc::new(shm)))
    })
    .await??;
    Ok(made)
}

/// Waits while an earlier daemon still holds the resource's pipe directory: one this
/// companion started and has not reaped (told to quit, it serves its clients until they
/// exit), or one an earlier run left whose pid file names a live process that really is
/// `binary` serving this pipe directory. Anything else in the pid file (a pod can write
/// there) is ignored. Returns `false` when asked to stop meanwhile.
async fn wait_for_previous<F, Fut>(
    daemon: &Daemon,
    folder: &Arc<Dir>,
    binary: &Path,
    stop: &mut watch::Receiver<bool>,
    mut waiting: F,
) -> bool
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let resource = daemon.resource();
    let mut told = false;
    loop {
        let ours = daemon
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&resource)
            .copied();
        let pid = match ours {
            Some(pid) => Some(pid),
            None => {
                let (folder, binary, pipe) = (
                    folder.clone(),
                    binary.to_path_buf(),
                    daemon.paths.pipe.clone(),
                );
                tokio::task::spawn_blocking(move || earlier_daemon(&folder, &binary, &pipe))
                    .await
                    .unwrap_or(None)
            }
        };
        let Some(pid) = pid else { return true };
        if !told {
            let why = format!(
                "waiting for the previous MPS control daemon (pid {pid}) to exit: it serves clients started under other settings"
            );
            tracing::info!(resource = %resource, "{why}");
            waiting(why).await;
            told = true;
        }
        // Short: a replaced daemon with no clients goes within milliseconds of its `quit`.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = stopped(stop) => return false,
        }
    }
}

/// The pid in the pipe directory's pid file, if it names a live control daemon of this
/// pipe directory: the process runs `binary` (same file: device and inode of
/// `/proc/<pid>/exe`) with `CUDA_MPS_PIPE_DIRECTORY` set to `pipe`. The file is read as a
/// bounded regular file, never through a link, never blocking. Blocking.
fn earlier_daemon(folder: &Dir, binary: &Path, pipe: &Path) -> Option<u32> {
    let text = folder
        .open_dir(PIPE_DIR)
        .ok()??
        .read_file(super::control::PID_FILE, PID_FILE_BYTES)
        .ok()??;
    let pid: u32 = std::str::from_utf8(&text).ok()?.trim().parse().ok()?;
    if pid <= 1 {
        return None;
    }
    is_control_daemon(pid, binary, pipe).then_some(pid)
}

/// Whether process `pid` runs `binary` on the pipe directory `pipe`. Blocking.
pub fn is_control_daemon(pid: u32, binary: &Path, pipe: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let (Ok(exe), Ok(wanted)) = (
        std::fs::metadata(proc_dir.join("exe")),
        std::fs::metadata(binary),
    ) else {
        return false;
    };
    if (exe.dev(), exe.ino()) != (wanted.dev(), wanted.ino()) {
        return false;
    }
    let Ok(Some(environ)) = super::beneath::read_file(&proc_dir.join("environ"), ENVIRON_BYTES)
    else {
        return false;
    };
    let entry = format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display());
    environ.split(|b| *b == 0).any(|e| e == entry.as_bytes())
}

/// A daemon this companion started, listed in [`Live`] until dropped (once reaped).
struct LiveDaemon {
    live: Live,
    resource: String,
    pid: u32,
}

impl Drop for LiveDaemon {
    fn drop(&mut self) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.get(&self.resource) == Some(&self.pid) {
            live.remove(&self.resource);
        }
    }
}

/// Why a daemon did not start ready with its settings (reported as `failed`, then retried).
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("the MPS control daemon exited at start ({0})")]
    ExitedAtStart(std::process::ExitStatus),
    #[error("the MPS control daemon did not answer within {}s; killed", .0.as_secs())]
    NoAnswer(Duration),
    #[error("setting the MPS defaults failed: {0}")]
    Defaults(#[source] DefaultsError),
}

/// Why the daemon's default limits are not what was asked.
#[derive(Debug, thiserror::Error)]
enum DefaultsError {
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The daemon took the command but answers another value.
    #[error("the daemon answers `{answer}` to `{query}` after being set to {expected}")]
    ReadBack {
        query: String,
        answer: String,
        expected: Readback,
    },
}

/// Spawns the daemon, waits until it answers, applies `settings` and checks them back.
async fn start(
    control: &Control,
    settings: &DaemonSettings,
    daemon: &Daemon,
) -> Result<(tokio::process::Child, Option<LiveDaemon>), StartError> {
    let mut child = control.spawn_daemon()?;
    let live = child.id().map(|pid| {
        let resource = daemon.resource();
        daemon
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(resource.clone(), pid);
        LiveDaemon {
            live: daemon.live.clone(),
            resource,
            pid,
        }
    });
    forward_output(&mut child);
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(exit)) = child.try_wait() {
            return Err(StartError::ExitedAtStart(exit));
        }
        if control.answers().await {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(StartError::NoAnswer(START_TIMEOUT));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let applied = async {
        for command in settings.commands() {
            control.send(&command).await?;
        }
        for (query, expected) in settings.readback() {
            let answer = control.send(&query).await?;
            if !expected.accepts(&answer) {
                return Err(DefaultsError::ReadBack {
                    query,
                    answer,
                    expected,
                });
            }
        }
        Ok(())
    };
    if let Err(why) = applied.await {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Err(StartError::Defaults(why));
    }
    Ok((child, live))
}

/// The daemon's own output, line by line, into our log.
fn forward_output(child: &mut tokio::process::Child) {
    if let Some(out) = child.stdout.take() {
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(target: "mps", "{line}");
            }
        });
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::warn!(target: "mps", "{line}");
            }
        });
    }
}

/// `quit`, then wait a little for the daemon to go; one that still serves clients is left
/// to drain them (never killed: that would break running pods), listed as live until then.
async fn quit(
    control: &Control,
    mut child: tokio::process::Child,
    live: Option<LiveDaemon>,
    resource: &str,
) {
    if let Err(e) = control.send("quit").await {
        tracing::warn!(resource = %resource, "{e}");
    }
    match tokio::time::timeout(QUIT_WAIT, child.wait()).await {
        Ok(_) => tracing::info!(resource = %resource, "MPS control daemon stopped"),
        Err(_) => {
            tracing::info!(resource = %resource, "MPS control daemon still serves clients; it exits when they do");
            // Reap it whenever it exits (if we are still running then).
            tokio::spawn(async move {
                let _ = child.wait().await;
                drop(live);
            });
        }
    }
}

/// The companion's view of the host in a container: with `private_shm`, a mount namespace
/// of its own whose mounts propagate nowhere (each daemon then gets its resource's `shm/`
/// over `/dev/shm` in a namespace of its own, [`Control`]); then `chroot(root)`. With `root`
/// `/` (a host install) no chroot. Needs CAP_SYS_ADMIN and CAP_SYS_CHROOT; call it before
/// any thread starts (a mount namespace is per process only then).
pub fn isolate(root: &Path, private_shm: bool, chroot: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    use nix::mount::{mount, MsFlags};
    if private_shm {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
            .context("unshare(CLONE_NEWNS) for the daemons' private /dev/shm (needs CAP_SYS_ADMIN; --mps-private-shm=false to skip)")?;
        // Nothing mounted here may reach the host.
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .context("making the mounts private")?;
    }
    if chroot && root != Path::new("/") {
        std::os::unix::fs::chroot(root)
            .with_context(|| format!("chroot({}) (needs CAP_SYS_CHROOT)", root.display()))?;
        std::env::set_current_dir("/")?;
    }
    Ok(())
}
