//! Fake host roots for the device plugin's `--root` and node-setup's `cdi generate`: a Jetson
//! per generation and release (Nano on L4T r32, Xavier r35, Orin r36/JetPack 6, Orin
//! r39/JetPack 7.2, Thor r38/JetPack 7) with the files docs/platforms.md lists, and a
//! discrete-GPU server. The container CSV lists and the files they name are in
//! [`crate::l4t`]. NVML is the fake `libnvidia-ml.so.1` (`fakes/nvml.c`) copied into the
//! root and told what the board's driver answers (NotSupported included); OpenRM hosts also get
//! the driver's procfs (`/proc/driver/nvidia/gpus/*/information`, MIG capabilities).
//!
//! Device nodes are plain files (tests run unprivileged); the plugin only checks that they
//! exist. Every root is its own temporary directory and its own copy of the fake NVML, so
//! tests in one process never share NVML state.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

pub use crate::board::Board;

impl Board {
    /// `/proc/device-tree/compatible` entries, most specific first.
    pub fn compatible(self) -> &'static [&'static str] {
        match self {
            Board::Nano => &[
                "nvidia,p3449-0000-b00+p3448-0000-b00",
                "nvidia,jetson-nano",
                "nvidia,tegra210",
            ],
            Board::Xavier => &[
                "nvidia,p2822-0000+p2888-0001",
                "nvidia,p2888-0001",
                "nvidia,tegra194",
            ],
            Board::Orin => &[
                "nvidia,p3737-0000+p3701-0005",
                "nvidia,p3701-0005",
                "nvidia,tegra234",
            ],
            Board::OrinR39 => &[
                "nvidia,p3768-0000+p3767-0000",
                "nvidia,p3767-0000",
                "nvidia,tegra234",
            ],
            Board::Thor => &[
                "nvidia,p3971-0080+p3834-0008",
                "nvidia,p3834-0008",
                "nvidia,tegra264",
            ],
        }
    }

    pub fn model(self) -> &'static str {
        match self {
            Board::Nano => "NVIDIA Jetson Nano Developer Kit",
            Board::Xavier => "NVIDIA Jetson AGX Xavier Developer Kit",
            Board::Orin => "NVIDIA Jetson AGX Orin Developer Kit",
            Board::OrinR39 => "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
            Board::Thor => "NVIDIA Jetson AGX Thor Developer Kit",
        }
    }

    pub fn dtsfilename(self) -> &'static str {
        match self {
            Board::Nano => "/dvs/git/dirty/git-master_linux/kernel/kernel-4.9/arch/arm64/boot/dts/../../../../../../hardware/nvidia/platform/t210/porg/kernel-dts/tegra210-p3448-0000-p3449-0000-b00.dts",
            Board::Xavier => "/dvs/git/dirty/git-master_linux/kernel/kernel-5.10/arch/arm64/boot/dts/../../../../../../hardware/nvidia/platform/t19x/galen/kernel-dts/tegra194-p2888-0001-p2822-0000.dts",
            Board::Orin => "/dvs/git/dirty/git-master_linux/kernel/kernel-jammy-src/arch/arm64/boot/dts/nvidia/tegra234-p3737-0000+p3701-0005-nv.dts",
            Board::OrinR39 => "/dvs/git/dirty/git-master_linux/kernel/kernel-noble/arch/arm64/boot/dts/nvidia/tegra234-p3768-0000+p3767-0000-nv.dts",
            Board::Thor => "/dvs/git/dirty/git-master_linux/kernel/kernel-noble/arch/arm64/boot/dts/nvidia/tegra264-p3971-0080+p3834-0008-nv.dts",
        }
    }

    /// `tegra_chip_id` (decimal); Orin's node is unverified on JetPack 6 kernels, so the fake
    /// Orin root leaves it out and detection must work without it.
    pub fn chip_id(self) -> Option<u32> {
        match self {
            Board::Nano => Some(33),
            Board::Xavier => Some(25),
            Board::Orin => None,
            Board::OrinR39 => Some(35),
            Board::Thor => Some(38),
        }
    }

    /// `/etc/nv_tegra_release`.
    pub fn nv_tegra_release(self) -> &'static str {
        match self {
            Board::Nano => "# R32 (release), REVISION: 7.6, GCID: 38171779, BOARD: t210ref, EABI: aarch64, DATE: Tue Nov  5 07:46:14 UTC 2024\n# KERNEL_VARIANT: oot\n",
            Board::Xavier => "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
            Board::Orin => "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
            Board::OrinR39 => "# R39 (release), REVISION: 2.0, GCID: 43120515, BOARD: generic, EABI: aarch64, DATE: Tue Mar 10 09:12:45 UTC 2026\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
            Board::Thor => "# R38 (release), REVISION: 2.1, GCID: 41844464, BOARD: generic, EABI: aarch64, DATE: Mon Aug 18 20:23:11 UTC 2025\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
        }
    }

    /// Device nodes present on the board.
    pub fn device_nodes(self) -> &'static [&'static str] {
        match self {
            // nvidiactl is absent on some JetPack 4 boards; the Nano root leaves it out.
            Board::Nano => &[
                "/dev/nvhost-ctrl",
                "/dev/nvhost-ctrl-gpu",
                "/dev/nvhost-prof-gpu",
                "/dev/nvhost-dbg-gpu",
                "/dev/nvhost-gpu",
                "/dev/nvhost-as-gpu",
                "/dev/nvhost-nvdec",
                "/dev/nvhost-vic",
                "/dev/nvmap",
                "/dev/tegra_dc_ctrl",
                "/dev/tegra_dc_0",
                "/dev/tegra_dc_1",
            ],
            Board::Xavier => &[
                "/dev/nvidiactl",
                "/dev/nvhost-ctrl",
                "/dev/nvhost-ctrl-gpu",
                "/dev/nvhost-prof-gpu",
                "/dev/nvhost-dbg-gpu",
                "/dev/nvhost-gpu",
                "/dev/nvhost-as-gpu",
                "/dev/nvhost-nvdec",
                "/dev/nvhost-vic",
                "/dev/nvmap",
                "/dev/nvhost-nvdla0",
                "/dev/nvhost-nvdla1",
                "/dev/nvhost-ctrl-nvdla0",
                "/dev/nvhost-ctrl-nvdla1",
                "/dev/tegra_dc_ctrl",
                "/dev/tegra_dc_0",
            ],
            Board::Orin => &[
                "/dev/nvgpu/igpu0/as",
                "/dev/nvgpu/igpu0/channel",
                "/dev/nvgpu/igpu0/ctrl",
                "/dev/nvgpu/igpu0/ctxsw",
                "/dev/nvgpu/igpu0/dbg",
                "/dev/nvgpu/igpu0/prof",
                "/dev/nvgpu/igpu0/tsg",
                "/dev/nvhost-as-gpu",
                "/dev/nvhost-ctrl-gpu",
                "/dev/nvhost-ctrl-nvdla0",
                "/dev/nvhost-dbg-gpu",
                "/dev/nvhost-gpu",
                "/dev/nvhost-prof-gpu",
                "/dev/nvhost-tsg-gpu",
                "/dev/nvmap",
                "/dev/nvidia0",
                "/dev/nvidiactl",
                "/dev/nvidia-modeset",
                "/dev/nvsciipc",
                "/dev/host1x-fence",
                "/dev/dri/card0",
                "/dev/dri/renderD128",
                "/dev/v4l2-nvdec",
                "/dev/v4l2-nvenc",
            ],
            // r39 adds the OpenRM UVM nodes (meta-tegra's R39 devices.csv).
            Board::OrinR39 => &[
                "/dev/nvgpu/igpu0/as",
                "/dev/nvgpu/igpu0/channel",
                "/dev/nvgpu/igpu0/ctrl",
                "/dev/nvgpu/igpu0/ctxsw",
                "/dev/nvgpu/igpu0/dbg",
                "/dev/nvgpu/igpu0/prof",
                "/dev/nvgpu/igpu0/tsg",
                "/dev/nvhost-as-gpu",
                "/dev/nvhost-ctrl-gpu",
                "/dev/nvhost-gpu",
                "/dev/nvhost-tsg-gpu",
                "/dev/nvmap",
                "/dev/nvidia0",
                "/dev/nvidiactl",
                "/dev/nvidia-modeset",
                "/dev/nvidia-uvm",
                "/dev/nvidia-uvm-tools",
                "/dev/nvsciipc",
                "/dev/host1x-fence",
                "/dev/dri/card0",
                "/dev/dri/renderD128",
            ],
            Board::Thor => &[
                "/dev/nvidia0",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/nvidia-uvm-tools",
                "/dev/nvidia-modeset",
                "/dev/nvgpu/igpu-0000:01:00.0/ctrl",
                "/dev/nvgpu/igpu-0000:01:00.0/as",
                "/dev/dri/card0",
                "/dev/dri/renderD128",
                "/dev/v4l2-nvdec",
                "/dev/v4l2-nvenc",
            ],
        }
    }

    /// (GPU device dir, devfreq dir name, `of_node` name, has a `load` file).
    fn sysfs(self) -> (&'static str, &'static str, &'static str, bool) {
        match self {
            Board::Nano => ("/sys/devices/gpu.0", "57000000.gpu", "gpu", true),
            Board::Xavier => (
                "/sys/devices/17000000.gv11b",
                "17000000.gv11b",
                "gv11b",
                true,
            ),
            Board::Orin | Board::OrinR39 => (
                "/sys/devices/platform/bus@0/17000000.gpu",
                "17000000.gpu",
                "gpu",
                true,
            ),
            Board::Thor => (
                "/sys/devices/platform/bus@0/8800000000.gpu",
                "gpu-gpc-0",
                "gpu",
                false,
            ),
        }
    }

    /// What the board's NVML reports, answering NOT_SUPPORTED as its driver does; `None` where
    /// the release ships no real `libnvidia-ml.so.1` (JetPack 4 and 5: only the toolkit stub).
    pub fn nvml(self) -> Option<FakeGpu> {
        match self {
            Board::Nano | Board::Xavier => None,
            Board::Orin => Some(FakeGpu::orin_nvgpu()),
            Board::OrinR39 => Some(FakeGpu {
                uuid: "GPU-6a1f0c3e-39b2-5e0d-8c4f-0000000a10b1".into(),
                ..FakeGpu::orin_nvgpu()
            }),
            Board::Thor => Some(FakeGpu {
                uuid: "GPU-e1c7a9d2-38f4-4b6a-9d3e-00000000b100".into(),
                name: "NVIDIA Thor".into(),
                memory_bytes: 0,
                // The iGPU sits at PCI 0000:01:00.0 (NVML's bus id form).
                pci_bus_id: "00000000:01:00.0".into(),
                nvml_numa_node: -1,
                sysfs_numa_node: None,
                minor: 0,
                unsupported: "memory,numa,temperature,power,clocks,events",
            }),
        }
    }

    /// A device node the platform table requires for health (its loss makes the GPU
    /// unhealthy): `/dev/nvidiactl` on Thor (OpenRM), `/dev/nvmap` on nvgpu boards.
    pub fn required_node(self) -> &'static str {
        if self.openrm() {
            "/dev/nvidiactl"
        } else {
            "/dev/nvmap"
        }
    }

    /// The GPU driver runs OpenRM (procfs `/proc/driver/nvidia` exists).
    pub fn openrm(self) -> bool {
        matches!(self, Board::Thor)
    }

    /// Host path of the GPU `load` file (None on Thor).
    pub fn load_file(self) -> Option<String> {
        let (dev, _, _, has_load) = self.sysfs();
        has_load.then(|| format!("{dev}/load"))
    }

    /// Host path of the GPU `cur_freq` file.
    pub fn cur_freq_file(self) -> String {
        let (dev, devfreq, _, _) = self.sysfs();
        format!("{dev}/devfreq/{devfreq}/cur_freq")
    }

    /// Thermal zones as (type, millidegrees C), in zone order. Nano's `PMIC-Die` reads a
    /// constant 100 °C and comes first: neither the first nor the hottest zone is the GPU's.
    /// Thor's GPU zone name is not known, so its root has none.
    pub fn thermal_zones(self) -> &'static [(&'static str, i64)] {
        match self {
            Board::Nano => &[
                ("PMIC-Die", 100_000),
                ("AO-therm", 38_500),
                ("CPU-therm", 41_000),
                ("GPU-therm", 39_500),
                ("PLL-therm", 37_000),
                ("thermal-fan-est", 39_000),
            ],
            Board::Xavier => &[
                ("CPU-therm", 44_500),
                ("GPU-therm", 43_000),
                ("AUX-therm", 42_000),
                ("Tboard_tegra", 40_000),
            ],
            Board::Orin => &[
                ("cpu-thermal", 48_312),
                ("gpu-thermal", 46_093),
                ("soc0-thermal", 45_781),
                ("tj-thermal", 48_312),
            ],
            // The same T234 device tree zones on JetPack 7.2.
            Board::OrinR39 => &[
                ("cpu-thermal", 44_125),
                ("gpu-thermal", 42_968),
                ("cv0-thermal", 41_500),
                ("soc0-thermal", 42_000),
                ("tj-thermal", 44_125),
            ],
            Board::Thor => &[("cpu-thermal", 51_000), ("tj-thermal", 52_000)],
        }
    }

    /// The board's INA3221 power monitor, if the fake root has one.
    pub fn power_monitor(self) -> Option<PowerMonitor> {
        match self {
            // L4T r32: NVIDIA's ina3221x IIO driver, channels 0..2, power in mW.
            Board::Nano => Some(PowerMonitor {
                driver: "ina3221x",
                device_dir: "/sys/devices/7000c400.i2c/i2c-6/6-0040",
                bus_name: "6-0040",
                channel_dir: "iio:device0",
                rails: &[
                    ("POM_5V_IN", 5_080, 600),
                    ("POM_5V_GPU", 5_048, 120),
                    ("POM_5V_CPU", 5_056, 200),
                ],
            }),
            // L4T r34+: mainline ina3221 hwmon driver, channels 1..3.
            Board::Orin => Some(PowerMonitor {
                driver: "ina3221",
                device_dir: "/sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040",
                bus_name: "1-0040",
                channel_dir: "hwmon/hwmon3",
                rails: &[
                    ("VDD_GPU_SOC", 19_960, 1_240),
                    ("VDD_CPU_CV", 19_960, 400),
                    ("VIN_SYS_5V0", 4_980, 700),
                ],
            }),
            // Orin NX / Nano modules: one monitor, the CPU, GPU and CV share a rail.
            Board::OrinR39 => Some(PowerMonitor {
                driver: "ina3221",
                device_dir: "/sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040",
                bus_name: "1-0040",
                channel_dir: "hwmon/hwmon1",
                rails: &[
                    ("VDD_IN", 5_016, 1_480),
                    ("VDD_CPU_GPU_CV", 5_016, 520),
                    ("VDD_SOC", 5_016, 310),
                ],
            }),
            // AGX Xavier on r35: the first of its two monitors (GPU, CPU, SOC; the second has
            // CV, VDDRQ, SYS5V), the GPU on a rail of its own.
            Board::Xavier => Some(PowerMonitor {
                driver: "ina3221",
                device_dir: "/sys/devices/platform/3160000.i2c/i2c-1/1-0040",
                bus_name: "1-0040",
                channel_dir: "hwmon/hwmon2",
                rails: &[
                    ("GPU", 5_000, 200),
                    ("CPU", 5_000, 300),
                    ("SOC", 5_000, 500),
                ],
            }),
            Board::Thor => None,
        }
    }

    /// `MemTotal` of the fake root's `/proc/meminfo`, in kB.
    pub fn mem_total_kb(self) -> u64 {
        match self {
            Board::Nano => 4_051_032,
            Board::Xavier => 32_559_164,
            Board::Orin => 64_335_836,
            Board::OrinR39 => 15_655_220,
            Board::Thor => 128_452_088,
        }
    }

    /// `/proc/meminfo` of the board: `MemTotal` and, on nvgpu boards, `NvMapMemUsed`.
    fn meminfo(self, nvmap_kb: u64) -> String {
        let total_kb = self.mem_total_kb();
        let nvmap = if self == Board::Thor {
            String::new()
        } else {
            format!("NvMapMemUsed:    {nvmap_kb:>8} kB\n")
        };
        format!(
            "MemTotal:       {total_kb:>8} kB\nMemFree:        {:>8} kB\nMemAvailable:   {:>8} kB\n{nvmap}Hugepagesize:       2048 kB\n",
            total_kb / 2,
            total_kb * 3 / 4
        )
    }
}

