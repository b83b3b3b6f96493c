//! The fake `nvidia-cuda-mps-control` behaves like the interface the device plugin drives:
//! a daemon (`-f`, `-d`) that answers commands sent through the UI mode, records them, keeps
//! the state the fake libcuda reads, cleans up on `quit` and SIGTERM, refuses a second
//! instance, and crashes or refuses on demand.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use edgegpu_testkit::host::FakeHost;
use edgegpu_testkit::mps::{self, MpsDaemon, MpsState};
use edgegpu_testkit::process::binary_command;

const NO_DAEMON: &str = "Cannot find MPS control daemon process\n";

fn daemon_command(pipe_dir: &Path, log_dir: &Path, flag: &str) -> Command {
    let mut cmd = binary_command(mps::binary());
    cmd.arg(flag)
        .env(mps::PIPE_DIRECTORY_ENV, pipe_dir)
        .env(mps::LOG_DIRECTORY_ENV, log_dir);
    cmd
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn commands_sent_through_the_ui_mode_are_answered_and_recorded() {
    let daemon = MpsDaemon::start();
    let uuid = "GPU-8225d642-a9b1-8191-0d08-79221b703a12";
    let sent = [
        "get_default_active_thread_percentage",
        "set_default_active_thread_percentage 25",
        "set_default_device_pinned_mem_limit 0 2048M",
        "get_default_device_pinned_mem_limit 0",
        &format!("get_default_device_pinned_mem_limit {uuid}"),
        "get_server_list",
    ];
    let output = daemon.control(&sent);
    assert_eq!(output.status, 0, "{output:?}");
    // The set limit has no answer, get_server_list an empty one; the UUID was never set (no
    // translation from the ordinal). A limit is answered in the largest whole unit, as an
    // H100's daemon (driver 580.159.04) answered `4G` for `4096M` and `79G` for `80896M`.
    assert_eq!(
        output.stdout,
        "100.0\n25.0\n2G\nNo default pinned memory limit set for the device!\n"
    );
    assert_eq!(daemon.commands(), sent);
    assert_eq!(
        daemon.state(),
        MpsState {
            active_thread_percentage: Some("25.0".to_string()),
            pinned_mem_limits: vec![("0".to_string(), "2048M".to_string())],
        }
    );
    let log = daemon.log();
    assert!(log.contains(" Control "), "{log}");
    assert!(
        log.contains("] Cmd:set_default_device_pinned_mem_limit 0 2048M\n"),
        "{log}"
    );
}

#[test]
fn the_state_keeps_the_last_limit_per_identifier_in_the_order_set() {
    let daemon = MpsDaemon::start();
    let uuid = "GPU-8225d642-a9b1-8191-0d08-79221b703a12";
    daemon.set_pinned_mem_limit("0", "1G");
    daemon.set_pinned_mem_limit(uuid, "2G");
    daemon.set_pinned_mem_limit("0", "500M");
    let state = daemon.state();
    assert_eq!(
        state.pinned_mem_limits,
        [
            (uuid.to_string(), "2G".to_string()),
            ("0".to_string(), "500M".to_string())
        ]
    );
    assert_eq!(state.pinned_mem_limit("0"), Some("500M"));
    assert_eq!(
        daemon.send(&["get_default_device_pinned_mem_limit 0"]),
        "500M\n"
    );
    daemon.set_pinned_mem_limit("0", "80896M");
    assert_eq!(
        daemon.send(&["get_default_device_pinned_mem_limit 0"]),
        "79G\n"
    );
    daemon.set_pinned_mem_limit("0", "1000M");
    assert_eq!(
        daemon.send(&["get_default_device_pinned_mem_limit 0"]),
        "1000M\n"
    );
    // Not validated, like NVIDIA's: the value is kept verbatim.
    daemon.set_pinned_mem_limit("1", "lots");
    assert_eq!(daemon.state().pinned_mem_limit("1"), Some("lots"));
}

#[test]
fn the_daemons_own_thread_percentage_is_the_default() {
    let daemon = MpsDaemon::start_with_env(&[("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50")]);
    assert_eq!(
        daemon.send(&["get_default_active_thread_percentage"]),
        "50.0\n"
    );
    assert_eq!(
        daemon.state().active_thread_percentage.as_deref(),
        Some("50.0")
    );
}

#[test]
fn quit_removes_socket_and_pid_file_and_exits_0() {
    let mut daemon = MpsDaemon::start();
    let pipe = daemon.pipe_dir().to_path_buf();
    let pid_file = std::fs::read_to_string(pipe.join(mps::PID_FILE)).unwrap();
    assert_eq!(pid_file, format!("{}\n", daemon.pid()));
    let output = daemon.control(&["quit"]);
    assert_eq!((output.status, output.stdout.as_str()), (0, ""));
    assert_eq!(daemon.wait().code(), Some(0));
    assert!(!pipe.join(mps::SOCKET_FILE).exists());
    assert!(!pipe.join(mps::PID_FILE).exists());
    // What tests assert on stays.
    assert_eq!(daemon.commands(), ["quit"]);
    let after = daemon.control(&["get_default_active_thread_percentage"]);
    assert_eq!((after.status, after.stderr.as_str()), (1, NO_DAEMON));
    assert!(daemon.log().contains("] Exit\n"));
}

#[test]
fn sigterm_stops_the_daemon_cleanly() {
    let mut daemon = MpsDaemon::start();
    let pipe = daemon.pipe_dir().to_path_buf();
    assert_eq!(daemon.terminate().code(), Some(0));
    assert!(!pipe.join(mps::SOCKET_FILE).exists());
    assert!(!pipe.join(mps::PID_FILE).exists());
}

#[test]
fn an_injected_crash_exits_3_after_the_nth_command_and_leaves_its_files() {
    let mut daemon = MpsDaemon::start_with_env(&[(mps::EXIT_AFTER_ENV, "2")]);
    let pipe = daemon.pipe_dir().to_path_buf();
    let output = daemon.control(&[
        "set_default_active_thread_percentage 50",
        "get_default_active_thread_percentage",
        "get_server_list",
    ]);
    // Both answers arrived; the third command found no daemon.
    assert_eq!(output.stdout, "50.0\n50.0\n");
    assert_eq!((output.status, output.stderr.as_str()), (1, NO_DAEMON));
    assert_eq!(daemon.wait().code(), Some(mps::CRASH_STATUS));
    assert_eq!(daemon.commands().len(), 2);
    // A crash cleans nothing up: a stale socket nobody accepts on, and the pid file.
    assert!(pipe.join(mps::SOCKET_FILE).exists());
    assert!(pipe.join(mps::PID_FILE).exists());
    assert!(!mps::listening(&pipe));

    // A restarted daemon takes the stale socket over.
    let restarted = MpsDaemon::spawn(
        daemon_command(&pipe, daemon.log_dir(), "-f"),
        pipe.clone(),
        daemon.log_dir().to_path_buf(),
    );
    assert_eq!(
        restarted.send(&["get_default_active_thread_percentage"]),
        "100.0\n",
        "a new daemon starts from the defaults"
    );
}

#[test]
fn a_second_daemon_on_the_same_pipe_directory_is_refused() {
    let daemon = MpsDaemon::start();
    for flag in ["-f", "-d"] {
        let output = daemon_command(daemon.pipe_dir(), daemon.log_dir(), flag)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{flag}: {stderr}");
        assert!(
            stderr.contains("An instance of this daemon is already running"),
            "{flag}: {stderr}"
        );
    }
    // The first one still serves.
    assert_eq!(
        daemon.send(&["get_default_active_thread_percentage"]),
        "100.0\n"
    );
}

#[test]
fn the_refuse_file_makes_every_command_fail() {
    let daemon = MpsDaemon::start();
    mps::set_refuse(daemon.pipe_dir(), true);
    let refused = daemon.control(&["set_default_active_thread_percentage 25"]);
    assert_eq!(refused.status, 1, "{refused:?}");
    assert!(refused.stdout.starts_with("Error: "), "{refused:?}");
    mps::set_refuse(daemon.pipe_dir(), false);
    assert_eq!(
        daemon.send(&["get_default_active_thread_percentage"]),
        "100.0\n",
        "the refused command changed nothing"
    );
    assert_eq!(
        daemon.commands(),
        [
            "set_default_active_thread_percentage 25",
            "get_default_active_thread_percentage"
        ]
    );
}

#[test]
fn unknown_commands_and_bad_arguments_are_errors() {
    let daemon = MpsDaemon::start();
    for command in [
        "start_the_engines",
        "set_default_active_thread_percentage",
        "set_default_active_thread_percentage 0",
        "set_default_active_thread_percentage 101",
        "set_default_device_pinned_mem_limit 0",
    ] {
        let output = daemon.control(&[command]);
        assert_eq!(output.status, 1, "{command}: {output:?}");
        assert!(!output.stdout.is_empty(), "{command}: an error line");
    }
    assert_eq!(
        daemon.state().active_thread_percentage.as_deref(),
        Some("100.0")
    );
}

#[test]
fn the_daemon_needs_pipe_and_log_directories() {
    let dir = tempfile::tempdir().unwrap();
    for (missing, present) in [
        (mps::PIPE_DIRECTORY_ENV, mps::LOG_DIRECTORY_ENV),
        (mps::LOG_DIRECTORY_ENV, mps::PIPE_DIRECTORY_ENV),
    ] {
        let output = binary_command(mps::binary())
            .arg("-f")
            .env_remove(missing)
            .env(present, dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("{missing} is not set")),
            "{stderr}"
        );
    }
}

