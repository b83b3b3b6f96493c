//! Builds the advertised [`Resource`] from the host: discovery, health and sharing.

use std::path::Path;
use std::sync::Arc;

use crate::config::GpuArgs;
use crate::resource::Resource;

/// Detects the GPUs under `root` and returns the resource to serve.
pub async fn build_resource(
    _root: &Path,
    _resource_name: &str,
    _args: &GpuArgs,
) -> anyhow::Result<Arc<dyn Resource>> {
    anyhow::bail!("GPU discovery is not built yet")
}