/// An INA3221 power monitor of a fake root: (rail label, millivolts, milliamps) per channel.
#[derive(Debug, Clone, Copy)]
pub struct PowerMonitor {
    /// Driver directory name under `/sys/bus/i2c/drivers`.
    pub driver: &'static str,
    /// The I2C device directory (the driver's entry links to it).
    pub device_dir: &'static str,
    /// The I2C device name (`6-0040`).
    pub bus_name: &'static str,
    /// Where the channel files are inside the device directory.
    pub channel_dir: &'static str,
    pub rails: &'static [(&'static str, u32, u32)],
}

/// One GPU of the fake NVML.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeGpu {
    pub uuid: String,
    pub name: String,
    /// 0 = NVML answers NOT_SUPPORTED (Jetson).
    pub memory_bytes: u64,
    /// `-` = NOT_SUPPORTED.
    pub pci_bus_id: String,
    /// -1 = NVML answers NOT_SUPPORTED (the plugin then reads sysfs).
    pub nvml_numa_node: i32,
    /// What `/sys/bus/pci/devices/<bus>/numa_node` holds (None = no file).
    pub sysfs_numa_node: Option<i32>,
    pub minor: u32,
    /// Comma list of NVML queries that answer NOT_SUPPORTED (see `fakes/nvml.c`).
    pub unsupported: &'static str,
}

