//! The MPS companion end to end: the real `edgegpu-device-plugin mps-control-daemon` binary
//! runs the fake `nvidia-cuda-mps-control` (a test double at the OS boundary that records the
//! commands it gets) for the daemons the plugin asks for; the plugin serves through the fake
//! kubelet; and devicequery, against the fake libcuda that honours the daemon's defaults and the
//! container's MPS variables, checks the limits a container got.

use crate::gpu_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use edgegpu_kubelet_api::v1beta1::{ContainerAllocateRequest, HEALTHY, UNHEALTHY};
use edgegpu_node::mps::plan::{DaemonSettings, DeviceLimit};
use edgegpu_node::mps::status::{self, Desired, State};
use edgegpu_plugin::resource::Resource;
use edgegpu_testkit::cuda::{devices, variant, FakeCuda};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use edgegpu_testkit::mps;
use edgegpu_testkit::process::{binary_command, terminate};
use gpu_common::{config_file, Plugin, WAIT};

/// The program under test, as its manifests run it (a link to the multi-call binary).
fn bin() -> std::path::PathBuf {
    edgegpu_testkit::process::program("edgegpu-device-plugin")
}
const GPU: &str = "nvidia.com/gpu";

/// The companion, as a test runs it: no chroot (the fake root has no libc), no private
/// `/dev/shm` (needs CAP_SYS_ADMIN); both are covered by `isolate_chroots_and_covers_dev_shm`.
struct Companion {
    child: Child,
    mps_root: PathBuf,
}

impl Companion {
    fn start(host: &FakeHost, mps_root: &Path) -> Companion {
        let child = mps::companion_command(&bin(), host.root(), mps_root)
            .spawn()
            .expect("start the companion");
        Companion {
            child,
            mps_root: mps_root.to_path_buf(),
        }
    }

    fn pipe(&self, resource: &str) -> PathBuf {
        self.mps_root.join(resource).join("pipe")
    }

    /// The status, if one can be read now (a test may have planted something there).
    fn status(&self, resource: &str) -> Option<status::Status> {
        status::read(&self.mps_root.join(resource).join("status.json"))
            .ok()
            .flatten()
    }

    /// Waits until `resource`'s status satisfies `pred`.
    fn wait_status(
        &self,
        resource: &str,
        what: &str,
        pred: impl Fn(&status::Status) -> bool,
    ) -> status::Status {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.status(resource).filter(|s| pred(s)) {
                return s;
            }
            assert!(
                t0.elapsed() < WAIT,
                "{what}: status {:?}",
                self.status(resource)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM; returns the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        terminate(self.child.id());
        self.child.wait().unwrap()
    }
}

impl Drop for Companion {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// devicequery, built by the same `cargo test --workspace` run next to this test binary.
fn devicequery() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("devicequery");
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("EDGEGPU_REQUIRE_REAL_TOOLS").is_none(),
        "devicequery not built next to {} (cargo test --workspace builds it)",
        exe.display()
    );
    eprintln!(
        "skipping the devicequery half: {} not built",
        path.display()
    );
    None
}

/// Runs devicequery `args` as a container with `env` would, the fake libcuda describing an
/// Orin.
fn run_devicequery(
    dq: &Path,
    env: &std::collections::HashMap<String, String>,
    args: &[&str],
) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeCuda::new(12060).device(devices::jetson("Orin", 8, 7));
    let mut cmd = binary_command(dq);
    fake.configure(&mut cmd, variant::CURRENT, dir.path());
    cmd.envs(env).args(args);
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn mps_config(pct: u32, limit: &str) -> (tempfile::NamedTempFile, String) {
    config_file(&format!(
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n      activeThreadPercentage: {pct}\n      pinnedDeviceMemoryLimit: {limit}\n"
    ))
}

/// A node: `host` with the fake control binary installed, the companion, and the plugin
/// sharing `nvidia.com/gpu` in 4 MPS replicas of `pct` % and `limit` each (`extra` plugin
/// flags), every device healthy.
struct MpsNode {
    companion: Companion,
    plugin: Plugin,
    root: tempfile::TempDir,
    _config: tempfile::NamedTempFile,
}

