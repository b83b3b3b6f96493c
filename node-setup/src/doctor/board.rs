//! The first two links: which GPU this is and which driver release runs it (and whether
//! edgegpu's platform table knows that release), then the device nodes a container gets.

use edgegpu_host::cdi;
use edgegpu_host::root::HostRoot;
use edgegpu_host::tegra::TegraDetection;
use edgegpu_platform::host::{jetpack, l4t_major, CONTAINER_CSV_DIR, NV_TEGRA_RELEASE};
use edgegpu_platform::procfs::{parse_driver_version, GPUS_DIR, VERSION};
use edgegpu_platform::GENERATIONS;

use super::finding::{Facts, Finding, Link, Verdict};

/// Reads what later links need: the Tegra signals and the loaded driver's version.
pub fn facts(host: &HostRoot) -> Facts {
    let tegra = TegraDetection::probe(host.root());
    for s in &tegra.signals {
        host.note_read(s.path);
    }
    let driver_version = host
        .read(VERSION)
        .ok()
        .flatten()
        .and_then(|text| parse_driver_version(&text));
    Facts {
        tegra,
        driver_version,
        cdi_mode: false,
        spec_now: cdi::generate(host).map_err(|e| e.to_string()),
    }
}

/// The newest L4T major release the platform table has a JetPack for.
fn newest_known_l4t() -> u32 {
    (30..100)
        .filter(|m| jetpack(&format!("{m}.0")).is_some())
        .max()
        .unwrap_or(0)
}

/// Link 1: the board or GPU and its release.
pub fn platform(host: &HostRoot, facts: &Facts) -> Finding {
    let t = &facts.tegra;
    if t.is_tegra() {
        return jetson(t);
    }
    match &facts.driver_version {
        Some(version) => {
            let gpus = host.list_dir(GPUS_DIR, "").unwrap_or_default();
            let f = Finding::new(
                Link::Platform,
                Verdict::Ok,
                format!(
                    "NVIDIA driver {version} loaded, {} GPU(s) in {GPUS_DIR}",
                    gpus.len()
                ),
            )
            .sources([VERSION, GPUS_DIR]);
            if gpus.is_empty() {
                return Finding {
                    verdict: Verdict::Broken,
                    summary: format!("NVIDIA driver {version} loaded, but it lists no GPU in {GPUS_DIR}"),
                    ..f
                }
                .fix("check the GPU is seen by the kernel and not excluded: sudo dmesg | grep -i nvrm");
            }
            f
        }
        None => Finding::new(
            Link::Platform,
            Verdict::Broken,
            "no NVIDIA GPU found: no Jetson (Tegra) signal matched and no NVIDIA driver is loaded",
        )
        .sources([VERSION, NV_TEGRA_RELEASE])
        .details(t.looked_for.iter().map(|l| format!("looked for: {l}")))
        .fix("discrete GPU: load the driver (sudo modprobe nvidia); Jetson: boot an L4T (JetPack) image with its device tree"),
    }
}

