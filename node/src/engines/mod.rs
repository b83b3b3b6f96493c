//! The Jetson accelerator engines besides the GPU — DLA cores and PVA instances — found on
//! this host, for the device plugin's `nvidia.com/dla` and `nvidia.com/pva` resources and for
//! any other consumer (the Dynamic Resource Allocation driver reuses [`discover`] and
//! [`Engine::health`]).
//!
//! What may exist comes from `edgegpu_platform::engines` (per SoC and module); what does is
//! decided here from the host's device nodes: an engine is found when at least one of its
//! device nodes exists. So an Orin NX 8 GB that shows only `nvhost-ctrl-nvdla0` gets one DLA,
//! and an Orin Nano, whose engines are fused off, gets none.
//!
//! - [`discover`]: the engines under a root (blocking: stat calls).
//! - [`Engine::health`]: one check of one engine (node present, platform device bound).
//! - [`health::spawn`]: the same checks re-run on every inotify event, reported to a
//!   [`crate::gpu::health::HealthTable`].
//! - [`env_var`]: the variable naming the engines a container got (the device plugin's
//!   `Allocate` and the DRA driver's CDI edits set the same one).
//! - [`container_nodes`]: the device nodes a container holding some engines gets — every node
//!   of every engine of their kind, and `/dev/nvmap` for PVA — so that core `n` is the host's
//!   core `n` inside the container however user space maps an index to a node. The device
//!   plugin's `Allocate` and the DRA driver's claim edits both use it (the rule itself is
//!   `edgegpu_platform::engines::container_nodes`, which `cdi generate`'s engine specs use
//!   too; docs/engines.md section 2).

pub mod health;

use std::path::{Path, PathBuf};

pub use edgegpu_platform::engines::EngineKind;
use edgegpu_platform::engines::HOST1X_DIRS;
use edgegpu_platform::Generation;

use crate::gpu::under_root;

/// Env var naming the DLA cores a container got (`0`, `0,1`).
pub const DLA_CORES_ENV: &str = "EDGEGPU_DLA_CORES";
/// Env var naming the PVA instances a container got.
pub const PVA_INSTANCES_ENV: &str = "EDGEGPU_PVA_INSTANCES";
/// The env var a container gets for engines of `kind`.
pub fn env_var(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Dla => DLA_CORES_ENV,
        EngineKind::Pva => PVA_INSTANCES_ENV,
    }
}

/// One DLA core or PVA instance found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    pub kind: EngineKind,
    /// The index applications use: TensorRT's `setDLACore(index)`, cuDLA's device index,
    /// the `N` of `nvhost-ctrl-nvdlaN`.
    pub index: u32,
    /// Host paths (`/dev/nvhost-ctrl-nvdla0`, …) of its device nodes that existed at
    /// discovery, control node first. Never empty.
    pub nodes: Vec<String>,
    /// Host path of its platform device directory
    /// (`/sys/devices/platform/13e40000.host1x/15880000.nvdla0`), when found.
    pub sysfs: Option<PathBuf>,
    /// The debugfs clock that gives its rate (`dla0_core`, `pva0_vps`), whether or not
    /// debugfs is readable.
    pub clock: String,
}

impl Engine {
    /// The device ID it is advertised as: `dla0`, `pva1`.
    pub fn id(&self) -> String {
        self.kind.device_id(self.index)
    }

    /// One health check under `root`: `Err` names the problem. Unhealthy when a device node
    /// found at discovery is gone, or when its platform device (if one was found) is gone or
    /// has no driver bound (`driver` link missing). A runtime-PM status of `suspended` is the
    /// normal idle state and is healthy. Blocking (stat calls).
    pub fn health(&self, root: &Path) -> Result<(), String> {
        let missing: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| std::fs::metadata(under_root(root, n)).is_err())
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!("device node(s) missing: {}", missing.join(", ")));
        }
        if let Some(dir) = &self.sysfs {
            let full = under_root(root, &dir.to_string_lossy());
            if !full.is_dir() {
                return Err(format!("platform device {} is gone", dir.display()));
            }
            if std::fs::symlink_metadata(full.join("driver")).is_err() {
                return Err(format!(
                    "platform device {} has no driver bound",
                    dir.display()
                ));
            }
        }
        Ok(())
    }

    /// Host path of its runtime-PM status file (`…/power/runtime_status`), if its platform
    /// device is known.
    pub fn runtime_status_file(&self) -> Option<PathBuf> {
        self.sysfs
            .as_ref()
            .map(|d| d.join("power").join("runtime_status"))
    }
}

