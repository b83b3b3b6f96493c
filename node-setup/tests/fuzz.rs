//! Property tests for the three parsers-and-editors: any input, no panic; whatever they
//! accept they turn into a configured file that needs no second change; and a run on
//! input they reject writes nothing.

use crate::common;

use std::path::Path;

use common::fixture;
use edgegpu_host::root::HostRoot;
use edgegpu_node_setup::detect::ModeRequest;
use edgegpu_node_setup::formats::containerd::{describe, edit_cdi, CdiWant, Flavor, Setting};
use edgegpu_node_setup::formats::daemon_json;
use edgegpu_node_setup::formats::unit::{add_k3s_docker_flag, UnitFile};
use edgegpu_node_setup::lock::RunLock;
use edgegpu_node_setup::ops::{self, Restarts};
use edgegpu_node_setup::{plan, RuntimeSpec};
use edgegpu_testkit::nodehost::NodeHost;
use proptest::prelude::*;

fn spec() -> RuntimeSpec {
    RuntimeSpec {
        name: "nvidia".into(),
        path: "/usr/bin/nvidia-container-runtime".into(),
        set_default: true,
    }
}

/// Bounded case counts: the suite also runs under qemu-user.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A fixture with a few random edits: near-valid input reaches deep into the parsers.
fn mutated(files: &'static [&'static str]) -> impl Strategy<Value = String> {
    let edits = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            0u8..3,
            prop::sample::select(vec![
                "\"", "'", "[", "]", "{", "}", "=", "\\", "\n", " ", "\t", ",", "#", "{{", "}}",
                "--docker", "nvidia", "x",
            ]),
        ),
        0..4,
    );
    (prop::sample::select(files), edits).prop_map(|(file, edits)| {
        let mut text = fixture(file);
        for (at, op, piece) in edits {
            let mut pos = at.index(text.len() + 1);
            while !text.is_char_boundary(pos) {
                pos -= 1;
            }
            match op {
                0 => text.insert_str(pos, piece),
                1 => {
                    let mut end = (pos + piece.len()).min(text.len());
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.replace_range(pos..end, "");
                }
                _ => text.truncate(pos),
            }
        }
        text
    })
}

const UNITS: &[&str] = &[
    "units/k3s-installer-server.service",
    "units/k3s-installer-agent.service",
    "units/metavirt-k3s.service",
];
const JSONS: &[&str] = &[
    "docker/log-opts.json",
    "docker/registry-mirrors.json",
    "docker/existing-runtime.json",
];
const TOMLS: &[&str] = &[
    "containerd/v1.toml",
    "containerd/v2.toml",
    "containerd/v3.toml",
];
const TEMPLATES: &[&str] = &[
    "containerd/k3s-config-full.toml.tmpl",
    "containerd/k3s-config-v3-base.toml.tmpl",
];

fn check_unit(text: &str) {
    let Ok(unit) = UnitFile::parse(Path::new("k3s.service"), text) else {
        return;
    };
    if let Ok(Some(new)) = add_k3s_docker_flag(&unit).map(|e| e.new) {
        let again = UnitFile::parse(Path::new("k3s.service"), &new).expect("our output parses");
        assert!(
            add_k3s_docker_flag(&again)
                .expect("our output edits")
                .new
                .is_none(),
            "second edit changes:\n{new}"
        );
    }
}

fn check_json(text: &str) {
    if let Ok(Some(new)) = daemon_json::edit(
        Path::new("d.json"),
        Some(text),
        &spec(),
        daemon_json::Want {
            set_default: spec().set_default,
            bare_name_ok: false,
        },
    )
    .map(|e| e.new)
    {
        let v: serde_json::Value = serde_json::from_str(&new).expect("our output is JSON");
        assert_eq!(v["default-runtime"], "nvidia");
        assert!(daemon_json::edit(
            Path::new("d.json"),
            Some(&new),
            &spec(),
            daemon_json::Want {
                set_default: spec().set_default,
                bare_name_ok: false,
            }
        )
        .unwrap()
        .new
        .is_none());
    }
    // CDI mode's edit of the same file.
    let want = daemon_json::CdiWant {
        enable: true,
        spec_dir: Some("/var/run/cdi"),
    };
    if let Ok(Some(new)) =
        daemon_json::edit_cdi(Path::new("d.json"), Some(text), want).map(|e| e.new)
    {
        let v: serde_json::Value = serde_json::from_str(&new).expect("our output is JSON");
        assert_eq!(v["features"]["cdi"], true);
        let again = daemon_json::edit_cdi(Path::new("d.json"), Some(&new), want).unwrap();
        assert!(again.new.is_none(), "second CDI edit changes:\n{new}");
    }
}

