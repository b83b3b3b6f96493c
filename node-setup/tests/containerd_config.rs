//! containerd TOML editing (config versions 1, 2, 3 and k3s templates), checked by our
//! own reader and by the real `containerd config dump`.

use crate::common;

use std::path::Path;

use common::{
    containerd_dump, containerd_dump_text, containerd_releases_for, containerd_start_cri, fixture,
    real_tool,
};
use edgegpu_host::error::SetupError;
use edgegpu_node_setup::formats::containerd::{describe, DefaultRuntime, Flavor};
use edgegpu_node_setup::formats::Edit;
use edgegpu_node_setup::RuntimeSpec;

fn spec(name: &str, set_default: bool) -> RuntimeSpec {
    RuntimeSpec {
        name: name.into(),
        path: "/usr/bin/nvidia-container-runtime".into(),
        set_default,
    }
}

fn edit(
    file: &Path,
    text: Option<&str>,
    spec: &RuntimeSpec,
    flavor: Flavor,
) -> Result<Edit, SetupError> {
    common::containerd_edit(file.to_str().unwrap(), text, spec, flavor)
}

/// A new or empty template, or one with the base line: k3s's setting owns the default.
fn base_owns_default(text: Option<&str>, flavor: Flavor) -> bool {
    text.map_or(true, |t| t.trim().is_empty())
        || describe(Path::new("t"), text, flavor)
            .unwrap()
            .base_line
            .is_some()
}

/// What a plain config says for the NVIDIA runtime: (version, its table runs
/// /usr/bin/nvidia-container-runtime, it is the default).
fn status(text: &str) -> (i64, bool, bool) {
    let d = describe(Path::new("c.toml"), Some(text), Flavor::System).unwrap();
    let spec = nvidia();
    let runtime = d
        .runtimes
        .get(&spec.name)
        .is_some_and(|r| r.binary.as_deref() == Some(spec.path.as_str()));
    let default = matches!(&d.default, DefaultRuntime::Literal { name, .. } if *name == spec.name);
    (d.version, runtime, default)
}

fn nvidia() -> RuntimeSpec {
    spec("nvidia", true)
}

/// Every line of `old` appears in `new`, in order (comments and layout kept), except
/// the lines listed in `changed`.
fn assert_lines_kept(old: &str, new: &str, changed: &[&str]) {
    let mut new_lines = new.lines();
    for line in old.lines().filter(|l| !changed.contains(l)) {
        assert!(
            new_lines.any(|n| n == line),
            "line {line:?} lost or moved:\n{new}"
        );
    }
}

fn edited(file: &str, spec: &RuntimeSpec, flavor: Flavor) -> String {
    let old = fixture(file);
    edit(Path::new(file), Some(&old), spec, flavor)
        .unwrap()
        .new
        .expect("a change")
}

