//! Safety properties through the library: restart order and injection, rollback on a
//! failed write, zero writes when idempotent.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;
use common::{containerd_host, docker_host};
use edgegpu_host::fsops;
use edgegpu_host::root::HostRoot;
use edgegpu_node_setup::cli::Cli;
use edgegpu_node_setup::detect::ModeRequest;
use edgegpu_node_setup::lock::RunLock;
use edgegpu_node_setup::ops::{self, Restarts};
use edgegpu_node_setup::restart::{restart, restart_blocked, Service, ServiceManager};
use edgegpu_node_setup::{plan, RuntimeSpec};
use edgegpu_testkit::nodehost::{NodeHost, Snapshot};

/// Records systemctl calls instead of running them.
#[derive(Default)]
struct Recorder {
    calls: Vec<String>,
    fail_on: Option<String>,
}

impl ServiceManager for Recorder {
    fn systemctl(&mut self, args: &[String]) -> Result<(), String> {
        let call = args.join(" ");
        self.calls.push(call.clone());
        match &self.fail_on {
            Some(f) if call.contains(f.as_str()) => Err(format!("{call} failed")),
            _ => Ok(()),
        }
    }
}

fn lock(opts: &plan::Options) -> RunLock {
    RunLock::acquire(&opts.host, &mut |_| {}).expect("lock")
}

fn options(host: &NodeHost, mode: ModeRequest) -> plan::Options {
    plan::Options {
        host: HostRoot::new(host.root()),
        mode,
        spec: RuntimeSpec {
            name: "nvidia".into(),
            path: "/usr/bin/nvidia-container-runtime".into(),
            set_default: true,
        },
        force: false,
        k3s_version: None,
        cdi: false,
    }
}

fn content(s: &Snapshot) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    s.iter()
        .map(|(p, (c, m, _))| (p.clone(), (c.clone(), *m)))
        .collect()
}

#[test]
fn docker_and_containerd_restart_before_k3s() {
    let host = docker_host();
    let plan = plan::build(&options(&host, ModeRequest::Auto), false).unwrap();
    let mut rec = Recorder::default();
    restart(&plan.services, &mut rec).unwrap();
    assert_eq!(
        rec.calls,
        [
            "daemon-reload",
            "try-reload-or-restart docker.service",
            "try-restart k3s-agent.service",
            "try-restart k3s.service"
        ]
    );

    let host = containerd_host();
    let plan = plan::build(&options(&host, ModeRequest::Auto), false).unwrap();
    let mut rec = Recorder::default();
    restart(&plan.services, &mut rec).unwrap();
    assert_eq!(
        rec.calls,
        ["try-restart containerd.service", "try-restart k3s.service"]
    );
}

#[test]
fn a_failed_restart_stops_the_chain() {
    let mut rec = Recorder {
        fail_on: Some("docker".into()),
        ..Default::default()
    };
    let err = restart(
        &[Service::K3s("k3s.service".into()), Service::Docker],
        &mut rec,
    )
    .unwrap_err();
    assert_eq!(
        rec.calls,
        ["try-reload-or-restart docker.service"],
        "k3s not restarted after docker failed"
    );
    assert_eq!(err.exit_code(), 4);
}

#[test]
fn restarts_only_on_the_live_system_without_no_restart() {
    assert_eq!(restart_blocked(false, false), Some("--root is not /"));
    assert_eq!(restart_blocked(true, true), Some("--no-restart"));
    assert_eq!(restart_blocked(false, true), Some("--no-restart"));
    assert_eq!(restart_blocked(true, false), None);
    assert!(HostRoot::new("/").is_live_system());
    assert!(!HostRoot::new(std::env::temp_dir()).is_live_system());
}

#[test]
fn the_command_never_calls_systemctl_for_another_root() {
    let host = docker_host();
    let cli = Cli::parse_from([
        "edgegpu-node-setup",
        "--root",
        host.root().to_str().unwrap(),
        "apply",
    ]);
    let mut rec = Recorder::default();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = edgegpu_node_setup::run(cli, &mut rec, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    assert!(rec.calls.is_empty(), "{:?}", rec.calls);
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("not restarting services (--root is not /)"),
        "{out}"
    );
}

