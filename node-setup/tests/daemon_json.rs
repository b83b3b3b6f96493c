//! daemon.json merging: other keys and their order survive, the result round-trips.

use crate::common;

use std::path::Path;

use common::fixture;
use edgegpu_host::error::SetupError;
use edgegpu_node_setup::formats::daemon_json::{self, DaemonJson, Want};
use edgegpu_node_setup::formats::Edit;
use edgegpu_node_setup::RuntimeSpec;
use serde_json::Value;

fn spec(set_default: bool) -> RuntimeSpec {
    RuntimeSpec {
        name: "nvidia".into(),
        path: "/usr/bin/nvidia-container-runtime".into(),
        set_default,
    }
}

fn edit(file: &Path, text: Option<&str>, spec: &RuntimeSpec) -> Result<Edit, SetupError> {
    daemon_json::edit(
        file,
        text,
        spec,
        Want {
            set_default: spec.set_default,
            bare_name_ok: false,
        },
    )
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn merged(file: &str, set_default: bool) -> (Value, Value, String) {
    let old_text = fixture(file);
    let new_text = edit(Path::new(file), Some(&old_text), &spec(set_default))
        .unwrap()
        .new
        .expect("a change");
    let old: Value = if old_text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(&old_text).unwrap()
    };
    // Round trip through a plain JSON parser (what dockerd does).
    let new: Value = serde_json::from_str(&new_text).unwrap();
    (old, new, new_text)
}

