//! The system containerd's `imports`: node-setup edits the file whose CRI plugin table
//! takes effect as the installed release merges its files (containerd 1.x: a later
//! file's plugin table replaces the earlier one, and the merged version names the CRI
//! plugin; 2.x: tables merge key by key, version-1 files are migrated, a version-2 CRI
//! table only fills what the version-3 one lacks), or refuses naming the file. Every
//! outcome is checked against the real releases' `containerd config dump` (Debian 12's
//! 1.6, Debian 13's 1.7, Debian sid's 2.1): `check` never says configured when containerd's
//! merged config does not use the runtime.

use crate::common;

use common::{containerd_dump_host, containerd_releases, containerd_start_cri, run, Out};
use edgegpu_testkit::nodehost::NodeHost;

const MAIN: &str = "/etc/containerd/config.toml";
const IMPORT: &str = "/etc/containerd/conf.d/10-site.toml";
const RUNTIME: &str = "/usr/bin/nvidia-container-runtime";

/// Which containerd the package status under the root says is installed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Installed {
    Containerd16,
    Containerd21,
    Unknown,
}

impl Installed {
    const ALL: [Installed; 3] = [
        Installed::Containerd16,
        Installed::Containerd21,
        Installed::Unknown,
    ];

    /// Whether real containerd release `release` (`1.6.20`) is one this covers.
    fn covers(self, release: &str) -> bool {
        match self {
            Installed::Containerd16 => release.starts_with("1."),
            Installed::Containerd21 => !release.starts_with("1."),
            Installed::Unknown => true,
        }
    }
}

/// A host with the system containerd (no k3s), the NVIDIA runtime, `files` and the
/// package status saying `installed`.
fn host(files: &[(&str, &str)], installed: Installed) -> NodeHost {
    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "").nvidia_runtime();
    for (path, text) in files {
        host.write(path, text);
    }
    let version = match installed {
        Installed::Containerd16 => Some("1.6.20~ds1-1+deb12u3"),
        Installed::Containerd21 => Some("2.1.9~ds1-5"),
        Installed::Unknown => None,
    };
    if let Some(v) = version {
        host.write(
            "/var/lib/dpkg/status",
            format!("Package: containerd\nStatus: install ok installed\nVersion: {v}\n"),
        );
    }
    host
}

fn show(out: &Out) -> String {
    format!(
        "exit {}\nstdout:\n{}\nstderr:\n{}",
        out.code, out.stdout, out.stderr
    )
}

/// apply succeeds, a second apply writes nothing, check passes; and every real release
/// `installed` covers reads the result with the NVIDIA runtime as the default, running
/// our binary, with the same SystemdCgroup as `was_default` (the runtime pods used
/// before) has in its own reading.
fn configured_everywhere(host: &NodeHost, installed: Installed, was_default: &str, what: &str) {
    let out = run(host, &["apply"]);
    assert_eq!(out.code, 0, "{what} ({installed:?}): {}", show(&out));
    let again = run(host, &["apply"]);
    assert!(
        again.stdout.contains("already configured"),
        "{what} ({installed:?}): {}",
        show(&again)
    );
    let check = run(host, &["check"]);
    assert_eq!(check.code, 0, "{what} ({installed:?}): {}", show(&check));
    for (release, tool) in containerd_releases() {
        if !installed.covers(&release) {
            continue;
        }
        let dumped = containerd_dump_host(&tool, host, MAIN)
            .unwrap_or_else(|e| panic!("{what}: containerd {release} refuses the result: {e}"));
        let summary = dumped.summary();
        assert_eq!(
            dumped.default, "nvidia",
            "{what} ({installed:?}): containerd {release}'s merged config has another default, while check says configured: {summary}"
        );
        assert_eq!(
            dumped.get("nvidia", &["options", "BinaryName"]).as_deref(),
            Some(RUNTIME),
            "{what}: containerd {release}: {summary}"
        );
        assert_eq!(
            dumped.systemd_cgroup("nvidia"),
            dumped.systemd_cgroup(was_default),
            "{what} ({installed:?}): containerd {release}: pods moved from {was_default} to nvidia would change cgroup driver: {summary}"
        );
    }
}

