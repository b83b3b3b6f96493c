//! The Prometheus text exposition format, version 0.0.4 — what dcgm-exporter serves and
//! every Prometheus scrapes (prometheus/docs `content/docs/instrumenting/exposition_formats.md`).
//!
//! Written by hand rather than with the `prometheus-client` crate: that crate encodes only
//! OpenMetrics (it appends `_total` to counters and ends with `# EOF`), keeps a registry of
//! long-lived metric objects where every value here is read at scrape time, and would add
//! `parking_lot`, `dtoa`, `itoa` and a derive macro (syn) to the plugin's build for ~100
//! lines of formatting. The format's escaping rules are implemented and tested below; the
//! output is checked with Prometheus' own Python parser in plugin/tests/metrics.rs.

use std::fmt::Write;

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// A scrape's text, family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a family. Its `# HELP` and `# TYPE` lines are written with its first sample, so
    /// a family without samples (a value the board cannot measure) leaves no trace.
    pub fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) -> Family<'_> {
        debug_assert!(is_metric_name(name), "bad metric name {name}");
        Family {
            out: &mut self.out,
            name,
            kind,
            help,
            started: false,
        }
    }

    pub fn into_text(self) -> String {
        self.out
    }
}

/// One metric family being written.
pub struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
    kind: Kind,
    help: &'static str,
    started: bool,
}

impl Family<'_> {
    /// Adds one sample with these labels (names must be valid label names; values are
    /// escaped).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        if !self.started {
            self.started = true;
            let _ = writeln!(self.out, "# HELP {} {}", self.name, escape_help(self.help));
            let _ = writeln!(self.out, "# TYPE {} {}", self.name, self.kind.as_str());
        }
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (name, value)) in labels.iter().enumerate() {
                debug_assert!(is_label_name(name), "bad label name {name}");
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(name);
                self.out.push_str("=\"");
                escape_label_value(self.out, value);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        write_value(self.out, value);
        self.out.push('\n');
    }
}

/// `# HELP` text: backslash and line feed are escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A label value: backslash, double quote and line feed are escaped.
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A sample value as Go's `strconv.ParseFloat` reads it: integers without a fraction,
/// `NaN`, `+Inf`, `-Inf`.
fn write_value(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escaping() {
        let mut e = Exposition::new();
        e.family("empty_family", Kind::Gauge, "never sampled");
        let mut f = e.family(
            "DCGM_FI_DEV_GPU_TEMP",
            Kind::Gauge,
            "GPU temperature (in C).",
        );
        f.sample(
            &[("gpu", "0"), ("modelName", "a \"quoted\" \\ name\nx")],
            39.5,
        );
        f.sample(&[], 40.0);
        let mut c = e.family("edgegpu_x_total", Kind::Counter, "back\\slash\nline");
        c.sample(&[("a", "b")], 3.0);
        c.sample(&[], f64::NAN);
        c.sample(&[], f64::INFINITY);
        c.sample(&[], f64::NEG_INFINITY);
        c.sample(&[], 0.125);
        assert_eq!(
            e.into_text(),
            "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n\
             # TYPE DCGM_FI_DEV_GPU_TEMP gauge\n\
             DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",modelName=\"a \\\"quoted\\\" \\\\ name\\nx\"} 39.5\n\
             DCGM_FI_DEV_GPU_TEMP 40\n\
             # HELP edgegpu_x_total back\\\\slash\\nline\n\
             # TYPE edgegpu_x_total counter\n\
             edgegpu_x_total{a=\"b\"} 3\n\
             edgegpu_x_total NaN\n\
             edgegpu_x_total +Inf\n\
             edgegpu_x_total -Inf\n\
             edgegpu_x_total 0.125\n"
        );
    }

    #[test]
    fn names() {
        assert!(is_metric_name("DCGM_FI_DEV_GPU_UTIL"));
        assert!(is_metric_name("a:b_c"));
        assert!(!is_metric_name("1abc"));
        assert!(!is_metric_name("a-b"));
        assert!(!is_metric_name(""));
        assert!(is_label_name("UUID"));
        assert!(!is_label_name("a:b"));
    }
}
