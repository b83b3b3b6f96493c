//! The real `edgegpu-device-plugin` binary: command line, registration with the fake
//! kubelet on a fake Jetson root, kubelet restart, JSON logs, SIGTERM clean-up.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{sockets_in, WAIT};
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::kubelet::{FakeKubelet, FakeKubeletOptions};
use edgegpu_testkit::process::binary_command;

/// The program under test, as its manifests run it (a link to the multi-call binary).
fn bin() -> std::path::PathBuf {
    edgegpu_testkit::process::program("edgegpu-device-plugin")
}
const GPU: &str = "nvidia.com/gpu";

#[test]
fn version_names_commit_and_target() {
    let out = binary_command(bin()).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let expected_start = format!(
        "edgegpu-device-plugin {} (commit ",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.starts_with(&expected_start), "{text}");
    assert!(
        text.trim_end().ends_with(')') && text.contains(", target "),
        "{text}"
    );
}

/// The log filter comes from `EDGEGPU_LOG` (the variable every edgegpu program reads), not
/// from `RUST_LOG`.
#[test]
fn edgegpu_log_sets_the_level() {
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    let run = |var: Option<(&str, &str)>| {
        let mut cmd = binary_command(bin());
        cmd.arg("--root")
            .arg(host.root())
            .arg("--device-plugin-path")
            .arg(dir.path())
            .args(["--discovery", "tegra"])
            .env_remove("EDGEGPU_LOG")
            .env_remove("RUST_LOG");
        if let Some((name, value)) = var {
            cmd.env(name, value);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "no GPU under the empty root");
        String::from_utf8(out.stderr).unwrap()
    };
    let starting = "Starting edgegpu device plugin";
    assert!(run(None).contains(starting));
    assert!(run(Some(("RUST_LOG", "error"))).contains(starting));
    let quiet = run(Some(("EDGEGPU_LOG", "error")));
    assert!(!quiet.contains(starting), "{quiet}");
    assert!(quiet.contains("GPU discovery failed"), "{quiet}");
}

/// A container log is a pipe: its lines carry no ANSI colour codes (tracing-subscriber's
/// default colours them whatever stderr is).
#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    let out = binary_command(bin())
        .arg("--root")
        .arg(host.root())
        .arg("--device-plugin-path")
        .arg(dir.path())
        .args(["--discovery", "tegra"])
        .env("EDGEGPU_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Starting edgegpu device plugin"),
        "{stderr}"
    );
    assert!(
        !out.stderr.contains(&0x1b),
        "escape codes in a piped log:\n{stderr:?}"
    );
}

/// At a terminal (a pseudo-terminal from util-linux's `script`) the text is coloured, unless
/// `NO_COLOR` is set to a non-empty value (https://no-color.org).
#[test]
fn colour_at_a_terminal_unless_no_color() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP: no `script` (util-linux) to give the plugin a terminal");
        return;
    }
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    let mut plugin = binary_command(bin());
    plugin
        .arg("--root")
        .arg(host.root())
        .arg("--device-plugin-path")
        .arg(dir.path())
        .args(["--discovery", "tegra"]);
    let words: Vec<String> = std::iter::once(plugin.get_program())
        .chain(plugin.get_args())
        .map(|w| w.to_str().unwrap().to_string())
        .collect();
    assert!(words.iter().all(|w| !w.contains(['\'', ' '])), "{words:?}");
    let at_terminal = |no_color: &str| {
        let out = std::process::Command::new("script")
            .args(["-qec", &words.join(" "), "/dev/null"])
            .env("EDGEGPU_LOG", "info")
            .env("NO_COLOR", no_color)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("Starting edgegpu device plugin"), "{text}");
        text
    };
    assert!(
        at_terminal("").contains('\u{1b}'),
        "no colour at a terminal"
    );
    let plain = at_terminal("1");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR=1: {plain:?}");
}

/// `--help` says what `:PORT` binds: a dual-stack socket (metrics/server.rs), not IPv4 only.
#[test]
fn help_says_the_metrics_port_listens_on_ipv6_and_ipv4() {
    let out = binary_command(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let start = help.find("--metrics-bind-address").expect("metrics flag");
    let text = help[start..].split("[env: ").next().unwrap();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("IPv6 and IPv4"), "{text}");
    assert!(!text.contains("every IPv4 address"), "{text}");
}

