//! Where the upgrade watch (`edgegpu-node-check.path`) leaves each verdict for the cluster:
//! - `--textfile FILE`: Prometheus text format for node exporter's textfile collector
//!   (`--collector.textfile.directory`): `edgegpu_node_doctor_link{link,verdict} 1` and
//!   `edgegpu_node_doctor_broken_links`, to alert on;
//! - `--feature-file FILE`: Node Feature Discovery's local feature file (`key=value` lines,
//!   nfd-worker's `local` source reads `features.d/`): `edgegpu.io/node-doctor=<verdict>` and,
//!   when a link is broken, `edgegpu.io/node-doctor.broken=<first broken link>`, which NFD
//!   puts on the Node.
//!
//! Each file is written atomically (a reader never sees half of it). A folder that does not
//! exist means its consumer is not installed: nothing is written there, and that is said.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::finding::{Link, Report, Verdict};

/// The Prometheus text (exposition format 0.0.4).
pub fn textfile(report: &Report) -> String {
    let mut t = String::new();
    t.push_str("# HELP edgegpu_node_doctor_link 1 for each link's verdict from edgegpu-node-setup doctor (ok, skipped, warning, unknown, broken).\n");
    t.push_str("# TYPE edgegpu_node_doctor_link gauge\n");
    for link in Link::ALL {
        let verdict = report
            .findings
            .iter()
            .find(|f| f.link == link)
            .map_or(Verdict::Skipped, |f| f.verdict);
        t.push_str(&format!(
            "edgegpu_node_doctor_link{{link=\"{}\",verdict=\"{}\"}} 1\n",
            link.id(),
            verdict.word()
        ));
    }
    let broken = report
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Broken)
        .count();
    t.push_str("# HELP edgegpu_node_doctor_broken_links Links of the GPU chain found broken.\n");
    t.push_str("# TYPE edgegpu_node_doctor_broken_links gauge\n");
    t.push_str(&format!("edgegpu_node_doctor_broken_links {broken}\n"));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    t.push_str(
        "# HELP edgegpu_node_doctor_last_run_timestamp_seconds When the doctor last looked.\n",
    );
    t.push_str("# TYPE edgegpu_node_doctor_last_run_timestamp_seconds gauge\n");
    t.push_str(&format!(
        "edgegpu_node_doctor_last_run_timestamp_seconds {now}\n"
    ));
    t
}

/// The NFD feature file's lines.
pub fn feature_file(report: &Report) -> String {
    let mut t = format!("edgegpu.io/node-doctor={}\n", report.worst().word());
    if let Some(f) = report.first_broken() {
        t.push_str(&format!("edgegpu.io/node-doctor.broken={}\n", f.link.id()));
    }
    t
}

/// Writes `text` to `path` atomically where its folder exists; says what happened.
pub fn write(path: &Path, text: &str) -> Result<String, String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Ok(format!(
            "not written: {} does not exist (its reader is not installed)",
            dir.display()
        ));
    }
    edgegpu_host::fsops::atomic_write(path, text.as_bytes(), 0o644)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(format!("wrote {}", path.display()))
}
