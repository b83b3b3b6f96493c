//! The commands and how their results are shown: text for people, or (`--output
//! json`) one JSON document on stdout for scripts. Restart progress goes to stderr.
//!
//! Each command decides and does its work in `outcome`, which returns a typed result and
//! prints nothing; `text` and `json` render that result, `live` what is shown while the
//! command runs (the plan before a wait for the lock, the restarts).

use std::io::Write;

use crate::cli::{CdiCommand, Cli, Command, OutputFormat};
use crate::ops::Restarts;
use crate::plan;
use crate::restart::{self, ServiceManager};
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::error::{exit_code, Result};
use edgegpu_host::root::HostRoot;

mod emit;
mod json;
mod live;
mod outcome;
mod text;

use emit::say;
use live::Live;
use outcome::{Stopped, Writing};

/// What the planner works from, out of the command line.
pub fn options(cli: &Cli) -> plan::Options {
    let g = &cli.global;
    plan::Options {
        host: HostRoot::new(&g.root),
        mode: g.mode,
        spec: RuntimeSpec {
            name: g.runtime_name.clone(),
            path: g.runtime_path.clone(),
            set_default: g.set_default(),
        },
        force: g.force,
        k3s_version: g.k3s_version.clone(),
        cdi: g.cdi,
    }
}

/// Whether services get restarted for `cli`: only on the live system (`--root /`) and
/// without `--no-restart`.
pub fn restarts<'a>(cli: &Cli, manager: &'a mut dyn ServiceManager) -> Restarts<'a> {
    let live = HostRoot::new(&cli.global.root).is_live_system();
    match restart::restart_blocked(live, cli.global.no_restart) {
        Some(why) => Restarts::Skip(why),
        None => Restarts::Run(manager),
    }
}

/// Runs one command. `out` gets the result (text or JSON), `err` the progress of
/// restarts.
pub fn run(cli: Cli, restarts: Restarts, out: &mut dyn Write, err: &mut dyn Write) -> Result<u8> {
    let opts = options(&cli);
    match cli.command {
        Command::Apply {
            dry_run,
            exit_code,
            output,
        } => {
            let ended = outcome::apply(&opts, dry_run, restarts, &mut Live::new(output, out, err));
            let doc =
                (output == OutputFormat::Json).then(|| json::RunDoc::applied(&ended, dry_run));
            if let (OutputFormat::Text, Ok(applied)) = (output, &ended) {
                text::applied(applied, out);
            }
            finish_writing(ended, exit_code, doc, out)
        }
        Command::Check { output } => match outcome::check(&opts) {
            Ok(checked) => {
                match output {
                    OutputFormat::Text => text::checked(&checked, out),
                    OutputFormat::Json => json::checked(&checked, out),
                }
                if let Some(why) = text::cannot_tell(&checked) {
                    say!(err, "edgegpu-node-setup: {why}");
                }
                Ok(checked.exit_code())
            }
            Err(e) => {
                if output == OutputFormat::Json {
                    json::error_doc("check", &e, out);
                }
                Err(e)
            }
        },
        Command::Revert {
            dry_run,
            exit_code,
            output,
        } => {
            let ended = outcome::revert(&opts, dry_run, restarts, &mut Live::new(output, out, err));
            let doc =
                (output == OutputFormat::Json).then(|| json::RunDoc::reverted(&ended, dry_run));
            if let (OutputFormat::Text, Ok(reverted)) = (output, &ended) {
                text::reverted(reverted, out);
            }
            finish_writing(ended, exit_code, doc, out)
        }
        Command::Doctor(args) => Ok(crate::doctor::run(opts, &args, out, err)),
        Command::Cdi {
            command: CdiCommand::Generate { output, format },
        } => edgegpu_host::cdi::run(&opts.host, output.as_deref(), format, out),
    }
}

/// How `apply` or `revert` ends: its exit code, or its error (a restart that failed after
/// writing is one too), and then its JSON document (`doc`, with `--output json`) carrying
/// that end. `--exit-code`: a dry run that would write exits 1 (like `git diff
/// --exit-code`), so that scripts can check for drift.
fn finish_writing(
    ended: std::result::Result<impl Writing, Stopped>,
    exit_code_flag: bool,
    doc: Option<json::RunDoc>,
    out: &mut dyn Write,
) -> Result<u8> {
    let result = match ended {
        Ok(done) if exit_code_flag && done.pending() => Ok(exit_code::CHANGES_PENDING),
        Ok(done) => done.into_restart_failed().map_or(Ok(exit_code::OK), Err),
        Err(stopped) => Err(stopped.error),
    };
    if let Some(doc) = doc {
        json::finish(doc, &result, out);
    }
    result
}
