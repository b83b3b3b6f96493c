//! What the services will actually load, as opposed to what one file says: systemd units
//! merged with their drop-ins, k3s's settings from its command line and config files,
//! containerd's config with its imports, dockerd's flags and daemon.json; [`inventory`]:
//! which of those are installed, and k3s's release ([`k3s_version`]). On top of those,
//! [`runtime`] and [`cdi`] say what each engine will use (the runtime, CDI) in a given
//! [`crate::mode::Mode`] and why it would not be what was asked for. `plan` decides from these views, and `check`
//! reports the effective runtime and where it comes from.

use std::fmt;

use serde::Serialize;

pub mod cdi;
pub mod containerd;
pub mod containerd_merge;
pub mod docker;
pub mod embedded;
pub mod engine;
pub mod inventory;
pub mod k3s;
pub mod k3s_template;
pub mod k3s_version;
pub mod packages;
pub mod runtime;
pub mod systemd;

/// Where a setting comes from, so that a refusal or a check can name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Source {
    /// A line of a configuration file (host path, 1-based line).
    File { file: String, line: usize },
    /// A command-line flag written in a file (a unit's ExecStart=, an environment file).
    Flag {
        file: String,
        line: usize,
        flag: String,
    },
    /// A containerd file that replaces the whole CRI plugin table of the files loaded
    /// before it (containerd before 2.0, `imports`) without setting this (1-based line
    /// of its CRI plugin table).
    Replaced { file: String, line: usize },
    /// Nothing sets it: the program's built-in default.
    Default { what: String },
}

impl Source {
    pub fn file(file: impl Into<String>, line: usize) -> Source {
        Source::File {
            file: file.into(),
            line,
        }
    }

    pub fn default(what: impl Into<String>) -> Source {
        Source::Default { what: what.into() }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File { file, line } => write!(f, "{file}:{line}"),
            Source::Flag { file, line, flag } => write!(f, "{file}:{line} (flag {flag})"),
            Source::Replaced { file, line } => write!(
                f,
                "{file}:{line} (its CRI plugin table replaces the earlier ones before containerd 2.0)"
            ),
            Source::Default { what } => write!(f, "{what}"),
        }
    }
}

/// A value and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    pub fn new(value: T, source: Source) -> Sourced<T> {
        Sourced { value, source }
    }
}
