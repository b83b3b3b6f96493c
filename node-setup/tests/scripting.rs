//! What operators script against: exit codes (and that `--help`, docs/node-setup.md and
//! the code agree on them), boolean environment variables, JSON output of every command,
//! `--dry-run --exit-code`, progress and failure reports of restarts, `check` without root.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{docker_host, fixture, ok, run, run_env};
use edgegpu_node_setup::exit_code;
use edgegpu_testkit::nodehost::NodeHost;
use edgegpu_testkit::process::binary_command;

const DAEMON_JSON: &str = "/etc/docker/daemon.json";

/// The codes of the "Exit codes:" section of `--help` (lines `  N  meaning`).
fn help_exit_codes() -> BTreeSet<u8> {
    let out = binary_command(common::node_setup_binary())
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
    expect(
        &run(&host, &["apply", "--dry-run", "--exit-code"]),
        exit_code::CHANGES_PENDING,
        "a dry run with changes pending",
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

fn json(out: &common::Out) -> serde_json::Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}:\nstdout:\n{}\nstderr:\n{}", out.stdout, out.stderr))
}

/// `apply` and `revert` say in JSON what was decided, each file written with its backup,
/// each service and its command, and the exit status with its meaning.
#[test]
fn apply_and_revert_report_in_json() {
    let host = docker_host();
    let before = host.snapshot();
    let original_daemon_json = host.read(DAEMON_JSON);

    let out = run(&host, &["apply", "--dry-run", "--output", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out);
    assert_eq!(v["command"], "apply");
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["result"], "changes-pending");
    assert_eq!(v["decision"]["mode"], "docker");
    assert!(
        v["decision"]["reason"]
            .as_str()
            .unwrap()
            .contains("predates the default-runtime setting"),
        "{v}"
    );
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{v}");
    assert!(files.iter().all(|f| f["written"] == false
        && f["action"] == "update"
        && f["diff"].as_str().unwrap().starts_with("--- a/")));
    assert_eq!(v["restarts"][0]["status"], "planned");
    assert_eq!(before, host.snapshot(), "a dry run writes nothing");

    let out = run(&host, &["apply", "--output", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out);
    assert_eq!(v["result"], "applied");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["exit_meaning"], "success");
    assert_eq!(v["error"], serde_json::Value::Null);
    let files = v["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "/etc/systemd/system/k3s.service",
            "/etc/systemd/system/k3s-agent.service",
            DAEMON_JSON
        ]
    );
    for f in files {
        assert_eq!(f["written"], true);
        assert!(f.get("diff").is_none());
        let backup = f["backup"].as_str().unwrap();
        assert!(
            host.exists(backup),
            "the backup named in the JSON exists: {backup}"
        );
    }
    let restarts: Vec<(&str, &str, &str)> = v["restarts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap(),
                r["command"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        restarts,
        [
            ("daemon-reload", "systemctl daemon-reload", "to-run"),
            (
                "reload",
                "systemctl try-reload-or-restart docker.service",
                "to-run"
            ),
            (
                "restart",
                "systemctl try-restart k3s-agent.service",
                "to-run"
            ),
            ("restart", "systemctl try-restart k3s.service", "to-run"),
        ]
    );
    assert_eq!(v["restarts"][0]["unit"], serde_json::Value::Null);
    assert_eq!(v["restarts"][3]["unit"], "k3s.service");
    assert_eq!(v["restarts_skipped"], "--root is not /");
    let to_finish: Vec<&str> = restarts.iter().map(|r| r.1).collect();
    assert_eq!(v["to_finish"], serde_json::json!(to_finish));

    let v = json(&run(&host, &["apply", "--output", "json"]));
    assert_eq!(v["result"], "already-configured");
    assert_eq!(v["files"], serde_json::json!([]));

    // EDGEGPU_OUTPUT selects it too.
    let out = run_env(
        &host,
        &["revert", "--dry-run"],
        &[("EDGEGPU_OUTPUT", "json")],
    );
    let v = json(&out);
    assert_eq!(v["command"], "revert");
    assert_eq!(v["result"], "changes-pending");
    assert!(v["files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["action"] == "restore" && f["written"] == false));

    // Someone already put daemon.json back as it was: revert (forced, since the file
    // changed after apply) leaves it alone and says it wrote nothing there.
    host.write(DAEMON_JSON, &original_daemon_json);
    let v = json(&run(&host, &["--force", "revert", "--output", "json"]));
    assert_eq!(v["result"], "reverted");
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    for f in files {
        let untouched = f["path"] == DAEMON_JSON;
        assert_eq!(f["written"], !untouched, "{f}");
    }
    assert_eq!(v["restarts"][1]["action"], "restart", "{v}");
    assert_eq!(
        v["restarts"][1]["command"],
        "systemctl try-restart docker.service"
    );
    assert_eq!(content(&before), content(&host.snapshot()));

    let v = json(&run(&host, &["revert", "--output", "json"]));
    assert_eq!(v["result"], "nothing-to-revert");

    // A refusal is a document too (stdout), besides the error line (stderr).
    let host = docker_host();
    host.write(DAEMON_JSON, fixture("docker/malformed.json"));
    for cmd in ["apply", "check", "revert"] {
        let out = run(&host, &[cmd, "--output", "json"]);
        let v = json(&out);
        if cmd == "revert" {
            assert_eq!(v["result"], "nothing-to-revert");
            continue;
        }
        assert_eq!(out.code, 3, "{cmd}");
        assert_eq!(v["command"], cmd);
        assert_eq!(v["result"], "refused");
        assert_eq!(v["exit_code"], 3);
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("/etc/docker/daemon.json:5:3: "),
            "{v}"
        );
        assert!(out.stderr.contains("error: /etc/docker/daemon.json:5:3"));
    }
}

fn content(
    s: &edgegpu_testkit::nodehost::Snapshot,
) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    s.iter()
        .map(|(p, (c, _, _))| (p.clone(), c.clone()))
        .collect()
}

