//! Runs on one host are serialized by a lock in the state directory; a plan is written
//! only onto the files it was made from; what a killed run leaves is cleaned up by the
//! next; and after SIGKILL at any moment every file is old or new, never partial.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{docker_host, ok, run};
use edgegpu_node_setup::detect::ModeRequest;
use edgegpu_node_setup::host::HostRoot;
use edgegpu_node_setup::lock::{RunLock, LOCK};
use edgegpu_node_setup::ops::{self, Restarts};
use edgegpu_node_setup::{plan, RuntimeSpec};
use edgegpu_testkit::nodehost::{NodeHost, Snapshot};
use edgegpu_testkit::process::binary_command;

fn spawn(host: &NodeHost, args: &[&str]) -> Child {
    let mut cmd = binary_command(env!("CARGO_BIN_EXE_edgegpu-node-setup"));
    for var in [
        "EDGEGPU_NODE_SETUP_MODE",
        "EDGEGPU_NO_SET_DEFAULT",
        "EDGEGPU_FORCE",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("--root")
        .arg(host.root())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn edgegpu-node-setup")
}

/// Content and mode of every file (mtimes left out).
fn content(s: &Snapshot) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    s.iter()
        .map(|(p, (c, m, _))| (p.clone(), (c.clone(), *m)))
        .collect()
}

fn temp_files(s: &Snapshot) -> Vec<&PathBuf> {
    s.keys()
        .filter(|p| p.to_string_lossy().contains(".edgegpu-tmp."))
        .collect()
}

/// Holds the run lock of `host` (as another run would) until dropped.
fn hold_lock(host: &NodeHost) -> nix::fcntl::Flock<std::fs::File> {
    std::fs::create_dir_all(host.path("/var/lib/edgegpu/node-setup")).unwrap();
    let f = std::fs::File::create(host.path(LOCK)).unwrap();
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap()
}

/// Starts `apply` and returns once it says it waits for the lock, with that line.
fn apply_waiting(host: &NodeHost) -> (Child, String) {
    let mut child = spawn(host, &["apply"]);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the waiting run prints a line");
        if line.contains("waiting for another edgegpu-node-setup run") {
            return (child, line);
        }
    }
}

#[test]
fn a_run_waits_for_the_lock_and_says_so() {
    let host = docker_host();
    let holder = hold_lock(&host);
    let (mut child, waiting) = apply_waiting(&host);
    assert!(
        waiting.contains("/var/lib/edgegpu/node-setup/lock"),
        "{waiting}"
    );
    // Nothing written while it waits.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!host.read("/etc/docker/daemon.json").contains("nvidia"));
    drop(holder);
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(host.read("/etc/docker/daemon.json").contains("nvidia"));
}

