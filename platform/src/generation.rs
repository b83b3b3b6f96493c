//! The shape of a Jetson generation's entry: the types [`crate::GENERATIONS`] is made of.
//! Apart from the crate root so that the table (`table.rs`) and the root's lookups over it
//! both depend on these types, and the table not on the root that re-exports it.

/// Everything known about one Jetson SoC generation.
///
/// Every list is in preference order where order matters. Facts not known for a generation
/// are empty lists or `None`, never guesses.
pub struct Generation {
    /// Short SoC name, unique in the table: `T234`.
    pub soc: &'static str,
    /// Human name: `Orin (T234)`.
    pub name: &'static str,
    /// The modules built on this SoC (part numbers of `/proc/device-tree/compatible`).
    pub modules: &'static [Module],
    /// L4T major releases that support this generation, ascending.
    pub l4t_majors: &'static [u32],
    /// How a host of this generation is recognised.
    pub detect: Detect,
    /// What CUDA reports for the integrated GPU.
    pub cuda: Cuda,
    /// What NVML answers for the integrated GPU; `None` where no release ships a real NVML.
    pub nvml: Option<Nvml>,
    /// Device nodes a CUDA container needs; `*` / `?` glob one path component. Nodes missing
    /// on a host are skipped, so the list may name nodes only some boards have.
    pub container_nodes: &'static [&'static str],
    /// Device nodes without which CUDA reports `CUDA_ERROR_NO_DEVICE`: their loss makes the
    /// GPU unhealthy.
    pub required_nodes: &'static [&'static str],
    /// Where the GPU shows up in sysfs.
    pub sysfs: GpuSysfs,
    /// `type` of the thermal zone(s) that measure the GPU
    /// (`/sys/class/thermal/thermal_zone*/type`), in preference order.
    pub thermal_zones: &'static [&'static str],
    /// INA3221 power monitor rails, per module.
    pub power_rails: &'static [PowerRails],
    /// Whether CUDA MPS (GPU sharing with per-client limits) can run on this generation.
    pub mps: Mps,
}

/// CUDA MPS on a Jetson. Tegra runs only Volta MPS (no pre-Volta MPS, no compute-mode
/// change, no `-multiuser-server`, no CUDA IPC between clients: NVIDIA's MPS documentation,
/// "When to use MPS" / "Considerations"), and the control binary ships with L4T's CUDA
/// utilities only from some release on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mps {
    /// This GPU cannot run MPS: the reason, for the refusal message.
    Unsupported(&'static str),
    /// Volta MPS. `binary_since_l4t`: the first L4T release (major, minor) whose CUDA
    /// utilities package ships `nvidia-cuda-mps-control`; a host without the binary cannot
    /// run MPS, whatever its release.
    Volta { binary_since_l4t: (u32, u32) },
}

/// A module (board) family: `p3767` → `Jetson Orin NX`.
pub struct Module {
    /// Part number without the SKU: `p3767`.
    pub part: &'static str,
    pub product: &'static str,
    /// SKUs sold under another product name: (`0003`, `Jetson Orin Nano`).
    pub sku_products: &'static [(&'static str, &'static str)],
}

/// The signals that name the generation (see [`host`] for the files they are read from).
pub struct Detect {
    /// SoC token of `/proc/device-tree/compatible` (`nvidia,tegra234` → `tegra234`); also the
    /// first dash token of `nvidia,dtsfilename`.
    pub compatible: &'static str,
    /// `tegra_chip_id` of the `tegra_fuse` module (and of `/sys/devices/soc0/soc_id`).
    pub chip_id: u32,
    /// L4T major releases that support only this generation, so `/etc/nv_tegra_release`
    /// alone names it. Releases shared by several generations are not listed.
    pub l4t_majors_only_here: &'static [u32],
    /// A host file whose existence alone names the generation.
    pub marker_file: Option<&'static str>,
}

/// CUDA's view of the integrated GPU.
pub struct Cuda {
    /// Compute capability, by the first CUDA version that reports it (ascending).
    pub capability: &'static [Capability],
    /// `cuDeviceGetName`; `None` where not known.
    pub device_name: Option<&'static str>,
}

/// A compute capability reported from CUDA `since` (major, minor) on.
pub struct Capability {
    pub since: (u32, u32),
    pub major: u32,
    pub minor: u32,
}

/// NVML on a Jetson: present from some L4T release on, with few queries supported.
pub struct Nvml {
    /// How NVML names the integrated GPU.
    pub name: NameMatch,
    /// What the driver's NVML answers, per L4T major release that ships a real
    /// `libnvidia-ml.so.1` (ascending; releases before the first have none).
    pub releases: &'static [NvmlAnswers],
}

