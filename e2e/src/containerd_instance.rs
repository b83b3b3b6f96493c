//! A private containerd: one of three Debian releases, on a config that the real
//! `edgegpu-node-setup apply` wrote over a node-like base config, started in its own mount
//! namespace (tmpfs on /opt, where containerd's opt plugin would otherwise write, and on /run,
//! where the shims' sockets, fifos and NRI's socket would go) with its root, state, sockets and
//! runc's state under a temporary directory. Nothing of the machine's services is
//! touched; [`Containerd`]'s drop kills containerd, its shims and their containers, then
//! removes the directory.

use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The containerd releases the test runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Debian 12's 1.6 (installed in /usr/bin): no CDI.
    Debian12,
    /// Debian 13's 1.7 (.tools/cdi-validators).
    Debian13,
    /// Debian sid's 2.1 (.tools/containerd-sid).
    Sid,
}

impl Release {
    pub const ALL: [Release; 3] = [Release::Debian12, Release::Debian13, Release::Sid];

    /// The folder holding containerd, containerd-shim-runc-v2 and ctr of this release.
    pub fn bin_dir(self) -> PathBuf {
        match self {
            Release::Debian12 => PathBuf::from("/usr/bin"),
            Release::Debian13 => crate::workspace_root().join(".tools/cdi-validators"),
            Release::Sid => crate::workspace_root().join(".tools/containerd-sid"),
        }
    }

    pub fn has_cdi(self) -> bool {
        self != Release::Debian12
    }

    /// Missing binaries (containerd, its shim, ctr, runc), if any.
    pub fn missing(self) -> Vec<PathBuf> {
        let mut want: Vec<PathBuf> = ["containerd", "containerd-shim-runc-v2", "ctr"]
            .iter()
            .map(|b| self.bin_dir().join(b))
            .collect();
        want.push(PathBuf::from("/usr/sbin/runc"));
        want.into_iter().filter(|p| !p.exists()).collect()
    }
}

/// How node-setup edits the base config.
#[derive(Clone, Debug)]
pub enum Setup {
    /// The unedited base config (runc): the negative control.
    BaseOnly,
    /// `apply --mode containerd --runtime-path <standin>`: the stand-in NVIDIA runtime as default.
    Runtime(PathBuf),
    /// `apply --mode containerd --cdi`.
    Cdi,
}

pub struct Containerd {
    pub release: Release,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Containerd {
    pub fn host_root(&self) -> PathBuf {
        self.dir.path().join("host")
    }
    pub fn address(&self) -> PathBuf {
        self.dir.path().join("c.sock")
    }
    pub fn config_path(&self) -> PathBuf {
        self.host_root().join("etc/containerd/config.toml")
    }
    /// The pods' cgroup parent (cgroupfs driver): `/edgegpu-e2e-<this instance's directory>`.
    pub fn cgroup_parent(&self) -> String {
        format!(
            "/{}",
            self.dir.path().file_name().unwrap().to_string_lossy()
        )
    }
    pub fn log_dir(&self) -> PathBuf {
        self.dir.path().join("pod-logs")
    }
    /// Where CDI specs are read from (the host root's /var/run/cdi, made absolute).
    pub fn cdi_dir(&self) -> PathBuf {
        self.host_root().join("var/run/cdi")
    }

    /// Writes the base config, runs node-setup over it, starts containerd and imports `images`
    /// into the k8s.io namespace.
    pub fn start(
        release: Release,
        setup: &Setup,
        node_setup: &Path,
        images: &[&Path],
    ) -> Result<Containerd> {
        let missing = release.missing();
        ensure!(
            missing.is_empty(),
            "{release:?}: missing {missing:?} (run scripts/setup.sh)"
        );
        let dir = tempfile::Builder::new().prefix("edgegpu-e2e-").tempdir()?;
        let mut me = Containerd {
            release,
            dir,
            child: None,
        };
        std::fs::create_dir_all(me.config_path().parent().unwrap())?;
        std::fs::create_dir_all(me.log_dir())?;
        std::fs::create_dir_all(me.cdi_dir())?;
        std::fs::write(me.config_path(), me.base_config())?;
        match setup {
            Setup::BaseOnly => {}
            Setup::Runtime(standin) => me.node_setup(
                node_setup,
                &[
                    "--runtime-path",
                    &standin.display().to_string(),
                    "--force",
                    "apply",
                ],
            )?,
            Setup::Cdi => me.node_setup(node_setup, &["--cdi", "apply"])?,
        }
        if let Setup::Cdi = setup {
            // node-setup relies on containerd's default spec dirs (/etc/cdi, /var/run/cdi of the
            // booted host); this containerd runs on the real root, so it reads the test's host
            // root's /var/run/cdi instead (created first: containerd watches it from start).
            let cfg = std::fs::read_to_string(me.config_path())?;
            ensure!(
                cfg.contains("enable_cdi = true"),
                "node-setup did not enable CDI:\n{cfg}"
            );
            let dir = me.cdi_dir().display().to_string();
            let cfg = cfg
                .replace("\"/var/run/cdi\"", &format!("{dir:?}"))
                .replacen(
                    "enable_cdi = true",
                    &format!("enable_cdi = true\n  cdi_spec_dirs = [{dir:?}]"),
                    1,
                );
            std::fs::write(me.config_path(), cfg)?;
        }
        crate::vlog!(
            "--- {release:?} config ({setup:?}):\n{}",
            std::fs::read_to_string(me.config_path())?
        );
        me.spawn()?;
        for image in images {
            me.import(image)?;
        }
        Ok(me)
    }

    /// A node's config, private to this instance: root, state, sockets and runc's state
    /// (`Root`) under the temporary directory; `restrict_oom_score_adj` because CI containers
    /// may lack CAP_SYS_RESOURCE, which the sandbox's oom_score_adj of -998 needs.
    fn base_config(&self) -> String {
        let d = self.dir.path().display();
        format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/c.sock"

[ttrpc]
  address = "{d}/c.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
"#,
            sandbox = crate::sandbox_image::SANDBOX_IMAGE
        )
    }

