//! The companion, `edgegpu-device-plugin mps-control-daemon`: runs one
//! `nvidia-cuda-mps-control -f` per entry of the plugin's `daemons.json`, with that entry's
//! default limits; restarts a daemon that dies or stops answering (backing off up to 30 s);
//! replaces a daemon whose settings changed once its clients are gone (MPS applies defaults
//! to new servers only, and a daemon told to `quit` waits for its clients); and on SIGTERM
//! asks every daemon to quit. It reports each daemon in `<resource>/status.json`.
//!
//! In a container it runs chrooted into the host (`--root`), so the host's driver binaries
//! and libraries run as on the host, and with `<mps-root>/shm` over `/dev/shm` in a private
//! mount namespace: the daemon and every client container share that directory and nothing
//! else of the host's shared memory ([`isolate`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use std::sync::Arc;

use nvml_wrapper::Nvml;

use super::compute_mode;
use super::control::Control;
use super::plan::DaemonSettings;
use super::status::{self, Desired, State, Status};
use super::MpsPaths;

/// How often a ready daemon is asked whether it still answers.
const PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a fresh daemon may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long SIGTERM waits for each daemon to quit (one with clients drains them after we
/// exit: on a host it outlives us, in a container the runtime stops it with us).
const QUIT_WAIT: Duration = Duration::from_secs(5);

/// What the companion needs: where the files are and which binary to run (both as seen
/// after [`isolate`]).
#[derive(Debug, Clone)]
pub struct Options {
    pub mps_root: PathBuf,
    /// `nvidia-cuda-mps-control`, or why the host has none.
    pub binary: Result<PathBuf, String>,
    /// The host's NVML, for discrete GPUs' compute mode (`None` on a Jetson without NVML).
    pub nvml: Option<Arc<Nvml>>,
}

/// Runs the companion until `shutdown` resolves.
pub async fn run(
    options: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let root = options.mps_root.clone();
    {
        let root = root.clone();
        tokio::task::spawn_blocking(move || prepare_root(&root)).await??;
    }
    let mut changes = watch_desired(&root)?;
    match &options.binary {
        Ok(binary) => {
            tracing::info!(binary = %binary.display(), mps_root = %root.display(), "MPS control daemon companion started")
        }
        Err(why) => tracing::error!("{why}; every MPS daemon is refused"),
    }
    let mut running: BTreeMap<String, Supervisor> = BTreeMap::new();
    tokio::pin!(shutdown);
    loop {
        let desired = {
            let root = root.clone();
            tokio::task::spawn_blocking(move || status::read_desired(&root)).await?
        };
        match desired {
            Ok(desired) => reconcile(&options, &mut running, desired.unwrap_or_default()),
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

/// Creates `--mps-root` and the shared-memory directory every client may write to.
fn prepare_root(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(root)?;
    let shm = MpsPaths::new(root, "").shm;
    std::fs::create_dir_all(&shm)?;
    // Sticky and world-writable, as /dev/shm is: MPS clients of any user create segments.
    std::fs::set_permissions(&shm, std::fs::Permissions::from_mode(0o1777))
}

/// Events on `root` (the plugin's `daemons.json` replaced or removed), as a channel.
fn watch_desired(root: &Path) -> anyhow::Result<tokio::sync::mpsc::Receiver<()>> {
    use futures_util::StreamExt;
    use inotify::{Inotify, WatchMask};
    let inotify = Inotify::init()?;
    inotify.watches().add(
        root,
        WatchMask::MOVED_TO | WatchMask::CLOSE_WRITE | WatchMask::DELETE | WatchMask::CREATE,
    )?;
    let mut stream = inotify.into_event_stream([0u8; 1024])?;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            let relevant = match &event {
                Ok(e) => e.name.as_deref().is_some_and(|n| n == status::DESIRED_FILE),
                Err(_) => false,
            };
            if relevant && tx.try_send(()).is_err() && tx.is_closed() {
                return;
            }
        }
    });
    Ok(rx)
}

/// Starts, keeps or stops supervisors so that exactly `desired` runs.
fn reconcile(options: &Options, running: &mut BTreeMap<String, Supervisor>, desired: Desired) {
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
        let paths = MpsPaths::new(&options.mps_root, &name);
        tracing::info!(resource = %name, commands = ?settings.commands(), "starting an MPS control daemon");
        running.insert(
            name,
            Supervisor::start(
                settings,
                paths,
                options.binary.clone(),
                options.nvml.clone(),
            ),
        );
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
        paths: MpsPaths,
        binary: Result<PathBuf, String>,
        nvml: Option<Arc<Nvml>>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(supervise(settings.clone(), paths, binary, nvml, stopped));
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

/// Reports `state` for the daemon (a failure to write is logged: the plugin then keeps the
/// devices unhealthy, which is the safe side).
async fn report(paths: &MpsPaths, status: Status) {
    let path = paths.status.clone();
    let result = tokio::task::spawn_blocking(move || status::write(&path, &status)).await;
    if let Ok(Err(e)) | Err(e) = result.map_err(std::io::Error::other) {
        tracing::warn!("cannot write {}: {e}", paths.status.display());
    }
}

async fn supervise(
    settings: DaemonSettings,
    paths: MpsPaths,
    binary: Result<PathBuf, String>,
    nvml: Option<Arc<Nvml>>,
    mut stop: watch::Receiver<bool>,
) {
    match binary {
        Ok(binary) => {
            let exclusive = exclusive_gpus(&settings, nvml.clone()).await;
            keep_running(&settings, &paths, &binary, &mut stop).await;
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
            let refused = Status {
                state: State::Refused,
                reason: Some(why),
                pid: None,
                restarts: 0,
                settings: settings.clone(),
            };
            report(&paths, refused).await;
            stopped(&mut stop).await;
        }
    }
    status_gone(&paths).await;
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
    paths: &MpsPaths,
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
    let control = Control::new(binary, paths);
    let mut restarts = 0u64;
    let mut backoff = Duration::from_secs(1);
    loop {
        report(paths, status(State::Starting, None, None, restarts)).await;
        if let Err(e) = prepare_dirs(paths).await {
            let why = format!("cannot create the MPS directories: {e}");
            tracing::error!(resource = %resource, "{why}");
            report(paths, status(State::Failed, Some(why), None, restarts)).await;
        } else if wait_for_previous(paths, stop, |why| {
            report(paths, status(State::Starting, Some(why), None, restarts))
        })
        .await
        {
            match start(&control, settings).await {
                Ok(mut child) => {
                    let pid = child.id();
                    tracing::info!(resource = %resource, pid = ?pid, "MPS control daemon ready");
                    report(paths, status(State::Ready, None, pid, restarts)).await;
                    backoff = Duration::from_secs(1);
                    let why = loop {
                        tokio::select! {
                            exit = child.wait() => break match exit {
                                Ok(s) => format!("the MPS control daemon exited ({s})"),
                                Err(e) => format!("waiting for the MPS control daemon: {e}"),
                            },
                            _ = stopped(stop) => {
                                quit(&control, child, &resource).await;
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
                    report(paths, status(State::Failed, Some(why), None, restarts)).await;
                }
                Err(why) => {
                    tracing::error!(resource = %resource, "{why}");
                    restarts += 1;
                    report(paths, status(State::Failed, Some(why), None, restarts)).await;
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

async fn status_gone(paths: &MpsPaths) {
    let path = paths.status.clone();
    let _ = tokio::task::spawn_blocking(move || status::remove(&path)).await;
}

/// The pipe and log directories (clients of any user reach the daemon's sockets).
async fn prepare_dirs(paths: &MpsPaths) -> std::io::Result<()> {
    let (pipe, log) = (paths.pipe.clone(), paths.log.clone());
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::PermissionsExt;
        for dir in [&pipe, &log] {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Waits while the daemon of an earlier run still holds the pipe directory (its pid file
/// names a live process): told to quit, it serves its clients until they exit. Returns
/// `false` when asked to stop meanwhile.
async fn wait_for_previous<F, Fut>(
    paths: &MpsPaths,
    stop: &mut watch::Receiver<bool>,
    mut waiting: F,
) -> bool
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let pid_file = paths.pipe.join("nvidia-cuda-mps-control.pid");
    let mut told = false;
    loop {
        let pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
            .filter(|pid| {
                *pid > 0 && nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), None).is_ok()
            });
        let Some(pid) = pid else { return true };
        if !told {
            let why = format!(
                "waiting for the previous MPS control daemon (pid {pid}) to exit: it serves clients started under other settings"
            );
            tracing::info!("{why}");
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

/// Spawns the daemon, waits until it answers, applies `settings` and checks them back.
async fn start(
    control: &Control,
    settings: &DaemonSettings,
) -> Result<tokio::process::Child, String> {
    let mut child = control
        .daemon()
        .spawn()
        .map_err(|e| format!("cannot start the MPS control daemon: {e}"))?;
    forward_output(&mut child);
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(exit)) = child.try_wait() {
            return Err(format!("the MPS control daemon exited at start ({exit})"));
        }
        if control.answers().await {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(format!(
                "the MPS control daemon did not answer within {}s; killed",
                START_TIMEOUT.as_secs()
            ));
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
                return Err(format!(
                    "the daemon answers `{answer}` to `{query}` after being set to {expected}"
                ));
            }
        }
        Ok(())
    };
    if let Err(why) = applied.await {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Err(format!("setting the MPS defaults failed: {why}"));
    }
    Ok(child)
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
/// to drain them (never killed: that would break running pods).
async fn quit(control: &Control, mut child: tokio::process::Child, resource: &str) {
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
            });
        }
    }
}

/// The companion's view of the host in a container: a private mount namespace in which
/// `<root>/<mps-root>/shm` covers `<root>/dev/shm` (so the daemon's shared memory is the
/// directory clients get as `/dev/shm`, not the host's), then `chroot(root)`. With `root`
/// `/` (a host install) only the `/dev/shm` cover. Needs CAP_SYS_ADMIN and CAP_SYS_CHROOT;
/// call it before any thread starts (a mount namespace is per process only then).
pub fn isolate(
    root: &Path,
    mps_root: &Path,
    private_shm: bool,
    chroot: bool,
) -> anyhow::Result<()> {
    use anyhow::Context;
    use nix::mount::{mount, MsFlags};
    let under = |p: &Path| crate::gpu::under_root(root, &p.to_string_lossy());
    if private_shm {
        let shm = under(&MpsPaths::new(mps_root, "").shm);
        std::fs::create_dir_all(&shm).with_context(|| format!("creating {}", shm.display()))?;
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
            .context("unshare(CLONE_NEWNS) for a private /dev/shm (needs CAP_SYS_ADMIN; --mps-private-shm=false to skip)")?;
        // Nothing mounted here may reach the host.
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .context("making the mounts private")?;
        let target = under(Path::new("/dev/shm"));
        mount(
            Some(&shm),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .with_context(|| format!("bind-mounting {} on {}", shm.display(), target.display()))?;
    }
    if chroot && root != Path::new("/") {
        std::os::unix::fs::chroot(root)
            .with_context(|| format!("chroot({}) (needs CAP_SYS_CHROOT)", root.display()))?;
        std::env::set_current_dir("/")?;
    }
    Ok(())
}
