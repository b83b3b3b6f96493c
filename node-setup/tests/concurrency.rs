//! Runs on one host are serialized by a lock in the state directory; a plan is written
//! only onto the files it was made from; what a killed run leaves is cleaned up by the
//! next; and after SIGKILL at every rename and fsync of every write (injected by strace,
//! so each point is hit on every run) every file is old or new, never partial.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{docker_host, ok, run};
use edgegpu_host::root::HostRoot;
use edgegpu_node_setup::detect::ModeRequest;
use edgegpu_node_setup::lock::{RunLock, LOCK};
use edgegpu_node_setup::ops::{self, Restarts};
use edgegpu_node_setup::{plan, RuntimeSpec};
use edgegpu_testkit::nodehost::{NodeHost, Snapshot};
use edgegpu_testkit::process::binary_command;

fn spawn(host: &NodeHost, args: &[&str]) -> Child {
    let mut cmd = binary_command(common::node_setup_binary());
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
    let waiting = loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.contains("waiting for another edgegpu-node-setup run") => {
                break Some(line)
            }
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    match waiting {
        Some(line) => (child, line),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the waiting run never said it waits for the lock");
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
        cdi: false,
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

/// Files named like node-setup's temporary files that are not ours: another name
/// pattern, a directory, a symlink. No run removes them.
const FOREIGN: [&str; 5] = [
    "/etc/docker/.keep.me",
    "/etc/docker/.daemon.json.edgegpu-tmp.",
    "/etc/docker/.daemon.json.edgegpu-tmp.12ab",
    "/etc/docker/daemon.json.edgegpu-tmp.77",
    "/etc/docker/.edgegpu-tmp.78",
];

#[test]
fn temporary_files_left_by_a_killed_run_are_removed_by_the_next() {
    let host = docker_host();
    host.write("/etc/docker/.daemon.json.edgegpu-tmp.424242", "{\"half\": ")
        .write(
            "/var/lib/edgegpu/node-setup/.manifest.json.edgegpu-tmp.424242",
            "{",
        );
    for f in FOREIGN {
        host.write(f, "not ours");
    }
    std::fs::create_dir_all(host.path("/etc/docker/.x.edgegpu-tmp.79")).unwrap();
    host.symlink("/etc/docker/.y.edgegpu-tmp.80", "/etc/docker/daemon.json");
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let snap = host.snapshot();
    let left: Vec<String> = temp_files(&snap)
        .iter()
        .map(|p| format!("/{}", p.display()))
        .collect();
    assert!(
        left.iter().all(|p| FOREIGN.contains(&p.as_str())
            || p.ends_with(".x.edgegpu-tmp.79")
            || p.ends_with(".y.edgegpu-tmp.80")),
        "{left:?}"
    );
    // Said before (the plan's notes) and when done (the log).
    for f in [
        "/etc/docker/.daemon.json.edgegpu-tmp.424242",
        "/var/lib/edgegpu/node-setup/.manifest.json.edgegpu-tmp.424242",
    ] {
        assert!(
            out.stdout.contains(&format!(
                "note: {f} is a temporary file an interrupted edgegpu-node-setup run (pid 424242) left"
            )),
            "{}",
            out.stdout
        );
        assert!(
            out.stderr.contains(&format!(
                "removed {f}: a temporary file an interrupted edgegpu-node-setup run (pid 424242) left"
            )),
            "{}",
            out.stderr
        );
    }
    for f in FOREIGN {
        assert_eq!(host.read(f), "not ours", "{f}");
    }
    assert!(host.path("/etc/docker/.x.edgegpu-tmp.79").is_dir());
    assert!(host.is_symlink("/etc/docker/.y.edgegpu-tmp.80"));
}

#[test]
fn temporary_files_where_an_earlier_apply_wrote_are_removed_too() {
    // A revert killed while it put k3s's unit back left its temporary file there, after
    // restoring daemon.json: the next apply writes only daemon.json, and still removes
    // the file the manifest's other directory holds.
    let host = docker_host();
    let original = host.read("/etc/docker/daemon.json");
    ok(&host, &["apply"]);
    host.write("/etc/docker/daemon.json", &original).write(
        "/etc/systemd/system/.k3s.service.edgegpu-tmp.4343",
        "[Unit]\n",
    );
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("wrote /etc/docker/daemon.json"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("wrote /etc/systemd"), "{}", out.stdout);
    assert!(!host.exists("/etc/systemd/system/.k3s.service.edgegpu-tmp.4343"));
    assert!(
        out.stderr
            .contains("removed /etc/systemd/system/.k3s.service.edgegpu-tmp.4343"),
        "{}",
        out.stderr
    );
    // With nothing to change, apply writes nothing, removes nothing, and says what is left.
    host.write("/etc/docker/.daemon.json.edgegpu-tmp.4444", "{");
    let out = run(&host, &["apply"]);
    assert!(out.stdout.contains("already configured"), "{}", out.stdout);
    assert!(
        out.stdout.contains("note: /etc/docker/.daemon.json.edgegpu-tmp.4444 is a temporary file an interrupted edgegpu-node-setup run (pid 4444) left"),
        "{}",
        out.stdout
    );
    // revert removes it.
    ok(&host, &["revert"]);
    assert!(!host.exists("/etc/docker/.daemon.json.edgegpu-tmp.4444"));
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

/// The system calls where a kill is injected: the commit point of every atomic write
/// (rename; `renameat` where the C library or qemu-user uses it) and its fsyncs (after
/// the temporary file is written, and of the directory after the rename).
const KILL_POINTS: [&str; 2] = ["rename,renameat,renameat2", "fsync,fdatasync"];

/// Runs `apply` under strace, killed with SIGKILL on entering the `n`th call of
/// `syscalls` (before it runs). Returns true when apply ran to the end instead (fewer
/// calls than `n`).
fn apply_killed_at(
    strace: &std::path::Path,
    host: &NodeHost,
    args: &[&str],
    syscalls: &str,
    n: usize,
) -> bool {
    let node_setup = binary_command(common::node_setup_binary());
    let status = std::process::Command::new(strace)
        .args(["-f", "-qq", "-o", "/dev/null", "-e"])
        .arg(format!("inject={syscalls}:signal=KILL:when={n}"))
        .arg(node_setup.get_program())
        .args(node_setup.get_args())
        .arg("--root")
        .arg(host.root())
        .args(args)
        .arg("apply")
        .env_remove("EDGEGPU_NODE_SETUP_MODE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run strace");
    status.success()
}

/// SIGKILL at every write's commit point and fsync, in turn (deterministic: strace
/// injects the signal at the nth call): every file is its old or its new content, at
/// least one kill lands between two files, the next apply finishes the job and leaves
/// no temporary file, and revert restores the original. Returns the number of kills.
fn killed_at_every_write(make_host: impl Fn() -> NodeHost, args: &[&str]) -> usize {
    let Some(strace) = common::real_tool("strace", "Debian package strace") else {
        return 0;
    };
    let reference = make_host();
    let old = content(&reference.snapshot());
    let mut apply: Vec<&str> = args.to_vec();
    apply.push("apply");
    ok(&reference, &apply);
    let new = content(&reference.snapshot());
    let written: Vec<&PathBuf> = new
        .keys()
        .filter(|p| old.get(*p) != new.get(*p) && !p.starts_with("var/lib/edgegpu"))
        .collect();
    assert!(written.len() >= 2, "{written:?}");
    let mut kills = 0;
    let mut between = 0;
    for syscalls in KILL_POINTS {
        let mut done_before = 0;
        for n in 1.. {
            let host = make_host();
            let finished = apply_killed_at(&strace, &host, args, syscalls, n);
            let now = content(&host.snapshot());
            for path in old.keys().chain(new.keys()) {
                if path.to_string_lossy().contains("/backups/") || path.ends_with("lock") {
                    continue;
                }
                let here = now.get(path);
                assert!(
                    here == old.get(path)
                        || here == new.get(path)
                        || path.to_string_lossy().contains(".edgegpu-tmp."),
                    "killed at {syscalls} #{n}: {} is neither old nor new",
                    path.display()
                );
            }
            let done = written
                .iter()
                .filter(|p| now.get(**p) == new.get(**p))
                .count();
            assert!(
                done >= done_before,
                "{syscalls} #{n}: writes went backwards"
            );
            done_before = done;
            if done > 0 && done < written.len() {
                between += 1;
            }
            // The next run finishes the job; revert then restores the original.
            ok(&host, &apply);
            let after = host.snapshot();
            assert!(temp_files(&after).is_empty(), "{:?}", temp_files(&after));
            let mut check: Vec<&str> = args.to_vec();
            check.push("check");
            assert_eq!(run(&host, &check).code, 0, "{syscalls} #{n}");
            ok(&host, &["revert"]);
            assert_eq!(old, content(&host.snapshot()), "{syscalls} #{n}");
            if finished {
                assert_eq!(
                    done,
                    written.len(),
                    "{syscalls}: a run that finished wrote all"
                );
                break;
            }
            kills += 1;
        }
    }
    assert!(between > 0, "no kill landed between two written files");
    eprintln!(
        "{kills} kills at every rename and fsync, {between} between two of the {} files written",
        written.len()
    );
    kills
}

#[test]
fn after_sigkill_at_any_write_every_file_is_old_or_new() {
    // docker mode: two units and daemon.json.
    let kills = killed_at_every_write(docker_host, &[]);
    // k3s's own containerd with the runtime off k3s's PATH: the template and the
    // default-runtime drop-in.
    let runtime = "/opt/nvidia/bin/nvidia-container-runtime";
    let k3s_host = || {
        let host = NodeHost::new();
        host.k3s_binary(Some("v1.31.6+k3s1"))
            .write(
                "/etc/systemd/system/k3s.service",
                common::fixture("units/k3s-installer-server.service"),
            )
            .executable(runtime, "#!/bin/sh\n");
        host
    };
    let kills = kills + killed_at_every_write(k3s_host, &["--runtime-path", runtime]);
    if common::real_tool("strace", "Debian package strace").is_some() {
        assert!(kills >= 20, "{kills}");
    }
}

/// A run killed before its first write leaves no manifest, only temporary files in
/// node-setup's own state folder (the manifest's, a backup's): a `revert` that finds nothing
/// to revert still takes the lock, which cleans them, and leaves no lock file behind.
#[test]
fn a_revert_with_nothing_to_revert_cleans_what_a_killed_run_left() {
    let host = docker_host();
    let before = content(&host.snapshot());
    let state = "/var/lib/edgegpu/node-setup";
    host.write(&format!("{state}/.manifest.json.edgegpu-tmp.424242"), "{")
        .write(
            &format!("{state}/backups/.daemon.json.1.edgegpu-tmp.424242"),
            "{\"half",
        );
    let out = run(&host, &["revert"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let snap = host.snapshot();
    assert!(temp_files(&snap).is_empty(), "{:?}", temp_files(&snap));
    assert!(
        out.stderr.contains(&format!(
            "removed {state}/backups/.daemon.json.1.edgegpu-tmp.424242: a temporary file an interrupted edgegpu-node-setup run (pid 424242) left"
        )),
        "{}",
        out.stderr
    );
    assert!(!host.path(LOCK).exists(), "no lock file left");
    // The configuration files are as they were.
    let now = content(&snap);
    for (path, file) in &before {
        assert_eq!(now.get(path), Some(file), "{}", path.display());
    }
}
