//! End-to-end: the real binary on fake host trees (`--root`), one per layout.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use common::{fixture, ok, real_tool, run, run_env, systemd_verify};
use edgegpu_testkit::nodehost::{NodeHost, Snapshot};
use edgegpu_testkit::process::binary_command;

const UNIT: &str = "/etc/systemd/system/k3s.service";
const AGENT_UNIT: &str = "/etc/systemd/system/k3s-agent.service";
const DAEMON_JSON: &str = "/etc/docker/daemon.json";
const DROP_IN: &str = "/etc/rancher/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml";
const RUNTIME_CLASS: &str =
    "/var/lib/rancher/k3s/server/manifests/edgegpu-runtimeclass-nvidia.yaml";
const MANIFEST: &str = "/var/lib/edgegpu/node-setup/manifest.json";
const TEMPLATE_V3: &str = "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl";
const TEMPLATE_V2: &str = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl";

/// Content and mode of every file (mtime left out: revert rewrites files).
fn content(s: &Snapshot) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    s.iter()
        .map(|(p, (c, m, _))| (p.clone(), (c.clone(), *m)))
        .collect()
}

/// Applies, proves the second apply writes nothing, checks, reverts, proves the tree is
/// back to the original. Returns the apply output.
fn round_trip(host: &NodeHost, extra: &[&str]) -> String {
    let before = host.snapshot();
    let a = |cmd: &'static str| -> Vec<&str> { extra.iter().copied().chain([cmd]).collect() };
    let check = run(host, &a("check"));
    assert_eq!(
        check.code, 1,
        "not configured before apply:\n{}",
        check.stdout
    );
    let applied = ok(host, &a("apply"));
    let after_first = host.snapshot();
    assert_ne!(content(&before), content(&after_first));
    let second = ok(host, &a("apply"));
    assert!(
        second.contains("already configured: nothing to change, no file written"),
        "{second}"
    );
    assert_eq!(
        after_first,
        host.snapshot(),
        "second apply must not touch any file (mtime included)"
    );
    let check = ok(host, &a("check"));
    assert!(check.contains("node is fully configured"), "{check}");
    let reverted = ok(host, &a("revert"));
    assert!(
        reverted.contains("restored") || reverted.contains("removed"),
        "{reverted}"
    );
    assert_eq!(
        content(&before),
        content(&host.snapshot()),
        "revert must restore the tree exactly"
    );
    assert!(!host.exists("/var/lib/edgegpu/node-setup"));
    applied
}

#[test]
fn version_prints_version_commit_and_target() {
    let out = binary_command(common::node_setup_binary())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.trim_end();
    // "edgegpu-node-setup 0.1.0 (commit abc123def456, target x86_64-unknown-linux-gnu)"
    let prefix = format!("edgegpu-node-setup {} (commit ", env!("CARGO_PKG_VERSION"));
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line}"));
    let (commit, target) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", target "))
        .unwrap_or_else(|| panic!("{line}"));
    assert!(!commit.is_empty() && !commit.contains(' '), "{line}");
    assert!(target.contains("-linux-"), "{line}");
}