fn expected_entry() -> Value {
    serde_json::json!({"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []})
}

#[test]
fn other_settings_and_their_order_are_kept() {
    for file in [
        "docker/log-opts.json",
        "docker/registry-mirrors.json",
        "docker/tabs.json",
    ] {
        let (old, new, _) = merged(file, true);
        let mut expected_keys = keys(&old);
        expected_keys.extend(["runtimes".to_string(), "default-runtime".to_string()]);
        assert_eq!(keys(&new), expected_keys, "{file}");
        for k in keys(&old) {
            assert_eq!(old[&k], new[&k], "{file}: {k} changed");
        }
        assert_eq!(new["runtimes"]["nvidia"], expected_entry());
        assert_eq!(new["default-runtime"], "nvidia");
    }
}

#[test]
fn the_file_keeps_its_indentation() {
    let (_, _, text) = merged("docker/log-opts.json", true);
    assert!(
        text.contains("\n    \"log-driver\": \"json-file\",\n"),
        "{text}"
    );
    let (_, _, text) = merged("docker/tabs.json", true);
    assert!(
        text.contains("\n\t\"debug\": true,\n\t\"features\": {\n\t\t\"cdi\": true\n"),
        "{text}"
    );
    let (_, _, text) = merged("docker/registry-mirrors.json", true);
    assert!(text.contains("\n  \"registry-mirrors\": ["), "{text}");
    assert!(text.ends_with("}\n"));
}

#[test]
fn an_existing_runtime_entry_is_replaced_in_place_and_others_kept() {
    let (old, new, _) = merged("docker/existing-runtime.json", true);
    assert_eq!(
        keys(&new),
        keys(&old),
        "default-runtime existed: no new top-level key"
    );
    assert_eq!(keys(&new["runtimes"]), ["crun", "nvidia"]);
    assert_eq!(new["runtimes"]["crun"], old["runtimes"]["crun"]);
    // A leftover GPU-operator path is replaced (with docker's real "runtimeArgs" key).
    assert_eq!(new["runtimes"]["nvidia"], expected_entry());
    assert_eq!(new["default-runtime"], "nvidia");
    assert_eq!(new["exec-opts"], old["exec-opts"]);
}

#[test]
fn an_equivalent_entry_is_not_rewritten() {
    // nvidia-ctk writes "args" (ignored by dockerd): same runtime, nothing to change.
    let text = "{\"runtimes\": {\"nvidia\": {\"path\": \"/usr/bin/nvidia-container-runtime\", \"args\": []}}}";
    assert!(edit(Path::new("d.json"), Some(text), &spec(false))
        .unwrap()
        .new
        .is_none());
    // ... but a runtimeType or options next to the path would stop a current dockerd
    // (moby: "cannot configure both path and runtimeType", "options cannot be used with
    // a path runtime"): replaced. Debian's dockerd 20.10 does not check either, so this
    // rule has no real-tool check (docs/node-setup.md says so).
    for extra in [
        "\"runtimeType\": \"io.containerd.runc.v2\"",
        "\"options\": {\"BinaryName\": \"/usr/bin/runc\"}",
    ] {
        let text = format!(
            "{{\"runtimes\": {{\"nvidia\": {{\"path\": \"/usr/bin/nvidia-container-runtime\", {extra}}}}}}}"
        );
        let new = edit(Path::new("d.json"), Some(&text), &spec(false))
            .unwrap()
            .new
            .unwrap_or_else(|| panic!("{text} must be replaced"));
        let v: Value = serde_json::from_str(&new).unwrap();
        assert_eq!(v["runtimes"]["nvidia"], expected_entry(), "{text}");
    }
}

#[test]
fn without_set_default_the_default_runtime_is_untouched() {
    let (old, new, _) = merged("docker/existing-runtime.json", false);
    assert_eq!(new["default-runtime"], old["default-runtime"]);
    let (_, new, _) = merged("docker/log-opts.json", false);
    assert!(new.get("default-runtime").is_none());
}

#[test]
fn an_empty_file_is_an_empty_object() {
    let (_, new, text) = merged("docker/empty.json", true);
    assert_eq!(keys(&new), ["runtimes", "default-runtime"]);
    assert!(text.starts_with("{\n  \"runtimes\""), "{text}");
    assert!(edit(Path::new("d.json"), Some("  \n\t\n"), &spec(true))
        .unwrap()
        .new
        .is_some());
    assert!(edit(Path::new("d.json"), None, &spec(true))
        .unwrap()
        .new
        .is_some());
}

#[test]
fn a_merged_file_needs_no_second_change() {
    for file in [
        "docker/log-opts.json",
        "docker/registry-mirrors.json",
        "docker/existing-runtime.json",
        "docker/empty.json",
        "docker/tabs.json",
    ] {
        let (_, _, text) = merged(file, true);
        assert!(
            edit(Path::new(file), Some(&text), &spec(true))
                .unwrap()
                .new
                .is_none(),
            "{file}"
        );
    }
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let text = "\u{feff}{\"debug\": true}";
    let doc = DaemonJson::parse(Path::new("d.json"), text).unwrap();
    assert_eq!(doc.root["debug"], true);
}

#[test]
fn malformed_json_names_file_line_and_column() {
    let err = edit(
        Path::new("/etc/docker/daemon.json"),
        Some(&fixture("docker/malformed.json")),
        &spec(true),
    )
    .unwrap_err();
    match &err {
        SetupError::Malformed {
            file, line, column, ..
        } => {
            assert_eq!(file, Path::new("/etc/docker/daemon.json"));
            assert_eq!((*line, *column), (5, 3));
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with("/etc/docker/daemon.json:5:3: "),
        "{err}"
    );
}

#[test]
fn wrong_shapes_are_refused() {
    for (text, what) in [
        ("[]", "object"),
        ("{\"runtimes\": []}", "runtimes"),
        ("{\"default-runtime\": 1}", "default-runtime"),
    ] {
        let err = edit(Path::new("d.json"), Some(text), &spec(true))
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{text}: {err}");
    }
}

/// When a dockerd reload (SIGHUP) carries a daemon.json change out: it replaces
/// `runtimes` only when the new file has the key and the default only when the new file
/// names one (moby daemon/reload_unix.go); tests/docker_reload.rs checks the same
/// against a running dockerd.
#[test]
fn a_reload_carries_out_additions_but_never_removals() {
    use edgegpu_node_setup::formats::daemon_json::reload_applies;
    let plain = r#"{"log-driver": "json-file"}"#;
    let nvidia = r#"{"log-driver": "json-file", "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "default-runtime": "nvidia"}"#;
    let registered = r#"{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}"#;
    let crun = r#"{"runtimes": {"crun": {"path": "/usr/bin/crun"}}, "default-runtime": "crun"}"#;
    // What apply does: add.
    assert!(reload_applies(None, Some(nvidia)));
    assert!(reload_applies(Some(""), Some(nvidia)));
    assert!(reload_applies(Some(plain), Some(nvidia)));
    assert!(reload_applies(Some(crun), Some(nvidia)));
    assert!(reload_applies(Some(registered), Some(nvidia)));
    // What revert does: take away.
    assert!(!reload_applies(Some(nvidia), None), "file removed");
    assert!(!reload_applies(Some(nvidia), Some("")), "emptied");
    assert!(
        !reload_applies(Some(nvidia), Some(plain)),
        "runtimes and default gone"
    );
    assert!(
        !reload_applies(Some(nvidia), Some(registered)),
        "default gone"
    );
    assert!(
        !reload_applies(Some(registered), Some(plain)),
        "runtimes gone"
    );
    assert!(reload_applies(Some(nvidia), Some(crun)), "both replaced");
    assert!(!reload_applies(Some(nvidia), Some("{")), "does not parse");
}
