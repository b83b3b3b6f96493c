//! The `--config` file (NVIDIA's `version: v1` shape): valid files, bad files that stop the
//! plugin at start naming file, line and key, and precedence flag > env > file, checked
//! against the real binary's `Running with config:` log line.

use std::path::Path;
use std::process::Output;

use edgegpu_node::config::{
    AllocationPolicy, ConfigFile, DeviceIdStrategy, DeviceListStrategy, DiscoveryStrategy,
    MigStrategy,
};
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
    assert_eq!(f.flags.pass_device_specs, Some(true));
    assert_eq!(f.flags.device_id_strategy, Some(DeviceIdStrategy::Index));
    assert_eq!(
        f.flags.device_list_strategy,
        Some(vec![DeviceListStrategy::Envvar, DeviceListStrategy::CdiCri])
    );
    assert_eq!(f.flags.mig_strategy, Some(MigStrategy::None));
    let ts = f.time_slicing.unwrap();
    assert!(ts.rename_by_default && ts.fail_requests_greater_than_one);
    assert_eq!(
        (ts.resources[0].name.as_str(), ts.resources[0].replicas),
        ("nvidia.com/gpu", 4)
    );
    assert!(f.notes.is_empty(), "{:?}", f.notes);

    let json = r#"{"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}"#;
    let f = ConfigFile::parse(json).expect("JSON is accepted");
    assert_eq!(f.time_slicing.unwrap().resources[0].replicas, 2);
}

/// The entries deploy/helm/check_chart.py (`test_config_entries_the_plugin_accepts`) renders
/// as config.map entries: the chart's own checks must let through what the plugin reads.
#[test]
fn entries_the_helm_chart_lets_through_are_read() {
    let entries: &[(&str, Option<MigStrategy>, Option<&str>)] = &[
        ("", None, None),
        ("# nothing set yet\n", None, None),
        ("{}", None, None),
        ("version: null\n", None, None),
        ("flags:\n  plugin:\n    deviceIDStrategy: index\n", None, None),
        ("version: v1\nflags:\n  migStrategy: single\n", Some(MigStrategy::Single), None),
        ("version: v1\nflags:\n  migStrategy: mixed\n", Some(MigStrategy::Mixed), None),
        (
            "Version: v1\nFlags:\n  MigStrategy: mixed\n  FailOnInitError: yes\n",
            Some(MigStrategy::Mixed),
            None,
        ),
        (
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 3\n",
            None,
            Some("nvidia.com/gpu"),
        ),
        (
            "Sharing:\n  TimeSlicing:\n    resources:\n    - name: mig-1g.5gb\n      replicas: 2\n",
            None,
            Some("nvidia.com/mig-1g.5gb"),
        ),
        (
            r#"{"sharing": {"timeSlicing": {"resources": [{"name": "gpu", "replicas": 2}]}}}"#,
            None,
            Some("nvidia.com/gpu"),
        ),
    ];
    for (text, mig, shared) in entries {
        let f = ConfigFile::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(f.flags.mig_strategy, *mig, "{text:?}");
        let names: Vec<&str> = f
            .time_slicing
            .iter()
            .flat_map(|t| &t.resources)
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(
            names,
            shared.iter().copied().collect::<Vec<_>>(),
            "{text:?}"
        );
    }
}

/// What a config shares with limits: its MPS resources, and its memory-unit resources with the
/// names they are advertised under.
type Limited<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);

