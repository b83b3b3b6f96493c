//! node-setup's log lines (stderr) carry no ANSI colour codes when stderr is not a terminal:
//! the node-setup pod's log and a systemd unit's journal are pipes.

use crate::common;

use common::{containerd_host, run_env};

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let host = containerd_host();
    // --root other than /: nothing is restarted; the written files are logged at info.
    // NO_COLOR empty allows colours (no-color.org), whatever the environment of the tests says.
    let out = run_env(
        &host,
        &["apply"],
        &[("EDGEGPU_LOG", "info"), ("NO_COLOR", "")],
    );
    assert!(
        out.stderr.contains(" INFO ") && out.stderr.contains("wrote"),
        "no log line (exit {}):\n{}",
        out.code,
        out.stderr
    );
    assert!(
        !out.stderr.contains('\u{1b}'),
        "escape codes in a piped log: {:?}",
        out.stderr
    );
}
