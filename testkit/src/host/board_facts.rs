//! What each simulated board's files hold (`impl Board`: device tree, release file, device
//! nodes, GPU sysfs, thermal zones, power monitor, meminfo, NVML) and its power monitor's
//! layout ([`PowerMonitor`]). `jetson.rs` writes them into a root.

use super::discrete::FakeGpu;
use crate::board::Board;

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
    pub(super) fn sysfs(self) -> (&'static str, &'static str, &'static str, bool) {
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

    /// The board's nvpmodel configuration, in the format L4T's files use (PARAM blocks, then
    /// one `POWER_MODEL` block per mode, then `PM_CONFIG`), with the GPU's highest devfreq
    /// frequency and the ceiling of the boot-default mode (Hz). Mode names, ids and defaults
    /// are the boards' own; the clock values are representative. Thor's file is not modelled:
    /// its modes are not verified here (docs/power.md).
    pub fn nvpmodel(self) -> Option<(String, u64, u64)> {
        let (modes, default, hardware_max): (&[(u32, &str, i64)], u32, u64) = match self {
            Board::Nano => (&[(0, "MAXN", -1), (1, "5W", 640_000_000)], 0, 921_600_000),
            Board::Xavier => (
                &[
                    (0, "MAXN", -1),
                    (1, "MODE_10W", 520_000_000),
                    (2, "MODE_15W", 670_000_000),
                    (3, "MODE_30W_ALL", 900_000_000),
                ],
                2,
                1_377_000_000,
            ),
            Board::Orin => (
                &[
                    (0, "MAXN", -1),
                    (1, "MODE_15W", 420_750_000),
                    (2, "MODE_30W", 624_750_000),
                    (3, "MODE_50W", 828_750_000),
                ],
                2,
                1_300_500_000,
            ),
            Board::OrinR39 => (
                &[
                    (0, "MAXN", -1),
                    (1, "10W", 408_000_000),
                    (2, "15W", 612_000_000),
                    (3, "25W", 918_000_000),
                ],
                3,
                1_173_000_000,
            ),
            Board::Thor => return None,
        };
        let (dev, devfreq, _, _) = self.sysfs();
        let mut conf = format!(
            "# nvpmodel configuration (test double)\n\
             < PARAM TYPE=FILE NAME=CPU_ONLINE >\n\
             CORE_0 /sys/devices/system/cpu/cpu0/online\n\
             CORE_1 /sys/devices/system/cpu/cpu1/online\n\
             < PARAM TYPE=CLOCK NAME=GPU >\n\
             FREQ_TABLE {dev}/devfreq/{devfreq}/available_frequencies\n\
             MAX_FREQ {dev}/devfreq/{devfreq}/max_freq\n\
             MIN_FREQ {dev}/devfreq/{devfreq}/min_freq\n\
             < PARAM TYPE=CLOCK NAME=EMC >\n\
             MAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap\n\n"
        );
        for (id, name, gpu) in modes {
            let second_core = u8::from(*gpu < 0 || *id != 1);
            conf.push_str(&format!(
                "< POWER_MODEL ID={id} NAME={name} >\n\
                 CPU_ONLINE CORE_0 1\n\
                 CPU_ONLINE CORE_1 {second_core}\n\
                 GPU MIN_FREQ 0\n\
                 GPU MAX_FREQ {gpu}\n\
                 EMC MAX_FREQ 0\n\n"
            ));
        }
        conf.push_str(&format!(
            "# mandatory section to configure the default mode\n< PM_CONFIG DEFAULT={default} >\n"
        ));
        let boot_ceiling = modes
            .iter()
            .find(|(id, _, _)| *id == default)
            .and_then(|(_, _, gpu)| u64::try_from(*gpu).ok())
            .unwrap_or(hardware_max);
        Some((conf, boot_ceiling, hardware_max))
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

    /// The GPU's devfreq directory (host path).
    pub fn devfreq_dir(self) -> String {
        let (dev, devfreq, _, _) = self.sysfs();
        format!("{dev}/devfreq/{devfreq}")
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
    pub(super) fn meminfo(self, nvmap_kb: u64) -> String {
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

/// One accelerator engine (DLA core or PVA instance) of a fake Jetson: its device nodes, its
/// platform device directory and the debugfs clock that gives its rate. Spelled out here
/// rather than taken from `edgegpu_platform::engines`, so tests check the plugin against
/// independent facts: meta-tegra's CSV lists per L4T release (`l4t.csv` on R32.7/R35,
/// `devices.csv` on R36+) and NVIDIA `jetson_clocks` for the sysfs and clock names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeEngine {
    /// `dla` or `pva`.
    pub kind: &'static str,
    pub index: u32,
    pub nodes: &'static [&'static str],
    /// Host path of the platform device directory.
    pub sysfs: &'static str,
    /// debugfs clock name (`/sys/kernel/debug/clk/<clock>/clk_rate`).
    pub clock: &'static str,
}

impl Board {
    /// The DLA and PVA engines of this board's module on its L4T release: none on Nano; on
    /// Xavier (R35) both nodes of 2 DLA and 2 PVA; on AGX Orin (R36) and Orin NX 16 GB (R39)
    /// the control nodes of 2 DLA and 1 PVA; on Thor (R38) one PVA control node.
    pub fn engines(self) -> Vec<FakeEngine> {
        let e = |kind, index, nodes, sysfs, clock| FakeEngine {
            kind,
            index,
            nodes,
            sysfs,
            clock,
        };
        match self {
            Board::Nano => Vec::new(),
            Board::Xavier => vec![
                e(
                    "dla",
                    0,
                    &["/dev/nvhost-ctrl-nvdla0", "/dev/nvhost-nvdla0"],
                    "/sys/devices/platform/13e10000.host1x/15880000.nvdla0",
                    "dla0_core",
                ),
                e(
                    "dla",
                    1,
                    &["/dev/nvhost-ctrl-nvdla1", "/dev/nvhost-nvdla1"],
                    "/sys/devices/platform/13e10000.host1x/158c0000.nvdla1",
                    "dla1_core",
                ),
                e(
                    "pva",
                    0,
                    &["/dev/nvhost-ctrl-pva0", "/dev/nvhost-pva0"],
                    "/sys/devices/platform/13e10000.host1x/16000000.pva0",
                    "pva0_vps0",
                ),
                e(
                    "pva",
                    1,
                    &["/dev/nvhost-ctrl-pva1", "/dev/nvhost-pva1"],
                    "/sys/devices/platform/13e10000.host1x/16800000.pva1",
                    "pva1_vps0",
                ),
            ],
            Board::Orin | Board::OrinR39 => vec![
                e(
                    "dla",
                    0,
                    &["/dev/nvhost-ctrl-nvdla0"],
                    "/sys/devices/platform/bus@0/13e00000.host1x/15880000.nvdla0",
                    "dla0_core",
                ),
                e(
                    "dla",
                    1,
                    &["/dev/nvhost-ctrl-nvdla1"],
                    "/sys/devices/platform/bus@0/13e00000.host1x/158c0000.nvdla1",
                    "dla1_core",
                ),
                e(
                    "pva",
                    0,
                    &["/dev/nvhost-ctrl-pva0"],
                    "/sys/devices/platform/bus@0/13e00000.host1x/16000000.pva0",
                    "pva0_vps",
                ),
            ],
            Board::Thor => vec![e(
                "pva",
                0,
                &["/dev/nvhost-ctrl-pva0"],
                "/sys/devices/platform/bus@0/13e00000.host1x/16000000.pva0",
                "pva0_vps",
            )],
        }
    }
}
