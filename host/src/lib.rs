//! The host tree edgegpu's node-side programs read and write, and the CDI specs made from it:
//! what `edgegpu-node-setup` and the DRA driver share, so that neither program imports the
//! other.
//!
//! - [`root`]: the host's files under `--root`, read without following links out of it.
//! - [`fsops`]: atomic writes (temporary file, fsync, rename) with backups.
//! - [`flock`]: lock files, exclusive and shared (node-setup's run lock, the node programs'
//!   ownership, the DRA driver's serialisation across its instances).
//! - [`cdi`]: the CDI spec of the node's GPUs and engines, generated from the driver's files
//!   (`edgegpu-node-setup cdi generate`, and the DRA driver's per-claim specs).
//! - [`tegra`]: which Jetson this is (generation, module, L4T release), from its files.
//! - [`error`]: what stops a read or a write, and the exit code each maps to.

pub mod cdi;
pub mod error;
pub mod flock;
pub mod fsops;
pub mod root;
pub mod tegra;
