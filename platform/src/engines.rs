//! The Jetson accelerator engines besides the GPU: DLA (NVDLA deep-learning accelerator) cores
//! and PVA (programmable vision accelerator) instances, as data.
//!
//! The table says what *may* exist on a module; the host's device nodes say what does. A
//! caller probes every candidate index of [`EngineKind::max_per_soc`] (or of the module's
//! [`ModuleEngines`]) and keeps the engines whose device nodes exist, so an Orin NX 8 GB that
//! shows one DLA node gets one DLA however the table counts it.
//!
//! Sources (each fact below names its own):
//! - Engine counts: cuDLA API docs (docs.nvidia.com/cuda/cudla-api, `CUDLA_DEVICE_VERSION`
//!   "Xavier 1.0, Orin 2.0"); NVIDIA/Deep-Learning-Accelerator-SW README ("up to two
//!   second-generation DLAs" on Orin); TensorRT 11.4.1 "Working with DLA" ("Jetson Thor, which
//!   has no DLA"); NVIDIA `jetson_clocks` (T194 clocks `pva0_*`, `pva1_*`).
//! - Device nodes: the NVIDIA container runtime CSV lists as packaged by OE4T/meta-tegra:
//!   `kirkstone-l4t-r32.7.x` `l4t.csv` (R32.7), `scarthgap-l4t-r35.x`
//!   `recipes-bsp/tegra-binaries/tegra-configs/l4t.csv` (R35), `scarthgap` and
//!   `master-l4t-r38.2.x` `tegra-configs/devices.csv` (R36, R38/R39; the same list is in
//!   NVIDIA/nvidia-container-toolkit testdata `csv-mode/…/devices.csv`).
//! - Platform devices, host1x parents and clock names: NVIDIA's `jetson_clocks` script
//!   (functions `dla_get_state`, `pva_get_state`, `host1x_get_node`).
//!
//! Also the rule for which device nodes a container holding engines gets,
//! [`container_nodes`], so that the device plugin, the DRA driver and `cdi generate`'s specs
//! cannot drift apart.
//!
//! No I/O here: callers read the host under their own root.

/// Which kind of engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    /// An NVDLA core; TensorRT and cuDLA address it by its index (`setDLACore(n)`).
    Dla,
    /// A PVA instance.
    Pva,
}

impl EngineKind {
    /// Both kinds, DLA first.
    pub const ALL: [EngineKind; 2] = [EngineKind::Dla, EngineKind::Pva];

