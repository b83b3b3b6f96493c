//! Fake host roots for the device plugin's `--root` and node-setup's `cdi generate`: a Jetson
//! per generation and release (Nano on L4T r32, Xavier r35, Orin r36/JetPack 6, Orin
//! r39/JetPack 7.2, Thor r38/JetPack 7) with the files docs/platforms.md lists, and a
//! discrete-GPU server. The container CSV lists and the files they name are in
//! [`crate::l4t`]. NVML is the fake `libnvidia-ml.so.1` (`fakes/nvml.c`) copied into the
//! root and told what the board's driver answers (NotSupported included); OpenRM hosts also get
//! the driver's procfs (`/proc/driver/nvidia/gpus/*/information`, MIG capabilities).
//!
//! Device nodes are plain files (tests run unprivileged); the plugin only checks that they
//! exist. Every root is its own temporary directory and its own copy of the fake NVML, so
//! tests in one process never share NVML state.
//!
//! The root itself and its file primitives are in `fake_host.rs`; each board's facts
//! (what its files hold) in `board_facts.rs`; writing a Jetson and setting its sensors in
//! `jetson.rs`; discrete GPUs, MIG and installing the fake NVML in `discrete.rs`; what the
//! installed NVML answers at run time in `nvml_state.rs`; the kubelet's pod state (cgroups,
//! device manager checkpoint) in `pod_state.rs`.

mod board_facts;
mod discrete;
mod fake_host;
mod jetson;
mod nvml_state;
mod pod_state;

pub use crate::board::Board;
pub use board_facts::{FakeEngine, PowerMonitor};
pub use discrete::{FakeGpu, FakeMig};
pub use fake_host::FakeHost;
pub use pod_state::{CgroupDriver, CgroupVersion, CheckpointEntry, CheckpointShape};