fn jetson(t: &TegraDetection) -> Finding {
    let board = t
        .model
        .clone()
        .or_else(|| t.module_name.map(str::to_string))
        .unwrap_or_else(|| "a Jetson board".into());
    let sources: Vec<&str> = t.signals.iter().map(|s| s.path).collect();
    let evidence = t
        .signals
        .iter()
        .map(|s| format!("{}: {} ({})", s.path, s.value, s.meaning));
    let Some(generation) = t.generation else {
        return Finding::new(
            Link::Platform,
            Verdict::Broken,
            format!("{board}: a Tegra board whose generation edgegpu does not know"),
        )
        .sources(sources)
        .details(evidence)
        .fix(format!(
            "update edgegpu to a release that knows this SoC (this one knows {})",
            GENERATIONS
                .iter()
                .map(|g| g.name)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let Some(l4t) = &t.l4t else {
        return Finding::new(
            Link::Platform,
            Verdict::Warning,
            format!(
                "{board}: {}, L4T release unknown: {NV_TEGRA_RELEASE} is missing or unreadable",
                generation.name
            ),
        )
        .sources(sources)
        .details(evidence)
        .fix("install the L4T core package (nvidia-l4t-core) or, on Yocto, meta-tegra's l4t release file; features keyed on the release (NVML, MPS) stay off");
    };
    let summary = format!("{board}: {}, L4T {l4t}", generation.name);
    match jetpack(l4t) {
        Some(jp) => Finding::new(
            Link::Platform,
            Verdict::Ok,
            format!(
                "{summary} = JetPack {} (CUDA {}.{})",
                jp.major, jp.cuda.0, jp.cuda.1
            ),
        )
        .sources(sources)
        .details(evidence),
        None => Finding::new(
            Link::Platform,
            Verdict::Warning,
            format!(
                "{summary}: a release this edgegpu does not know (its table ends at R{})",
                newest_known_l4t()
            ),
        )
        .sources(sources)
        .details(evidence)
        .detail(format!(
            "what depends on the release (NVML answers, MPS support, CUDA version labels) falls back to the generation's defaults; L4T major {}",
            l4t_major(l4t).map_or("?".into(), |m| m.to_string())
        ))
        .fix("update edgegpu (the release notes list the L4T releases each version knows)"),
    }
}

/// Link 2: the device nodes the CDI spec generator would give a container, each present.
pub fn device_nodes(host: &HostRoot, facts: &Facts) -> Finding {
    let sources = [CONTAINER_CSV_DIR, GPUS_DIR];
    let generated = match &facts.spec_now {
        Ok(g) => g,
        Err(e) => {
            return Finding::new(
                Link::DeviceNodes,
                Verdict::Broken,
                "cannot list the GPU's device nodes",
            )
            .sources(sources)
            .detail(e.clone())
            .fix("fix what the line above names (the L4T container lists or the NVIDIA driver)")
        }
    };
    let spec = &generated.spec;
    let mut nodes: Vec<&str> = spec
        .container_edits
        .device_nodes
        .iter()
        .chain(
            spec.devices
                .iter()
                .flat_map(|d| &d.container_edits.device_nodes),
        )
        .map(|n| n.path.as_str())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let details: Vec<String> = nodes.iter().map(|n| describe_node(host, n)).collect();
    if !generated.warnings.is_empty() {
        return Finding::new(
            Link::DeviceNodes,
            Verdict::Broken,
            format!("a device node the GPU needs is missing ({} present)", nodes.len()),
        )
        .sources(sources)
        .details(generated.warnings.iter().cloned())
        .details(details)
        .fix("load the GPU driver (Jetson: nvgpu, sudo modprobe nvgpu; discrete: sudo nvidia-modprobe -u -c=0) and check udev created its nodes");
    }
    if nodes.is_empty() {
        return Finding::new(
            Link::DeviceNodes,
            Verdict::Broken,
            "no GPU device node exists",
        )
        .sources(sources)
        .fix("load the GPU driver and check udev created its nodes under /dev");
    }
    Finding::new(
        Link::DeviceNodes,
        Verdict::Ok,
        format!("{} device node(s) present", nodes.len()),
    )
    .sources(sources)
    .details(details)
}

/// `/dev/nvmap: character device 10:121, crw-rw---- 0:44` (owner and group as numbers: the
/// host's names are not the container's).
fn describe_node(host: &HostRoot, node: &str) -> String {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    match std::fs::metadata(host.path(node)) {
        Ok(m) => {
            let kind = if m.file_type().is_char_device() {
                let dev = m.rdev();
                format!(
                    "character device {}:{}",
                    nix::sys::stat::major(dev),
                    nix::sys::stat::minor(dev)
                )
            } else {
                "not a character device".to_string()
            };
            format!(
                "{node}: {kind}, mode {:o}, owner {}:{}",
                m.permissions().mode() & 0o7777,
                m.uid(),
                m.gid()
            )
        }
        Err(e) => format!("{node}: {e}"),
    }
}