fn check_toml(text: &str, flavor: Flavor) {
    if let Ok(edit) = common::containerd_edit("c.toml", Some(text), &spec(), flavor) {
        if let Some(new) = edit.new {
            let again = common::containerd_edit("c.toml", Some(&new), &spec(), flavor)
                .expect("our output parses");
            assert!(again.new.is_none(), "second edit changes:\n{new}");
        }
    }
    // CDI mode's edit of the same file.
    let want = CdiWant {
        enable: true,
        spec_dir: Some("/var/run/cdi"),
        version: None,
    };
    if let Ok(Some(new)) = edit_cdi(Path::new("c.toml"), Some(text), flavor, want).map(|e| e.new) {
        let d = describe(Path::new("c.toml"), Some(&new), flavor).expect("our output parses");
        assert!(
            matches!(d.enable_cdi, Some(Setting::Literal { value: true, .. })),
            "{new}"
        );
        let again =
            edit_cdi(Path::new("c.toml"), Some(&new), flavor, want).expect("our output edits");
        assert!(again.new.is_none(), "second CDI edit changes:\n{new}");
    }
}

/// The k3s YAML reader and the Go-template lexer take any text without panicking; a
/// template they accept keeps its line count (every line stays where it was).
fn check_yaml_and_template(text: &str) {
    // Accepted or refused, both are fine here: only a panic is a failure.
    let _ = edgegpu_node_setup::formats::k3s_yaml::parse(Path::new("c.yaml"), text);
    if let Ok(lines) = edgegpu_node_setup::formats::go_template::lines(text) {
        assert_eq!(lines.len(), text.split_inclusive('\n').count());
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn k3s_yaml_and_template_readers_never_panic(text in "\\PC{0,200}") {
        check_yaml_and_template(&text);
    }

    #[test]
    fn template_reader_handles_damaged_templates(text in mutated(TEMPLATES)) {
        check_yaml_and_template(&text);
    }

    #[test]
    fn unit_editor_never_panics_on_any_text(text in "\\PC{0,300}") {
        check_unit(&text);
    }

    #[test]
    fn unit_editor_handles_damaged_units(text in mutated(UNITS)) {
        check_unit(&text);
    }

    #[test]
    fn daemon_json_editor_never_panics_on_any_text(text in "\\PC{0,200}") {
        check_json(&text);
    }

    #[test]
    fn daemon_json_editor_handles_damaged_json(text in mutated(JSONS)) {
        check_json(&text);
    }

    #[test]
    fn containerd_editor_never_panics_on_any_text(text in "\\PC{0,200}") {
        check_toml(&text, Flavor::System);
        check_toml(&text, Flavor::K3sTemplate { version: 3 });
    }

    #[test]
    fn containerd_editor_handles_damaged_toml(text in mutated(TOMLS)) {
        check_toml(&text, Flavor::System);
    }

    #[test]
    fn containerd_editor_handles_damaged_templates(text in mutated(TEMPLATES)) {
        check_toml(&text, Flavor::K3sTemplate { version: 2 });
    }
}

fn lock(opts: &plan::Options) -> RunLock {
    RunLock::acquire(&opts.host, &mut |_| {}).expect("lock")
}

/// Runs a full plan+apply on a host holding `file` = `text` next to other files; when
/// the plan is refused, not one file may differ.
fn apply_never_writes_on_refusal(file: &str, text: &str, mode: ModeRequest) {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.27.6+k3s1"))
        .write(
            "/etc/systemd/system/k3s.service",
            fixture("units/k3s-installer-server.service"),
        )
        .write("/etc/docker/daemon.json", fixture("docker/log-opts.json"))
        .executable("/usr/bin/containerd", "")
        .nvidia_runtime()
        .write(file, text);
    let before = host.snapshot();
    let opts = plan::Options {
        host: HostRoot::new(host.root()),
        mode,
        spec: spec(),
        force: false,
        k3s_version: None,
        cdi: false,
    };
    match plan::build(&opts, false) {
        Err(_) => assert_eq!(before, host.snapshot(), "a refused plan wrote something"),
        Ok(p) => {
            ops::apply(&p, &opts.host, Restarts::Skip("test"), &lock(&opts))
                .expect("an accepted plan applies");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..config() })]

    #[test]
    fn invalid_unit_never_writes(text in mutated(UNITS)) {
        apply_never_writes_on_refusal("/etc/systemd/system/k3s.service", &text, ModeRequest::Docker);
    }

    #[test]
    fn invalid_daemon_json_never_writes(text in mutated(JSONS)) {
        apply_never_writes_on_refusal("/etc/docker/daemon.json", &text, ModeRequest::Docker);
    }

    #[test]
    fn invalid_template_never_writes(text in mutated(TEMPLATES)) {
        apply_never_writes_on_refusal("/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl", &text, ModeRequest::Containerd);
    }
}
