//! systemd unit reading and the `--docker` edit, on the exact layouts the k3s installer
//! and meta-virtualization write; validated with the real `systemd-analyze verify`.

use crate::common;

use std::path::Path;

use common::{fixture, real_tool, systemd_verify};
use edgegpu_host::error::SetupError;
use edgegpu_node_setup::formats::unit::{add_k3s_docker_flag, UnitFile};

fn words(text: &str) -> Vec<String> {
    UnitFile::parse(Path::new("k3s.service"), text)
        .unwrap()
        .exec_start_words()
        .unwrap()
        .into_iter()
        .map(|w| w.text)
        .collect()
}

fn add_docker(text: &str) -> String {
    let unit = UnitFile::parse(Path::new("k3s.service"), text).unwrap();
    add_k3s_docker_flag(&unit).unwrap().new.expect("a change")
}

/// Old lines minus new lines and new minus old (as multisets).
fn line_diff(old: &str, new: &str) -> (Vec<String>, Vec<String>) {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut removed = Vec::new();
    let mut added = Vec::new();
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Delete => removed.push(change.value().to_string()),
            similar::ChangeTag::Insert => added.push(change.value().to_string()),
            similar::ChangeTag::Equal => {}
        }
    }
    (removed, added)
}

#[test]
fn installer_server_unit_gets_a_quoted_tab_indented_docker_line() {
    let old = fixture("units/k3s-installer-server.service");
    let new = add_docker(&old);
    let (removed, added) = line_diff(&old, &new);
    assert!(removed.is_empty(), "nothing removed: {removed:?}");
    assert_eq!(added, vec!["\t'--docker' \\\n".to_string()]);
    assert!(new.contains("    server \\\n\t'--docker' \\\n\t'--write-kubeconfig-mode' \\\n"));
    assert_eq!(
        words(&new),
        [
            "/usr/local/bin/k3s",
            "server",
            "--docker",
            "--write-kubeconfig-mode",
            "644",
            "--disable=traefik"
        ]
    );
}

#[test]
fn installer_unit_without_flags_keeps_the_terminating_empty_line() {
    for (file, sub) in [
        ("units/k3s-installer-server-noflags.service", "server"),
        ("units/k3s-installer-agent.service", "agent"),
    ] {
        let old = fixture(file);
        let new = add_docker(&old);
        let expected_tail =
            format!("ExecStart=/usr/local/bin/k3s \\\n    {sub} \\\n\t'--docker' \\\n\n");
        assert!(new.ends_with(&expected_tail), "{file}:\n{new}");
        assert_eq!(words(&new), ["/usr/local/bin/k3s", sub, "--docker"]);
    }
}

#[test]
fn meta_virtualization_single_line_units_get_the_flag_after_the_subcommand() {
    for (file, sub) in [
        ("units/metavirt-k3s.service", "server"),
        ("units/metavirt-k3s-agent.service", "agent"),
    ] {
        let old = fixture(file);
        let new = add_docker(&old);
        let (removed, added) = line_diff(&old, &new);
        assert_eq!(
            removed,
            vec![format!("ExecStart=/usr/local/bin/k3s {sub}\n")]
        );
        assert_eq!(
            added,
            vec![format!("ExecStart=/usr/local/bin/k3s {sub} --docker\n")]
        );
    }
}

#[test]
fn flags_after_the_subcommand_on_the_same_line_stay_in_place() {
    let old =
        "[Service]\nExecStart=/usr/local/bin/k3s server --node-name=a \\\n    --disable traefik\n";
    let new = add_docker(old);
    assert_eq!(
        words(&new),
        [
            "/usr/local/bin/k3s",
            "server",
            "--docker",
            "--node-name=a",
            "--disable",
            "traefik"
        ]
    );
    let unquoted = "[Service]\nExecStart=/usr/local/bin/k3s server \\\n    --tls-san x \\\n    --cluster-init\n";
    let new = add_docker(unquoted);
    assert!(
        new.contains("server \\\n    --docker \\\n    --tls-san x"),
        "{new}"
    );
}

