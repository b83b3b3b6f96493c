//! Test doubles at the operating-system boundary, shared by the crates' tests and by the
//! README's simulation command. Never shipped in a release build or an image.

pub mod apiserver;
pub mod bench;
pub mod board;
pub mod cuda;
pub mod fakelib;
pub mod host;
pub mod http2;
pub mod kubelet;
pub mod l4t;
pub mod mps;
pub mod names;
pub mod nodehost;
pub mod pod_resources;
pub mod process;
