//! `edgegpu`: the node-side glibc programs in one binary, as busybox and k3s ship theirs. They
//! share the node library (discovery, the runtime, the HTTP and gRPC stacks), so one binary
//! carries that code once instead of three times (docs/architecture.md, "One binary").
//!
//! The program is chosen by the name the binary runs as — the images, packages and the Yocto
//! layer install `edgegpu-device-plugin`, `edgegpu-dra-driver` and `edgegpu-labeller` as links
//! to it, so every manifest and unit keeps its command — or by a subcommand:
//! `edgegpu device-plugin --help`.
//!
//! The dispatch is written out rather than a clap subcommand tree: each program keeps its own
//! parser, help and errors unchanged whichever way it was started.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::ExitCode;

/// One program of the binary.
struct Program {
    /// The subcommand (`edgegpu device-plugin`).
    subcommand: &'static str,
    /// The name it is installed as, a link to this binary; also its argv\[0\] either way, so
    /// its help and errors name it as before.
    installed_as: &'static str,
    summary: &'static str,
    main: fn(Vec<OsString>) -> ExitCode,
}

const PROGRAMS: [Program; 3] = [
    Program {
        subcommand: "device-plugin",
        installed_as: "edgegpu-device-plugin",
        summary: "the kubelet device plugin (and its `mps-control-daemon` companion)",
        main: |args| edgegpu_plugin::main(args),
    },
    Program {
        subcommand: "dra-driver",
        installed_as: "edgegpu-dra-driver",
        summary: "the Dynamic Resource Allocation kubelet plugin",
        main: |args| edgegpu_dra::run::main(args),
    },
    Program {
        subcommand: "labeller",
        installed_as: "edgegpu-labeller",
        summary: "puts the node's GPU labels on its Node",
        main: |args| edgegpu_labeller::main(args),
    },
];

const VERSION: &str = env!("EDGEGPU_LONG_VERSION");

fn installed_as(name: &OsStr) -> Option<&'static Program> {
    PROGRAMS.iter().find(|p| name == p.installed_as)
}

fn by_subcommand(name: &OsStr) -> Option<&'static Program> {
    PROGRAMS
        .iter()
        .find(|p| name == p.subcommand || name == p.installed_as)
}

fn help() -> String {
    let mut text = String::from(
        "The edgegpu node programs in one binary.\n\n\
         Usage: edgegpu <PROGRAM> [ARGS]...\n       \
         <PROGRAM> [ARGS]...   (run through a link named after the program)\n\n\
         Programs:\n",
    );
    for p in &PROGRAMS {
        text.push_str(&format!(
            "  {:<15} {} (installed as {})\n",
            p.subcommand, p.summary, p.installed_as
        ));
    }
    text.push_str(
        "\nOptions:\n  -h, --help     Print help\n  -V, --version  Print version\n\n\
         `edgegpu <PROGRAM> --help` shows a program's own options.\n",
    );
    text
}

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let invoked = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .unwrap_or_default()
        .to_owned();
    if let Some(program) = installed_as(&invoked) {
        return (program.main)(args);
    }
    let Some(first) = args.get(1).cloned() else {
        eprint!("{}", help());
        return ExitCode::from(2);
    };
    if let Some(program) = by_subcommand(&first) {
        // argv[0] becomes the program's installed name: its help and errors read as before.
        args.splice(0..2, [OsString::from(program.installed_as)]);
        return (program.main)(args);
    }
    match first.to_str() {
        Some("-h" | "--help" | "help") => {
            print!("{}", help());
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("edgegpu {VERSION}");
            ExitCode::SUCCESS
        }
        _ => {
            let names: Vec<&str> = PROGRAMS.iter().map(|p| p.subcommand).collect();
            eprintln!(
                "edgegpu: unknown program '{}' (run as {}, or name one of: {})\n\n{}",
                first.to_string_lossy(),
                invoked.to_string_lossy(),
                names.join(", "),
                help()
            );
            ExitCode::from(2)
        }
    }
}