#[test]
fn help_documents_every_flag_its_env_var_and_default() {
    let out = binary_command(common::node_setup_binary())
        .args(["apply", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--root",
        "EDGEGPU_ROOT",
        "[default: /]",
        "--mode",
        "EDGEGPU_NODE_SETUP_MODE",
        "k3s-default-runtime",
        "containerd",
        "docker",
        "[default: auto]",
        "--runtime-path",
        "EDGEGPU_RUNTIME_PATH",
        "[default: /usr/bin/nvidia-container-runtime]",
        "--runtime-name",
        "EDGEGPU_RUNTIME_NAME",
        "[default: nvidia]",
        "--no-restart",
        "EDGEGPU_NO_RESTART",
        "--set-default",
        "--no-set-default",
        "EDGEGPU_NO_SET_DEFAULT",
        "--force",
        "EDGEGPU_FORCE",
        "--k3s-version",
        "EDGEGPU_K3S_VERSION",
        "--dry-run",
        "Exit codes",
        "sudo edgegpu-node-setup apply",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
    let out = binary_command(common::node_setup_binary())
        .args(["check", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--output") && help.contains("json"), "{help}");
}

fn k3s_server(host: &NodeHost, version: Option<&str>) {
    host.k3s_binary(version)
        .write(UNIT, fixture("units/k3s-installer-server.service"))
        .nvidia_runtime();
}

#[test]
fn current_k3s_gets_a_default_runtime_drop_in_and_no_unit_edit() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.30.4+k3s1"));
    let applied = round_trip(&host, &[]);
    assert!(applied.contains("mode: k3s-default-runtime"), "{applied}");
    assert!(
        applied.contains("found: k3s binary /usr/local/bin/k3s, version v1.30.4"),
        "{applied}"
    );
    assert!(
        applied.contains("has the default-runtime setting"),
        "explains the choice:\n{applied}"
    );
    assert!(
        applied.contains("deploys RuntimeClass 'nvidia' itself"),
        "{applied}"
    );
    // Look at the applied state once more (round_trip reverted it).
    ok(&host, &["apply"]);
    assert!(host.read(DROP_IN).ends_with("\ndefault-runtime: nvidia\n"));
    assert_eq!(
        host.read(UNIT),
        fixture("units/k3s-installer-server.service")
    );
    assert!(!host.exists(RUNTIME_CLASS));
}

#[test]
fn k3s_of_unknown_version_also_gets_a_runtime_class_manifest() {
    let host = NodeHost::new();
    k3s_server(&host, None);
    let applied = round_trip(&host, &[]);
    assert!(applied.contains("version unknown"), "{applied}");
    ok(&host, &["apply"]);
    let rc = host.read(RUNTIME_CLASS);
    assert!(
        rc.contains("kind: RuntimeClass\nmetadata:\n  name: nvidia\nhandler: nvidia\n"),
        "{rc}"
    );
}

#[test]
fn an_agent_gets_only_the_drop_in() {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.31.2+k3s1"))
        .write(AGENT_UNIT, fixture("units/k3s-installer-agent.service"))
        .nvidia_runtime();
    ok(&host, &["apply"]);
    assert!(host.exists(DROP_IN));
    assert!(!host.exists("/var/lib/rancher/k3s/server"));
}

#[test]
fn a_default_runtime_already_set_by_the_user_needs_nothing() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.30.4+k3s1"));
    host.write(
        "/etc/rancher/k3s/config.yaml",
        "write-kubeconfig-mode: \"0644\"\ndefault-runtime: nvidia\n",
    );
    let out = ok(&host, &["apply"]);
    assert!(out.contains("already configured"), "{out}");
}

#[test]
fn a_later_drop_in_that_overrides_the_default_is_refused() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.30.4+k3s1"));
    host.write(
        "/etc/rancher/k3s/config.yaml.d/zz-site.yaml",
        "default-runtime: crun\n",
    );
    let before = host.snapshot();
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr.contains("zz-site.yaml:1") && out.stderr.contains("default runtime 'crun'"),
        "{}",
        out.stderr
    );
    assert_eq!(before, host.snapshot());
}

#[test]
fn k3s_with_docker_flag_selects_docker_mode_and_merges_daemon_json() {
    let host = NodeHost::new();
    let unit = fixture("units/k3s-installer-server.service")
        .replace("    server \\\n", "    server \\\n\t'--docker' \\\n");
    host.k3s_binary(Some("v1.30.4+k3s1"))
        .write(UNIT, &unit)
        .nvidia_runtime();
    host.write(DAEMON_JSON, fixture("docker/registry-mirrors.json"));
    let applied = round_trip(&host, &[]);
    assert!(
        applied.contains("mode: docker") && applied.contains("runs with --docker"),
        "{applied}"
    );
    // Only daemon.json changed: docker reloads, k3s is left running.
    assert!(
        applied.contains(
            "to apply the change run:\n  systemctl try-reload-or-restart docker.service\n"
        ),
        "{applied}"
    );
    assert!(!applied.contains("k3s.service\n"), "{applied}");
}