/// The MPS and memory-unit entries deploy/helm/check_chart.py
/// (`test_mps_configs_the_plugin_accepts`) renders with mps.enabled, and the examples'
/// configs (deploy/examples/mps-*.yaml, gpu-memory-jetson.yaml): what the chart lets through
/// the plugin reads, each as the way of sharing the chart took it for.
#[test]
fn mps_entries_the_helm_chart_lets_through_are_read() {
    const GPU: &[&str] = &["nvidia.com/gpu"];
    const UNITS: &[(&str, &str)] = &[("nvidia.com/gpu", "nvidia.com/gpu-mem")];
    let entries: &[(&str, Limited)] = &[
        (
            "version: v1\nsharing:\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 2\n        pinnedDeviceMemoryLimit: 2Gi\n",
            (GPU, &[]),
        ),
        (
            "version: v1\nsharing:\n  gpuMemory:\n    unit: 512Mi\n    resources:\n      - name: nvidia.com/gpu\n",
            (&[], UNITS),
        ),
        (
            "Sharing:\n  MPS:\n    renameByDefault: true\n    resources:\n    - name: gpu\n      replicas: 48\n      activeThreadPercentage: 10\n",
            (GPU, &[]),
        ),
        (
            "version: v1\nsharing:\n  gpuMemory:\n    enforcement: mps\n    resources:\n    - name: nvidia.com/gpu\n      rename: aliyun.com/gpu-mem\n      memory: 24Gi\n",
            (&[], &[("nvidia.com/gpu", "aliyun.com/gpu-mem")]),
        ),
        (
            "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 4}]\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
            (GPU, &[]),
        ),
        (
            "version: v1\nsharing:\n  mps: null\n  gpuMemory: {resources: [{name: gpu}]}\n",
            (&[], UNITS),
        ),
        (
            "version: v1\nsharing:\n  gpuMemory:\n    enforcement: none\n    resources:\n      - name: nvidia.com/gpu\n",
            (&[], UNITS),
        ),
    ];
    let mut cases: Vec<(String, Limited)> =
        entries.iter().map(|(t, l)| (t.to_string(), *l)).collect();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let shipped: [(&str, Limited); 3] = [
        ("mps-jetson.yaml", (GPU, &[])),
        ("mps-discrete.yaml", (GPU, &[])),
        ("gpu-memory-jetson.yaml", (&[], UNITS)),
    ];
    for (file, limited) in shipped {
        let text = std::fs::read_to_string(examples.join(file)).unwrap();
        let config = text
            .split("config.yaml: |\n")
            .nth(1)
            .expect("a config.yaml key");
        let config: String = config
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
            .collect();
        cases.push((config, limited));
    }
    for (text, (mps, units)) in &cases {
        let f = ConfigFile::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let got_mps: Vec<&str> = f
            .mps
            .iter()
            .flat_map(|m| &m.resources)
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(got_mps, *mps, "{text:?}");
        let got_units: Vec<(&str, &str)> = f
            .gpu_memory
            .iter()
            .flat_map(|g| &g.resources)
            .map(|r| (r.name.as_str(), r.rename.as_str()))
            .collect();
        assert_eq!(got_units, *units, "{text:?}");
        assert!(f.time_slicing.is_none(), "{text:?}: one way of sharing");
    }
}

/// (file contents, expected line, words the message must contain)
const BAD: &[(&str, usize, &[&str])] = &[
    // NVIDIA's parse errors, at the line of the value at fault.
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1\n",
        6,
        &["sharing.timeSlicing.resources[0].replicas: number of replicas must be >= 2"],
    ),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n", 5, &["no replicas specified"]),
    // A misspelt key is reported, and the required one is then missing.
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replica: 4\n",
        5,
        &["sharing.timeSlicing.resources[0]: no replicas specified"],
    ),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - replicas: 3\n", 5, &["no resource name specified"]),
    ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n", 4, &["no resources specified", "sharing.timeSlicing"]),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: []\n", 4, &["no resources specified"]),
    ("version: v2\nflags: {}\n", 1, &["unknown version: v2"]),
    ("version: v1\nflags:\n  migStrategy: all\n", 3, &["unknown MIG strategy: all"]),
    // Resource names as NVIDIA checks them.
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: $invalid$\n      replicas: 2\n",
        5,
        &["incorrect format for resource name 'nvidia.com/$invalid$'"],
    ),
    // The whole name, prefix included: the MPS companion makes it a folder under its root.
    (
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: ../gpu\n      replicas: 2\n",
        5,
        &["incorrect format for resource name '../gpu': the prefix must be a DNS subdomain"],
    ),
    (
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/../../etc\n      replicas: 2\n",
        5,
        &["incorrect format for resource name 'nvidia.com/../../etc'"],
    ),
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n      devices: [\"GPU-UUID\"]\n",
        7,
        &["sharing.timeSlicing.resources[0].devices", "unsupported device"],
    ),
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n      devices: -2\n",
        7,
        &["count of devices must be > 0"],
    ),
    ("version: v1\nimex:\n  channelIDs: [1]\n", 3, &["channelIDs must be [] or [0]"]),
    // Wrong value type and bad enum value; a quoted "true" is a string, as in Go.
    ("version: v1\nflags:\n  failOnInitError: maybe\n", 3, &["flags.failOnInitError", "invalid value `maybe`"]),
    ("version: v1\nflags:\n  failOnInitError: \"true\"\n", 3, &["flags.failOnInitError", "quoted"]),
    (
        "version: v1\nflags:\n  plugin:\n    deviceListStrategy: volume-mounts\n",
        4,
        &["flags.plugin.deviceListStrategy:", "volume-mounts"],
    ),
    ("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n", 4, &["flags.plugin.deviceIDStrategy", "uuid, index"]),
    ("version: v1\nflags: [a]\n", 2, &["flags: expected a mapping"]),
    // MPS: NVIDIA's rules, Volta MPS' client limit, edgegpu's limit keys.
    (
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 64\n",
        6,
        &["sharing.mps.resources[0].replicas", "at most 48 clients", "found 64"],
    ),
    ("version: v1\nsharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 1\n", 6, &["sharing.mps.resources[0].replicas: number of replicas must be >= 2"]),
    (
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 4\n      activeThreadPercentage: 0\n",
        7,
        &["sharing.mps.resources[0].activeThreadPercentage", "from 1 to 100", "found 0"],
    ),
    (
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 4\n      pinnedDeviceMemoryLimit: 1.5Gi\n",
        7,
        &["sharing.mps.resources[0].pinnedDeviceMemoryLimit", "invalid memory size `1.5Gi`"],
    ),
    // Memory units.
    (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2}\n  gpuMemory:\n    resources:\n    - name: gpu\n",
        7,
        &["sharing.gpuMemory cannot be combined with sharing.timeSlicing or sharing.mps"],
    ),
    ("version: v1\nsharing:\n  gpuMemory:\n    enforcement: always\n    resources: [{name: gpu}]\n", 4, &["sharing.gpuMemory.enforcement", "auto, mps or none"]),
    ("version: v1\nsharing:\n  gpuMemory:\n    unit: 1Gi\n", 4, &["sharing.gpuMemory: no resources specified"]),
    (
        "version: v1\nsharing:\n  gpuMemory:\n    unit: 1Gi\n    resources:\n    - name: gpu\n      memory: 512Mi\n",
        7,
        &["sharing.gpuMemory.resources[0].memory", "less than one unit"],
    ),
    // Malformed YAML.
    ("version: v1\nflags:\n\tfailOnInitError: true\n", 3, &[]),
    ("version: v1\nsharing: {timeSlicing: {resources: [\n", 3, &[]),
];

