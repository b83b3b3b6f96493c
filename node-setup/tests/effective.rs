//! node-setup decides from what the services will actually load: units with drop-ins,
//! k3s's command line and config files, containerd's imports, dockerd's flags. Each test
//! is one real situation where deciding from a single file gave a wrong "configured".

use crate::common;

use common::{containerd_dumps, fixture, ok, real_tool, run, Out};
use edgegpu_testkit::nodehost::NodeHost;

const UNIT: &str = "/etc/systemd/system/k3s.service";
const DROP_IN: &str = "/etc/rancher/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml";
const TEMPLATE_V3: &str = "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl";
const TEMPLATE_V2: &str = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl";

/// The k3s installer's server unit with extra argument lines after `server \`.
fn installer_unit(extra_args: &[&str]) -> String {
    let lines: String = extra_args.iter().map(|a| format!("\t'{a}' \\\n")).collect();
    fixture("units/k3s-installer-server.service")
        .replace("    server \\\n", &format!("    server \\\n{lines}"))
}

fn k3s_host(version: &str, unit: &str) -> NodeHost {
    let host = NodeHost::new();
    host.k3s_binary(Some(version))
        .write(UNIT, unit)
        .nvidia_runtime();
    host
}

/// k3s v1.30.4 from the installer's server unit, with the NVIDIA runtime.
fn installer_host() -> NodeHost {
    k3s_host(
        "v1.30.4+k3s1",
        &fixture("units/k3s-installer-server.service"),
    )
}

/// `apply` succeeds and `check` then passes; returns apply's output.
fn configured(host: &NodeHost, args: &[&str]) -> String {
    let mut apply: Vec<&str> = args.to_vec();
    apply.push("apply");
    let out = ok(host, &apply);
    let mut check: Vec<&str> = args.to_vec();
    check.push("check");
    let c = run(host, &check);
    assert_eq!(c.code, 0, "check after apply:\n{}", c.stdout);
    out
}

/// A refusal: exit 3, the message names `needle`, and not one file changed; `check`
/// exits 1 and names it too.
fn refused(host: &NodeHost, args: &[&str], needles: &[&str]) -> Out {
    let before = host.snapshot();
    let mut apply: Vec<&str> = args.to_vec();
    apply.push("apply");
    let out = run(host, &apply);
    assert_eq!(
        out.code, 3,
        "apply must refuse:\n{}\n{}",
        out.stdout, out.stderr
    );
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "refusal must name {n:?}:\n{}",
            out.stderr
        );
    }
    assert_eq!(before, host.snapshot(), "a refusal writes nothing");
    let mut check: Vec<&str> = args.to_vec();
    check.push("check");
    let c = run(host, &check);
    assert_ne!(c.code, 0, "check must not pass:\n{}", c.stdout);
    let text = format!("{}{}", c.stdout, c.stderr);
    for n in needles {
        assert!(text.contains(n), "check must name {n:?}:\n{text}");
    }
    out
}

fn check_json(host: &NodeHost, args: &[&str]) -> (i32, serde_json::Value) {
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["check", "--output", "json"]);
    let out = run(host, &a);
    let v = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}:\n{}\n{}", out.stdout, out.stderr));
    (out.code, v)
}

#[test]
fn a_default_runtime_flag_on_the_command_line_beats_every_config_file() {
    // The installer quotes each argument on its own line.
    let host = k3s_host(
        "v1.30.4+k3s1",
        &installer_unit(&["--default-runtime", "runc"]),
    );
    refused(
        &host,
        &[],
        &[
            "/etc/systemd/system/k3s.service:",
            "--default-runtime",
            "runc",
        ],
    );
    let (code, v) = check_json(&host, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["configured"], false);
    assert_eq!(v["effective"][0]["default_runtime"]["value"], "runc");
    assert_eq!(
        v["effective"][0]["default_runtime"]["source"]["kind"],
        "flag"
    );
}

#[test]
fn an_execstart_override_in_a_drop_in_is_what_k3s_runs() {
    let host = installer_host();
    host.write(
        "/etc/systemd/system/k3s.service.d/20-runtime.conf",
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s server --default-runtime=crun\n",
    );
    refused(
        &host,
        &[],
        &[
            "/etc/systemd/system/k3s.service.d/20-runtime.conf:3",
            "crun",
        ],
    );
    // A drop-in of the same name in /etc hides the one in /usr/lib.
    let host = installer_host();
    host.write(
        "/usr/lib/systemd/system/k3s.service.d/override.conf",
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s server --default-runtime=crun\n",
    )
    .write(
        "/etc/systemd/system/k3s.service.d/override.conf",
        "[Service]\nEnvironment=K3S_NODE_NAME=gpu1\n",
    );
    ok(&host, &["apply"]);
    let (code, v) = check_json(&host, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["effective"][0]["default_runtime"]["value"], "nvidia");
    assert_eq!(
        v["effective"][0]["default_runtime"]["source"]["file"],
        DROP_IN
    );
}

