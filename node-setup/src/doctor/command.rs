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

/// Runs `argv` (not through a shell), keeping at most `max_bytes` of each stream.
pub fn run(argv: &[&str], timeout: Duration, max_bytes: u64) -> std::io::Result<Ran> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(max_bytes).read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait()? {
            Some(status) => break Some(status),
            None if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    Ok(Ran {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
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
        let slow = run(&["sleep", "10"], Duration::from_millis(100), 1024).unwrap();
        assert!(slow.status.is_none());
        let big = run(
            &["sh", "-c", "head -c 100000 /dev/zero"],
            Duration::from_secs(10),
            10,
        )
        .unwrap();
        assert_eq!(big.stdout.len(), 10);
        assert!(run(&["/nonexistent/program"], Duration::from_secs(1), 10).is_err());
    }
}