/// What the kernel tells about an engine right now; `None` where the file is missing or
/// unreadable (debugfs is root-only), never an error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineReading {
    /// Runtime-PM status: `true` for `active`, `false` for `suspended` (idle); other states
    /// (`resuming`, `suspending`, `unsupported`) give `None`.
    pub active: Option<bool>,
    /// `clk_rate` of its debugfs clock, in Hz.
    pub clock_hz: Option<u64>,
}

impl Engine {
    /// Reads its runtime-PM status and clock rate under `root`. Blocking.
    pub fn read(&self, root: &Path) -> EngineReading {
        let read = |p: &str| std::fs::read_to_string(under_root(root, p)).ok();
        let active = self
            .runtime_status_file()
            .and_then(|f| read(&f.to_string_lossy()))
            .and_then(|s| match s.trim() {
                "active" => Some(true),
                "suspended" => Some(false),
                _ => None,
            });
        let clock_hz = read(&format!(
            "{}/{}/clk_rate",
            edgegpu_platform::engines::DEBUGFS_CLK_DIR,
            self.clock
        ))
        .and_then(|s| s.trim().parse().ok());
        EngineReading { active, clock_hz }
    }
}

/// Engine probes run by this process: each logs its number (debug), so a test can tell how
/// often a round probed (one snapshot per round).
static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The engines under `root` (`/` on the host), DLA first, by index. `generation` bounds the
/// indices probed (none for Nano/TX1/TX2; unknown probes up to two of each); `l4t_major`
/// picks the release's device node names (unknown: every name any release uses). Blocking.
pub fn discover(
    root: &Path,
    generation: Option<&Generation>,
    l4t_major: Option<u32>,
) -> Vec<Engine> {
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    tracing::debug!("Probing the DLA and PVA engines (engine probe #{n} of this process)");
    let soc = generation.map(|g| g.soc);
    let mut found = Vec::new();
    for kind in EngineKind::ALL {
        for index in 0..kind.max_per_soc(soc) {
            let nodes: Vec<String> = kind
                .device_nodes(index, l4t_major)
                .into_iter()
                .filter(|n| std::fs::metadata(under_root(root, n)).is_ok())
                .collect();
            if nodes.is_empty() {
                continue;
            }
            found.push(Engine {
                kind,
                index,
                nodes,
                sysfs: platform_device_dir(root, kind, index),
                clock: kind.clock(index, soc),
            });
        }
    }
    found
}

/// The engines of the Jetson under `root`: its generation and L4T release from the same probe
/// the GPU discovery uses (`gpu::discovery::tegra`); none on a host that is not a Jetson.
/// Blocking.
pub fn discover_on_host(root: &Path) -> Vec<Engine> {
    let tegra = crate::gpu::discovery::tegra::TegraDetection::probe(root);
    if !tegra.is_tegra() {
        return Vec::new();
    }
    let l4t_major = tegra
        .l4t
        .as_deref()
        .and_then(|v| v.split('.').next()?.parse().ok());
    discover(root, tegra.generation, l4t_major)
}

/// The first host1x directory holding engine `index`'s platform device (host path).
fn platform_device_dir(root: &Path, kind: EngineKind, index: u32) -> Option<PathBuf> {
    let name = kind.platform_device(index)?;
    HOST1X_DIRS
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| under_root(root, p).is_dir())
        .map(PathBuf::from)
}

/// The engines of `kind` in `engines`.
pub fn of_kind(engines: &[Engine], kind: EngineKind) -> Vec<Engine> {
    engines.iter().filter(|e| e.kind == kind).cloned().collect()
}