#[test]
fn check_fails_when_a_later_drop_in_takes_the_default_back() {
    let host = installer_host();
    configured(&host, &[]);
    // Someone adds a runtime override in /run (a generator, a transient drop-in).
    host.write(
        "/run/systemd/system/k3s.service.d/50-debug.conf",
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s server --default-runtime runc\n",
    );
    let out = run(&host, &["check"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("/run/systemd/system/k3s.service.d/50-debug.conf:3"),
        "{}",
        out.stdout
    );
}

#[test]
fn k3s_config_file_from_the_environment_file_gets_the_drop_in() {
    // K3S_CONFIG_FILE in the installer's env file, read through EnvironmentFile=.
    let host = installer_host();
    host.write(
        "/etc/systemd/system/k3s.service.env",
        "K3S_TOKEN=secret\nK3S_CONFIG_FILE='/etc/k3s/site.yaml'\n",
    )
    .write("/etc/k3s/site.yaml", "write-kubeconfig-mode: \"0644\"\n");
    let out = ok(&host, &["apply"]);
    assert!(
        host.exists("/etc/k3s/site.yaml.d/99-edgegpu-nvidia-runtime.yaml"),
        "{out}"
    );
    assert!(!host.exists(DROP_IN), "k3s does not read {DROP_IN}");
    assert!(out.contains("config file /etc/k3s/site.yaml"), "{out}");
    // Environment= and --config / -c name it too.
    for (unit, file) in [
        (
            fixture("units/k3s-installer-server.service").replace(
                "Type=notify\n",
                "Type=notify\nEnvironment=\"K3S_CONFIG_FILE=/opt/k3s/config.yaml\"\n",
            ),
            "/opt/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml",
        ),
        (
            installer_unit(&["--config", "/srv/k3s.yaml"]),
            "/srv/k3s.yaml.d/99-edgegpu-nvidia-runtime.yaml",
        ),
        (
            "[Service]\nExecStart=/usr/local/bin/k3s server -c=/srv/short.yaml\n".to_string(),
            "/srv/short.yaml.d/99-edgegpu-nvidia-runtime.yaml",
        ),
    ] {
        let host = k3s_host("v1.30.4+k3s1", &unit);
        configured(&host, &[]);
        assert!(host.exists(file), "{file}");
    }
}

#[test]
fn config_drop_ins_apply_in_k3s_order_with_appends() {
    let host = installer_host();
    // `key+:` appends; for a single-valued flag the last value wins.
    host.write(
        "/etc/rancher/k3s/config.yaml.d/zz-site.YML",
        "# site policy\ndefault-runtime+: [crun]\n",
    );
    refused(&host, &[], &["zz-site.YML:2", "crun"]);
    // A drop-in that sorts before ours is overridden by ours: fine.
    let host = installer_host();
    host.write(
        "/etc/rancher/k3s/config.yaml.d/10-site.yaml",
        "default-runtime: \"crun\"\n",
    );
    configured(&host, &[]);
}

#[test]
fn malformed_k3s_config_is_refused_with_its_line() {
    let host = installer_host();
    host.write(
        "/etc/rancher/k3s/config.yaml",
        "node-label:\n  - gpu=true\n default-runtime: nvidia\n",
    );
    let before = host.snapshot();
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr.contains("/etc/rancher/k3s/config.yaml:3:"),
        "{}",
        out.stderr
    );
    assert_eq!(before, host.snapshot());
}