#[test]
fn an_execstart_override_in_a_drop_in_is_the_one_edited() {
    let host = NodeHost::new();
    let drop_in = "/etc/systemd/system/k3s.service.d/override.conf";
    k3s_server(&host, Some("v1.27.6+k3s1"));
    host.write(
        drop_in,
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s server --node-label gpu=true\n",
    )
    .write(
        "/etc/systemd/system/k3s.service.d/10-env.conf",
        "[Service]\nEnvironment=A=b\n",
    )
    .write(DAEMON_JSON, "{}");
    round_trip(&host, &[]);
    let out = ok(&host, &["apply"]);
    assert!(
        out.contains("ExecStart from /etc/systemd/system/k3s.service.d/override.conf"),
        "{out}"
    );
    assert_eq!(
        host.read(UNIT),
        fixture("units/k3s-installer-server.service")
    );
    assert_eq!(
        host.read(drop_in),
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s server --docker --node-label gpu=true\n"
    );
}

#[test]
fn a_masked_k3s_unit_is_ignored() {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.30.4+k3s1"))
        .symlink(UNIT, "/dev/null")
        .write(AGENT_UNIT, fixture("units/k3s-installer-agent.service"))
        .nvidia_runtime();
    let out = ok(&host, &["apply", "--dry-run"]);
    assert!(
        out.contains("found: /etc/systemd/system/k3s-agent.service"),
        "{out}"
    );
    assert!(
        !out.contains("found: /etc/systemd/system/k3s.service"),
        "{out}"
    );
}

#[test]
fn old_k3s_with_docker_gets_the_flag_and_daemon_json_and_verifies() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.27.4+k3s1"));
    host.write(DAEMON_JSON, fixture("docker/log-opts.json"));
    let applied = round_trip(&host, &[]);
    assert!(
        applied.contains("mode: docker")
            && applied.contains("predates the default-runtime setting"),
        "{applied}"
    );
    assert!(applied.contains("systemctl daemon-reload\n  systemctl try-reload-or-restart docker.service\n  systemctl try-restart k3s.service"), "restart order:\n{applied}");
    ok(&host, &["apply"]);
    let unit = host.read(UNIT);
    assert!(unit.contains("    server \\\n\t'--docker' \\\n"), "{unit}");
    let json: serde_json::Value = serde_json::from_str(&host.read(DAEMON_JSON)).unwrap();
    assert_eq!(json["default-runtime"], "nvidia");
    assert_eq!(json["log-opts"]["max-size"], "10m");
    if let Some(tool) = real_tool("systemd-analyze", "systemd") {
        let (good, out) = systemd_verify(&tool, "k3s.service", &unit, &[]);
        assert!(good, "{out}");
    }
}

/// auto's docker mode on an older k3s moves k3s from its own containerd to docker: the
/// output says so before anything is written, and names what keeps containerd.
#[test]
fn auto_says_when_it_moves_k3s_to_docker_and_how_to_keep_containerd() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.27.4+k3s1"));
    host.write(DAEMON_JSON, fixture("docker/log-opts.json"));
    let out = ok(&host, &["apply", "--dry-run"]);
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), 1, "{out}");
    let w = warnings[0];
    assert!(
        w.starts_with("warning: auto moves k3s.service from k3s's own containerd to docker: ")
            && w.contains("pass --mode containerd --no-set-default")
            && w.contains("upgrade k3s to v1.29.0"),
        "{w}"
    );
    // Right after the choice it explains, before the diffs.
    assert!(out.find("  why: ").unwrap() < out.find(w).unwrap());
    assert!(out.find(w).unwrap() < out.find("--- a/").unwrap());
    // In JSON too: apply's decision and check's document.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&host, &["apply", "--dry-run", "--output", "json"])).unwrap();
    assert_eq!(
        v["decision"]["warnings"][0],
        w.trim_start_matches("warning: ")
    );
    let out = run(&host, &["check", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["warnings"][0], w.trim_start_matches("warning: "));
    // What it names keeps k3s on its containerd.
    let kept = ok(
        &host,
        &["--mode", "containerd", "--no-set-default", "apply"],
    );
    assert!(
        kept.contains("mode: containerd") && !kept.contains("warning:"),
        "{kept}"
    );
    assert_eq!(
        host.read(UNIT),
        fixture("units/k3s-installer-server.service")
    );
    ok(
        &host,
        &["--mode", "containerd", "--no-set-default", "revert"],
    );

    // No warning where nothing moves: docker asked for, k3s already on docker, no k3s.
    let out = ok(&host, &["--mode", "docker", "apply", "--dry-run"]);
    assert!(!out.contains("warning:"), "{out}");
    ok(&host, &["apply"]);
    let out = ok(&host, &["check"]);
    assert!(
        out.contains("runs with --docker") && !out.contains("warning:"),
        "{out}"
    );
    let host = NodeHost::new();
    host.write(DAEMON_JSON, "{}").nvidia_runtime();
    assert!(!ok(&host, &["apply", "--dry-run"]).contains("warning:"));
}