    fn node_setup(&self, bin: &Path, args: &[&str]) -> Result<()> {
        let out = Command::new(bin)
            .arg("--root")
            .arg(self.host_root())
            .args(["--mode", "containerd", "--no-restart"])
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .context("edgegpu-node-setup")?;
        crate::vlog!(
            "node-setup {args:?}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.success(), "edgegpu-node-setup {args:?} failed");
        Ok(())
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = self.release.bin_dir();
        let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display());
        let log = std::fs::File::create(self.dir.path().join("containerd.log"))?;
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg("mount -t tmpfs tmpfs /opt && mount -t tmpfs tmpfs /run && exec \"$0\" --config \"$1\"")
            .arg(bin.join("containerd"))
            .arg(self.config_path())
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("unshare containerd")?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.address().exists() {
            if let Some(st) = self.child.as_mut().unwrap().try_wait()? {
                bail!("containerd exited ({st}): {}", self.log());
            }
            ensure!(
                Instant::now() < deadline,
                "containerd did not listen in 30 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    fn import(&self, archive: &Path) -> Result<()> {
        let out = Command::new(self.release.bin_dir().join("ctr"))
            .arg("--address")
            .arg(self.address())
            .args(["-n", "k8s.io", "images", "import", "--all-platforms"])
            .arg(archive)
            .output()?;
        ensure!(
            out.status.success(),
            "ctr import {}: {}{}",
            archive.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }
}

/// Every process whose command line names `needle`, and all their descendants.
fn processes_naming(needle: &str) -> Vec<i32> {
    let mut parent: Vec<(i32, i32)> = Vec::new();
    let mut roots = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) {
                roots.push(pid);
            }
        }
        if let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) {
            if let Some(ppid) = stat
                .rsplit(") ")
                .next()
                .and_then(|s| s.split(' ').nth(1))
                .and_then(|p| p.parse().ok())
            {
                parent.push((pid, ppid));
            }
        }
    }
    let mut all = roots.clone();
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        for &(c, pp) in &parent {
            if pp == p && !all.contains(&c) {
                all.push(c);
            }
        }
        i += 1;
    }
    all
}

impl Drop for Containerd {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The shims (started with `-address <our socket>`) and the containers under them.
        let needle = self.dir.path().display().to_string();
        for _ in 0..3 {
            let pids = processes_naming(&needle);
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // The pods' cgroups (containerd removes the containers' own when pods are removed).
        let parent = self.cgroup_parent();
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = hierarchy.path().join(parent.trim_start_matches('/'));
            if let Ok(children) = std::fs::read_dir(&dir) {
                for child in children.flatten().filter(|c| c.path().is_dir()) {
                    let _ = std::fs::remove_dir(child.path());
                }
                let _ = std::fs::remove_dir(&dir);
            }
        }
    }
}
