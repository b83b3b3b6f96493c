//! What one read of a GPU's sensors gives. Apart from `mod.rs` so that the NVML and Tegra
//! readers fill these in without depending on the module that drives them.

/// One reading of one GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Busy time, percent.
    pub utilization_percent: Option<f64>,
    /// Graphics/SM clock, MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Memory clock (the EMC on a Jetson), MHz.
    pub memory_clock_mhz: Option<f64>,
    /// GPU temperature, degrees Celsius.
    pub temperature_celsius: Option<f64>,
    /// Power drawn by the GPU alone, watts.
    pub power_watts: Option<f64>,
    /// Dedicated GPU memory used and free, MiB (discrete GPUs).
    pub framebuffer_used_mib: Option<f64>,
    pub framebuffer_free_mib: Option<f64>,
    /// Jetson: the memory controller's load, percent.
    pub emc_utilization_percent: Option<f64>,
    /// Jetson: every labelled INA3221 rail.
    pub rails: Vec<RailReading>,
    /// Jetson: memory held by the GPU's allocator (`NvMapMemUsed`) and the memory it shares
    /// with the CPU (`MemTotal`), bytes.
    pub shared_memory_used_bytes: Option<u64>,
    pub shared_memory_total_bytes: Option<u64>,
}

/// One power rail.
#[derive(Debug, Clone, PartialEq)]
pub struct RailReading {
    pub label: String,
    pub watts: f64,
    /// The rail feeds the GPU (alone or together with other units).
    pub feeds_gpu: bool,
}
