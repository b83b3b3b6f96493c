//! The table: one entry per Jetson generation. To support a new generation, add an entry.
//!
//! Sources, by field:
//! - `modules`, `cuda.capability`: jetson_stats `jtop/core/jetson_variables.py`
//!   (`MODULE_NAME_TABLE`, `CUDA_TABLE`) and the L4T Developer Guide's module list; Thor's
//!   renumbering (SM101 → SM110 from CUDA 13.0) is in the CUDA 13.0 release notes.
//! - `detect.compatible` / `chip_id`: the upstream Linux device trees
//!   (`arch/arm64/boot/dts/nvidia/tegra*.dtsi`) and `drivers/soc/tegra/fuse/` (`TEGRA*`
//!   chip ids); `l4t_majors_only_here` / `marker_file`: the L4T release notes (r38 is Thor
//!   only) and jetson_stats `jtop/core/thor_gpu.py` (the `gpu-gpc-0` devfreq node).
//! - `cuda.device_name`: `cuDeviceGetName` as NVIDIA's deviceQuery sample prints it on the
//!   boards (Orin's in docs/devicequery.md, Nano's and Thor's in devicequery/tests/golden/).
//! - `l4t_majors`: the Jetson Linux release notes' supported-module lists (r32: Nano/TX1/TX2/
//!   Xavier; r35: Xavier, Orin; r36: Orin; r38: Thor; r39: Thor and Orin).
//! - `nvml`: NVIDIA go-nvlib `pkg/nvlib/info/property-extractor.go` (`IsIntegratedGPUName`) and
//!   the JetPack 6 / 7 release notes (NVML on Jetson, supported queries, MIG on Thor); per
//!   release in docs/platforms.md with the facts not confirmed on hardware marked.
//! - `container_nodes`: the `dev` lines of L4T's container CSV files
//!   (`/etc/nvidia-container-runtime/host-files-for-container.d/l4t.csv` on r32,
//!   `devices.csv` on r36) and meta-tegra's `recipes-bsp/tegra-binaries/tegra-configs/
//!   devices.csv` (which adds `nvidia-uvm*` and `nvidia1` for r39); Thor's OpenRM nodes from
//!   the r38 CSV files.
//! - `required_nodes`: the nodes `libcuda` opens (nvgpu: `nvhost-ctrl-gpu`, `nvhost-gpu`,
//!   `nvhost-as-gpu`, `nvmap`; OpenRM: `nvidia0`, `nvidiactl`).
//! - `sysfs`: nvgpu's `os/linux/sysfs.c` (`load`), the devfreq nodes of each L4T kernel, and
//!   jetson_stats `jtop/core/gpu.py` (`find_igpu`: the `of_node` names).
//! - `thermal_zones`: the thermal-zone names of the L4T device trees (`GPU-therm` r32/r35,
//!   `gpu-thermal` r36).
//! - `power_rails`: the INA3221 rail labels of the L4T device trees (`ina3221x` channels on
//!   r32, `ina3221` hwmon labels on r34+); which units a rail feeds: the module data sheets'
//!   power-monitor sections and the L4T Developer Guide's power-management pages (Orin's
//!   `VDD_CPU_GPU_CV` and `VDD_GPU_SOC` are shared rails).
//! - `mps`: NVIDIA's MPS documentation ("Considerations": Tegra supports only Volta MPS, i.e.
//!   compute capability 7.0 and later) and the L4T package `nvidia-l4t-cuda-utils`, which
//!   ships `/usr/bin/nvidia-cuda-mps-control` from R36.4 (JetPack 6.1) on; meta-tegra
//!   packages it as `tegra-cuda-utils` from its R36.4.0 branch on (and for R38/R39), never for
//!   R32/R35.

use crate::generation::{
    Capability, Cuda, Detect, Generation, GpuDriver, GpuSysfs, KnownGpuDir, Module, Mps, NameMatch,
    Nvml, NvmlAnswers, PowerRails,
};

/// Device nodes of the nvgpu driver that CUDA cannot work without.
const NVGPU_REQUIRED: &[&str] = &[
    "/dev/nvhost-ctrl-gpu",
    "/dev/nvhost-gpu",
    "/dev/nvhost-as-gpu",
    "/dev/nvmap",
];

/// r32's `l4t.csv` device list (Nano/TX1 and TX2).
const L4T_R32_NODES: &[&str] = &[
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
    "/dev/tegra_dc_ctrl",
    "/dev/tegra_dc_0",
    "/dev/tegra_dc_1",
];

