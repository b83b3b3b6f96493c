//! The fake `nvidia-cuda-mps-control` (`fakes/mps_control.c`, a static executable built by
//! `build.rs`): installing it into a fake host root, starting its daemon for a test, sending
//! commands through its UI mode, and reading what it recorded.
//!
//! The daemon records every command in `<pipe>/fake-mps-commands` and keeps the defaults in
//! force in `<pipe>/fake-mps-state`, which the fake libcuda (`fakes/cuda.c`) reads to enforce
//! them on its MPS clients. The header of `fakes/mps_control.c` has the whole interface.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::host::FakeHost;
use crate::process::binary_command;

/// Where the host's MPS control binary usually is (NVIDIA's packages and L4T's
/// `nvidia-l4t-cuda-utils` install it there).
pub const HOST_PATH: &str = "/usr/bin/nvidia-cuda-mps-control";
/// The file name of the binary.
pub const BINARY_NAME: &str = "nvidia-cuda-mps-control";

pub const PIPE_DIRECTORY_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";
pub const LOG_DIRECTORY_ENV: &str = "CUDA_MPS_LOG_DIRECTORY";
/// Fault injection: the daemon exits with status 3 right after answering this many commands.
pub const EXIT_AFTER_ENV: &str = "EDGEGPU_FAKE_MPS_EXIT_AFTER";

/// The daemon's listening socket in the pipe directory.
pub const SOCKET_FILE: &str = "control";
pub const PID_FILE: &str = "nvidia-cuda-mps-control.pid";
/// Every command the daemon received, one per line (the fake's own file).
pub const COMMANDS_FILE: &str = "fake-mps-commands";
/// The defaults in force (the fake's own file, read by the fake libcuda).
pub const STATE_FILE: &str = "fake-mps-state";
/// While this file exists in the pipe directory, the daemon refuses every command.
pub const REFUSE_FILE: &str = "fake-mps-refuse";

/// The status the fake daemon exits with after [`EXIT_AFTER_ENV`] commands.
pub const CRASH_STATUS: i32 = 3;

/// How long a test waits for the daemon to listen or exit (qemu-user runs are slow).
const PATIENCE: Duration = Duration::from_secs(30);

/// The built fake binary.
pub fn binary() -> PathBuf {
    crate::fakelib::variant_dir("mps-control").join(BINARY_NAME)
}

impl FakeHost {
    /// Copies the fake `nvidia-cuda-mps-control` into this root at `host_path` (e.g.
    /// [`HOST_PATH`]); returns the path of the copy.
    pub fn install_mps_control(&self, host_path: &str) -> PathBuf {
        let target = self.path(host_path);
        std::fs::create_dir_all(target.parent().expect("an absolute host path"))
            .expect("create the binary's directory");
        // fs::copy keeps the permission bits: the copy stays executable.
        std::fs::copy(binary(), &target)
            .unwrap_or_else(|e| panic!("copy the fake MPS control to {}: {e}", target.display()));
        target
    }

