//! Talking to `nvidia-cuda-mps-control`: the daemon itself runs as `-f` (foreground, so the
//! companion is its parent and sees it exit), and commands go through a second run of the
//! binary with no arguments, the command on its standard input — the binary's documented
//! user interface, and what NVIDIA's plugin does (`cmd/mps-control-daemon/mps/daemon.go`,
//! `EchoPipeToControl`). Both find the daemon through `CUDA_MPS_PIPE_DIRECTORY`.
//!
//! With a private `/dev/shm`, each run of the binary starts in a mount namespace of its own
//! in which the resource's `shm/` covers `/dev/shm`, so a daemon and the MPS servers it
//! starts share memory with their own clients only.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::beneath::Dir;
use super::MpsPaths;

fn c_string(s: &str) -> CString {
    CString::new(s).expect("no NUL byte")
}

/// The file the daemon writes its process ID to, in the pipe directory.
pub const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// Where a child's standard input is opened from (`Stdio::null`).
const DEV_NULL: &str = "/dev/null";

/// Why the daemon did not start, in words that name the missing file: a bare "No such file
/// or directory" reads as a missing binary when it may be `/dev/null` or the binary's
/// interpreter that is absent. Each keeps the `spawn` error as its source.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The `/dev/null` the daemon's standard input is opened from is missing.
    #[error("cannot start the MPS control daemon: {dev_null} does not exist (the companion runs in the host root, and the daemon's standard input is opened from it)")]
    NoDevNull {
        dev_null: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the MPS control daemon: {binary} does not exist")]
    NoBinary {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not found although the binary and `/dev/null` are there: what `execve` loads next.
    #[error("cannot start the MPS control daemon {binary}: {source} (the binary is there: is its ELF interpreter or a library loader missing from the host root?)")]
    NoInterpreter {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the MPS control daemon {binary}: {source}")]
    Failed {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SpawnError {
    /// Tells the missing files apart after `spawn` failed with `source`.
    fn new(binary: &Path, dev_null: &Path, source: std::io::Error) -> SpawnError {
        let binary = binary.to_path_buf();
        if source.kind() != std::io::ErrorKind::NotFound {
            SpawnError::Failed { binary, source }
        } else if !dev_null.exists() {
            SpawnError::NoDevNull {
                dev_null: dev_null.to_path_buf(),
                source,
            }
        } else if !binary.exists() {
            SpawnError::NoBinary { binary, source }
        } else {
            SpawnError::NoInterpreter { binary, source }
        }
    }
}

/// Why a control command got no answer, or a failing one.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A control character would split the command into several.
    #[error("refusing the control command {command:?}: it holds a control character")]
    ControlCharacter { command: String },
    #[error("cannot run {binary}: {source}")]
    Run {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing to {binary}: {source}")]
    Write {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for {binary}: {source}")]
    Wait {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The binary exited unsuccessfully; `output` is its standard error, or its standard
    /// output when that is empty.
    #[error("`{command}` failed ({status}): {output}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        output: String,
    },
    #[error("`{command}` got no answer in {}s", .waited.as_secs())]
    Timeout { command: String, waited: Duration },
}

/// How long one command may take (the real daemon answers in milliseconds; a hung one must
/// not hang the companion).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// One control daemon's binary and directories.
#[derive(Debug, Clone)]
pub struct Control {
    binary: PathBuf,
    pipe: PathBuf,
    log: PathBuf,
    /// The resource's `shm/`, held open, to cover `/dev/shm` with; `None`: the process's own.
    shm: Option<Arc<Dir>>,
}

impl Control {
    pub fn new(binary: &Path, paths: &MpsPaths, shm: Option<Arc<Dir>>) -> Control {
        Control {
            binary: binary.to_path_buf(),
            pipe: paths.pipe.clone(),
            log: paths.log.clone(),
            shm,
        }
    }

    /// A command for the binary, in its own mount namespace with the resource's `shm/` over
    /// `/dev/shm` where one is held.
    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binary);
        if let Some(shm) = &self.shm {
            let shm_fd = shm.as_fd().as_raw_fd();
            // Built before the fork: the child may only make system calls.
            let (here, dev_shm, slash) = (c_string("."), c_string("/dev/shm"), c_string("/"));
            // SAFETY: the closure runs in the forked child before exec and only makes the
            // fchdir, unshare, mount and chdir system calls on strings allocated before the
            // fork (no allocation, no lock); the descriptor is held open by `self.shm` for as
            // long as the command exists and is inherited across the fork. The bind mount's
            // source is reached through that descriptor (the working directory), never by
            // a path someone could replace, and needs no /proc.
            unsafe {
                command.pre_exec(move || {
                    nix::unistd::fchdir(shm_fd)?;
                    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
                    nix::mount::mount(
                        Some(here.as_c_str()),
                        dev_shm.as_c_str(),
                        None::<&std::ffi::CStr>,
                        nix::mount::MsFlags::MS_BIND,
                        None::<&std::ffi::CStr>,
                    )?;
                    nix::unistd::chdir(slash.as_c_str())?;
                    Ok(())
                });
            }
        }
        command
    }

    /// The environment of the daemon and of every command: the pipe and log directories
    /// (no defaults on Tegra: MPS documentation, "Environment Variables"), and CUDA's device
    /// order = PCI bus order, so ordinals name the GPUs NVML indexes the same way.
    fn env(&self, command: &mut tokio::process::Command) {
        command
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log)
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    }

    /// The daemon process, in the foreground, its output captured for our log.
    pub fn daemon(&self) -> tokio::process::Command {
        let mut command = self.command();
        command
            .arg("-f")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        self.env(&mut command);
        command
    }

    /// Starts [`Self::daemon`]. A failure says which file was missing: the binary, the
    /// `/dev/null` its standard input is opened from (inside the host root the companion runs
    /// chrooted in), or, with both there, what `execve` needs beyond the binary (its ELF
    /// interpreter).
    pub fn spawn_daemon(&self) -> Result<tokio::process::Child, SpawnError> {
        self.daemon()
            .spawn()
            .map_err(|e| SpawnError::new(&self.binary, Path::new(DEV_NULL), e))
    }

    /// Sends `command` and returns the daemon's answer (trimmed). An error names the command
    /// and what the binary said.
    pub async fn send(&self, command: &str) -> Result<String, CommandError> {
        // One line: what the daemon's settings carry was validated, and this keeps it so.
        if command.chars().any(char::is_control) {
            return Err(CommandError::ControlCharacter {
                command: command.to_string(),
            });
        }
        let mut ui = self.command();
        ui.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        self.env(&mut ui);
        let run = async {
            let binary = || self.binary.clone();
            let mut child = ui.spawn().map_err(|source| CommandError::Run {
                binary: binary(),
                source,
            })?;
            let mut stdin = child.stdin.take().expect("stdin is piped");
            stdin
                .write_all(format!("{command}\n").as_bytes())
                .await
                .map_err(|source| CommandError::Write {
                    binary: binary(),
                    source,
                })?;
            drop(stdin);
            let output = child
                .wait_with_output()
                .await
                .map_err(|source| CommandError::Wait {
                    binary: binary(),
                    source,
                })?;
            let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
            if output.status.success() {
                Ok(stdout)
            } else {
                let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
                Err(CommandError::Failed {
                    command: command.to_string(),
                    status: output.status,
                    output: if stderr.is_empty() { stdout } else { stderr },
                })
            }
        };
        match tokio::time::timeout(COMMAND_TIMEOUT, run).await {
            Ok(result) => result,
            Err(_) => Err(CommandError::Timeout {
                command: command.to_string(),
                waited: COMMAND_TIMEOUT,
            }),
        }
    }

    /// Whether a daemon answers on the pipe directory (NVIDIA's health probe command).
    pub async fn answers(&self) -> bool {
        self.send("get_default_active_thread_percentage")
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_start_names_the_file_that_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, dev_null) = (dir.path().join("mps-control"), dir.path().join("null"));
        let not_found = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = SpawnError::new(&binary, &dev_null, not_found());
        assert!(
            matches!(&e, SpawnError::NoDevNull { dev_null: d, .. } if *d == dev_null),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "cannot start the MPS control daemon: {} does not exist (the companion runs in \
                 the host root, and the daemon's standard input is opened from it)",
                dev_null.display()
            )
        );
        std::fs::write(&dev_null, "").unwrap();
        let e = SpawnError::new(&binary, &dev_null, not_found());
        assert!(
            matches!(&e, SpawnError::NoBinary { binary: b, .. } if *b == binary),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "cannot start the MPS control daemon: {} does not exist",
                binary.display()
            )
        );
        std::fs::write(&binary, "").unwrap();
        let e = SpawnError::new(&binary, &dev_null, not_found());
        assert!(matches!(e, SpawnError::NoInterpreter { .. }), "{e:?}");
        assert!(e.to_string().contains("ELF interpreter"), "{e}");
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = SpawnError::new(&binary, &dev_null, denied);
        let message = e.to_string();
        assert!(
            message.starts_with("cannot start the MPS control daemon /"),
            "{message}"
        );
        assert!(message.contains("permission denied"), "{message}");
        let source = std::error::Error::source(&e).expect("the spawn error is the source");
        assert_eq!(source.to_string(), "permission denied");
    }

    /// Through the real `spawn`: this host has `/dev/null`, so a missing binary is named
    /// as such (not as "No such file or directory").
    #[tokio::test]
    async fn spawning_a_missing_binary_names_it() {
        // Under qemu-user a failed exec of the child is not reported to the parent (glibc's
        // posix_spawn learns of it through memory shared with a CLONE_VM|CLONE_VFORK child,
        // which qemu runs as a plain fork): `spawn` succeeds there whatever the path.
        if std::env::var_os(edgegpu_testkit::process::RUNNER_ENV).is_some() {
            eprintln!("skipped: spawn errors are not seen under an emulator");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("nvidia-cuda-mps-control");
        let control = Control::new(&binary, &MpsPaths::new(dir.path(), "nvidia.com/gpu"), None);
        let e = control.spawn_daemon().unwrap_err();
        assert!(
            matches!(&e, SpawnError::NoBinary { binary: b, .. } if *b == binary),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn a_command_with_a_control_character_is_refused_before_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::new(
            &dir.path().join("nvidia-cuda-mps-control"),
            &MpsPaths::new(dir.path(), "nvidia.com/gpu"),
            None,
        );
        let e = control
            .send("quit\nset_default_active_thread_percentage 100")
            .await
            .unwrap_err();
        assert!(
            matches!(&e, CommandError::ControlCharacter { command } if command.starts_with("quit\n")),
            "{e:?}"
        );
        // Another error would have been `cannot run …`: the binary does not exist.
        assert!(
            e.to_string().starts_with("refusing the control command"),
            "{e}"
        );
    }
}