#[test]
fn help_documents_every_flag_with_env_and_default() {
    let out = binary_command(bin()).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for (flag, env) in [
        ("--device-plugin-path", "DEVICE_PLUGIN_PATH"),
        ("--kubelet-socket", "KUBELET_SOCKET"),
        ("--plugins-registry", "PLUGINS_REGISTRY"),
        ("--resource-name", "RESOURCE_NAME"),
        ("--root", "HOST_ROOT"),
        ("--log-format", "LOG_FORMAT"),
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
        assert!(
            help.contains(&format!("[env: {env}=")),
            "{env} missing:\n{help}"
        );
    }
    assert!(
        help.contains("[default: /var/lib/kubelet/device-plugins]"),
        "{help}"
    );
    assert!(help.contains("[default: nvidia.com/gpu]"), "{help}");
    assert!(help.contains("DIR/kubelet.sock"), "{help}");
}

struct Plugin(Child);

/// Appends the log lines `rx` receives to `log` until one contains `needle`; fails, naming
/// `what` and showing the log, when `deadline` passes first.
fn read_log_until(
    rx: &std::sync::mpsc::Receiver<String>,
    log: &mut String,
    needle: &str,
    deadline: Instant,
    what: &str,
) {
    while !log.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(_) => panic!("no {what} logged:\n{log}"),
        }
    }
}