#[test]
fn a_container_runtime_endpoint_to_the_system_containerd_configures_it() {
    let host = installer_host();
    host.write(
        "/etc/rancher/k3s/config.yaml",
        "container-runtime-endpoint: unix:///run/containerd/containerd.sock\n",
    )
    .write("/etc/containerd/config.toml", fixture("containerd/v2.toml"));
    let out = ok(&host, &["apply"]);
    assert!(
        out.contains("mode: containerd") && out.contains("/etc/rancher/k3s/config.yaml:1"),
        "{out}"
    );
    assert!(host
        .read("/etc/containerd/config.toml")
        .contains("default_runtime_name = \"nvidia\""));
    assert!(!host.exists(DROP_IN));
    assert_eq!(run(&host, &["check"]).code, 0);
    // A socket we do not know: refused, naming it.
    let host = installer_host();
    host.write(
        "/etc/rancher/k3s/config.yaml",
        "container-runtime-endpoint: /run/crio/crio.sock\n",
    );
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.contains("/run/crio/crio.sock")
            && out.stderr.contains("/etc/rancher/k3s/config.yaml:1"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_data_dir_moves_the_templates() {
    let host = k3s_host(
        "v1.27.6+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write("/etc/rancher/k3s/config.yaml", "data-dir: /data/k3s\n")
        .write(
            "/data/k3s/agent/etc/containerd/config.toml.tmpl",
            fixture("containerd/k3s-config-full.toml.tmpl"),
        );
    let out = ok(&host, &["--mode", "containerd", "apply"]);
    assert!(
        out.contains("/data/k3s/agent/etc/containerd/config.toml.tmpl"),
        "{out}"
    );
    assert!(host
        .read("/data/k3s/agent/etc/containerd/config.toml.tmpl")
        .contains("default_runtime_name = \"nvidia\""));
    assert!(!host.exists(TEMPLATE_V2));
}

#[test]
fn containerd_imports_that_own_the_cri_plugin_are_edited() {
    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "")
        .nvidia_runtime()
        .write(
            "/etc/containerd/config.toml",
            fixture("real-world/containerd-imports-main.toml"),
        )
        .write(
            "/etc/containerd/conf.d/10-cri.toml",
            fixture("real-world/containerd-imports-cri.toml"),
        );
    let out = ok(&host, &["apply"]);
    assert!(out.contains("replaces the earlier one"), "{out}");
    assert_eq!(
        host.read("/etc/containerd/config.toml"),
        fixture("real-world/containerd-imports-main.toml"),
        "the main file's CRI table is replaced by the import's: editing it would not count"
    );
    let cri = host.read("/etc/containerd/conf.d/10-cri.toml");
    assert!(cri.contains("default_runtime_name = \"nvidia\""), "{cri}");
    assert!(
        cri.contains("SystemdCgroup = true"),
        "options copied from runc:\n{cri}"
    );
    assert_eq!(run(&host, &["check"]).code, 0);
    // containerd itself agrees (every release: 1.x replaces, 2.x merges the tables):
    // the effective default is ours.
    let main = host.path("/etc/containerd/config.toml");
    let text = std::fs::read_to_string(&main).unwrap().replace(
        "/etc/containerd/conf.d",
        &host.path("/etc/containerd/conf.d").to_string_lossy(),
    );
    for (release, good, dump) in containerd_dumps(&text) {
        assert!(good, "containerd {release}: {dump}");
        assert!(
            dump.contains("default_runtime_name = \"nvidia\""),
            "containerd {release}: {dump}"
        );
    }
}

#[test]
fn the_nvidia_runtime_copies_the_options_of_the_actual_default_runtime() {
    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "")
        .nvidia_runtime()
        .write(
            "/etc/containerd/config.toml",
            fixture("real-world/nvidia-ctk-default-runtime.toml"),
        );
    ok(&host, &["apply"]);
    let new = host.read("/etc/containerd/config.toml");
    let table = new
        .split("runtimes.nvidia]")
        .nth(1)
        .unwrap_or_else(|| panic!("{new}"));
    assert!(
        table.contains("privileged_without_host_devices = false"),
        "{new}"
    );
    assert!(
        table.contains("SystemdCgroup = true"),
        "from 'default', not runc:\n{new}"
    );
    assert!(
        table.contains("BinaryName = \"/usr/bin/nvidia-container-runtime\""),
        "{new}"
    );
}

#[test]
fn a_runtime_outside_k3s_search_path_is_registered_in_a_template() {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.31.6+k3s1"))
        .write(UNIT, fixture("units/k3s-installer-server.service"))
        .executable("/opt/nvidia/bin/nvidia-container-runtime", "#!/bin/sh\n");
    let args = ["--runtime-path", "/opt/nvidia/bin/nvidia-container-runtime"];
    let out = ok(&host, &[args[0], args[1], "apply"]);
    assert!(out.contains("does not register runtime 'nvidia'"), "{out}");
    let t = host.read(TEMPLATE_V3);
    assert!(t.starts_with("{{ template \"base\" . }}\n"), "{t}");
    assert!(
        t.contains("BinaryName = \"/opt/nvidia/bin/nvidia-container-runtime\"")
            && t.contains("SystemdCgroup = {{ .SystemdCgroup }}"),
        "{t}"
    );
    assert!(host.read(DROP_IN).contains("default-runtime: nvidia"));
    assert_eq!(run(&host, &[args[0], args[1], "check"]).code, 0);
    // k3s finds nothing on its PATH, so its base emits no nvidia table: no duplicate.
    let data = common::K3sData {
        detected: &[],
        default_runtime: Some("nvidia"),
        systemd_cgroup: true,
    };
    if let Some(rendered) = common::render_k3s_template(&t, 3, &data) {
        let rendered = rendered.unwrap();
        for (release, good, dump) in containerd_dumps(&rendered) {
            assert!(good, "containerd {release}: {dump}\n{rendered}");
            if common::reads_cri_tables(&release, 3) {
                assert!(
                    dump.contains("default_runtime_name = \"nvidia\"")
                        && dump.contains(&format!(
                            "BinaryName = \"{}\"",
                            "/opt/nvidia/bin/nvidia-container-runtime"
                        )),
                    "containerd {release}: {dump}\n{rendered}"
                );
            }
        }
    }
    // A PATH set in the unit that does not hold the binary: the same.
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.31.6+k3s1"))
        .write(
            UNIT,
            fixture("units/k3s-installer-server.service").replace(
                "Type=notify\n",
                "Type=notify\nEnvironment=PATH=/usr/local/bin:/bin\n",
            ),
        )
        .nvidia_runtime();
    ok(&host, &["apply"]);
    assert!(host
        .read(TEMPLATE_V3)
        .contains("BinaryName = \"/usr/bin/nvidia-container-runtime\""));
}

#[test]
fn a_stale_toolkit_binary_that_k3s_would_register_is_named() {
    let host = installer_host();
    host.executable(
        "/usr/local/nvidia/toolkit/nvidia-container-runtime",
        "#!/bin/sh\n",
    );
    refused(
        &host,
        &[],
        &[
            "/usr/local/nvidia/toolkit/nvidia-container-runtime",
            "--runtime-path",
        ],
    );
}

#[test]
fn mode_containerd_says_why_the_system_config_is_not_edited() {
    let host = installer_host();
    host.write("/etc/containerd/config.toml", fixture("containerd/v2.toml"))
        .write("/etc/docker/daemon.json", "{}\n");
    let out = ok(&host, &["--mode", "containerd", "apply"]);
    assert!(
        out.contains(
            "not editing /etc/containerd/config.toml: k3s does not use the system containerd"
        ),
        "{out}"
    );
    assert_eq!(
        host.read("/etc/containerd/config.toml"),
        fixture("containerd/v2.toml")
    );
    // Auto picks what k3s uses and says why, whatever else is installed.
    let host = installer_host();
    host.write("/etc/containerd/config.toml", fixture("containerd/v2.toml"))
        .write("/etc/docker/daemon.json", "{}\n");
    let out = ok(&host, &["apply"]);
    assert!(out.contains("mode: k3s-default-runtime"), "{out}");
    assert!(
        out.contains("effective: k3s containerd (k3s.service)"),
        "{out}"
    );
}

#[test]
fn duplicate_keys_in_daemon_json_are_refused_with_their_line() {
    let host = NodeHost::new();
    host.nvidia_runtime().write(
        "/etc/docker/daemon.json",
        "{\n  \"default-runtime\": \"nvidia\",\n  \"log-driver\": \"json-file\",\n  \"default-runtime\": \"runc\"\n}\n",
    );
    let before = host.snapshot();
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.contains("daemon.json:4:")
            && out.stderr.contains("duplicate key \"default-runtime\""),
        "{}",
        out.stderr
    );
    assert_eq!(before, host.snapshot());
}

