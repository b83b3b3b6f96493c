//! Fake host roots for the device plugin's `--root`: a Jetson per generation (Nano on L4T
//! r32, Xavier r35, Orin r36/JetPack 6, Thor r38) with the files of
//! `shared/reference/jetson-platform.md`, and a discrete-GPU server whose NVML is the fake
//! `libnvidia-ml.so.1` (`fakes/nvml.c`) copied into the root.
//!
//! Device nodes are plain files (tests run unprivileged); the plugin only checks that they
//! exist. Every root is its own temporary directory and its own copy of the fake NVML, so
//! tests in one process never share NVML state.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// A Jetson module generation (with the L4T release the fake root carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Board {
    /// Jetson Nano devkit, T210, L4T r32.7.6 (JetPack 4.6.6).
    Nano,
    /// Jetson AGX Xavier, T194, L4T r35.4.1 (JetPack 5.1.2).
    Xavier,
    /// Jetson AGX Orin devkit, T234, L4T r36.4.3 (JetPack 6.2).
    Orin,
    /// Jetson AGX Thor devkit, T264, L4T r38.2.1 (JetPack 7.0).
    Thor,
}

impl Board {
    pub const ALL: [Board; 4] = [Board::Nano, Board::Xavier, Board::Orin, Board::Thor];

    /// Lower-case name (`nano`, `xavier`, `orin`, `thor`).
    pub fn name(self) -> &'static str {
        match self {
            Board::Nano => "nano",
            Board::Xavier => "xavier",
            Board::Orin => "orin",
            Board::Thor => "thor",
        }
    }

    pub fn from_name(name: &str) -> Option<Board> {
        Board::ALL.into_iter().find(|b| b.name() == name)
    }

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
            Board::Thor => "NVIDIA Jetson AGX Thor Developer Kit",
        }
    }

    pub fn dtsfilename(self) -> &'static str {
        match self {
            Board::Nano => "/dvs/git/dirty/git-master_linux/kernel/kernel-4.9/arch/arm64/boot/dts/../../../../../../hardware/nvidia/platform/t210/porg/kernel-dts/tegra210-p3448-0000-p3449-0000-b00.dts",
            Board::Xavier => "/dvs/git/dirty/git-master_linux/kernel/kernel-5.10/arch/arm64/boot/dts/../../../../../../hardware/nvidia/platform/t19x/galen/kernel-dts/tegra194-p2888-0001-p2822-0000.dts",
            Board::Orin => "/dvs/git/dirty/git-master_linux/kernel/kernel-jammy-src/arch/arm64/boot/dts/nvidia/tegra234-p3737-0000+p3701-0005-nv.dts",
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
            Board::Thor => Some(38),
        }
    }

    /// `/etc/nv_tegra_release`.
    pub fn nv_tegra_release(self) -> &'static str {
        match self {
            Board::Nano => "# R32 (release), REVISION: 7.6, GCID: 38171779, BOARD: t210ref, EABI: aarch64, DATE: Tue Nov  5 07:46:14 UTC 2024\n# KERNEL_VARIANT: oot\n",
            Board::Xavier => "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
            Board::Orin => "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
            Board::Thor => "# R38 (release), REVISION: 2.1, GCID: 41844464, BOARD: generic, EABI: aarch64, DATE: Mon Aug 18 20:23:11 UTC 2025\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
        }
    }

    /// The L4T version the plugin should report.
    pub fn l4t(self) -> &'static str {
        match self {
            Board::Nano => "32.7.6",
            Board::Xavier => "35.4.1",
            Board::Orin => "36.4.3",
            Board::Thor => "38.2.1",
        }
    }

    /// Device nodes present on the board (reference §4).
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

    /// (runtime CSV file name, contents): old boards use bare names, newer ones paths and globs.
    pub fn csv(self) -> (&'static str, &'static str) {
        match self {
            Board::Nano => (
                "l4t.csv",
                "dev, nvhost-ctrl\ndev, nvhost-gpu\ndev, nvmap\ndev, nvhost-vic\ndev, nvhost-nvjpg\nlib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1\nsym, /usr/lib/aarch64-linux-gnu/libcuda.so\n",
            ),
            Board::Xavier => (
                "l4t.csv",
                "dev, /dev/nvhost-ctrl\ndev, /dev/nvhost-nvdla0\ndev, /dev/nvhost-nvdla1\ndev, /dev/tegra_dc_1\nlib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1\n",
            ),
            Board::Orin => (
                "devices.csv",
                "dev, /dev/nvgpu/igpu0/*\ndev, /dev/dri/card*\ndev, /dev/dri/renderD*\ndir, /dev/dri/by-path\ndev, /dev/nvsciipc\ndev, /dev/fb0\n",
            ),
            Board::Thor => ("devices.csv", "dev, /dev/nvgpu/igpu*/*\ndev, /dev/dri/card*\ndev, /dev/nvidia-uvm\n"),
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
            Board::Orin => (
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
            Board::Xavier | Board::Thor => None,
        }
    }

    /// `MemTotal` of the fake root's `/proc/meminfo`, in kB.
    pub fn mem_total_kb(self) -> u64 {
        match self {
            Board::Nano => 4_051_032,
            Board::Xavier => 32_559_164,
            Board::Orin => 64_335_836,
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
            },
            FakeGpu {
                uuid: "GPU-9c4d1e8b-2a3f-4c7d-8e90-1b2c3d4e5f02".into(),
                name: "NVIDIA A100-SXM4-40GB".into(),
                memory_bytes: 42_949_672_960,
                pci_bus_id: "00000000:CA:00.0".into(),
                nvml_numa_node: -1,
                sysfs_numa_node: Some(1),
                minor: 1,
            },
        ]
    }

    /// JetPack 6 NVML's view of an Orin iGPU.
    pub fn orin_nvgpu() -> FakeGpu {
        FakeGpu {
            uuid: "GPU-00000000-0000-0000-0000-0000000a10b0".into(),
            name: "Orin (nvgpu)".into(),
            memory_bytes: 0,
            pci_bus_id: "-".into(),
            nvml_numa_node: -1,
            sysfs_numa_node: None,
            minor: 0,
        }
    }
}