    /// Lower-case name used in IDs, resource names and labels: `dla`, `pva`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Dla => "dla",
            EngineKind::Pva => "pva",
        }
    }

    /// The extended resource / CDI kind: `nvidia.com/dla`, `nvidia.com/pva` (the latter is
    /// the CDI kind JetPack's `pva-allow-2` package registers, per NVIDIA-ISAAC-ROS
    /// isaac_ros_common `scripts/run_dev.sh`, release-3.2).
    pub fn resource_name(self) -> &'static str {
        match self {
            EngineKind::Dla => "nvidia.com/dla",
            EngineKind::Pva => "nvidia.com/pva",
        }
    }

    /// Device ID of engine `index`: `dla0`, `pva1`.
    pub fn device_id(self, index: u32) -> String {
        format!("{}{index}", self.name())
    }

    /// The CDI device name of engine `index` within kind [`EngineKind::resource_name`]:
    /// `0`, `1` for DLA; `pva0` for PVA. The PVA names carry the `pva` prefix (and there is
    /// never an `all` PVA device) so they cannot clash with the names of JetPack's own
    /// `/etc/cdi/nvidia-pva.yaml` (package `pva-allow-2`, whose content is not known; Isaac
    /// ROS asks it for `nvidia.com/pva=all`).
    pub fn cdi_device(self, index: u32) -> String {
        match self {
            EngineKind::Dla => index.to_string(),
            EngineKind::Pva => format!("pva{index}"),
        }
    }

    /// The fully qualified CDI name of engine `index`: `nvidia.com/dla=0`, `nvidia.com/pva=pva0`.
    pub fn cdi_name(self, index: u32) -> String {
        format!("{}={}", self.resource_name(), self.cdi_device(index))
    }

    /// Most instances of this kind any generation of `soc` (`T194`, `T234`, …) may carry;
    /// 0 where none. Unknown SoCs get the largest count of any (2), so that an unlisted board
    /// is still probed.
    pub fn max_per_soc(self, soc: Option<&str>) -> u32 {
        let Some(soc) = soc else {
            return 2;
        };
        match ENGINES_BY_SOC.iter().find(|s| s.soc == soc) {
            Some(s) => s.modules.iter().map(|m| m.count(self)).max().unwrap_or(0),
            None => 2,
        }
    }

    /// The device nodes of engine `index` that L4T major release `l4t_major` creates, control
    /// node first. An unknown release gets every name any release uses (callers keep the ones
    /// that exist).
    ///
    /// R32.7: `nvhost-nvdla<n>` and `nvhost-ctrl-nvdla<n>`, no PVA node listed. R35: the same
    /// for DLA plus `nvhost-pva<n>` and `nvhost-ctrl-pva<n>`. R36, R38, R39: only
    /// `nvhost-ctrl-nvdla<n>` and `nvhost-ctrl-pva0` (meta-tegra CSV lists above). Whether
    /// the non-ctrl nodes still exist on R36+ is **unverified**; they are probed all the same.
    pub fn device_nodes(self, index: u32, l4t_major: Option<u32>) -> Vec<String> {
        let (ctrl, plain) = match self {
            EngineKind::Dla => (
                format!("/dev/nvhost-ctrl-nvdla{index}"),
                format!("/dev/nvhost-nvdla{index}"),
            ),
            EngineKind::Pva => (
                format!("/dev/nvhost-ctrl-pva{index}"),
                format!("/dev/nvhost-pva{index}"),
            ),
        };
        match (self, l4t_major) {
            (EngineKind::Pva, Some(32)) => Vec::new(),
            (_, Some(32 | 35)) => vec![ctrl, plain],
            (_, Some(_)) => vec![ctrl],
            (_, None) => vec![ctrl, plain],
        }
    }

    /// The platform device name of engine `index` under a host1x directory
    /// ([`HOST1X_DIRS`]): `15880000.nvdla0`, `158c0000.nvdla1`, `16000000.pva0`,
    /// `16800000.pva1` (`jetson_clocks`); `None` for other indices.
    pub fn platform_device(self, index: u32) -> Option<&'static str> {
        match (self, index) {
            (EngineKind::Dla, 0) => Some("15880000.nvdla0"),
            (EngineKind::Dla, 1) => Some("158c0000.nvdla1"),
            (EngineKind::Pva, 0) => Some("16000000.pva0"),
            (EngineKind::Pva, 1) => Some("16800000.pva1"),
            _ => None,
        }
    }

    /// The debugfs clock that gives engine `index`'s rate (`/sys/kernel/debug/clk/<name>/
    /// clk_rate`): `dla<n>_core`; PVA `pva<n>_vps` on T234 (and, **unverified**, T264),
    /// `pva<n>_vps0` on T194 (`jetson_clocks`).
    pub fn clock(self, index: u32, soc: Option<&str>) -> String {
        match (self, soc) {
            (EngineKind::Dla, _) => format!("dla{index}_core"),
            (EngineKind::Pva, Some("T194")) => format!("pva{index}_vps0"),
            (EngineKind::Pva, _) => format!("pva{index}_vps"),
        }
    }

    /// Nodes that belong to no engine but that a container holding an engine of this kind
    /// needs, where the host has them: [`NVMAP`] for PVA.
    pub fn companion_nodes(self) -> &'static [&'static str] {
        match self {
            EngineKind::Dla => &[],
            EngineKind::Pva => &[NVMAP],
        }
    }
}

/// The memory node PVA applications open besides the PVA's own nodes (holohub
/// `applications/pva_radar_pipeline/README.md`). The GPU uses it too, so it is never taken
/// out of a GPU container's nodes.
pub const NVMAP: &str = "/dev/nvmap";

