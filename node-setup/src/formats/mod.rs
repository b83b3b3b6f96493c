//! The file formats node-setup reads and edits, one module each. Every editor takes the
//! current text of one file and returns an [`Edit`]: the new text, or `None` when the file
//! already says what is needed. Editors never touch the disk; `plan` decides what to write.

pub mod containerd;
pub mod daemon_json;
pub mod go_template;
pub mod k3s_yaml;
pub mod unit;

/// The outcome of editing one file in memory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Edit {
    /// New content; `None` when nothing needs to change.
    pub new: Option<String>,
    /// What the operator should know about this file (printed as `note:` lines).
    pub notes: Vec<String>,
}

impl Edit {
    /// No change.
    pub fn unchanged() -> Edit {
        Edit::default()
    }

    /// `new` unless it equals `old` (then no change).
    pub fn replace(old: Option<&str>, new: String) -> Edit {
        Edit {
            new: (old != Some(new.as_str())).then_some(new),
            notes: Vec::new(),
        }
    }
}
