//! Starting the project's own binaries from tests, also when the tests themselves run
//! under an emulator (aarch64 test suite under qemu-user, where the kernel cannot exec a
//! foreign-architecture binary without binfmt_misc).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// Environment variable holding the command prefix that runs a target binary on this host,
/// e.g. `qemu-aarch64-static -L /usr/aarch64-linux-gnu`. `scripts/test.sh` sets it for the
/// cross-architecture test run; unset means "run natively".
pub const RUNNER_ENV: &str = "EDGEGPU_TEST_RUNNER";

/// A [`Command`] that runs the binary at `path`, through the emulator named in
/// [`RUNNER_ENV`] when one is set.
///
/// The device plugin and the DRA driver lock the device kinds they serve in a host-wide
/// directory (`/run/edgegpu`, docs/dra.md); tests start many of them at once on fake hosts, so
/// the locks are off here (`OWNERSHIP_DIR=""`). Tests of the locks set a directory of their
/// own after this.
pub fn binary_command(path: impl AsRef<Path>) -> Command {
    let runner = std::env::var(RUNNER_ENV).unwrap_or_default();
    let mut words = runner.split_whitespace();
    let mut cmd = match words.next() {
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(path.as_ref());
            cmd
        }
        None => Command::new(path.as_ref()),
    };
    cmd.env(OWNERSHIP_DIR_ENV, "");
    cmd
}

/// The multi-call binary of the node-side programs (the `edgegpu` package).
pub const MULTI_CALL_BINARY: &str = "edgegpu";

/// The crates linked into [`MULTI_CALL_BINARY`], for the staleness check of [`program`].
const PROGRAM_SOURCES: [&str; 9] = [
    "edgegpu",
    "plugin",
    "dra",
    "labeller",
    "node",
    "host",
    "apiclient",
    "platform",
    "kubelet-api",
];

/// The path of a node-side program (`edgegpu-device-plugin`, `edgegpu-dra-driver`,
/// `edgegpu-labeller`) as the images and packages install it: a link of that name to the
/// multi-call `edgegpu` binary, so the tests start it the way a manifest does (argv\[0\]
/// dispatch). The binary is the one cargo built next to this test's executable
/// (`target/[TRIPLE/]PROFILE/edgegpu`): `cargo test --workspace` builds it, as it builds every
/// package's binary that has integration tests; `cargo test -p edgegpu-plugin` alone does not,
/// so a missing binary, or one older than the sources it is built from, stops the test with
/// the command that fixes it instead of running old code.
pub fn program(name: &str) -> PathBuf {
    let dir = multi_call_dir();
    let link = dir.join(name);
    if std::fs::read_link(&link).is_ok_and(|to| to == Path::new(MULTI_CALL_BINARY)) {
        return link;
    }
    // Tests run in parallel, in threads and in processes: make the link under a name private
    // to this call, then rename it over whatever is there (an old program binary of that
    // name, a link another test just made).
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let private = dir.join(format!(".{name}.{}.{call}", std::process::id()));
    let _ = std::fs::remove_file(&private);
    std::os::unix::fs::symlink(MULTI_CALL_BINARY, &private)
        .and_then(|()| std::fs::rename(&private, &link))
        .unwrap_or_else(|e| panic!("cannot link {} to {MULTI_CALL_BINARY}: {e}", link.display()));
    link
}

/// The folder of the multi-call binary, checked once per test process (the staleness check
/// walks the sources of every crate linked into it).
fn multi_call_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's own executable");
        // target/[TRIPLE/]PROFILE/deps/TEST-HASH -> target/[TRIPLE/]PROFILE
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("a test executable inside cargo's target directory")
            .to_path_buf();
        let binary = dir.join(MULTI_CALL_BINARY);
        let built = match std::fs::metadata(&binary).and_then(|m| m.modified()) {
            Ok(t) => t,
            Err(e) => panic!(
                "{}: {e}; build it with `cargo build -p edgegpu` (cargo test --workspace does)",
                binary.display()
            ),
        };
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        if let Some(newer) = PROGRAM_SOURCES
            .iter()
            .find_map(|krate| newer_file(&workspace.join(krate).join("src"), built))
        {
            panic!(
                "{} is older than {}: rebuild it with `cargo build -p edgegpu` \
                 (cargo test --workspace does)",
                binary.display(),
                newer.display()
            );
        }
        dir
    })
}

/// The environment variable naming the multi-call binary the benchmarks measure instead of
/// the debug one [`program`] finds: `scripts/bench.sh` sets it to the release build
/// (`target/release/edgegpu`); `dist/edgegpu-<triple>` (scripts/build-release.sh) works too.
pub const BENCH_BINARY_ENV: &str = "EDGEGPU_BENCH_BINARY";

