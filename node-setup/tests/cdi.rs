//! `edgegpu-node-setup cdi generate` (the real binary) on every simulated platform: Jetson
//! Nano r32, Xavier r35, Orin r36, Orin r39, Thor r38 (L4T CSV lists), discrete servers and
//! MIG (the driver's procfs). Every generated spec is validated against a JSON schema written
//! from the CDI specification (tests/cdi/schema.json, checked by tests/cdi/validate.py with
//! Python's jsonschema); bad inputs are refused naming the file and line, with nothing written.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use edgegpu_testkit::process::binary_command;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_edgegpu-node-setup");

fn generate(root: &Path, args: &[&str]) -> Output {
    binary_command(BIN)
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

/// A Jetson root with the libraries its CSV names (the fake roots carry only nodes).
fn jetson(board: Board) -> FakeHost {
    let host = FakeHost::jetson_with_nvml(board);
    host.write("/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1", "ELF");
    host.symlink_raw(
        "/usr/lib/aarch64-linux-gnu/libcuda.so",
        "tegra/libcuda.so.1.1",
    );
    host
}

/// The Python that runs tests/cdi/validate.py (jsonschema and PyYAML), or None (skip).
fn validator_python() -> Option<PathBuf> {
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

/// Validates spec files with tests/cdi/validate.py; panics with its report if one is invalid.
fn assert_valid_cdi(files: &[PathBuf]) {
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
        let (_, csv) = board.csv();
        for line in csv.lines().filter(|l| l.starts_with("dev,")) {
            let pattern = line.trim_start_matches("dev,").trim();
            let pattern = if pattern.starts_with('/') {
                pattern.to_string()
            } else {
                format!("/dev/{pattern}")
            };
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
                    report_of(host.root()).contains(&pattern),
                    "{board:?}: {pattern} reported as skipped"
                );
            }
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

fn report_of(root: &Path) -> String {
    text(&generate(root, &["--output", "/dev/null"]).stdout)
}

fn glob_match(pattern: &str, path: &str) -> bool {
    let (p, n): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    p.len() == n.len()
        && p.iter().zip(&n).all(|(p, n)| match p.split_once('*') {
            Some((a, b)) => n.starts_with(a) && n.ends_with(b) && n.len() >= a.len() + b.len(),
            None => p == n,
        })
}

#[test]
fn jetson_libraries_symlinks_and_hooks() {
    let host = jetson(Board::Nano);
    // No hook program: the link is bind-mounted at its own path from its target.
    let spec = spec_json(host.root());
    let m = mounts(&spec);
    let lib = "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1";
    assert!(m.contains(&(lib.into(), lib.into())), "{m:?}");
    assert!(
        m.contains(&(lib.into(), "/usr/lib/aarch64-linux-gnu/libcuda.so".into())),
        "{m:?}"
    );

    // With nvidia-cdi-hook installed: create-symlinks and update-ldcache, as nvidia-ctk does.
    host.write("/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n");
    let spec = spec_json(host.root());
    let h = hooks(&spec);
    assert_eq!(
        h,
        vec![
            vec![
                "nvidia-cdi-hook".to_string(),
                "create-symlinks".into(),
                "--link".into(),
                "tegra/libcuda.so.1.1::/usr/lib/aarch64-linux-gnu/libcuda.so".into()
            ],
            vec![
                "nvidia-cdi-hook".to_string(),
                "update-ldcache".into(),
                "--folder".into(),
                "/usr/lib/aarch64-linux-gnu/tegra".into()
            ],
        ]
    );
    let m = mounts(&spec);
    assert!(
        !m.iter()
            .any(|(_, c)| c == "/usr/lib/aarch64-linux-gnu/libcuda.so"),
        "{m:?}"
    );
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

fn with_driver_libs(host: &FakeHost) {
    let dir = if cfg!(target_arch = "aarch64") {
        "/usr/lib/aarch64-linux-gnu"
    } else {
        "/usr/lib/x86_64-linux-gnu"
    };
    for lib in ["libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"] {
        host.write(&format!("{dir}/{lib}.so.550.54.15"), "ELF");
        // libnvidia-ml.so.1 is the plugin's fake NVML in these roots (a file, not a link).
        if !host.path(&format!("{dir}/{lib}.so.1")).exists() {
            host.symlink_raw(&format!("{dir}/{lib}.so.1"), &format!("{lib}.so.550.54.15"));
        }
    }
    host.write("/usr/bin/nvidia-smi", "ELF");
    host.mkdir("/lib/firmware/nvidia/550.54.15");
}

#[test]
fn discrete_gpus_by_index_and_uuid_from_the_driver_procfs() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    with_driver_libs(&host);
    let spec = spec_json(host.root());
    assert_eq!(spec["cdiVersion"], "0.5.0");
    assert_eq!(
        device_names(&spec),
        vec![
            "0".to_string(),
            gpus[0].uuid.clone(),
            "1".into(),
            gpus[1].uuid.clone(),
            "all".into()
        ]
    );
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
    with_driver_libs(&host);
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
fn the_schema_check_rejects_what_the_cdi_library_rejects() {
    let Some(_) = validator_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}]}"#;
    let cases = [
        ("version-too-low", good.replace("0.5.0", "0.4.0")),
        ("unknown-version", good.replace("0.5.0", "1.9.0")),
        ("bad-name", good.replace(r#""name":"0""#, r#""name":"-0""#)),
        ("unknown-field", good.replace(r#""kind""#, r#""extra":1,"kind""#)),
        ("empty-edits", good.replace(r#"{"deviceNodes":[{"path":"/dev/nvidia0"}]}"#, "{}")),
        ("no-devices", r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[]}"#.to_string()),
        ("bad-hook", good.replace(r#""deviceNodes""#, r#""hooks":[{"hookName":"later","path":"/x"}],"deviceNodes""#)),
        ("twice", good.replace("]}}]}", "]}},{\"name\":\"0\",\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/dev/nvidia0\"}]}}]}")),
    ];
    for (name, body) in cases {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, body).unwrap();
        let python = validator_python().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cdi/validate.py");
        let out = Command::new(python)
            .arg(&script)
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{name} passed: {}",
            text(&out.stdout)
        );
        assert!(text(&out.stdout).contains("INVALID"), "{name}");
    }
    let file = dir.path().join("good.json");
    std::fs::write(&file, good).unwrap();
    assert_valid_cdi(&[file]);
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
    let help = binary_command(BIN)
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
