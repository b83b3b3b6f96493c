//! `edgegpu-dra-driver`: a Dynamic Resource Allocation driver (`resource.k8s.io` `v1`, GA in
//! Kubernetes 1.34, or the `v1beta2`/`v1beta1` of 1.33/1.32: [`api_versions`]) for the devices
//! of one node: a Jetson's integrated GPU, its DLA cores and PVA, discrete GPUs (whole or shared
//! by memory) and MIG devices (and their GPU whole, with shared counters).
//!
//! Three sides, each in one place:
//! - [`kubelet`]: everything facing the kubelet — registration through the plugin watcher,
//!   the DRA gRPC services (v1, v1beta1), device health. It calls a [`kubelet::Driver`] and
//!   knows nothing about GPUs.
//! - [`api_versions`], [`slices`] and [`claims`]: everything facing the API server — the node's ResourceSlices,
//!   the ResourceClaims the kubelet asks to prepare. Through `edgegpu-apiclient`, the
//!   labeller's client.
//! - [`inventory`], [`prepare`], [`cdi`], [`checkpoint`], [`serialize`], [`sharing`],
//!   [`mps_daemon`]: the node — which devices exist and what users select them by (the node
//!   library's discovery, the same facts as the node labels), what a prepared claim gets (a CDI
//!   spec per claim), what survives a restart and is shared with the other pod of a rolling
//!   update, the opaque sharing configuration claims carry, the MPS control daemon MPS claims
//!   join.
//!
//! [`run`] wires them; [`cli`] is the command line.

pub mod api_versions;
pub mod cdi;
pub mod checkpoint;
pub mod claims;
pub mod cli;
pub mod inventory;
pub mod kubelet;
pub mod mps_daemon;
pub mod prepare;
pub mod run;
pub mod serialize;
pub mod sharing;
pub mod slices;

/// The driver's name: the `driver` of its ResourceSlices and DeviceClass selectors, the
/// domain of its device attributes (`edgegpu.io/type`), the name it registers with the
/// kubelet under, and the vendor of its CDI devices.
pub const DRIVER_NAME: &str = edgegpu_platform::DRA_DRIVER_NAME;