/// The device nodes a container holding any engine of `kind` gets: the one rule of every
/// allocator (the device plugin's device specs, the DRA driver's claim edits, `cdi
/// generate`'s engine specs; docs/engines.md section 2).
///
/// `host_engines` are the nodes of each engine of `kind` the host has, by index, as found
/// (control node first); `exists` says whether a companion node is on the host. The answer is
/// every node of every engine of `kind`, then the kind's [`EngineKind::companion_nodes`]
/// that exist, each path once — the same whichever engine was allocated; none without an
/// engine node. How user space maps a core index to a node when a container sees only some
/// of them is not documented: with all of them, index `n` is the host's core `n` whether it
/// opens `nvhost-ctrl-nvdla<n>` by name or counts the nodes it finds. Which core a container uses is then the index it was given
/// (`EDGEGPU_DLA_CORES`), as in NVIDIA's CSV mode, which mounts every DLA and PVA node into
/// every GPU container (nvidia-container-toolkit testdata `csv-mode/…/devices.csv`).
pub fn container_nodes<'a>(
    kind: EngineKind,
    host_engines: impl IntoIterator<Item = &'a [String]>,
    exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    for n in host_engines.into_iter().flatten() {
        if !nodes.contains(n) {
            nodes.push(n.clone());
        }
    }
    if nodes.is_empty() {
        return nodes;
    }
    for n in kind.companion_nodes() {
        if exists(n) && !nodes.iter().any(|have| have == n) {
            nodes.push(n.to_string());
        }
    }
    nodes
}

/// The host1x bus directories the engines' platform devices sit in: T194
/// (`13e10000.host1x`), T234 on JetPack 5 (`13e40000.host1x`), and the newer kernels' path
/// under `bus@0` (`jetson_clocks`' "kstable" path; that it is JetPack 6+ is inferred).
pub const HOST1X_DIRS: &[&str] = &[
    "/sys/devices/platform/13e10000.host1x",
    "/sys/devices/platform/13e40000.host1x",
    "/sys/devices/platform/bus@0/13e00000.host1x",
];

/// Where debugfs clocks are (root only): `<dir>/<clock>/clk_rate`.
pub const DEBUGFS_CLK_DIR: &str = "/sys/kernel/debug/clk";

/// Engines of one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleEngines {
    /// Module part number as in [`crate::Module::part`] (`p3767`).
    pub part: &'static str,
    /// SKUs this row is about; empty = every SKU of the part.
    pub skus: &'static [&'static str],
    /// Product name, for docs and logs.
    pub product: &'static str,
    /// DLA cores.
    pub dla: u32,
    /// PVA instances.
    pub pva: u32,
    /// Whether a count could not be confirmed from an NVIDIA source.
    pub unverified: bool,
}

impl ModuleEngines {
    /// Instances of `kind` on this module.
    pub fn count(&self, kind: EngineKind) -> u32 {
        match kind {
            EngineKind::Dla => self.dla,
            EngineKind::Pva => self.pva,
        }
    }
}

/// The engines of the modules of one SoC generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocEngines {
    /// [`crate::Generation::soc`] (`T234`).
    pub soc: &'static str,
    pub modules: &'static [ModuleEngines],
}

