//! `edgegpu-node-setup`: wires the NVIDIA container runtime into k3s, containerd or docker
//! on one node, or (`--cdi`) turns on their own CDI injection instead. Plan first, then
//! write atomically with backups; `check` and `revert`.
//!
//! Module map: [`effective`] (what the services actually load: units with drop-ins, k3s's
//! settings, containerd imports, dockerd flags, what is installed, and from those the runtime
//! and CDI each engine uses), [`mode`] (the ways of wiring the runtime in), [`detect`] (which
//! mode, and why), [`plan`] (compute every change in memory; `plan::cdi` for CDI mode), [`ops`]
//! (write / revert), [`formats`] (one module per file format: systemd unit, daemon.json,
//! containerd TOML and k3s's Go templates, k3s YAML), [`state`] (manifest and backups),
//! [`lock`] (one run at a time), [`restart`] (systemctl, injectable), [`commands`] (each
//! command's outcome, shown as text or JSON), [`program`] (the whole program as a function),
//! [`runtime_spec`] (the runtime to register), [`doctor`] (which link of a GPU pod's chain is
//! broken, the support bundle).
//! The `--root` tree, atomic writes, errors and the CDI spec generator (`cdi generate`) are
//! the `edgegpu-host` library's, which the DRA driver uses too.

pub mod cli;
pub mod commands;
pub mod detect;
pub mod doctor;
pub mod effective;
pub mod formats;
pub mod lock;
pub mod mode;
pub mod ops;
pub mod plan;
pub mod program;
pub mod restart;
pub mod runtime_spec;
pub mod state;

pub use edgegpu_host::error::{exit_code, SetupError};
pub use program::{run, run_with};
pub use runtime_spec::RuntimeSpec;