impl MpsNode {
    async fn start(host: &FakeHost, pct: u32, limit: &str, extra: &[&str]) -> MpsNode {
        host.install_mps_control_runnable(mps::HOST_PATH);
        let root = tempfile::tempdir().unwrap();
        let companion = Companion::start(host, root.path());
        let (config_handle, config) = mps_config(pct, limit);
        let root_flag = format!("--mps-root={}", root.path().display());
        let mut args: Vec<&str> = vec![&config, &root_flag];
        args.extend_from_slice(extra);
        let plugin = Plugin::start(host.root(), &args).await;
        plugin
            .wait_devices("healthy once the daemon is ready", |d| {
                !d.is_empty() && d.iter().all(|x| x.health == HEALTHY)
            })
            .await;
        MpsNode {
            companion,
            plugin,
            root,
            _config: config_handle,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_companion_runs_the_daemon_the_plugin_asks_for_and_the_limits_hold() {
    let host = FakeHost::jetson(Board::Orin);
    let MpsNode {
        companion,
        plugin,
        root,
        _config,
    } = MpsNode::start(&host, 30, "2Gi", &["--discovery=tegra"]).await;
    assert_eq!(plugin.devices().len(), 4);

    // The daemon got the plugin's limits, by ordinal (a Jetson GPU has no UUID without NVML),
    // and was checked back.
    let commands = mps::commands(&companion.pipe(GPU));
    let sets: Vec<&str> = commands
        .iter()
        .map(String::as_str)
        .filter(|c| c.starts_with("set_"))
        .collect();
    assert_eq!(
        sets,
        [
            "set_default_device_pinned_mem_limit 0 2048M",
            "set_default_active_thread_percentage 30"
        ]
    );
    assert!(commands.contains(&"get_default_device_pinned_mem_limit 0".to_string()));
    let state = mps::state(&companion.pipe(GPU));
    assert_eq!(state.pinned_mem_limit("0"), Some("2048M"));
    let ready = companion.status(GPU).unwrap();
    assert_eq!(ready.state, State::Ready);
    assert_eq!(ready.settings.active_thread_percentage, Some(30));

    // A container's environment from Allocate, run against the fake driver.
    let (_, r) = plugin.kubelet.admit(GPU, 1).await.unwrap();
    assert_eq!(r.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=2048M");
    if let Some(dq) = devicequery() {
        let (status, out) = run_devicequery(&dq, &r.envs, &["--check-limits"]);
        assert_eq!(status, 0, "{out}");
        assert!(out.ends_with("Result = PASS\n"), "{out}");
        let (status, out) = run_devicequery(&dq, &r.envs, &["--allocate-mib", "3000"]);
        assert_eq!(status, 1, "{out}");
        assert!(out.contains("CUDA_ERROR_OUT_OF_MEMORY"), "{out}");
        // A pod raising its own variable stays under the daemon's cap.
        let mut lifted = r.envs.clone();
        lifted.insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), "0=65536M".into());
        let (status, out) = run_devicequery(&dq, &lifted, &["--allocate-mib", "3000"]);
        assert_eq!(status, 1, "{out}");
    }

    // SIGTERM: the daemon is told to quit and the status goes.
    let pipe = companion.pipe(GPU);
    let status_file = root.path().join(GPU).join("status.json");
    assert!(companion.stop().success());
    assert!(
        mps::commands(&pipe).last().is_some_and(|c| c == "quit"),
        "{:?}",
        mps::commands(&pipe)
    );
    assert!(!mps::listening(&pipe));
    assert!(!status_file.exists());
    plugin
        .wait_devices("unhealthy without a daemon", |d| {
            d.iter().all(|x| x.health == UNHEALTHY)
        })
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_daemon_is_restarted_and_its_devices_recover() {
    let host = FakeHost::jetson(Board::Orin);
    let MpsNode {
        companion,
        plugin,
        root: _root,
        _config,
    } = MpsNode::start(&host, 25, "1Gi", &["--discovery=tegra"]).await;
    let first = companion.status(GPU).unwrap().pid.expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    plugin
        .wait_devices("unhealthy while the daemon is down", |d| {
            d.iter().all(|x| x.health == UNHEALTHY)
        })
        .await;
    let again = companion.wait_status(GPU, "restarted", |s| {
        s.state == State::Ready && s.pid.is_some_and(|p| p != first)
    });
    assert_eq!(again.restarts, 1);
    plugin
        .wait_devices("healthy again", |d| d.iter().all(|x| x.health == HEALTHY))
        .await;
    // The new daemon got the limits again.
    assert_eq!(
        mps::state(&companion.pipe(GPU)).pinned_mem_limit("0"),
        Some("1024M")
    );
    plugin.stop().await;
    assert!(companion.stop().success());
}

#[test]
fn new_settings_replace_the_daemon_and_removed_ones_stop_it() {
    let host = FakeHost::jetson(Board::Orin);
    host.install_mps_control_runnable(mps::HOST_PATH);
    let root = tempfile::tempdir().unwrap();
    let companion = Companion::start(&host, root.path());
    let settings = |pct: u32| DaemonSettings {
        resource: GPU.into(),
        exclusive_gpus: vec![],
        active_thread_percentage: Some(pct),
        pinned_memory_limits: vec![DeviceLimit {
            ordinal: 0,
            uuid: Some("GPU-8225d642-a9b1-8191-0d08-79221b703a12".into()),
            mib: 4096,
        }],
    };
    let want = |pct: u32| {
        status::write_desired(
            root.path(),
            &Desired {
                daemons: vec![settings(pct)],
            },
        )
        .unwrap();
    };
    want(50);
    let first = companion.wait_status(GPU, "ready at 50 %", |s| {
        s.state == State::Ready && s.settings == settings(50)
    });
    // By ordinal and then by UUID: both name the GPU.
    let state = mps::state(&companion.pipe(GPU));
    assert_eq!(state.pinned_mem_limit("0"), Some("4096M"));
    assert_eq!(
        state.pinned_mem_limit("GPU-8225d642-a9b1-8191-0d08-79221b703a12"),
        Some("4096M")
    );
    want(20);
    let second = companion.wait_status(GPU, "ready at 20 %", |s| {
        s.state == State::Ready && s.settings == settings(20)
    });
    assert_ne!(
        first.pid, second.pid,
        "a new daemon: MPS applies defaults to new servers only"
    );
    let commands = mps::commands(&companion.pipe(GPU));
    assert!(commands.contains(&"quit".to_string()), "{commands:?}");
    assert_eq!(
        commands.last().map(String::as_str),
        Some("get_default_active_thread_percentage")
    );
    // Nothing wanted any more: the daemon quits and its status goes.
    status::write_desired(root.path(), &Desired::default()).unwrap();
    let t0 = Instant::now();
    while companion.status(GPU).is_some() || mps::listening(&companion.pipe(GPU)) {
        assert!(t0.elapsed() < WAIT, "the daemon was not stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(companion.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_the_binary_is_refused_with_the_reason() {
    let host = FakeHost::jetson(Board::Orin);
    let root = tempfile::tempdir().unwrap();
    let companion = Companion::start(&host, root.path());
    let (_config, config) = mps_config(25, "1Gi");
    let root_flag = format!("--mps-root={}", root.path().display());
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", &config, &root_flag]).await;
    let refused = companion.wait_status(GPU, "refused", |s| s.state == State::Refused);
    assert!(
        refused
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("has no nvidia-cuda-mps-control")),
        "{refused:?}"
    );
    // The kubelet would not even ask (no healthy device); the plugin says why if asked, once
    // its watch has read the companion's report.
    let ask = || {
        plugin
            .resource
            .allocate(&ContainerAllocateRequest {
                devices_ids: vec!["tegra::0".into()],
            })
            .unwrap_err()
            .message()
            .to_string()
    };
    let t0 = Instant::now();
    let mut message = ask();
    while !message.contains("MPS cannot run on this host") {
        assert!(t0.elapsed() < WAIT, "{message}");
        tokio::time::sleep(Duration::from_millis(10)).await;
        message = ask();
    }
    assert!(message.contains("tegra-cuda-utils"), "{message}");
    plugin.stop().await;
    assert!(companion.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_gpus_are_exclusive_to_the_mps_server_while_it_serves_them() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let MpsNode {
        companion,
        plugin,
        root: _root,
        _config,
    } = MpsNode::start(&host, 50, "8Gi", &[]).await;
    assert_eq!(plugin.devices().len(), 8);
    // NVML's EXCLUSIVE_PROCESS (3): only the MPS server may hold a context, so no client
    // leaves MPS and its limits.
    assert_eq!((host.compute_mode(0), host.compute_mode(1)), (3, 3));
    let state = mps::state(&companion.pipe(GPU));
    assert_eq!(state.pinned_mem_limit(&gpus[1].uuid), Some("8192M"));
    plugin.stop().await;
    // The companion stops: the daemon quits and the GPUs get their mode back.
    assert!(companion.stop().success());
    assert_eq!((host.compute_mode(0), host.compute_mode(1)), (0, 0));
}

/// The chroot tests need root and a native run (chroot, mount namespace; the static fake
/// inside the root cannot run under an emulator): `true`, said on stderr, when they cannot.
fn chroot_tests_cannot_run() -> bool {
    let cannot = !nix::unistd::Uid::effective().is_root()
        || std::env::var_os(edgegpu_testkit::process::RUNNER_ENV).is_some();
    if cannot {
        eprintln!("skipped: needs root and a native run (chroot, mount namespace)");
    }
    cannot
}

/// The companion on `host`'s root with the MPS root `/run/edgegpu/mps`, and that folder's
/// path on the host.
fn start_chrooted_companion(host: &FakeHost) -> (Child, PathBuf) {
    let mps_root = "/run/edgegpu/mps";
    let child = binary_command(bin())
        .arg("mps-control-daemon")
        .arg("--root")
        .arg(host.root())
        .arg("--mps-root")
        .arg(mps_root)
        .env("EDGEGPU_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, host.path(mps_root))
}

/// The status in `status_file` once it is in `state` (a status file not yet readable counts
/// as not there); fails after [`WAIT`].
fn wait_for_state(status_file: &Path, state: State) -> status::Status {
    let t0 = Instant::now();
    loop {
        if let Some(s) = status::read(status_file)
            .ok()
            .flatten()
            .filter(|s| s.state == state)
        {
            return s;
        }
        assert!(
            t0.elapsed() < WAIT,
            "not {state:?}: {:?}",
            status::read(status_file)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// In a container the companion chroots into the host and each daemon gets its resource's
/// `<mps-root>/<resource>/shm` over `/dev/shm` in a mount namespace of its own; needs root,
/// and the static fake inside the root (no emulator there).
#[test]
fn isolate_chroots_and_covers_dev_shm() {
    if chroot_tests_cannot_run() {
        return;
    }
    let host = FakeHost::jetson(Board::Orin);
    host.install_mps_control(mps::HOST_PATH);
    host.mkdir("/dev/shm");
    // What the daemon's standard input is opened from (a character device on a real host).
    host.write("/dev/null", "");
    host.write("/dev/shm/host-segment", "the host's shared memory");
    let (mut child, host_root) = start_chrooted_companion(&host);
    status::write_desired(
        &host_root,
        &Desired {
            daemons: vec![DaemonSettings {
                resource: GPU.into(),
                exclusive_gpus: vec![],
                active_thread_percentage: Some(50),
                pinned_memory_limits: vec![],
            }],
        },
    )
    .unwrap();
    let status_file = host_root.join(GPU).join("status.json");
    let ready = wait_for_state(&status_file, State::Ready);
    // The daemon's /dev/shm is <mps-root>/<resource>/shm: the host's segment is not there.
    let pid = ready.pid.unwrap();
    let dev_shm = PathBuf::from(format!("/proc/{pid}/root/dev/shm"));
    assert!(dev_shm.is_dir());
    assert!(!dev_shm.join("host-segment").exists());
    std::fs::write(host_root.join(GPU).join("shm/probe"), "x").unwrap();
    assert!(
        dev_shm.join("probe").exists(),
        "the daemon sees <mps-root>/<resource>/shm as /dev/shm"
    );
    // The companion's own /dev/shm stays the host's: only the daemon's is covered.
    assert!(PathBuf::from(format!("/proc/{}/root/dev/shm/host-segment", child.id())).exists());
    // Paths inside are host paths: the pipe directory is the chroot's.
    assert!(mps::listening(&host_root.join(GPU).join("pipe")));
    terminate(child.id());
    assert!(child.wait().unwrap().success());
}

/// A host root without `/dev/null` (the daemon's standard input is opened from it inside the
/// chroot) is reported as that, not as `No such file or directory`, which reads as a missing
/// binary. Needs root for the chroot, as `isolate_chroots_and_covers_dev_shm`.
#[test]
fn a_host_root_without_dev_null_is_named() {
    if chroot_tests_cannot_run() {
        return;
    }
    let host = FakeHost::jetson(Board::Orin);
    host.install_mps_control(mps::HOST_PATH);
    host.mkdir("/dev/shm");
    let (mut child, host_root) = start_chrooted_companion(&host);
    ask_for(&host_root, vec![daemon(GPU, 50)]);
    let status_file = host_root.join(GPU).join("status.json");
    let failed = wait_for_state(&status_file, State::Failed);
    assert_eq!(
        failed.reason.as_deref(),
        Some(
            "cannot start the MPS control daemon: /dev/null does not exist (the companion runs \
             in the host root, and the daemon's standard input is opened from it)"
        ),
        "{failed:?}"
    );
    terminate(child.id());
    assert!(child.wait().unwrap().success());
}

// The attacks of a pod with MPS access (it gets its resource's `pipe/` and `shm/`
// read-write) and of the less privileged plugin (it writes `desired/`) on the privileged
// companion: each fails against a companion that trusts the MPS root (docs/security.md).

fn daemon(resource: &str, pct: u32) -> DaemonSettings {
    DaemonSettings {
        resource: resource.into(),
        exclusive_gpus: vec![],
        active_thread_percentage: Some(pct),
        pinned_memory_limits: vec![],
    }
}

fn ask_for(root: &Path, daemons: Vec<DaemonSettings>) {
    status::write_desired(root, &Desired { daemons }).unwrap();
}

fn kill_daemon(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// SIGTERM, then how long the companion took to exit (it must not hang).
fn stop_within(mut companion: Companion, limit: Duration) -> Duration {
    let t0 = Instant::now();
    terminate(companion.child.id());
    loop {
        if let Some(status) = companion.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            let took = t0.elapsed();
            eprintln!("the companion exited {took:?} after SIGTERM");
            return took;
        }
        assert!(
            t0.elapsed() < limit,
            "the companion ignored SIGTERM for {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A fake Orin with the companion running one ready daemon for `nvidia.com/gpu`.
fn one_ready_daemon() -> (FakeHost, tempfile::TempDir, Companion, status::Status) {
    let host = FakeHost::jetson(Board::Orin);
    host.install_mps_control_runnable(mps::HOST_PATH);
    let root = tempfile::tempdir().unwrap();
    let companion = Companion::start(&host, root.path());
    ask_for(root.path(), vec![daemon(GPU, 50)]);
    let ready = companion.wait_status(GPU, "ready", |s| s.state == State::Ready);
    (host, root, companion, ready)
}

/// What a pod with the pipe directory can do: replace a file there with a FIFO.
fn plant_fifo(path: &Path) {
    std::fs::remove_file(path).unwrap();
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
}

#[test]
fn a_fifo_as_the_pid_file_freezes_nothing() {
    let (_host, root, companion, first) = one_ready_daemon();
    // The pod replaces the pid file with a FIFO; the daemon then dies (a crash, or a
    // client's `quit`), so the companion looks for a previous daemon before restarting it.
    plant_fifo(&companion.pipe(GPU).join(mps::PID_FILE));
    kill_daemon(first.pid.unwrap());
    let again = companion.wait_status(GPU, "restarted past the FIFO", |s| {
        s.state == State::Ready && s.pid != first.pid
    });
    assert_eq!(again.restarts, 1);
    // Another resource's daemon starts meanwhile: the companion's one thread is free.
    ask_for(
        root.path(),
        vec![daemon(GPU, 50), daemon("nvidia.com/gpu-mem", 100)],
    );
    companion.wait_status("nvidia.com/gpu-mem", "second ready", |s| {
        s.state == State::Ready
    });
    // And the pod does it again before SIGTERM: the companion still ends at once.
    plant_fifo(&companion.pipe(GPU).join(mps::PID_FILE));
    stop_within(companion, Duration::from_secs(5));
}

#[test]
fn a_live_process_in_the_pid_file_is_not_waited_for() {
    let (_host, _root, companion, first) = one_ready_daemon();
    // A live process that is no MPS control daemon: this test itself (on a host, `1`).
    let pid_file = companion.pipe(GPU).join(mps::PID_FILE);
    kill_daemon(first.pid.unwrap());
    std::fs::write(&pid_file, format!("{}\n", std::process::id())).unwrap();
    let again = companion.wait_status(GPU, "restarted, not waiting for the test", |s| {
        s.state == State::Ready && s.pid != first.pid
    });
    assert_eq!(again.reason, None);
    stop_within(companion, Duration::from_secs(5));
}

#[test]
fn links_planted_in_the_mps_root_are_never_written_through() {
    let host = FakeHost::jetson(Board::Orin);
    host.install_mps_control_runnable(mps::HOST_PATH);
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "a host file").unwrap();
    let companion = Companion::start(&host, root.path());
    // The old temporary name (`.status.json.<companion pid>`) and the status itself as links
    // to a host file, before the companion writes its first status.
    let folder = root.path().join(GPU);
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(
        &victim,
        folder.join(format!(".status.json.{}", companion.child.id())),
    )
    .unwrap();
    std::os::unix::fs::symlink(&victim, folder.join("status.json")).unwrap();
    // A resource folder that is a link to a folder outside the MPS root.
    std::os::unix::fs::symlink(outside.path(), root.path().join("example.com")).unwrap();
    ask_for(
        root.path(),
        vec![daemon(GPU, 50), daemon("example.com/gpu", 50)],
    );
    companion.wait_status(GPU, "ready", |s| s.state == State::Ready);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "a host file");
    assert!(
        !folder.join("status.json").is_symlink(),
        "replaced, not followed"
    );
    // Nothing made or written through the linked folder.
    std::thread::sleep(Duration::from_millis(200));
    let made: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(made, ["victim"], "written through the link: {made:?}");
    stop_within(companion, Duration::from_secs(5));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "a host file");
}

#[test]
fn a_hostile_list_of_daemons_is_refused_whole() {
    let host = FakeHost::jetson(Board::Orin);
    host.install_mps_control_runnable(mps::HOST_PATH);
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("mps");
    std::fs::create_dir(&root).unwrap();
    let companion = Companion::start(&host, &root);
    ask_for(&root, vec![daemon(GPU, 50)]);
    let ready = companion.wait_status(GPU, "ready", |s| s.state == State::Ready);

    let injected = DaemonSettings {
        pinned_memory_limits: vec![DeviceLimit {
            ordinal: 0,
            uuid: Some("GPU-1 1000M\ninjected_command".into()),
            mib: 1000,
        }],
        ..daemon("nvidia.com/gpu-mem", 100)
    };
    let absolute = parent.path().join("abs").display().to_string();
    let hostile: Vec<Vec<DaemonSettings>> = vec![
        vec![daemon(GPU, 50), daemon("../escape", 50)],
        vec![daemon(GPU, 50), daemon(&absolute, 50)],
        vec![daemon(GPU, 50), injected],
        (0..40)
            .map(|i| daemon(&format!("nvidia.com/gpu-{i}"), 50))
            .collect(),
    ];
    for daemons in hostile {
        ask_for(&root, daemons);
        // Refused whole: the running daemon stays as it was and nothing else starts.
        std::thread::sleep(Duration::from_millis(300));
        let now = companion.status(GPU).expect("the daemon keeps running");
        assert_eq!((now.state, now.pid), (State::Ready, ready.pid));
        assert!(!parent.path().join("escape").exists());
        assert!(!parent.path().join("abs").exists());
        assert!(!root.join("nvidia.com/gpu-mem").exists());
        assert!(!root.join("nvidia.com/gpu-0").exists());
    }
    let commands = mps::commands(&companion.pipe(GPU));
    assert!(
        commands.iter().all(|c| !c.contains("injected")),
        "{commands:?}"
    );
    stop_within(companion, Duration::from_secs(5));
}

#[test]
fn gpus_the_node_does_not_have_are_refused() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.install_mps_control_runnable(mps::HOST_PATH);
    let root = tempfile::tempdir().unwrap();
    let companion = Companion::start(&host, root.path());
    let foreign = DaemonSettings {
        exclusive_gpus: vec![
            gpus[0].uuid.clone(),
            "GPU-00000000-dead-beef-0000-000000000000".into(),
        ],
        ..daemon(GPU, 50)
    };
    ask_for(root.path(), vec![foreign]);
    let refused = companion.wait_status(GPU, "refused", |s| s.state == State::Refused);
    assert!(
        refused
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("GPU-00000000-dead-beef-0000-000000000000 does not exist")),
        "{refused:?}"
    );
    // No GPU changed its compute mode for it.
    assert_eq!((host.compute_mode(0), host.compute_mode(1)), (0, 0));
    stop_within(companion, Duration::from_secs(5));
}