/// The host device nodes (container path = host path) a container holding `chosen` gets,
/// `engines` being every engine the host has ([`discover`]): for each kind among `chosen`,
/// every node of every engine of that kind, by index, then `/dev/nvmap` for PVA where it
/// exists under `root` (`edgegpu_platform::engines::container_nodes`, the one rule of both
/// allocators). Empty when `chosen` is. Blocking (a stat per companion node).
pub fn container_nodes(root: &Path, engines: &[Engine], chosen: &[&Engine]) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    for kind in EngineKind::ALL {
        if !chosen.iter().any(|e| e.kind == kind) {
            continue;
        }
        // A chosen engine missing from `engines` still gets its own nodes.
        let mut host: Vec<&Engine> = engines.iter().filter(|e| e.kind == kind).collect();
        for e in chosen.iter().filter(|e| e.kind == kind) {
            if !host.iter().any(|h| h.index == e.index) {
                host.push(e);
            }
        }
        host.sort_by_key(|e| e.index);
        let exists = |n: &str| std::fs::metadata(under_root(root, n)).is_ok();
        for n in edgegpu_platform::engines::container_nodes(
            kind,
            host.iter().map(|e| e.nodes.as_slice()),
            exists,
        ) {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn touch(root: &Path, path: &str) {
        let p = under_root(root, path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, "").unwrap();
    }

    fn orin() -> &'static Generation {
        Generation::by_compatible("tegra234").unwrap()
    }

    #[test]
    fn finds_what_the_nodes_show() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "/dev/nvhost-ctrl-nvdla0");
        touch(root, "/dev/nvhost-ctrl-pva0");
        let dev = "/sys/devices/platform/bus@0/13e00000.host1x/15880000.nvdla0";
        fs::create_dir_all(under_root(root, dev)).unwrap();
        let found = discover(root, Some(orin()), Some(36));
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].id(), "dla0");
        assert_eq!(found[0].nodes, ["/dev/nvhost-ctrl-nvdla0"]);
        assert_eq!(found[0].sysfs.as_deref(), Some(Path::new(dev)));
        assert_eq!(found[1].id(), "pva0");
        assert_eq!(found[1].sysfs, None);
    }

    #[test]
    fn nano_tx2_and_empty_hosts_have_none() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "/dev/nvhost-ctrl-nvdla0");
        let t210 = Generation::by_compatible("tegra210").unwrap();
        assert!(discover(dir.path(), Some(t210), Some(32)).is_empty());
        let empty = tempfile::tempdir().unwrap();
        assert!(discover(empty.path(), Some(orin()), Some(36)).is_empty());
    }

    #[test]
    fn r35_keeps_both_nodes() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["/dev/nvhost-ctrl-nvdla1", "/dev/nvhost-nvdla1"] {
            touch(dir.path(), n);
        }
        let found = discover(dir.path(), Some(orin()), Some(35));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].index, 1);
        assert_eq!(
            found[0].nodes,
            ["/dev/nvhost-ctrl-nvdla1", "/dev/nvhost-nvdla1"]
        );
    }

    #[test]
    fn xavier_r32_has_dla_and_no_pva_node_names() {
        // R32.7's l4t.csv lists both DLA nodes per core and no PVA node: a PVA node there is
        // not one of the release's names.
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "/dev/nvhost-nvdla0",
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-nvdla1",
            "/dev/nvhost-ctrl-nvdla1",
            "/dev/nvhost-ctrl-pva0",
        ] {
            touch(dir.path(), n);
        }
        let xavier = Generation::by_compatible("tegra194").unwrap();
        let found = discover(dir.path(), Some(xavier), Some(32));
        let ids: Vec<String> = found.iter().map(Engine::id).collect();
        assert_eq!(ids, ["dla0", "dla1"]);
        assert_eq!(found[1].nodes.len(), 2);
        assert_eq!(found[1].clock, "dla1_core");
    }

    /// The nodes a container holding engine `kind` `index` gets on the host under `root`.
    fn nodes_for(root: &Path, release: u32, kind: EngineKind, index: u32) -> Vec<String> {
        let engines = discover(root, Some(orin()), Some(release));
        let chosen = engines
            .iter()
            .find(|e| e.kind == kind && e.index == index)
            .unwrap();
        container_nodes(root, &engines, &[chosen])
    }

    #[test]
    fn a_core_index_keeps_its_host_meaning_on_r35_and_r36() {
        // R35: two nodes per engine; R36: control nodes only. Either way a container with
        // DLA core 1 sees every DLA node, so index 1 names the same core inside and out.
        let r35 = tempfile::tempdir().unwrap();
        for n in [
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-nvdla0",
            "/dev/nvhost-ctrl-nvdla1",
            "/dev/nvhost-nvdla1",
            "/dev/nvhost-ctrl-pva0",
            "/dev/nvhost-pva0",
        ] {
            touch(r35.path(), n);
        }
        let all_dla = [
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-nvdla0",
            "/dev/nvhost-ctrl-nvdla1",
            "/dev/nvhost-nvdla1",
        ];
        assert_eq!(nodes_for(r35.path(), 35, EngineKind::Dla, 1), all_dla);
        assert_eq!(nodes_for(r35.path(), 35, EngineKind::Dla, 0), all_dla);
        // No /dev/nvmap on this root: none given.
        assert_eq!(
            nodes_for(r35.path(), 35, EngineKind::Pva, 0),
            ["/dev/nvhost-ctrl-pva0", "/dev/nvhost-pva0"]
        );

        let r36 = tempfile::tempdir().unwrap();
        for n in [
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-ctrl-nvdla1",
            "/dev/nvhost-ctrl-pva0",
            "/dev/nvmap",
        ] {
            touch(r36.path(), n);
        }
        assert_eq!(
            nodes_for(r36.path(), 36, EngineKind::Dla, 1),
            ["/dev/nvhost-ctrl-nvdla0", "/dev/nvhost-ctrl-nvdla1"]
        );
        assert_eq!(
            nodes_for(r36.path(), 36, EngineKind::Pva, 0),
            ["/dev/nvhost-ctrl-pva0", "/dev/nvmap"]
        );
    }

    #[test]
    fn container_nodes_stay_within_the_chosen_kinds() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-ctrl-pva0",
            "/dev/nvmap",
        ] {
            touch(dir.path(), n);
        }
        let engines = discover(dir.path(), Some(orin()), Some(36));
        assert!(container_nodes(dir.path(), &engines, &[]).is_empty());
        // A DLA container gets no PVA node and no nvmap.
        assert_eq!(
            container_nodes(dir.path(), &engines, &[&engines[0]]),
            ["/dev/nvhost-ctrl-nvdla0"]
        );
        // A chosen engine the list lacks still gets its own nodes.
        let dla1 = Engine {
            index: 1,
            nodes: vec!["/dev/nvhost-ctrl-nvdla1".into()],
            ..engines[0].clone()
        };
        assert_eq!(
            container_nodes(dir.path(), &engines, &[&dla1]),
            ["/dev/nvhost-ctrl-nvdla0", "/dev/nvhost-ctrl-nvdla1"]
        );
    }

    #[test]
    fn health_follows_node_and_driver() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "/dev/nvhost-ctrl-nvdla0");
        let dev = "/sys/devices/platform/13e40000.host1x/15880000.nvdla0";
        touch(root, &format!("{dev}/driver"));
        touch(root, &format!("{dev}/power/runtime_status"));
        fs::write(
            under_root(root, &format!("{dev}/power/runtime_status")),
            "suspended\n",
        )
        .unwrap();
        let e = discover(root, Some(orin()), Some(35)).remove(0);
        assert_eq!(e.health(root), Ok(()), "suspended is idle, not unhealthy");
        fs::remove_file(under_root(root, &format!("{dev}/driver"))).unwrap();
        assert!(e.health(root).unwrap_err().contains("no driver bound"));
        touch(root, &format!("{dev}/driver"));
        assert_eq!(e.health(root), Ok(()));
        fs::remove_file(under_root(root, "/dev/nvhost-ctrl-nvdla0")).unwrap();
        assert!(e
            .health(root)
            .unwrap_err()
            .contains("/dev/nvhost-ctrl-nvdla0"));
        touch(root, "/dev/nvhost-ctrl-nvdla0");
        fs::remove_dir_all(under_root(root, dev)).unwrap();
        assert!(e.health(root).unwrap_err().contains("is gone"));
    }
}
