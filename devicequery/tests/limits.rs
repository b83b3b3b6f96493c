//! `--check-limits` and `--allocate-mib`: the real binary against the fake libcuda and, for the
//! MPS cases, a real fake MPS control daemon whose defaults each test sets through its UI mode
//! (so the limit travels daemon default -> client as on a node). Every expectation comes from
//! the test's own numbers: the limit it set, the context overhead it configured, and the
//! multiprocessor counts measured on an H100 80GB HBM3 (driver 580.159.04) at 25 % and 10 %.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use edgegpu_testkit::cuda::{variant, FakeCuda};
use edgegpu_testkit::mps::MpsDaemon;

const MIB: u64 = 1 << 20;
/// What an MPS client's context used at 25 % threads on the measured H100.
const CONTEXT_MIB: u64 = 146;
/// `GPU-` form of common::H100_UUID.
const H100_UUID_TEXT: &str = "GPU-7d3c914e-2a10-5f6b-8c0d-4e1f2b3a4958";
/// The H100's 84942979072 bytes as the section shows them (not a whole number of MiB).
const H100_MIB: &str = "81007.94";

fn shared_h100() -> FakeCuda {
    FakeCuda::new(13000)
        .device(h100())
        .context_overhead(CONTEXT_MIB * MIB)
}

/// The environment the plugin's Allocate gives a container MPS serves.
fn mps_env<'a>(
    daemon: &'a MpsDaemon,
    pinned: &'a str,
    percentage: &'a str,
    mib: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        (
            "CUDA_MPS_PIPE_DIRECTORY",
            daemon.pipe_dir().to_str().unwrap(),
        ),
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", pinned),
        ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", percentage),
        ("EDGEGPU_GPU_MEMORY_LIMIT_MIB", mib),
        ("EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED", "true"),
    ]
}

fn check_limits(fake: &FakeCuda, env: &[(&str, &str)]) -> Run {
    run_with_env(fake, variant::CURRENT, &["--check-limits"], env)
}

/// The value of the limits section's row `label` (the text after the label's padding).
fn row<'r>(run: &'r Run, label: &str) -> &'r str {
    run.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("  {label}")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no row {label:?} in:\n{}", run.stdout))
}

fn explanation(run: &Run) -> &str {
    run.stdout
        .lines()
        .find_map(|l| l.strip_prefix("devicequery: check failed: "))
        .unwrap_or_else(|| panic!("no explanation in:\n{}", run.stdout))
}

fn assert_fails(run: &Run) {
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert_eq!(run.last_line(), "Result = FAIL", "{}", run.stdout);
}

fn assert_passes(run: &Run) {
    assert_eq!(run.status, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.last_line(), "Result = PASS");
    assert!(!run.stdout.contains("devicequery: "), "{}", run.stdout);
}

#[test]
fn passes_under_a_limit_the_mps_daemon_enforces() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "2048M");
    daemon.set_active_thread_percentage(25);
    let run = check_limits(&shared_h100(), &mps_env(&daemon, "0=2048M", "25", "2048"));
    assert_passes(&run);
    // The report of the probed device comes first, as a client at 25 % sees it: 32 of 132
    // multiprocessors, as measured.
    assert!(
        run.stdout
            .contains("\nDevice 0: \"NVIDIA H100 80GB HBM3\"\n"),
        "{}",
        run.stdout
    );
    assert!(run
        .stdout
        .contains("  (032) Multiprocessors, (128) CUDA Cores/MP:    4096 CUDA Cores\n"));
    assert_eq!(row(&run, "Multiprocessors reported:"), "32");
    assert_eq!(row(&run, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT:"), "0=2048M");
    assert_eq!(
        row(&run, "Memory limit checked:"),
        format!("2048 MiB ({} bytes)", 2048 * MIB)
    );
    // The limit counts the context: cuMemGetInfo's total stays the GPU's, free is the rest.
    assert_eq!(
        row(&run, "cuMemGetInfo after creating the context:"),
        format!("{} MiB free of {H100_MIB} MiB", 2048 - CONTEXT_MIB)
    );
    assert!(row(&run, "First refusal:").ends_with(": 2 (CUDA_ERROR_OUT_OF_MEMORY) out of memory"));
    assert!(row(&run, "Allocated at most:").starts_with(&format!("{} MiB in ", 2048 - CONTEXT_MIB)));
    assert_eq!(
        daemon.commands(),
        [
            "set_default_device_pinned_mem_limit 0 2048M",
            "set_default_active_thread_percentage 25"
        ]
    );
}

#[test]
fn a_client_limit_lower_than_the_daemons_is_the_one_that_holds() {
    // The client names the GPU by UUID, the daemon by ordinal: both reach device 0.
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "2048M");
    daemon.set_active_thread_percentage(10);
    let pinned = format!("{H100_UUID_TEXT}=1000M");
    let run = check_limits(&shared_h100(), &mps_env(&daemon, &pinned, "100", "1000"));
    assert_passes(&run);
    assert_eq!(
        row(&run, "Memory limit checked:"),
        format!("1000 MiB ({} bytes)", 1000 * MIB)
    );
    assert!(row(&run, "Allocated at most:").starts_with(&format!("{} MiB in ", 1000 - CONTEXT_MIB)));
    // The daemon's 10 % holds against the client's 100 %: 12 of 132, as measured.
    assert_eq!(row(&run, "Multiprocessors reported:"), "12");
}

