//! The library under edgegpu's node-side programs: what the device plugin, the DRA driver
//! and the labeller must read the same way, so that one value never means one thing to one
//! program and another to the next. Programs depend on it; it depends on no program.
//!
//! - Facts of the node: [`gpu`] (the device model, discovery, health and sensors per
//!   platform; Jetson facts from the `edgegpu-platform` table), [`engines`] (DLA and PVA),
//!   [`facts`] (the node's facts as typed values), [`power`] (a Jetson's power mode, clocks and
//!   thermal limits), [`snapshot`] (one discovery per round, with
//!   its facts), [`labels`] (the facts as GPU Feature Discovery's labels).
//! - What the node serves: [`config`] (the config file and flags), [`serving`] (the plan of
//!   each round: units, sharing, limits, health tables), [`mps`] (MPS paths, plan, status
//!   and the companion that runs the control daemons), [`quantity`], [`resource_name`].
//! - Agent plumbing every long-lived program uses: [`runtime`], [`logging`], [`shutdown`],
//!   [`ownership`] (which program serves which device kind), [`registration`] (the kubelet
//!   plugin watcher's `Registration` service), [`socket`] (a bound socket known
//!   by its inode, removed only while it is ours), [`authority`] (old kubelets' HTTP/2
//!   `:authority`).

// `unsafe` only in gpu/nvml_raw.rs (NVML MIG calls nvml-wrapper lacks), mps/control.rs and
// power/policy.rs (the pre-exec hooks), each block with a `// SAFETY:` comment (clippy denies one without).

pub mod authority;
pub mod config;
pub mod engines;
pub mod facts;
pub mod gpu;
pub mod labels;
pub mod logging;
pub mod mps;
pub mod ownership;
pub mod power;
pub mod quantity;
pub mod registration;
pub mod resource_name;
pub mod rounds;
pub mod runtime;
pub mod serving;
pub mod shutdown;
pub mod snapshot;
pub mod socket;