/// Engines per SoC and module. Counts marked `unverified` come from third-party pages, not
/// NVIDIA datasheets.
pub const ENGINES_BY_SOC: &[SocEngines] = &[
    // Nano, TX1, TX2: no DLA or PVA (general knowledge; unverified from an NVIDIA source).
    SocEngines {
        soc: "T210",
        modules: &[
            module("p3448", &[], "Jetson Nano", 0, 0, true),
            module("p2180", &[], "Jetson TX1", 0, 0, true),
        ],
    },
    SocEngines {
        soc: "T186",
        modules: &[
            module("p3310", &[], "Jetson TX2", 0, 0, true),
            module("p3489", &[], "Jetson TX2i", 0, 0, true),
            module("p3636", &[], "Jetson TX2 NX", 0, 0, true),
        ],
    },
    SocEngines {
        soc: "T194",
        modules: &[
            // 2 × NVDLA v1 (cuDLA "Xavier 1.0"); pva0 and pva1 (jetson_clocks T194 clocks,
            // meta-tegra scarthgap-l4t-r35.x l4t.csv).
            module("p2888", &[], "Jetson AGX Xavier", 2, 2, false),
            // 2 DLA; the PVA count is unverified (borongyuan/XavierNXOverclock names a PVA
            // clock only): 2 is what the SoC has, the node probe decides.
            module("p3668", &[], "Jetson Xavier NX", 2, 2, true),
        ],
    },
    SocEngines {
        soc: "T234",
        modules: &[
            // 2 × NVDLA v2 (Deep-Learning-Accelerator-SW README), 1 PVA v2 (meta-tegra
            // devices.csv lists pva0 only).
            module("p3701", &[], "Jetson AGX Orin", 2, 1, false),
            // Orin NX 16 GB: 2 DLA, 1 PVA.
            module("p3767", &["0000"], "Jetson Orin NX 16GB", 2, 1, false),
            // Orin NX 8 GB: 1 DLA (unverified, third-party pages).
            module("p3767", &["0001"], "Jetson Orin NX 8GB", 1, 1, true),
            // Orin Nano 8/4 GB: DLA and PVA fused off (third-party pages citing the datasheet;
            // unverified).
            module(
                "p3767",
                &["0003", "0004", "0005"],
                "Jetson Orin Nano",
                0,
                0,
                true,
            ),
        ],
    },
    SocEngines {
        soc: "T264",
        // No DLA (TensorRT 11.4.1 "Working with DLA"), one PVA v3 (meta-tegra
        // tegra-firmware_39.2.0.bb ships nvpva_030.fw and no nvhost_nvdla firmware).
        modules: &[module("p3834", &[], "Jetson AGX Thor", 0, 1, false)],
    },
];

const fn module(
    part: &'static str,
    skus: &'static [&'static str],
    product: &'static str,
    dla: u32,
    pva: u32,
    unverified: bool,
) -> ModuleEngines {
    ModuleEngines {
        part,
        skus,
        product,
        dla,
        pva,
        unverified,
    }
}