    /// Installs the fake at `host_path` so that a program under test can exec it: the binary
    /// itself, or, where the tests run under an emulator ([`crate::process::RUNNER_ENV`]), a
    /// `/bin/sh` script running it through the emulator (the kernel cannot exec a foreign
    /// binary without binfmt_misc). For programs that do not chroot into this root.
    pub fn install_mps_control_runnable(&self, host_path: &str) -> PathBuf {
        let runner = std::env::var(crate::process::RUNNER_ENV).unwrap_or_default();
        if runner.trim().is_empty() {
            return self.install_mps_control(host_path);
        }
        let target = self.path(host_path);
        std::fs::create_dir_all(target.parent().expect("an absolute host path"))
            .expect("create the binary's directory");
        let script = format!("#!/bin/sh\nexec {runner} '{}' \"$@\"\n", binary().display());
        std::fs::write(&target, script).expect("write the wrapper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
            .expect("make the wrapper executable");
        target
    }
}

/// The device plugin's MPS companion (`<plugin binary> mps-control-daemon`) as tests run it
/// against a fake root: no chroot (the root has no libc), no private `/dev/shm` (needs
/// CAP_SYS_ADMIN), its files under `mps_root`, its output discarded.
pub fn companion_command(plugin_binary: &Path, root: &Path, mps_root: &Path) -> Command {
    let mut cmd = binary_command(plugin_binary);
    cmd.arg("mps-control-daemon")
        .arg("--root")
        .arg(root)
        .arg("--chroot=false")
        .arg("--mps-private-shm=false")
        .arg("--mps-root")
        .arg(mps_root)
        .env("EDGEGPU_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// The commands the daemon of `pipe_dir` received so far, in order.
pub fn commands(pipe_dir: &Path) -> Vec<String> {
    match std::fs::read_to_string(pipe_dir.join(COMMANDS_FILE)) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("reading {}: {e}", pipe_dir.join(COMMANDS_FILE).display()),
    }
}

/// The defaults the daemon of a pipe directory has in force (its state file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MpsState {
    /// As the daemon answers it, e.g. `25.0`.
    pub active_thread_percentage: Option<String>,
    /// (device identifier, value as set), the one set last at the end.
    pub pinned_mem_limits: Vec<(String, String)>,
}

impl MpsState {
    /// The value set for exactly this identifier (ordinal or UUID), if any.
    pub fn pinned_mem_limit(&self, device: &str) -> Option<&str> {
        self.pinned_mem_limits
            .iter()
            .find(|(d, _)| d == device)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads the daemon's state file in `pipe_dir` (written when the daemon starts).
pub fn state(pipe_dir: &Path) -> MpsState {
    let path = pipe_dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut state = MpsState::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["default_active_thread_percentage", pct] => {
                state.active_thread_percentage = Some(pct.to_string())
            }
            ["default_device_pinned_mem_limit", device, value] => state
                .pinned_mem_limits
                .push((device.to_string(), value.to_string())),
            _ => panic!("{}: unexpected line {line:?}", path.display()),
        }
    }
    state
}

/// Makes the daemon of `pipe_dir` refuse (true) or accept (false) commands.
pub fn set_refuse(pipe_dir: &Path, refuse: bool) {
    let path = pipe_dir.join(REFUSE_FILE);
    if refuse {
        std::fs::write(&path, "").unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    } else {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("removing {}: {e}", path.display()),
        }
    }
}

/// Whether a daemon accepts connections on `pipe_dir`'s socket.
pub fn listening(pipe_dir: &Path) -> bool {
    UnixStream::connect(pipe_dir.join(SOCKET_FILE)).is_ok()
}

/// What one UI-mode run printed.
#[derive(Debug, Clone)]
pub struct ControlOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the fake in UI mode against `pipe_dir` with `commands` on stdin, one per line, as the
/// device plugin (and NVIDIA's `EchoPipeToControl`) does.
pub fn control(pipe_dir: &Path, commands: &[&str]) -> ControlOutput {
    let mut cmd = binary_command(binary());
    cmd.env(PIPE_DIRECTORY_ENV, pipe_dir);
    control_with(cmd, commands)
}

