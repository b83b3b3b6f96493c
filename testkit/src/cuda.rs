//! Configuring the fake CUDA driver (`fakes/cuda.c`) for one test: which devices it reports,
//! their attributes, the driver version, peer access, forced error codes, the memory a context
//! uses and whether MPS limits hold (the MPS defaults come from the fake daemon, [`crate::mps`]).
//!
//! The fake reads a small text file named by [`CONFIG_ENV`]; [`FakeCuda::write`] produces it and
//! [`FakeCuda::configure`] points a child process at it and at the library variant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable the fake library reads its configuration path from.
pub const CONFIG_ENV: &str = "EDGEGPU_FAKE_CUDA_CONFIG";

/// Library variants built by `build.rs` (pass to [`crate::fakelib::variant_dir`]).
pub mod variant {
    /// A current driver exporting every entry point.
    pub const CURRENT: &str = "cuda";
    /// A CUDA 10.2 driver (JetPack 4): no `cuDeviceGetUuid_v2`.
    pub const CUDA_10_2: &str = "cuda-10.2";
    /// A CUDA 9.0 driver: no `cuDeviceGetUuid` either.
    pub const CUDA_9_0: &str = "cuda-9.0";
    /// A library lacking `cuDeviceTotalMem_v2`, which devicequery requires.
    pub const NO_TOTAL_MEM: &str = "cuda-no-total-mem";
    /// The CUDA toolkit stub, installed as `libcuda.so`: every call returns 34.
    pub const STUB: &str = "cuda-stub";
}

/// `CUdevice_attribute` numbers, written from NVIDIA's `cuda.h` enum (kept separate from
/// devicequery's own table on purpose, so a wrong number on either side shows up in a test).
pub mod attr {
    pub const MAX_THREADS_PER_BLOCK: i32 = 1;
    pub const MAX_BLOCK_DIM_X: i32 = 2;
    pub const MAX_BLOCK_DIM_Y: i32 = 3;
    pub const MAX_BLOCK_DIM_Z: i32 = 4;
    pub const MAX_GRID_DIM_X: i32 = 5;
    pub const MAX_GRID_DIM_Y: i32 = 6;
    pub const MAX_GRID_DIM_Z: i32 = 7;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: i32 = 8;
    pub const TOTAL_CONSTANT_MEMORY: i32 = 9;
    pub const WARP_SIZE: i32 = 10;
    pub const MAX_PITCH: i32 = 11;
    pub const MAX_REGISTERS_PER_BLOCK: i32 = 12;
    pub const CLOCK_RATE: i32 = 13;
    pub const TEXTURE_ALIGNMENT: i32 = 14;
    pub const GPU_OVERLAP: i32 = 15;
    pub const MULTIPROCESSOR_COUNT: i32 = 16;
    pub const KERNEL_EXEC_TIMEOUT: i32 = 17;
    pub const INTEGRATED: i32 = 18;
    pub const CAN_MAP_HOST_MEMORY: i32 = 19;
    pub const COMPUTE_MODE: i32 = 20;
    pub const MAXIMUM_TEXTURE1D_WIDTH: i32 = 21;
    pub const MAXIMUM_TEXTURE2D_WIDTH: i32 = 22;
    pub const MAXIMUM_TEXTURE2D_HEIGHT: i32 = 23;
    pub const MAXIMUM_TEXTURE3D_WIDTH: i32 = 24;
    pub const MAXIMUM_TEXTURE3D_HEIGHT: i32 = 25;
    pub const MAXIMUM_TEXTURE3D_DEPTH: i32 = 26;
    pub const MAXIMUM_TEXTURE2D_LAYERED_WIDTH: i32 = 27;
    pub const MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: i32 = 28;
    pub const MAXIMUM_TEXTURE2D_LAYERED_LAYERS: i32 = 29;
    pub const SURFACE_ALIGNMENT: i32 = 30;
    pub const ECC_ENABLED: i32 = 32;
    pub const PCI_BUS_ID: i32 = 33;
    pub const PCI_DEVICE_ID: i32 = 34;
    pub const MEMORY_CLOCK_RATE: i32 = 36;
    pub const GLOBAL_MEMORY_BUS_WIDTH: i32 = 37;
    pub const L2_CACHE_SIZE: i32 = 38;
    pub const MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;
    pub const ASYNC_ENGINE_COUNT: i32 = 40;
    pub const UNIFIED_ADDRESSING: i32 = 41;
    pub const MAXIMUM_TEXTURE1D_LAYERED_WIDTH: i32 = 42;
    pub const MAXIMUM_TEXTURE1D_LAYERED_LAYERS: i32 = 43;
    pub const PCI_DOMAIN_ID: i32 = 50;
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub const MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: i32 = 81;
    pub const MANAGED_MEMORY: i32 = 83;
    pub const COMPUTE_PREEMPTION_SUPPORTED: i32 = 90;
    pub const COOPERATIVE_LAUNCH: i32 = 95;
    pub const COOPERATIVE_MULTI_DEVICE_LAUNCH: i32 = 96;
}