#[test]
fn version_2_config_gains_runtime_and_default_keeping_comments() {
    let old = fixture("containerd/v2.toml");
    let new = edited("containerd/v2.toml", &nvidia(), Flavor::System);
    assert_lines_kept(
        &old,
        &new,
        &["    default_runtime_name = \"runc\" # changed by node-setup?"],
    );
    assert!(
        new.contains("    default_runtime_name = \"nvidia\" # changed by node-setup?\n"),
        "{new}"
    );
    assert!(new.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n"), "{new}");
    assert!(new.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\nSystemdCgroup = true\n"), "{new}");
    // The new runtime sits next to runc, before the registry table.
    let runc = new.find("runtimes.runc.options]").unwrap();
    let ours = new.find("runtimes.nvidia]").unwrap();
    let registry = new.find(".registry]").unwrap();
    assert!(runc < ours && ours < registry, "{new}");
    assert_eq!(status(&new), (2, true, true));
}

#[test]
fn version_1_config_uses_the_cri_plugin_key() {
    let old = fixture("containerd/v1.toml");
    let new = edited("containerd/v1.toml", &nvidia(), Flavor::System);
    assert_lines_kept(&old, &new, &["      default_runtime_name = \"runc\""]);
    assert!(new.contains("[plugins.cri.containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\""), "{new}");
    assert!(new.contains("      default_runtime_name = \"nvidia\"\n"));
    assert!(
        !new.contains("version ="),
        "a version-1 file stays version 1"
    );
}

#[test]
fn version_3_config_uses_the_cri_runtime_plugin_and_copies_systemd_cgroup() {
    let old = fixture("containerd/v3.toml");
    let new = edited("containerd/v3.toml", &nvidia(), Flavor::System);
    assert_lines_kept(&old, &new, &["      default_runtime_name = 'runc'"]);
    assert!(new.contains("[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\nSystemdCgroup = false\n"), "{new}");
    assert!(new.contains("default_runtime_name = \"nvidia\""));
    assert_eq!(status(&new), (3, true, true));
}

#[test]
fn a_missing_or_empty_config_becomes_version_2() {
    for text in [None, Some(""), Some("\n  \n")] {
        let e = edit(Path::new("c.toml"), text, &nvidia(), Flavor::System).unwrap();
        let new = e.new.unwrap();
        assert!(new.starts_with("version = 2\n"), "{new}");
        assert_eq!(status(&new), (2, true, true));
    }
}

#[test]
fn without_set_default_only_the_runtime_is_added() {
    let new = edited("containerd/v2.toml", &spec("nvidia", false), Flavor::System);
    assert!(new.contains("default_runtime_name = \"runc\""));
    assert!(new.contains("runtimes.nvidia.options]"));
}

#[test]
fn every_edit_is_idempotent() {
    let cases = [
        ("containerd/v1.toml", Flavor::System),
        ("containerd/v2.toml", Flavor::System),
        ("containerd/v3.toml", Flavor::System),
        (
            "containerd/k3s-config-full.toml.tmpl",
            Flavor::K3sTemplate { version: 2 },
        ),
        (
            "containerd/k3s-config-v3-base.toml.tmpl",
            Flavor::K3sTemplate { version: 3 },
        ),
    ];
    for (file, flavor) in cases {
        let sp = spec("nvidia-custom", true);
        let once = edited(file, &sp, flavor);
        let again = edit(Path::new(file), Some(&once), &sp, flavor).unwrap();
        assert!(
            again.new.is_none(),
            "{file}: second edit changed:\n{:?}",
            again.new
        );
    }
}

#[test]
fn base_template_with_a_k3s_detected_name_needs_no_table_and_defers_the_default() {
    for file in [
        "containerd/k3s-config-base-only.toml.tmpl",
        "containerd/k3s-config-v3-base.toml.tmpl",
    ] {
        let old = fixture(file);
        let e = edit(
            Path::new(file),
            Some(&old),
            &nvidia(),
            Flavor::K3sTemplate { version: 3 },
        )
        .unwrap();
        assert!(
            e.new.is_none(),
            "{file}: k3s emits runtimes.nvidia itself; re-declaring it breaks containerd"
        );
        assert!(base_owns_default(
            Some(&old),
            Flavor::K3sTemplate { version: 3 }
        ));
    }
    // No template yet: none is created just to hold the base line.
    let e = edit(
        Path::new("t"),
        None,
        &nvidia(),
        Flavor::K3sTemplate { version: 3 },
    )
    .unwrap();
    assert!(e.new.is_none());
    assert!(base_owns_default(None, Flavor::K3sTemplate { version: 3 }));
}

#[test]
fn base_template_gets_only_new_tables_after_the_base_line() {
    let sp = spec("nvidia-custom", true);
    let old = fixture("containerd/k3s-config-v3-base.toml.tmpl");
    let e = edit(
        Path::new("t"),
        Some(&old),
        &sp,
        Flavor::K3sTemplate { version: 3 },
    )
    .unwrap();
    let new = e.new.unwrap();
    assert!(new.starts_with(&old), "appended only:\n{new}");
    let added = &new[old.len()..];
    assert_eq!(
        added,
        // (toml_edit reuses the quoting of the user's own table header for the key.)
        // SystemdCgroup comes from the same k3s data as the base's runc options.
        "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia-custom]\nruntime_type = \"io.containerd.runc.v2\"\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia-custom.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\nSystemdCgroup = {{ .SystemdCgroup }}\n"
    );
    // Tables the base emits are never declared: no header for containerd or runtimes.
    assert!(!added.contains(".containerd]") && !added.contains(".runtimes]"));
    assert!(base_owns_default(
        Some(&old),
        Flavor::K3sTemplate { version: 3 }
    ));
    // A new template for a custom name starts from the base line (config.toml.tmpl: v2).
    let e = edit(
        Path::new("t"),
        None,
        &sp,
        Flavor::K3sTemplate { version: 2 },
    )
    .unwrap();
    let new = e.new.unwrap();
    assert!(new.starts_with("{{ template \"base\" . }}\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia-custom]"), "{new}");
}

#[test]
fn full_template_is_edited_and_every_template_line_restored() {
    let old = fixture("containerd/k3s-config-full.toml.tmpl");
    let new = edited(
        "containerd/k3s-config-full.toml.tmpl",
        &nvidia(),
        Flavor::K3sTemplate { version: 2 },
    );
    assert_lines_kept(&old, &new, &[]);
    for line in old.lines().filter(|l| l.contains("{{")) {
        assert!(new.contains(line), "template line {line:?} lost:\n{new}");
    }
    assert!(new.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"{{ .NodeConfig.AgentConfig.Snapshotter }}\"\n  disable_snapshot_annotations = {{ if eq"), "{new}");
    // runc's templated SystemdCgroup stays with runc and is copied to our runtime.
    assert!(
        new.contains("runtimes.runc.options]\n  SystemdCgroup = {{ .SystemdCgroup }}\n"),
        "{new}"
    );
    assert!(new.contains("runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\nSystemdCgroup = {{ .SystemdCgroup }}\n"), "{new}");
    assert!(new.contains("default_runtime_name = \"nvidia\""));
    assert!(new
        .contains("runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\""));
    // The conditional block around the registry stays around the registry alone; the
    // new tables come after everything the template had.
    let block = "{{ if .PrivateRegistryConfig }}\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"{{ .NodeConfig.AgentConfig.ImageServiceSocket }}\"\n{{ end }}\n";
    let end_of_block = new.find(block).map(|i| i + block.len());
    let ours = new.find("runtimes.nvidia]").unwrap();
    assert!(end_of_block.is_some_and(|e| e < ours), "{new}");
}

#[test]
fn a_default_set_by_a_template_expression_is_refused() {
    let tmpl = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"{{ .DefaultRuntime }}\"\n";
    let err = edit(
        Path::new("t"),
        Some(tmpl),
        &nvidia(),
        Flavor::K3sTemplate { version: 2 },
    )
    .unwrap_err();
    assert!(err.to_string().contains("template expression"), "{err}");
    let tmpl = "version = 2\n{{ if .X }}default_runtime_name = \"a\"{{ end }}\n";
    let err = edit(
        Path::new("t"),
        Some(tmpl),
        &nvidia(),
        Flavor::K3sTemplate { version: 2 },
    )
    .unwrap_err();
    assert!(err.to_string().contains("template expression"), "{err}");
}

#[test]
fn template_markup_outside_a_template_is_refused() {
    let err = edit(
        Path::new("/etc/containerd/config.toml"),
        Some("{{ template \"base\" . }}\n"),
        &nvidia(),
        Flavor::System,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("/etc/containerd/config.toml") && err.contains("template"),
        "{err}"
    );
}

#[test]
fn malformed_toml_names_file_line_and_column() {
    let err = edit(
        Path::new("/etc/containerd/config.toml"),
        Some(&fixture("containerd/malformed.toml")),
        &nvidia(),
        Flavor::System,
    )
    .unwrap_err();
    match &err {
        SetupError::Malformed { line, column, .. } => {
            assert_eq!((*line, *column), (5, 26), "{err}")
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    // Line numbers stay right in a template with Go-template lines before the error.
    let tmpl = "{{ template \"base\" . }}\n\n[plugins.x]\n  a = = 1\n";
    let err = edit(
        Path::new("t"),
        Some(tmpl),
        &nvidia(),
        Flavor::K3sTemplate { version: 3 },
    )
    .unwrap_err();
    assert!(
        matches!(err, SetupError::Malformed { line: 4, .. }),
        "{err}"
    );
    // Duplicate tables are invalid TOML too.
    let dup = "version = 2\n[plugins.a]\nx = 1\n[plugins.a]\ny = 2\n";
    let err = edit(Path::new("c"), Some(dup), &nvidia(), Flavor::System).unwrap_err();
    assert!(
        matches!(err, SetupError::Malformed { line: 4, .. }),
        "{err}"
    );
}

#[test]
fn a_non_table_where_a_table_is_needed_is_refused() {
    let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd = \"oops\"\n";
    let err = edit(Path::new("c.toml"), Some(text), &nvidia(), Flavor::System)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("containerd") && err.contains("not a table"),
        "{err}"
    );
    let err = edit(
        Path::new("c.toml"),
        Some("version = 7\n"),
        &nvidia(),
        Flavor::System,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("version 7"), "{err}");
}

#[test]
fn inline_tables_are_extended_inline() {
    let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nruntimes = { runc = { runtime_type = \"io.containerd.runc.v2\" } }\n";
    let e = edit(Path::new("c.toml"), Some(text), &nvidia(), Flavor::System).unwrap();
    let new = e.new.unwrap();
    let (_, runtime, default) = status(&new);
    assert!(runtime && default, "{new}");
}

#[test]
fn containerd_config_dump_accepts_generated_configs() {
    // Every release that reads the version: 1.6 and 1.7 read 1 and 2, 2.x reads 2 and 3.
    let mut files = vec![
        (
            "containerd/v2.toml".to_string(),
            edited("containerd/v2.toml", &nvidia(), Flavor::System),
        ),
        (
            "containerd/v1.toml".to_string(),
            edited("containerd/v1.toml", &nvidia(), Flavor::System),
        ),
        (
            "containerd/v3.toml".to_string(),
            edited("containerd/v3.toml", &nvidia(), Flavor::System),
        ),
    ];
    // A new file written from nothing.
    let new = edit(Path::new("c"), None, &nvidia(), Flavor::System)
        .unwrap()
        .new
        .unwrap();
    files.push(("a new file".into(), new));
    for (file, new) in files {
        let version = common::config_version(&new);
        for (release, ok, out) in common::containerd_dumps(&new) {
            assert!(
                ok,
                "containerd {release} rejects the edited {file}:\n{out}\n---\n{new}"
            );
            if !common::reads_cri_tables(&release, version) {
                continue;
            }
            // The dump is containerd's own reading of the file: our runtime must be in it.
            assert!(
                out.contains("containerd.runtimes.nvidia]"),
                "{file}: containerd {release}: runtime missing from dump:\n{out}"
            );
            assert!(
                out.contains("BinaryName = \"/usr/bin/nvidia-container-runtime\""),
                "{file}: containerd {release}:\n{out}"
            );
            assert!(
                out.contains("default_runtime_name = \"nvidia\""),
                "{file}: containerd {release}:\n{out}"
            );
        }
    }
}

#[test]
fn containerd_config_dump_rejects_a_duplicate_table() {
    // Proves the real-tool check can fail on the mistake templates invite.
    let Some(tool) = real_tool("containerd", "containerd") else {
        return;
    };
    let bad = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n";
    let (ok, out) = containerd_dump(&tool, bad);
    assert!(!ok, "{out}");
}

/// One of the shapes `nvidia-ctk runtime configure` is tested with (NVIDIA
/// nvidia-container-toolkit pkg/config/engine/containerd config_test.go and
/// config_v1_test.go), with values a real node has: the config, its version, and what
/// the NVIDIA runtime's options must say afterwards.
struct Shape {
    what: &'static str,
    version: i64,
    config: &'static str,
    systemd_cgroup: &'static str,
    root: Option<&'static str>,
    /// Whether the NVIDIA runtime becomes the default too.
    set_default: bool,
}

const SHAPES: [Shape; 8] = [
    Shape {
        what: "runc with an empty runtime_type (the toolkit writes runc.v2 and copies the options)",
        version: 2,
        config: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  privileged_without_host_devices = false\n  runtime_engine = \"\"\n  runtime_root = \"\"\n  runtime_type = \"\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  BinaryName = \"/usr/bin/runc\"\n  SystemdCgroup = true\n",
        systemd_cgroup: "true",
        root: None,
        set_default: true,
    },
    Shape {
        what: "a custom default runtime name, preferred to runc",
        version: 2,
        config: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"default\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = false\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.default]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.default.options]\n  BinaryName = \"/usr/bin/runc\"\n  SystemdCgroup = true\n",
        systemd_cgroup: "true",
        root: None,
        set_default: true,
    },
    Shape {
        what: "config version 1, runc under the legacy io.containerd.runtime.v1.linux shim (Runtime, RuntimeRoot, SystemdCgroup)",
        version: 1,
        config: "[plugins.cri.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runtime.v1.linux\"\n[plugins.cri.containerd.runtimes.runc.options]\n  Runtime = \"/usr/bin/runc\"\n  RuntimeRoot = \"/run/runc-v1\"\n  SystemdCgroup = true\n",
        systemd_cgroup: "true",
        root: Some("/run/runc-v1"),
        set_default: true,
    },
    Shape {
        what: "config version 1, the legacy shim with runtime_engine/runtime_root and the CRI plugin's systemd_cgroup",
        version: 1,
        config: "[plugins.cri]\n  systemd_cgroup = true\n[plugins.cri.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runtime.v1.linux\"\n  runtime_engine = \"/usr/bin/runc\"\n  runtime_root = \"/run/runc-legacy\"\n",
        systemd_cgroup: "true",
        root: Some("/run/runc-legacy"),
        // (The deprecated systemd_cgroup needs a default under the legacy shim:
        // registered only; see the_deprecated_cri_settings_keep_the_legacy_default.)
        set_default: false,
    },
    Shape {
        what: "config version 1, runc under io.containerd.runc.v1 (runc v2's options)",
        version: 1,
        config: "[plugins.cri.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v1\"\n[plugins.cri.containerd.runtimes.runc.options]\n  BinaryName = \"/usr/bin/runc\"\n  Root = \"/run/runc-root\"\n  SystemdCgroup = true\n",
        systemd_cgroup: "true",
        root: Some("/run/runc-root"),
        set_default: true,
    },
    Shape {
        what: "an existing entry of the same name with fewer options",
        version: 2,
        config: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n  BinaryName = \"/usr/bin/nvidia-container-runtime\"\n",
        systemd_cgroup: "true",
        root: None,
        set_default: true,
    },
    Shape {
        what: "an existing entry of the same name with another cgroup driver",
        version: 2,
        config: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n  BinaryName = \"/usr/bin/nvidia-container-runtime\"\n  SystemdCgroup = false\n",
        systemd_cgroup: "true",
        root: None,
        set_default: true,
    },
    Shape {
        what: "config version 3",
        version: 3,
        config: "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\n  BinaryName = \"/usr/bin/runc\"\n  SystemdCgroup = true\n",
        systemd_cgroup: "true",
        root: None,
        set_default: true,
    },
];

/// The NVIDIA runtime's table in an edited config: (runtime_type, options, the keys of
/// the table itself).
fn nvidia_table(text: &str, version: i64) -> (String, toml_edit::Table, Vec<String>) {
    let plugin = match version {
        1 => "cri",
        2 => "io.containerd.grpc.v1.cri",
        _ => "io.containerd.cri.v1.runtime",
    };
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    let t = doc["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]
        .as_table()
        .unwrap_or_else(|| panic!("no nvidia table:\n{text}"));
    (
        t["runtime_type"].as_str().unwrap_or_default().to_string(),
        t["options"].as_table().cloned().unwrap_or_default(),
        t.iter().map(|(k, _)| k.to_string()).collect(),
    )
}

#[test]
fn the_new_runtime_keeps_the_cgroup_driver_of_the_runtime_pods_use_in_every_shape() {
    for shape in &SHAPES {
        let what = shape.what;
        let sp = spec("nvidia", shape.set_default);
        let new = edit(Path::new("c.toml"), Some(shape.config), &sp, Flavor::System)
            .unwrap()
            .new
            .unwrap_or_else(|| panic!("{what}: no change"));
        let (runtime_type, options, keys) = nvidia_table(&new, shape.version);
        assert_eq!(runtime_type, "io.containerd.runc.v2", "{what}:\n{new}");
        assert_eq!(
            options.get("SystemdCgroup").map(|v| v.to_string().trim().to_string()),
            Some(shape.systemd_cgroup.to_string()),
            "{what}: a pod moved to nvidia would change cgroup driver (NVIDIA/nvidia-docker#1788):\n{new}"
        );
        assert_eq!(
            options.get("Root").and_then(|v| v.as_str()),
            shape.root,
            "{what}:\n{new}"
        );
        assert_eq!(
            options.get("BinaryName").and_then(|v| v.as_str()),
            Some("/usr/bin/nvidia-container-runtime"),
            "{what}:\n{new}"
        );
        for key in ["runtime_root", "runtime_engine"] {
            assert!(
                !keys.iter().any(|k| k == key),
                "{what}: {key} is refused by containerd 1.x on a runc.v2 runtime:\n{new}"
            );
        }
        assert!(
            options.get("Runtime").is_none(),
            "{what}: the legacy binary key:\n{new}"
        );
        // Idempotent.
        let again = edit(Path::new("c.toml"), Some(&new), &sp, Flavor::System).unwrap();
        assert!(
            again.new.is_none(),
            "{what}: second edit changed:\n{:?}",
            again.new
        );
        // Every real containerd that reads this version reads the same.
        for (release, tool) in containerd_releases_for(shape.version) {
            let dumped = containerd_dump_text(&tool, &new)
                .unwrap_or_else(|e| panic!("{what}: containerd {release}: {e}\n{new}"));
            assert_eq!(
                dumped.systemd_cgroup("nvidia"),
                shape.systemd_cgroup,
                "{what}: containerd {release}: {}",
                dumped.summary()
            );
            if shape.set_default {
                assert_eq!(dumped.default, "nvidia", "{what}: containerd {release}");
            }
            if release.starts_with("1.") {
                // Its CRI plugin validates the runtimes when it starts (config dump does
                // not): runtime_root or runtime_engine on a runc.v2 runtime would stop it.
                let started = containerd_start_cri(&tool, &new);
                assert!(
                    started.contains("Start cri plugin with config")
                        && !started.contains("invalid plugin config"),
                    "{what}: containerd {release}: {started}"
                );
                let nvidia = started
                    .split("nvidia:{")
                    .nth(1)
                    .and_then(|t| t.split("Options:map[").nth(1))
                    .and_then(|t| t.split(']').next())
                    .unwrap_or_else(|| panic!("{what}: {started}"));
                assert!(
                    nvidia.contains(&format!("SystemdCgroup:{}", shape.systemd_cgroup)),
                    "{what}: containerd {release} starts nvidia with options {nvidia}"
                );
            }
        }
    }
}

#[test]
fn a_runtime_root_on_a_runc_v2_runtime_stops_containerd_1s_cri_plugin() {
    // Proves the start check above can fail: copying the legacy shim's runtime_root as
    // it is would stop the CRI plugin of containerd 1.x.
    let Some(tool) = real_tool("containerd", "containerd") else {
        return;
    };
    let bad = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  runtime_root = \"/run/runc-legacy\"\n";
    let started = containerd_start_cri(&tool, bad);
    assert!(
        started.contains("runtime_root") && started.contains("only works for runtime"),
        "{started}"
    );
}