/// apply refuses naming each of `needles`, check is blocked and exits 1, nothing written.
fn refused(host: &NodeHost, needles: &[&str], what: &str) {
    let before = host.snapshot();
    let out = run(host, &["apply"]);
    assert_eq!(out.code, 3, "{what}: {}", show(&out));
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "{what}: {n:?} missing: {}",
            show(&out)
        );
    }
    assert_eq!(before, host.snapshot(), "{what}: nothing written");
    let check = run(host, &["check"]);
    assert_eq!(check.code, 1, "{what}: {}", show(&check));
    assert!(
        check.stdout.contains("blocked:"),
        "{what}: {}",
        show(&check)
    );
}

#[test]
fn an_import_without_a_version_key_is_read_with_the_merged_version() {
    // The drop-in has no `version`: containerd reads its table under the merged config's
    // version (2, from the main file). In 1.x its CRI table replaces the main file's,
    // so the default must go there; 2.x merges both.
    let main = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n";
    let import = "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n";
    for installed in Installed::ALL {
        let host = host(&[(MAIN, main), (IMPORT, import)], installed);
        configured_everywhere(&host, installed, "runc", "unversioned import");
        assert_eq!(
            host.read(MAIN),
            main,
            "the main file's CRI table does not count"
        );
        let edited = host.read(IMPORT);
        assert!(
            edited.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]"),
            "written under the merged version's plugin name, not the file's own (1):\n{edited}"
        );
    }
}

#[test]
fn a_version_1_table_imported_into_a_version_2_config_stops_containerd_1() {
    let main = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
    let import = "[plugins.cri.containerd]\n  snapshotter = \"overlayfs\"\n";
    // containerd 1.x refuses the merged config ("invalid plugin key URI"): named.
    let h = host(&[(MAIN, main), (IMPORT, import)], Installed::Containerd16);
    refused(
        &h,
        &[&format!("{IMPORT}:1"), "invalid plugin key URI"],
        "cri table in a version-2 config",
    );
    for (release, tool) in containerd_releases() {
        if release.starts_with("1.") {
            let err = containerd_dump_host(&tool, &h, MAIN).unwrap_err();
            assert!(
                err.contains("invalid plugin key URI"),
                "containerd {release}: {err}"
            );
        }
    }
    // containerd 2 migrates the file (cri becomes io.containerd.grpc.v1.cri): fine.
    let h = host(&[(MAIN, main), (IMPORT, import)], Installed::Containerd21);
    configured_everywhere(
        &h,
        Installed::Containerd21,
        "runc",
        "cri table, containerd 2",
    );
    assert!(h
        .read(IMPORT)
        .contains("[plugins.cri.containerd.runtimes.nvidia]"));
}

