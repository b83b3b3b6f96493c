//! What operators script against: exit codes (and that `--help`, docs/node-setup.md and
//! the code agree on them), boolean environment variables, JSON output of every command,
//! `--dry-run --exit-code`, progress and failure reports of restarts, `check` without root.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{docker_host, fixture, run, run_env};
use edgegpu_node_setup::exit_code;
use edgegpu_testkit::nodehost::NodeHost;
use edgegpu_testkit::process::binary_command;

const DAEMON_JSON: &str = "/etc/docker/daemon.json";

/// The codes of the "Exit codes:" section of `--help` (lines `  N  meaning`).
fn help_exit_codes() -> BTreeSet<u8> {
    let out = binary_command(env!("CARGO_BIN_EXE_edgegpu-node-setup"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let section = help
        .split_once("Exit codes:\n")
        .unwrap_or_else(|| panic!("no exit codes in --help:\n{help}"))
        .1;
    section
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let l = l.strip_prefix("  ")?;
            let (code, rest) = l.split_once("  ")?;
            (!rest.is_empty()).then_some(())?;
            code.trim().parse().ok()
        })
        .collect()
}

/// The codes of the table under "### Exit codes" in docs/node-setup.md.
fn docs_exit_codes() -> BTreeSet<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/node-setup.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let section = docs
        .split_once("### Exit codes\n")
        .unwrap_or_else(|| panic!("no exit code table in {}", path.display()))
        .1;
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1)?.trim().parse().ok())
        .collect()
}

/// Every exit code is documented the same way in `--help` and in docs/node-setup.md, is
/// one the code knows, and is produced by a scenario here.
#[test]
fn exit_codes_agree_in_help_docs_and_code_and_each_one_happens() {
    let code_table: BTreeSet<u8> = [
        exit_code::OK,
        exit_code::NOT_CONFIGURED,
        exit_code::CHANGES_PENDING,
        exit_code::USAGE,
        exit_code::REFUSED,
        exit_code::FAILED,
    ]
    .into_iter()
    .collect();
    let help = help_exit_codes();
    let docs = docs_exit_codes();
    assert_eq!(help, docs, "--help and docs/node-setup.md list other codes");
    assert_eq!(help, code_table, "--help and src/error.rs list other codes");
    for c in &code_table {
        assert_ne!(exit_code::meaning(*c), "unknown", "{c}");
    }

    let mut seen = BTreeSet::new();
    let mut expect = |out: &common::Out, code: u8, what: &str| {
        assert_eq!(
            out.code,
            i32::from(code),
            "{what}\nstdout:\n{}\nstderr:\n{}",
            out.stdout,
            out.stderr
        );
        seen.insert(code);
    };
    // 0 and 1.
    let host = docker_host();
    expect(
        &run(&host, &["check"]),
        exit_code::NOT_CONFIGURED,
        "check before apply",
    );
    expect(&run(&host, &["apply"]), exit_code::OK, "apply");
    expect(&run(&host, &["check"]), exit_code::OK, "check after apply");
    // 2.
    expect(
        &run(&host, &["--mode", "bogus", "apply"]),
        exit_code::USAGE,
        "an unknown mode",
    );
    // 3: a file that does not parse, and one that cannot be read (a directory where
    // daemon.json should be: reading fails, and nothing is written).
    let host = docker_host();
    host.write(DAEMON_JSON, fixture("docker/malformed.json"));
    expect(
        &run(&host, &["apply"]),
        exit_code::REFUSED,
        "malformed daemon.json",
    );
    expect(
        &run(&host, &["check"]),
        exit_code::REFUSED,
        "check, malformed",
    );
    let host = docker_host();
    std::fs::remove_file(host.path(DAEMON_JSON)).unwrap();
    std::fs::create_dir_all(host.path(&format!("{DAEMON_JSON}/oops"))).unwrap();
    let before = host.snapshot();
    let out = run(&host, &["apply"]);
    expect(&out, exit_code::REFUSED, "daemon.json is a directory");
    assert!(
        out.stderr.contains("cannot read /etc/docker/daemon.json: "),
        "{}",
        out.stderr
    );
    assert_eq!(before, host.snapshot(), "nothing written");
    expect(
        &run(&host, &["check"]),
        exit_code::REFUSED,
        "check, unreadable",
    );
    // 4: a write fails (the state directory's parent is a file).
    let host = docker_host();
    host.write("/var/lib/edgegpu", "not a directory\n");
    let out = run(&host, &["apply"]);
    expect(
        &out,
        exit_code::FAILED,
        "the state directory cannot be made",
    );
    assert_eq!(host.read(DAEMON_JSON), fixture("docker/log-opts.json"));

    assert_eq!(seen, code_table, "every documented code happens");
}