#[test]
fn meta_virtualization_units_are_edited_in_their_single_line_layout() {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.28.3+k3s1"))
        .write(
            "/lib/systemd/system/k3s.service",
            fixture("units/metavirt-k3s.service"),
        )
        .write(
            "/lib/systemd/system/k3s-agent.service",
            fixture("units/metavirt-k3s-agent.service"),
        )
        .nvidia_runtime();
    round_trip(&host, &["--mode", "docker"]);
    ok(&host, &["--mode", "docker", "apply"]);
    assert!(host
        .read("/lib/systemd/system/k3s.service")
        .contains("\nExecStart=/usr/local/bin/k3s server --docker\n"));
    assert!(host
        .read("/lib/systemd/system/k3s-agent.service")
        .contains("\nExecStart=/usr/local/bin/k3s agent --docker\n"));
    let json: serde_json::Value = serde_json::from_str(&host.read(DAEMON_JSON)).unwrap();
    assert_eq!(
        json["runtimes"]["nvidia"]["path"],
        "/usr/bin/nvidia-container-runtime"
    );
}

#[test]
fn meta_virtualization_k3s_uses_the_system_containerd() {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.28.3+k3s1"))
        .write(
            "/lib/systemd/system/k3s.service",
            fixture("units/metavirt-k3s.service"),
        )
        .executable("/usr/bin/containerd", "")
        .write("/etc/containerd/config.toml", fixture("containerd/v2.toml"))
        .nvidia_runtime();
    let applied = round_trip(&host, &[]);
    assert!(
        applied.contains("mode: containerd") && applied.contains("requires containerd.service"),
        "{applied}"
    );
    assert!(
        applied.contains(
            "systemctl try-restart containerd.service\n  systemctl try-restart k3s.service"
        ),
        "{applied}"
    );
    ok(&host, &["apply"]);
    let config = host.read("/etc/containerd/config.toml");
    assert!(
        config.starts_with("# /etc/containerd/config.toml written by hand; keep these comments!\n")
    );
    for (release, good, out) in common::containerd_dumps(&config) {
        assert!(
            good && out.contains("default_runtime_name = \"nvidia\""),
            "containerd {release}: {out}"
        );
    }
}

#[test]
fn an_existing_k3s_template_is_edited_instead_of_the_generated_config() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.26.9+k3s1"));
    host.write(TEMPLATE_V2, fixture("containerd/k3s-config-full.toml.tmpl"));
    host.write(
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        "# generated\n",
    );
    let applied = round_trip(&host, &[]);
    assert!(
        applied.contains("mode: containerd") && applied.contains("existing template"),
        "{applied}"
    );
    ok(&host, &["apply"]);
    assert_eq!(
        host.read("/var/lib/rancher/k3s/agent/etc/containerd/config.toml"),
        "# generated\n"
    );
    assert!(host
        .read(TEMPLATE_V2)
        .contains("default_runtime_name = \"nvidia\""));
    // k3s 1.26 does not deploy a RuntimeClass: we do.
    assert!(host.exists(RUNTIME_CLASS));
}

