//! Everything that faces the hardware: what a GPU is ([`Gpu`], [`MigDevice`], [`Platform`]),
//! how the GPUs of this host are found ([`discovery`], per platform) and how their health is
//! watched ([`health`], per platform), where a Jetson GPU is in sysfs ([`sysfs`]) and what it
//! measures right now ([`sensors`]: load, clocks, temperature, power, memory). Jetson facts
//! come from one table per generation, the `edgegpu-platform` crate; [`nvml_raw`] holds the
//! NVML MIG calls nvml-wrapper lacks. Nothing here knows about the kubelet or about allocation.

pub mod discovery;
pub mod health;
pub mod nvml_raw;
pub mod sensors;
pub mod sysfs;

pub use discovery::{under_root, Gpu, MigDevice, Platform};