#[test]
fn a_run_refused_under_the_lock_leaves_no_state_behind() {
    let host = docker_host();
    let holder = hold_lock(&host);
    let (child, _) = apply_waiting(&host);
    // While it waits, daemon.json becomes one it must refuse.
    host.write(
        "/etc/docker/daemon.json",
        "{\"default-runtime\": \"runc\", \"default-runtime\": \"crun\"}\n",
    );
    drop(holder);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let left: Vec<PathBuf> = host
        .snapshot()
        .into_keys()
        .filter(|p| p.starts_with("var/lib/edgegpu"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn options(host: &NodeHost, set_default: bool) -> plan::Options {
    plan::Options {
        host: HostRoot::new(host.root()),
        mode: ModeRequest::Auto,
        spec: RuntimeSpec {
            name: "nvidia".into(),
            path: "/usr/bin/nvidia-container-runtime".into(),
            set_default,
        },
        force: false,
        k3s_version: None,
    }
}

#[test]
fn a_plan_made_before_another_run_wrote_is_not_written() {
    let host = docker_host();
    let stale = plan::build(&options(&host, false), false).unwrap();
    // Another run applies in between.
    ok(&host, &["apply"]);
    let after_other = host.snapshot();
    let opts = options(&host, false);
    let lock = RunLock::acquire(&opts.host, &mut |_| {}).unwrap();
    let err = ops::apply(&stale, &opts.host, Restarts::Skip("test"), &lock).unwrap_err();
    drop(lock);
    assert!(
        err.to_string().contains("changed since it was planned"),
        "{err}"
    );
    assert_eq!(
        content(&after_other),
        content(&host.snapshot()),
        "the other run's files, backups and manifest are untouched"
    );
    // And a revert still goes back to the state before the other run.
    let before = docker_host();
    ok(&host, &["revert"]);
    let strip = |h: &NodeHost| content(&h.snapshot());
    assert_eq!(strip(&before), strip(&host));
}

#[test]
fn temporary_files_left_by_a_killed_run_are_removed_by_the_next() {
    let host = docker_host();
    host.write("/etc/docker/.daemon.json.edgegpu-tmp.424242", "{\"half\": ")
        .write(
            "/var/lib/edgegpu/node-setup/.manifest.json.edgegpu-tmp.424242",
            "{",
        )
        .write("/etc/docker/.keep.me", "not ours");
    ok(&host, &["apply"]);
    let snap = host.snapshot();
    assert!(temp_files(&snap).is_empty(), "{:?}", temp_files(&snap));
    assert!(host.exists("/etc/docker/.keep.me"));
}

#[test]
fn concurrent_runs_are_serialized_and_revert_restores_the_original() {
    let host = docker_host();
    let original = content(&host.snapshot());
    let children: Vec<Child> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                spawn(&host, &["apply"])
            } else {
                spawn(&host, &["--no-set-default", "apply"])
            }
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ok(&host, &["revert"]);
    assert_eq!(original, content(&host.snapshot()));
}

/// Kills `apply` with SIGKILL after `delay` and returns whether it was still running.
fn kill_after(host: &NodeHost, delay: Duration) -> bool {
    let mut child = spawn(host, &["apply"]);
    let start = Instant::now();
    while start.elapsed() < delay {
        std::hint::spin_loop();
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let alive = matches!(child.try_wait(), Ok(None));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    child.wait().unwrap();
    alive
}

#[test]
fn after_sigkill_at_any_moment_every_file_is_old_or_new() {
    // The files apply writes, before and after a complete run.
    let reference = docker_host();
    let old = content(&reference.snapshot());
    let started = Instant::now();
    ok(&reference, &["apply"]);
    let full_run = started.elapsed();
    let new = content(&reference.snapshot());
    let written: Vec<&PathBuf> = new.keys().filter(|p| old.get(*p) != new.get(*p)).collect();
    assert!(written.len() >= 5, "{written:?}");
    // Kill points spread over the run; the first third is mostly the process starting.
    // Fewer under qemu-user (EDGEGPU_TEST_RUNNER), where each run is much slower.
    let points = if std::env::var_os("EDGEGPU_TEST_RUNNER").is_some() {
        24
    } else {
        64
    };
    let mut interrupted = 0;
    let mut partial = 0;
    for i in 0..points {
        let host = docker_host();
        let delay = full_run.mul_f64(0.2 + 0.9 * i as f64 / points as f64);
        if kill_after(&host, delay) {
            interrupted += 1;
        }
        let now = content(&host.snapshot());
        let done = written
            .iter()
            .filter(|p| now.get(**p) == new.get(**p))
            .count();
        if done > 0 && done < written.len() {
            partial += 1;
        }
        for path in old.keys().chain(new.keys()) {
            if path.to_string_lossy().contains("/backups/") || path.ends_with("lock") {
                continue;
            }
            let here = now.get(path);
            assert!(
                here == old.get(path) || here == new.get(path),
                "kill after {delay:?}: {} is neither old nor new",
                path.display()
            );
        }
        // The next run finishes the job and leaves no temporary file; revert restores
        // the original.
        ok(&host, &["apply"]);
        let done = host.snapshot();
        assert!(temp_files(&done).is_empty(), "{:?}", temp_files(&done));
        assert_eq!(run(&host, &["check"]).code, 0);
        ok(&host, &["revert"]);
        assert_eq!(old, content(&host.snapshot()), "kill after {delay:?}");
    }
    assert!(interrupted > 0, "no kill landed while apply ran");
    eprintln!(
        "{interrupted}/{points} kills landed while apply was running, {partial} between two writes (full run {full_run:?})"
    );
}
