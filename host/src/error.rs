//! Errors that stop a run, and the exit code each one maps to.

use std::path::PathBuf;

/// Exit codes, documented in `--help` and docs/node-setup.md (a test checks that the
/// three tables agree).
pub mod exit_code {
    /// Success; for `check`: the node is fully configured.
    pub const OK: u8 = 0;
    /// `check`: something is missing (the node is not fully configured) or blocked.
    pub const NOT_CONFIGURED: u8 = 1;
    /// `apply --dry-run --exit-code`, `revert --dry-run --exit-code`: changes are
    /// pending (like `git diff --exit-code`). The same number as [`NOT_CONFIGURED`]:
    /// both say "the node is not as asked".
    pub const CHANGES_PENDING: u8 = 1;
    /// An invalid command line (clap's own code).
    pub const USAGE: u8 = 2;
    /// The host cannot be configured as asked, or cannot be told: a file that cannot be
    /// read or parsed, a missing runtime binary, nothing to configure, a conflicting
    /// setting. Nothing was written.
    pub const REFUSED: u8 = 3;
    /// Writing a file or restarting a service failed.
    pub const FAILED: u8 = 4;

    /// What `code` means, in the words of the exit-code table (for JSON output).
    pub fn meaning(code: u8) -> &'static str {
        match code {
            OK => "success",
            NOT_CONFIGURED => "not configured, blocked, or changes pending",
            USAGE => "invalid command line",
            REFUSED => "refused or cannot tell (a file cannot be read or parsed); nothing written",
            FAILED => "a write or a service restart failed",
            _ => "unknown",
        }
    }
}

/// A failure with enough context for the operator to fix it by hand.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A configuration file does not parse. `line`/`column` are 1-based.
    #[error("{}:{line}:{column}: {message}", file.display())]
    Malformed {
        file: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// The file parses but its content stops us (wrong type of a key, conflicting setting).
    #[error("{}: {message}", file.display())]
    Invalid { file: PathBuf, message: String },
    /// The requested configuration is impossible or unsafe on this host.
    #[error("{0}")]
    Refused(String),
    /// A file or directory the plan needs cannot be read (nothing was written yet).
    /// `file` is the host path, as the operator knows it.
    #[error("cannot read {file}: {source}{}", if source.kind() == std::io::ErrorKind::PermissionDenied { " (run as root)" } else { "" })]
    Unreadable {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing, removing or locking failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A service restart failed after the files were written.
    #[error("{0}")]
    Restart(String),
}

impl SetupError {
    pub fn exit_code(&self) -> u8 {
        match self {
            SetupError::Malformed { .. }
            | SetupError::Invalid { .. }
            | SetupError::Refused(_)
            | SetupError::Unreadable { .. } => exit_code::REFUSED,
            SetupError::Io { .. } | SetupError::Restart(_) => exit_code::FAILED,
        }
    }

    /// A file this user may not read (not root on a host with root-only files).
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, SetupError::Unreadable { source, .. }
            if source.kind() == std::io::ErrorKind::PermissionDenied)
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SetupError::Io {
            context: context.into(),
            source,
        }
    }

    pub fn unreadable(file: impl Into<String>, source: std::io::Error) -> Self {
        SetupError::Unreadable {
            file: file.into(),
            source,
        }
    }

    pub fn invalid(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        SetupError::Invalid {
            file: file.into(),
            message: message.into(),
        }
    }
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    // Count characters, not bytes, so the column matches what an editor shows.
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

pub type Result<T, E = SetupError> = std::result::Result<T, E>;
