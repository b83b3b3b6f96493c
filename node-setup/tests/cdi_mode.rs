//! `apply --cdi` / `check --cdi` / `revert`: the engine injects GPUs from CDI specs itself.
//! The real binary on fake host trees, one per layout (k3s's templates, the system
//! containerd v2/v3, docker), each result checked by the real consumer: Go's
//! text/template renders k3s templates, containerd 1.7 (`config dump`) reads the CDI keys
//! where it looks for them, dockerd 26 (`--validate`) reads daemon.json; Debian 12's
//! containerd 1.6 and dockerd 20.10 must still load every file.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{
    cdi_validator, containerd_dump, dockerd_validate, dockerd_validate_flag, fixture,
    generated_spec, ok, real_tool, render_k3s_template, run, K3sData, Out,
};
use edgegpu_testkit::nodehost::{NodeHost, Snapshot};

const UNIT: &str = "/etc/systemd/system/k3s.service";
const DAEMON_JSON: &str = "/etc/docker/daemon.json";
const CONTAINERD: &str = "/etc/containerd/config.toml";
const TEMPLATE_V3: &str = "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl";
const TEMPLATE_V2: &str = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl";
const DPKG_STATUS: &str = "/var/lib/dpkg/status";

/// Content and mode of every file (mtime left out: revert rewrites files).
fn content(s: &Snapshot) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    s.iter()
        .map(|(p, (c, m, _))| (p.clone(), (c.clone(), *m)))
        .collect()
}

fn cdi(args: &[&str]) -> Vec<String> {
    std::iter::once("--cdi")
        .chain(args.iter().copied())
        .map(String::from)
        .collect()
}