/// [`program`] for a benchmark: the program `name` run from the binary [`BENCH_BINARY_ENV`]
/// names, through a link of that name in a private temporary folder (argv\[0\] picks the
/// program), or the debug build when it is unset.
pub fn bench_program(name: &str) -> PathBuf {
    let Some(binary) = std::env::var_os(BENCH_BINARY_ENV).filter(|b| !b.is_empty()) else {
        return program(name);
    };
    let binary = std::fs::canonicalize(&binary)
        .unwrap_or_else(|e| panic!("{BENCH_BINARY_ENV}={}: {e}", binary.to_string_lossy()));
    let dir = std::env::temp_dir().join(format!("edgegpu-bench-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join(name);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&binary, &link).unwrap_or_else(|e| {
        panic!(
            "cannot link {} to {}: {e}",
            link.display(),
            binary.display()
        )
    });
    link
}

/// A file under `dir` modified after `than`, if any.
fn newer_file(dir: &Path, than: SystemTime) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            if let Some(found) = newer_file(&path, than) {
                return Some(found);
            }
        } else if meta.modified().is_ok_and(|m| m > than) {
            return Some(path);
        }
    }
    None
}

/// The environment variable of `--ownership-dir`.
pub const OWNERSHIP_DIR_ENV: &str = "OWNERSHIP_DIR";

/// A field of `/proc/<pid>/status` (`VmRSS:` → `6412 kB`), or `?`.
pub fn status_field(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .map(|l| l[field.len()..].trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// Sum of voluntary + involuntary context switches of the given /proc status files.
pub fn context_switches(status_files: &[String]) -> u64 {
    status_files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|s| {
            s.lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The `/proc/<pid>/task/*/status` files of every thread of `pid`.
pub fn thread_status_files(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten()
                .map(|e| format!("{}/status", e.path().display()))
                .collect()
        })
        .unwrap_or_default()
}

/// User + system CPU time in microseconds of the `/proc/.../stat` file `stat_path` (a process's
/// `/proc/<pid>/stat`, a thread's `/proc/self/task/<tid>/stat`). Clock-tick resolution.
pub fn cpu_time_us(stat_path: &str) -> u64 {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    ticks * 1_000_000 / hz
}

/// Rss summed per mapped file (the binary, each library) and for anonymous memory, from
/// /proc/PID/smaps, largest first (`edgegpu-device-plugin 2100 kB, [anon] 900 kB, …`).
pub fn rss_by_mapping(pid: u32) -> String {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut sums: std::collections::BTreeMap<String, u64> = Default::default();
    let mut current = String::new();
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            current = match fields.get(5) {
                Some(path) if path.starts_with('/') => {
                    path.rsplit('/').next().unwrap_or(path).to_string()
                }
                Some(other) => other.to_string(),
                None => "[anon]".to_string(),
            };
        } else if fields.first() == Some(&"Rss:") {
            *sums.entry(current.clone()).or_default() += fields
                .get(1)
                .and_then(|k| k.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    let mut sums: Vec<(String, u64)> = sums.into_iter().filter(|(_, kb)| *kb > 0).collect();
    sums.sort_by_key(|(_, kb)| std::cmp::Reverse(*kb));
    sums.iter()
        .map(|(name, kb)| format!("{name} {kb} kB"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A running process's memory and idle wake-ups, as the benchmarks print them.
#[derive(Debug, Clone)]
pub struct Footprint {
    pub vm_rss: String,
    pub rss_anon: String,
    pub rss_file: String,
    pub vm_hwm: String,
    pub threads: usize,
    /// Context switches of all its threads during the idle window.
    pub context_switches: u64,
    pub idle: std::time::Duration,
}

impl Footprint {
    /// Counts the context switches of process `pid` while it idles for `idle`, then reads its
    /// memory figures.
    pub async fn measure(pid: u32, idle: std::time::Duration) -> Footprint {
        let tasks = thread_status_files(pid);
        let before = context_switches(&tasks);
        tokio::time::sleep(idle).await;
        let after = context_switches(&tasks);
        Footprint {
            vm_rss: status_field(pid, "VmRSS:"),
            rss_anon: status_field(pid, "RssAnon:"),
            rss_file: status_field(pid, "RssFile:"),
            vm_hwm: status_field(pid, "VmHWM:"),
            threads: tasks.len(),
            context_switches: after - before,
            idle,
        }
    }
}

impl std::fmt::Display for Footprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VmRSS {} (RssAnon {}, RssFile {}; VmHWM {}), {} thread(s), {} context switches in {:?} idle",
            self.vm_rss,
            self.rss_anon,
            self.rss_file,
            self.vm_hwm,
            self.threads,
            self.context_switches,
            self.idle
        )
    }
}

/// The memory of process `pid` that the kernel cannot take back: the process is moved into a
/// memory cgroup of its own, told to reclaim everything it can (cgroup v2 `memory.reclaim`,
/// or v1 `memory.force_empty`), and what stays charged is read — the working set a pod's
/// memory limit sees under pressure, where VmRSS also counts clean file pages the kernel
/// drops first. Needs root and a writable memory controller; otherwise says why not. The
/// process is moved back after.
pub fn unreclaimable_memory(pid: u32) -> String {
    match reclaim_in_own_cgroup(pid) {
        Ok(figure) => figure,
        Err(why) => format!("not measured ({why})"),
    }
}

/// The process's memory cgroup under `base`, from `/proc/<pid>/cgroup` (v2's `0::` line or
/// v1's `memory` one), to move it back to.
fn own_group(pid: u32, base: &Path, v1: bool) -> std::path::PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let path = text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let wanted = if v1 {
            controllers.split(',').any(|c| c == "memory")
        } else {
            controllers.is_empty()
        };
        wanted.then(|| path.trim_start_matches('/').to_string())
    });
    base.join(path.unwrap_or_default())
}