/// A fake host root in a temporary directory (removed on drop).
pub struct FakeHost {
    dir: TempDir,
    board: Option<Board>,
    nvml_dir: Option<PathBuf>,
}

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
        if board == Board::Orin {
            host.mkdir("/dev/dri/by-path");
        }
        let (csv_name, csv) = board.csv();
        host.write(
            &format!("/etc/nvidia-container-runtime/host-files-for-container.d/{csv_name}"),
            csv,
        );

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
            Board::Xavier | Board::Orin => {}
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
        let text: String = values.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        let dir = self.nvml_dir();
        let tmp = dir.join(format!("telemetry-{gpu}.tmp"));
        std::fs::write(&tmp, text).expect("write telemetry");
        std::fs::rename(&tmp, dir.join(format!("telemetry-{gpu}"))).expect("publish telemetry");
    }

    /// A discrete-GPU server whose NVML (the fake) reports `gpus`, with their /dev nodes,
    /// the control nodes (no `nvidia-modeset`: it is optional) and the sysfs NUMA files.
    pub fn discrete(gpus: &[FakeGpu]) -> FakeHost {
        let host = FakeHost::empty();
        host.with_nvml(arch_lib_dir(), gpus)
    }

    /// Installs the fake NVML into `lib_dir` (a host path) reporting `gpus`.
    pub fn with_nvml(mut self, lib_dir: &str, gpus: &[FakeGpu]) -> FakeHost {
        let dir = self.path(lib_dir);
        std::fs::create_dir_all(&dir).expect("create lib dir");
        // A copy, not a link: glibc loads one instance per file, so each root gets its own.
        std::fs::copy(
            crate::fakelib::variant_dir("nvml").join("libnvidia-ml.so.1"),
            dir.join("libnvidia-ml.so.1"),
        )
        .expect("copy fake NVML");
        let mut conf = String::from("# uuid|name|memory_bytes|pci_bus_id|numa_node|minor\n");
        // CUDA 12.6 on JetPack 6 (r36.4) and Orin's 8.7; a 550-series driver's 12.4 and the
        // A100's 8.0 on a server.
        let (cuda, cc) = if self.board == Some(Board::Orin) {
            (12060, "8.7")
        } else {
            (12040, "8.0")
        };
        conf.push_str(&format!(
            "cuda_driver_version={cuda}\ncompute_capability={cc}\n"
        ));
        for g in gpus {
            conf.push_str(&format!(
                "{}|{}|{}|{}|{}|{}\n",
                g.uuid, g.name, g.memory_bytes, g.pci_bus_id, g.nvml_numa_node, g.minor
            ));
            if self.board.is_none() {
                self.write(&format!("/dev/nvidia{}", g.minor), "");
            }
            let bus = g.pci_bus_id.to_ascii_lowercase();
            let bus = match bus.split_once(':') {
                Some((d, rest)) if d.len() > 4 => format!("{}:{rest}", &d[d.len() - 4..]),
                _ => bus,
            };
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
        std::fs::write(dir.join("fake-nvml.conf"), conf).expect("write fake NVML config");
        self.nvml_dir = Some(dir);
        self
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
