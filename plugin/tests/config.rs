//! The `--config` file (NVIDIA's `version: v1` shape): valid files, bad files that stop the
//! plugin at start naming file, line and key, and precedence flag > env > file, checked
//! against the real binary's `Running with config:` log line.

use std::path::Path;
use std::process::Output;

use edgegpu_plugin::config::{AllocationPolicy, ConfigFile, DeviceIdStrategy, DeviceListStrategy};
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::process::binary_command;

const NVIDIA_EXAMPLE: &str = "\
version: v1
flags:
  migStrategy: none
  failOnInitError: true
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-cri]
    deviceIDStrategy: index
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
";

#[test]
fn nvidia_shaped_yaml_and_json_parse() {
    let f = ConfigFile::parse(NVIDIA_EXAMPLE).expect("valid");
    let plugin = f.flags.as_ref().unwrap().plugin.as_ref().unwrap();
    assert_eq!(plugin.pass_device_specs, Some(true));
    assert_eq!(plugin.device_id_strategy, Some(DeviceIdStrategy::Index));
    assert_eq!(
        plugin.device_list_strategy.as_ref().unwrap().0,
        vec![DeviceListStrategy::Envvar, DeviceListStrategy::CdiCri]
    );
    let ts = f.sharing.unwrap().time_slicing.unwrap();
    assert!(ts.rename_by_default && ts.fail_requests_greater_than_one);
    assert_eq!(
        (ts.resources[0].name.as_str(), ts.resources[0].replicas),
        ("nvidia.com/gpu", 4)
    );

    let json = r#"{"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}"#;
    let f = ConfigFile::parse(json).expect("JSON is accepted");
    assert_eq!(
        f.sharing.unwrap().time_slicing.unwrap().resources[0].replicas,
        2
    );
}

/// (file contents, expected line (None: the whole file is at fault), words the message must contain)
const BAD: &[(&str, Option<usize>, &[&str])] = &[
    // Unknown key: an error, not ignored.
    ("version: v1\nflags:\n  failOnInitError: true\n  pasDeviceSpecs: true\n", Some(4), &["unknown field `pasDeviceSpecs`", "flags"]),
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replica: 4\n",
        Some(6),
        &["unknown field `replica`", "sharing.timeSlicing.resources[0]"],
    ),
    // NVIDIA's parse errors.
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1\n",
        Some(5),
        &["number of replicas must be >= 2", "sharing.timeSlicing.resources"],
    ),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n", Some(5), &["no replicas specified"]),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - replicas: 3\n", Some(5), &["no resource name specified"]),
    ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n", Some(3), &["no resources specified", "timeSlicing.resources"]),
    ("version: v2\nflags: {}\n", Some(1), &["unknown version: v2"]),
    ("flags:\n  failOnInitError: false\n", None, &["missing version field"]),
    // Wrong value type and bad enum value.
    ("version: v1\nflags:\n  failOnInitError: maybe\n", Some(3), &["flags.failOnInitError", "invalid"]),
    (
        "version: v1\nflags:\n  plugin:\n    deviceListStrategy: volume-mounts\n",
        Some(4),
        &["flags.plugin: deviceListStrategy:", "volume-mounts"],
    ),
    // Malformed YAML.
    ("version: v1\nflags:\n\tfailOnInitError: true\n", Some(3), &["cannot start any token"]),
    ("version: v1\nsharing: {timeSlicing: {resources: [\n", Some(3), &["did not find expected"]),
];

#[test]
fn bad_files_name_line_and_key() {
    for (text, line, words) in BAD {
        let err = ConfigFile::parse(text).expect_err(text);
        assert_eq!(err.line, *line, "line for {text:?}: {err}");
        for w in *words {
            assert!(
                err.to_string().contains(w),
                "{w:?} missing in {err} (file {text:?})"
            );
        }
    }
}

fn run_plugin(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = binary_command(env!("CARGO_BIN_EXE_edgegpu-device-plugin"));
    cmd.arg("--root")
        .arg(root)
        .arg("--device-plugin-path")
        .arg(dir.path())
        .args(args);
    // Only what the test sets: no inherited setting may change the outcome.
    for var in [
        "CONFIG_FILE",
        "DEVICE_DISCOVERY_STRATEGY",
        "DEVICE_ID_STRATEGY",
        "DEVICE_LIST_STRATEGY",
        "PASS_DEVICE_SPECS",
        "FAIL_ON_INIT_ERROR",
        "HEALTH_CHECKS",
        "SHARED_DEVICES_ALLOCATION_POLICY",
        "DP_DISABLE_HEALTHCHECKS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("EDGEGPU_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the plugin")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_bad_config_file_stops_the_plugin_at_start_and_is_left_alone() {
    let host = FakeHost::jetson(Board::Orin);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    let content = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1\n";
    std::fs::write(&file, content).unwrap();
    let out = run_plugin(host.root(), &["--config", file.to_str().unwrap()], &[]);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains(&file.display().to_string()), "{t}");
    assert!(t.contains("line 5"), "{t}");
    assert!(
        t.contains("sharing.timeSlicing.resources: number of replicas must be >= 2"),
        "{t}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        content,
        "the file is never rewritten"
    );

    // Also through CONFIG_FILE; a missing file is named too.
    let missing = dir.path().join("nope.yaml");
    let out = run_plugin(
        host.root(),
        &[],
        &[("CONFIG_FILE", missing.to_str().unwrap())],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains(&missing.display().to_string()),
        "{}",
        text(&out)
    );
}

