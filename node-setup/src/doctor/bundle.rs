//! `doctor --bundle FILE`: one tar.gz to attach to an issue. It holds the findings (text and
//! JSON), every host file they came from and the configuration files a support question
//! needs next, and, on the running system only, the recent logs of the services involved.
//! Every text is redacted ([`super::redact`]) before it is packed; sizes are bounded; what was
//! collected, cut or left out is listed in the bundle's `MANIFEST.txt` (docs/troubleshooting.md
//! lists it all).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use edgegpu_host::root::HostRoot;

use super::finding::Report;
use super::redact::redact;
use super::render;
use super::safe_read::Bounded;

/// Most bytes kept of one file or command output (the rest is cut, and said so).
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// Most bytes in the whole bundle before compression.
pub const MAX_TOTAL_BYTES: usize = 32 << 20;
/// Most files taken from one directory a finding names.
const MAX_FILES_PER_DIR: usize = 64;
/// How long one command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

/// Files collected besides those the findings name: what the next question about a node
/// usually needs (each only where it exists).
pub const EXTRA_FILES: &[&str] = &[
    "/etc/os-release",
    "/etc/nv_tegra_release",
    "/proc/driver/nvidia/version",
    "/proc/device-tree/model",
    "/etc/rancher/k3s/config.yaml",
    "/etc/rancher/k3s/registries.yaml",
    "/etc/systemd/system/k3s.service",
    "/etc/systemd/system/k3s.service.env",
    "/etc/systemd/system/k3s-agent.service",
    "/etc/systemd/system/k3s-agent.service.env",
    "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
    "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
    "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl",
    "/etc/containerd/config.toml",
    "/etc/docker/daemon.json",
    "/etc/nvidia-container-runtime/config.toml",
    "/var/lib/edgegpu/node-setup/manifest.json",
    "/etc/nvpmodel.conf",
    "/var/lib/nvpmodel/status",
];

/// Directories whose files are collected (bounded): k3s's config drop-ins, the CDI specs,
/// L4T's container lists.
pub const EXTRA_DIRS: &[&str] = &[
    "/etc/rancher/k3s/config.yaml.d",
    "/etc/cdi",
    "/var/run/cdi",
    "/etc/nvidia-container-runtime/host-files-for-container.d",
    "/etc/containerd/conf.d",
];

/// Commands run on the running system only (`--root /`), each with a time limit.
pub const COMMANDS: &[(&str, &[&str])] = &[
    ("uname", &["uname", "-a"]),
    (
        "journal",
        &[
            "journalctl",
            "--no-pager",
            "-n",
            "3000",
            "--since",
            "-2h",
            "-u",
            "k3s",
            "-u",
            "k3s-agent",
            "-u",
            "containerd",
            "-u",
            "docker",
            "-u",
            "edgegpu-*",
        ],
    ),
    (
        "systemctl-status",
        &[
            "systemctl",
            "status",
            "--no-pager",
            "--lines",
            "0",
            "k3s",
            "k3s-agent",
            "containerd",
            "docker",
            "edgegpu-*",
        ],
    ),
    ("dmesg", &["dmesg", "--ctime"]),
    ("nvidia-smi", &["nvidia-smi", "-q"]),
    ("nvpmodel", &["nvpmodel", "-q"]),
];

/// What went into a bundle.
#[derive(Debug, Default)]
pub struct Packed {
    /// Paths inside the archive, with their size and how many secrets were redacted.
    pub entries: Vec<(String, usize, usize)>,
    /// What was cut or left out, and why.
    pub notes: Vec<String>,
}

struct Builder<W: Write> {
    tar: tar::Builder<W>,
    prefix: String,
    total: usize,
    packed: Packed,
}

