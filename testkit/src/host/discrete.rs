//! Discrete GPUs and MIG: the GPUs ([`FakeGpu`]) and MIG devices ([`FakeMig`]) of the fake
//! NVML, a discrete-GPU server's root, installing the fake NVML into a root (with the
//! driver's procfs on OpenRM hosts) and setting the MIG state.

use super::fake_host::FakeHost;
use crate::board::Board;

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

/// NVML's bus id `00000000:17:00.0` as sysfs and procfs name it: `0000:17:00.0`.
fn sysfs_bus_id(nvml_bus_id: &str) -> String {
    let bus = nvml_bus_id.to_ascii_lowercase();
    match bus.split_once(':') {
        Some((d, rest)) if d.len() > 4 => format!("{}:{rest}", &d[d.len() - 4..]),
        _ => bus,
    }
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
    /// The NVIDIA driver's user-space files of a discrete host (driver 550.54.15) as the CDI
    /// generator finds them: the versioned libraries with their `.so.1` soname links in the
    /// host architecture's library folder, `nvidia-smi` and the firmware folder. An existing
    /// `.so.1` (the plugin's fake NVML in these roots is a file) is kept.
    pub fn with_driver_libs(&self) {
        let dir = if cfg!(target_arch = "aarch64") {
            "/usr/lib/aarch64-linux-gnu"
        } else {
            "/usr/lib/x86_64-linux-gnu"
        };
        for lib in ["libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"] {
            self.write(&format!("{dir}/{lib}.so.550.54.15"), "ELF");
            if !self.path(&format!("{dir}/{lib}.so.1")).exists() {
                self.symlink_raw(&format!("{dir}/{lib}.so.1"), &format!("{lib}.so.550.54.15"));
            }
        }
        self.write("/usr/bin/nvidia-smi", "ELF");
        self.mkdir("/lib/firmware/nvidia/550.54.15");
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
}