#[test]
fn a_client_limit_cannot_raise_the_daemons() {
    // The daemon's default, set by UUID, is lower than what the container was told: the
    // container still stays within its limit, so the check passes at the daemon's.
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit(H100_UUID_TEXT, "1G");
    let run = check_limits(&shared_h100(), &mps_env(&daemon, "0=2G", "100", "2048"));
    assert_passes(&run);
    assert!(row(&run, "Allocated at most:").starts_with(&format!("{} MiB in ", 1024 - CONTEXT_MIB)));
}

#[test]
fn fails_where_the_platform_does_not_enforce_mps_limits() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "2048M");
    daemon.set_active_thread_percentage(25);
    let fake = shared_h100().ignore_mps_limits();
    let run = check_limits(&fake, &mps_env(&daemon, "0=2048M", "25", "2048"));
    assert_fails(&run);
    let why = explanation(&run);
    assert!(
        why.starts_with("--check-limits: the limit is not enforced: "),
        "{why}"
    );
    assert!(why.contains("more than the 2048 MiB limit"), "{why}");
    assert_eq!(row(&run, "Refusals:"), "none");
    assert_eq!(row(&run, "Multiprocessors reported:"), "132");
}

#[test]
fn an_accounted_limit_without_mps_is_not_enforced() {
    // Where no MPS runs and the plugin did not say so, the probe finds out itself.
    let fake = shared_h100();
    let run = check_limits(&fake, &[("EDGEGPU_GPU_MEMORY_LIMIT_MIB", "4096")]);
    assert_fails(&run);
    assert!(
        explanation(&run).contains("more than the 4096 MiB limit"),
        "{}",
        run.stdout
    );
}

#[test]
fn enforced_false_says_the_limit_is_accounting_only() {
    let run = check_limits(
        &shared_h100(),
        &[
            ("EDGEGPU_GPU_MEMORY_LIMIT_MIB", "4096"),
            ("EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED", "false"),
        ],
    );
    assert_fails(&run);
    let why = explanation(&run);
    assert!(
        why.starts_with("--check-limits: EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED=false: the 4096 MiB limit is accounting only, not enforced"),
        "{why}"
    );
    assert!(
        !run.stdout.contains("First refusal"),
        "nothing was allocated"
    );
}

