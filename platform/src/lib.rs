//! What each NVIDIA Jetson (Tegra) generation looks like to software, as data.
//!
//! [`GENERATIONS`] holds one [`Generation`] entry per SoC generation with a CUDA-capable GPU.
//! Detection, health checks and the device specs of the device plugin all read it (and
//! devicequery and GPU telemetry are meant to), so supporting a new generation means adding
//! one entry there and nothing else. Host paths and parsers that do not depend on the
//! generation are in [`host`] (L4T's nvpmodel configuration and status in [`nvpmodel`]); the CDI device names the device plugin and node-setup share, in
//! [`cdi`]; the DLA and PVA engines besides the GPU, in [`engines`].
//!
//! No I/O happens here: the crate only describes; callers read the host under their own root.

pub mod cdi;
pub mod csv;
pub mod engines;
mod generation;
pub mod host;
pub mod nvpmodel;
pub mod procfs;
mod table;

pub use generation::{
    Capability, Cuda, Detect, Generation, GpuDriver, GpuSysfs, KnownGpuDir, Module, Mps, NameMatch,
    Nvml, NvmlAnswers, PowerRails,
};
pub use table::GENERATIONS;

/// The DRA driver's name (its ResourceSlices' `driver`, its attributes' domain, the name it
/// registers with the kubelet under: `plugins_registry/<name>-reg.sock`), here so that
/// `edgegpu-node-setup doctor` finds its sockets without linking the driver.
pub const DRA_DRIVER_NAME: &str = "edgegpu.io";

/// A line of a host file that could not be parsed: its 1-based number and what is wrong
/// (callers add the file name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

impl Generation {
    /// The generation whose device-tree SoC token is `token` (`tegra234`).
    pub fn by_compatible(token: &str) -> Option<&'static Generation> {
        GENERATIONS.iter().find(|g| g.detect.compatible == token)
    }

    /// The generation with this `tegra_chip_id`.
    pub fn by_chip_id(id: u32) -> Option<&'static Generation> {
        GENERATIONS.iter().find(|g| g.detect.chip_id == id)
    }

    /// The generation an L4T major release alone names, if only one runs it.
    pub fn by_l4t_major(major: u32) -> Option<&'static Generation> {
        GENERATIONS
            .iter()
            .find(|g| g.detect.l4t_majors_only_here.contains(&major))
    }

    /// What NVML answers for the integrated GPU on L4T major release `l4t_major`; `None`
    /// where that release ships no real NVML.
    pub fn nvml_answers(&self, l4t_major: u32) -> Option<&NvmlAnswers> {
        self.nvml.as_ref()?.answers(l4t_major)
    }

    /// The known GPU sysfs locations of L4T major release `l4t_major` first, then the others.
    pub fn known_dirs_for(&self, l4t_major: Option<u32>) -> Vec<&KnownGpuDir> {
        let (mut first, rest): (Vec<&KnownGpuDir>, Vec<&KnownGpuDir>) = self
            .sysfs
            .known_dirs
            .iter()
            .partition(|d| l4t_major.is_some_and(|m| d.l4t_majors.contains(&m)));
        first.extend(rest);
        first
    }

    /// The compute capability CUDA `cuda` (major, minor) reports for this GPU.
    pub fn compute_capability(&self, cuda: (u32, u32)) -> Option<(u32, u32)> {
        self.cuda
            .capability
            .iter()
            .rev()
            .find(|c| c.since <= cuda)
            .map(|c| (c.major, c.minor))
    }
}

/// Product name of a module part number such as `p3767-0005`.
pub fn module_product(part: &str) -> Option<&'static str> {
    let (id, sku) = part.split_once('-').unwrap_or((part, ""));
    let module = GENERATIONS
        .iter()
        .flat_map(|g| g.modules)
        .find(|m| m.part == id)?;
    Some(
        module
            .sku_products
            .iter()
            .find(|(s, _)| *s == sku)
            .map_or(module.product, |(_, product)| product),
    )
}

/// Whether a devfreq device's `of_node/name` is a Jetson GPU: a name of the table, or any
/// name containing `gpu`.
pub fn is_gpu_of_node_name(name: &str) -> bool {
    GENERATIONS
        .iter()
        .any(|g| g.sysfs.of_node_names.contains(&name))
        || name.contains("gpu")
}

