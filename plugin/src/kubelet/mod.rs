//! Everything that faces the kubelet. It serves one [`Resource`](crate::resource::Resource)
//! and knows nothing about GPUs.
//!
//! - [`lifecycle`]: one *generation* per registration — bind a fresh socket, serve, register —
//!   and a new generation after every kubelet restart ([`restart_watch`] tells when).
//! - [`server`]: the five `DevicePlugin` RPCs.
//! - [`registration`]: `Register` on `kubelet.sock`, with backoff; [`plugin_watcher`]: the
//!   `--plugins-registry` alternative.
//! - [`socket`]: unique socket names and removal of only what this process bound.
//! - [`stats`]: registration counters for the plugin's own metrics.
//! - [`pod_resources`]: which container holds which device ID (the kubelet's pod-resources
//!   API), for per-pod metrics; [`checkpoint`]: the same by pod UID (the device manager's
//!   checkpoint file); [`pod_cgroup`]: which pod UID a process belongs to (the cgroups the
//!   kubelet names), for per-pod GPU memory.
//! - `edgegpu_node::authority`: lets kubelets older than 1.26 in (their `:authority` is a
//!   socket path); the DRA driver's sockets use it too.

pub mod checkpoint;
pub mod lifecycle;
pub mod plugin_watcher;
pub mod pod_cgroup;
pub mod pod_resources;
pub mod registration;
pub mod restart_watch;
pub mod server;
pub mod socket;
pub mod stats;
