//! The multi-call binary starts the right program by the name it runs as and by subcommand,
//! and refuses a name it does not know.

use edgegpu_testkit::process::{binary_command, program};

fn run(path: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = binary_command(path).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_link_runs_the_program_it_is_named_after() {
    for (name, first_line) in [
        ("edgegpu-device-plugin", "edgegpu-device-plugin "),
        ("edgegpu-dra-driver", "edgegpu-dra-driver "),
        ("edgegpu-labeller", "edgegpu-labeller "),
    ] {
        let (code, stdout, stderr) = run(&program(name), &["--version"]);
        assert_eq!(code, 0, "{name} --version: {stderr}");
        assert!(
            stdout.starts_with(first_line),
            "{name} --version printed {stdout:?}"
        );
    }
}

#[test]
fn a_subcommand_runs_the_same_program_with_its_own_help() {
    let binary = env!("CARGO_BIN_EXE_edgegpu");
    for (subcommand, name, flag) in [
        (
            "device-plugin",
            "edgegpu-device-plugin",
            "--device-plugin-path",
        ),
        ("dra-driver", "edgegpu-dra-driver", "--node-name"),
        ("labeller", "edgegpu-labeller", "--kind-only"),
    ] {
        let (code, via_subcommand, stderr) = run(binary.as_ref(), &[subcommand, "--help"]);
        assert_eq!(code, 0, "edgegpu {subcommand} --help: {stderr}");
        assert!(
            via_subcommand.contains(flag),
            "edgegpu {subcommand} --help: {via_subcommand}"
        );
        // Word for word the help the program prints under its own name.
        let (_, via_link, _) = run(&program(name), &["--help"]);
        assert_eq!(via_subcommand, via_link, "edgegpu {subcommand} --help");
    }
    // A program's own subcommand after the program's.
    let (code, stdout, stderr) = run(
        binary.as_ref(),
        &["device-plugin", "mps-control-daemon", "--help"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("--mps-root"), "{stdout}");
}

#[test]
fn the_binary_itself_lists_its_programs_and_refuses_unknown_ones() {
    let binary = env!("CARGO_BIN_EXE_edgegpu");
    let (code, stdout, _) = run(binary.as_ref(), &["--help"]);
    assert_eq!(code, 0);
    for name in [
        "device-plugin",
        "dra-driver",
        "labeller",
        "edgegpu-device-plugin",
    ] {
        assert!(stdout.contains(name), "--help lacks {name}: {stdout}");
    }
    let (code, stdout, _) = run(binary.as_ref(), &["--version"]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("edgegpu 0."), "{stdout}");

    let (code, _, stderr) = run(binary.as_ref(), &["node-setup"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unknown program 'node-setup'") && stderr.contains("dra-driver"),
        "{stderr}"
    );
    let (code, _, stderr) = run(binary.as_ref(), &[]);
    assert_eq!(code, 2, "no program named: {stderr}");
    assert!(stderr.contains("Usage: edgegpu <PROGRAM>"), "{stderr}");
}