impl FakeGpu {
    /// The default discrete server: two A100s on NUMA nodes 0 and 1. The second one's NUMA
    /// node comes from sysfs only (NVML says NOT_SUPPORTED), as with older drivers.
    pub fn two_on_two_numa_nodes() -> Vec<FakeGpu> {
        vec![
            FakeGpu {
                uuid: "GPU-3b7e0c2a-5f1d-4b8e-9a61-0d2f6c1e7a01".into(),
                name: "NVIDIA A100-SXM4-40GB".into(),
                memory_bytes: 42_949_672_960,
                pci_bus_id: "00000000:17:00.0".into(),
                nvml_numa_node: 0,
                sysfs_numa_node: Some(0),
                minor: 0,
                unsupported: "",
            },
            FakeGpu {
                uuid: "GPU-9c4d1e8b-2a3f-4c7d-8e90-1b2c3d4e5f02".into(),
                name: "NVIDIA A100-SXM4-40GB".into(),
                memory_bytes: 42_949_672_960,
                pci_bus_id: "00000000:CA:00.0".into(),
                nvml_numa_node: -1,
                sysfs_numa_node: Some(1),
                minor: 1,
                unsupported: "",
            },
        ]
    }

    /// JetPack 6 NVML's view of an Orin iGPU: name and UUID, everything else NotSupported.
    pub fn orin_nvgpu() -> FakeGpu {
        FakeGpu {
            uuid: "GPU-00000000-0000-0000-0000-0000000a10b0".into(),
            name: "Orin (nvgpu)".into(),
            memory_bytes: 0,
            pci_bus_id: "-".into(),
            nvml_numa_node: -1,
            sysfs_numa_node: None,
            minor: 0,
            unsupported: "memory,pci,numa,minor,utilization,temperature,power,clocks,events,mig",
        }
    }

    /// A MIG-capable server: two H100 80 GB on NUMA nodes 0 and 1.
    pub fn two_h100() -> Vec<FakeGpu> {
        vec![
            FakeGpu {
                uuid: "GPU-5d2e7b1a-0c4f-4e3b-a1d2-7f6e5d4c3b01".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_bytes: 85_520_809_984,
                pci_bus_id: "00000000:1B:00.0".into(),
                nvml_numa_node: 0,
                sysfs_numa_node: Some(0),
                minor: 0,
                unsupported: "",
            },
            FakeGpu {
                uuid: "GPU-8a9b0c1d-2e3f-4a5b-9c8d-7e6f5a4b3c02".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_bytes: 85_520_809_984,
                pci_bus_id: "00000000:9A:00.0".into(),
                nvml_numa_node: 1,
                sysfs_numa_node: Some(1),
                minor: 1,
                unsupported: "",
            },
        ]
    }
}