#[test]
fn a_version_1_config_gets_the_table_containerd_2_reads() {
    // containerd 2 migrates a config without `version` to version 3: its `cri` table
    // becomes io.containerd.grpc.v1.cri, which a version-3 config does not read.
    let main = "[plugins.cri.containerd]\n  snapshotter = \"overlayfs\"\n\n[plugins.cri.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\n[plugins.cri.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n";
    let h = host(&[(MAIN, main)], Installed::Containerd21);
    configured_everywhere(
        &h,
        Installed::Containerd21,
        "runc",
        "version 1, containerd 2",
    );
    assert!(
        h.read(MAIN)
            .contains("[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]"),
        "{}",
        h.read(MAIN)
    );
    let h = host(&[(MAIN, main)], Installed::Containerd16);
    configured_everywhere(
        &h,
        Installed::Containerd16,
        "runc",
        "version 1, containerd 1.6",
    );
    assert!(h
        .read(MAIN)
        .contains("[plugins.cri.containerd.runtimes.nvidia]"));
    // Not knowing the release, no one edit works for both: refused, naming the table
    // containerd 2 would ignore.
    let h = host(&[(MAIN, main)], Installed::Unknown);
    refused(
        &h,
        &[&format!("{MAIN}:1"), "containerd 2 ignores"],
        "version 1, release unknown",
    );
    // No package database, but the binary says which: its package paths decide, and the
    // plan says so. Both generations' real releases read the result as planned.
    for (installed, packages) in [
        (
            Installed::Containerd21,
            "github.com/containerd/containerd/v2/core/runtime",
        ),
        (
            Installed::Containerd16,
            "github.com/containerd/containerd/pkg/cri/server",
        ),
    ] {
        let h = host(&[(MAIN, main)], Installed::Unknown);
        h.executable("/usr/bin/containerd", format!("\x7fELF\0{packages}.init\0"));
        let out = run(&h, &["apply", "--dry-run"]);
        assert!(
            out.stdout
                .contains("its binary /usr/bin/containerd holds the packages"),
            "{}",
            show(&out)
        );
        configured_everywhere(&h, installed, "runc", "version 1, release from the binary");
    }
}

#[test]
fn a_version_2_import_into_a_version_3_config_only_fills_what_it_lacks() {
    // containerd 2 moves the version-2 table's runtime settings into the version-3 one
    // only where that lacks them, and its runtimes not at all when it has its own.
    let main = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n";
    let import = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/opt/cni/bin\"\n";
    let h = host(&[(MAIN, main), (IMPORT, import)], Installed::Containerd21);
    configured_everywhere(&h, Installed::Containerd21, "runc", "v2 import, v3 main");
    assert_eq!(h.read(IMPORT), import, "its runtimes would be dropped");
    assert!(h.read(MAIN).contains("default_runtime_name = \"nvidia\""));
}

#[test]
fn a_later_import_that_sets_another_default_is_named_for_each_release() {
    // 1.x: the drop-in's table replaces the main file's; 2.x: its default wins the merge.
    // Either way the drop-in decides, and it is named (node-setup edits the last file
    // with the CRI table, here the drop-in itself: configured).
    let main = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
    let import = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"crun\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun.options]\n  BinaryName = \"/usr/bin/crun\"\n  SystemdCgroup = true\n";
    for installed in Installed::ALL {
        let h = host(&[(MAIN, main), (IMPORT, import)], installed);
        configured_everywhere(&h, installed, "crun", "crun drop-in");
        let edited = h.read(IMPORT);
        assert!(
            edited.contains("default_runtime_name = \"nvidia\""),
            "{edited}"
        );
        assert!(
            edited
                .split("runtimes.nvidia.options]")
                .nth(1)
                .is_some_and(|t| t.contains("SystemdCgroup = true")),
            "copied from crun, the default:\n{edited}"
        );
    }
}

#[test]
fn the_deprecated_default_runtime_table_decides_the_default_in_containerd_1() {
    // containerd 1.x makes a `default_runtime` table with a runtime_type the default
    // runtime, named "default", whatever default_runtime_name says; 2.0 dropped it.
    let main = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime]\n  runtime_type = \"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime.options]\n  SystemdCgroup = true\n";
    let h = host(&[(MAIN, main)], Installed::Containerd16);
    refused(
        &h,
        &[&format!("{MAIN}:3:"), "deprecated default_runtime table"],
        "legacy default_runtime, containerd 1.6",
    );
    // What apply refused to write: containerd 1.6 itself starts with 'default'.
    if let Some((_, tool)) = containerd_releases()
        .into_iter()
        .find(|(r, _)| r.starts_with("1.6"))
    {
        let with_default = main.replacen(
            "\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime]",
            "\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"nvidia\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime]",
            1,
        );
        let started = containerd_start_cri(&tool, &with_default);
        assert!(started.contains("DefaultRuntimeName:default "), "{started}");
    }
    // Only registering the runtime: it copies the table that is the default.
    let out = run(&h, &["--no-set-default", "apply"]);
    assert_eq!(out.code, 0, "{}", show(&out));
    let edited = h.read(MAIN);
    assert!(
        edited
            .split("runtimes.nvidia.options]")
            .nth(1)
            .is_some_and(|t| t.contains("SystemdCgroup = true")),
        "{edited}"
    );
    // containerd 2 ignores the table: the default is set as usual.
    let h = host(&[(MAIN, main)], Installed::Containerd21);
    configured_everywhere(
        &h,
        Installed::Containerd21,
        "runc",
        "legacy default_runtime, containerd 2",
    );
}

