//! Running a host command for the doctor (`kubectl get node`, the bundle's logs): no stdin,
//! both pipes drained by threads (a full pipe cannot stall it), each bounded, and a time limit
//! past which it is killed.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a command printed and how it ended.
pub struct Ran {
    /// `None`: killed at the time limit.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

/// How long a killed command's output is still waited for (a process stuck in the kernel,
/// a grandchild holding the pipes).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// Runs `argv` (not through a shell) in a process group of its own, keeping at most
/// `max_bytes` of each stream. Past `timeout` the whole group is killed; nothing here waits
/// longer than `timeout` plus [`AFTER_KILL`].
pub fn run(argv: &[&str], timeout: Duration, max_bytes: u64) -> std::io::Result<Ran> {
    use std::os::unix::process::CommandExt;
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let drain = |pipe: Option<Box<dyn Read + Send>>, which: u8| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(max_bytes).read_to_end(&mut bytes);
            }
            let _ = tx.send((which, String::from_utf8_lossy(&bytes).into_owned()));
        });
    };
    drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        0,
    );
    drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        1,
    );
    let start = Instant::now();
    let mut deadline = start + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            // Reaped if it dies in time; a process stuck in the kernel is left to init.
            let reap_by = Instant::now() + AFTER_KILL;
            while Instant::now() < reap_by && child.try_wait()?.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            deadline = Instant::now();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The pipes close when the group is gone; a holder that survived is not waited for.
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let collect_by = deadline.max(Instant::now()) + AFTER_KILL;
    for _ in 0..2 {
        let left = collect_by.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((0, text)) => stdout = text,
            Ok((_, text)) => stderr = text,
            Err(_) => break,
        }
    }
    Ok(Ran {
        status,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_status_and_the_time_limit() {
        let ran = run(
            &["sh", "-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(10),
            1024,
        )
        .unwrap();
        assert_eq!(
            (ran.stdout.as_str(), ran.stderr.as_str()),
            ("out\n", "err\n")
        );
        assert_eq!(ran.status.and_then(|s| s.code()), Some(3));
        let t = Instant::now();
        let slow = run(&["sleep", "10"], Duration::from_millis(100), 1024).unwrap();
        assert!(slow.status.is_none());
        // A grandchild holding the pipes is killed with the group, not waited for.
        let held = run(
            &["sh", "-c", "sleep 30 & sleep 30"],
            Duration::from_millis(100),
            1024,
        )
        .unwrap();
        assert!(held.status.is_none());
        assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
        let big = run(
            &["sh", "-c", "head -c 100000 /dev/zero"],
            Duration::from_secs(10),
            10,
        )
        .unwrap();
        assert_eq!(big.stdout.len(), 10);
        // A program that cannot be started: an error here, or (under qemu-user, where the
        // child reports the failed exec) a failed run.
        let missing = run(&["/nonexistent/program"], Duration::from_secs(1), 10);
        assert!(
            missing
                .as_ref()
                .map_or(true, |r| !r.status.is_some_and(|s| s.success())),
            "{:?}",
            missing.map(|r| r.status)
        );
    }
}