/// NVML on nvgpu (Orin, JetPack 6 and 7.2): identity only.
const NVGPU_NVML_IDENTITY_ONLY: NvmlAnswers = NvmlAnswers {
    l4t_major: 0,
    driver: GpuDriver::Nvgpu,
    uuid: true,
    memory_info: false,
    pci_info: false,
    utilization: false,
    temperature: false,
    power: false,
    clocks: false,
    xid_events: false,
    mig: false,
};

/// NVML on OpenRM (Thor, JetPack 7): identity, PCI (the iGPU sits at `0000:01:00.0`),
/// utilisation and MIG; memory, clocks, power and temperature are NotSupported.
const THOR_OPENRM_NVML: NvmlAnswers = NvmlAnswers {
    l4t_major: 0,
    driver: GpuDriver::OpenRm,
    uuid: true,
    memory_info: false,
    pci_info: true,
    utilization: true,
    temperature: false,
    power: false,
    clocks: false,
    xid_events: false,
    mig: true,
};

/// GPU thermal zone of the r32 / r35 device trees.
const GPU_THERM: &[&str] = &["GPU-therm"];

/// Every Jetson generation with a CUDA-capable GPU, oldest first.
pub static GENERATIONS: &[Generation] = &[
    Generation {
        soc: "T210",
        name: "Nano/TX1 (T210)",
        modules: &[
            Module {
                part: "p3448",
                product: "Jetson Nano",
                sku_products: &[],
            },
            Module {
                part: "p2180",
                product: "Jetson TX1",
                sku_products: &[],
            },
        ],
        l4t_majors: &[32],
        detect: Detect {
            compatible: "tegra210",
            chip_id: 0x21,
            l4t_majors_only_here: &[],
            marker_file: None,
        },
        cuda: Cuda {
            capability: &[Capability {
                since: (0, 0),
                major: 5,
                minor: 3,
            }],
            device_name: Some("NVIDIA Tegra X1"),
        },
        nvml: None,
        container_nodes: L4T_R32_NODES,
        required_nodes: NVGPU_REQUIRED,
        sysfs: GpuSysfs {
            of_node_names: &["gpu"],
            load_file: true,
            known_dirs: &[KnownGpuDir {
                l4t_majors: &[32],
                load: Some("/sys/devices/gpu.0/load"),
                devfreq: "/sys/devices/gpu.0/devfreq/57000000.gpu",
            }],
            devfreq_names: &["57000000.gpu"],
        },
        thermal_zones: GPU_THERM,
        power_rails: &[PowerRails {
            modules: &["p3448"],
            driver: "ina3221x",
            labels: &["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"],
            gpu_rail: Some("POM_5V_GPU"),
            gpu_rail_is_gpu_only: true,
        }],
        mps: Mps::Unsupported(
            "its Maxwell GPU (compute capability 5.3) predates Volta, and Tegra runs only Volta MPS",
        ),
    },
    Generation {
        soc: "T186",
        name: "TX2 (T186)",
        modules: &[
            Module {
                part: "p3310",
                product: "Jetson TX2",
                sku_products: &[],
            },
            Module {
                part: "p3489",
                product: "Jetson TX2i",
                sku_products: &[],
            },
            Module {
                part: "p3636",
                product: "Jetson TX2 NX",
                sku_products: &[],
            },
        ],
        l4t_majors: &[32],
        detect: Detect {
            compatible: "tegra186",
            chip_id: 0x18,
            l4t_majors_only_here: &[],
            marker_file: None,
        },
        cuda: Cuda {
            capability: &[Capability {
                since: (0, 0),
                major: 6,
                minor: 2,
            }],
            // Not confirmed on a board yet.
            device_name: None,
        },
        nvml: None,
        container_nodes: L4T_R32_NODES,
        required_nodes: NVGPU_REQUIRED,
        sysfs: GpuSysfs {
            of_node_names: &["gp10b"],
            load_file: true,
            known_dirs: &[KnownGpuDir {
                l4t_majors: &[32],
                load: Some("/sys/devices/17000000.gp10b/load"),
                devfreq: "/sys/devices/17000000.gp10b/devfreq/17000000.gp10b",
            }],
            devfreq_names: &["17000000.gp10b"],
        },
        thermal_zones: GPU_THERM,
        // Unverified on hardware (docs/platforms.md): the rail names of the L4T r32
        // device trees as tegrastats and jetson_stats `jtop/core/power.py` print them.
        power_rails: &[
            // TX2 / TX2i: two monitors; the GPU has a rail of its own.
            PowerRails {
                modules: &["p3310", "p3489"],
                driver: "ina3221x",
                labels: &[
                    "VDD_SYS_GPU",
                    "VDD_SYS_SOC",
                    "VDD_4V0_WIFI",
                    "VDD_IN",
                    "VDD_SYS_CPU",
                    "VDD_SYS_DDR",
                ],
                gpu_rail: Some("VDD_SYS_GPU"),
                gpu_rail_is_gpu_only: true,
            },
            // TX2 NX: one monitor, CPU and GPU on one rail.
            PowerRails {
                modules: &["p3636"],
                driver: "ina3221x",
                labels: &["VDD_IN", "VDD_CPU_GPU", "VDD_SOC"],
                gpu_rail: Some("VDD_CPU_GPU"),
                gpu_rail_is_gpu_only: false,
            },
        ],
        mps: Mps::Unsupported(
            "its Pascal GPU (compute capability 6.2) predates Volta, and Tegra runs only Volta MPS",
        ),
    },
    Generation {
        soc: "T194",
        name: "Xavier (T194)",
        modules: &[
            Module {
                part: "p2888",
                product: "Jetson AGX Xavier",
                sku_products: &[],
            },
            Module {
                part: "p3668",
                product: "Jetson Xavier NX",
                sku_products: &[],
            },
        ],
        l4t_majors: &[32, 35],
        detect: Detect {
            compatible: "tegra194",
            chip_id: 0x19,
            l4t_majors_only_here: &[],
            marker_file: None,
        },
        cuda: Cuda {
            capability: &[Capability {
                since: (0, 0),
                major: 7,
                minor: 2,
            }],
            device_name: Some("Xavier"),
        },
        nvml: None,
        container_nodes: &[
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
            "/dev/tegra_dc_1",
        ],
        required_nodes: NVGPU_REQUIRED,
        sysfs: GpuSysfs {
            of_node_names: &["gv11b"],
            load_file: true,
            known_dirs: &[KnownGpuDir {
                l4t_majors: &[32, 35],
                load: Some("/sys/devices/17000000.gv11b/load"),
                devfreq: "/sys/devices/17000000.gv11b/devfreq/17000000.gv11b",
            }],
            devfreq_names: &["17000000.gv11b"],
        },
        thermal_zones: GPU_THERM,
        // Unverified on hardware (docs/platforms.md): the rail names of the L4T r32 / r35
        // device trees as tegrastats and jetson_stats `jtop/core/power.py` print them
        // (`ina3221x` on r32, `ina3221` hwmon on r35: the labels are the same).
        power_rails: &[
            // AGX Xavier: two monitors; the GPU has a rail of its own.
            PowerRails {
                modules: &["p2888"],
                driver: "ina3221",
                labels: &["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"],
                gpu_rail: Some("GPU"),
                gpu_rail_is_gpu_only: true,
            },
            // Xavier NX: one monitor, CPU, GPU and CV on one rail.
            PowerRails {
                modules: &["p3668"],
                driver: "ina3221",
                labels: &["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"],
                gpu_rail: Some("VDD_CPU_GPU_CV"),
                gpu_rail_is_gpu_only: false,
            },
        ],
        // Volta, but no release for Xavier (R32, R35) ships the MPS binary.
        mps: Mps::Volta {
            binary_since_l4t: (36, 4),
        },
    },
    Generation {
        soc: "T234",
        name: "Orin (T234)",
        modules: &[
            Module {
                part: "p3701",
                product: "Jetson AGX Orin",
                sku_products: &[],
            },
            Module {
                part: "p3767",
                product: "Jetson Orin NX",
                sku_products: &[
                    ("0003", "Jetson Orin Nano"),
                    ("0004", "Jetson Orin Nano"),
                    ("0005", "Jetson Orin Nano"),
                ],
            },
        ],
        l4t_majors: &[35, 36, 39],
        detect: Detect {
            compatible: "tegra234",
            chip_id: 0x23,
            l4t_majors_only_here: &[36],
            marker_file: None,
        },
        cuda: Cuda {
            capability: &[Capability {
                since: (0, 0),
                major: 8,
                minor: 7,
            }],
            device_name: Some("Orin"),
        },
        nvml: Some(Nvml {
            name: NameMatch::Contains("(nvgpu)"),
            releases: &[
                // JetPack 6: `nvidia-smi -L` names the GPU and its UUID; everything else is
                // N/A or NotSupported.
                NvmlAnswers {
                    l4t_major: 36,
                    ..NVGPU_NVML_IDENTITY_ONLY
                },
                // JetPack 7.2 on Orin: NVML loads, identity answers, the rest NotSupported.
                NvmlAnswers {
                    l4t_major: 39,
                    ..NVGPU_NVML_IDENTITY_ONLY
                },
            ],
        }),
        container_nodes: &[
            "/dev/nvgpu/igpu0/*",
            "/dev/nvhost-as-gpu",
            "/dev/nvhost-ctrl-gpu",
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-ctrl-nvdla1",
            "/dev/nvhost-ctrl-pva0",
            "/dev/nvhost-ctxsw-gpu",
            "/dev/nvhost-dbg-gpu",
            "/dev/nvhost-gpu",
            "/dev/nvhost-nvsched-gpu",
            "/dev/nvhost-power-gpu",
            "/dev/nvhost-prof-ctx-gpu",
            "/dev/nvhost-prof-dev-gpu",
            "/dev/nvhost-prof-gpu",
            "/dev/nvhost-sched-gpu",
            "/dev/nvhost-tsg-gpu",
            "/dev/nvmap",
            "/dev/nvidia0",
            "/dev/nvidia1",
            "/dev/nvidiactl",
            "/dev/nvidia-modeset",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvsciipc",
            "/dev/host1x-fence",
            "/dev/dri/card*",
            "/dev/dri/renderD*",
            "/dev/fb0",
            "/dev/fb1",
            "/dev/v4l2-nvdec",
            "/dev/v4l2-nvenc",
        ],
        required_nodes: NVGPU_REQUIRED,
        sysfs: GpuSysfs {
            of_node_names: &["ga10b", "gpu"],
            load_file: true,
            known_dirs: &[
                // r36 (JetPack 6) and r39 (JetPack 7.2, same nvgpu layout)
                KnownGpuDir {
                    l4t_majors: &[36, 39],
                    load: Some("/sys/devices/platform/bus@0/17000000.gpu/load"),
                    devfreq: "/sys/class/devfreq/17000000.gpu",
                },
                // r35 (JetPack 5)
                KnownGpuDir {
                    l4t_majors: &[35],
                    load: Some("/sys/devices/17000000.ga10b/load"),
                    devfreq: "/sys/devices/17000000.ga10b/devfreq_dev",
                },
            ],
            devfreq_names: &["17000000.gpu", "17000000.ga10b"],
        },
        thermal_zones: &["gpu-thermal"],
        power_rails: &[
            PowerRails {
                modules: &["p3767"],
                driver: "ina3221",
                labels: &["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"],
                gpu_rail: Some("VDD_CPU_GPU_CV"),
                gpu_rail_is_gpu_only: false,
            },
            PowerRails {
                modules: &["p3701"],
                driver: "ina3221",
                labels: &["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"],
                gpu_rail: Some("VDD_GPU_SOC"),
                gpu_rail_is_gpu_only: false,
            },
        ],
        mps: Mps::Volta {
            binary_since_l4t: (36, 4),
        },
    },
    Generation {
        soc: "T264",
        name: "Thor (T264)",
        modules: &[Module {
            part: "p3834",
            product: "Jetson AGX Thor",
            sku_products: &[],
        }],
        l4t_majors: &[38, 39],
        detect: Detect {
            compatible: "tegra264",
            chip_id: 0x26,
            l4t_majors_only_here: &[38],
            marker_file: Some("/sys/class/devfreq/gpu-gpc-0"),
        },
        cuda: Cuda {
            capability: &[
                Capability {
                    since: (0, 0),
                    major: 10,
                    minor: 1,
                },
                Capability {
                    since: (13, 0),
                    major: 11,
                    minor: 0,
                },
            ],
            device_name: Some("NVIDIA Thor"),
        },
        nvml: Some(Nvml {
            name: NameMatch::Exact("NVIDIA Thor"),
            releases: &[
                NvmlAnswers {
                    l4t_major: 38,
                    ..THOR_OPENRM_NVML
                },
                NvmlAnswers {
                    l4t_major: 39,
                    ..THOR_OPENRM_NVML
                },
            ],
        }),
        container_nodes: &[
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset",
            "/dev/nvgpu/igpu*/*",
            "/dev/nvmap",
            "/dev/dri/card*",
            "/dev/dri/renderD*",
            "/dev/v4l2-nvdec",
            "/dev/v4l2-nvenc",
        ],
        required_nodes: &["/dev/nvidia0", "/dev/nvidiactl"],
        sysfs: GpuSysfs {
            of_node_names: &["gb10b"],
            // OpenRM has no nvgpu `load` file; utilisation comes from NVML.
            load_file: false,
            known_dirs: &[KnownGpuDir {
                l4t_majors: &[38, 39],
                load: None,
                devfreq: "/sys/class/devfreq/gpu-gpc-0",
            }],
            devfreq_names: &["gpu-gpc-0", "gpu-nvd-0"],
        },
        thermal_zones: &[],
        power_rails: &[],
        // CUDA 13.0 for Thor brings MPS (NVIDIA's "What's new in CUDA 13.0 for Jetson Thor").
        mps: Mps::Volta {
            binary_since_l4t: (38, 2),
        },
    },
];
