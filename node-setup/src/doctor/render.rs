//! The report for people (text) and for scripts (one JSON document).

use std::io::Write;

use serde::Serialize;

use super::finding::{Finding, Report, Verdict};

/// `[broken]  runtime       …` lines, evidence indented under each, the fix last; then the
/// first broken link, where to start.
pub fn text(report: &Report, verbose: bool, out: &mut dyn Write) {
    for f in &report.findings {
        let _ = writeln!(
            out,
            "{:<10}{:<14}{}",
            format!("[{}]", f.verdict.word()),
            f.link.id(),
            f.summary
        );
        let show_details = verbose
            || matches!(
                f.verdict,
                Verdict::Broken | Verdict::Warning | Verdict::Unknown
            );
        if show_details {
            for d in &f.details {
                let _ = writeln!(out, "{:24}{d}", "");
            }
            if !f.sources.is_empty() {
                let _ = writeln!(out, "{:24}from: {}", "", f.sources.join(", "));
            }
        }
        if let Some(fix) = &f.fix {
            let _ = writeln!(out, "{:24}fix: {fix}", "");
        }
    }
    let _ = writeln!(out, "{}", verdict_line(report));
}

/// The last line: the node's state, and where to start when something is broken.
pub fn verdict_line(report: &Report) -> String {
    let took = format!("({} ms)", report.elapsed.as_millis());
    match report.first_broken() {
        Some(f) => format!(
            "BROKEN: start with the {} link: {} {took}",
            f.link.id(),
            f.summary
        ),
        None => match report.worst() {
            Verdict::Unknown => format!(
                "nothing found broken, but some links could not be checked: run as root {took}"
            ),
            Verdict::Warning => format!("healthy, with warnings {took}"),
            _ => format!("healthy: every link checked is ok {took}"),
        },
    }
}

#[derive(Serialize)]
struct Doc<'a> {
    /// The JSON document's format (bumped when a field changes meaning).
    format: u32,
    verdict: Verdict,
    #[serde(rename = "firstBroken", skip_serializing_if = "Option::is_none")]
    first_broken: Option<&'static str>,
    #[serde(rename = "exitCode")]
    exit_code: u8,
    #[serde(rename = "elapsedMs")]
    elapsed_ms: f64,
    findings: &'a [Finding],
}

pub fn json_string(report: &Report) -> String {
    let doc = Doc {
        format: 1,
        verdict: report.worst(),
        first_broken: report.first_broken().map(|f| f.link.id()),
        exit_code: report.exit_code(),
        elapsed_ms: (report.elapsed.as_secs_f64() * 1e6).round() / 1e3,
        findings: &report.findings,
    };
    let mut text = serde_json::to_string_pretty(&doc).expect("the report serialises");
    text.push('\n');
    text
}

pub fn json(report: &Report, out: &mut dyn Write) {
    let _ = out.write_all(json_string(report).as_bytes());
}