/// The JSON after `Running with config:`.
fn effective_config(o: &Output) -> serde_json::Value {
    let t = text(o);
    let line = t
        .lines()
        .find(|l| l.contains("Running with config:"))
        .unwrap_or_else(|| panic!("no config line in:\n{t}"));
    let json = &line[line.find("Running with config:").unwrap() + "Running with config:".len()..];
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[test]
fn precedence_flag_over_env_over_file_over_default() {
    // No GPU under this root: the plugin logs its configuration, then stops (fail-on-init-error).
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n    deviceListStrategy: cdi-cri\n    passDeviceSpecs: true\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();

    // File only.
    let c = effective_config(&run_plugin(host.root(), &["--config", f], &[]));
    assert_eq!(c["deviceIdStrategy"], "index");
    assert_eq!(c["deviceListStrategy"], serde_json::json!(["cdi-cri"]));
    assert_eq!(c["passDeviceSpecs"], true);
    assert_eq!(c["sharedDevicesAllocationPolicy"], "distributed", "default");

    // Env over file.
    let c = effective_config(&run_plugin(
        host.root(),
        &["--config", f],
        &[
            ("DEVICE_ID_STRATEGY", "uuid"),
            ("PASS_DEVICE_SPECS", "false"),
        ],
    ));
    assert_eq!(c["deviceIdStrategy"], "uuid");
    assert_eq!(c["passDeviceSpecs"], false);
    assert_eq!(
        c["deviceListStrategy"],
        serde_json::json!(["cdi-cri"]),
        "file value kept"
    );

    // Flag over env over file.
    let c = effective_config(&run_plugin(
        host.root(),
        &[
            "--config",
            f,
            "--device-id-strategy",
            "index",
            "--device-list-strategy=envvar,cdi-annotations",
        ],
        &[
            ("DEVICE_ID_STRATEGY", "uuid"),
            ("DEVICE_LIST_STRATEGY", "cdi-cri"),
        ],
    ));
    assert_eq!(c["deviceIdStrategy"], "index");
    assert_eq!(
        c["deviceListStrategy"],
        serde_json::json!(["envvar", "cdi-annotations"])
    );
}

#[test]
fn health_check_switches_reach_the_effective_config() {
    let host = FakeHost::empty();
    let on = effective_config(&run_plugin(host.root(), &[], &[]));
    assert_eq!(on["healthChecks"], true);
    let off = effective_config(&run_plugin(
        host.root(),
        &[],
        &[("DP_DISABLE_HEALTHCHECKS", "all")],
    ));
    assert_eq!(off["healthChecks"], false);
    let off = effective_config(&run_plugin(host.root(), &["--health-checks=false"], &[]));
    assert_eq!(off["healthChecks"], false);
    let extra = effective_config(&run_plugin(
        host.root(),
        &[],
        &[
            ("DP_DISABLE_HEALTHCHECKS", "48,79"),
            ("HEALTH_CHECKS", "true"),
        ],
    ));
    assert_eq!(extra["healthChecks"], true);
    assert_eq!(extra["extraIgnoredXids"], serde_json::json!([48, 79]));
}

#[test]
fn no_gpu_with_the_default_fail_on_init_error_exits_and_says_how_to_keep_running() {
    // (`--fail-on-init-error=false` running with zero devices: discovery.rs.)
    let host = FakeHost::empty();
    let out = run_plugin(host.root(), &[], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--fail-on-init-error=false"),
        "{}",
        text(&out)
    );
}

#[test]
fn help_lists_every_gpu_flag_with_env_and_default() {
    let out = binary_command(env!("CARGO_BIN_EXE_edgegpu-device-plugin"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, env) in [
        ("--config", "CONFIG_FILE"),
        ("--discovery", "DEVICE_DISCOVERY_STRATEGY"),
        ("--device-id-strategy", "DEVICE_ID_STRATEGY"),
        ("--device-list-strategy", "DEVICE_LIST_STRATEGY"),
        ("--pass-device-specs", "PASS_DEVICE_SPECS"),
        ("--fail-on-init-error", "FAIL_ON_INIT_ERROR"),
        ("--health-checks", "HEALTH_CHECKS"),
        ("--health-recovery-seconds", "HEALTH_RECOVERY_SECONDS"),
        (
            "--shared-devices-allocation-policy",
            "SHARED_DEVICES_ALLOCATION_POLICY",
        ),
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
        assert!(
            help.contains(&format!("env: {env}")),
            "{env} missing from --help:\n{help}"
        );
    }
    assert!(help.contains("DP_DISABLE_HEALTHCHECKS"));
    assert!(
        help.matches("[default:").count() >= 8,
        "defaults shown:\n{help}"
    );
}

#[test]
fn allocation_policy_and_discovery_from_file() {
    let f = ConfigFile::parse(
        "version: v1\nflags:\n  deviceDiscoveryStrategy: tegra\n  plugin:\n    sharedDevicesAllocationPolicy: packed\n",
    )
    .unwrap();
    let flags = f.flags.unwrap();
    assert_eq!(
        flags.plugin.unwrap().shared_devices_allocation_policy,
        Some(AllocationPolicy::Packed)
    );
    assert_eq!(
        flags.device_discovery_strategy,
        Some(edgegpu_plugin::config::DiscoveryStrategy::Tegra)
    );
}
