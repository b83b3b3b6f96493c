//! GPU-side settings: discovery, device IDs, allocation strategies, health checks,
//! sharing, and the `--config` file (NVIDIA's `version: v1` shape).
//! Precedence: flag > environment variable > config file > built-in default.

/// Command-line flags (each with an environment variable) for the GPU side of the plugin.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GpuArgs {}
