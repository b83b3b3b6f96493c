//! Against a running dockerd: what `apply` and `revert` tell the operator to run (reload or
//! restart) really leaves dockerd on the runtime asked for.
//!
//! dockerd's reload (SIGHUP, what `systemctl reload docker` sends) adds and changes
//! runtimes and the default runtime but never removes them (moby daemon/reload_unix.go),
//! so after `revert` a reload would leave the daemon on the nvidia runtime. Each scenario
//! starts Debian's dockerd (20.10; and Debian 13's 26 from `.tools/cdi-validators` when
//! scripts/setup.sh fetched it) as a private daemon, carries out the restart plan each
//! command prints, and asks the daemon's API (`GET /info`: `DefaultRuntime`, `Runtimes`,
//! what `docker info` shows) what it uses. A negative control sends SIGHUP alone after
//! revert and sees the nvidia runtime stay.
//!
//! The daemon touches nothing of the machine's: it runs in its own mount and network
//! namespaces (unshare), with a tmpfs on /run (so it never finds the machine's containerd
//! and starts its own), overlays on /etc, /opt and /var whose writes go to a tmpfs, the
//! test host's /etc/docker bound on /etc/docker (so it reads daemon.json where a real
//! dockerd does, without --config-file), and --data-root, --exec-root, --pidfile and its
//! socket in a temporary directory; no iptables, no bridge, no IP forwarding.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{ok, real_tool, REQUIRE_REAL_TOOLS};
use edgegpu_testkit::nodehost::NodeHost;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const DAEMON_JSON: &str = "/etc/docker/daemon.json";

/// The dockerd binaries to test with: Debian 12's (20.10) and, when fetched, Debian
/// 13's (26). `None` (after a skip line) when this machine cannot run them.
fn dockerds() -> Option<Vec<PathBuf>> {
    let required = std::env::var(REQUIRE_REAL_TOOLS).as_deref() == Ok("1");
    let skip = |why: &str| {
        if required {
            panic!("{why} ({REQUIRE_REAL_TOOLS}=1)");
        }
        eprintln!("SKIP real-tool check: {why}");
        None
    };
    if !nix::unistd::geteuid().is_root() {
        return skip("a private dockerd needs root (namespaces, mounts)");
    }
    for tool in ["unshare", "mount"] {
        real_tool(tool, "util-linux")?;
    }
    let mut found = vec![real_tool("dockerd", "docker.io")?];
    let newer = std::env::var_os("EDGEGPU_CDI_VALIDATORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/cdi-validators"))
        .join("dockerd");
    if newer.is_file() {
        found.push(newer);
    } else {
        eprintln!(
            "SKIP real-tool check: {} not found (scripts/setup.sh fetches it); testing Debian 12's dockerd only",
            newer.display()
        );
    }
    Some(found)
}

/// A dockerd of our own, reading `<host>/etc/docker/daemon.json` as its
/// /etc/docker/daemon.json.
struct PrivateDockerd {
    bin: PathBuf,
    etc_docker: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
    starts: usize,
}

impl PrivateDockerd {
    fn start(bin: &Path, host: &NodeHost) -> PrivateDockerd {
        let etc_docker = host.path("/etc/docker");
        std::fs::create_dir_all(&etc_docker).unwrap();
        let mut d = PrivateDockerd {
            bin: bin.to_path_buf(),
            etc_docker,
            dir: tempfile::tempdir().unwrap(),
            child: None,
            starts: 0,
        };
        d.launch();
        d
    }

