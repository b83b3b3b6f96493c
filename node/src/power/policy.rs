//! Applying a wanted power mode with the host's own tools: `nvpmodel -m <id>` (and
//! `jetson_clocks` when asked), then reading back what is in force (docs/power.md, "Policy").
//!
//! Never forced: `nvpmodel -m` asks on stdin to confirm a reboot when L4T says the change
//! needs one. The tool runs with stdin on `/dev/null`, so no answer is ever given; the mode
//! still in force is read back and the change is reported. Where the operator allows a
//! reboot outside edgegpu, [`request_reboot`] leaves the reboot-required sentinel for their
//! tooling (kured and the like), once: nothing here reboots.
//!
//! In a container the tools run chrooted into the host root (only the child: the process
//! itself keeps its service-account files), so they find the host's configuration, libraries
//! and sysfs as on the host.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use edgegpu_host::root::HostRoot;

use super::{PowerFacts, PowerMode, PowerModes};

/// Where L4T installs `nvpmodel`, first found wins.
pub const NVPMODEL_PATHS: [&str; 3] = ["/usr/sbin/nvpmodel", "/usr/bin/nvpmodel", "/sbin/nvpmodel"];
/// Where L4T installs `jetson_clocks`.
pub const JETSON_CLOCKS_PATHS: [&str; 2] = ["/usr/bin/jetson_clocks", "/usr/sbin/jetson_clocks"];
/// Where the policy keeps the clocks `jetson_clocks --store` saved before it pinned them (a
/// host path), so that it can restore exactly those.
pub const JETSON_CLOCKS_STORE: &str = "/var/lib/edgegpu/jetson_clocks.conf";
/// The most of a tool's output kept for a report.
const OUTPUT_BYTES: usize = 16 * 1024;

/// A mode as an operator names it: its id, or its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModeRequest {
    Id(u32),
    Name(String),
}

impl std::fmt::Display for ModeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModeRequest::Id(id) => write!(f, "{id}"),
            ModeRequest::Name(name) => f.write_str(name),
        }
    }
}

impl std::str::FromStr for ModeRequest {
    type Err = PolicyError;

    /// A number is an id; anything else a name of letters, digits, `_`, `-` and `.` (what
    /// nvpmodel configurations use; a label value can carry it).
    fn from_str(text: &str) -> Result<ModeRequest, PolicyError> {
        let text = text.trim();
        if let Ok(id) = text.parse() {
            return Ok(ModeRequest::Id(id));
        }
        let fits = !text.is_empty()
            && text.len() <= 63
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if fits {
            Ok(ModeRequest::Name(text.to_string()))
        } else {
            Err(PolicyError::NotAMode(text.to_string()))
        }
    }
}

/// Why a wanted mode cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "`{0}` is not a power mode: give a mode's id or its name (letters, digits, '_', '-', '.')"
    )]
    NotAMode(String),
    #[error("{key}: `{value}` is neither true nor false")]
    NotABoolean { key: String, value: String },
    #[error(
        "this board has no nvpmodel configuration (/etc/nvpmodel.conf): no power mode can be set"
    )]
    NoConfiguration,
    #[error("the board's nvpmodel configuration cannot be read: {0}")]
    BrokenConfiguration(String),
    #[error("this board has no power mode `{wanted}`; its modes: {modes}")]
    UnknownMode { wanted: String, modes: String },
    #[error(
        "power mode `{wanted}` is ambiguous on this board: it matches {matches}; give the exact \
         name or the id (its modes: {modes})"
    )]
    Ambiguous {
        wanted: String,
        matches: String,
        modes: String,
    },
}