#[test]
fn a_unit_that_already_has_docker_is_left_alone() {
    let with = add_docker(&fixture("units/k3s-installer-server.service"));
    let unit = UnitFile::parse(Path::new("k3s.service"), &with).unwrap();
    assert!(add_k3s_docker_flag(&unit).unwrap().new.is_none());
    let single = "[Service]\nExecStart=/usr/local/bin/k3s agent --docker\n";
    let unit = UnitFile::parse(Path::new("k3s.service"), single).unwrap();
    assert!(add_k3s_docker_flag(&unit).unwrap().new.is_none());
}

#[test]
fn a_reset_execstart_in_the_file_counts_only_the_last_one() {
    let text = "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s agent\n";
    assert_eq!(
        words(&add_docker(text)),
        ["/usr/local/bin/k3s", "agent", "--docker"]
    );
}

fn malformed(text: &str) -> (usize, usize, String) {
    let err = UnitFile::parse(Path::new("/etc/systemd/system/k3s.service"), text)
        .and_then(|u| add_k3s_docker_flag(&u).map(|_| ()))
        .unwrap_err();
    match err {
        SetupError::Malformed {
            file,
            line,
            column,
            message,
        } => {
            assert_eq!(file, Path::new("/etc/systemd/system/k3s.service"));
            (line, column, message)
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn malformed_units_are_reported_with_file_line_and_column() {
    assert_eq!(malformed("ExecStart=/usr/local/bin/k3s server\n").0, 1);
    let (line, _, msg) = malformed("[Unit]\nDescription=x\n[Service\nExecStart=/k3s server\n");
    assert_eq!(line, 3);
    assert!(msg.contains("']'"), "{msg}");
    let (line, column, msg) = malformed("[Service]\nType=notify\n  just words\n");
    assert_eq!((line, column), (3, 3));
    assert!(msg.contains("Key=Value"), "{msg}");
    let (line, column, msg) =
        malformed("[Service]\nExecStart=/usr/local/bin/k3s \\\n    server \\\n\t'--docker \\\n\n");
    assert_eq!((line, column), (4, 2), "{msg}");
    assert!(msg.contains("quote"), "{msg}");
    let (line, _, msg) = malformed("[Service]\nExecStart=/a server\nExecStart=/b agent\n");
    assert_eq!(line, 3, "{msg}");
}

#[test]
fn a_unit_without_a_k3s_subcommand_is_refused() {
    let unit = UnitFile::parse(
        Path::new("x.service"),
        "[Service]\nExecStart=/usr/bin/sleep 1\n",
    )
    .unwrap();
    let err = add_k3s_docker_flag(&unit).unwrap_err().to_string();
    assert!(err.contains("server") && err.contains("x.service"), "{err}");
}

#[test]
fn systemd_analyze_verify_accepts_every_rewritten_unit() {
    let Some(tool) = real_tool("systemd-analyze", "systemd") else {
        return;
    };
    let containerd_unit =
        "[Unit]\nDescription=containerd\n[Service]\nExecStart=/usr/bin/containerd\n";
    for (file, name) in common::K3S_UNIT_FIXTURES {
        let original = fixture(file);
        let extra = [("containerd.service", containerd_unit)];
        let (ok, out) = systemd_verify(&tool, name, &original, &extra);
        assert!(ok, "the fixture {file} itself must verify:\n{out}");
        let edited = add_docker(&original);
        let (ok, out) = systemd_verify(&tool, name, &edited, &extra);
        assert!(
            ok,
            "rewritten {file} fails systemd-analyze verify:\n{out}\n{edited}"
        );
    }
}

#[test]
fn systemd_analyze_verify_rejects_a_broken_edit() {
    // Proves the real-tool check above can fail: an unbalanced quote is fatal to systemd.
    let Some(tool) = real_tool("systemd-analyze", "systemd") else {
        return;
    };
    let broken = fixture("units/k3s-installer-server.service")
        .replace("    server \\\n", "    server \\\n\t'--docker \\\n");
    let (ok, out) = systemd_verify(&tool, "k3s.service", &broken, &[]);
    assert!(!ok, "verify must reject:\n{out}");
}