impl<W: Write> Builder<W> {
    /// Adds a text entry, redacted and bounded (a longer one keeps its end: the newest lines
    /// of a log are the ones that matter).
    fn add_text(&mut self, name: &str, text: &str) -> std::io::Result<()> {
        let (mut text, secrets) = redact(text);
        if text.len() > MAX_FILE_BYTES {
            let mut cut = MAX_FILE_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let start = text.len() - cut;
            let start = (start..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(start);
            self.packed.notes.push(format!(
                "{name}: cut to its last {cut} bytes (of {})",
                text.len()
            ));
            text = text[start..].to_string();
        }
        if self.total + text.len() > MAX_TOTAL_BYTES {
            self.packed.notes.push(format!(
                "{name}: left out, the bundle reached {MAX_TOTAL_BYTES} bytes"
            ));
            return Ok(());
        }
        self.total += text.len();
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        let path = format!("{}/{name}", self.prefix);
        self.tar.append_data(&mut header, &path, text.as_bytes())?;
        self.packed
            .entries
            .push((name.to_string(), text.len(), secrets));
        Ok(())
    }
}

/// Whether a link at the last component of `host_path` may be followed: system
/// configuration only root writes (L4T's `/etc/nvpmodel.conf` is a link), not the folders
/// pods reach through hostPath mounts (`/etc/cdi`, `/etc/kubernetes`, `/var/...`, `/run`).
fn may_follow_link(host_path: &str) -> bool {
    ["/etc/", "/proc/", "/sys/", "/usr/", "/lib/"]
        .iter()
        .any(|p| host_path.starts_with(p))
        && !["/etc/cdi/", "/etc/kubernetes/"]
            .iter()
            .any(|p| host_path.starts_with(p))
}

/// Reads a host file for the bundle through [`super::safe_read`]: a regular file only, a link
/// at its last component followed only where [`may_follow_link`], the first
/// [`MAX_FILE_BYTES`]. `Ok(None)`: nothing to pack there.
fn read_host_file(host: &HostRoot, host_path: &str) -> Result<Option<Bounded>, String> {
    let path = super::safe_read::on_disk(host, host_path);
    match super::safe_read::read(&path, MAX_FILE_BYTES as u64, may_follow_link(host_path)) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `argv` with a time limit; its stdout and stderr together.
fn run_command(argv: &[&str]) -> String {
    match super::command::run(argv, COMMAND_TIMEOUT, 4 * MAX_FILE_BYTES as u64) {
        Err(e) => format!("$ {}\ncannot run: {e}\n", argv.join(" ")),
        Ok(ran) => {
            let status = match ran.status {
                Some(s) => format!(
                    "exit status {}",
                    s.code().map_or("signal".into(), |c| c.to_string())
                ),
                None => format!("killed after {} s", COMMAND_TIMEOUT.as_secs()),
            };
            format!(
                "$ {}\n{}{}\n[{status}]\n",
                argv.join(" "),
                ran.stdout,
                ran.stderr
            )
        }
    }
}

/// The host files to pack: those read, those the findings name, and [`EXTRA_FILES`] and the
/// files of [`EXTRA_DIRS`] (at most [`MAX_FILES_PER_DIR`] each); sorted, each once. Also what
/// was left out of a folder.
fn files_to_pack(host: &HostRoot, report: &Report) -> (Vec<String>, Vec<String>) {
    let mut files: Vec<String> = report.files_read.clone();
    let mut left_out = Vec::new();
    files.extend(EXTRA_FILES.iter().map(|f| f.to_string()));
    for f in &report.findings {
        files.extend(f.sources.iter().filter(|s| s.starts_with('/')).cloned());
    }
    for d in EXTRA_DIRS {
        let mut listed = host.list_dir(d, "").unwrap_or_default();
        listed.retain(|f| !host.is_dir(f));
        if listed.len() > MAX_FILES_PER_DIR {
            left_out.push(format!(
                "{d}: {} of its {} files left out (at most {MAX_FILES_PER_DIR} per folder)",
                listed.len() - MAX_FILES_PER_DIR,
                listed.len()
            ));
            listed.truncate(MAX_FILES_PER_DIR);
        }
        files.extend(listed);
    }
    files.retain(|f| !host.is_dir(f));
    files.sort();
    files.dedup();
    (files, left_out)
}

/// Writes the bundle to `path` (atomically: a failed run leaves no half archive).
pub fn write(host: &HostRoot, report: &Report, path: &Path) -> Result<Packed, String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "edgegpu-doctor.tar.gz".into());
    let prefix = name
        .trim_end_matches(".tgz")
        .trim_end_matches(".gz")
        .trim_end_matches(".tar")
        .to_string();
    let tmp = path.with_file_name(format!(".{name}.edgegpu-tmp.{}", std::process::id()));
    let result = (|| -> std::io::Result<Packed> {
        // Root-only files and the journal go in: readable by its owner only.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let mut b = Builder {
            tar: tar::Builder::new(gz),
            prefix,
            total: 0,
            packed: Packed::default(),
        };
        let mut text = Vec::new();
        render::text(report, true, &mut text);
        b.add_text("findings.txt", &String::from_utf8_lossy(&text))?;
        b.add_text("findings.json", &render::json_string(report))?;
        let (files, left_out) = files_to_pack(host, report);
        b.packed.notes.extend(left_out);
        for f in files {
            match read_host_file(host, &f) {
                Ok(Some(read)) => {
                    if read.cut {
                        b.packed
                            .notes
                            .push(format!("files{f}: only its first {MAX_FILE_BYTES} bytes"));
                    }
                    // A file cut inside a character is still text.
                    let text = String::from_utf8_lossy(&read.bytes);
                    if text
                        .chars()
                        .any(|c| c.is_control() && !"\n\t\r\0".contains(c))
                    {
                        b.packed.notes.push(format!("{f}: binary, left out"));
                    } else {
                        // Device-tree strings are NUL-separated text.
                        b.add_text(&format!("files{f}"), &text.replace('\0', "\n"))?
                    }
                }
                Ok(None) => {}
                Err(e) => b.packed.notes.push(format!("{f}: not packed: {e}")),
            }
        }
        if host.is_live_system() {
            for (name, argv) in COMMANDS {
                let out = run_command(argv);
                b.add_text(&format!("commands/{name}.txt"), &out)?;
            }
        } else {
            b.packed.notes.push(format!(
                "no command run: --root {} is not the running system",
                host.root().display()
            ));
        }
        let mut manifest = String::from(
            "edgegpu-node-setup doctor --bundle: what this archive holds.\n\
             Secrets are replaced by <redacted> (values of token, password, secret, credential,\n\
             auth and private keys and flags; k3s tokens, JWTs, bearer tokens, PEM private keys).\n\n",
        );
        for (entry, size, secrets) in &b.packed.entries {
            manifest.push_str(&format!("{entry}\t{size} bytes\t{secrets} redacted\n"));
        }
        for note in &b.packed.notes {
            manifest.push_str(&format!("note: {note}\n"));
        }
        b.add_text("MANIFEST.txt", &manifest)?;
        let gz = b.tar.into_inner()?;
        let file = gz.finish()?;
        file.sync_all()?;
        Ok(b.packed)
    })();
    match result {
        Ok(packed) => {
            std::fs::rename(&tmp, path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(packed)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(format!("cannot write {}: {e}", path.display()))
        }
    }
}