/// The board's mode `wanted` names: an id, the exact name, or the one name equal to it
/// ignoring case. Anything else is an error naming the board's modes.
pub fn resolve<'m>(
    facts: &'m PowerFacts,
    wanted: &ModeRequest,
) -> Result<&'m PowerMode, PolicyError> {
    let modes: &PowerModes = match &facts.modes {
        None => return Err(PolicyError::NoConfiguration),
        Some(Err(e)) => return Err(PolicyError::BrokenConfiguration(e.clone())),
        Some(Ok(modes)) => modes,
    };
    let unknown = || PolicyError::UnknownMode {
        wanted: wanted.to_string(),
        modes: modes.names(),
    };
    match wanted {
        ModeRequest::Id(id) => modes.by_id(*id).ok_or_else(unknown),
        ModeRequest::Name(name) => {
            if let Some(exact) = modes.modes.iter().find(|m| &m.name == name) {
                return Ok(exact);
            }
            let alike: Vec<&PowerMode> = modes
                .modes
                .iter()
                .filter(|m| m.name.eq_ignore_ascii_case(name))
                .collect();
            match alike[..] {
                [one] => Ok(one),
                [] => Err(unknown()),
                _ => Err(PolicyError::Ambiguous {
                    wanted: name.clone(),
                    matches: alike
                        .iter()
                        .map(|m| format!("{} ({})", m.name, m.id))
                        .collect::<Vec<_>>()
                        .join(", "),
                    modes: modes.names(),
                }),
            }
        }
    }
}

/// What one run of a host tool gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// stdout then stderr, at most 16 KiB of each.
    pub output: String,
}

/// Why a host tool did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("the host has no {tool} (looked for {looked_in})")]
    Missing {
        tool: &'static str,
        looked_in: String,
    },
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} did not finish within {after:?} and was killed")]
    TimedOut { program: String, after: Duration },
}

/// How the host's tools are run.
#[derive(Debug, Clone)]
pub struct HostTools {
    /// The host root (`/` on the host itself).
    pub root: PathBuf,
    /// Run each tool chrooted into `root` (in a container); otherwise it runs as
    /// `<root>/<host path>` (on the host, or the test doubles).
    pub chroot: bool,
    /// How long a tool may take before it is killed.
    pub timeout: Duration,
}

impl HostTools {
    /// The first of `paths` (host paths) that exists under the root.
    pub fn find(&self, tool: &'static str, paths: &[&str]) -> Result<String, ToolError> {
        let host = HostRoot::new(&self.root);
        paths
            .iter()
            .find(|p| host.exists(p))
            .map(|p| p.to_string())
            .ok_or_else(|| ToolError::Missing {
                tool,
                looked_in: paths.join(", "),
            })
    }

    /// Runs `program` (a host path) with `args`, stdin on `/dev/null` so that no question it
    /// asks is ever answered; killed (with its process group) past the timeout.
    pub async fn run(&self, program: &str, args: &[&str]) -> Result<Ran, ToolError> {
        let path = if self.chroot {
            PathBuf::from(program)
        } else {
            self.root.join(program.trim_start_matches('/'))
        };
        let mut command = tokio::process::Command::new(&path);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if self.chroot {
            let root =
                CString::new(self.root.as_os_str().as_bytes()).map_err(|e| ToolError::Spawn {
                    program: program.to_string(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
                })?;
            let slash = CString::new("/").expect("no NUL in /");
            // SAFETY: between fork and exec the hook makes two system calls on C strings
            // made before the fork (a `CStr` path needs no allocation), and takes no lock.
            unsafe {
                command.pre_exec(move || {
                    nix::unistd::chroot(root.as_c_str())?;
                    nix::unistd::chdir(slash.as_c_str())?;
                    Ok(())
                });
            }
        }
        let spawn_error = |source| ToolError::Spawn {
            program: program.to_string(),
            source,
        };
        let mut child = command.spawn().map_err(spawn_error)?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let read_all = async {
            // Both pipes at once, past the kept part into a sink: a tool must never block on
            // a full pipe (it would look hung and be killed mid-change).
            let (out, err) = tokio::join!(drain(stdout), drain(stderr));
            let status = child.wait().await;
            (status, out, err)
        };
        match tokio::time::timeout(self.timeout, read_all).await {
            Ok((status, out, err)) => {
                let status = status.map_err(spawn_error)?;
                let mut output = String::from_utf8_lossy(&out).into_owned();
                output.push_str(&String::from_utf8_lossy(&err));
                Ok(Ran {
                    code: status.code(),
                    output,
                })
            }
            Err(_) => {
                if let Some(pid) = child.id() {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.kill().await;
                Err(ToolError::TimedOut {
                    program: program.to_string(),
                    after: self.timeout,
                })
            }
        }
    }
}

/// Reads a tool's pipe to its end, keeping the first [`OUTPUT_BYTES`].
async fn drain(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let _ = (&mut pipe)
        .take(OUTPUT_BYTES as u64)
        .read_to_end(&mut kept)
        .await;
    let _ = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await;
    kept
}

/// What asking for a mode came to, read back from nvpmodel's record after the tool ran.
#[derive(Debug)]
pub enum Outcome {
    /// The mode was in force already: nothing ran.
    InForce,
    /// `nvpmodel -m` ran and the mode is now in force.
    Applied,
    /// L4T wants a reboot for this change: the question was not answered, the old mode is
    /// still in force.
    NeedsReboot { output: String },
    /// The tool ran and the mode is not in force, for another reason.
    Refused { code: Option<i32>, output: String },
    /// The tool could not run, or hung.
    Failed(ToolError),
}

/// Sets `target` with the host's `nvpmodel -m` unless it is in force, then reads back what
/// is (`facts` are the facts read before; `devfreq` as discovery found it).
pub async fn set_mode(tools: &HostTools, facts: &PowerFacts, target: &PowerMode) -> Outcome {
    if facts.current.as_ref().map(|c| c.id) == Some(target.id) {
        return Outcome::InForce;
    }
    let program = match tools.find("nvpmodel", &NVPMODEL_PATHS) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e),
    };
    let id = target.id.to_string();
    let ran = match tools.run(&program, &["-m", &id]).await {
        Ok(ran) => ran,
        Err(e) => return Outcome::Failed(e),
    };
    let now = facts.with_mode_read(&tools.root);
    if now.current.as_ref().map(|c| c.id) == Some(target.id) {
        Outcome::Applied
    } else if ran.output.to_ascii_lowercase().contains("reboot") {
        Outcome::NeedsReboot { output: ran.output }
    } else {
        Outcome::Refused {
            code: ran.code,
            output: ran.output,
        }
    }
}