#[test]
fn the_deprecated_systemd_cgroup_keeps_the_legacy_default() {
    // containerd 1.x's CRI plugin does not load when its deprecated systemd_cgroup is on
    // and the default runtime is not under the legacy shim: making nvidia (runc v2) the
    // default is refused, naming that setting; registering it works, with the cgroup
    // driver systemd_cgroup gives the legacy runtime.
    let main = "[plugins.cri]\n  systemd_cgroup = true\n\n[plugins.cri.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runtime.v1.linux\"\n  runtime_engine = \"/usr/bin/runc\"\n";
    let h = host(&[(MAIN, main)], Installed::Containerd16);
    refused(
        &h,
        &[
            &format!("{MAIN}:2:"),
            "systemd_cgroup only works while the default runtime",
        ],
        "systemd_cgroup, containerd 1.6",
    );
    let out = run(&h, &["--no-set-default", "apply"]);
    assert_eq!(out.code, 0, "{}", show(&out));
    assert_eq!(run(&h, &["--no-set-default", "check"]).code, 0);
    let edited = h.read(MAIN);
    for (release, tool) in containerd_releases() {
        if !release.starts_with("1.") {
            continue;
        }
        let started = containerd_start_cri(&tool, &edited);
        assert!(
            started.contains("Start cri plugin with config")
                && started.contains("DefaultRuntimeName:runc ")
                && started.contains("nvidia:{Type:io.containerd.runc.v2"),
            "containerd {release}: {started}"
        );
        // What apply refused to write stops the CRI plugin.
        let as_default = edited.replacen(
            "[plugins.cri]\n",
            "[plugins.cri]\n  containerd.default_runtime_name = \"nvidia\"\n",
            1,
        );
        let started = containerd_start_cri(&tool, &as_default);
        assert!(
            started.contains("`systemd_cgroup` only works for runtime"),
            "containerd {release}: {started}"
        );
    }
}

/// k3s's template drop-in directory (k3s PR #13680), next to `template`.
const K3S_DIR: &str = "/var/lib/rancher/k3s/agent/etc/containerd";

/// The k3s installer's server unit at `version`, the NVIDIA runtime on its PATH, a base-
/// only template of config version `config_version`, and a drop-in that declares only a
/// kata runtime in its CRI table (kata-deploy's shape).
fn k3s_with_kata_drop_in(version: &str, config_version: i64) -> (NodeHost, String) {
    let (template, dir, plugin) = if config_version == 3 {
        (
            "config-v3.toml.tmpl",
            "config-v3.toml.d",
            "'io.containerd.cri.v1.runtime'",
        )
    } else {
        (
            "config.toml.tmpl",
            "config.toml.d",
            "\"io.containerd.grpc.v1.cri\"",
        )
    };
    let drop_in = format!(
        "version = {config_version}\n[plugins.{plugin}.containerd.runtimes.kata]\n  runtime_type = \"io.containerd.kata.v2\"\n"
    );
    let host = NodeHost::new();
    host.k3s_binary(Some(version))
        .write(
            "/etc/systemd/system/k3s.service",
            common::fixture("units/k3s-installer-server.service"),
        )
        .nvidia_runtime()
        .write(
            &format!("{K3S_DIR}/{template}"),
            "{{ template \"base\" . }}\n",
        )
        .write(&format!("{K3S_DIR}/{dir}/50-kata.toml"), &drop_in);
    (host, drop_in)
}

