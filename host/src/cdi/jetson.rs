//! Jetson hosts: the spec from L4T's container CSV lists ([`csv`](super::csv)), as
//! `nvidia-ctk cdi generate --mode=csv` builds it (nvidia-container-toolkit
//! `pkg/nvcdi/lib-csv.go`): the `dev` entries are the integrated GPU's device nodes (device
//! `0`), everything else is mounted for every device.
//!
//! With the NVIDIA driver's procfs present as well (OpenRM: Thor; a discrete GPU next to the
//! Jetson, as on IGX Orin) the spec is mixed, as nvidia-ctk's: the integrated GPU is `0` (and
//! its UUID where procfs has it), each discrete GPU `1`, `2`, … in bus order with its own node,
//! the control nodes and the CSV's Tegra nodes; MIG devices of either are
//! `<index>:gi<G>:ci<C>` with their capability nodes (the names the device plugin's CDI
//! strategies use; nvidia-ctk's CSV mode has no MIG devices).
//!
//! The generation's required nodes (`edgegpu_platform`'s table) are checked: a spec whose
//! device `0` lacks one gives containers no GPU, which the report says.

use edgegpu_platform::cdi as device_name;
use edgegpu_platform::host::{
    l4t_major, parse_chip_id, parse_l4t_release, CHIP_ID, COMPATIBLE, NV_TEGRA_RELEASE,
};
use edgegpu_platform::procfs::CONTROL_NODES;
use edgegpu_platform::Generation;

use super::csv::{self, names};
use super::driver::{self, all_device, DriverGpu, ProcfsGpus};
use super::edits::EditsBuilder;
use super::spec::{Device, Mount};
use crate::error::{Result, SetupError};
use crate::root::HostRoot;
use std::path::PathBuf;

