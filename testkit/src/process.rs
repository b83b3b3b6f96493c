//! Starting the project's own binaries from tests, also when the tests themselves run
//! under an emulator (aarch64 test suite under qemu-user, where the kernel cannot exec a
//! foreign-architecture binary without binfmt_misc).

use std::path::Path;
use std::process::Command;

/// Environment variable holding the command prefix that runs a target binary on this host,
/// e.g. `qemu-aarch64-static -L /usr/aarch64-linux-gnu`. `scripts/test.sh` sets it for the
/// cross-architecture test run; unset means "run natively".
pub const RUNNER_ENV: &str = "EDGEGPU_TEST_RUNNER";

/// A [`Command`] that runs the binary at `path`, through the emulator named in
/// [`RUNNER_ENV`] when one is set.
pub fn binary_command(path: impl AsRef<Path>) -> Command {
    let runner = std::env::var(RUNNER_ENV).unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(path.as_ref());
            cmd
        }
        None => Command::new(path.as_ref()),
    }
}