/// Runs `cmd` (the fake in UI mode, environment set by the caller) with `commands` on stdin.
pub fn control_with(mut cmd: Command, commands: &[&str]) -> ControlOutput {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the fake nvidia-cuda-mps-control in UI mode");
    let mut input = String::new();
    for command in commands {
        input.push_str(command);
        input.push('\n');
    }
    {
        let mut stdin = child.stdin.take().expect("piped stdin");
        // The client may exit early (no daemon): a broken pipe here is its answer, not ours.
        let _ = stdin.write_all(input.as_bytes());
    }
    let output = child.wait_with_output().expect("UI mode finishes");
    ControlOutput {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A fake MPS control daemon (`-f`) running for a test; killed when dropped if still running
/// ([`MpsDaemon::terminate`] stops it the way the plugin does, with SIGTERM).
pub struct MpsDaemon {
    child: Option<Child>,
    pipe_dir: PathBuf,
    log_dir: PathBuf,
    _dir: Option<TempDir>,
}

impl MpsDaemon {
    /// Starts a daemon with pipe and log directories in a fresh temporary directory.
    pub fn start() -> MpsDaemon {
        MpsDaemon::start_with_env(&[])
    }

    /// Like [`MpsDaemon::start`], with extra environment for the daemon (e.g. [`EXIT_AFTER_ENV`]).
    pub fn start_with_env(env: &[(&str, &str)]) -> MpsDaemon {
        let dir = tempfile::Builder::new()
            .prefix("edgegpu-mps-")
            .tempdir()
            .expect("temp dir");
        let (pipe_dir, log_dir) = (dir.path().join("pipe"), dir.path().join("log"));
        let mut cmd = binary_command(binary());
        cmd.arg("-f")
            .env(PIPE_DIRECTORY_ENV, &pipe_dir)
            .env(LOG_DIRECTORY_ENV, &log_dir);
        for (name, value) in env {
            cmd.env(name, value);
        }
        let mut daemon = MpsDaemon::spawn(cmd, pipe_dir, log_dir);
        daemon._dir = Some(dir);
        daemon
    }

    /// Starts `cmd` (a daemon in the foreground, set up by the caller: e.g. run in a chroot)
    /// and waits until it listens on `pipe_dir` as this process sees it.
    pub fn spawn(mut cmd: Command, pipe_dir: PathBuf, log_dir: PathBuf) -> MpsDaemon {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the fake MPS control daemon");
        let mut daemon = MpsDaemon {
            child: Some(child),
            pipe_dir,
            log_dir,
            _dir: None,
        };
        let started = Instant::now();
        while !listening(&daemon.pipe_dir) {
            if let Some(status) = daemon.child_mut().try_wait().expect("try_wait") {
                let stderr = daemon.stderr();
                panic!(
                    "the fake MPS control daemon exited ({status}) before listening on {}: {stderr}",
                    daemon.pipe_dir.display()
                );
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the fake MPS control daemon did not listen on {} within {PATIENCE:?}",
                daemon.pipe_dir.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the daemon was started")
    }

    /// What the daemon wrote on stderr (only complete once it exited).
    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut stderr) = self.child_mut().stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        }
        text
    }

    pub fn pipe_dir(&self) -> &Path {
        &self.pipe_dir
    }

    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon was started").id()
    }

    /// Sends `commands` through the UI mode.
    pub fn control(&self, commands: &[&str]) -> ControlOutput {
        control(&self.pipe_dir, commands)
    }

    /// Sends `commands` and panics unless the UI mode exits 0; returns its stdout.
    pub fn send(&self, commands: &[&str]) -> String {
        let output = self.control(commands);
        assert_eq!(
            output.status, 0,
            "fake MPS control {commands:?}: {} {}",
            output.stdout, output.stderr
        );
        output.stdout
    }

    /// `set_default_device_pinned_mem_limit <device> <value>`, as the plugin sends it.
    pub fn set_pinned_mem_limit(&self, device: &str, value: &str) {
        self.send(&[&format!(
            "set_default_device_pinned_mem_limit {device} {value}"
        )]);
    }

    /// `set_default_active_thread_percentage <pct>`.
    pub fn set_active_thread_percentage(&self, percentage: u32) {
        self.send(&[&format!(
            "set_default_active_thread_percentage {percentage}"
        )]);
    }

    pub fn commands(&self) -> Vec<String> {
        commands(&self.pipe_dir)
    }

    pub fn state(&self) -> MpsState {
        state(&self.pipe_dir)
    }

    /// The daemon's `control.log`.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_dir.join("control.log")).unwrap_or_default()
    }

    /// Waits for the daemon to exit by itself (after `quit`, or an injected crash).
    pub fn wait(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child_mut().try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the fake MPS control daemon did not exit within {PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        if self.child_mut().try_wait().expect("try_wait").is_none() {
            crate::process::terminate(self.pid());
        }
        self.wait()
    }
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                // SIGKILL, not SIGTERM: a failing test must not hang on a wedged daemon.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