fn reclaim_in_own_cgroup(pid: u32) -> Result<String, String> {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
    let v1 = Path::new("/sys/fs/cgroup/memory");
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let name = format!("edgegpu-bench-{pid}");
    let kb = |bytes: &str| {
        bytes
            .trim()
            .parse::<u64>()
            .map(|b| format!("{} kB", b / 1024))
            .unwrap_or_else(|_| bytes.trim().to_string())
    };
    if std::fs::read_to_string(v2).is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")) {
        let home = own_group(pid, Path::new("/sys/fs/cgroup"), false);
        let group = Path::new("/sys/fs/cgroup").join(&name);
        std::fs::create_dir(&group).map_err(|e| io("creating a cgroup v2 group", e))?;
        let result = (|| {
            std::fs::write(group.join("cgroup.procs"), pid.to_string())
                .map_err(|e| io("moving the process", e))?;
            let before = std::fs::read_to_string(group.join("memory.current")).unwrap_or_default();
            // Reclaim more than it has: the kernel stops when nothing more can go.
            let _ = std::fs::write(group.join("memory.reclaim"), "1G");
            let after = std::fs::read_to_string(group.join("memory.current"))
                .map_err(|e| io("memory.current", e))?;
            Ok(format!(
                "cgroup v2 memory.current {} after memory.reclaim (charged at the move: {})",
                kb(&after),
                kb(&before)
            ))
        })();
        let _ = std::fs::write(home.join("cgroup.procs"), pid.to_string());
        let _ = std::fs::remove_dir(&group);
        return result;
    }
    if v1.join("memory.usage_in_bytes").exists() {
        let home = own_group(pid, v1, true);
        let group = v1.join(&name);
        std::fs::create_dir(&group).map_err(|e| io("creating a cgroup v1 memory group", e))?;
        let result = (|| {
            // Its pages are charged to the new group only with charge moving on (v1).
            let _ = std::fs::write(group.join("memory.move_charge_at_immigrate"), "3");
            std::fs::write(group.join("tasks"), pid.to_string())
                .map_err(|e| io("moving the process", e))?;
            let before =
                std::fs::read_to_string(group.join("memory.usage_in_bytes")).unwrap_or_default();
            if before.trim() == "0" {
                // Linux 6.x no longer moves charges between v1 groups: nothing to measure.
                return Err(
                    "cgroup v1 here does not move a process's charges into a new group".into(),
                );
            }
            std::fs::write(group.join("memory.force_empty"), "0")
                .map_err(|e| io("memory.force_empty", e))?;
            let after = std::fs::read_to_string(group.join("memory.usage_in_bytes"))
                .map_err(|e| io("memory.usage_in_bytes", e))?;
            Ok(format!(
                "cgroup v1 memory.usage_in_bytes {} after memory.force_empty (charged at the move: {})",
                kb(&after),
                kb(&before)
            ))
        })();
        let _ = std::fs::write(home.join("tasks"), pid.to_string());
        let _ = std::fs::remove_dir(&group);
        return result;
    }
    Err("no cgroup memory controller here".into())
}

/// Sends SIGTERM to process `pid`.
pub fn terminate(pid: u32) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
}

/// The line a benchmark prints first: how many CPUs and how loaded the machine was, which
/// every figure after it depends on.
pub fn machine_line() -> String {
    format!(
        "machine: {} CPU(s), load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    )
}