/// The file that tells the operator's reboot tooling a reboot is wanted (a host path; the
/// convention kured and Ubuntu's update-notifier use, `/var/run` being a link to it).
pub const REBOOT_SENTINEL: &str = "/run/reboot-required";
use edgegpu_platform::nvpmodel::RebootRecord;
/// What the policy asked a reboot for, and in which boot (a host path).
pub use edgegpu_platform::nvpmodel::REBOOT_RECORD;
/// The kernel's id of the running boot (Linux `drivers/char/random.c`).
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// What a reboot request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebootRequest {
    /// Asked now: the sentinel is there for the operator's tooling.
    Requested,
    /// Asked already in this boot.
    AlreadyRequested,
    /// Asked in an earlier boot, and the reboot did not bring the mode: not asked again (a
    /// reboot would not help, and asking each boot would reboot the node forever).
    RebootDidNotApply,
}

/// Asks for a reboot for `target` where the operator allowed one outside edgegpu: records
/// the mode and this boot's id, and creates the reboot sentinel. Nothing here reboots.
pub fn request_reboot(root: &Path, target: &PowerMode) -> std::io::Result<RebootRequest> {
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    let boot = std::fs::read_to_string(under(BOOT_ID))?.trim().to_string();
    let record = std::fs::read_to_string(under(REBOOT_RECORD))
        .ok()
        .and_then(|text| RebootRecord::parse(&text));
    if let Some(record) = record.filter(|r| r.mode == target.id) {
        return Ok(if record.boot == boot {
            RebootRequest::AlreadyRequested
        } else {
            RebootRequest::RebootDidNotApply
        });
    }
    std::fs::create_dir_all(under("/var/lib/edgegpu"))?;
    let text = RebootRecord {
        mode: target.id,
        boot,
    }
    .render();
    edgegpu_host::fsops::atomic_write(&under(REBOOT_RECORD), text.as_bytes(), 0o644)?;
    let sentinel = under(REBOOT_SENTINEL);
    if let Some(dir) = sentinel.parent() {
        std::fs::create_dir_all(dir)?;
    }
    edgegpu_host::fsops::atomic_write(&sentinel, b"", 0o644)?;
    Ok(RebootRequest::Requested)
}