#[test]
fn a_base_template_on_current_k3s_sets_the_default_through_k3s() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.32.2+k3s1"));
    host.write(
        TEMPLATE_V3,
        fixture("containerd/k3s-config-v3-base.toml.tmpl"),
    );
    round_trip(&host, &[]);
    ok(&host, &["apply"]);
    assert_eq!(
        host.read(TEMPLATE_V3),
        fixture("containerd/k3s-config-v3-base.toml.tmpl"),
        "nothing re-declared"
    );
    assert!(host.read(DROP_IN).contains("default-runtime: nvidia"));
}

#[test]
fn old_k3s_without_docker_cannot_get_a_default_and_says_what_to_do() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.27.4+k3s1"));
    let before = host.snapshot();
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("--no-set-default") && out.stderr.contains("--mode docker"),
        "{}",
        out.stderr
    );
    assert_eq!(before, host.snapshot());
    // Without the default, pods name the runtime: a RuntimeClass is all that is needed.
    round_trip(&host, &["--no-set-default"]);
    ok(&host, &["--no-set-default", "apply"]);
    assert!(host.exists(RUNTIME_CLASS));
    assert!(!host.exists(TEMPLATE_V2) && !host.exists(DROP_IN));
}

#[test]
fn plain_docker_and_plain_containerd_hosts() {
    let host = NodeHost::new();
    host.write(DAEMON_JSON, "").nvidia_runtime();
    let applied = round_trip(&host, &[]);
    assert!(applied.contains("no k3s; docker is installed"), "{applied}");
    assert!(
        applied.contains("systemctl try-reload-or-restart docker.service"),
        "{applied}"
    );

    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "").nvidia_runtime();
    let applied = round_trip(&host, &[]);
    assert!(
        applied.contains("no k3s; containerd is installed"),
        "{applied}"
    );
    ok(&host, &["apply"]);
    assert!(host
        .read("/etc/containerd/config.toml")
        .starts_with("version = 2\n"));
}

#[test]
fn nothing_installed_is_refused() {
    let host = NodeHost::new();
    host.nvidia_runtime();
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.contains("nothing to configure"),
        "{}",
        out.stderr
    );
}

#[test]
fn dry_run_prints_unified_diffs_and_writes_nothing() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.27.4+k3s1"));
    host.write(DAEMON_JSON, fixture("docker/log-opts.json"));
    let before = host.snapshot();
    let out = ok(&host, &["apply", "--dry-run"]);
    assert_eq!(before, host.snapshot());
    assert!(
        out.contains(
            "--- a/etc/systemd/system/k3s.service\n+++ b/etc/systemd/system/k3s.service\n@@ "
        ),
        "{out}"
    );
    assert!(out.contains("     server \\\n+\t'--docker' \\\n"), "{out}");
    assert!(
        out.contains("--- a/etc/docker/daemon.json\n+++ b/etc/docker/daemon.json\n"),
        "{out}"
    );
    assert!(
        out.contains("+    \"default-runtime\": \"nvidia\"\n"),
        "{out}"
    );
    // A new file diffs against /dev/null.
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.30.4+k3s1"));
    let out = ok(&host, &["apply", "--dry-run"]);
    assert!(
        out.contains(
            "--- /dev/null\n+++ b/etc/rancher/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml\n"
        ),
        "{out}"
    );
    assert!(!host.exists(DROP_IN));
    // Revert has a dry run too.
    ok(&host, &["apply"]);
    let applied = host.snapshot();
    let out = ok(&host, &["revert", "--dry-run"]);
    assert!(out.contains("+++ /dev/null"), "{out}");
    assert_eq!(applied, host.snapshot());
}

