//! Writing to the output, for every renderer.

use std::io::Write;

/// Writes to the output. A reader that went away (`| head`) is no failure of the command,
/// whose effect does not depend on its output; other write errors are logged.
pub fn emit(out: &mut dyn Write, text: std::fmt::Arguments) {
    if let Err(e) = out.write_fmt(text) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            tracing::warn!(error = %e, "writing the output failed");
        }
    }
}

/// One line of output (see [`emit`]).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        $crate::commands::emit::emit($out, format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use say;
