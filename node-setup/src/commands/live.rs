//! What a command shows while it runs, before its outcome ([`Watch`]): apply's plan as
//! soon as it is made and a wait for the lock on the text output, and each restart on
//! stderr — at any log level, since a wait or a restart can take long or hang. With
//! `--output json` stdout holds the document alone: the plan is left to it, and the wait is
//! told on stderr.

use std::io::Write;
use std::time::Duration;

use super::emit::say;
use super::outcome::Watch;
use super::text;
use crate::cli::OutputFormat;
use crate::plan::Plan;

pub struct Live<'a> {
    /// The text output; nowhere with `--output json`.
    text: Box<dyn Write + 'a>,
    json: bool,
    err: &'a mut dyn Write,
}

impl<'a> Live<'a> {
    pub fn new(format: OutputFormat, out: &'a mut dyn Write, err: &'a mut dyn Write) -> Live<'a> {
        let text: Box<dyn Write + 'a> = match format {
            OutputFormat::Text => Box::new(out),
            OutputFormat::Json => Box::new(std::io::sink()),
        };
        Live {
            text,
            json: format == OutputFormat::Json,
            err,
        }
    }
}

/// The unit of `systemctl <args>` (or "systemd"), what it is doing and what it did.
fn restart_words(args: &[String]) -> (&str, &'static str, &'static str) {
    let unit = args.iter().skip(1).last().map_or("systemd", String::as_str);
    let (doing, done) = match args.first().map(String::as_str) {
        Some("daemon-reload") => ("reloading unit files", "unit files reloaded"),
        Some("try-reload-or-restart") => ("reloading", "reloaded"),
        _ => ("restarting", "restarted"),
    };
    (unit, doing, done)
}

impl Watch for Live<'_> {
    fn planned(&mut self, plan: &Plan) {
        text::describe(plan, &mut *self.text);
    }

    fn waiting(&mut self, message: &str) {
        say!(&mut *self.text, "{message}");
        if self.json {
            say!(self.err, "edgegpu-node-setup: {message}");
        }
    }

    fn restarting(&mut self, args: &[String]) {
        let (unit, doing, _) = restart_words(args);
        let command = format!("systemctl {}", args.join(" "));
        say!(
            self.err,
            "edgegpu-node-setup: {unit}: {doing} ({command}) ..."
        );
    }

    fn restarted(
        &mut self,
        args: &[String],
        took: Duration,
        result: &std::result::Result<(), String>,
    ) {
        let (unit, _, done) = restart_words(args);
        let took = took.as_secs_f64();
        match result {
            Ok(()) => say!(
                self.err,
                "edgegpu-node-setup: {unit}: {done} in {took:.1} s"
            ),
            Err(e) => say!(
                self.err,
                "edgegpu-node-setup: {unit}: FAILED after {took:.1} s: {e}"
            ),
        }
    }
}
