//! The ways node-setup wires the runtime in. `detect` picks one; the effective views
//! (`effective::runtime`, `effective::cdi`) and the planners take it. A module of its own
//! so that those views need nothing of the choosing, which reads them.

/// The three ways of wiring the runtime in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    K3sDefaultRuntime,
    Containerd(ContainerdTarget),
    Docker,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerdTarget {
    /// The system containerd's config (with its imports).
    System,
    /// k3s's own containerd: its templates in the data dir.
    K3sTemplate,
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::K3sDefaultRuntime => "k3s-default-runtime",
            Mode::Containerd(_) => "containerd",
            Mode::Docker => "docker",
        }
    }
}