fn run_cdi(host: &NodeHost, args: &[&str]) -> Out {
    let args = cdi(args);
    run(host, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn ok_cdi(host: &NodeHost, args: &[&str]) -> String {
    let args = cdi(args);
    ok(host, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A dpkg status file that lists `package` at `version` as installed.
fn dpkg(host: &NodeHost, package: &str, version: &str) {
    host.write(
        DPKG_STATUS,
        format!(
            "Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\n\nPackage: {package}\nStatus: install ok installed\nVersion: {version}\n"
        ),
    );
}

/// `check --cdi` fails, `apply --cdi` writes, a second apply writes nothing (mtimes
/// included), `check --cdi` passes, `revert` restores the tree exactly. Returns the
/// apply output and the tree after it.
fn round_trip(host: &NodeHost) -> (String, NodeHostFiles) {
    let before = host.snapshot();
    let check = run_cdi(host, &["check"]);
    assert_eq!(check.code, 1, "not configured before:\n{}", check.stdout);
    let applied = ok_cdi(host, &["apply"]);
    let after = host.snapshot();
    assert_ne!(content(&before), content(&after), "{applied}");
    let second = ok_cdi(host, &["apply"]);
    assert!(
        second.contains("already configured: nothing to change, no file written"),
        "{second}"
    );
    assert_eq!(after, host.snapshot(), "a second apply touches no file");
    let check = ok_cdi(host, &["check"]);
    assert!(check.contains("node is fully configured"), "{check}");
    let files = NodeHostFiles(content(&after));
    let reverted = ok(host, &["revert"]);
    assert!(
        reverted.contains("restored") || reverted.contains("removed"),
        "{reverted}"
    );
    assert_eq!(
        content(&before),
        content(&host.snapshot()),
        "revert restores the tree"
    );
    (applied, files)
}

/// The files of a tree, to read one after the tree changed again.
struct NodeHostFiles(BTreeMap<PathBuf, (Vec<u8>, u32)>);

impl NodeHostFiles {
    fn read(&self, path: &str) -> String {
        let (bytes, _) = &self.0[&PathBuf::from(path.trim_start_matches('/'))];
        String::from_utf8(bytes.clone()).unwrap()
    }
}

/// A refusal: exit 3 naming every needle, nothing written; `check --cdi` exits 1 and
/// names them too.
fn refused(host: &NodeHost, args: &[&str], needles: &[&str]) -> String {
    let before = host.snapshot();
    let mut apply = args.to_vec();
    apply.push("apply");
    let out = run_cdi(host, &apply);
    assert_eq!(out.code, 3, "must refuse:\n{}\n{}", out.stdout, out.stderr);
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "refusal must name {n:?}:\n{}",
            out.stderr
        );
    }
    assert_eq!(before, host.snapshot(), "a refusal writes nothing");
    let mut check = args.to_vec();
    check.push("check");
    let c = run_cdi(host, &check);
    assert_eq!(c.code, 1, "check must fail:\n{}\n{}", c.stdout, c.stderr);
    for n in needles {
        assert!(c.stdout.contains(n), "check must name {n:?}:\n{}", c.stdout);
    }
    out.stderr
}

/// Every real containerd that loads `config`'s version loads it (see
/// `common::containerd_dumps`), and those that know the CDI keys (1.7, 2.x) read CDI on
/// with /var/run/cdi among the spec dirs; Debian 12's 1.6 does not know them.
fn containerd_reads_cdi(config: &str) {
    let version = common::config_version(config);
    for (release, ok, out) in common::containerd_dumps(config) {
        assert!(ok, "containerd {release} rejects:\n{out}\n---\n{config}");
        if release.starts_with("1.6") || !common::reads_cri_tables(&release, version) {
            continue;
        }
        assert!(
            out.contains("enable_cdi = true"),
            "containerd {release}: CDI not on in the dump:\n{out}\n---\n{config}"
        );
        let dirs = out
            .lines()
            .find(|l| l.trim_start().starts_with("cdi_spec_dirs"))
            .unwrap_or_default();
        assert!(
            dirs.contains("\"/var/run/cdi\""),
            "containerd {release}: {dirs}\n{out}"
        );
    }
}

fn k3s_host(version: &str) -> NodeHost {
    let host = NodeHost::new();
    host.k3s_binary(Some(version))
        .write(UNIT, fixture("units/k3s-installer-server.service"));
    host
}

#[test]
fn k3s_on_containerd_2_has_cdi_already_and_nothing_is_written() {
    let host = k3s_host("v1.32.2+k3s1");
    let before = host.snapshot();
    let out = ok_cdi(&host, &["apply"]);
    assert!(
        out.contains("already configured: nothing to change"),
        "{out}"
    );
    assert!(
        out.contains("k3s v1.32.2 ships containerd 2, whose enable_cdi defaults to true")
            && out.contains(
                "nothing to write in /var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl"
            ),
        "{out}"
    );
    assert!(out.contains("--device-list-strategy cdi-cri"), "{out}");
    assert_eq!(before, host.snapshot());
    // Without a spec the node cannot inject anything yet: check says what is missing.
    let check = run_cdi(&host, &["check"]);
    assert_eq!(check.code, 1, "{}", check.stdout);
    assert!(
        check
            .stdout
            .contains("[missing] /etc/cdi or /var/run/cdi: a CDI spec of kind nvidia.com/gpu"),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains("edgegpu-node-setup cdi generate"),
        "{}",
        check.stdout
    );
    generated_spec(&host);
    let check = ok_cdi(&host, &["check"]);
    assert!(
        check.contains("cdi: spec of kind nvidia.com/gpu: /var/run/cdi/nvidia.yaml"),
        "{check}"
    );
    assert!(check.contains("node is fully configured"), "{check}");
    // The same host with a template that keeps the base: still nothing to write.
    host.write(
        TEMPLATE_V3,
        fixture("containerd/k3s-config-v3-base.toml.tmpl"),
    );
    let out = ok_cdi(&host, &["apply"]);
    assert!(out.contains("already configured"), "{out}");
}

#[test]
fn k3s_on_containerd_1_with_the_base_template_is_refused() {
    for template in [None, Some("containerd/k3s-config-base-only.toml.tmpl")] {
        let host = k3s_host("v1.30.4+k3s1");
        generated_spec(&host);
        if let Some(t) = template {
            host.write(TEMPLATE_V2, fixture(t));
        }
        refused(
            &host,
            &[],
            &[
                "k3s v1.30.4 runs containerd 1.x",
                "enable_cdi = true",
                "cannot declare it again",
                "--mode docker --cdi",
            ],
        );
    }
}

/// A full k3s template (no base line) on a containerd 1.x k3s: `enable_cdi = true` goes
/// into the template's own CRI plugin table; Go renders it and containerd reads it there.
#[test]
fn a_full_v2_template_gets_enable_cdi_in_its_cri_table() {
    for t in [
        "containerd/k3s-config-full.toml.tmpl",
        "real-world/k3s-stock-range.toml.tmpl",
        "real-world/k3s-stock-if-containerd.toml.tmpl",
        "real-world/k3s-default-from-setting.toml.tmpl",
    ] {
        let host = k3s_host("v1.28.3+k3s1");
        generated_spec(&host);
        host.write(TEMPLATE_V2, fixture(t));
        let (applied, files) = round_trip(&host);
        assert!(
            applied.contains(&format!("wrote {TEMPLATE_V2}")),
            "{t}: {applied}"
        );
        assert!(
            applied.contains("systemctl try-restart k3s.service"),
            "{applied}"
        );
        let new = files.read(TEMPLATE_V2);
        for data in [
            K3sData::default(),
            K3sData {
                detected: &[],
                ..K3sData::default()
            },
        ] {
            let Some(rendered) = render_k3s_template(&new, 2, &data) else {
                return;
            };
            let rendered =
                rendered.unwrap_or_else(|e| panic!("{t}: Go cannot render:\n{e}\n---\n{new}"));
            containerd_reads_cdi(&rendered);
        }
    }
}

#[test]
fn a_full_v3_template_that_turns_cdi_off_is_turned_on() {
    let host = k3s_host("v1.32.2+k3s1");
    generated_spec(&host);
    let template = "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime']\n  enable_selinux = {{ .NodeConfig.SELinux }}\n  enable_cdi = false # site policy?\n  cdi_spec_dirs = ['/etc/cdi']\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = 'io.containerd.runc.v2'\n";
    host.write(TEMPLATE_V3, template);
    let (_, files) = round_trip(&host);
    let new = files.read(TEMPLATE_V3);
    assert!(
        new.contains("  enable_cdi = true # site policy?\n"),
        "{new}"
    );
    assert!(
        new.contains("cdi_spec_dirs = ['/etc/cdi', \"/var/run/cdi\"]"),
        "{new}"
    );
    // containerd 1.x cannot load a version-3 config: Go renders it and the rendered TOML
    // has the settings in the CRI runtime plugin's table; containerd 2.x loads it.
    let Some(rendered) = render_k3s_template(&new, 3, &K3sData::default()) else {
        return;
    };
    let rendered = rendered.unwrap();
    let doc: toml_edit::DocumentMut = rendered.parse().unwrap();
    let cri = &doc["plugins"]["io.containerd.cri.v1.runtime"];
    assert_eq!(cri["enable_cdi"].as_bool(), Some(true), "{rendered}");
    let dirs: Vec<&str> = cri["cdi_spec_dirs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    assert_eq!(dirs, ["/etc/cdi", "/var/run/cdi"], "{rendered}");
    // And containerd 2 reads it so.
    containerd_reads_cdi(&rendered);
}

#[test]
fn a_template_expression_deciding_cdi_is_refused() {
    let host = k3s_host("v1.28.3+k3s1");
    host.write(
        TEMPLATE_V2,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = {{ .EnableCDI }}\n",
    );
    refused(
        &host,
        &[],
        &[
            &format!("{TEMPLATE_V2}:3: enable_cdi is decided by a template expression"),
            "{{ .EnableCDI }}",
        ],
    );
}

#[test]
fn a_template_drop_in_that_turns_cdi_off_is_named() {
    let host = k3s_host("v1.32.2+k3s1");
    generated_spec(&host);
    let drop_in = "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d/50-site.toml";
    host.write(
        drop_in,
        "version = 3\n[plugins.'io.containerd.cri.v1.runtime']\n  enable_cdi = false\n",
    );
    refused(
        &host,
        &[],
        &[
            &format!("{drop_in}:3: k3s containerd (k3s.service) would not have CDI enabled"),
            "set it to true",
        ],
    );
}

#[test]
fn system_containerd_v2_gets_enable_cdi_and_containerd_reads_it() {
    // containerd/v2.toml says enable_cdi = false; its comments and order stay.
    let host = NodeHost::new();
    host.write(CONTAINERD, fixture("containerd/v2.toml"))
        .executable("/usr/bin/containerd", "");
    generated_spec(&host);
    let (applied, files) = round_trip(&host);
    assert!(
        applied.contains("systemctl try-restart containerd.service"),
        "{applied}"
    );
    let new = files.read(CONTAINERD);
    let old = fixture("containerd/v2.toml");
    assert_eq!(new, old.replace("enable_cdi = false", "enable_cdi = true"));
    containerd_reads_cdi(&new);

    // A spec dir list without /var/run/cdi gets it; a missing config is created (v2).
    let host = NodeHost::new();
    host.write(
        CONTAINERD,
        "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  cdi_spec_dirs = [\"/etc/cdi\"]\n",
    );
    generated_spec(&host);
    let (_, files) = round_trip(&host);
    let new = files.read(CONTAINERD);
    assert!(new.contains("  enable_cdi = true\n"), "{new}");
    assert!(
        new.contains("cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]"),
        "{new}"
    );
    containerd_reads_cdi(&new);

    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "");
    generated_spec(&host);
    let (_, files) = round_trip(&host);
    let new = files.read(CONTAINERD);
    assert!(new.starts_with("version = 2\n"), "{new}");
    containerd_reads_cdi(&new);
}

#[test]
fn system_containerd_release_decides_the_default() {
    // containerd 2 (from the package status) has CDI on: nothing to write in a v2 file.
    let host = NodeHost::new();
    host.write(CONTAINERD, "version = 2\n");
    dpkg(&host, "containerd.io", "2.0.4-1");
    generated_spec(&host);
    let out = ok_cdi(&host, &["apply"]);
    assert!(out.contains("already configured"), "{out}");
    assert!(
        out.contains(
            "containerd.io 2.0.4 (2.0.4-1 in /var/lib/dpkg/status): enable_cdi defaults to true"
        ),
        "{out}"
    );
    ok_cdi(&host, &["check"]);
    // A version-3 config is only read by containerd 2: on by default too, unless it
    // says false.
    let host = NodeHost::new();
    host.write(CONTAINERD, fixture("containerd/v3.toml"));
    generated_spec(&host);
    assert!(ok_cdi(&host, &["apply"]).contains("already configured"));
    let host = NodeHost::new();
    host.write(
        CONTAINERD,
        fixture("containerd/v3.toml").replace(
            "enable_selinux = false",
            "enable_selinux = false\n    enable_cdi = false",
        ),
    );
    generated_spec(&host);
    let (_, files) = round_trip(&host);
    assert!(files.read(CONTAINERD).contains("    enable_cdi = true\n"));
    containerd_reads_cdi(&files.read(CONTAINERD));
    // containerd 1.6 has no CDI at all.
    let host = NodeHost::new();
    host.write(CONTAINERD, fixture("containerd/v2.toml"));
    dpkg(&host, "containerd", "1.6.20~ds1-1+deb12u3");
    refused(
        &host,
        &[],
        &["containerd 1.6.20 (1.6.20~ds1-1+deb12u3 in /var/lib/dpkg/status) has no CDI support"],
    );
}

#[test]
fn the_imported_file_that_owns_the_cri_table_is_the_one_edited() {
    let host = NodeHost::new();
    host.write(
        CONTAINERD,
        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n",
    )
    .write(
        "/etc/containerd/conf.d/50-site.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n",
    );
    generated_spec(&host);
    let (applied, files) = round_trip(&host);
    assert!(
        applied.contains("/etc/containerd/conf.d/50-site.toml is imported by"),
        "{applied}"
    );
    assert!(files
        .read("/etc/containerd/conf.d/50-site.toml")
        .contains("enable_cdi = true"));
}

#[test]
fn an_nvidia_default_runtime_is_reported_not_changed() {
    let host = NodeHost::new();
    host.write(
        CONTAINERD,
        fixture("containerd/v2.toml").replace(
            "default_runtime_name = \"runc\"",
            "default_runtime_name = \"nvidia\"",
        ),
    );
    generated_spec(&host);
    let out = ok_cdi(&host, &["apply"]);
    assert!(
        out.contains(
            "system containerd: the default runtime is 'nvidia' (/etc/containerd/config.toml:16)"
        ) && out.contains("NVIDIA_VISIBLE_DEVICES=all"),
        "{out}"
    );
    assert!(host
        .read(CONTAINERD)
        .contains("default_runtime_name = \"nvidia\""));
}

fn docker_host(version: Option<&str>, daemon_json: &str) -> NodeHost {
    let host = NodeHost::new();
    host.executable("/usr/sbin/dockerd", "")
        .write(DAEMON_JSON, daemon_json);
    if let Some(v) = version {
        dpkg(&host, "docker-ce", v);
    }
    generated_spec(&host);
    host
}

/// dockerd 26 validates `daemon_json` (it knows features and cdi-spec-dirs); Debian 12's
/// dockerd 20.10 too when the file has no key it does not know.
fn dockerd_accepts(daemon_json: &str) {
    if let Some(tool) = cdi_validator("dockerd") {
        let (valid, out) = dockerd_validate_flag(&tool, daemon_json, &[]);
        assert!(valid, "dockerd 26 rejects:\n{out}\n---\n{daemon_json}");
    }
    if !daemon_json.contains("cdi-spec-dirs") {
        if let Some(tool) = real_tool("dockerd", "docker.io") {
            let (valid, out) = dockerd_validate(&tool, daemon_json, &[]);
            assert!(valid, "dockerd 20.10 rejects:\n{out}\n---\n{daemon_json}");
        }
    }
}

#[test]
fn docker_gets_features_cdi_merged_and_dockerd_validates_it() {
    let host = docker_host(
        Some("5:25.0.3-1~debian.12~bookworm"),
        "{\n    \"features\": {\"buildkit\": true},\n    \"log-driver\": \"journald\"\n}\n",
    );
    let (applied, files) = round_trip(&host);
    assert!(
        applied.contains("systemctl try-restart docker.service"),
        "{applied}"
    );
    let new = files.read(DAEMON_JSON);
    let v: serde_json::Value = serde_json::from_str(&new).unwrap();
    assert_eq!(
        v["features"],
        serde_json::json!({"buildkit": true, "cdi": true}),
        "{new}"
    );
    assert_eq!(v["log-driver"], "journald");
    assert!(
        new.starts_with("{\n    \"features\""),
        "order and indent kept:\n{new}"
    );
    dockerd_accepts(&new);

    // cdi-spec-dirs without /var/run/cdi get it.
    let host = docker_host(
        Some("26.1.5+dfsg1-9"),
        "{\"cdi-spec-dirs\": [\"/etc/cdi\"], \"features\": {\"cdi\": true}}",
    );
    let (_, files) = round_trip(&host);
    let new = files.read(DAEMON_JSON);
    let v: serde_json::Value = serde_json::from_str(&new).unwrap();
    assert_eq!(
        v["cdi-spec-dirs"],
        serde_json::json!(["/etc/cdi", "/var/run/cdi"])
    );
    dockerd_accepts(&new);

    // Version unknown: written, with a note.
    let host = docker_host(None, "");
    let out = ok_cdi(&host, &["apply"]);
    assert!(out.contains("docker's version is not known"), "{out}");
    dockerd_accepts(&host.read(DAEMON_JSON));
}

#[test]
fn docker_28_2_has_cdi_on_and_old_docker_is_refused() {
    let host = docker_host(Some("5:28.2.2-1~debian.12~bookworm"), "{}\n");
    let out = ok_cdi(&host, &["apply"]);
    assert!(out.contains("already configured"), "{out}");
    assert!(out.contains("dockerd's default from Docker 28.2"), "{out}");
    // features.cdi false wins over that default, and is set to true.
    let host = docker_host(Some("28.2.2"), "{\"features\": {\"cdi\": false}}\n");
    round_trip(&host);
    let host = docker_host(Some("20.10.24+dfsg1-1+b3"), "{}\n");
    refused(
        &host,
        &[],
        &["docker-ce 20.10.24 (20.10.24+dfsg1-1+b3 in /var/lib/dpkg/status) has no CDI support"],
    );
}

#[test]
fn dockerd_flags_decide_before_daemon_json() {
    let unit = |flags: &str| {
        let host = docker_host(Some("28.3.0"), "{}\n");
        host.write(
            "/lib/systemd/system/docker.service",
            fixture("real-world/debian-docker.service"),
        )
        .write("/etc/default/docker", format!("DOCKER_OPTS=\"{flags}\"\n"));
        host
    };
    refused(
        &unit("--feature cdi=false"),
        &[],
        &[
            "/etc/default/docker:1 (flag --feature): docker would not have CDI enabled",
            "remove the flag",
        ],
    );
    refused(
        &unit("--cdi-spec-dir /etc/cdi"),
        &[],
        &["/etc/default/docker:1 (flag --cdi-spec-dir): docker would not read CDI specs from /var/run/cdi"],
    );
    // --feature and features in daemon.json: dockerd would not start.
    let host = unit("--feature cdi");
    host.write(DAEMON_JSON, "{\"features\": {\"buildkit\": true}}\n");
    refused(
        &host,
        &[],
        &["(flag --feature) and /etc/docker/daemon.json:1: dockerd would not start: 'features' is given both as a flag"],
    );
    // Another feature as a flag (Docker 28.0/28.1: CDI not yet on by default):
    // daemon.json may not get `features`.
    let host = unit("--feature containerd-snapshotter");
    dpkg(&host, "docker-ce", "5:28.0.4-1~debian.12~bookworm");
    refused(
        &host,
        &[],
        &[
            "/etc/default/docker:1 (flag --feature): dockerd gets --feature flags",
            "Add --feature cdi",
        ],
    );
    // --feature cdi alone: nothing to write, and daemon.json gets no features key.
    let host = unit("--feature cdi");
    let out = ok_cdi(&host, &["apply"]);
    assert!(out.contains("already configured"), "{out}");
}

#[test]
fn k3s_with_docker_mode_uses_docker_and_enables_cdi() {
    let host = common::docker_host();
    dpkg(&host, "docker.io", "26.1.5+dfsg1-9+deb13u1");
    generated_spec(&host);
    let (applied, files) = round_trip(&host);
    assert!(applied.contains("mode: docker, CDI"), "{applied}");
    assert!(applied.contains("cri-dockerd"), "{applied}");
    assert!(files.read(UNIT).contains("\t'--docker' \\\n"));
    dockerd_accepts(&files.read(DAEMON_JSON));
}

#[test]
fn k3s_default_runtime_mode_does_not_mix_with_cdi() {
    let host = k3s_host("v1.32.2+k3s1");
    let out = run_cdi(&host, &["--mode", "k3s-default-runtime", "apply"]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.contains("use --mode containerd"),
        "{}",
        out.stderr
    );
}

#[test]
fn check_json_reports_cdi_per_engine() {
    let host = NodeHost::new();
    host.write(CONTAINERD, fixture("containerd/v2.toml"));
    let out = run_cdi(&host, &["check", "--output", "json"]);
    assert_eq!(out.code, 1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["cdi"], true);
    assert_eq!(v["configured"], false);
    assert!(v.get("runtime").is_none(), "{v}");
    assert_eq!(v["cdi_specs"]["found"], serde_json::json!([]));
    let e = &v["effective"][0];
    assert_eq!(e["engine"], "system containerd");
    assert_eq!(e["enabled"]["value"], false);
    assert_eq!(
        e["enabled"]["source"],
        serde_json::json!({"kind": "file", "file": CONTAINERD, "line": 12})
    );
    assert_eq!(
        e["spec_dirs"]["value"],
        serde_json::json!(["/etc/cdi", "/var/run/cdi"])
    );
    // The NVIDIA-runtime mode's JSON keeps its shape.
    let legacy = run(&host, &["check", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&legacy.stdout).unwrap();
    assert_eq!(v["cdi"], false);
    assert_eq!(v["runtime"]["name"], "nvidia");
    assert!(v["effective"][0].get("default_runtime").is_some(), "{v}");
}

#[test]
fn cdi_mode_is_documented_in_help() {
    let out = edgegpu_testkit::process::binary_command(common::node_setup_binary())
        .args(["apply", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--cdi",
        "EDGEGPU_CDI",
        "enable_cdi",
        "features.cdi",
        "cdi-cri",
    ] {
        assert!(
            help.contains(needle),
            "{needle} missing from --help:\n{help}"
        );
    }
}

#[test]
fn the_cdi_validators_can_fail() {
    // A key in the wrong table is ignored by containerd: the dump shows CDI off.
    if let Some(tool) = cdi_validator("containerd") {
        let misplaced = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  enable_cdi = true\n";
        let (ok, out) = containerd_dump(&tool, misplaced);
        assert!(ok, "{out}");
        assert!(!out.contains("enable_cdi = true"), "{out}");
        assert!(out.contains("enable_cdi = false"), "{out}");
    }
    if let Some(tool) = cdi_validator("dockerd") {
        let (valid, out) = dockerd_validate_flag(&tool, "{\"features\": {\"cdi\": \"yes\"}}", &[]);
        assert!(!valid, "{out}");
        // The flag/file conflict node-setup reports for a named option (its key is
        // `cdi-spec-dirs`, the flag `--cdi-spec-dir`).
        let json = "{\"cdi-spec-dirs\": [\"/etc/cdi\"]}";
        assert!(dockerd_validate_flag(&tool, json, &[]).0);
        let (valid, out) = dockerd_validate_flag(&tool, json, &["--cdi-spec-dir", "/x"]);
        assert!(!valid && out.contains("cdi-spec-dirs"), "{out}");
    }
}

mod editor {
    use std::path::Path;

    use edgegpu_node_setup::formats::containerd::{describe, edit_cdi, CdiWant, Flavor, Setting};

    const WANT: CdiWant = CdiWant {
        enable: true,
        spec_dir: Some("/var/run/cdi"),
        version: None,
    };

    fn edited(text: &str, flavor: Flavor) -> String {
        edit_cdi(Path::new("c.toml"), Some(text), flavor, WANT)
            .unwrap()
            .new
            .unwrap()
    }

    #[test]
    fn an_inline_cri_table_is_extended_inline() {
        let text = "version = 2\n[plugins]\n\"io.containerd.grpc.v1.cri\" = { sandbox_image = \"pause\" }\n";
        let new = edited(text, Flavor::System);
        let line = new.lines().nth(2).unwrap();
        assert!(
            line.starts_with("\"io.containerd.grpc.v1.cri\" = { sandbox_image = \"pause\"")
                && line.ends_with("enable_cdi = true }"),
            "{new}"
        );
        super::containerd_reads_cdi(&new);
    }

    #[test]
    fn version_1_uses_the_cri_plugin_table() {
        let new = edited(
            "[plugins.cri]\n  sandbox_image = \"pause\"\n",
            Flavor::System,
        );
        assert!(
            new.contains("[plugins.cri]\n  sandbox_image = \"pause\"\n  enable_cdi = true\n"),
            "{new}"
        );
    }

    #[test]
    fn values_containerd_would_not_decode_are_refused_with_their_line() {
        for (text, what) in [
            ("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = \"yes\"\n", "line 3: enable_cdi must be true or false"),
            ("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  cdi_spec_dirs = \"/etc/cdi\"\n", "line 3: cdi_spec_dirs must be a list of directories"),
        ] {
            let err = edit_cdi(Path::new("c.toml"), Some(text), Flavor::System, WANT)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("c.toml: ") && err.contains(what), "{err}");
        }
    }

    #[test]
    fn a_setting_inside_a_control_structure_is_refused() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n{{- if .X }}\n  enable_cdi = false\n{{- end }}\n";
        let flavor = Flavor::K3sTemplate { version: 2 };
        let d = describe(Path::new("t"), Some(text), flavor).unwrap();
        assert!(
            matches!(d.enable_cdi, Some(Setting::Unknown { line: 4, .. })),
            "{:?}",
            d.enable_cdi
        );
        let err = edit_cdi(Path::new("t"), Some(text), flavor, WANT)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "t:4: enable_cdi is decided by a template expression or inside a control structure"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_file_that_already_says_it_is_left_alone() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n  cdi_spec_dirs = ['/var/run/cdi']\n";
        let e = edit_cdi(Path::new("c.toml"), Some(text), Flavor::System, WANT).unwrap();
        assert_eq!(e.new, None);
    }
}

#[test]
fn an_import_without_a_version_key_owns_the_cri_table_it_names() {
    // containerd 1.x reads an import without `version` with the merged config's version
    // (2): its [plugins."io.containerd.grpc.v1.cri"] replaces the main file's, so that is
    // where enable_cdi must go.
    let host = NodeHost::new();
    let import = "/etc/containerd/conf.d/10-site.toml";
    host.write(
        CONTAINERD,
        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
    )
    .write(
        import,
        "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.9\"\n",
    )
    .executable("/usr/bin/containerd", "");
    dpkg(&host, "containerd", "1.7.24~ds1-6+deb13u1");
    generated_spec(&host);
    let (_, files) = round_trip(&host);
    assert!(
        files.read(import).contains("enable_cdi = true"),
        "{}",
        files.read(import)
    );
    ok_cdi(&host, &["apply"]);
    if let Some(tool) = cdi_validator("containerd") {
        let dump = common::containerd_dump_host_text(&tool, &host, CONTAINERD).unwrap();
        assert!(dump.contains("enable_cdi = true"), "{dump}");
    }
}