/// Whether NVML's device name is a Jetson integrated GPU (`Orin (nvgpu)`, `NVIDIA Thor`).
pub fn is_integrated_nvml_name(name: &str) -> bool {
    GENERATIONS
        .iter()
        .filter_map(|g| g.nvml.as_ref())
        .any(|n| n.name.matches(name))
}

/// Device nodes a CUDA container may need when the generation is unknown: the union of
/// what the generations use (only nodes present on the host are passed on).
pub const UNKNOWN_GENERATION_CONTAINER_NODES: &[&str] = &[
    "/dev/nvhost-*",
    "/dev/nvgpu/igpu*/*",
    "/dev/nvmap",
    "/dev/nvidia0",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique() {
        for (i, a) in GENERATIONS.iter().enumerate() {
            for b in &GENERATIONS[i + 1..] {
                assert_ne!(a.soc, b.soc);
                assert_ne!(a.detect.compatible, b.detect.compatible);
                assert_ne!(a.detect.chip_id, b.detect.chip_id);
                for major in a.detect.l4t_majors_only_here {
                    assert!(!b.detect.l4t_majors_only_here.contains(major));
                }
            }
            for (j, m) in a.modules.iter().enumerate() {
                assert!(
                    GENERATIONS
                        .iter()
                        .flat_map(|g| g.modules)
                        .filter(|n| n.part == m.part)
                        .count()
                        == 1,
                    "{} listed twice (entry {j} of {a:?})",
                    m.part
                );
            }
        }
    }

    /// Tegra runs only Volta MPS: an entry may offer MPS only for a Volta-or-later GPU, and
    /// refuses it otherwise with a reason to show.
    #[test]
    fn mps_only_on_volta_and_later() {
        for g in GENERATIONS {
            let volta = g.cuda.capability.iter().all(|c| c.major >= 7);
            match g.mps {
                Mps::Volta { binary_since_l4t } => {
                    assert!(volta, "{}: MPS offered on a pre-Volta GPU", g.soc);
                    assert!(binary_since_l4t.0 >= 36, "{}", g.soc);
                }
                Mps::Unsupported(reason) => {
                    assert!(!volta, "{}: a Volta GPU refused MPS ({reason})", g.soc);
                    assert!(reason.contains("Volta"), "{}: {reason}", g.soc);
                }
            }
        }
    }

    #[test]
    fn every_entry_is_complete_where_the_code_relies_on_it() {
        for g in GENERATIONS {
            assert!(g.name.contains(g.soc), "{g:?}");
            assert!(g.detect.compatible.starts_with("tegra"), "{g:?}");
            assert!(!g.container_nodes.is_empty(), "{g:?}");
            assert!(!g.required_nodes.is_empty(), "{g:?}");
            assert!(!g.cuda.capability.is_empty(), "{g:?}");
            assert!(
                g.cuda
                    .capability
                    .windows(2)
                    .all(|w| w[0].since < w[1].since),
                "{g:?}: capabilities not ascending"
            );
            assert!(!g.sysfs.known_dirs.is_empty(), "{g:?}");
            // A generation without a `load` file has no known load path either.
            if !g.sysfs.load_file {
                assert!(g.sysfs.known_dirs.iter().all(|d| d.load.is_none()), "{g:?}");
            }
            // Every node required for health is also passed to containers.
            for node in g.required_nodes {
                assert!(g.container_nodes.contains(node), "{g:?}: {node}");
            }
            assert!(
                !g.l4t_majors.is_empty() && g.l4t_majors.windows(2).all(|w| w[0] < w[1]),
                "{g:?}: l4t_majors empty or not ascending"
            );
            // A release that names the generation alone is one it runs.
            for major in g.detect.l4t_majors_only_here {
                assert!(g.l4t_majors.contains(major), "{g:?}: r{major}");
            }
            // Every known sysfs location belongs to releases of this generation.
            for dir in g.sysfs.known_dirs {
                assert!(!dir.l4t_majors.is_empty(), "{g:?}: {}", dir.devfreq);
                for major in dir.l4t_majors {
                    assert!(
                        g.l4t_majors.contains(major),
                        "{g:?}: {} r{major}",
                        dir.devfreq
                    );
                }
            }
            // NVML answers are per release the generation runs, ascending, from the first.
            if let Some(nvml) = &g.nvml {
                assert!(!nvml.releases.is_empty(), "{g:?}");
                assert!(
                    nvml.releases
                        .windows(2)
                        .all(|w| w[0].l4t_major < w[1].l4t_major),
                    "{g:?}: NVML releases not ascending"
                );
                for r in nvml.releases {
                    assert!(
                        g.l4t_majors.contains(&r.l4t_major),
                        "{g:?}: r{}",
                        r.l4t_major
                    );
                }
            }
        }
    }

    #[test]
    fn nvml_answers_per_release() {
        let orin = Generation::by_compatible("tegra234").unwrap();
        assert_eq!(orin.nvml_answers(35), None, "JetPack 5 has no real NVML");
        let r36 = orin.nvml_answers(36).unwrap();
        assert!(r36.uuid && !r36.memory_info && !r36.pci_info && !r36.utilization);
        assert_eq!(r36.driver, GpuDriver::Nvgpu);
        assert_eq!(orin.nvml_answers(39).unwrap().l4t_major, 39);
        let thor = Generation::by_compatible("tegra264").unwrap();
        let r38 = thor.nvml_answers(38).unwrap();
        assert!(r38.utilization && r38.pci_info && r38.mig && !r38.memory_info);
        assert_eq!(r38.driver, GpuDriver::OpenRm);
        assert_eq!(thor.nvml.as_ref().unwrap().since_l4t(), 38);
        let nano = Generation::by_compatible("tegra210").unwrap();
        assert_eq!(nano.nvml_answers(32), None);
    }

    #[test]
    fn known_dirs_of_the_running_release_come_first() {
        let orin = Generation::by_compatible("tegra234").unwrap();
        let r35: Vec<&str> = orin
            .known_dirs_for(Some(35))
            .iter()
            .map(|d| d.devfreq)
            .collect();
        assert_eq!(r35[0], "/sys/devices/17000000.ga10b/devfreq_dev");
        let r39: Vec<&str> = orin
            .known_dirs_for(Some(39))
            .iter()
            .map(|d| d.devfreq)
            .collect();
        assert_eq!(r39[0], "/sys/class/devfreq/17000000.gpu");
        assert_eq!(orin.known_dirs_for(None).len(), 2);
    }

    #[test]
    fn lookups() {
        let orin = Generation::by_compatible("tegra234").unwrap();
        assert_eq!(orin.soc, "T234");
        assert_eq!(Generation::by_chip_id(0x21).unwrap().soc, "T210");
        assert_eq!(Generation::by_chip_id(7), None);
        assert_eq!(Generation::by_l4t_major(38).unwrap().soc, "T264");
        assert_eq!(Generation::by_l4t_major(36).unwrap().soc, "T234");
        // r35 (Xavier and Orin) and r39 (Orin and Thor) name no generation alone.
        assert_eq!(Generation::by_l4t_major(35), None);
        assert_eq!(Generation::by_l4t_major(39), None);
        assert_eq!(Generation::by_compatible("tegra124"), None);
        assert_eq!(orin.compute_capability((12, 6)), Some((8, 7)));
        let thor = Generation::by_compatible("tegra264").unwrap();
        assert_eq!(thor.compute_capability((12, 9)), Some((10, 1)));
        assert_eq!(thor.compute_capability((13, 0)), Some((11, 0)));
    }

    #[test]
    fn modules_and_names() {
        assert_eq!(module_product("p3767-0000"), Some("Jetson Orin NX"));
        assert_eq!(module_product("p3767-0005"), Some("Jetson Orin Nano"));
        assert_eq!(module_product("p3701-0005"), Some("Jetson AGX Orin"));
        assert_eq!(module_product("p3448"), Some("Jetson Nano"));
        assert_eq!(module_product("p9999-0000"), None);
        assert!(is_gpu_of_node_name("ga10b"));
        assert!(is_gpu_of_node_name("gb10b"));
        assert!(is_gpu_of_node_name("17000000.gpu"));
        assert!(!is_gpu_of_node_name("cpu"));
        assert!(is_integrated_nvml_name("Orin (nvgpu)"));
        assert!(is_integrated_nvml_name("NVIDIA Thor"));
        assert!(!is_integrated_nvml_name("NVIDIA A100-SXM4-40GB"));
    }
}