/// One MIG device of the fake NVML (and of the fake driver's procfs).
#[derive(Debug, Clone, PartialEq)]
pub struct FakeMig {
    /// NVML index of the parent GPU.
    pub gpu: u32,
    pub uuid: String,
    /// GPU instance and compute instance ids.
    pub gi: u32,
    pub ci: u32,
    pub gi_slices: u32,
    pub ci_slices: u32,
    pub memory_mib: u64,
    /// The profile the driver names it by, e.g. `1g.10gb`.
    pub profile: &'static str,
    /// The GPU instance profile id `nvidia-smi mig -lgip` lists (`20` = `1g.10gb+me` on an
    /// H100); `None`: the plain profile of `gi_slices` (see `fakes/nvml.c`).
    pub gi_profile_id: Option<u32>,
}

impl FakeMig {
    /// The usual mixed geometry of the tests: GPU 0 split into 3g.40gb (GPU instance 1) and
    /// two 1g.10gb (5 and 6).
    pub fn h100_mixed() -> Vec<FakeMig> {
        vec![
            FakeMig::h100(0, 1, "3g.40gb"),
            FakeMig::h100(0, 5, "1g.10gb"),
            FakeMig::h100(0, 6, "1g.10gb"),
        ]
    }

    /// An H100 80 GB MIG device: `1g.10gb` (9856 MiB), `1g.10gb+me` (the same with the media
    /// extensions, profile id 20), `1g.20gb` (20096 MiB, profile id 15), `2g.20gb` (20096
    /// MiB), `3g.40gb` (40320 MiB) or `7g.80gb` (80896 MiB), NVIDIA's H100 profile sizes and
    /// `nvidia-smi mig -lgip` ids.
    pub fn h100(gpu: u32, gi: u32, profile: &'static str) -> FakeMig {
        let (slices, memory_mib, gi_profile_id) = match profile {
            "1g.10gb" => (1, 9856, None),
            "1g.10gb+me" => (1, 9856, Some(20)),
            "1g.20gb" => (1, 20096, Some(15)),
            "2g.20gb" => (2, 20096, None),
            "3g.40gb" => (3, 40320, None),
            "4g.40gb" => (4, 40320, None),
            "7g.80gb" => (7, 80896, None),
            other => panic!("no H100 profile {other}"),
        };
        FakeMig {
            gpu,
            uuid: format!("MIG-{gpu:08x}-{gi:04x}-4000-8000-{:012x}", 0xa100_0000 + gi),
            gi,
            ci: 0,
            gi_slices: slices,
            ci_slices: slices,
            memory_mib,
            profile,
            gi_profile_id,
        }
    }
}

/// The kubelet's cgroup driver (`--cgroup-driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    Systemd,
    Cgroupfs,
}

/// The host's cgroup version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// One entry of the kubelet's device manager checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointEntry {
    pub pod_uid: String,
    pub container: String,
    pub resource: String,
    pub device_ids: Vec<String>,
}

impl CheckpointEntry {
    pub fn new(pod_uid: &str, container: &str, resource: &str, device_ids: &[&str]) -> Self {
        CheckpointEntry {
            pod_uid: pod_uid.into(),
            container: container.into(),
            resource: resource.into(),
            device_ids: device_ids.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// How the checkpoint writes `DeviceIDs`: a map NUMA node → IDs (Kubernetes 1.20 on), or a
/// plain list (1.19 and older).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointShape {
    PerNumaNode,
    ListBefore1_20,
}

/// A fake host root in a temporary directory (removed on drop).
pub struct FakeHost {
    dir: TempDir,
    board: Option<Board>,
    nvml_dir: Option<PathBuf>,
}

/// NVML's bus id `00000000:17:00.0` as sysfs and procfs name it: `0000:17:00.0`.
fn sysfs_bus_id(nvml_bus_id: &str) -> String {
    let bus = nvml_bus_id.to_ascii_lowercase();
    match bus.split_once(':') {
        Some((d, rest)) if d.len() > 4 => format!("{}:{rest}", &d[d.len() - 4..]),
        _ => bus,
    }
}

/// nvmap's per-process debugfs file (the L4T kernel's `nvmap/iovmm/maps`, spelled out here:
/// the testkit does not take the plugin's paths on trust).
const NVMAP_MAPS: &str = "/sys/kernel/debug/nvmap/iovmm/maps";

/// The arch-specific lib dir NVML is installed in on this target.
fn arch_lib_dir() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "/usr/lib/aarch64-linux-gnu"
    } else {
        "/usr/lib/x86_64-linux-gnu"
    }
}

impl FakeHost {
    /// An empty root (no GPU, no Tegra files).
    pub fn empty() -> FakeHost {
        FakeHost {
            dir: tempfile::Builder::new()
                .prefix("edgegpu-host-")
                .tempdir()
                .expect("temp dir"),
            board: None,
            nvml_dir: None,
        }
    }

    /// A Jetson of `board` with every detection signal, device nodes, GPU sysfs and CSV files.
    pub fn jetson(board: Board) -> FakeHost {
        let mut host = FakeHost::empty();
        host.board = Some(board);
        let nul_list = |items: &[&str]| -> Vec<u8> {
            let mut out = Vec::new();
            for i in items {
                out.extend_from_slice(i.as_bytes());
                out.push(0);
            }
            out
        };
        host.write("/proc/device-tree/compatible", nul_list(board.compatible()));
        host.write("/proc/device-tree/model", nul_list(&[board.model()]));
        host.write(
            "/proc/device-tree/nvidia,dtsfilename",
            nul_list(&[board.dtsfilename()]),
        );
        host.write("/sys/devices/soc0/family", "Tegra\n");
        if let Some(id) = board.chip_id() {
            host.write(
                "/sys/module/tegra_fuse/parameters/tegra_chip_id",
                format!("{id}\n"),
            );
        }
        host.write("/etc/nv_tegra_release", board.nv_tegra_release());
        for node in board.device_nodes() {
            host.write(node, "");
        }
        // L4T's container lists and the libraries, links and files they name.
        for entry in crate::l4t::layout(board) {
            match entry {
                crate::l4t::Entry::File { path, contents } => host.write(&path, contents),
                crate::l4t::Entry::Link { path, target } => host.symlink_raw(&path, &target),
            }
        }

        // GPU sysfs: device dir with `load` and `of_node/name`, devfreq dir with `cur_freq`,
        // and /sys/class/devfreq/<name> as a relative link, as the kernel makes it.
        let (dev, devfreq, of_name, has_load) = board.sysfs();
        if has_load {
            host.write(&format!("{dev}/load"), "0\n");
        }
        host.write(&format!("{dev}/of_node/name"), format!("{of_name}\0"));
        host.write(&format!("{dev}/devfreq/{devfreq}/cur_freq"), "306000000\n");
        host.symlink(&format!("{dev}/devfreq/{devfreq}/device"), dev);
        host.symlink(
            &format!("/sys/class/devfreq/{devfreq}"),
            &format!("{dev}/devfreq/{devfreq}"),
        );
        host.write_telemetry_files(board);
        host
    }