#[test]
fn docker_flags_from_the_unit_environment_are_seen() {
    // Debian's docker.service passes $DOCKER_OPTS from /etc/default/docker.
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write(
            "/lib/systemd/system/docker.service",
            fixture("real-world/debian-docker.service"),
        )
        .write(
            "/etc/default/docker",
            fixture("real-world/debian-default-docker"),
        )
        .write("/etc/docker/daemon.json", "{}\n");
    refused(
        &host,
        &[],
        &["/etc/default/docker:4", "--default-runtime", "runc"],
    );
    // --config-file moves daemon.json.
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write(
            "/lib/systemd/system/docker.service",
            fixture("real-world/debian-docker.service"),
        )
        .write(
            "/etc/default/docker",
            "DOCKER_OPTS=\"--config-file /etc/docker/site.json\"\n",
        )
        .write("/etc/docker/site.json", "{\"debug\": true}\n");
    ok(&host, &["apply"]);
    assert!(host
        .read("/etc/docker/site.json")
        .contains("\"default-runtime\": \"nvidia\""));
    assert!(!host.exists("/etc/docker/daemon.json"));
    assert_eq!(run(&host, &["check"]).code, 0);
}

#[test]
fn jetpacks_runtime_entry_by_bare_name_is_kept() {
    let host = NodeHost::new();
    host.nvidia_runtime().write(
        "/etc/docker/daemon.json",
        fixture("real-world/jetpack-daemon.json"),
    );
    ok(&host, &["apply"]);
    let v: serde_json::Value = serde_json::from_str(&host.read("/etc/docker/daemon.json")).unwrap();
    assert_eq!(v["runtimes"]["nvidia"]["path"], "nvidia-container-runtime");
    assert_eq!(v["default-runtime"], "nvidia");
    let (code, j) = check_json(&host, &[]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(
        j["effective"][0]["runtime_binary"]["value"],
        "/usr/bin/nvidia-container-runtime"
    );
}

#[test]
fn symlinked_configs_are_edited_at_a_persistent_target_only() {
    // A dangling link: refused, and nothing is created at its target.
    let host = NodeHost::new();
    host.nvidia_runtime()
        .symlink("/etc/docker/daemon.json", "/data/docker/daemon.json");
    refused(&host, &[], &["/data/docker/daemon.json", "does not exist"]);
    assert!(!host.exists("/data/docker/daemon.json"));
    // A link into a tmpfs regenerated at boot: refused.
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write("/run/docker/daemon.json", "{}\n")
        .symlink("/etc/docker/daemon.json", "/run/docker/daemon.json");
    refused(
        &host,
        &[],
        &["/run/docker/daemon.json", "regenerated at boot"],
    );
    // A directory link with an absolute target stays inside the root.
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write("/data/docker/daemon.json", "{\"debug\": true}\n")
        .symlink("/etc/docker", "/data/docker");
    ok(&host, &["apply"]);
    assert!(host
        .read("/data/docker/daemon.json")
        .contains("\"default-runtime\": \"nvidia\""));
}

#[test]
fn a_base_line_with_a_comment_is_still_the_base() {
    let host = k3s_host(
        "v1.32.2+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write(
        TEMPLATE_V2,
        fixture("real-world/k3s-base-comment.toml.tmpl"),
    );
    ok(&host, &["apply"]);
    assert_eq!(
        host.read(TEMPLATE_V2),
        fixture("real-world/k3s-base-comment.toml.tmpl"),
        "the base emits the nvidia runtime and the default table: nothing to add"
    );
    assert!(host.read(DROP_IN).contains("default-runtime: nvidia"));
}

#[test]
fn a_complete_template_looping_over_detected_runtimes_gets_no_second_table() {
    let host = k3s_host(
        "v1.27.6+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write(TEMPLATE_V2, fixture("real-world/k3s-stock-range.toml.tmpl"));
    ok(&host, &["--mode", "containerd", "apply"]);
    let t = host.read(TEMPLATE_V2);
    assert!(!t.contains("runtimes.nvidia]"), "{t}");
    assert!(t.contains("default_runtime_name = \"nvidia\""), "{t}");
    assert_eq!(run(&host, &["--mode", "containerd", "check"]).code, 0);
}

#[test]
fn a_table_inside_a_control_structure_is_never_edited_or_redeclared() {
    let host = k3s_host(
        "v1.27.6+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write(
        TEMPLATE_V2,
        fixture("real-world/k3s-stock-if-containerd.toml.tmpl"),
    );
    refused(
        &host,
        &["--mode", "containerd"],
        &["config.toml.tmpl:11", "control structure"],
    );
}

#[test]
fn a_template_taking_the_default_from_k3s_gets_k3s_setting() {
    let host = installer_host();
    host.write(
        TEMPLATE_V2,
        fixture("real-world/k3s-default-from-setting.toml.tmpl"),
    );
    ok(&host, &["apply"]);
    assert_eq!(
        host.read(TEMPLATE_V2),
        fixture("real-world/k3s-default-from-setting.toml.tmpl")
    );
    assert!(host.read(DROP_IN).contains("default-runtime: nvidia"));
    assert_eq!(run(&host, &["check"]).code, 0);
}

#[test]
fn a_template_drop_in_that_sets_another_default_is_refused() {
    let host = k3s_host(
        "v1.32.2+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write(TEMPLATE_V3, fixture("real-world/kata-imports-base.toml.tmpl"))
        .write(
            "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d/50-kata.toml",
            "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'kata'\n",
        );
    refused(
        &host,
        &[],
        &["config-v3.toml.d/50-kata.toml:3", "default runtime 'kata'"],
    );
}

/// The k3s installer's agent unit, k3s v1.30.4, the NVIDIA runtime.
fn installer_agent_host() -> NodeHost {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.30.4+k3s1"))
        .write(
            "/etc/systemd/system/k3s-agent.service",
            fixture("units/k3s-installer-agent.service"),
        )
        .nvidia_runtime();
    host
}

/// A complete version-3 template (no base line) whose default is runc.
const FULL_V3_RUNC: &str = "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = \"runc\"\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n";

#[test]
fn k3s_data_dir_from_the_environment_moves_the_templates() {
    // The installer copies every K3S_* variable into <unit>.env; --data-dir reads
    // K3S_DATA_DIR (k3s pkg/cli/cmds/agent.go, server.go).
    let host = installer_agent_host();
    host.write(
        "/etc/systemd/system/k3s-agent.service.env",
        "K3S_URL=https://server:6443\nK3S_DATA_DIR=/data/k3s\n",
    )
    .write(
        "/data/k3s/agent/etc/containerd/config-v3.toml.tmpl",
        FULL_V3_RUNC,
    );
    let c = run(&host, &["check"]);
    assert_eq!(c.code, 1, "{}", c.stdout);
    assert!(
        c.stdout
            .contains("/data/k3s/agent/etc/containerd/config-v3.toml.tmpl:4"),
        "the template k3s renders decides:\n{}",
        c.stdout
    );
    let out = configured(&host, &[]);
    assert!(out.contains("mode: containerd"), "{out}");
    let t = host.read("/data/k3s/agent/etc/containerd/config-v3.toml.tmpl");
    assert!(t.contains("default_runtime_name = \"nvidia\""), "{t}");
    assert!(!host.exists(TEMPLATE_V3));
    // A data dir on the command line or in a config file beats the variable.
    let host = installer_agent_host();
    host.write(
        "/etc/systemd/system/k3s-agent.service.env",
        "K3S_DATA_DIR=/data/k3s\n",
    )
    .write("/etc/rancher/k3s/config.yaml", "data-dir: /srv/k3s\n")
    .write(
        "/srv/k3s/agent/etc/containerd/config-v3.toml.tmpl",
        FULL_V3_RUNC,
    );
    configured(&host, &[]);
    assert!(host
        .read("/srv/k3s/agent/etc/containerd/config-v3.toml.tmpl")
        .contains("default_runtime_name = \"nvidia\""));
}

#[test]
fn yaml_1_1_booleans_in_k3s_config_turn_docker_on() {
    // k3s reads its config with gopkg.in/yaml.v2, which resolves these plain scalars
    // to true (k3s pkg/configfilearg/parser.go).
    for word in ["yes", "on", "Y", "True"] {
        let host = installer_host();
        host.write("/etc/docker/daemon.json", "{}\n")
            .executable("/usr/sbin/dockerd", "")
            .write("/etc/rancher/k3s/config.yaml", format!("docker: {word}\n"));
        let out = configured(&host, &[]);
        assert!(out.contains("mode: docker"), "docker: {word}\n{out}");
        assert!(
            out.contains("/etc/rancher/k3s/config.yaml:1"),
            "names where docker is turned on:\n{out}"
        );
        assert_eq!(
            host.read(UNIT),
            fixture("units/k3s-installer-server.service"),
            "k3s already uses docker: no --docker added"
        );
        assert!(host
            .read("/etc/docker/daemon.json")
            .contains("\"default-runtime\": \"nvidia\""));
    }
    // Quoted, it is the string "yes", which k3s's flag parser does not take for true.
    let host = installer_host();
    host.write("/etc/docker/daemon.json", "{}\n")
        .write("/etc/rancher/k3s/config.yaml", "docker: \"no\"\n");
    let out = ok(&host, &["apply"]);
    assert!(out.contains("mode: k3s-default-runtime"), "{out}");
}

#[test]
fn a_table_the_base_already_emits_is_a_blocker_for_apply_and_check() {
    let host = k3s_host(
        "v1.32.2+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write(
        TEMPLATE_V3,
        "{{ template \"base\" . }}\n[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dir = \"/opt/cni/bin\"\n  conf_dir = \"/etc/cni/net.d\"\n",
    );
    let out = refused(
        &host,
        &[],
        &[
            "config-v3.toml.tmpl:2",
            "plugins.\"io.containerd.cri.v1.runtime\".cni",
        ],
    );
    assert!(out.stderr.contains("declared twice"), "{}", out.stderr);
    let (code, v) = check_json(&host, &[]);
    assert_eq!(code, 1);
    assert!(
        v["blockers"][0]
            .as_str()
            .is_some_and(|b| b.contains("config-v3.toml.tmpl:2")),
        "{v}"
    );
}

#[test]
fn a_template_drop_in_that_overrides_the_default_is_refused() {
    // The base imports <template>.d/*.toml (k3s PR #13680): what a drop-in there sets
    // overrides what the template renders.
    let site = "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d/50-site.toml";
    let crun = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = \"crun\"\n";
    // With a base-only template.
    let host = k3s_host(
        "v1.32.2+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write(TEMPLATE_V3, "{{ template \"base\" . }}\n")
        .write(site, crun);
    refused(&host, &[], &["50-site.toml:3", "crun"]);
    // With no template at all (k3s's built-in one).
    let host = k3s_host(
        "v1.32.2+k3s1",
        &fixture("units/k3s-installer-server.service"),
    );
    host.write(site, crun);
    refused(&host, &[], &["50-site.toml:3", "crun"]);
}

#[test]
fn a_dockerd_flag_and_daemon_json_setting_the_same_default_are_refused() {
    // dockerd refuses a setting given both as a flag and in the file, equal values
    // included (moby daemon/config: "specified both as a flag and in the configuration
    // file").
    let json = "{\n  \"default-runtime\": \"nvidia\",\n  \"runtimes\": {\n    \"nvidia\": {\n      \"path\": \"/usr/bin/nvidia-container-runtime\",\n      \"runtimeArgs\": []\n    }\n  }\n}\n";
    let host = NodeHost::new();
    host.nvidia_runtime()
        .executable("/usr/bin/dockerd", "")
        .write(
            "/lib/systemd/system/docker.service",
            fixture("real-world/debian-docker.service"),
        )
        .write(
            "/etc/systemd/system/docker.service.d/nvidia.conf",
            "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd -H fd:// --default-runtime=nvidia\n",
        )
        .write("/etc/docker/daemon.json", json);
    refused(
        &host,
        &[],
        &[
            "/etc/systemd/system/docker.service.d/nvidia.conf:3 (flag --default-runtime)",
            "/etc/docker/daemon.json:2",
            "both as a flag and in the configuration file",
        ],
    );
    if let Some(tool) = real_tool("dockerd", "Debian package docker.io") {
        let (good, text) = common::dockerd_validate(&tool, json, &["--default-runtime=nvidia"]);
        assert!(!good, "dockerd itself refuses it:\n{text}");
        assert!(
            text.contains("as a flag and in the configuration file"),
            "{text}"
        );
    }
}

#[test]
fn a_template_edit_keeps_conditional_lines_in_their_table() {
    // The runtime is not on k3s's PATH, so it is declared in the template, after a
    // kata table whose last key is emitted by {{- if }} ... {{- end -}}.
    let host = NodeHost::new();
    let runtime = "/opt/nv/nvidia-container-runtime";
    host.k3s_binary(Some("v1.30.4+k3s1"))
        .write(UNIT, fixture("units/k3s-installer-server.service"))
        .executable(runtime, "#!/bin/sh\n")
        .write(
            TEMPLATE_V3,
            fixture("real-world/k3s-kata-snapshotter-if.toml.tmpl"),
        );
    configured(&host, &["--runtime-path", runtime]);
    let t = host.read(TEMPLATE_V3);
    assert!(
        t.starts_with(&fixture("real-world/k3s-kata-snapshotter-if.toml.tmpl")),
        "the template's own lines come first, unchanged:\n{t}"
    );
    let data = common::K3sData {
        detected: &[],
        default_runtime: Some("nvidia"),
        systemd_cgroup: true,
    };
    let Some(rendered) = common::render_k3s_template(&t, 3, &data) else {
        return;
    };
    let rendered = rendered.unwrap();
    let doc: toml_edit::DocumentMut = rendered
        .parse()
        .unwrap_or_else(|e| panic!("{e}\n{rendered}"));
    let runtimes = &doc["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"];
    assert_eq!(
        runtimes["kata"]["snapshotter"].as_str(),
        Some("overlayfs"),
        "kata keeps its snapshotter:\n{rendered}"
    );
    assert!(
        runtimes["nvidia"]["options"].get("snapshotter").is_none(),
        "{rendered}"
    );
    assert_eq!(
        runtimes["nvidia"]["options"]["BinaryName"].as_str(),
        Some(runtime),
        "{rendered}"
    );
    for (release, good, dump) in containerd_dumps(&rendered) {
        assert!(good, "containerd {release}: {dump}\n{rendered}");
    }
}

#[test]
fn a_symlinked_directory_on_the_way_to_a_new_file_is_followed() {
    // /var/lib/rancher or /etc/rancher moved to another disk (Jetson NVMe, read-only
    // root images): the new file goes where the link leads.
    let host = installer_host();
    std::fs::create_dir_all(host.path("/data/rancher-etc")).unwrap();
    host.symlink("/etc/rancher", "/data/rancher-etc");
    configured(&host, &[]);
    assert!(host
        .read("/data/rancher-etc/k3s/config.yaml.d/99-edgegpu-nvidia-runtime.yaml")
        .contains("default-runtime: nvidia"));
    assert!(host.is_symlink("/etc/rancher"));
    ok(&host, &["revert"]);
    assert!(host.is_symlink("/etc/rancher") && host.exists("/data/rancher-etc"));
    // The drop-in directory itself a link.
    let host = installer_host();
    std::fs::create_dir_all(host.path("/data/k3s.yaml.d")).unwrap();
    host.symlink("/etc/rancher/k3s/config.yaml.d", "/data/k3s.yaml.d");
    configured(&host, &[]);
    assert!(host.exists("/data/k3s.yaml.d/99-edgegpu-nvidia-runtime.yaml"));
    // A directory link whose target is missing: refused, naming the link, nothing made.
    let host = installer_host();
    host.symlink("/etc/rancher", "/data/rancher-etc");
    refused(
        &host,
        &[],
        &["/etc/rancher is a symlink to /data/rancher-etc, which does not exist"],
    );
    assert!(!host.exists("/data"));
    // A link into /run: the tmpfs is the reason given, even before its target exists.
    let host = NodeHost::new();
    host.nvidia_runtime()
        .symlink("/etc/docker/daemon.json", "/run/docker/daemon.json");
    refused(
        &host,
        &[],
        &["/run/docker/daemon.json", "regenerated at boot"],
    );
}

#[test]
fn single_quoted_strings_written_by_containerd_2_count_as_configured() {
    let text = "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'nvidia'\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n  runtime_type = 'io.containerd.runc.v2'\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\n  BinaryName = '/usr/bin/nvidia-container-runtime'\n";
    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "")
        .nvidia_runtime()
        .write("/etc/containerd/config.toml", text);
    let c = run(&host, &["check"]);
    assert_eq!(c.code, 0, "{}", c.stdout);
    let out = ok(&host, &["apply", "--dry-run"]);
    assert!(out.contains("already configured"), "{out}");
    assert_eq!(host.read("/etc/containerd/config.toml"), text);
}

#[test]
fn refusals_while_choosing_the_mode_are_check_blockers_in_json() {
    let host = installer_host();
    host.write(
        "/etc/rancher/k3s/config.yaml",
        "container-runtime-endpoint: unix:///run/crio/crio.sock\n",
    );
    let (code, v) = check_json(&host, &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["configured"], false);
    let b = v["blockers"][0].as_str().unwrap_or_default();
    assert!(
        b.contains("/run/crio/crio.sock") && b.contains("/etc/rancher/k3s/config.yaml:1"),
        "{v}"
    );
    let out = run(&host, &["check"]);
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("blocked: "), "{}", out.stdout);
    // A --mode that does not match the host.
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write("/etc/docker/daemon.json", "{}\n");
    let (code, v) = check_json(&host, &["--mode", "k3s-default-runtime"]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["blockers"][0]
            .as_str()
            .is_some_and(|b| b.contains("k3s is not installed")),
        "{v}"
    );
}

#[test]
fn k3s_reads_the_config_file_of_the_first_config_flag_only() {
    // k3s pkg/configfilearg: the first `--config`/`-c` (with or without `=`) names the
    // file; `-config` or `--c` do not.
    for (args, file) in [
        (
            vec!["--config", "/srv/a.yaml", "--config", "/srv/b.yaml"],
            "/srv/a.yaml.d/99-edgegpu-nvidia-runtime.yaml",
        ),
        (
            vec!["-c=/srv/a.yaml", "-c", "/srv/b.yaml"],
            "/srv/a.yaml.d/99-edgegpu-nvidia-runtime.yaml",
        ),
        (vec!["-config", "/srv/a.yaml"], DROP_IN),
        (vec!["--c=/srv/a.yaml"], DROP_IN),
    ] {
        let host = k3s_host("v1.30.4+k3s1", &installer_unit(&args));
        configured(&host, &[]);
        assert!(host.exists(file), "{args:?}: {file}");
    }
}

#[test]
fn a_nested_mapping_under_a_key_node_setup_does_not_read_is_ignored() {
    let host = installer_host();
    host.write(
        "/etc/rancher/k3s/config.yaml",
        "etcd-s3-config:\n  bucket: backups\n  region: eu\nnode-label:\n  - gpu=true\n",
    );
    configured(&host, &[]);
    // Under a key it reads, it is still refused with its line.
    let host = installer_host();
    host.write(
        "/etc/rancher/k3s/config.yaml",
        "default-runtime:\n  name: nvidia\n",
    );
    let out = run(&host, &["apply"]);
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(
        out.stderr.contains("/etc/rancher/k3s/config.yaml:2:"),
        "{}",
        out.stderr
    );
}

/// The cgroup driver pods use now is the default runtime's whatever its type: a default of
/// another type that names `SystemdCgroup` gives its driver to the nvidia runtime, over
/// runc's, or alone where there is no runc to copy (the kubelet's driver does not change with
/// the runtime).
#[test]
fn the_cgroup_driver_comes_from_the_default_whatever_its_type() {
    let cri = "[plugins.\"io.containerd.grpc.v1.cri\".containerd";
    let gvisor = format!(
        "{cri}.runtimes.gvisor]\n  runtime_type = \"io.containerd.runsc.v1\"\n{cri}.runtimes.gvisor.options]\n  SystemdCgroup = true\n  TypeUrl = \"io.containerd.runsc.v1.options\"\n"
    );
    let nvidia_options = |config: &str| -> String {
        let host = NodeHost::new();
        host.executable("/usr/bin/containerd", "")
            .nvidia_runtime()
            .write("/etc/containerd/config.toml", config);
        ok(&host, &["apply"]);
        let new = host.read("/etc/containerd/config.toml");
        new.split("runtimes.nvidia.options]")
            .nth(1)
            .unwrap_or_else(|| panic!("{new}"))
            .split("\n[")
            .next()
            .unwrap()
            .to_string()
    };
    // Over runc's (which says cgroupfs).
    let table = nvidia_options(&format!(
        "version = 2\n{cri}]\n  default_runtime_name = \"gvisor\"\n{gvisor}{cri}.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n{cri}.runtimes.runc.options]\n  SystemdCgroup = false\n  NoPivotRoot = true\n"
    ));
    assert!(
        table.contains("SystemdCgroup = true"),
        "the default's driver:\n{table}"
    );
    assert!(
        table.contains("NoPivotRoot = true"),
        "the rest from runc:\n{table}"
    );
    assert!(
        !table.contains("TypeUrl"),
        "nothing else from gVisor:\n{table}"
    );
    // No runc table at all: the driver alone.
    let table = nvidia_options(&format!(
        "version = 2\n{cri}]\n  default_runtime_name = \"gvisor\"\n{gvisor}"
    ));
    assert!(table.contains("SystemdCgroup = true"), "{table}");
    assert!(!table.contains("TypeUrl"), "{table}");
}

#[test]
fn the_nvidia_runtime_copies_runc_when_the_default_is_not_runc_type() {
    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "")
        .nvidia_runtime()
        .write(
            "/etc/containerd/config.toml",
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"kata\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata]\n  runtime_type = \"io.containerd.kata.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata.options]\n  ConfigPath = \"/opt/kata/configuration.toml\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n",
        );
    ok(&host, &["apply"]);
    let new = host.read("/etc/containerd/config.toml");
    let table = new
        .split("runtimes.nvidia.options]")
        .nth(1)
        .unwrap_or_else(|| panic!("{new}"));
    assert!(table.contains("SystemdCgroup = true"), "from runc:\n{new}");
    assert!(!table.contains("ConfigPath"), "nothing from kata:\n{new}");
}