/// The devices of a Jetson host; spec-wide mounts and links go into `edits`. Entries the
/// lists name that are not on the host go to `skipped`, problems worth a look to `warnings`.
pub fn devices(
    root: &HostRoot,
    csv_files: &[PathBuf],
    procfs: &ProcfsGpus,
    edits: &mut EditsBuilder,
    skipped: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Device>> {
    let mut entries: Vec<csv::Entry> = Vec::new();
    for file in csv_files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| SetupError::unreadable(file.display().to_string(), e))?;
        for entry in csv::parse(file, &text)? {
            // L4T's lists repeat entries (within a file and across files).
            if !entries
                .iter()
                .any(|e| e.kind == entry.kind && e.pattern == entry.pattern)
            {
                entries.push(entry);
            }
        }
    }
    for entry in &entries {
        let found = csv::expand(root, &entry.pattern);
        if found.is_empty() {
            skipped.push(entry.pattern.clone());
        }
        for path in found {
            match entry.kind {
                // Directories of device nodes (`/dev/dri/by-path`) hold links, not nodes.
                csv::Kind::Dev if root.path(&path).is_dir() => edits.add_mount(Mount::bind(&path)),
                csv::Kind::Dev => edits.add_node(&path),
                csv::Kind::Lib | csv::Kind::Sym | csv::Kind::Dir => {
                    edits.add_path(root, &path, skipped)
                }
            }
        }
    }
    // The runtime always mounts the L4T release file (nvidia-container-toolkit
    // `internal/platform-support/tegra/tegra.go`).
    if root.path(NV_TEGRA_RELEASE).is_file() {
        edits.add_mount(Mount::bind(NV_TEGRA_RELEASE));
    }
    let csv_nodes: Vec<String> = std::mem::take(&mut edits.nodes)
        .into_iter()
        .map(|n| n.path)
        .collect();
    if csv_nodes.is_empty() {
        return Err(SetupError::Refused(format!(
            "none of the `dev` entries of {} exists under {}: no GPU device node to give containers",
            names(csv_files),
            root.root().display()
        )));
    }

    let (igpus, dgpus): (Vec<&DriverGpu>, Vec<&DriverGpu>) =
        procfs.gpus.iter().partition(|g| g.info.is_jetson_igpu());
    if igpus.len() > 1 {
        return Err(SetupError::Refused(format!(
            "{} lists {} integrated GPUs ({}); a Jetson has one",
            root.path(edgegpu_platform::procfs::GPUS_DIR).display(),
            igpus.len(),
            igpus
                .iter()
                .map(|g| g.info.bus.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // The integrated GPU: the CSV's nodes, less those of the discrete GPUs.
    let dgpu_nodes: Vec<String> = dgpus.iter().map(|g| g.node()).collect();
    let igpu_nodes: Vec<String> = csv_nodes
        .iter()
        .filter(|n| !dgpu_nodes.contains(n))
        .cloned()
        .collect();
    let mut devices = match igpus.first() {
        Some(igpu) => driver::gpu_devices(root, 0, igpu, &igpu_nodes)?,
        None => vec![driver::device(
            device_name::INTEGRATED_GPU.into(),
            &igpu_nodes,
        )],
    };
    // Discrete GPUs: their own node and the control nodes, plus the CSV's Tegra nodes (not
    // the GPU and control nodes, which belong to the GPU they name) — nvidia-ctk's dGPU mode.
    let tegra_nodes: Vec<String> = csv_nodes
        .iter()
        .filter(|n| !is_gpu_node(n) && !CONTROL_NODES.contains(&n.as_str()))
        .cloned()
        .collect();
    let control = driver::control_nodes(root);
    for (i, gpu) in dgpus.iter().enumerate() {
        let mut nodes = tegra_nodes.clone();
        nodes.push(gpu.node());
        nodes.extend(control.iter().cloned());
        devices.extend(driver::gpu_devices(root, i + 1, gpu, &nodes)?);
    }
    devices.push(all_device(&devices));

    if let Some(generation) = generation(root) {
        let missing: Vec<&str> = generation
            .required_nodes
            .iter()
            .copied()
            .filter(|n| !igpu_nodes.iter().any(|p| p == n))
            .collect();
        if !missing.is_empty() {
            warnings.push(format!(
                "device 0 lacks {} which CUDA on {} needs (docs/platforms.md §3): {}; containers given this spec will not see the GPU",
                missing.join(", "),
                generation.name,
                missing
                    .iter()
                    .map(|n| if root.path(n).exists() {
                        format!("{n} exists but no `dev` entry of {} names it", names(csv_files))
                    } else {
                        format!("{n} does not exist")
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    Ok(devices)
}

/// `/dev/nvidia<N>`: a GPU's own node (not a control node such as `/dev/nvidiactl`).
fn is_gpu_node(path: &str) -> bool {
    path.strip_prefix("/dev/nvidia")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The host's Jetson generation, from the first signals the device plugin's detection reads
/// (docs/platforms.md §2): the SoC token of the device tree's `compatible`, L4T's
/// `tegra_fuse` chip id, or an L4T release only one generation runs.
pub fn generation(root: &HostRoot) -> Option<&'static Generation> {
    let compatible = std::fs::read(root.path(COMPATIBLE)).ok().and_then(|bytes| {
        String::from_utf8_lossy(&bytes).split('\0').find_map(|c| {
            c.trim()
                .strip_prefix("nvidia,tegra")
                .map(|n| format!("tegra{n}"))
        })
    });
    let read = |path: &str| std::fs::read_to_string(root.path(path)).ok();
    compatible
        .as_deref()
        .and_then(Generation::by_compatible)
        .or_else(|| read(CHIP_ID).and_then(|t| Generation::by_chip_id(parse_chip_id(&t)?)))
        .or_else(|| {
            read(NV_TEGRA_RELEASE)
                .and_then(|t| parse_l4t_release(&t))
                .and_then(|v| Generation::by_l4t_major(l4t_major(&v)?))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_nodes_are_not_control_nodes() {
        assert!(is_gpu_node("/dev/nvidia0"));
        assert!(is_gpu_node("/dev/nvidia12"));
        for other in [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia",
            "/dev/nvidia-caps/nvidia-cap1",
        ] {
            assert!(!is_gpu_node(other), "{other}");
        }
    }
}