    /// Thermal zones, the power monitor, `/proc/meminfo` and the EMC files the board exposes
    /// to an unprivileged reader (no debugfs).
    fn write_telemetry_files(&self, board: Board) {
        for (n, (kind, millideg)) in board.thermal_zones().iter().enumerate() {
            let zone = format!("/sys/devices/virtual/thermal/thermal_zone{n}");
            self.write(&format!("{zone}/type"), format!("{kind}\n"));
            self.write(&format!("{zone}/temp"), format!("{millideg}\n"));
            self.symlink(&format!("/sys/class/thermal/thermal_zone{n}"), &zone);
        }
        if let Some(monitor) = board.power_monitor() {
            for (i, (label, millivolts, milliamps)) in monitor.rails.iter().enumerate() {
                self.write_rail(monitor, i, label, *millivolts, *milliamps);
            }
            self.symlink(
                &format!(
                    "/sys/bus/i2c/drivers/{}/{}",
                    monitor.driver, monitor.bus_name
                ),
                monitor.device_dir,
            );
        }
        self.write("/proc/meminfo", board.meminfo(65_536));
        match board {
            // r32: the sysfs actmon and the bandwidth manager's clock (jetson_stats' paths).
            Board::Nano => {
                self.write("/sys/kernel/actmon_avg_activity/mc_all", "48000000\n");
                self.write(
                    "/sys/kernel/debug/clk/override.emc/clk_rate",
                    "1600000000\n",
                );
            }
            // Thor: the bandwidth manager is a devfreq device; no activity file without debugfs.
            Board::Thor => {
                self.write(
                    "/sys/devices/platform/bwmgr/devfreq/bwmgr/cur_freq",
                    "4266000000\n",
                );
                self.symlink(
                    "/sys/class/devfreq/bwmgr",
                    "/sys/devices/platform/bwmgr/devfreq/bwmgr",
                );
            }
            Board::Xavier | Board::Orin | Board::OrinR39 => {}
        }
    }

    fn write_rail(&self, m: PowerMonitor, i: usize, label: &str, millivolts: u32, milliamps: u32) {
        let dir = format!("{}/{}", m.device_dir, m.channel_dir);
        if m.driver == "ina3221x" {
            self.write(&format!("{dir}/rail_name_{i}"), format!("{label}\n"));
            self.write(
                &format!("{dir}/in_voltage{i}_input"),
                format!("{millivolts}\n"),
            );
            self.write(
                &format!("{dir}/in_current{i}_input"),
                format!("{milliamps}\n"),
            );
            let milliwatts = u64::from(millivolts) * u64::from(milliamps) / 1000;
            self.write(
                &format!("{dir}/in_power{i}_input"),
                format!("{milliwatts}\n"),
            );
        } else {
            let n = i + 1;
            self.write(&format!("{dir}/in{n}_label"), format!("{label}\n"));
            self.write(&format!("{dir}/in{n}_input"), format!("{millivolts}\n"));
            self.write(&format!("{dir}/curr{n}_input"), format!("{milliamps}\n"));
        }
    }

    /// Sets the GPU's `load` (per mille). Panics on Thor, which has no `load` file.
    pub fn set_gpu_load(&self, per_mille: u32) {
        let file = self
            .board
            .and_then(Board::load_file)
            .expect("a board with a load file");
        self.write(&file, format!("{per_mille}\n"));
    }

    /// Sets the GPU's devfreq `cur_freq` (Hz).
    pub fn set_gpu_frequency(&self, hz: u64) {
        let board = self.board.expect("a Jetson root");
        self.write(&board.cur_freq_file(), format!("{hz}\n"));
    }

    /// Sets the temperature of the thermal zone of type `kind` (millidegrees C).
    pub fn set_thermal_zone(&self, kind: &str, millidegrees: i64) {
        let board = self.board.expect("a Jetson root");
        let n = board
            .thermal_zones()
            .iter()
            .position(|(k, _)| *k == kind)
            .unwrap_or_else(|| panic!("{board:?} has no thermal zone {kind}"));
        self.write(
            &format!("/sys/devices/virtual/thermal/thermal_zone{n}/temp"),
            format!("{millidegrees}\n"),
        );
    }

    /// Sets one rail's voltage and current (and, on `ina3221x`, its power).
    pub fn set_rail(&self, label: &str, millivolts: u32, milliamps: u32) {
        let monitor = self
            .board
            .and_then(Board::power_monitor)
            .expect("a board with a power monitor");
        let i = monitor
            .rails
            .iter()
            .position(|(l, _, _)| *l == label)
            .unwrap_or_else(|| panic!("no rail {label}"));
        self.write_rail(monitor, i, label, millivolts, milliamps);
    }

    /// Rewrites `/proc/meminfo` with this `NvMapMemUsed` (kB).
    pub fn set_nvmap_used_kb(&self, kb: u64) {
        let board = self.board.expect("a Jetson root");
        self.write("/proc/meminfo", board.meminfo(kb));
    }

    /// Sets what the fake NVML answers for GPU `gpu`'s telemetry queries: keys `gpu_util`,
    /// `mem_util`, `sm_clock`, `mem_clock`, `temp`, `power_mw`, `mem_used` (see nvml.c);
    /// a key left out answers NOT_SUPPORTED.
    pub fn set_nvml_telemetry(&self, gpu: u32, values: &[(&str, u64)]) {
        self.write_nvml_telemetry(&gpu.to_string(), values);
    }

    /// Sets what the fake NVML answers for the MIG device `uuid` (`mem_used`, bytes; its
    /// other queries are the whole GPU's and answer NOT_SUPPORTED on a MIG device).
    pub fn set_nvml_mig_telemetry(&self, uuid: &str, values: &[(&str, u64)]) {
        self.write_nvml_telemetry(uuid, values);
    }

    /// Sets the processes the fake NVML lists for GPU `gpu` (its running compute processes):
    /// `(pid, used bytes)`, `None` bytes answering `NVML_VALUE_NOT_AVAILABLE`.
    pub fn set_nvml_processes(&self, gpu: u32, processes: &[(u32, Option<u64>)]) {
        self.write_nvml_processes(&gpu.to_string(), processes);
    }

    /// The same for the MIG device `uuid` (its own processes).
    pub fn set_nvml_mig_processes(&self, uuid: &str, processes: &[(u32, Option<u64>)]) {
        self.write_nvml_processes(uuid, processes);
    }

    fn write_nvml_processes(&self, device: &str, processes: &[(u32, Option<u64>)]) {
        let text: String = processes
            .iter()
            .map(|(pid, bytes)| match bytes {
                Some(b) => format!("{pid} {b}\n"),
                None => format!("{pid} -\n"),
            })
            .collect();
        let dir = self.nvml_dir();
        let tmp = dir.join(format!("processes-{device}.tmp"));
        std::fs::write(&tmp, text).expect("write processes");
        std::fs::rename(&tmp, dir.join(format!("processes-{device}"))).expect("publish processes");
    }

