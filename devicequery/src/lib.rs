//! `devicequery`: a deviceQuery-compatible CUDA probe that loads the CUDA driver library at run
//! time (no CUDA runtime, no toolkit at build time), for verification pods on GPU nodes.
//!
//! Flow: print the header, [`probe`] the driver, evaluate the [`checks`], run the allocation
//! check of [`limits`] if one was asked for, render [`text`] or [`json`]; on a Jetson, the
//! [`power`] mode line before the verdict. The verdict is the
//! last stdout line (`Result = PASS`/`FAIL`) and the exit status.

pub mod checks;
pub mod cli;
pub mod cores;
pub mod cuda_error;
pub mod cuda_version;
pub mod driver;
pub mod json;
pub mod layout;
pub mod limits;
pub mod power;
pub mod probe;
pub mod text;

use std::ffi::OsString;
use std::io::Write;

use clap::Parser;

/// Runs devicequery with `args` (including argv[0]); returns the exit status.
pub fn run(args: Vec<OsString>) -> i32 {
    // deviceQuery echoes argv[0] as invoked in its first line.
    let argv0 = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_else(|| "devicequery".to_string());
    let cli = match cli::Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if !cli.json {
        // Out before the driver is touched, like the sample, so a hang or crash in libcuda
        // still shows which program was running.
        let _ = out.write_all(text::header(&argv0).as_bytes());
        let _ = out.flush();
    }
    let (driver, probe) = probe::load_and_probe(cli.probed_device());
    let mut checks = match &probe {
        Ok(report) => checks::evaluate(&cli.requirements(), report),
        Err(_) => Vec::new(),
    };
    let mut written = Ok(());
    if !cli.json {
        // The report first: an allocation check that hangs or holds still shows it.
        written = out
            .write_all(text::report(&probe).as_bytes())
            .and_then(|()| out.flush());
    }
    let limits = match (cli.mode(), &driver, &probe) {
        (Some(mode), Some(driver), Ok(report)) => report.devices.first().map(|device| {
            let environment = limits::Environment::from_process();
            let mut sink = std::io::sink();
            let lines: &mut dyn Write = if cli.json { &mut sink } else { &mut out };
            let found = limits::run(mode, driver, device, &environment, lines);
            checks.push(found.outcome());
            found
        }),
        _ => None,
    };
    let passed = probe.is_ok() && checks.iter().all(|c| c.passed);
    let written = written.and_then(|()| {
        if cli.json {
            let document = json::render(&probe, &checks, limits.as_ref());
            serde_json::to_writer_pretty(&mut out, &document)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"))
        } else {
            let power = power::PowerState::read(&cli.root)
                .map(|p| text::own_line_text(&p.line()))
                .unwrap_or_default();
            out.write_all(power.as_bytes())
                .and_then(|()| out.write_all(text::verdict(&probe, &checks).as_bytes()))
        }
    });
    let flushed = written.and_then(|()| out.flush());
    match (flushed, passed) {
        (Ok(()), true) => 0,
        _ => 1,
    }
}