#[test]
fn a_missing_runtime_binary_is_refused_unless_forced() {
    let host = NodeHost::new();
    host.write(DAEMON_JSON, "{}\n");
    let before = host.snapshot();
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.contains("/usr/bin/nvidia-container-runtime") && out.stderr.contains("--force"),
        "{}",
        out.stderr
    );
    assert_eq!(before, host.snapshot());
    let check = run(&host, &["check"]);
    assert_eq!(check.code, 1);
    assert!(
        check
            .stdout
            .contains("[missing] /usr/bin/nvidia-container-runtime"),
        "{}",
        check.stdout
    );
    // Only the default needs the binary; registering it alone is allowed.
    ok(&host, &["--no-set-default", "apply"]);
    ok(&host, &["--force", "apply"]);
    let json: serde_json::Value = serde_json::from_str(&host.read(DAEMON_JSON)).unwrap();
    assert_eq!(json["default-runtime"], "nvidia");
    // Still not "configured": the binary is missing.
    assert_eq!(run(&host, &["check"]).code, 1);
}

#[test]
fn malformed_files_stop_the_run_before_any_write() {
    for (file, text, mode, location) in [
        (
            DAEMON_JSON,
            fixture("docker/malformed.json"),
            "docker",
            "error: /etc/docker/daemon.json:5:3: ",
        ),
        (
            "/etc/containerd/config.toml",
            fixture("containerd/malformed.toml"),
            "containerd",
            "error: /etc/containerd/config.toml:5:26: ",
        ),
        (
            AGENT_UNIT,
            "[Service]\nExecStart=/usr/local/bin/k3s agent '--docker\n".to_string(),
            "docker",
            "error: /etc/systemd/system/k3s-agent.service:2:",
        ),
    ] {
        let host = NodeHost::new();
        // Another file that would be changed first: must stay untouched.
        host.k3s_binary(Some("v1.27.4+k3s1"))
            .write(
                "/lib/systemd/system/k3s.service",
                fixture("units/metavirt-k3s.service"),
            )
            .executable("/usr/bin/containerd", "")
            .nvidia_runtime()
            .write(file, &text);
        let before = host.snapshot();
        let out = run(&host, &["--mode", mode, "apply"]);
        assert_eq!(out.code, 3, "{file}: {}", out.stderr);
        assert!(out.stderr.contains(location), "{file}: {}", out.stderr);
        // Paths are the host's, as the operator knows them, not the --root tree's.
        let root = host.root().to_string_lossy();
        assert!(!out.stderr.contains(root.as_ref()), "{}", out.stderr);
        assert_eq!(before, host.snapshot(), "{file}: nothing may be written");
        assert_eq!(run(&host, &["--mode", mode, "check"]).code, 3);
    }
}

#[test]
fn symlinks_mode_and_owner_are_kept() {
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write("/data/docker/daemon.json", fixture("docker/log-opts.json"))
        .set_mode("/data/docker/daemon.json", 0o600)
        .symlink(DAEMON_JSON, "/data/docker/daemon.json");
    let owner = if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(
            host.path("/data/docker/daemon.json"),
            Some(1234),
            Some(2345),
        )
        .unwrap();
        (1234, 2345)
    } else {
        let m = std::fs::metadata(host.path("/data/docker/daemon.json")).unwrap();
        (m.uid(), m.gid())
    };
    let out = ok(&host, &["apply"]);
    assert!(out.contains("wrote /etc/docker/daemon.json"), "{out}");
    let link = std::fs::symlink_metadata(host.path(DAEMON_JSON)).unwrap();
    assert!(
        link.file_type().is_symlink(),
        "the link itself stays a link"
    );
    assert_eq!(
        std::fs::read_link(host.path(DAEMON_JSON)).unwrap(),
        PathBuf::from("/data/docker/daemon.json")
    );
    let target = std::fs::metadata(host.path("/data/docker/daemon.json")).unwrap();
    assert_eq!(target.permissions().mode() & 0o7777, 0o600);
    assert_eq!((target.uid(), target.gid()), owner);
    assert!(host
        .read("/data/docker/daemon.json")
        .contains("\"default-runtime\": \"nvidia\""));
    let manifest = host.read(MANIFEST);
    assert!(
        manifest.contains("\"path\": \"/data/docker/daemon.json\""),
        "{manifest}"
    );
    ok(&host, &["revert"]);
    assert_eq!(
        host.read("/data/docker/daemon.json"),
        fixture("docker/log-opts.json")
    );
    assert!(std::fs::symlink_metadata(host.path(DAEMON_JSON))
        .unwrap()
        .file_type()
        .is_symlink());
    let target = std::fs::metadata(host.path("/data/docker/daemon.json")).unwrap();
    assert_eq!(target.permissions().mode() & 0o7777, 0o600);
}