#[test]
fn fails_without_a_limit_for_the_device() {
    for env in [
        &[][..],
        // A limit for another GPU only.
        &[("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "1=1G")],
    ] {
        let run = check_limits(&shared_h100(), env);
        assert_fails(&run);
        let why = explanation(&run);
        assert!(
            why.starts_with("--check-limits: no memory limit was given for device 0: "),
            "{why}"
        );
        assert!(why.contains(H100_UUID_TEXT), "{why}");
        assert_eq!(row(&run, "Multiprocessors reported:"), "132");
    }
}

#[test]
fn a_malformed_variable_is_named_with_its_bad_part() {
    for (name, value, part) in [
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=2048Q", "'2048Q'"),
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0:2048M", "'0:2048M'"),
        ("EDGEGPU_GPU_MEMORY_LIMIT_MIB", "2G", "'2G'"),
        ("EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED", "yes", "'yes'"),
        ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "125", "'125'"),
    ] {
        let mut env = vec![("EDGEGPU_GPU_MEMORY_LIMIT_MIB", "2048")];
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
        let run = check_limits(&shared_h100(), &env);
        assert_fails(&run);
        let why = explanation(&run);
        assert!(
            why.starts_with(&format!("--check-limits: {name}={value}: ")),
            "{why}"
        );
        assert!(why.contains(part), "{why}");
    }
}

#[test]
fn fails_with_805_when_no_mps_daemon_listens() {
    // A pipe directory nobody serves, and one whose daemon crashed (its socket file stays).
    let empty = tempfile::tempdir().unwrap();
    let crashed = MpsDaemon::start_with_env(&[(edgegpu_testkit::mps::EXIT_AFTER_ENV, "1")]);
    crashed.set_pinned_mem_limit("0", "2048M");
    for pipe in [empty.path(), crashed.pipe_dir()] {
        let env = [
            ("CUDA_MPS_PIPE_DIRECTORY", pipe.to_str().unwrap()),
            ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=2048M"),
        ];
        let run = check_limits(&shared_h100(), &env);
        assert_fails(&run);
        let why = explanation(&run);
        assert!(
            why.starts_with("--check-limits: cuDevicePrimaryCtxRetain(device 0) failed with 805 (CUDA_ERROR_MPS_CONNECTION_FAILED): "),
            "{why}"
        );
        assert!(
            why.contains(&format!(
                "CUDA_MPS_PIPE_DIRECTORY={} but no MPS control daemon answers there",
                pipe.display()
            )),
            "{why}"
        );
    }
}

#[test]
fn a_refusal_with_another_error_is_no_proof() {
    let fake = shared_h100().fail("cuMemAlloc_v2", 999);
    let run = check_limits(&fake, &[("EDGEGPU_GPU_MEMORY_LIMIT_MIB", "2048")]);
    assert_fails(&run);
    let why = explanation(&run);
    assert!(
        why.contains(
            "failed with 999 (CUDA_ERROR_UNKNOWN): unknown error, not CUDA_ERROR_OUT_OF_MEMORY"
        ),
        "{why}"
    );
}

#[test]
fn a_limit_below_the_contexts_own_memory_leaves_nothing() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "100M");
    let run = check_limits(&shared_h100(), &mps_env(&daemon, "0=100M", "100", "100"));
    assert_fails(&run);
    // The context alone needs more than the limit: it cannot even be created.
    assert!(
        explanation(&run).contains("failed with 2 (CUDA_ERROR_OUT_OF_MEMORY)"),
        "{}",
        run.stdout
    );
}

#[test]
fn the_device_flag_picks_the_limit_entry_and_the_device() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("1", "3G");
    let fake = FakeCuda::new(12040)
        .device(a100(0x17))
        .device(a100(0x65))
        .context_overhead(CONTEXT_MIB * MIB);
    let env = mps_env(&daemon, "0=1G,1=3G", "100", "3072");
    let run = run_with_env(
        &fake,
        variant::CURRENT,
        &["--check-limits", "--device", "1"],
        &env,
    );
    assert_passes(&run);
    assert!(run
        .stdout
        .contains("Detected 2 CUDA Capable device(s)\n\nDevice 1: "));
    assert!(!run.stdout.contains("Device 0: "));
    assert!(run
        .stdout
        .contains("Memory limit check (--check-limits) on device 1: "));
    assert!(row(&run, "Allocated at most:").starts_with(&format!("{} MiB in ", 3072 - CONTEXT_MIB)));
}

// ---- --allocate-mib ------------------------------------------------------------------------

fn allocate(daemon: &MpsDaemon, args: &[&str]) -> Run {
    let env = mps_env(daemon, "0=2048M", "100", "2048");
    let mut all = vec!["--allocate-mib"];
    all.extend_from_slice(args);
    run_with_env(&shared_h100(), variant::CURRENT, &all, &env)
}

#[test]
fn allocate_mib_within_the_limit_passes() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "2048M");
    let run = allocate(&daemon, &["1500"]);
    assert_passes(&run);
    assert_eq!(row(&run, "Allocated:"), "1500 MiB");
    assert_eq!(
        row(&run, "cuMemGetInfo after allocating:"),
        format!("{} MiB free of {H100_MIB} MiB", 2048 - CONTEXT_MIB - 1500)
    );
}

#[test]
fn allocate_mib_beyond_the_limit_fails_with_out_of_memory() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "2048M");
    // Within the limit, but not with the context's own memory.
    let too_much = (2048 - CONTEXT_MIB + 1).to_string();
    let run = allocate(&daemon, &[&too_much]);
    assert_fails(&run);
    assert_eq!(
        explanation(&run),
        format!(
            "--allocate-mib {too_much}: allocating {too_much} MiB on device 0 failed with 2 (CUDA_ERROR_OUT_OF_MEMORY): out of memory"
        )
    );
    let exact = (2048 - CONTEXT_MIB).to_string();
    assert_passes(&allocate(&daemon, &[&exact]));
}