/// The binary serving `host` into the kubelet directory `dir`, with its NFD feature file at
/// `feature_file` and the arguments `more` adds; its stderr is collected by the returned
/// thread (every line, once the plugin has exited).
fn start_logged(
    host: &FakeHost,
    dir: &std::path::Path,
    feature_file: &std::path::Path,
    more: impl FnOnce(&mut std::process::Command),
) -> (Plugin, std::thread::JoinHandle<Vec<String>>) {
    let mut cmd = binary_command(bin());
    cmd.arg("--device-plugin-path")
        .arg(dir)
        .arg("--root")
        .arg(host.root())
        .arg("--feature-file")
        .arg(feature_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    more(&mut cmd);
    let mut plugin = Plugin(cmd.spawn().unwrap());
    let stderr = plugin.0.stderr.take().unwrap();
    let log_reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    (plugin, log_reader)
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigterm(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

/// Waits (bounded) for the process to exit.
async fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(started.elapsed() < WAIT, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn binary_registers_survives_a_restart_and_cleans_up_on_sigterm() {
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let nfd = tempfile::tempdir().unwrap();
    let feature_file = nfd.path().join("edgegpu");
    let (mut plugin, log_reader) = start_logged(&host, dir.path(), &feature_file, |cmd| {
        cmd.args(["--log-format", "json"])
            // The GPU's lifecycle alone (this root's DLA node would add a second socket and
            // registration; the engine resources are tested in tests/engines.rs).
            .arg("--engines=false")
            .env_remove("EDGEGPU_LOG");
    });

    let first = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    assert!(!first.devices.is_empty(), "the Orin's GPU is advertised");
    assert!(feature_file.exists(), "NFD feature file written at start");
    assert!(kubelet.allocatable(GPU) >= 1);

    kubelet.restart().await.unwrap();
    let second = kubelet.wait_for_registrations(GPU, 2, WAIT).await.unwrap();
    assert_ne!(second.endpoint, first.endpoint);
    let ids: Vec<String> = second.devices.iter().map(|d| d.id.clone()).collect();
    let id_refs: Vec<&str> = ids.iter().take(1).map(String::as_str).collect();
    kubelet.allocate(GPU, &id_refs).await.unwrap();

    // Someone else's socket in the directory must survive our shutdown.
    let foreign = dir.path().join("other-vendor.sock");
    let _foreign = std::os::unix::net::UnixListener::bind(&foreign).unwrap();
    let own = plugin_socket_of(dir.path(), &foreign);
    sigterm(&plugin.0);
    let started = Instant::now();
    let status = wait_exit(&mut plugin.0).await;
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
    assert!(!own.exists(), "own socket removed");
    assert!(foreign.exists(), "foreign socket kept");
    assert!(kubelet.socket_path().exists(), "kubelet.sock kept");
    // As GFD does: NFD drops the labels of a node whose plugin is gone.
    assert!(
        !feature_file.exists(),
        "NFD feature file removed on SIGTERM"
    );
    let logs = log_reader.join().unwrap();
    for line in &logs {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok(), "not a JSON log line: {line}");
    }
    let text = logs.join("\n");
    assert!(
        text.contains("Registered device plugin for 'nvidia.com/gpu' with Kubelet"),
        "{text}"
    );
    assert!(text.contains("kubelet.sock created, restarting"), "{text}");
    assert!(text.contains("Received SIGTERM"), "{text}");
    println!(
        "shutdown took {:?} (measured, not asserted)",
        started.elapsed()
    );
}

/// One snapshot per round: the GPUs are discovered and the Jetson's engines probed once per
/// round, for the GPU resource, the DLA/PVA resources and the feature file's labels alike (the
/// round before took three engine probes: the engine resources, then the labels twice over).
#[tokio::test]
async fn each_round_discovers_the_gpus_and_probes_the_engines_once() {
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let nfd = tempfile::tempdir().unwrap();
    let feature_file = nfd.path().join("edgegpu");
    let (mut plugin, log_reader) = start_logged(&host, dir.path(), &feature_file, |cmd| {
        cmd.env("EDGEGPU_LOG", "info,edgegpu_node::engines=debug");
    });
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    kubelet
        .wait_for_registration("nvidia.com/dla", WAIT)
        .await
        .unwrap();
    let labels = std::fs::read_to_string(&feature_file).unwrap();
    assert!(labels.contains("nvidia.com/dla.count="), "{labels}");
    // A second round (SIGHUP rebuilds everything): both resources register again, each on a
    // new socket.
    let endpoint = |name: &str| kubelet.resource(name).map(|r| r.endpoint);
    let first_round = [endpoint(GPU), endpoint("nvidia.com/dla")];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(plugin.0.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    kubelet
        .wait_until("both resources registered anew", WAIT, |k| {
            [GPU, "nvidia.com/dla"]
                .iter()
                .zip(&first_round)
                .all(|(name, old)| {
                    k.resource(name).is_some_and(|r| {
                        !r.stopped && !r.history.is_empty() && Some(&r.endpoint) != old.as_ref()
                    })
                })
        })
        .await
        .unwrap();
    sigterm(&plugin.0);
    assert!(wait_exit(&mut plugin.0).await.success());
    let text = log_reader.join().unwrap().join("\n");
    assert_eq!(text.matches("Discovering GPUs").count(), 2, "{text}");
    assert_eq!(text.matches("engine probe #").count(), 2, "{text}");
    assert!(text.contains("engine probe #2 of this process"), "{text}");
}

/// `nvpmodel -m 0` on an AGX Orin while the plugin runs: the feature file's power-mode labels
/// follow at the next recheck, and the plugin goes on serving (no new registration).
#[tokio::test]
async fn the_feature_file_follows_a_power_mode_change() {
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let nfd = tempfile::tempdir().unwrap();
    let feature_file = nfd.path().join("edgegpu");
    let (mut plugin, log_reader) = start_logged(&host, dir.path(), &feature_file, |cmd| {
        cmd.args(["--engines=false", "--power-recheck-seconds", "1"]);
    });
    let registered = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    let labels = std::fs::read_to_string(&feature_file).unwrap();
    assert!(
        labels.contains("edgegpu.io/jetson.power-mode=MODE_30W\n"),
        "{labels}"
    );
    assert!(
        labels.contains("edgegpu.io/jetson.gpu-clock-max-mhz=624\n"),
        "{labels}"
    );

    host.set_power_mode(Board::Orin, 0, 1_300_500_000);
    let started = Instant::now();
    let labels = loop {
        let labels = std::fs::read_to_string(&feature_file).unwrap_or_default();
        if labels.contains("edgegpu.io/jetson.power-mode=MAXN\n") {
            break labels;
        }
        assert!(started.elapsed() < WAIT, "{labels}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        labels.contains("edgegpu.io/jetson.power-mode.id=0\n"),
        "{labels}"
    );
    assert!(
        labels.contains("edgegpu.io/jetson.gpu-clock-max-mhz=1300\n"),
        "{labels}"
    );
    // The same serving round: still the first registration's socket.
    assert_eq!(kubelet.resource(GPU).unwrap().endpoint, registered.endpoint);
    sigterm(&plugin.0);
    assert!(wait_exit(&mut plugin.0).await.success());
    let text = log_reader.join().unwrap().join("\n");
    assert!(text.contains("the power mode changed"), "{text}");
    assert!(!text.contains("Rebuilding"), "{text}");
}

/// The plugin's socket in `dir`, ignoring `other`.
fn plugin_socket_of(dir: &std::path::Path, other: &std::path::Path) -> std::path::PathBuf {
    let names: Vec<String> = sockets_in(dir)
        .into_iter()
        .filter(|n| {
            n != "kubelet.sock" && Some(n.as_str()) != other.file_name().and_then(|s| s.to_str())
        })
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    dir.join(&names[0])
}

#[tokio::test]
async fn binary_takes_its_settings_from_the_environment_and_uses_the_plugin_watcher() {
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("device-plugins");
    let registry = dir.path().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let mut opts = FakeKubeletOptions::new(&plugins);
    opts.plugins_registry = Some(registry.clone());
    // The binary may be a cold debug build under qemu-user: its first RPC can take longer
    // than the kubelet's 1 s GetInfo timeout (which the library test keeps).
    opts.get_info_timeout = WAIT;
    let kubelet = FakeKubelet::start_with(opts).await.unwrap();
    let mut plugin = Plugin(
        binary_command(bin())
            .env("DEVICE_PLUGIN_PATH", &plugins)
            .env("PLUGINS_REGISTRY", &registry)
            .env("HOST_ROOT", host.root())
            .env("RESOURCE_NAME", "example.com/gpu")
            .env("ENGINES", "false")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let info = kubelet
        .wait_for_registration("example.com/gpu", WAIT)
        .await
        .unwrap();
    assert!(info.endpoint.starts_with(&plugins), "{info:?}");
    assert_eq!(sockets_in(&registry).len(), 1);
    assert!(
        !kubelet
            .events()
            .iter()
            .any(|e| e.contains("Got registration request")),
        "watcher mode does not call Register"
    );
    sigterm(&plugin.0);
    let status = wait_exit(&mut plugin.0).await;
    assert!(status.success(), "{status:?}");
    assert!(
        sockets_in(&registry).is_empty(),
        "registration socket removed"
    );
}

/// The GPU kind locked by another program (the DRA driver, stood in for by this test holding
/// the lock): the plugin says who holds it, registers nothing, and takes the GPU over once the
/// lock is released (docs/dra.md, "The device plugin and the DRA driver on one node").
#[tokio::test]
async fn a_gpu_locked_by_the_dra_driver_is_not_advertised_until_released() {
    use edgegpu_node::ownership::{try_own, DeviceKind, Owned};
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let locks = tempfile::tempdir().unwrap();
    let held = match try_own(locks.path(), DeviceKind::Gpu, "edgegpu-dra-driver").unwrap() {
        Owned::Yes(o) => o,
        other => panic!("{other:?}"),
    };
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let mut plugin = Plugin(
        binary_command(bin())
            .arg("--device-plugin-path")
            .arg(dir.path())
            .arg("--root")
            .arg(host.root())
            .arg("--ownership-dir")
            .arg(locks.path())
            // The GPU alone: the Orin root's DLA node would register a resource of its own.
            .arg("--engines=false")
            .env("EDGEGPU_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = plugin.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The refusal is logged once discovery is done.
    let deadline = Instant::now() + WAIT;
    let mut log = String::new();
    read_log_until(
        &rx,
        &mut log,
        "served by edgegpu-dra-driver pid",
        deadline,
        "refusal",
    );
    assert!(log.contains("gpu.lock"), "{log}");
    assert_eq!(
        kubelet.registration_count(),
        0,
        "nothing registered while locked"
    );
    drop(held);
    let registered = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    assert!(!registered.devices.is_empty());
    // The rebuild names the holder its lock file named (here the test, as the DRA driver).
    read_log_until(
        &rx,
        &mut log,
        "Rebuilding the resources: took over the gpu devices edgegpu-dra-driver pid",
        deadline,
        "takeover",
    );
    let text = std::fs::read_to_string(locks.path().join("gpu.lock")).unwrap();
    assert_eq!(
        text,
        format!("edgegpu-device-plugin pid {}\n", plugin.0.id())
    );
    sigterm(&plugin.0);
    assert!(wait_exit(&mut plugin.0).await.success());
}
