//! The DRA driver's integration tests, one module per file, linked into one test binary.

mod api_common;

mod claims;
mod driver;
mod kubelet_side;
mod node_side;
mod slices;
mod versions;
