//! The runtime node-setup registers: its name, its path and whether it becomes the default.

/// The runtime to register.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeSpec {
    pub name: String,
    /// Absolute path on the booted host.
    pub path: String,
    pub set_default: bool,
}
