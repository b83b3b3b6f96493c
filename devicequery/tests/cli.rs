//! The real `devicequery` binary against the fake CUDA driver: golden text reports for the
//! machines and failure paths of the issue, JSON output and the verification checks.

use crate::common;

use common::*;
use edgegpu_testkit::cuda::{variant, FakeCuda};

// ---- Golden text reports -------------------------------------------------------------------

#[test]
fn jetson_nano_jetpack_4_2_1_matches_the_published_output() {
    let run = run(&FakeCuda::new(10000).device(nano()), &[]);
    assert_golden("nano-jp4.2.1.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn orin_nx_jetpack_5_matches_the_published_output() {
    let run = run(&FakeCuda::new(11040).device(orin_nx()), &[]);
    assert_golden("orin-nx-jp5.txt", &run);
    assert_eq!(run.status, 0);
}

/// On a Jetson the power mode and the GPU clock ceiling follow deviceQuery's own text, before
/// the verdict: the published output above the line stays byte-identical, and the last line
/// is still the verdict.
#[test]
fn a_jetson_prints_its_power_mode_before_the_verdict() {
    use edgegpu_testkit::host::{Board, FakeHost};
    let host = FakeHost::jetson(Board::Orin);
    let root = format!("--root={}", host.root().display());
    let first = run(&FakeCuda::new(11040).device(orin_nx()), &[root.as_str()]);
    assert_eq!(first.status, 0, "{}", first.stderr);
    let power = "devicequery: Jetson power mode MODE_30W (nvpmodel id 2), the boot default; \
                 GPU clock ceiling 624 MHz, at 306 MHz\n";
    let golden = golden("orin-nx-jp5.txt");
    let verdict = golden.rfind("Result = PASS").unwrap();
    let expected = format!("{}{power}{}", &golden[..verdict], &golden[verdict..]);
    assert_same_text(&expected, &first.stdout, "Orin with its power files");

    // `nvpmodel -m 0`: MAXN and its ceiling.
    host.set_power_mode(Board::Orin, 0, 1_300_500_000);
    let again = run(&FakeCuda::new(11040).device(orin_nx()), &[root.as_str()]);
    let lines: Vec<&str> = again.stdout.lines().collect();
    assert_eq!(
        lines[lines.len() - 2..],
        [
            "devicequery: Jetson power mode MAXN (nvpmodel id 0); GPU clock ceiling 1300 MHz, \
             at 306 MHz",
            "Result = PASS"
        ]
    );
}

#[test]
fn h100_with_a_cuda_12_driver() {
    let run = run(&FakeCuda::new(12040).device(h100()), &[]);
    assert_golden("h100.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn two_gpus_show_the_peer_access_section_in_both_directions() {
    // Asymmetric on purpose: proves the (from, to) order reaches cuDeviceCanAccessPeer.
    // Driver 11.2 also exercises the 11.0-11.2 layout (new lines, old multiprocessor line).
    let fake = FakeCuda::new(11020)
        .device(a100(0x17))
        .device(a100(0x65))
        .peer(0, 1);
    let run = run(&fake, &[]);
    assert_golden("two-a100-p2p.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn thor_with_cuda_13_drops_the_multi_device_line() {
    let run = run(&FakeCuda::new(13000).device(thor()), &[]);
    assert_golden("thor-jp7.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn unknown_compute_capability_warns_twice_and_assumes_128_cores() {
    let mut device = h100();
    device.name = "NVIDIA Future GPU".to_string();
    device
        .attributes
        .insert(edgegpu_testkit::cuda::attr::COMPUTE_CAPABILITY_MAJOR, 14);
    device
        .attributes
        .insert(edgegpu_testkit::cuda::attr::COMPUTE_CAPABILITY_MINOR, 2);
    let run = run(&FakeCuda::new(13020).device(device), &[]);
    assert_golden("unknown-capability.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn zero_devices_pass_like_device_query() {
    let run = run(&FakeCuda::new(12040), &[]);
    assert_golden("zero-devices.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn no_device_error_from_the_driver_fails_with_code_100() {
    let run = run(
        &FakeCuda::new(12040).device(h100()).fail("cuInit", 100),
        &[],
    );
    assert_golden("no-device.txt", &run);
    assert_eq!(run.status, 1);
}

#[test]
fn toolkit_stub_library_fails_with_code_34() {
    // The stub variant is installed only as `libcuda.so`: this also proves the fallback soname.
    let run = run_with(&FakeCuda::new(12040), variant::STUB, &[]);
    assert_golden("stub-library.txt", &run);
    assert_eq!(run.status, 1);
}

#[test]
fn old_cuda_10_2_driver_without_newer_symbols_still_passes() {
    let run = run_with(
        &FakeCuda::new(10000).device(nano()),
        variant::CUDA_10_2,
        &[],
    );
    assert_golden("nano-jp4.2.1.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn no_library_at_all_explains_the_missing_nvidia_runtime() {
    let run = run_without_library(&[]);
    assert_golden("no-library.txt", &run);
    assert_eq!(run.status, 1);
}

#[test]
fn unloadable_library_is_told_apart_from_a_missing_one() {
    // A libcuda.so.1 that exists but cannot be loaded (here: not an ELF file; in the field most
    // often a glibc too old for the driver) must not be blamed on the missing NVIDIA runtime.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("libcuda.so.1");
    std::fs::write(&broken, "not a shared object\n").unwrap();
    let mut cmd = edgegpu_testkit::process::binary_command(BIN);
    cmd.env("LD_LIBRARY_PATH", dir.path());
    let output = cmd.output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout.contains("cudaGetDeviceCount returned 35\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "devicequery: cannot load the CUDA driver: {}: ",
            broken.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("present but could not be loaded"),
        "{stdout}"
    );
    assert!(!stdout.contains("runtimeClassName"), "{stdout}");
    assert!(stdout.ends_with("\nResult = FAIL\n"), "{stdout}");
}

#[test]
fn library_missing_a_required_symbol_is_a_clear_failure() {
    let run = run_with(
        &FakeCuda::new(12040).device(h100()),
        variant::NO_TOTAL_MEM,
        &[],
    );
    assert_golden("missing-required-symbol.txt", &run);
    assert_eq!(run.status, 1);
}

#[test]
fn failed_attribute_query_names_the_call_and_fails() {
    let run = run(
        &FakeCuda::new(12040)
            .device(h100())
            .fail("cuDeviceGetAttribute", 999),
        &[],
    );
    let expected = format!(
        "{BIN} Starting...\n\n CUDA Device Query (Runtime API) version (CUDART static linking)\n\n\
         Detected 1 CUDA Capable device(s)\n\
         devicequery: cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device 0) failed with 999 (CUDA_ERROR_UNKNOWN): unknown error\n\
         Result = FAIL\n"
    );
    assert_same_text(&expected, &run.stdout, "attribute failure");
    assert_eq!(run.status, 1);
}

#[test]
fn unrecognized_error_code_uses_the_driver_name_and_runtime_default_text() {
    // 304 is in devicequery's table; 709 (CUDA_ERROR_CONTEXT_IS_DESTROYED) is not, nor in the
    // fake's: the text falls back to what cudaGetErrorString says for unknown codes.
    let run = run(
        &FakeCuda::new(12040)
            .device(h100())
            .fail("cuDeviceGetCount", 709),
        &[],
    );
    assert!(
        run.stdout
            .contains("cudaGetDeviceCount returned 709\n-> unrecognized error code\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("devicequery: cuDeviceGetCount in libcuda.so.1 failed with 709\n"),
        "{}",
        run.stdout
    );
    assert_eq!(run.last_line(), "Result = FAIL");
    assert_eq!(run.status, 1);
}

#[test]
fn argv0_is_echoed_as_invoked() {
    // A link named like NVIDIA's sample, invoked by that path.
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("deviceQuery");
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    let fake = FakeCuda::new(12040).device(h100());
    let config_dir = tempfile::tempdir().unwrap();
    let mut cmd = edgegpu_testkit::process::binary_command(&link);
    fake.configure(&mut cmd, variant::CURRENT, config_dir.path());
    let output = cmd.output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout.lines().next().unwrap(),
        format!("{} Starting...", link.display())
    );
}

// ---- --device ------------------------------------------------------------------------------

#[test]
fn device_flag_reports_one_device_and_counts_all() {
    let fake = FakeCuda::new(11020)
        .device(a100(0x17))
        .device(a100(0x65))
        .peer(0, 1);
    let run = run(&fake, &["--device", "1"]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    assert!(run
        .stdout
        .contains("Detected 2 CUDA Capable device(s)\n\nDevice 1: \"NVIDIA A100-PCIE-40GB\"\n"));
    assert!(!run.stdout.contains("Device 0:"));
    assert!(run
        .stdout
        .contains("Device PCI Domain ID / Bus ID / location ID:   0 / 101 / 0\n"));
    assert!(!run.stdout.contains("Peer access"));
    assert!(
        run.stdout.ends_with("NumDevs = 2\nResult = PASS\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn device_flag_beyond_the_count_fails() {
    let run = run(&FakeCuda::new(12040).device(h100()), &["--device", "3"]);
    assert_eq!(run.status, 1);
    assert!(run.stdout.contains(
        "Detected 1 CUDA Capable device(s)\ndevicequery: --device 3: no such device (1 CUDA device(s) detected; ordinals start at 0)\nResult = FAIL\n"
    ), "{}", run.stdout);
}

// ---- Verification checks -------------------------------------------------------------------

/// The Orin golden report with `Result = PASS` replaced by `failure_lines` and `Result = FAIL`.
fn orin_failing_with(failure_lines: &str) -> String {
    let golden = golden("orin-nx-jp5.txt");
    let report = golden
        .strip_suffix("Result = PASS\n")
        .expect("golden ends with the verdict");
    format!("{report}{failure_lines}Result = FAIL\n")
}

#[test]
fn passing_checks_leave_the_report_unchanged() {
    let args = [
        "--expect-devices",
        "1",
        "--min-compute-capability",
        "8.7",
        "--min-memory-mib",
        "15388",
    ];
    let run = run(&FakeCuda::new(11040).device(orin_nx()), &args);
    assert_golden("orin-nx-jp5.txt", &run);
    assert_eq!(run.status, 0);
}

#[test]
fn expect_devices_fails_on_a_different_count() {
    let run = run(
        &FakeCuda::new(11040).device(orin_nx()),
        &["--expect-devices", "2"],
    );
    let expected = orin_failing_with(
        "devicequery: check failed: --expect-devices 2: expected 2 CUDA device(s), found 1\n",
    );
    assert_same_text(&expected, &run.stdout, "--expect-devices 2");
    assert_eq!(run.status, 1);
}

#[test]
fn expect_devices_turns_zero_devices_into_a_failure() {
    let run = run(&FakeCuda::new(12040), &["--expect-devices", "1"]);
    let golden = golden("zero-devices.txt");
    let expected = golden.replace(
        "Result = PASS\n",
        "devicequery: check failed: --expect-devices 1: expected 1 CUDA device(s), found 0\nResult = FAIL\n",
    );
    assert_same_text(&expected, &run.stdout, "--expect-devices 1 with no device");
    assert_eq!(run.status, 1);
}

#[test]
fn min_compute_capability_fails_below_the_minimum() {
    let run = run(
        &FakeCuda::new(11040).device(orin_nx()),
        &["--min-compute-capability", "9.0"],
    );
    let expected = orin_failing_with(
        "devicequery: check failed: --min-compute-capability 9.0: device 0 \"Orin\" has compute capability 8.7, below the required 9.0\n",
    );
    assert_same_text(&expected, &run.stdout, "--min-compute-capability 9.0");
    assert_eq!(run.status, 1);
}

#[test]
fn min_memory_fails_below_the_minimum() {
    let run = run(
        &FakeCuda::new(11040).device(orin_nx()),
        &["--min-memory-mib", "15389"],
    );
    let expected = orin_failing_with(
        "devicequery: check failed: --min-memory-mib 15389: device 0 \"Orin\" has 15388 MiB of global memory, less than the required 15389 MiB\n",
    );
    assert_same_text(&expected, &run.stdout, "--min-memory-mib 15389");
    assert_eq!(run.status, 1);
}

#[test]
fn per_device_checks_fail_without_a_device() {
    let run = run(
        &FakeCuda::new(12040),
        &["--min-compute-capability", "5.3", "--min-memory-mib", "1"],
    );
    assert!(
        run.stdout.ends_with(
            "devicequery: check failed: --min-compute-capability 5.3: no CUDA device to check\n\
         devicequery: check failed: --min-memory-mib 1: no CUDA device to check\n\
         Result = FAIL\n"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(run.status, 1);
}

#[test]
fn invalid_flag_values_are_usage_errors() {
    let run = run(&FakeCuda::new(12040), &["--min-compute-capability", "8"]);
    assert_eq!(run.status, 2);
    assert!(
        run.stderr
            .contains("'8' is not a compute capability: expected MAJOR.MINOR"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.is_empty(),
        "no report on a usage error: {}",
        run.stdout
    );
}

// ---- JSON ----------------------------------------------------------------------------------

#[test]
fn json_report_for_h100_matches_the_golden_document() {
    let run = run(
        &FakeCuda::new(12040).device(h100()),
        &["--json", "--expect-devices", "1"],
    );
    let expected = std::fs::read_to_string(golden_path("h100.json")).unwrap();
    let expected = expected.replace("@VERSION@", env!("CARGO_PKG_VERSION"));
    assert_same_text(&expected, &run.stdout, "golden h100.json");
    assert_eq!(run.status, 0);
}

fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.stdout))
}

#[test]
fn json_uuid_comes_from_the_legacy_symbol_on_a_10_2_driver() {
    let fake = FakeCuda::new(10020).device(nano().uuid(H100_UUID));
    let doc = json(&run_with(&fake, variant::CUDA_10_2, &["--json"]));
    assert_eq!(doc["result"], "PASS");
    assert_eq!(doc["driver"]["cuda_version"], "10.2");
    assert_eq!(
        doc["devices"][0]["uuid"],
        "GPU-7d3c914e-2a10-5f6b-8c0d-4e1f2b3a4958"
    );
}

#[test]
fn json_leaves_the_uuid_out_when_the_driver_has_no_uuid_symbol() {
    let fake = FakeCuda::new(9000).device(nano().uuid(H100_UUID));
    let run = run_with(&fake, variant::CUDA_9_0, &["--json"]);
    let doc = json(&run);
    assert_eq!(doc["result"], "PASS");
    assert_eq!(run.status, 0);
    assert!(doc["devices"][0].get("uuid").is_none(), "{}", run.stdout);
    assert_eq!(doc["devices"][0]["name"], "NVIDIA Tegra X1");
}

#[test]
fn json_failures_carry_the_code_and_explanation() {
    let no_library = run_without_library(&["--json"]);
    let doc = json(&no_library);
    assert_eq!(no_library.status, 1);
    assert_eq!(doc["result"], "FAIL");
    assert_eq!(doc["driver"], serde_json::Value::Null);
    assert_eq!(doc["error"]["stage"], "load");
    assert_eq!(doc["error"]["code"], 35);
    assert!(doc["error"]["detail"]
        .as_str()
        .unwrap()
        .contains("runtimeClassName: nvidia"));

    let no_device = run(
        &FakeCuda::new(12040).device(h100()).fail("cuInit", 100),
        &["--json"],
    );
    let doc = json(&no_device);
    assert_eq!(no_device.status, 1);
    assert_eq!(doc["driver"]["cuda_version"], "12.4");
    assert_eq!(doc["error"]["stage"], "count");
    assert_eq!(doc["error"]["code"], 100);
    assert_eq!(doc["error"]["name"], "CUDA_ERROR_NO_DEVICE");
    assert_eq!(
        doc["error"]["message"],
        "no CUDA-capable device is detected"
    );
}

#[test]
fn json_records_failed_checks_and_peer_access() {
    let fake = FakeCuda::new(11020)
        .device(a100(0x17))
        .device(a100(0x65))
        .peer(0, 1);
    let run = run(
        &fake,
        &[
            "--json",
            "--min-memory-mib",
            "40537",
            "--expect-devices",
            "2",
        ],
    );
    let doc = json(&run);
    assert_eq!(run.status, 1);
    assert_eq!(doc["result"], "FAIL");
    assert_eq!(doc["device_count"], 2);
    assert_eq!(
        doc["peer_access"],
        serde_json::json!([{"from": 0, "to": 1, "supported": true}, {"from": 1, "to": 0, "supported": false}])
    );
    let checks = doc["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 3);
    assert_eq!(checks[0]["check"], "--expect-devices 2");
    assert_eq!(checks[0]["passed"], true);
    assert_eq!(checks[1]["device"], 0);
    assert_eq!(checks[1]["passed"], false);
    assert_eq!(checks[2]["device"], 1);
    assert_eq!(checks[2]["message"], "device 1 \"NVIDIA A100-PCIE-40GB\" has 40536 MiB of global memory, less than the required 40537 MiB");
    assert_eq!(doc["devices"][1]["pci"]["bus_id"], "0000:65:00.0");
}

// ---- --version -----------------------------------------------------------------------------

#[test]
fn version_names_commit_and_target() {
    let output = edgegpu_testkit::process::binary_command(BIN)
        .arg("--version")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let expected = format!(
        "devicequery {} (commit {}, target {})\n",
        env!("CARGO_PKG_VERSION"),
        env!("EDGEGPU_GIT_COMMIT"),
        env!("EDGEGPU_TARGET")
    );
    assert_eq!(stdout, expected);
}

#[test]
fn a_device_whose_node_is_missing_is_not_seen_by_the_fake_driver() {
    // The fake driver's `node` (used by the CRI e2e test to prove a runtime or CDI injected the
    // GPU's node): /dev/null is a character device, so that device stays; a missing node drops
    // its device, and with none left cuInit fails with CUDA_ERROR_NO_DEVICE.
    let one_seen = FakeCuda::new(12040)
        .device(h100().node("/dev/null"))
        .device(h100().node("/nonexistent/nvidia1"));
    let seen = run(&one_seen, &[]);
    assert!(
        seen.stdout.contains("Detected 1 CUDA Capable device(s)"),
        "{}",
        seen.stdout
    );
    assert_eq!(seen.status, 0);
    let none_seen = FakeCuda::new(12040).device(h100().node("/nonexistent/nvidia0"));
    let none = run(&none_seen, &[]);
    assert!(
        none.stdout.contains("cudaGetDeviceCount returned 100"),
        "{}",
        none.stdout
    );
    assert_eq!(none.last_line(), "Result = FAIL");
}