    fn sock(&self) -> PathBuf {
        self.dir.path().join("docker.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("dockerd-{}.log", self.starts)))
            .unwrap_or_default()
    }

    fn launch(&mut self) {
        self.starts += 1;
        let dir = self.dir.path();
        let script = r#"set -e
mkdir -p "$T/ov"
mount -t tmpfs tmpfs "$T/ov"
for d in etc opt var; do
  mkdir -p "$T/ov/$d-upper" "$T/ov/$d-work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$T/ov/$d-upper,workdir=$T/ov/$d-work" "/$d"
done
mount -t tmpfs tmpfs /run
mkdir -p /etc/docker
mount --bind "$ETC_DOCKER" /etc/docker
exec "$DOCKERD" --data-root "$T/data" --exec-root "$T/exec" --pidfile "$T/dockerd.pid" \
  -H "unix://$T/docker.sock" --iptables=false --ip6tables=false --ip-forward=false \
  --bridge=none --storage-driver=vfs
"#;
        let log = std::fs::File::create(dir.join(format!("dockerd-{}.log", self.starts))).unwrap();
        let child = Command::new("unshare")
            .args([
                "--mount",
                "--net",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
            ])
            .arg(script)
            .env("T", dir)
            .env("ETC_DOCKER", &self.etc_docker)
            .env("DOCKERD", &self.bin)
            .env("HOME", dir)
            .env_remove("DOCKER_HOST")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run unshare");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if self.get("/_ping").is_some_and(|b| b == "OK") {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{} did not start ({status}) in a private mount and network namespace:\n{}",
                    self.bin.display(),
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not answer on its socket within 90 s:\n{}",
                self.bin.display(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().unwrap().id() as i32)
    }

    /// The body of `GET path` on the daemon's socket (HTTP/1.0: the daemon closes the
    /// connection after the body). `None` when the daemon does not answer.
    fn get(&self, path: &str) -> Option<String> {
        let mut s = UnixStream::connect(self.sock()).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").ok()?;
        let mut response = String::new();
        s.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.").then(|| body.to_string())
    }

    /// (DefaultRuntime, runtime names) from `GET /info`, as `docker info` shows them.
    fn runtimes(&self) -> (String, Vec<String>) {
        let body = self.get("/info").expect("GET /info");
        let info: serde_json::Value = serde_json::from_str(&body).unwrap();
        let default = info["DefaultRuntime"].as_str().unwrap().to_string();
        let names = info["Runtimes"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        (default, names)
    }

    /// `systemctl reload docker`: SIGHUP, then wait until dockerd logged the outcome
    /// (at its default log level, info).
    fn reload(&self) {
        let count = |log: &str| {
            log.lines()
                .filter(|l| l.contains("Got signal to reload configuration"))
                .count()
        };
        let done = |log: &str| {
            // The lines after the last reload request: success or the error.
            let tail = log
                .rsplit_once("Got signal to reload configuration")
                .map_or("", |(_, t)| t);
            [
                "Reloaded configuration",
                "unable to configure the Docker daemon",
                "Error reconfiguring the daemon",
                "validation failed",
            ]
            .iter()
            .any(|m| tail.contains(m))
        };
        let before = count(&self.log());
        kill(self.pid(), Signal::SIGHUP).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            if count(&log) > before && done(&log) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no reload in {}:\n{log}",
                self.dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `systemctl restart docker`: stop, then start with the same flags.
    fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Does what the `systemctl` lines of node-setup's output say for docker.service.
    fn carry_out(&mut self, output: &str) -> &'static str {
        let commands: Vec<&str> = output
            .lines()
            .filter_map(|l| l.strip_prefix("  systemctl "))
            .filter(|c| c.ends_with(" docker.service"))
            .collect();
        match commands.as_slice() {
            ["try-reload-or-restart docker.service"] => {
                self.reload();
                "reload"
            }
            ["try-restart docker.service"] => {
                self.restart();
                "restart"
            }
            other => panic!("unexpected docker commands {other:?} in:\n{output}"),
        }
    }
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn has_nvidia(d: &PrivateDockerd) -> bool {
    let (default, names) = d.runtimes();
    default == "nvidia" || names.iter().any(|n| n == "nvidia")
}

/// A host with the NVIDIA runtime and docker on `original` (`None`: docker installed, no
/// daemon.json yet), and a private dockerd started on it.
fn docker_on(bin: &Path, original: Option<&str>) -> (NodeHost, PrivateDockerd) {
    let host = NodeHost::new();
    host.nvidia_runtime();
    match original {
        Some(text) => {
            host.write(DAEMON_JSON, text);
        }
        None => {
            host.executable("/usr/bin/dockerd", "");
        }
    }
    let d = PrivateDockerd::start(bin, &host);
    (host, d)
}

/// One layout: the daemon starts on `original` (`None`: no daemon.json), apply and its
/// restart plan put it on nvidia, revert and its plan take nvidia away again. Returns
/// revert's plan ("reload" or "restart").
fn scenario(bin: &Path, original: Option<&str>, runc_default_after: &str) -> &'static str {
    let what = format!("{} with daemon.json {original:?}", bin.display());
    let (host, mut d) = docker_on(bin, original);
    assert!(!has_nvidia(&d), "{what}: {:?}", d.runtimes());

    let applied = ok(&host, &["--mode", "docker", "apply"]);
    assert_eq!(d.carry_out(&applied), "reload", "{what}: {applied}");
    let (default, names) = d.runtimes();
    assert_eq!(default, "nvidia", "{what}: after apply");
    assert!(names.iter().any(|n| n == "nvidia"), "{what}: {names:?}");

    let reverted = ok(&host, &["--mode", "docker", "revert"]);
    assert_eq!(host.exists(DAEMON_JSON), original.is_some());
    let plan = d.carry_out(&reverted);
    let (default, names) = d.runtimes();
    assert_eq!(
        default,
        runc_default_after,
        "{what}: revert's plan ({plan}) left the daemon on another default\n{reverted}\n{}",
        d.log()
    );
    assert!(
        !names.iter().any(|n| n == "nvidia"),
        "{what}: revert's plan ({plan}) left runtime nvidia registered: {names:?}\n{reverted}"
    );
    plan
}

/// Negative control: after revert, SIGHUP alone leaves a dockerd that started on
/// nvidia with runtime nvidia registered (so the test above can fail). Returns the
/// default runtime it keeps: with daemon.json gone, Docker 23+ falls back to its
/// built-in default (moby daemon/config, New: runc) while 20.10 keeps nvidia; with a
/// file that names no default, both keep nvidia.
fn sighup_alone_after_revert(bin: &Path, original: Option<&str>) -> String {
    let (host, mut d) = docker_on(bin, original);
    ok(&host, &["--mode", "docker", "apply"]);
    // A daemon that started on the applied file (a node configured long ago).
    d.restart();
    assert_eq!(d.runtimes().0, "nvidia");
    ok(&host, &["--mode", "docker", "revert"]);
    d.reload();
    let (default, names) = d.runtimes();
    assert!(
        names.iter().any(|n| n == "nvidia"),
        "{}: a reload after revert is expected to keep runtime nvidia (moby reloadPlatform): {names:?}",
        bin.display()
    );
    default
}

#[test]
fn revert_takes_the_nvidia_runtime_out_of_a_running_dockerd() {
    let Some(bins) = dockerds() else {
        return;
    };
    for bin in &bins {
        // No daemon.json before apply: revert removes the file, which a reload ignores
        // (or fails on, with --config-file): restart.
        assert_eq!(scenario(bin, None, "runc"), "restart");
        let default = sighup_alone_after_revert(bin, None);
        assert!(["nvidia", "runc"].contains(&default.as_str()), "{default}");
        // daemon.json without runtimes or a default: a reload keeps both. (Not a
        // log-level: reload() reads dockerd's info lines.)
        let plain = "{\n    \"log-driver\": \"json-file\",\n    \"log-opts\": {\n        \"max-size\": \"10m\",\n        \"max-file\": \"3\"\n    }\n}\n";
        assert_eq!(scenario(bin, Some(plain), "runc"), "restart");
        assert_eq!(sighup_alone_after_revert(bin, Some(plain)), "nvidia");
        // The original names its own runtimes and default: a reload replaces both, and
        // revert keeps the cheaper reload.
        let own = "{\n  \"runtimes\": {\n    \"crun\": {\n      \"path\": \"/usr/bin/crun\"\n    }\n  },\n  \"default-runtime\": \"crun\"\n}\n";
        assert_eq!(scenario(bin, Some(own), "crun"), "reload");
    }
}