/// Forgets a reboot request (the mode is in force, or no longer wanted). The sentinel is
/// left: other software may want the reboot too, and it is gone after one.
pub fn forget_reboot_request(root: &Path) {
    let _ = std::fs::remove_file(root.join(REBOOT_RECORD.trim_start_matches('/')));
}

/// Pins the clocks with `jetson_clocks` (storing the clocks before, so that they can be
/// restored) or, when `pin` is false and this policy pinned them, restores them. Returns
/// whether anything ran; the GPU's devfreq says whether it took.
pub async fn set_clocks(
    tools: &HostTools,
    facts: &PowerFacts,
    pin: bool,
) -> Result<bool, ToolError> {
    let store = tools.root.join(JETSON_CLOCKS_STORE.trim_start_matches('/'));
    let stored = HostRoot::new(&tools.root).exists(JETSON_CLOCKS_STORE);
    // Where the GPU's clocks cannot be read, our own store says whether we pinned them.
    let pinned = facts.gpu_clock.and_then(|c| c.pinned()).unwrap_or(stored);
    match (pin, pinned) {
        (true, true) | (false, false) => {
            if !pin && stored {
                // Not pinned any more (a new mode set its own clocks): the store holds
                // another mode's clocks, and restoring it would put them back.
                let _ = std::fs::remove_file(&store);
            }
            Ok(false)
        }
        // Pinned by someone else: theirs to undo.
        (false, true) if !stored => Ok(false),
        (false, true) => {
            let program = tools.find("jetson_clocks", &JETSON_CLOCKS_PATHS)?;
            tools
                .run(&program, &["--restore", JETSON_CLOCKS_STORE])
                .await?;
            let _ = std::fs::remove_file(&store);
            Ok(true)
        }
        (true, false) => {
            let program = tools.find("jetson_clocks", &JETSON_CLOCKS_PATHS)?;
            if let Some(dir) = store.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            // A store of the mode before is replaced: the clocks to come back to are these.
            tools
                .run(&program, &["--store", JETSON_CLOCKS_STORE])
                .await?;
            tools.run(&program, &[]).await?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::power::tests::{write, CONF};

    fn facts(root: &Path) -> PowerFacts {
        PowerFacts::read(root, None)
    }

    #[test]
    fn a_mode_by_id_exact_name_or_the_one_name_alike() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "/etc/nvpmodel.conf", CONF);
        let facts = facts(root.path());
        let by = |text: &str| resolve(&facts, &text.parse().unwrap()).map(|m| m.id);
        assert_eq!(by("0"), Ok(0));
        assert_eq!(by("MODE_15W"), Ok(1));
        assert_eq!(by("mode_15w"), Ok(1));
        assert_eq!(
            by("MODE_30W").unwrap_err().to_string(),
            "this board has no power mode `MODE_30W`; its modes: MAXN (0), MODE_15W (1)"
        );
        assert_eq!(
            by("7").unwrap_err().to_string(),
            "this board has no power mode `7`; its modes: MAXN (0), MODE_15W (1)"
        );
        assert!(matches!(
            "MAXN; reboot".parse::<ModeRequest>(),
            Err(PolicyError::NotAMode(_))
        ));

        // Two names alike but for case: only the exact one is taken.
        write(
            root.path(),
            "/etc/nvpmodel.conf",
            "< POWER_MODEL ID=0 NAME=MAXN >\n< POWER_MODEL ID=1 NAME=Quiet >\n\
             < POWER_MODEL ID=2 NAME=QUIET >\n",
        );
        let facts = PowerFacts::read(root.path(), None);
        let by = |text: &str| resolve(&facts, &text.parse().unwrap()).map(|m| m.id);
        assert_eq!(by("QUIET"), Ok(2));
        assert_eq!(
            by("quiet").unwrap_err().to_string(),
            "power mode `quiet` is ambiguous on this board: it matches Quiet (1), QUIET (2); \
             give the exact name or the id (its modes: MAXN (0), Quiet (1), QUIET (2))"
        );
        // The Orin Nano / NX "super" files (JetPack 6.2+) do not number modes by power: id 0
        // is 15W and MAXN_SUPER is 2, so a policy must go by name (or the board's own id).
        write(
            root.path(),
            "/etc/nvpmodel.conf",
            "< POWER_MODEL ID=0 NAME=15W >\n< POWER_MODEL ID=1 NAME=25W >\n\
             < POWER_MODEL ID=2 NAME=MAXN_SUPER >\n< POWER_MODEL NAME=7W ID=3 >\n\
             < PM_CONFIG DEFAULT=0 >\n",
        );
        let facts = PowerFacts::read(root.path(), None);
        let by = |text: &str| resolve(&facts, &text.parse().unwrap()).map(|m| m.id);
        assert_eq!(by("maxn_super"), Ok(2));
        assert_eq!(by("7W"), Ok(3));
        assert_eq!(
            by("MAXN").unwrap_err().to_string(),
            "this board has no power mode `MAXN`; its modes: 15W (0), 25W (1), MAXN_SUPER (2), 7W (3)"
        );
        let none = PowerFacts::read(&root.path().join("none"), None);
        assert_eq!(
            resolve(&none, &ModeRequest::Id(0)),
            Err(PolicyError::NoConfiguration)
        );
    }

    /// The host's tools as a test runs them: no chroot (the fake root has no libc).
    fn tools(root: &Path) -> HostTools {
        HostTools {
            root: root.to_path_buf(),
            chroot: false,
            timeout: Duration::from_secs(20),
        }
    }

    fn orin() -> (edgegpu_testkit::host::FakeHost, PowerFacts, String) {
        use edgegpu_testkit::host::{Board, FakeHost};
        let host = FakeHost::jetson(Board::Orin);
        host.install_power_tools(Board::Orin);
        let dir = Board::Orin.devfreq_dir();
        let facts = PowerFacts::read(host.root(), Some(&dir));
        (host, facts, dir)
    }

    #[tokio::test]
    async fn nvpmodel_sets_the_mode_and_a_reboot_is_never_confirmed() {
        let (host, facts, _) = orin();
        let tools = tools(host.root());
        // MODE_30W (2) is the boot default: nothing runs.
        let mode_30w = resolve(&facts, &"MODE_30W".parse().unwrap()).unwrap();
        assert!(matches!(
            set_mode(&tools, &facts, mode_30w).await,
            Outcome::InForce
        ));
        assert!(host.nvpmodel_calls().is_empty());

        let maxn = resolve(&facts, &ModeRequest::Id(0)).unwrap();
        assert!(matches!(
            set_mode(&tools, &facts, maxn).await,
            Outcome::Applied
        ));
        assert_eq!(host.nvpmodel_calls(), ["-m 0"]);
        let now = facts.with_mode_read(host.root());
        assert_eq!(now.current.as_ref().map(|c| c.id), Some(0));
        assert_eq!(now.gpu_ceiling_hz(), Some(1_300_500_000));

        // MODE_15W wants a reboot: asked, never answered, MAXN still in force.
        host.require_reboot_for_power_mode(1);
        let mode_15w = resolve(&now, &ModeRequest::Id(1)).unwrap();
        match set_mode(&tools, &now, mode_15w).await {
            Outcome::NeedsReboot { output } => {
                assert!(output.contains("Reboot required"), "{output}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!host.path("/fake-nvpmodel-rebooted").exists());
        let after = now.with_mode_read(host.root());
        assert_eq!(after.current.as_ref().map(|c| c.id), Some(0));

        // Where a reboot is allowed: asked once per boot, never again after a reboot that
        // did not bring the mode.
        host.write(BOOT_ID, "boot-1\n");
        assert_eq!(
            request_reboot(host.root(), mode_15w).unwrap(),
            RebootRequest::Requested
        );
        assert!(host.path(REBOOT_SENTINEL).exists());
        assert_eq!(
            request_reboot(host.root(), mode_15w).unwrap(),
            RebootRequest::AlreadyRequested
        );
        host.write(BOOT_ID, "boot-2\n");
        std::fs::remove_file(host.path(REBOOT_SENTINEL)).unwrap();
        assert_eq!(
            request_reboot(host.root(), mode_15w).unwrap(),
            RebootRequest::RebootDidNotApply
        );
        assert!(!host.path(REBOOT_SENTINEL).exists());
        forget_reboot_request(host.root());
        assert_eq!(
            request_reboot(host.root(), mode_15w).unwrap(),
            RebootRequest::Requested
        );
    }

    #[tokio::test]
    async fn a_refusal_a_missing_tool_and_a_hang_are_reported() {
        let (host, facts, _) = orin();
        // A mode the tool refuses (the configuration it reads lacks it).
        let mut modes = facts.modes.clone().unwrap().unwrap();
        modes.modes.push(PowerMode {
            id: 9,
            name: "NINE".into(),
            ..modes.modes[0].clone()
        });
        let nine = modes.by_id(9).unwrap().clone();
        match set_mode(&tools(host.root()), &facts, &nine).await {
            Outcome::Refused { code, output } => {
                assert_eq!(code, Some(1));
                assert!(output.contains("Invalid power mode id 9"), "{output}");
            }
            other => panic!("{other:?}"),
        }
        let maxn = resolve(&facts, &ModeRequest::Id(0)).unwrap();
        let bare = tempfile::tempdir().unwrap();
        match set_mode(&tools(bare.path()), &facts, maxn).await {
            Outcome::Failed(e) => assert_eq!(
                e.to_string(),
                "the host has no nvpmodel (looked for /usr/sbin/nvpmodel, /usr/bin/nvpmodel, \
                 /sbin/nvpmodel)"
            ),
            other => panic!("{other:?}"),
        }
        host.write("/usr/sbin/nvpmodel", "#!/bin/sh\nsleep 30\n");
        let hasty = HostTools {
            timeout: Duration::from_millis(300),
            ..tools(host.root())
        };
        match set_mode(&hasty, &facts, maxn).await {
            Outcome::Failed(e) => assert_eq!(
                e.to_string(),
                "/usr/sbin/nvpmodel did not finish within 300ms and was killed"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn clocks_are_pinned_and_restored_only_by_whoever_pinned_them() {
        let (host, facts, dir) = orin();
        let tools = tools(host.root());
        assert!(set_clocks(&tools, &facts, true).await.unwrap());
        let pinned = facts.with_mode_read(host.root());
        assert_eq!(pinned.gpu_clock.unwrap().pinned(), Some(true));
        assert!(host.path(JETSON_CLOCKS_STORE).exists());
        // Pinned already: nothing runs.
        assert!(!set_clocks(&tools, &pinned, true).await.unwrap());
        assert!(set_clocks(&tools, &pinned, false).await.unwrap());
        let restored = facts.with_mode_read(host.root());
        assert_eq!(restored.gpu_clock.unwrap().pinned(), Some(false));
        assert_eq!(
            host.jetson_clocks_calls(),
            [
                format!("--store {JETSON_CLOCKS_STORE}"),
                String::new(),
                format!("--restore {JETSON_CLOCKS_STORE}")
            ]
        );
        // Pinned by someone else (no store of ours): left alone.
        host.write(&format!("{dir}/min_freq"), "624750000\n");
        let theirs = facts.with_mode_read(host.root());
        assert!(!set_clocks(&tools, &theirs, false).await.unwrap());

        // Pinned by us, then a new mode set its own clocks: nothing is restored (the store
        // holds the old mode's), the store goes.
        host.write(&format!("{dir}/min_freq"), "306000000\n");
        let unpinned = facts.with_mode_read(host.root());
        assert!(set_clocks(&tools, &unpinned, true).await.unwrap());
        host.write(&format!("{dir}/min_freq"), "306000000\n");
        let calls = host.jetson_clocks_calls().len();
        let new_mode = facts.with_mode_read(host.root());
        assert!(!set_clocks(&tools, &new_mode, false).await.unwrap());
        assert_eq!(host.jetson_clocks_calls().len(), calls, "no --restore");
        assert!(!host.path(JETSON_CLOCKS_STORE).exists());

        // No readable devfreq: the store says whether we pinned, so pinning runs once.
        let blind = PowerFacts {
            gpu_clock: None,
            ..facts.clone()
        };
        assert!(set_clocks(&tools, &blind, true).await.unwrap());
        assert!(!set_clocks(&tools, &blind, true).await.unwrap());
    }
}