/// Device profiles: the attributes published deviceQuery outputs show, shared by the tests
/// that run devicequery (its own, and the plugin's MPS chain).
pub mod devices {
    use super::{attr, FakeCudaDevice};

    /// Attributes every CUDA device of the last decade reports identically.
    pub fn common(d: FakeCudaDevice) -> FakeCudaDevice {
        d.attr(attr::MAX_THREADS_PER_BLOCK, 1024)
            .attr(attr::MAX_BLOCK_DIM_X, 1024)
            .attr(attr::MAX_BLOCK_DIM_Y, 1024)
            .attr(attr::MAX_BLOCK_DIM_Z, 64)
            .attr(attr::MAX_GRID_DIM_X, 2147483647)
            .attr(attr::MAX_GRID_DIM_Y, 65535)
            .attr(attr::MAX_GRID_DIM_Z, 65535)
            .attr(attr::MAX_SHARED_MEMORY_PER_BLOCK, 49152)
            .attr(attr::TOTAL_CONSTANT_MEMORY, 65536)
            .attr(attr::WARP_SIZE, 32)
            .attr(attr::MAX_PITCH, 2147483647)
            .attr(attr::TEXTURE_ALIGNMENT, 512)
            .attr(attr::GPU_OVERLAP, 1)
            .attr(attr::CAN_MAP_HOST_MEMORY, 1)
            .attr(attr::COMPUTE_MODE, 0)
            .attr(attr::SURFACE_ALIGNMENT, 512)
            .attr(attr::UNIFIED_ADDRESSING, 1)
            .attr(attr::MANAGED_MEMORY, 1)
    }

    /// Texture limits of Ampere and newer.
    pub fn ampere_textures(d: FakeCudaDevice) -> FakeCudaDevice {
        d.attr(attr::MAXIMUM_TEXTURE1D_WIDTH, 131072)
            .attr(attr::MAXIMUM_TEXTURE2D_WIDTH, 131072)
            .attr(attr::MAXIMUM_TEXTURE2D_HEIGHT, 65536)
            .attr(attr::MAXIMUM_TEXTURE3D_WIDTH, 16384)
            .attr(attr::MAXIMUM_TEXTURE3D_HEIGHT, 16384)
            .attr(attr::MAXIMUM_TEXTURE3D_DEPTH, 16384)
            .attr(attr::MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 32768)
            .attr(attr::MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 2048)
            .attr(attr::MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 32768)
            .attr(attr::MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 32768)
            .attr(attr::MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048)
    }

    pub fn capability(d: FakeCudaDevice, major: i32, minor: i32) -> FakeCudaDevice {
        d.attr(attr::COMPUTE_CAPABILITY_MAJOR, major)
            .attr(attr::COMPUTE_CAPABILITY_MINOR, minor)
    }

    pub fn pci(d: FakeCudaDevice, domain: i32, bus: i32, device: i32) -> FakeCudaDevice {
        d.attr(attr::PCI_DOMAIN_ID, domain)
            .attr(attr::PCI_BUS_ID, bus)
            .attr(attr::PCI_DEVICE_ID, device)
    }

    /// A Jetson integrated GPU named `name` with compute capability `major.minor` and the rest of
    /// Orin NX's attributes (the generation-independent part of a report).
    pub fn jetson(name: &str, major: i32, minor: i32) -> FakeCudaDevice {
        let d = ampere_textures(common(FakeCudaDevice::new(name, 16136011776)));
        let d = pci(capability(d, major, minor), 0, 0, 0);
        d.attr(attr::MULTIPROCESSOR_COUNT, 8)
            .attr(attr::CLOCK_RATE, 918000)
            .attr(attr::MEMORY_CLOCK_RATE, 918000)
            .attr(attr::GLOBAL_MEMORY_BUS_WIDTH, 64)
            .attr(attr::L2_CACHE_SIZE, 2097152)
            .attr(attr::MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 167936)
            .attr(attr::MAX_REGISTERS_PER_BLOCK, 65536)
            .attr(attr::MAX_THREADS_PER_MULTIPROCESSOR, 1536)
            .attr(attr::ASYNC_ENGINE_COUNT, 2)
            .attr(attr::KERNEL_EXEC_TIMEOUT, 0)
            .attr(attr::INTEGRATED, 1)
            .attr(attr::ECC_ENABLED, 0)
            .attr(attr::COMPUTE_PREEMPTION_SUPPORTED, 1)
            .attr(attr::COOPERATIVE_LAUNCH, 1)
            .attr(attr::COOPERATIVE_MULTI_DEVICE_LAUNCH, 1)
    }
}

/// One device as the fake driver reports it.
#[derive(Debug, Clone, Default)]
pub struct FakeCudaDevice {
    pub name: String,
    pub total_mem: u64,
    pub attributes: BTreeMap<i32, i32>,
    pub uuid: Option<[u8; 16]>,
    /// The device node the device needs to be seen (`node`); `None`: none needed.
    pub node: Option<String>,
}

impl FakeCudaDevice {
    pub fn new(name: &str, total_mem: u64) -> Self {
        FakeCudaDevice {
            name: name.to_string(),
            total_mem,
            ..Default::default()
        }
    }

