//! Discovery in `auto` mode on roots without NVML, and detection details. This test binary
//! never loads a (fake) NVML: glibc would hand a loaded copy to the soname fallback.

use crate::gpu_common;

use edgegpu_node::gpu::discovery::Platform;
use edgegpu_testkit::host::{Board, FakeHost};
use gpu_common::{ids, spec_paths, Plugin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_discovery_without_nvml_falls_through_to_tegra() {
    let host = FakeHost::jetson(Board::Xavier);
    let res = gpu_common::resource(host.root(), &[]).await.expect("auto");
    match res.platform() {
        Some(Platform::Tegra { detection, nvml }) => {
            assert_eq!(detection.generation.map(|g| g.soc), Some("T194"));
            assert_eq!(nvml, &None);
        }
        other => panic!("expected Tegra, got {other:?}"),
    }
}

/// A pod that mounts the host's `/proc` at `<root>/proc` (the chart's per-pod GPU memory) gets
/// the host's `/proc/device-tree`: an absolute link to `/sys/firmware/devicetree/base`, which
/// resolves in the pod's own, masked, `/sys/firmware`. Detection then reads the device tree
/// where the DaemonSet mounts it, `<root>/sys/firmware/devicetree/base`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_tree_is_read_from_sysfs_when_the_proc_link_leads_nowhere() {
    let host = FakeHost::jetson(Board::Orin);
    host.write("/proc/device-tree/serial-number", "1422919082137\0");
    let sysfs = host.path("/sys/firmware/devicetree/base");
    std::fs::create_dir_all(sysfs.parent().unwrap()).unwrap();
    std::fs::rename(host.path("/proc/device-tree"), &sysfs).unwrap();
    // As the host's link resolves in a pod: to a directory that is not there.
    std::os::unix::fs::symlink(
        "/nonexistent-masked/sys/firmware/devicetree/base",
        host.path("/proc/device-tree"),
    )
    .unwrap();
    let res = gpu_common::resource(host.root(), &[]).await.expect("tegra");
    match res.platform() {
        Some(Platform::Tegra { detection, .. }) => {
            assert_eq!(detection.generation.map(|g| g.soc), Some("T234"));
            assert_eq!(
                detection.generation_from,
                Some("/proc/device-tree/compatible")
            );
            assert_eq!(detection.model.as_deref(), Some(Board::Orin.model()));
            assert!(detection.module.is_some(), "{detection:?}");
            assert_eq!(detection.serial.as_deref(), Some("1422919082137"));
        }
        other => panic!("expected Tegra, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_on_every_jetson_serves_tegra_with_specs() {
    for board in Board::ALL {
        let host = FakeHost::jetson(board);
        let plugin = Plugin::start(host.root(), &["--pass-device-specs=true"]).await;
        assert_eq!(ids(&plugin.devices()), vec!["tegra"], "{board:?}");
        let r = plugin.allocate(&["tegra"]).await.expect("allocate");
        let key_node = board.required_node();
        assert!(
            spec_paths(&r).contains(&key_node.to_string()),
            "{board:?}: {:?}",
            spec_paths(&r)
        );
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_gpu_fails_at_start_or_runs_with_zero_devices() {
    let host = FakeHost::empty();
    let err = gpu_common::resource(host.root(), &[])
        .await
        .err()
        .expect("no GPU is an error by default");
    let text = format!("{err:#}");
    assert!(text.contains("no NVIDIA GPU found"), "{text}");
    assert!(text.contains("could not load NVML"), "{text}");
    assert!(
        text.contains("libnvidia-ml.so.1"),
        "the NVML candidates are named: {text}"
    );
    assert!(
        text.contains("etc/nv_tegra_release"),
        "the Tegra files looked for are named: {text}"
    );

    let plugin = Plugin::start(host.root(), &["--fail-on-init-error=false"]).await;
    assert!(plugin.devices().is_empty());
    assert_eq!(plugin.kubelet.capacity(&plugin.name), 0);
    plugin.stop().await;
}

/// Runs the real binary on `root` until `done` has seen the output it waits for (or 30 s),
/// then stops it with SIGTERM; returns everything it logged.
fn run_binary_until(root: &std::path::Path, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let mut child = edgegpu_testkit::process::binary_command(edgegpu_testkit::process::program(
        "edgegpu-device-plugin",
    ))
    .arg("--root")
    .arg(root)
    .arg("--device-plugin-path")
    .arg(dir.path())
    .args(args)
    .env("EDGEGPU_LOG", "info")
    .env("NO_COLOR", "1")
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done(&log) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(_) => break,
        }
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = child.wait();
    log
}

#[test]
fn the_binary_logs_which_signals_matched_board_generation_and_l4t() {
    let host = FakeHost::jetson(Board::Nano);
    let log = run_binary_until(host.root(), &[], |l| l.contains("Detected platform: tegra"));
    for expected in [
        "Tegra signal matched: Tegra SoC tegra210 → Nano/TX1 (T210)",
        "signal=\"/proc/device-tree/compatible\"",
        "signal=\"/sys/module/tegra_fuse/parameters/tegra_chip_id\"",
        "Tegra signal matched: L4T 32.7.6",
        "Detected platform: tegra",
        "NVIDIA Jetson Nano Developer Kit",
        "generation=\"Nano/TX1 (T210)\"",
        "l4t=\"32.7.6\"",
        "Running with config:",
    ] {
        assert!(
            log.contains(expected),
            "{expected:?} missing from the log:\n{log}"
        );
    }
}

#[test]
fn the_binary_logs_what_it_looked_for_when_nothing_matched() {
    let host = FakeHost::empty();
    let log = run_binary_until(host.root(), &["--discovery=tegra"], |l| l.contains("ERROR"));
    let root = host.root().display().to_string();
    assert!(
        log.contains("No Tegra signal matched; looked for:"),
        "{log}"
    );
    for p in [
        "/proc/device-tree/compatible",
        "/sys/devices/soc0/family",
        "/etc/nv_tegra_release",
    ] {
        assert!(
            log.contains(&format!("{root}{p} is missing or unreadable")),
            "{p} missing from:\n{log}"
        );
    }
    // A device-tree file is also looked for in sysfs.
    assert!(
        log.contains(&format!(
            "{root}/proc/device-tree/compatible is missing or unreadable, as is \
             {root}/sys/firmware/devicetree/base/compatible"
        )),
        "{log}"
    );
    assert!(!log.contains("Detected platform: unknown"));
}