#[test]
fn ui_mode_without_a_daemon_fails_with_nvidias_message() {
    let dir = tempfile::tempdir().unwrap();
    let output = mps::control(dir.path(), &["get_server_list"]);
    assert_eq!((output.status, output.stderr.as_str()), (1, NO_DAEMON));
    assert_eq!(output.stdout, "");
}

/// Stops a daemon that is not our child (started with `-d`) when a test ends.
struct PidGuard(u32);

impl Drop for PidGuard {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0 as i32);
        // Gone already after a passing test: nothing to do.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
}

#[test]
fn daemonized_mode_returns_once_the_socket_listens() {
    let dir = tempfile::tempdir().unwrap();
    let (pipe, log) = (dir.path().join("pipe"), dir.path().join("log"));
    // output() waits for stdout and stderr to close: the daemon must not keep them open.
    let launcher = daemon_command(&pipe, &log, "-d").output().unwrap();
    assert_eq!(launcher.status.code(), Some(0), "{launcher:?}");
    assert!(mps::listening(&pipe), "listening when -d returns");
    let pid: u32 = std::fs::read_to_string(pipe.join(mps::PID_FILE))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _guard = PidGuard(pid);
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the daemon runs"
    );
    let output = mps::control(&pipe, &["set_default_active_thread_percentage 10", "quit"]);
    assert_eq!((output.status, output.stdout.as_str()), (0, "10.0\n"));
    wait_until("the daemon removes its pid file on quit", || {
        !pipe.join(mps::PID_FILE).exists()
    });
    assert!(!pipe.join(mps::SOCKET_FILE).exists());
}