    /// Sets one attribute (see [`attr`]).
    pub fn attr(mut self, attribute: i32, value: i32) -> Self {
        self.attributes.insert(attribute, value);
        self
    }

    pub fn uuid(mut self, uuid: [u8; 16]) -> Self {
        self.uuid = Some(uuid);
        self
    }

    /// The device is seen only where `path` is a character device (the e2e test's proof that
    /// a runtime or CDI injected the node into the container).
    pub fn node(mut self, path: &str) -> Self {
        self.node = Some(path.to_string());
        self
    }
}

/// The whole fake machine: driver version, devices, peer matrix, forced results.
#[derive(Debug, Clone)]
pub struct FakeCuda {
    pub driver_version: i32,
    /// Overrides the count `cuDeviceGetCount` returns (default: `devices.len()`).
    pub device_count: Option<i32>,
    pub devices: Vec<FakeCudaDevice>,
    /// (from, to) pairs that can access each other's memory.
    pub peers: Vec<(usize, usize)>,
    /// (entry point or `all`, CUresult code) forced failures.
    pub results: Vec<(String, i32)>,
    /// Device memory each primary context uses (default 0); an MPS limit counts it.
    pub context_overhead: Option<u64>,
    /// MPS limits and thread percentages have no effect (a platform where they do not hold).
    pub ignore_mps_limits: bool,
    /// Multiprocessors an MPS thread percentage is counted in (the fake's default: 2, a TPC).
    pub mps_sm_granularity: Option<u32>,
}

impl FakeCuda {
    pub fn new(driver_version: i32) -> Self {
        FakeCuda {
            driver_version,
            device_count: None,
            devices: Vec::new(),
            peers: Vec::new(),
            results: Vec::new(),
            context_overhead: None,
            ignore_mps_limits: false,
            mps_sm_granularity: None,
        }
    }

    pub fn device(mut self, device: FakeCudaDevice) -> Self {
        self.devices.push(device);
        self
    }

    pub fn peer(mut self, from: usize, to: usize) -> Self {
        self.peers.push((from, to));
        self
    }

    /// Makes `function` (an entry point name, or `all`) return `code`.
    pub fn fail(mut self, function: &str, code: i32) -> Self {
        self.results.push((function.to_string(), code));
        self
    }

    pub fn device_count(mut self, count: i32) -> Self {
        self.device_count = Some(count);
        self
    }

    /// Device memory a primary context uses, counted in each process's used memory (an MPS
    /// client's limit includes it: measured ~514 MiB on a 132-SM H100 at 100 % threads).
    pub fn context_overhead(mut self, bytes: u64) -> Self {
        self.context_overhead = Some(bytes);
        self
    }

    /// MPS memory limits and thread percentages are not enforced: the negative control for
    /// `devicequery --check-limits`.
    pub fn ignore_mps_limits(mut self) -> Self {
        self.ignore_mps_limits = true;
        self
    }

    /// Multiprocessors an MPS active thread percentage is counted in (1: plain rounding down).
    pub fn mps_sm_granularity(mut self, multiprocessors: u32) -> Self {
        self.mps_sm_granularity = Some(multiprocessors);
        self
    }

    /// The configuration file text the fake library parses.
    pub fn render(&self) -> String {
        let mut lines = vec![format!("driver_version {}", self.driver_version)];
        if let Some(count) = self.device_count {
            lines.push(format!("device_count {count}"));
        }
        for (function, code) in &self.results {
            lines.push(format!("result {function} {code}"));
        }
        if let Some(bytes) = self.context_overhead {
            lines.push(format!("context_overhead {bytes}"));
        }
        if self.ignore_mps_limits {
            lines.push("mps_limits ignore".to_string());
        }
        if let Some(n) = self.mps_sm_granularity {
            lines.push(format!("mps_sm_granularity {n}"));
        }
        for device in &self.devices {
            lines.push(format!(
                "device\nname {}\ntotal_mem {}",
                device.name, device.total_mem
            ));
            for (attribute, value) in &device.attributes {
                lines.push(format!("attr {attribute} {value}"));
            }
            if let Some(uuid) = device.uuid {
                let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
                lines.push(format!("uuid {hex}"));
            }
            if let Some(node) = &device.node {
                lines.push(format!("node {node}"));
            }
        }
        for (from, to) in &self.peers {
            lines.push(format!("peer {from} {to} 1"));
        }
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Writes the configuration into `dir` and returns its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("fake-cuda.conf");
        std::fs::write(&path, self.render())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// Writes the configuration into `dir` and makes `cmd` load library `variant` with it.
    pub fn configure(&self, cmd: &mut Command, variant: &str, dir: &Path) {
        let config = self.write(dir);
        use_library_variant(cmd, variant);
        cmd.env(CONFIG_ENV, config);
    }
}

/// Makes `cmd` find the fake library `variant` (and nothing else) through `LD_LIBRARY_PATH`.
pub fn use_library_variant(cmd: &mut Command, variant: &str) {
    cmd.env("LD_LIBRARY_PATH", crate::fakelib::variant_dir(variant));
}