/// The one table every reader of a quantity passes (the DRA driver's opaque configs run it
/// too): an MPS limit means the same bytes to the plugin and to the DRA driver.
#[test]
fn memory_limits_read_as_the_dra_driver_reads_them() {
    const MIB: u64 = 1 << 20;
    for (quantity, bytes) in edgegpu_node::quantity::CASES {
        let text = format!(
            "version: v1\nsharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 2\n      pinnedDeviceMemoryLimit: \"{quantity}\"\n"
        );
        let read = ConfigFile::parse(&text).map(|f| {
            f.mps.expect("sharing.mps").resources[0]
                .pinned_device_memory_limit
                .expect("a limit")
        });
        match bytes {
            Some(b) if *b >= MIB => assert_eq!(read.ok(), Some(b / MIB * MIB), "{quantity:?}"),
            Some(_) => assert!(
                read.unwrap_err().to_string().contains("less than 1Mi"),
                "{quantity:?}"
            ),
            None => assert!(read.is_err(), "{quantity:?}: {read:?}"),
        }
    }
}

#[test]
fn bad_files_name_line_and_key() {
    for (text, line, words) in BAD {
        let err = ConfigFile::parse(text).expect_err(text);
        assert_eq!(err.line, Some(*line), "line for {text:?}: {err}");
        assert!(err.column.is_some(), "{err}");
        for w in *words {
            assert!(
                err.to_string().contains(w),
                "{w:?} missing in {err} (file {text:?})"
            );
        }
    }
}

#[test]
fn unknown_keys_are_reported_with_their_line_and_ignored_as_nvidia_does() {
    let f = ConfigFile::parse(
        "version: v1\nflags:\n  failOnInitError: false\n  pasDeviceSpecs: true\nsharing:\n  timeSlicing:\n    RenameByDefault: true\n    resources:\n    - name: gpu\n      replicas: 2\n",
    )
    .unwrap();
    assert_eq!(f.flags.fail_on_init_error, Some(false));
    assert_eq!(f.flags.pass_device_specs, None);
    // NVIDIA looks `renameByDefault` up exactly: the capitalised key does nothing there.
    assert!(!f.time_slicing.unwrap().rename_by_default);
    let notes = f.notes.join("\n");
    assert!(
        notes.contains("line 4, column 3: unknown key `flags.pasDeviceSpecs` ignored"),
        "{notes}"
    );
    assert!(
        notes.contains(
            "line 7, column 5: unknown key `sharing.timeSlicing.RenameByDefault` ignored"
        ) && notes.contains("did you mean `renameByDefault`"),
        "{notes}"
    );
}