    /// Writes nvmap's per-process file (`/sys/kernel/debug/nvmap/iovmm/maps`) with one client
    /// per `(command, pid, KiB)`, in the kernel's format (`nvmap_debug_maps_show`: headers,
    /// client lines, a handle and a mapping line under each, a kernel client, the total).
    pub fn write_nvmap_maps(&self, clients: &[(&str, u32, u64)]) {
        let pad = "";
        let mut text = format!(
            "{:<18} {:>18} {:>8} {:>11}\n",
            "CLIENT", "PROCESS", "PID", "SIZE"
        );
        text.push_str(&format!(
            "{pad:<18} {pad:>18} {:>8} {:>11} {:>8} {:>6} {:>9} {:>21} {:>18}\n",
            "BASE", "SIZE", "FLAGS", "SHARE", "UID", "MAPS", "MAPSIZE"
        ));
        let mut total = 0;
        for (command, pid, kib) in clients {
            total += kib;
            text.push_str(&format!(
                "{:<18} {:>18} {:>8} {:>10}K\n",
                "user", command, pid, kib
            ));
            // A handle line whose last words look like a PID and a size: the parser must
            // not take it for a client.
            text.push_str(&format!(
                "{pad:<18} {pad:<18} {:>8x} {:>10}K {:>8x} {:>6} {:>16} {pad:>12} {pad:>12} {:>6}K\n",
                0, kib, 0x500, 1, "0000000081234567", kib
            ));
            text.push_str(&format!(
                "{pad:<18} {pad:<18} {pad:>8} {pad:>11} {pad:>8} {pad:>6} {pad:>16} {:<12x}-{:>12x} {:>6}K\n",
                0xffff_8000_0000u64, 0xffff_8010_0000u64, kib
            ));
            text.push('\n');
        }
        text.push_str(&format!(
            "{:<18} {:>18} {:>8} {:>10}K\n\n",
            "user", "kernel", 0, 64
        ));
        text.push_str(&format!(
            "{:<18} {:<18} {:>8} {:>10}K\n",
            "total",
            "",
            "",
            total + 64
        ));
        self.write(NVMAP_MAPS, text);
    }

    /// Removes nvmap's per-process file (debugfs not mounted).
    pub fn remove_nvmap_maps(&self) {
        let _ = std::fs::remove_file(self.path(NVMAP_MAPS));
    }

    /// Puts process `pid` in the cgroup the kubelet makes for a container of pod `uid` of QoS
    /// class `qos` (`guaranteed`, `burstable`, `besteffort`): `/proc/<pid>/cgroup` as the
    /// kernel shows it for that cgroup driver and version.
    pub fn put_process_in_pod(
        &self,
        pid: u32,
        uid: &str,
        qos: &str,
        driver: CgroupDriver,
        version: CgroupVersion,
    ) {
        let container = format!("{:064x}", u64::from(pid) * 0x9e37_79b9);
        let path = match driver {
            CgroupDriver::Cgroupfs if qos == "guaranteed" => {
                format!("/kubepods/pod{uid}/{container}")
            }
            CgroupDriver::Cgroupfs => format!("/kubepods/{qos}/pod{uid}/{container}"),
            CgroupDriver::Systemd => {
                let uid = uid.replace('-', "_");
                if qos == "guaranteed" {
                    format!(
                        "/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{container}.scope"
                    )
                } else {
                    format!(
                        "/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice/cri-containerd-{container}.scope"
                    )
                }
            }
        };
        self.put_process_in_cgroup(pid, &path, version);
    }

    /// Writes `/proc/<pid>/cgroup` for a process in cgroup `path` (v1: the same path in every
    /// hierarchy, as with the kubelet's cgroups; v2: the one `0::` line).
    pub fn put_process_in_cgroup(&self, pid: u32, path: &str, version: CgroupVersion) {
        let text = match version {
            CgroupVersion::V2 => format!("0::{path}\n"),
            CgroupVersion::V1 => {
                let mut t = String::new();
                for (n, controllers) in [
                    (12, "pids"),
                    (11, "memory"),
                    (10, "cpu,cpuacct"),
                    (4, "devices"),
                    (1, "name=systemd"),
                ] {
                    t.push_str(&format!("{n}:{controllers}:{path}\n"));
                }
                t.push_str("0::/\n");
                t
            }
        };
        self.write(&format!("/proc/{pid}/cgroup"), text);
    }

    /// Where the kubelet's device-plugin directory is in this root (tests point
    /// `--device-plugin-path` and the fake kubelet at it).
    pub fn device_plugin_dir(&self) -> PathBuf {
        self.path("/var/lib/kubelet/device-plugins")
    }