#[test]
fn apply_runs_the_injected_restarts_after_writing() {
    let host = docker_host();
    let opts = options(&host, ModeRequest::Auto);
    let plan = plan::build(&opts, false).unwrap();
    let mut rec = Recorder::default();
    let report = ops::apply(&plan, &opts.host, Restarts::Run(&mut rec), &lock(&opts)).unwrap();
    assert_eq!(report.written.len(), 3);
    assert_eq!(rec.calls.len(), 4);
    assert_eq!(rec.calls[0], "daemon-reload");
    // Revert restarts the same services, in the same order, except that dockerd is
    // restarted: a reload never takes a runtime or the default runtime away (see
    // tests/docker_reload.rs, against a real dockerd).
    let (manifest, steps) = ops::plan_revert(&opts.host, false).unwrap().unwrap();
    let mut rec2 = Recorder::default();
    ops::revert(
        &opts.host,
        &manifest,
        &steps,
        Restarts::Run(&mut rec2),
        &lock(&opts),
    )
    .unwrap();
    let expected: Vec<String> = rec
        .calls
        .iter()
        .map(|c| c.replace("try-reload-or-restart docker", "try-restart docker"))
        .collect();
    assert_eq!(rec2.calls, expected);
}

#[test]
fn a_failed_write_puts_every_file_back() {
    let host = docker_host();
    let before = host.snapshot();
    let opts = options(&host, ModeRequest::Auto);
    let plan = plan::build(&opts, false).unwrap();
    assert_eq!(plan.changes.len(), 3);
    let last = plan.changes.last().unwrap();
    // A directory where the last file's temporary file must go makes that write fail
    // (even for root), after the others were written.
    let name = last
        .write_path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let blocker = last
        .write_path
        .with_file_name(format!(".{name}.edgegpu-tmp.{}", std::process::id()));
    std::fs::create_dir(&blocker).unwrap();
    std::fs::write(blocker.join("keep"), "x").unwrap();
    let err = ops::apply(&plan, &opts.host, Restarts::Skip("test"), &lock(&opts)).unwrap_err();
    assert_eq!(err.exit_code(), 4);
    assert!(err.to_string().contains("put back"), "{err}");
    std::fs::remove_dir_all(&blocker).unwrap();
    assert_eq!(
        content(&before),
        content(&host.snapshot()),
        "every file as it was"
    );
    assert!(
        !host.exists("/var/lib/edgegpu"),
        "no manifest or backups left behind"
    );
}

#[test]
fn a_second_apply_performs_zero_writes() {
    let host = docker_host();
    let opts = options(&host, ModeRequest::Auto);
    let plan = plan::build(&opts, false).unwrap();
    let before = fsops::write_count();
    ops::apply(&plan, &opts.host, Restarts::Skip("test"), &lock(&opts)).unwrap();
    // 3 files + 3 backups + manifest.
    assert!(fsops::write_count() - before >= 7);
    let snapshot = host.snapshot();
    let again = plan::build(&opts, false).unwrap();
    assert!(again.changes.is_empty());
    assert!(again.configured());
    let count = fsops::write_count();
    let report = ops::apply(&again, &opts.host, Restarts::Skip("test"), &lock(&opts)).unwrap();
    assert!(report.written.is_empty());
    assert_eq!(fsops::write_count(), count, "no write at all");
    assert_eq!(snapshot, host.snapshot(), "mtime unchanged");
}

#[test]
fn a_symlink_loop_is_an_error_not_a_hang() {
    let host = NodeHost::new();
    host.nvidia_runtime()
        .symlink("/etc/docker/daemon.json", "/etc/docker/other.json")
        .symlink("/etc/docker/other.json", "/etc/docker/daemon.json");
    let err = plan::build(&options(&host, ModeRequest::Docker), false).unwrap_err();
    assert!(err.to_string().contains("symbolic links"), "{err}");
}

#[test]
fn a_manifest_that_does_not_say_which_file_is_daemon_json_gets_a_docker_restart() {
    let host = docker_host();
    let opts = options(&host, ModeRequest::Auto);
    let plan = plan::build(&opts, false).unwrap();
    ops::apply(&plan, &opts.host, Restarts::Skip("test"), &lock(&opts)).unwrap();
    // As an older release wrote it: no services per entry.
    let manifest_path = host.path("/var/lib/edgegpu/node-setup/manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    for e in manifest["entries"].as_array_mut().unwrap() {
        e.as_object_mut().unwrap().remove("services");
    }
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    let (manifest, steps) = ops::plan_revert(&opts.host, false).unwrap().unwrap();
    let services = ops::revert_services(&manifest, &steps);
    assert!(services.contains(&Service::DockerRestart), "{services:?}");
    assert!(!services.contains(&Service::Docker), "{services:?}");
}