/// The kernel driver behind the integrated GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuDriver {
    /// NVIDIA's Tegra `nvgpu` driver (`/dev/nvhost-*`, `/dev/nvgpu/igpu0/*`).
    Nvgpu,
    /// The open GPU kernel modules (OpenRM: `/dev/nvidia0`, `/dev/nvidiactl`, procfs
    /// `/proc/driver/nvidia`).
    OpenRm,
}

/// What one release's NVML answers for the integrated GPU: `true` = a value, `false` =
/// `NVML_ERROR_NOT_SUPPORTED`. Identity (count, handle, name) always answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlAnswers {
    /// L4T major release these answers are from.
    pub l4t_major: u32,
    /// The driver NVML sits on in this release.
    pub driver: GpuDriver,
    /// `nvmlDeviceGetUUID`.
    pub uuid: bool,
    /// `nvmlDeviceGetMemoryInfo`.
    pub memory_info: bool,
    /// `nvmlDeviceGetPciInfo`.
    pub pci_info: bool,
    /// `nvmlDeviceGetUtilizationRates`.
    pub utilization: bool,
    /// `nvmlDeviceGetTemperature` (GPU sensor).
    pub temperature: bool,
    /// `nvmlDeviceGetPowerUsage`.
    pub power: bool,
    /// `nvmlDeviceGetClockInfo`.
    pub clocks: bool,
    /// Critical XID events can be registered (`nvmlDeviceRegisterEvents`).
    pub xid_events: bool,
    /// `nvmlDeviceGetMigMode` answers: the driver offers MIG on this GPU.
    pub mig: bool,
}

impl Nvml {
    /// First L4T major release with a real NVML.
    pub fn since_l4t(&self) -> u32 {
        self.releases.first().map_or(u32::MAX, |r| r.l4t_major)
    }

    /// What NVML answers on L4T major release `l4t_major` (the latest entry not newer than
    /// it); `None` before NVML shipped.
    pub fn answers(&self, l4t_major: u32) -> Option<&NvmlAnswers> {
        self.releases
            .iter()
            .rev()
            .find(|r| r.l4t_major <= l4t_major)
    }
}

/// A rule matching a device name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameMatch {
    Exact(&'static str),
    Contains(&'static str),
}

impl NameMatch {
    pub fn matches(self, name: &str) -> bool {
        match self {
            NameMatch::Exact(s) => name == s,
            NameMatch::Contains(s) => name.contains(s),
        }
    }
}

/// The GPU's sysfs files.
pub struct GpuSysfs {
    /// `of_node/name` of the GPU device behind a `/sys/class/devfreq/*` entry.
    pub of_node_names: &'static [&'static str],
    /// The GPU driver has a `load` file (per-mille busy) in its device directory.
    pub load_file: bool,
    /// Known GPU locations, tried when the generic devfreq scan finds nothing.
    pub known_dirs: &'static [KnownGpuDir],
    /// Names of the GPU's entries in `/sys/class/devfreq`.
    pub devfreq_names: &'static [&'static str],
}

/// One known GPU location: its `load` file (if the driver has one) and its devfreq directory.
pub struct KnownGpuDir {
    /// L4T major releases whose kernel puts the GPU here.
    pub l4t_majors: &'static [u32],
    pub load: Option<&'static str>,
    pub devfreq: &'static str,
}

/// The rails of one INA3221 power monitor.
pub struct PowerRails {
    /// Module part numbers (`p3767`) these rails belong to; empty: every module.
    pub modules: &'static [&'static str],
    /// Kernel driver under `/sys/bus/i2c/drivers/`: `ina3221x` (L4T's IIO driver, r32) or
    /// `ina3221` (mainline hwmon driver, r34 on).
    pub driver: &'static str,
    /// Rail labels (`rail_name_N` for `ina3221x`, `inN_label` for `ina3221`).
    pub labels: &'static [&'static str],
    /// The label of the rail that feeds the GPU (alone or shared with other units).
    pub gpu_rail: Option<&'static str>,
    /// The GPU rail feeds the GPU alone, so its power is the GPU's power (what
    /// `DCGM_FI_DEV_POWER_USAGE` means); false where it also feeds CPU, SoC or CV units.
    pub gpu_rail_is_gpu_only: bool,
}

impl PartialEq for Generation {
    fn eq(&self, other: &Self) -> bool {
        self.soc == other.soc
    }
}

impl Eq for Generation {}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}
