//! The plugin's integration tests, one module per file, linked into one test binary.
//! `restarts.rs` stays a binary of its own: it counts this process's open files and threads.

mod common;
mod gpu_common;

mod allocate;
mod authority;
mod cdi_names;
mod cli;
mod config;
mod discovery;
mod engines;
mod health;
mod labels;
mod lifecycle;
mod limits;
mod metrics;
mod mig;
mod mps_companion;
mod platforms;
mod registration;
mod sharing;