    /// Writes the kubelet device manager's checkpoint (`kubelet_internal_checkpoint` in
    /// [`Self::device_plugin_dir`]) holding `entries`, in `shape`, as the kubelet's
    /// `checkpoint.go` marshals it (by rename, as the kubelet writes it).
    pub fn write_kubelet_checkpoint(&self, entries: &[CheckpointEntry], shape: CheckpointShape) {
        let entries: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                let ids = match shape {
                    CheckpointShape::ListBefore1_20 => serde_json::json!(e.device_ids),
                    // Spread over two NUMA nodes, as a two-socket server's would be.
                    CheckpointShape::PerNumaNode => {
                        let on_node = |node: usize| -> Vec<&String> {
                            e.device_ids.iter().skip(node).step_by(2).collect()
                        };
                        let mut per_node = serde_json::Map::new();
                        per_node.insert("0".into(), serde_json::json!(on_node(0)));
                        if e.device_ids.len() > 1 {
                            per_node.insert("1".into(), serde_json::json!(on_node(1)));
                        }
                        serde_json::Value::Object(per_node)
                    }
                };
                serde_json::json!({
                    "PodUID": e.pod_uid,
                    "ContainerName": e.container,
                    "ResourceName": e.resource,
                    "DeviceIDs": ids,
                    // A ContainerAllocateResponse, protobuf in base64 ([]byte in Go's JSON).
                    "AllocResp": "CiQKHE5WSURJQV9WSVNJQkxFX0RFVklDRVMSBGFsbA==",
                })
            })
            .collect();
        let file = serde_json::json!({
            "Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}},
            "Checksum": 1_894_633_021u64,
        });
        let dir = self.device_plugin_dir();
        std::fs::create_dir_all(&dir).expect("device-plugin dir");
        let tmp = dir.join(".kubelet_internal_checkpoint.tmp");
        std::fs::write(&tmp, file.to_string()).expect("write checkpoint");
        std::fs::rename(&tmp, dir.join("kubelet_internal_checkpoint")).expect("publish checkpoint");
    }

    /// Removes the checkpoint (a kubelet that has not written it yet).
    pub fn remove_kubelet_checkpoint(&self) {
        let _ = std::fs::remove_file(self.device_plugin_dir().join("kubelet_internal_checkpoint"));
    }

    fn write_nvml_telemetry(&self, device: &str, values: &[(&str, u64)]) {
        let text: String = values.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        let dir = self.nvml_dir();
        let tmp = dir.join(format!("telemetry-{device}.tmp"));
        std::fs::write(&tmp, text).expect("write telemetry");
        std::fs::rename(&tmp, dir.join(format!("telemetry-{device}"))).expect("publish telemetry");
    }

    /// A discrete-GPU server whose NVML (the fake) reports `gpus`, with their /dev nodes,
    /// the control nodes (no `nvidia-modeset`: it is optional) and the sysfs NUMA files.
    pub fn discrete(gpus: &[FakeGpu]) -> FakeHost {
        let host = FakeHost::empty();
        host.with_nvml(arch_lib_dir(), gpus)
    }

    /// The same with an R470 driver's NVML, which has no `nvmlDeviceGetMemoryInfo_v2`.
    pub fn discrete_r470(gpus: &[FakeGpu]) -> FakeHost {
        FakeHost::empty().with_nvml_variant("nvml-r470", arch_lib_dir(), gpus)
    }

    /// Installs the fake NVML into `lib_dir` (a host path) reporting `gpus`.
    pub fn with_nvml(self, lib_dir: &str, gpus: &[FakeGpu]) -> FakeHost {
        self.with_nvml_variant("nvml", lib_dir, gpus)
    }

    /// [`Self::with_nvml`] with the fake library built as `variant` (testkit `build.rs`).
    fn with_nvml_variant(mut self, variant: &str, lib_dir: &str, gpus: &[FakeGpu]) -> FakeHost {
        let dir = self.path(lib_dir);
        std::fs::create_dir_all(&dir).expect("create lib dir");
        // A copy, not a link: glibc loads one instance per file, so each root gets its own.
        std::fs::copy(
            crate::fakelib::variant_dir(variant).join("libnvidia-ml.so.1"),
            dir.join("libnvidia-ml.so.1"),
        )
        .expect("copy fake NVML");
        let mut conf =
            String::from("# uuid|name|memory_bytes|pci_bus_id|numa_node|minor|unsupported\n");
        let openrm = self.board.map_or(true, Board::openrm);
        // A Jetson's CUDA and compute capability on its release (`Board::cuda`); a 550-series
        // driver's CUDA 12.4 and the A100's 8.0 on a server.
        let (cuda, cc) = match self.board {
            Some(board) => {
                let ((major, minor), (cc_major, cc_minor), _) = board.cuda();
                (major * 1000 + minor * 10, format!("{cc_major}.{cc_minor}"))
            }
            None => (12040, "8.0".to_string()),
        };
        conf.push_str(&format!(
            "cuda_driver_version={cuda}\ncompute_capability={cc}\n"
        ));
        for g in gpus {
            conf.push_str(&format!(
                "{}|{}|{}|{}|{}|{}|{}\n",
                g.uuid,
                g.name,
                g.memory_bytes,
                g.pci_bus_id,
                g.nvml_numa_node,
                g.minor,
                g.unsupported
            ));
            if self.board.is_none() {
                self.write(&format!("/dev/nvidia{}", g.minor), "");
            }
            if openrm {
                self.write_procfs_gpu(g);
            }
            let bus = sysfs_bus_id(&g.pci_bus_id);
            if let Some(n) = g.sysfs_numa_node {
                self.write(
                    &format!("/sys/bus/pci/devices/{bus}/numa_node"),
                    format!("{n}\n"),
                );
            }
            // The PCI identity of a discrete GPU: NVIDIA's vendor id, a 3D controller.
            if self.board.is_none() && bus != "-" {
                self.write(&format!("/sys/bus/pci/devices/{bus}/vendor"), "0x10de\n");
                self.write(&format!("/sys/bus/pci/devices/{bus}/class"), "0x030200\n");
            }
        }
        if self.board.is_none() {
            for node in ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] {
                self.write(node, "");
            }
        }
        if openrm {
            // The kernel module's sysfs directory (what the node labeller looks for).
            self.write("/sys/module/nvidia/version", "550.54.15\n");
            self.write(
                "/proc/driver/nvidia/version",
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:21:54 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
            );
        }
        std::fs::write(dir.join("fake-nvml.conf"), conf).expect("write fake NVML config");
        self.nvml_dir = Some(dir);
        self
    }

    /// The driver's `/proc/driver/nvidia/gpus/<bus>/information` for `g`, in the format of
    /// open-gpu-kernel-modules `kernel-open/nvidia/nv-procfs.c`.
    fn write_procfs_gpu(&self, g: &FakeGpu) {
        let bus = sysfs_bus_id(&g.pci_bus_id);
        self.write(
            &format!("/proc/driver/nvidia/gpus/{bus}/information"),
            format!(
                "Model: \t\t {}\nIRQ:   \t\t 187\nGPU UUID: \t {}\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t {}\nGPU Excluded:\t No\n",
                g.name, g.uuid, g.minor
            ),
        );
    }

    /// A MIG server: two H100s ([`FakeGpu::two_h100`]) with MIG mode on for `enabled` (NVML
    /// indices) holding `migs`.
    pub fn mig_server(enabled: &[u32], migs: &[FakeMig]) -> (FakeHost, Vec<FakeGpu>) {
        let gpus = FakeGpu::two_h100();
        let host = FakeHost::discrete(&gpus);
        host.set_mig(&gpus, enabled, migs);
        (host, gpus)
    }

    /// A Jetson of `board` with its release's NVML where it ships one (JetPack 6 and 7),
    /// installed where L4T puts it (`/usr/lib/aarch64-linux-gnu/nvidia`).
    pub fn jetson_with_nvml(board: Board) -> FakeHost {
        let host = FakeHost::jetson(board);
        match board.nvml() {
            Some(gpu) => host.with_nvml("/usr/lib/aarch64-linux-gnu/nvidia", &[gpu]),
            None => host,
        }
    }

    /// Sets the MIG state (a MIG reconfiguration when the plugin already runs): MIG mode on
    /// for `enabled` GPUs (NVML indices) with the MIG devices `migs`, in the fake NVML and in
    /// the driver's procfs capabilities (`/proc/driver/nvidia/capabilities/gpu<minor>/mig/
    /// gi<G>/ci<C>/access`, `/proc/driver/nvidia-caps/mig-minors`) and `/dev/nvidia-caps`.
    pub fn set_mig(&self, gpus: &[FakeGpu], enabled: &[u32], migs: &[FakeMig]) {
        self.set_mig_with_slot_errors(gpus, enabled, migs, &[]);
    }

    /// [`FakeHost::set_mig`] where MIG device slots `(gpu, slot, nvmlReturn_t)` of
    /// `nvmlDeviceGetMigDeviceHandleByIndex` answer an error (`2` = INVALID_ARGUMENT, `6` =
    /// NOT_FOUND); the MIG devices fill the other slots in order.
    pub fn set_mig_with_slot_errors(
        &self,
        gpus: &[FakeGpu],
        enabled: &[u32],
        migs: &[FakeMig],
        slot_errors: &[(u32, u32, i32)],
    ) {
        let mut conf = String::new();
        for (gpu, slot, code) in slot_errors {
            conf.push_str(&format!("slot {gpu} {slot} {code}\n"));
        }
        for (i, _) in gpus.iter().enumerate() {
            let on = enabled.contains(&(i as u32));
            conf.push_str(&format!("mode {i} {}\n", u8::from(on)));
        }
        for m in migs {
            conf.push_str(&format!(
                "device {}|{}|{}|{}|{}|{}|{}|{}",
                m.gpu, m.uuid, m.gi, m.ci, m.gi_slices, m.ci_slices, m.memory_mib, m.profile
            ));
            if let Some(id) = m.gi_profile_id {
                conf.push_str(&format!("|{id}"));
            }
            conf.push('\n');
        }
        // The driver's capability tree: every possible instance has a minor in mig-minors;
        // only created instances have a directory under capabilities/.
        let caps = self.path("/proc/driver/nvidia/capabilities");
        let _ = std::fs::remove_dir_all(&caps);
        let mut minors = String::from("config 1\nmonitor 2\n");
        for g in gpus {
            for gi in 0..15u32 {
                let base = 3 + g.minor * 200 + gi * 10;
                minors.push_str(&format!("gpu{}/gi{gi}/access {base}\n", g.minor));
                for ci in 0..8u32 {
                    minors.push_str(&format!(
                        "gpu{}/gi{gi}/ci{ci}/access {}\n",
                        g.minor,
                        base + 1 + ci
                    ));
                }
            }
        }
        self.write("/proc/driver/nvidia-caps/mig-minors", minors);
        for m in migs {
            let g = &gpus[m.gpu as usize];
            let gi_dir = format!(
                "/proc/driver/nvidia/capabilities/gpu{}/mig/gi{}",
                g.minor, m.gi
            );
            let gi_minor = 3 + g.minor * 200 + m.gi * 10;
            self.write(
                &format!("{gi_dir}/access"),
                format!("DeviceFileMinor: {gi_minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
            );
            self.write(
                &format!("{gi_dir}/ci{}/access", m.ci),
                format!(
                    "DeviceFileMinor: {}\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
                    gi_minor + 1 + m.ci
                ),
            );
            self.write(&format!("/dev/nvidia-caps/nvidia-cap{gi_minor}"), "");
            self.write(
                &format!("/dev/nvidia-caps/nvidia-cap{}", gi_minor + 1 + m.ci),
                "",
            );
        }
        // Atomic, with a new modification time: the fake re-reads it on the next MIG query.
        let dir = self.nvml_dir();
        let tmp = dir.join("mig.conf.tmp");
        std::fs::write(&tmp, conf).expect("write mig.conf");
        std::fs::rename(&tmp, dir.join("mig.conf")).expect("publish mig.conf");
    }

    /// Queues a critical XID event for MIG instance (`gi`, `ci`) of GPU `gpu`.
    pub fn inject_mig_xid(&self, gpu: u32, xid: u64, gi: u32, ci: u32) {
        let dir = self.nvml_dir();
        let tmp = dir.join("xid-events.tmp");
        std::fs::write(&tmp, format!("{gpu} {xid} {gi} {ci}\n")).expect("write xid");
        std::fs::rename(&tmp, dir.join("xid-events")).expect("publish xid");
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn board(&self) -> Option<Board> {
        self.board
    }

    /// `host_path` (absolute, as on the host) inside this root.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.dir.path().join(host_path.trim_start_matches('/'))
    }

    /// Writes a file (creating parent directories).
    pub fn write(&self, host_path: &str, contents: impl AsRef<[u8]>) {
        let p = self.path(host_path);
        std::fs::create_dir_all(p.parent().unwrap()).expect("create parent dir");
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }

    pub fn mkdir(&self, host_path: &str) {
        std::fs::create_dir_all(self.path(host_path)).expect("mkdir");
    }

    /// A relative symlink at `link` pointing to `target` (both host paths), like sysfs's.
    pub fn symlink(&self, link: &str, target: &str) {
        let link_path = self.path(link);
        std::fs::create_dir_all(link_path.parent().unwrap()).expect("create link dir");
        let depth = link.trim_start_matches('/').matches('/').count();
        let relative = format!("{}{}", "../".repeat(depth), target.trim_start_matches('/'));
        std::os::unix::fs::symlink(relative, &link_path).expect("symlink");
    }

    /// A symlink at `link` (host path) with exactly `target` as its content.
    pub fn symlink_raw(&self, link: &str, target: &str) {
        let link_path = self.path(link);
        std::fs::create_dir_all(link_path.parent().unwrap()).expect("create link dir");
        std::os::unix::fs::symlink(target, &link_path).expect("symlink");
    }

    /// Removes a device node (a GPU "going away").
    pub fn remove_node(&self, host_path: &str) {
        std::fs::remove_file(self.path(host_path)).expect("remove node");
    }

    /// Recreates a device node.
    pub fn restore_node(&self, host_path: &str) {
        self.write(host_path, "");
    }

    /// Makes the GPU `load` file unreadable (works as root too: a directory replaces it).
    /// On Thor, which has no `load`, the devfreq `cur_freq` is broken instead.
    pub fn break_gpu_sysfs(&self) {
        let board = self.board.expect("a Jetson root");
        let file = board.load_file().unwrap_or_else(|| board.cur_freq_file());
        let p = self.path(&file);
        std::fs::remove_file(&p).expect("remove sysfs file");
        std::fs::create_dir(&p).expect("replace sysfs file with a directory");
    }

    /// Undoes [`FakeHost::break_gpu_sysfs`].
    pub fn restore_gpu_sysfs(&self) {
        let board = self.board.expect("a Jetson root");
        let file = board.load_file().unwrap_or_else(|| board.cur_freq_file());
        let p = self.path(&file);
        std::fs::remove_dir(&p).expect("remove the directory");
        std::fs::write(&p, "0\n").expect("rewrite sysfs file");
    }

    /// The directory holding this root's fake NVML (and its control files).
    pub fn nvml_dir(&self) -> &Path {
        self.nvml_dir
            .as_deref()
            .expect("this root has no fake NVML")
    }

    /// The compute mode the fake NVML holds for GPU `gpu` (NVML's enum: 0 default, 3
    /// exclusive process), as `nvmlDeviceSetComputeMode` left it.
    pub fn compute_mode(&self, gpu: u32) -> u32 {
        std::fs::read_to_string(self.nvml_dir().join(format!("compute-mode-{gpu}")))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Queues a critical XID event for the GPU with NVML index `gpu`.
    pub fn inject_xid(&self, gpu: u32, xid: u64) {
        let dir = self.nvml_dir();
        let tmp = dir.join("xid-events.tmp");
        std::fs::write(&tmp, format!("{gpu} {xid}\n")).expect("write xid");
        // Atomic: the fake consumes the file with rename.
        std::fs::rename(&tmp, dir.join("xid-events")).expect("publish xid");
    }

    /// Makes GPU `gpu` answer NVML_ERROR_GPU_IS_LOST (fallen off the bus).
    pub fn lose_gpu(&self, gpu: u32) {
        std::fs::write(self.nvml_dir().join(format!("lost-{gpu}")), "").expect("mark lost");
    }

    /// The GPU answers again.
    pub fn recover_gpu(&self, gpu: u32) {
        std::fs::remove_file(self.nvml_dir().join(format!("lost-{gpu}"))).expect("unmark lost");
    }
}