/// The 64-bit ELF program headers of `path` include no PT_INTERP: no dynamic loader needed.
fn has_interpreter(path: &Path) -> bool {
    let elf = std::fs::read(path).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    assert_eq!(elf[4], 2, "ELFCLASS64");
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 3 // PT_INTERP
    })
}

#[test]
fn the_fake_is_a_static_executable() {
    assert!(
        !has_interpreter(&mps::binary()),
        "{} needs a dynamic loader, which a fake host root lacks",
        mps::binary().display()
    );
}

/// `chroot` as root, else in a user namespace where this system allows one.
fn chroot_command() -> Option<Command> {
    if nix::unistd::geteuid().is_root() {
        return Some(Command::new("chroot"));
    }
    let userns = Command::new("unshare")
        .args(["--user", "--map-root-user", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    userns.then(|| {
        let mut cmd = Command::new("unshare");
        cmd.args(["--user", "--map-root-user", "chroot"]);
        cmd
    })
}

#[test]
fn the_installed_fake_runs_in_a_chroot_of_a_host_root_without_libc() {
    if std::env::var_os(edgegpu_testkit::process::RUNNER_ENV).is_some() {
        eprintln!("skipped: a foreign-architecture binary cannot run in a chroot under qemu-user");
        return;
    }
    let Some(mut cmd) = chroot_command() else {
        eprintln!("skipped: neither root nor user namespaces, so no chroot");
        return;
    };
    let host = FakeHost::empty();
    let installed = host.install_mps_control(mps::HOST_PATH);
    assert!(installed.is_file());
    assert!(!host.path("/lib").exists() && !host.path("/usr/lib").exists());
    cmd.arg(host.root())
        .arg(mps::HOST_PATH)
        .arg("-f")
        .env(mps::PIPE_DIRECTORY_ENV, "/run/nvidia-mps/pipe")
        .env(mps::LOG_DIRECTORY_ENV, "/run/nvidia-mps/log");
    host.mkdir("/run/nvidia-mps");
    let mut daemon = MpsDaemon::spawn(
        cmd,
        host.path("/run/nvidia-mps/pipe"),
        host.path("/run/nvidia-mps/log"),
    );
    daemon.set_pinned_mem_limit("0", "1000M");
    assert_eq!(daemon.state().pinned_mem_limit("0"), Some("1000M"));
    assert_eq!(daemon.terminate().code(), Some(0));
    assert!(!host.path("/run/nvidia-mps/pipe/control").exists());
}
