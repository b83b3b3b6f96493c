//! The node-setup's integration tests, one module per file, linked into one test binary.

mod common;

mod cdi;
mod cdi_mode;
mod cli;
mod concurrency;
mod containerd_config;
mod containerd_imports;
mod daemon_json;
mod docker_reload;
mod doctor;
mod effective;
mod fuzz;
mod k3s_templates;
mod log_colour;
mod real_world;
mod safety;
mod scripting;
mod unit_edit;