#[test]
fn revert_refuses_a_file_changed_after_apply_unless_forced() {
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write(DAEMON_JSON, fixture("docker/registry-mirrors.json"));
    ok(&host, &["apply"]);
    host.write(DAEMON_JSON, "{\"debug\": true}\n");
    let changed = host.snapshot();
    let out = run(&host, &["revert"]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr
            .contains("error: /etc/docker/daemon.json changed after apply")
            && out.stderr.contains("--force"),
        "{}",
        out.stderr
    );
    assert_eq!(changed, host.snapshot());
    ok(&host, &["--force", "revert"]);
    assert_eq!(
        host.read(DAEMON_JSON),
        fixture("docker/registry-mirrors.json")
    );
    let out = ok(&host, &["revert"]);
    assert!(out.contains("nothing to revert"), "{out}");
}

#[test]
fn the_backup_is_the_state_before_the_first_apply() {
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write(DAEMON_JSON, fixture("docker/registry-mirrors.json"));
    ok(&host, &["--no-set-default", "apply"]);
    // A second apply with other settings changes the file again; revert still goes back
    // to the very first original.
    ok(&host, &["apply"]);
    ok(&host, &["revert"]);
    assert_eq!(
        host.read(DAEMON_JSON),
        fixture("docker/registry-mirrors.json")
    );
}

#[test]
fn check_json_reports_every_item() {
    let host = NodeHost::new();
    k3s_server(&host, Some("v1.27.4+k3s1"));
    host.write(DAEMON_JSON, "{}");
    let out = run(&host, &["check", "--output", "json"]);
    assert_eq!(out.code, 1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["configured"], false);
    assert_eq!(v["mode"], "docker");
    assert!(v["reason"].as_str().unwrap().contains("v1.27.4"));
    let items = v["items"].as_array().unwrap();
    // Binary, unit, daemon.json, then docker's effective default and runtime.
    assert_eq!(items.len(), 5, "{items:?}");
    assert_eq!(v["effective"][0]["engine"], "docker");
    assert_eq!(v["effective"][0]["default_runtime"]["value"], "runc");
    assert_eq!(items[1]["file"], UNIT);
    assert_eq!(items[1]["ok"], false);
    ok(&host, &["apply"]);
    let out = run_env(&host, &["check"], &[("EDGEGPU_OUTPUT", "json")]);
    assert_eq!(out.code, 0);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["configured"], true);
    assert!(v["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["ok"] == true));
}

#[test]
fn settings_come_from_the_environment_too() {
    let host = NodeHost::new();
    host.executable("/opt/nvidia/bin/runtime", "#!/bin/sh\n")
        .write(DAEMON_JSON, "{}");
    let out = run_env(
        &host,
        &["apply"],
        &[
            ("EDGEGPU_RUNTIME_NAME", "gpu"),
            ("EDGEGPU_RUNTIME_PATH", "/opt/nvidia/bin/runtime"),
            ("EDGEGPU_NODE_SETUP_MODE", "docker"),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&host.read(DAEMON_JSON)).unwrap();
    assert_eq!(v["runtimes"]["gpu"]["path"], "/opt/nvidia/bin/runtime");
    assert_eq!(v["default-runtime"], "gpu");
    let out = run(
        &host,
        &["--runtime-name", "runc", "--mode", "docker", "apply"],
    );
    assert_eq!(out.code, 3);
    assert!(out.stderr.contains("reserved"), "{}", out.stderr);
    let out = run(&host, &["--runtime-path", "relative/path", "apply"]);
    assert_eq!(out.code, 3);
    let out = run(&host, &["--mode", "bogus", "apply"]);
    assert_eq!(out.code, 2);
}