/// Records systemctl calls instead of running them, failing those that name `fail_on`.
#[derive(Default)]
struct Recorder {
    calls: Vec<String>,
    fail_on: Option<&'static str>,
}

impl edgegpu_node_setup::restart::ServiceManager for Recorder {
    fn systemctl(&mut self, args: &[String]) -> Result<(), String> {
        let call = args.join(" ");
        self.calls.push(call.clone());
        match self.fail_on {
            Some(f) if call.contains(f) => Err(format!("systemctl {call} failed (exit status: 1)")),
            _ => {
                std::thread::sleep(std::time::Duration::from_millis(120));
                Ok(())
            }
        }
    }
}

/// The library entry point with restarts through `rec` (the tree is not /, so the binary
/// would only print the commands). Returns (code, stdout, stderr).
fn run_restarting(host: &NodeHost, args: &[&str], rec: &mut Recorder) -> (u8, String, String) {
    use clap::Parser;
    let root = host.root().to_str().unwrap();
    let cli = edgegpu_node_setup::cli::Cli::parse_from(
        ["edgegpu-node-setup", "--root", root].iter().chain(args),
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = edgegpu_node_setup::run_with(
        cli,
        edgegpu_node_setup::ops::Restarts::Run(rec),
        &mut out,
        &mut err,
    );
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// While services restart, stderr says which unit, the result and the time, at the
/// default log level; a failed restart names the files already written and the commands
/// that finish the job (or the revert that undoes it).
#[test]
fn restarts_report_progress_and_a_failure_says_how_to_finish() {
    let host = docker_host();
    let mut rec = Recorder::default();
    let (code, out, err) = run_restarting(&host, &["apply"], &mut rec);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rec.calls.len(), 4);
    for (unit, doing, done) in [
        (
            "systemd",
            "reloading unit files (systemctl daemon-reload)",
            "unit files reloaded in ",
        ),
        (
            "docker.service",
            "reloading (systemctl try-reload-or-restart docker.service)",
            "reloaded in ",
        ),
        (
            "k3s-agent.service",
            "restarting (systemctl try-restart k3s-agent.service)",
            "restarted in ",
        ),
        (
            "k3s.service",
            "restarting (systemctl try-restart k3s.service)",
            "restarted in ",
        ),
    ] {
        let starting = format!("edgegpu-node-setup: {unit}: {doing} ...\n");
        let finished = format!("edgegpu-node-setup: {unit}: {done}");
        assert!(err.contains(&starting), "{starting:?} in:\n{err}");
        let line = err
            .lines()
            .find(|l| l.starts_with(&finished))
            .unwrap_or_else(|| panic!("{finished:?} in:\n{err}"));
        let secs: f64 = line[finished.len()..]
            .strip_suffix(" s")
            .unwrap()
            .parse()
            .unwrap();
        assert!(secs >= 0.1, "the time it took: {line}");
    }
    assert!(
        out.contains("ran: systemctl try-restart k3s.service"),
        "{out}"
    );

    // The agent's restart fails: k3s.service is not restarted, the error lists the
    // written files and the commands left, and the JSON says the same.
    let host = docker_host();
    let mut rec = Recorder {
        fail_on: Some("k3s-agent"),
        ..Default::default()
    };
    let (code, out, err) = run_restarting(&host, &["apply", "--output", "json"], &mut rec);
    assert_eq!(code, exit_code::FAILED, "{err}");
    assert_eq!(
        rec.calls,
        [
            "daemon-reload",
            "try-reload-or-restart docker.service",
            "try-restart k3s-agent.service"
        ]
    );
    assert!(
        err.contains("edgegpu-node-setup: k3s-agent.service: FAILED after "),
        "{err}"
    );
    let expected = "edgegpu-node-setup: error: systemctl try-restart k3s-agent.service failed: systemctl try-restart k3s-agent.service failed (exit status: 1)
  written: /etc/systemd/system/k3s.service, /etc/systemd/system/k3s-agent.service, /etc/docker/daemon.json
  already done: systemctl daemon-reload, systemctl try-reload-or-restart docker.service
  to finish, fix the cause and run:
    systemctl try-restart k3s-agent.service
    systemctl try-restart k3s.service
  or undo instead: edgegpu-node-setup revert
";
    assert!(err.ends_with(expected), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["result"], "restart-failed", "the files are written");
    assert_eq!(v["exit_code"], 4);
    let statuses: Vec<&str> = v["restarts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["done", "done", "failed", "not-run"]);
    assert!(v["restarts"][0]["seconds"].as_f64().unwrap() >= 0.1);
    assert_eq!(
        v["to_finish"],
        serde_json::json!([
            "systemctl try-restart k3s-agent.service",
            "systemctl try-restart k3s.service"
        ])
    );
    assert_eq!(v["to_undo"], "edgegpu-node-setup revert");
    assert!(v["error"].as_str().unwrap().contains("to finish"));

    // Revert's failed restart says the same the other way round.
    let mut rec = Recorder {
        fail_on: Some("docker"),
        ..Default::default()
    };
    let (code, _, err) = run_restarting(&host, &["revert"], &mut rec);
    assert_eq!(code, exit_code::FAILED, "{err}");
    assert!(
        err.contains("  restored or removed: ")
            && err.contains("    systemctl try-restart docker.service\n    systemctl try-restart k3s-agent.service\n")
            && err.contains("or undo instead: edgegpu-node-setup apply"),
        "{err}"
    );
}

/// `--dry-run --exit-code` works like `git diff --exit-code`: 1 while changes are
/// pending, 0 when there are none, so it serves as a drift check.
#[test]
fn dry_run_exit_code_tells_whether_changes_are_pending() {
    let host = docker_host();
    let drift = |host: &NodeHost, cmd: &str| {
        let out = run(host, &[cmd, "--dry-run", "--exit-code"]);
        assert!(out.code == 0 || out.code == 1, "{cmd}: {}", out.stderr);
        out.code
    };
    assert_eq!(drift(&host, "apply"), 1, "not applied yet");
    assert_eq!(drift(&host, "revert"), 0, "nothing to revert");
    // Without --exit-code a dry run succeeds either way.
    assert_eq!(run(&host, &["apply", "--dry-run"]).code, 0);
    let v = json(&run(
        &host,
        &["apply", "--dry-run", "--exit-code", "--output", "json"],
    ));
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["exit_meaning"], "changes pending (--dry-run --exit-code)");
    ok(&host, &["apply"]);
    assert_eq!(drift(&host, "apply"), 0, "configured");
    assert_eq!(drift(&host, "revert"), 1, "revert would restore");
    // Drift seen by a user who may not read node-setup's root-only manifest.
    let unchanged = host.read(DAEMON_JSON);
    host.write(DAEMON_JSON, "{}\n");
    if let Some(out) = run_unprivileged(&host, &["apply", "--dry-run", "--exit-code"]) {
        assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    }
    host.write(DAEMON_JSON, &unchanged);
    // Someone takes the default away: drift.
    let text = host
        .read(DAEMON_JSON)
        .replace(",\n    \"default-runtime\": \"nvidia\"", "");
    assert!(!text.contains("default-runtime"), "{text}");
    host.write(DAEMON_JSON, &text);
    assert_eq!(drift(&host, "apply"), 1, "drift");
    // It needs --dry-run.
    let out = run(&host, &["apply", "--exit-code"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--dry-run"), "{}", out.stderr);
}

/// Runs the binary as an unprivileged user: as root through `setpriv` (user and group
/// nobody), else as the current user (who cannot read a mode-000 file either). `None`
/// (after a skip line) when privileges cannot be dropped.
fn run_unprivileged(host: &NodeHost, args: &[&str]) -> Option<common::Out> {
    let bin = binary_command(common::node_setup_binary());
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let Some(setpriv) = common::real_tool("setpriv", "util-linux") else {
            eprintln!("SKIP: cannot drop privileges without setpriv");
            return None;
        };
        let mut c = std::process::Command::new(setpriv);
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(bin.get_program())
            .args(bin.get_args());
        c
    } else {
        bin
    };
    // nobody must reach the tree (temporary directories are 0700).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(host.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = cmd
        .env_remove("EDGEGPU_OUTPUT")
        .arg("--root")
        .arg(host.root())
        .args(args)
        .output()
        .expect("run edgegpu-node-setup unprivileged");
    let out = common::Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    if out.stderr.contains("setpriv: ") {
        eprintln!("SKIP: setpriv cannot drop privileges here: {}", out.stderr);
        return None;
    }
    Some(out)
}

/// `check` by a user who is not root, on a host whose k3s environment file is root-only
/// (the installer writes it 0600): it says which file it could not read and what the
/// answer is without it, exits 3 (cannot tell), in text and in JSON.
#[test]
fn check_without_root_names_what_it_cannot_read_and_answers_without_it() {
    const ENV: &str = "/etc/systemd/system/k3s.service.env";
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.30.4+k3s1"))
        .write(
            "/etc/systemd/system/k3s.service",
            fixture("units/k3s-installer-server.service"),
        )
        .nvidia_runtime()
        // What decides where k3s reads its settings, only root can see.
        .write(
            ENV,
            "K3S_CONFIG_FILE=/etc/k3s/site.yaml\nK3S_TOKEN=secret\n",
        )
        .set_mode(ENV, 0o600);
    ok(&host, &["apply"]);
    assert!(host.exists("/etc/k3s/site.yaml.d/99-edgegpu-nvidia-runtime.yaml"));
    assert_eq!(run(&host, &["check"]).code, 0, "root sees it configured");
    if !nix::unistd::geteuid().is_root() {
        // Run without root, the suite's own user stands for root above and for the
        // unprivileged user below, who cannot read a mode-000 file either.
        host.set_mode(ENV, 0o000);
    }

    let Some(out) = run_unprivileged(&host, &["check"]) else {
        return;
    };
    assert_eq!(out.code, 3, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.starts_with(&format!(
            "unreadable: {ENV}: Permission denied (os error 13) (run check as root); the answer below is computed as if it did not exist\n"
        )),
        "{}",
        out.stdout
    );
    let last = format!(
        "cannot tell: {ENV} could not be read (permission denied: run check as root); without it: node is NOT fully configured (run: edgegpu-node-setup apply)\n"
    );
    assert!(out.stdout.ends_with(&last), "{}", out.stdout);
    assert!(out.stderr.contains(&last), "{}", out.stderr);

    let out = run_unprivileged(&host, &["check", "--output", "json"]).unwrap();
    assert_eq!(out.code, 3, "{}", out.stderr);
    let v = json(&out);
    assert_eq!(v["unreadable"][0]["file"], ENV);
    assert_eq!(
        v["unreadable"][0]["error"],
        "Permission denied (os error 13)"
    );
    assert_eq!(v["configured"], false);
    assert_eq!(v["exit_code"], 3);
    assert!(v["exit_meaning"]
        .as_str()
        .unwrap()
        .starts_with("cannot tell"));
    if nix::unistd::geteuid().is_root() {
        let v = json(&run(&host, &["check", "--output", "json"]));
        assert_eq!(v["unreadable"], serde_json::json!([]), "root reads it");
    }

    // apply plans from every file or not at all: a refusal that says why (3, not 4).
    let out = run_unprivileged(&host, &["apply", "--dry-run"]).unwrap();
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "error: cannot read {ENV}: Permission denied (os error 13) (run as root)"
        )),
        "{}",
        out.stderr
    );
}