#[test]
fn two_pods_hold_their_working_sets_at_the_same_time() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "2048M");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let env = mps_env(&daemon, "0=2048M", "100", "2048");
    let started = Instant::now();
    let pods: Vec<_> = dirs
        .iter()
        .map(|dir| {
            let args = ["--allocate-mib", "1500", "--hold-seconds", "1"];
            command(&shared_h100(), variant::CURRENT, dir.path(), &args, &env)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for pod in pods {
        let run = Run::from(pod.wait_with_output().unwrap());
        assert_passes(&run);
        assert_eq!(row(&run, "Holding for:"), "1 s");
    }
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn allocate_mib_works_with_a_cuda_10_2_driver() {
    // No cuDevicePrimaryCtxRelease_v2 before CUDA 11.0: the older symbol releases.
    let fake = FakeCuda::new(10020).device(nano());
    let run = run_with_env(&fake, variant::CUDA_10_2, &["--allocate-mib", "100"], &[]);
    assert_passes(&run);
    assert_eq!(row(&run, "CUDA_MPS_PIPE_DIRECTORY:"), "(not set)");
}

// ---- JSON ----------------------------------------------------------------------------------

fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.stdout))
}

#[test]
fn json_carries_the_limits_object() {
    let daemon = MpsDaemon::start();
    daemon.set_pinned_mem_limit("0", "2048M");
    daemon.set_active_thread_percentage(25);
    let env = mps_env(&daemon, "0=2048M", "25", "2048");
    let run = run_with_env(
        &shared_h100(),
        variant::CURRENT,
        &["--json", "--check-limits"],
        &env,
    );
    assert_eq!(run.status, 0, "{}", run.stdout);
    let doc = json(&run);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["result"], "PASS");
    assert_eq!(doc["devices"].as_array().unwrap().len(), 1);
    let limits = &doc["limits"];
    assert_eq!(limits["check"], "--check-limits");
    assert_eq!(limits["device"], 0);
    assert_eq!(limits["passed"], true);
    assert_eq!(
        limits["environment"]["CUDA_MPS_PIPE_DIRECTORY"],
        daemon.pipe_dir().to_str().unwrap()
    );
    assert_eq!(
        limits["environment"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
        "0=2048M"
    );
    assert_eq!(limits["mps_pinned_device_mem_limit_bytes"], 2048 * MIB);
    assert_eq!(limits["accounted_memory_mib"], 2048);
    assert_eq!(limits["limit_enforced"], true);
    assert_eq!(limits["active_thread_percentage"], 25.0);
    assert_eq!(limits["limit_bytes"], 2048 * MIB);
    assert_eq!(limits["multiprocessors"], 32);
    assert_eq!(limits["memory_total_bytes"], 84942979072u64);
    assert_eq!(limits["memory_free_bytes"], (2048 - CONTEXT_MIB) * MIB);
    assert_eq!(limits["allocated_bytes"], (2048 - CONTEXT_MIB) * MIB);
    assert_eq!(limits["refusal"]["code"], 2);
    assert_eq!(limits["refusal"]["name"], "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(limits["requested_bytes"], serde_json::Value::Null);
    let checks = doc["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0]["check"], "--check-limits");
    assert_eq!(checks[0]["passed"], true);
}

#[test]
fn json_failures_explain_in_the_limits_object() {
    let run = run_with_env(
        &shared_h100(),
        variant::CURRENT,
        &["--json", "--allocate-mib", "100000"],
        &[],
    );
    assert_eq!(run.status, 1);
    let doc = json(&run);
    assert_eq!(doc["result"], "FAIL");
    let limits = &doc["limits"];
    assert_eq!(limits["check"], "--allocate-mib 100000");
    assert_eq!(limits["passed"], false);
    assert_eq!(limits["requested_bytes"], 100000 * MIB);
    assert_eq!(limits["refusal"]["name"], "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(
        limits["environment"]["EDGEGPU_GPU_MEMORY_LIMIT_MIB"],
        serde_json::Value::Null
    );
    assert!(limits["message"]
        .as_str()
        .unwrap()
        .starts_with("allocating 100000 MiB on device 0 failed with 2"));
}

#[test]
fn json_without_an_allocation_check_has_no_limits_key() {
    let doc = json(&run(&shared_h100(), &["--json"]));
    assert!(doc.get("limits").is_none());
}