/// Each on/off option's environment variable takes the words users write: 1/true/yes/on
/// turn it on, 0/false/no/off and an empty value leave it off; anything else is an invalid
/// command line; the command line beats the environment.
#[test]
fn boolean_environment_variables_take_1_true_0_false() {
    const ON: [&str; 5] = ["1", "true", "TRUE", "yes", "on"];
    const OFF: [&str; 5] = ["0", "false", "False", "no", ""];
    let cases = ON
        .iter()
        .map(|v| (*v, true))
        .chain(OFF.iter().map(|v| (*v, false)));

    for (value, on) in cases {
        // EDGEGPU_NO_RESTART: the reason restarts are skipped names it (checked before
        // the root, which is not / here).
        let host = docker_host();
        let out = run_env(&host, &["apply"], &[("EDGEGPU_NO_RESTART", value)]);
        assert_eq!(out.code, 0, "{value:?}: {}", out.stderr);
        let reason = if on {
            "(--no-restart)"
        } else {
            "(--root is not /)"
        };
        assert!(
            out.stdout
                .contains(&format!("not restarting services {reason}")),
            "EDGEGPU_NO_RESTART={value:?}:\n{}",
            out.stdout
        );

        // EDGEGPU_FORCE: a default runtime whose binary is missing.
        let host = NodeHost::new();
        host.write(DAEMON_JSON, "{}\n");
        let out = run_env(&host, &["apply", "--dry-run"], &[("EDGEGPU_FORCE", value)]);
        let want = if on { 0 } else { 3 };
        assert_eq!(out.code, want, "EDGEGPU_FORCE={value:?}: {}", out.stderr);

        // EDGEGPU_CDI: CDI mode.
        let host = docker_host();
        let out = run_env(&host, &["check"], &[("EDGEGPU_CDI", value)]);
        let first = out.stdout.lines().next().unwrap_or_default().to_string();
        let want = if on {
            "mode: docker, CDI"
        } else {
            "mode: docker"
        };
        assert_eq!(first, want, "EDGEGPU_CDI={value:?}:\n{}", out.stdout);

        // EDGEGPU_NO_SET_DEFAULT: only register the runtime.
        let out = run_env(
            &host,
            &["apply", "--dry-run"],
            &[("EDGEGPU_NO_SET_DEFAULT", value)],
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(
            out.stdout.contains("(present), as the default"),
            !on,
            "EDGEGPU_NO_SET_DEFAULT={value:?}:\n{}",
            out.stdout
        );
    }

    // The command line beats the environment, both ways.
    let host = docker_host();
    let out = run_env(
        &host,
        &["--set-default", "apply", "--dry-run"],
        &[("EDGEGPU_NO_SET_DEFAULT", "1")],
    );
    assert!(
        out.stdout.contains("(present), as the default"),
        "{}",
        out.stderr
    );
    let out = run_env(
        &host,
        &["--no-set-default", "apply", "--dry-run"],
        &[("EDGEGPU_NO_SET_DEFAULT", "0")],
    );
    assert!(!out.stdout.contains("as the default"), "{}", out.stdout);
    let out = run_env(&host, &["--force", "check"], &[("EDGEGPU_FORCE", "0")]);
    assert_eq!(out.code, 1, "{}", out.stderr);

    // Anything else is refused like a bad flag value, naming the accepted words.
    for var in [
        "EDGEGPU_NO_RESTART",
        "EDGEGPU_FORCE",
        "EDGEGPU_CDI",
        "EDGEGPU_NO_SET_DEFAULT",
    ] {
        let out = run_env(&host, &["check"], &[(var, "maybe")]);
        assert_eq!(out.code, 2, "{var}: {}", out.stderr);
        assert!(
            out.stderr.contains("invalid value 'maybe'") && out.stderr.contains("1, true, yes"),
            "{var}: {}",
            out.stderr
        );
    }
}
