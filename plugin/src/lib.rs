//! `edgegpu-device-plugin`: a kubelet device plugin (API v1beta1) that advertises NVIDIA GPUs.

pub mod config;
pub mod gpu;
pub mod resource;
