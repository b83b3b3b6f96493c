//! `edgegpu-node-setup doctor`: walks the chain a GPU pod depends on, link by link, and says
//! which one is broken and the command that fixes it.
//!
//! The links, in the order a pod needs them ([`Link`]): the board and its driver release
//! ([`board`]), the device nodes ([`board`]), the container runtime configuration that
//! k3s, containerd and docker will really load ([`runtime`], what `check` decides), the CDI
//! specs against the driver files on the host now ([`cdi`]), the device plugin's or DRA
//! driver's registration with the kubelet ([`kubelet`]), the MPS daemons where sharing uses
//! them ([`mps`]), the Node's labels against the facts ([`labels`], only with `--cluster`:
//! everything else reads local files only) and the Jetson power mode ([`power`]).
//!
//! Every link is checked whatever the others found ("stops at nothing"). Each finding says
//! what was checked, from which files or commands, its verdict, and the one command that
//! fixes it. [`bundle`] packs the findings with the files they came from (secrets redacted,
//! [`redact`]); [`record`] leaves the verdicts where node exporters and Node Feature
//! Discovery pick them up (the upgrade watch, docs/troubleshooting.md).

pub mod board;
pub mod bundle;
pub mod cdi;
pub mod command;
pub mod finding;
pub mod kubelet;
pub mod labels;
pub mod mps;
pub mod power;
pub mod record;
pub mod redact;
pub mod render;
pub mod runtime;
pub mod safe_read;

use std::io::Write;
use std::time::{Duration, Instant};

use crate::cli::{DoctorArgs, OutputFormat};
use crate::plan;
use edgegpu_host::root::HostRoot;

pub use finding::{exit, Facts, Finding, Link, Report, Verdict};

/// What the doctor is asked to look at beyond `--root` and the runtime options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The planner's options (`--root`, `--mode`, the runtime, `--cdi`).
    pub plan: plan::Options,
    /// The kubelet's root directory (`/var/lib/kubelet`, k3s's too).
    pub kubelet_dir: String,
    /// The device plugin's `--mps-root`.
    pub mps_root: String,
    /// Compare the Node's labels through the API server (`--cluster`).
    pub cluster: Option<labels::Cluster>,
}

/// Walks every link and returns what each found.
pub fn examine(opts: &Options) -> Report {
    let start = Instant::now();
    let host = opts.plan.host.tolerating_unreadable().recording_reads();
    let mut facts = board::facts(&host);
    let mut findings = vec![
        board::platform(&host, &facts),
        board::device_nodes(&host, &facts),
    ];
    let runtime = runtime::check(
        &plan::Options {
            host: host.clone(),
            ..opts.plan.clone()
        },
        &mut facts,
    );
    findings.push(runtime);
    findings.push(cdi::check(&host, &facts));
    findings.push(kubelet::check(&host, &opts.kubelet_dir));
    findings.push(mps::check(&host, &opts.mps_root));
    findings.push(labels::check(&host, &facts, opts.cluster.as_ref()));
    findings.push(power::check(&host, &facts));
    // A file that could not be read (not root) makes the finding that needed it "unknown",
    // unless it is broken anyway: the finding naming it or its folder, else the runtime link
    // (the planner reads the most files).
    for u in host.unreadable() {
        let names = |f: &Finding| {
            f.sources
                .iter()
                .any(|s| u.file == *s || u.file.starts_with(&format!("{s}/")))
        };
        let i = findings
            .iter()
            .position(names)
            .or_else(|| findings.iter().position(|f| f.link == Link::Runtime))
            .unwrap_or(0);
        let f = &mut findings[i];
        if f.verdict < Verdict::Unknown {
            f.verdict = Verdict::Unknown;
            f.fix = Some("run it as root: sudo edgegpu-node-setup doctor".into());
        }
        f.details
            .push(format!("cannot read {} ({}): run as root", u.file, u.error));
    }
    Report {
        findings,
        elapsed: start.elapsed(),
        files_read: host.files_read(),
    }
}

/// The Node's name for `--cluster`: `--node-name` (or NODE_NAME), else the host's name
/// (the kubelet's default, `--hostname-override` aside).
fn node_name(host: &HostRoot, given: Option<&str>) -> String {
    given.map(str::to_string).unwrap_or_else(|| {
        host.read("/proc/sys/kernel/hostname")
            .ok()
            .flatten()
            .or_else(|| host.read("/etc/hostname").ok().flatten())
            .map(|h| h.trim().to_ascii_lowercase())
            .unwrap_or_default()
    })
}

/// `--kubectl`, else `kubectl` where it is on PATH, else k3s's own.
fn kubectl(given: Option<&str>) -> Vec<String> {
    if let Some(cmd) = given {
        return cmd.split_whitespace().map(String::from).collect();
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("kubectl").is_file()));
    if on_path {
        vec!["kubectl".into()]
    } else {
        vec!["k3s".into(), "kubectl".into()]
    }
}

/// `doctor`: examines, prints, and writes what was asked for; returns the exit code.
pub fn run(plan: plan::Options, args: &DoctorArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let cluster = args.cluster.then(|| labels::Cluster {
        kubectl: kubectl(args.kubectl.as_deref()),
        node: node_name(&plan.host, args.node_name.as_deref()),
        timeout: Duration::from_secs(10),
    });
    let opts = Options {
        plan,
        kubelet_dir: args.kubelet_dir.clone(),
        mps_root: args.mps_root.clone(),
        cluster,
    };
    let report = examine(&opts);
    match args.output {
        OutputFormat::Text => render::text(&report, args.verbose, out),
        OutputFormat::Json => render::json(&report, out),
    }
    for f in report
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Broken)
    {
        tracing::info!(
            link = f.link.id(),
            fix = f.fix.as_deref().unwrap_or(""),
            "broken: {}",
            f.summary
        );
    }
    let mut code = report.exit_code();
    let mut failed = |what: String| {
        let _ = writeln!(err, "edgegpu-node-setup doctor: {what}");
        code = edgegpu_host::error::exit_code::FAILED;
    };
    for (path, text) in [
        (&args.textfile, record::textfile as fn(&Report) -> String),
        (&args.feature_file, record::feature_file),
    ] {
        if let Some(path) = path {
            match record::write(path, &text(&report)) {
                Ok(said) => tracing::info!("{said}"),
                Err(e) => failed(e),
            }
        }
    }
    if let Some(path) = &args.bundle {
        match bundle::write(&opts.plan.host, &report, path) {
            Ok(packed) => {
                let _ = writeln!(
                    err,
                    "edgegpu-node-setup doctor: wrote {} ({} entries, {} secrets redacted)",
                    path.display(),
                    packed.entries.len(),
                    packed.entries.iter().map(|e| e.2).sum::<usize>()
                );
            }
            Err(e) => failed(e),
        }
    }
    code
}