/// What containerd `tool` makes of k3s's base rendered with default-runtime nvidia (our
/// stand-in base, config version `config_version`) importing `drop_in` as the newer base
/// does: (default, nvidia's binary, kata declared).
fn k3s_rendered_with_drop_in(
    tool: &std::path::Path,
    config_version: i64,
    drop_in: &str,
) -> Option<(String, Option<String>, bool)> {
    let data = common::K3sData {
        default_runtime: Some("nvidia"),
        ..Default::default()
    };
    let rendered =
        common::render_k3s_template("{{ template \"base\" . }}\n", config_version, &data)?
            .expect("renders");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("50-kata.toml"), drop_in).unwrap();
    let with_import = rendered.replacen(
        &format!("version = {config_version}\n"),
        &format!(
            "version = {config_version}\nimports = [\"{}/*.toml\"]\n",
            dir.path().display()
        ),
        1,
    );
    let dumped = common::containerd_dump_text(tool, &with_import).expect("loads");
    Some((
        dumped.default.clone(),
        dumped.get("nvidia", &["options", "BinaryName"]),
        dumped.runtimes.contains_key("kata"),
    ))
}

#[test]
fn k3s_template_drop_ins_merge_as_k3s_containerd_does() {
    // k3s with containerd 2 (v1.32.2): the drop-in's CRI table merges into the base's;
    // nvidia stays the default k3s's setting makes it.
    let (h, drop_in) = k3s_with_kata_drop_in("v1.32.2+k3s1", 3);
    let out = run(&h, &["apply"]);
    assert_eq!(out.code, 0, "{}", show(&out));
    assert_eq!(run(&h, &["check"]).code, 0);
    for (release, tool) in containerd_releases() {
        if release.starts_with("1.") {
            continue;
        }
        if let Some((default, binary, kata)) = k3s_rendered_with_drop_in(&tool, 3, &drop_in) {
            assert_eq!(default, "nvidia", "containerd {release}");
            assert_eq!(binary.as_deref(), Some(RUNTIME), "containerd {release}");
            assert!(kata, "containerd {release}");
        }
    }
    // k3s's release unknown: a version-3 template means containerd 2.
    let h = NodeHost::new();
    h.write(
        "/etc/systemd/system/k3s.service",
        common::fixture("units/k3s-installer-server.service"),
    )
    .executable("/usr/local/bin/k3s", "#!/bin/sh\n")
    .nvidia_runtime()
    .write(
        &format!("{K3S_DIR}/config-v3.toml.tmpl"),
        "{{ template \"base\" . }}\n",
    )
    .write(
        &format!("{K3S_DIR}/config-v3.toml.d/50-kata.toml"),
        &drop_in,
    );
    let out = run(&h, &["apply"]);
    assert_eq!(out.code, 0, "k3s version unknown: {}", show(&out));
    assert_eq!(run(&h, &["check"]).code, 0);
    // k3s with containerd 1.7 (v1.30.4): the drop-in's table replaces the base's, which
    // loses both the default and the runtime: refused, naming the drop-in.
    let (h, drop_in) = k3s_with_kata_drop_in("v1.30.4+k3s1", 2);
    refused(
        &h,
        &[
            &format!("{K3S_DIR}/config.toml.d/50-kata.toml:2"),
            "replaces the earlier ones before containerd 2.0",
        ],
        "kata drop-in, k3s on containerd 1.7",
    );
    for (release, tool) in containerd_releases() {
        if !release.starts_with("1.7") {
            continue;
        }
        if let Some((default, binary, _)) = k3s_rendered_with_drop_in(&tool, 2, &drop_in) {
            assert_eq!(
                (default.as_str(), binary),
                ("runc", None),
                "containerd {release}"
            );
        }
    }
}