/// The table row of module part number `part` (`p3767-0001`, or `p3767` alone, which gives
/// the first row of the part).
pub fn module_engines(part: &str) -> Option<&'static ModuleEngines> {
    let (id, sku) = part.split_once('-').unwrap_or((part, ""));
    let rows = ENGINES_BY_SOC
        .iter()
        .flat_map(|s| s.modules)
        .filter(|m| m.part == id);
    let mut first = None;
    for row in rows {
        if row.skus.is_empty() || row.skus.contains(&sku) {
            return Some(row);
        }
        first.get_or_insert(row);
    }
    if sku.is_empty() {
        first
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GENERATIONS;

    #[test]
    fn every_generation_has_an_engine_row_and_every_module_is_listed() {
        for g in GENERATIONS {
            let row = ENGINES_BY_SOC
                .iter()
                .find(|s| s.soc == g.soc)
                .unwrap_or_else(|| panic!("{} has no engine row", g.soc));
            for m in g.modules {
                assert!(
                    row.modules.iter().any(|e| e.part == m.part),
                    "{} ({}) missing from the engine table",
                    m.part,
                    m.product
                );
            }
        }
    }

    #[test]
    fn counts_per_module() {
        let c = |p: &str| module_engines(p).map(|m| (m.dla, m.pva));
        assert_eq!(c("p3448-0000"), Some((0, 0)));
        assert_eq!(c("p2888-0001"), Some((2, 2)));
        assert_eq!(c("p3701-0005"), Some((2, 1)));
        assert_eq!(c("p3767-0000"), Some((2, 1)));
        assert_eq!(c("p3767-0001"), Some((1, 1)));
        assert_eq!(c("p3767-0005"), Some((0, 0)));
        assert_eq!(c("p3834-0008"), Some((0, 1)));
        assert_eq!(c("p9999"), None);
        assert_eq!(c("p3767-0099"), None);
        assert!(module_engines("p3767-0001").unwrap().unverified);
        assert!(!module_engines("p3701").unwrap().unverified);
    }

    #[test]
    fn most_per_soc() {
        assert_eq!(EngineKind::Dla.max_per_soc(Some("T210")), 0);
        assert_eq!(EngineKind::Dla.max_per_soc(Some("T194")), 2);
        assert_eq!(EngineKind::Pva.max_per_soc(Some("T194")), 2);
        assert_eq!(EngineKind::Pva.max_per_soc(Some("T234")), 1);
        assert_eq!(EngineKind::Dla.max_per_soc(Some("T264")), 0);
        assert_eq!(EngineKind::Pva.max_per_soc(Some("T264")), 1);
        assert_eq!(EngineKind::Dla.max_per_soc(None), 2);
        assert_eq!(EngineKind::Dla.max_per_soc(Some("T999")), 2);
    }

    #[test]
    fn nodes_per_release() {
        assert_eq!(
            EngineKind::Dla.device_nodes(1, Some(32)),
            ["/dev/nvhost-ctrl-nvdla1", "/dev/nvhost-nvdla1"]
        );
        assert!(EngineKind::Pva.device_nodes(0, Some(32)).is_empty());
        assert_eq!(
            EngineKind::Pva.device_nodes(1, Some(35)),
            ["/dev/nvhost-ctrl-pva1", "/dev/nvhost-pva1"]
        );
        for r in [36, 38, 39] {
            assert_eq!(
                EngineKind::Dla.device_nodes(0, Some(r)),
                ["/dev/nvhost-ctrl-nvdla0"]
            );
            assert_eq!(
                EngineKind::Pva.device_nodes(0, Some(r)),
                ["/dev/nvhost-ctrl-pva0"]
            );
        }
        assert_eq!(EngineKind::Pva.device_nodes(0, None).len(), 2);
    }

    /// Each engine's nodes as [`EngineKind::device_nodes`] gives them for `release`.
    fn host(kind: EngineKind, indices: &[u32], release: u32) -> Vec<Vec<String>> {
        indices
            .iter()
            .map(|&i| kind.device_nodes(i, Some(release)))
            .collect()
    }

    #[test]
    fn a_container_gets_every_node_of_the_kind_on_every_release() {
        let r35 = host(EngineKind::Dla, &[0, 1], 35);
        assert_eq!(
            container_nodes(EngineKind::Dla, r35.iter().map(Vec::as_slice), |_| true),
            [
                "/dev/nvhost-ctrl-nvdla0",
                "/dev/nvhost-nvdla0",
                "/dev/nvhost-ctrl-nvdla1",
                "/dev/nvhost-nvdla1"
            ]
        );
        let r36 = host(EngineKind::Dla, &[0, 1], 36);
        assert_eq!(
            container_nodes(EngineKind::Dla, r36.iter().map(Vec::as_slice), |_| true),
            ["/dev/nvhost-ctrl-nvdla0", "/dev/nvhost-ctrl-nvdla1"]
        );
        // PVA: its nodes, then nvmap where the host has it; a node listed twice lands once.
        let pva = host(EngineKind::Pva, &[0, 0], 36);
        assert_eq!(
            container_nodes(EngineKind::Pva, pva.iter().map(Vec::as_slice), |n| n
                == NVMAP),
            ["/dev/nvhost-ctrl-pva0", NVMAP]
        );
        assert_eq!(
            container_nodes(EngineKind::Pva, pva.iter().map(Vec::as_slice), |_| false),
            ["/dev/nvhost-ctrl-pva0"]
        );
        assert!(container_nodes(EngineKind::Pva, Vec::<&[String]>::new(), |_| true).is_empty());
    }

    #[test]
    fn names() {
        assert_eq!(EngineKind::Dla.device_id(1), "dla1");
        assert_eq!(EngineKind::Pva.resource_name(), "nvidia.com/pva");
        assert_eq!(EngineKind::Dla.platform_device(1), Some("158c0000.nvdla1"));
        assert_eq!(EngineKind::Pva.platform_device(2), None);
        assert_eq!(EngineKind::Dla.clock(0, Some("T234")), "dla0_core");
        assert_eq!(EngineKind::Pva.clock(0, Some("T234")), "pva0_vps");
        assert_eq!(EngineKind::Pva.clock(1, Some("T194")), "pva1_vps0");
        assert_eq!(EngineKind::Dla.cdi_name(1), "nvidia.com/dla=1");
        assert_eq!(EngineKind::Pva.cdi_name(0), "nvidia.com/pva=pva0");
    }
}