fn run_plugin(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = binary_command(edgegpu_testkit::process::program("edgegpu-device-plugin"));
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
    assert!(t.contains("line 6, column 17"), "{t}");
    assert!(
        t.contains("sharing.timeSlicing.resources[0].replicas: number of replicas must be >= 2"),
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
    let out = binary_command(edgegpu_testkit::process::program("edgegpu-device-plugin"))
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
        ("--engines", "ENGINES"),
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
    assert_eq!(
        f.flags.shared_devices_allocation_policy,
        Some(AllocationPolicy::Packed)
    );
    assert_eq!(
        f.flags.device_discovery_strategy,
        Some(DiscoveryStrategy::Tegra)
    );
}

/// Configs of the kinds NVIDIA ships (its README and chart examples, the GPU Operator and
/// OpenShift ConfigMaps, the inputs its parser tests accept), written here from its rules.
/// Each must start the real binary with the same meaning: checked on `Running with config:`
/// (the binary then stops: the fake host has no GPU). (name, file, expected effective config
/// fields.)
/// (effective-config key, its JSON value)
type Expected = &'static [(&'static str, &'static str)];

const NVIDIA_SHAPED: &[(&str, &str, Expected)] = &[
    ("empty file: every default", "", &[("deviceIdStrategy", "\"uuid\""), ("sharing", "null")]),
    ("comments only", "# nothing set yet\n", &[("failOnInitError", "true")]),
    ("no version field", "flags:\n  plugin:\n    deviceIDStrategy: index\n", &[("deviceIdStrategy", "\"index\"")]),
    ("empty JSON object", "{}", &[("passDeviceSpecs", "false")]),
    (
        "README flags example",
        "version: v1\nflags:\n  migStrategy: \"none\"\n  failOnInitError: true\n  nvidiaDriverRoot: \"/\"\n  plugin:\n    passDeviceSpecs: false\n    deviceListStrategy: \"envvar\"\n    deviceIDStrategy: \"uuid\"\n",
        &[("deviceListStrategy", "[\"envvar\"]"), ("migStrategy", "\"none\"")],
    ),
    (
        "mixed MIG strategy",
        "version: v1\nflags:\n  migStrategy: mixed\n  failOnInitError: true\n  plugin:\n    deviceListStrategy: envvar\n    deviceIDStrategy: uuid\n",
        &[("migStrategy", "\"mixed\"")],
    ),
    ("chart map entry: single", "version: v1\nflags:\n  migStrategy: single\n", &[("migStrategy", "\"single\"")]),
    (
        "time-slicing with ten replicas",
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n",
        &[("sharing", "{\"renameByDefault\":false,\"failRequestsGreaterThanOne\":false,\"resources\":[{\"name\":\"nvidia.com/gpu\",\"replicas\":10}]}")],
    ),
    (
        "MPS as NVIDIA's README configures it: failRequestsGreaterThanOne defaults to true",
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n",
        &[
            ("mps", "{\"renameByDefault\":false,\"failRequestsGreaterThanOne\":true,\"resources\":[{\"name\":\"nvidia.com/gpu\",\"replicas\":10}]}"),
            ("sharing", "null"),
        ],
    ),
    (
        "MPS and time-slicing both set: MPS wins, as in NVIDIA's",
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 4}\n  mps:\n    renameByDefault: true\n    failRequestsGreaterThanOne: false\n    resources:\n    - name: gpu\n      replicas: 2\n      activeThreadPercentage: 30\n      pinnedDeviceMemoryLimit: 2Gi\n",
        &[
            ("mps", "{\"renameByDefault\":true,\"failRequestsGreaterThanOne\":false,\"resources\":[{\"name\":\"nvidia.com/gpu\",\"replicas\":2,\"activeThreadPercentage\":30,\"pinnedDeviceMemoryLimit\":2147483648}]}"),
            ("sharing", "null"),
        ],
    ),
    (
        "edgegpu's memory units: gpushare's names kept",
        "version: v1\nsharing:\n  gpuMemory:\n    unit: 1Gi\n    resources:\n    - name: nvidia.com/gpu\n      rename: aliyun.com/gpu-mem\n",
        &[("gpuMemory", "{\"unit\":1073741824,\"enforcement\":\"auto\",\"resources\":[{\"name\":\"nvidia.com/gpu\",\"rename\":\"aliyun.com/gpu-mem\"}]}")],
    ),
    (
        "GPU Operator style time-slicing ConfigMap entry",
        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n",
        &[("sharing", "{\"renameByDefault\":true,\"failRequestsGreaterThanOne\":true,\"resources\":[{\"name\":\"nvidia.com/gpu\",\"replicas\":4}]}")],
    ),
    (
        "OpenShift style: MIG resources named, devices all",
        "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      devices: all\n      replicas: 8\n    - name: nvidia.com/mig-1g.5gb\n      replicas: 2\n",
        &[("migStrategy", "\"mixed\"")],
    ),
    (
        "short resource name, devices count and list, rename (checked, then ignored)",
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 3\n      rename: gpu-shared\n      devices: 2\n    - name: mig-1g.5gb\n      replicas: 2\n      devices: [0, \"0:0\", \"GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\"]\n",
        &[("sharing", "{\"renameByDefault\":false,\"failRequestsGreaterThanOne\":false,\"resources\":[{\"name\":\"nvidia.com/gpu\",\"replicas\":3},{\"name\":\"nvidia.com/mig-1g.5gb\",\"replicas\":2}]}")],
    ),
    (
        "NVIDIA's own key spelling, other key case, YAML 1.1 booleans",
        "Version: v1\nFlags:\n  useNodeFeatureAPI: true\n  FailOnInitError: yes\n  Plugin:\n    PassDeviceSpecs: on\n    DeviceIDStrategy: index\n",
        &[("passDeviceSpecs", "true"), ("deviceIdStrategy", "\"index\"")],
    ),
    (
        "deviceListStrategy as a list, gfd settings",
        "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, cdi-annotations]\n  gfd:\n    oneshot: false\n    sleepInterval: infinite\n",
        &[("deviceListStrategy", "[\"envvar\",\"cdi-annotations\"]")],
    ),
    (
        "resources section (checked, then ignored as NVIDIA does)",
        "version: v1\nresources:\n  gpus:\n  - pattern: \"*A100*\"\n    name: a100\n",
        &[("sharing", "null")],
    ),
    ("imex without channels", "version: v1\nimex:\n  channelIDs: []\n", &[("imex", "{\"channelIDs\":[],\"required\":false}")]),
    (
        "imex channel 0, not required, absent on this node: skipped",
        "version: v1\nimex:\n  channelIDs: [0]\n",
        &[("imex", "{\"channelIDs\":[0],\"required\":false}")],
    ),
];

#[test]
fn configs_nvidia_ships_start_the_plugin_with_the_same_meaning() {
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    for (i, (name, content, expected)) in NVIDIA_SHAPED.iter().enumerate() {
        let file = dir.path().join(format!("config{i}.yaml"));
        std::fs::write(&file, content).unwrap();
        let out = run_plugin(host.root(), &["--config", file.to_str().unwrap()], &[]);
        let t = text(&out);
        assert!(t.contains("Running with config:"), "{name}: refused:\n{t}");
        let config = effective_config(&out);
        for (key, value) in *expected {
            let want: serde_json::Value = serde_json::from_str(value).unwrap();
            assert_eq!(config[*key], want, "{name}: {key} in {config}");
        }
    }
}

#[test]
fn a_required_imex_channel_that_is_missing_stops_the_plugin() {
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "version: v1\nimex:\n  channelIDs: [0]\n  required: true\n",
    )
    .unwrap();
    let out = run_plugin(host.root(), &["--config", file.to_str().unwrap()], &[]);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(
        t.contains("requested IMEX channel channel0 does not exist"),
        "{t}"
    );
}

