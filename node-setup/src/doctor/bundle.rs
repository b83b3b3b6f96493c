//! `doctor --bundle FILE`: one tar.gz to attach to an issue. It holds the findings (text and
//! JSON), every host file they came from and the configuration files a support question
//! needs next, and, on the running system only, the recent logs of the services involved.
//! Every text is redacted ([`super::redact`]) before it is packed; sizes are bounded; what was
//! collected, cut or left out is listed in the bundle's `MANIFEST.txt` (docs/troubleshooting.md
//! lists it all).

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use edgegpu_host::root::HostRoot;

use super::finding::Report;
use super::redact::redact;
use super::render;

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
    /// Adds a text entry, redacted and bounded.
    fn add_text(&mut self, name: &str, text: &str) -> std::io::Result<()> {
        let (mut text, secrets) = redact(text);
        if text.len() > MAX_FILE_BYTES {
            let mut cut = MAX_FILE_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            // Keep the end: the newest lines of a log are the ones that matter.
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

/// Reads a host file for the bundle: a regular file (no link followed at its last
/// component, no FIFO or device opened), at most [`MAX_FILE_BYTES`] + 1 bytes.
fn read_host_file(host: &HostRoot, host_path: &str) -> Result<Option<Vec<u8>>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(resolved) = host.resolve(host_path) else {
        return Ok(None);
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(&resolved)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        _ => return Ok(None),
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(Some(bytes))
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

/// The host files to pack: those read, those the findings name (a directory: its files),
/// and [`EXTRA_FILES`] / [`EXTRA_DIRS`]; sorted, each once.
fn files_to_pack(host: &HostRoot, report: &Report) -> Vec<String> {
    let mut files: Vec<String> = report.files_read.clone();
    let mut dirs: Vec<String> = EXTRA_DIRS.iter().map(|d| d.to_string()).collect();
    files.extend(EXTRA_FILES.iter().map(|f| f.to_string()));
    for f in &report.findings {
        for s in f.sources.iter().filter(|s| s.starts_with('/')) {
            if host.is_dir(s) {
                dirs.push(s.clone());
            } else {
                files.push(s.clone());
            }
        }
    }
    for d in dirs {
        let mut listed = host.list_dir(&d, "").unwrap_or_default();
        listed.retain(|f| !host.is_dir(f));
        listed.truncate(MAX_FILES_PER_DIR);
        files.extend(listed);
    }
    files.sort();
    files.dedup();
    files
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
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
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
        for f in files_to_pack(host, report) {
            match read_host_file(host, &f) {
                Ok(Some(bytes)) => match String::from_utf8(bytes) {
                    Ok(text) => b.add_text(&format!("files{f}"), &text)?,
                    // Device-tree strings are NUL-separated text.
                    Err(e) if !e.as_bytes().iter().any(|c| *c > 0x7e && *c != 0) => {
                        let text = String::from_utf8_lossy(e.as_bytes()).replace('\0', "\n");
                        b.add_text(&format!("files{f}"), &text)?
                    }
                    Err(_) => b.packed.notes.push(format!("{f}: binary, left out")),
                },
                Ok(None) => {}
                Err(e) => b.packed.notes.push(format!("{f}: cannot read: {e}")),
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