#[test]
fn notes_reach_the_log_with_the_file_and_line() {
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "version: v1\nflags:\n  gdsEnabled: true\n  plugin:\n    passDeviceSpec: true\n",
    )
    .unwrap();
    let out = run_plugin(host.root(), &["--config", file.to_str().unwrap()], &[]);
    let t = text(&out);
    let shown = file.display().to_string();
    for want in [
        "line 3, column 15: `flags.gdsEnabled` is an NVIDIA plugin setting without effect",
        "line 5, column 5: unknown key `flags.plugin.passDeviceSpec` ignored",
    ] {
        assert!(
            t.lines().any(|l| l.contains(&shown) && l.contains(want)),
            "{want:?} not logged:\n{t}"
        );
    }
}

proptest::proptest! {
    /// The plugin aborts on a panic (`panic = "abort"`): no file content may cause one.
    #[test]
    fn no_input_panics(text in "[ -~\n\t]{0,200}") {
        let _ = ConfigFile::parse(&text);
    }

    /// Valid configs with bytes cut or replaced: errors, never panics.
    #[test]
    fn damaged_configs_do_not_panic(cut in 0usize..400, at in 0usize..400, byte in 0u8..128) {
        let mut text = NVIDIA_EXAMPLE.as_bytes().to_vec();
        text.truncate(cut.min(text.len()));
        if !text.is_empty() {
            let i = at % text.len();
            text[i] = byte;
        }
        let _ = ConfigFile::parse(&String::from_utf8_lossy(&text));
    }
}
