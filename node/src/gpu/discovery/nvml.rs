//! Discrete GPUs (and JetPack 6+ integrated GPUs) through NVML, loaded at run time.
//!
//! `nvml-wrapper` resolves every NVML symbol lazily, so a driver without a newer symbol
//! (e.g. `nvmlDeviceGetNumaNodeId`) still works; we fall back to sysfs for the NUMA node.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use edgegpu_platform::host::DRIVER_LIB_DIRS;

use super::device::{under_root, Gpu, MigAttributes, MigDevice};
use crate::gpu::nvml_raw;

/// The soname NVIDIA's tools open (the unversioned `libnvidia-ml.so` is only in -dev packages).
const NVML_SONAME: &str = "libnvidia-ml.so.1";

/// Where to load NVML from: the root's lib dirs first (when root is not `/`), then the soname.
fn candidates(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if root != Path::new("/") {
        for dir in DRIVER_LIB_DIRS {
            let p = under_root(root, dir).join(NVML_SONAME);
            if p.exists() {
                out.push(p);
            }
        }
    }
    out.push(PathBuf::from(NVML_SONAME));
    out
}

/// Loads and initialises NVML, trying [`candidates`] in order.
fn load(root: &Path) -> anyhow::Result<(Nvml, PathBuf)> {
    let mut failures = Vec::new();
    for candidate in candidates(root) {
        match Nvml::builder().lib_path(OsStr::new(&candidate)).init() {
            Ok(nvml) => {
                tracing::info!(library = %candidate.display(), "NVML loaded");
                return Ok((nvml, candidate));
            }
            Err(e) => failures.push(format!("{}: {}", candidate.display(), describe(&e))),
        }
    }
    anyhow::bail!(
        "could not load NVML ({}); on Jetson before JetPack 6 this is expected. For discrete GPUs \
         check that the pod runs with the NVIDIA runtime (runtimeClassName: nvidia) or that --root \
         points at the host",
        failures.join("; ")
    )
}

fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => format!("cannot open the library: {inner}"),
        other => other.to_string(),
    }
}

/// NVML's bus ID `00000000:17:00.0` → sysfs name `0000:17:00.0`.
fn sysfs_bus_id(nvml_bus_id: &str) -> String {
    let lower = nvml_bus_id.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

/// NUMA node from sysfs (`-1` = none).
fn numa_from_sysfs(root: &Path, bus_id: &str) -> Option<i64> {
    let path = under_root(root, "/sys/bus/pci/devices")
        .join(sysfs_bus_id(bus_id))
        .join("numa_node");
    let n: i64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    (n >= 0).then_some(n)
}

/// Loads and initialises NVML from the host under `root` (for callers that only need the
/// library, e.g. the MPS companion setting compute modes).
pub fn load_nvml(root: &Path) -> anyhow::Result<Nvml> {
    load(root).map(|(nvml, _)| nvml)
}

/// Loads NVML and lists its GPUs. A GPU whose UUID cannot be read is skipped (logged).
pub fn load_and_enumerate(root: &Path) -> anyhow::Result<(Nvml, Vec<Gpu>)> {
    let (nvml, _) = load(root)?;
    let count = nvml.device_count().context("nvmlDeviceGetCount failed")?;
    let mut gpus = Vec::new();
    for index in 0..count {
        match describe_device(&nvml, root, index) {
            Ok(gpu) => gpus.push(gpu),
            Err(e) => tracing::warn!(index, "skipping GPU {index}: {e:#}"),
        }
    }
    Ok((nvml, gpus))
}

fn describe_device(nvml: &Nvml, root: &Path, index: u32) -> anyhow::Result<Gpu> {
    let device = nvml
        .device_by_index(index)
        .context("nvmlDeviceGetHandleByIndex")?;
    let uuid = device.uuid().context("nvmlDeviceGetUUID")?;
    let name = device.name().unwrap_or_else(|_| "NVIDIA GPU".into());
    // Jetson iGPUs answer NOT_SUPPORTED for memory and PCI info: optional fields.
    let memory_bytes = nvml_raw::memory_info(&device).ok().map(|m| m.total);
    let pci_bus_id = device.pci_info().ok().map(|p| p.bus_id);
    let numa_node = match device.numa_node_id() {
        Ok(n) => Some(i64::from(n)),
        Err(_) => pci_bus_id.as_deref().and_then(|b| numa_from_sysfs(root, b)),
    };
    let minor = device.minor_number().ok();
    // NotSupported (no MIG on this GPU) and older drivers without the symbol: MIG off.
    let mig_enabled = device.mig_mode().is_ok_and(|m| m.current == 1);
    tracing::info!(
        index,
        %uuid,
        %name,
        memory_bytes = memory_bytes.unwrap_or(0),
        pci_bus_id = pci_bus_id.as_deref().unwrap_or("-"),
        numa_node = numa_node.unwrap_or(-1),
        mig_enabled,
        "NVML GPU found"
    );
    Ok(Gpu {
        nvml_uuid: Some(uuid.clone()),
        uuid,
        index,
        name,
        memory_bytes,
        pci_bus_id,
        numa_node,
        minor,
        mig_enabled,
    })
}

/// The MIG devices of every MIG-enabled GPU among `gpus` (whose `mig_enabled` is current
/// as of now: see [`mig_modes`]), in NVML order. `uuids` are the GPUs' NVML UUIDs.
pub fn mig_devices(
    nvml: &Nvml,
    gpus: &[Gpu],
    uuids: &[Option<String>],
) -> anyhow::Result<Vec<MigDevice>> {
    let mut out = Vec::new();
    for (parent, gpu) in gpus.iter().enumerate() {
        let Some(uuid) = &uuids[parent] else { continue };
        if !gpu.mig_enabled {
            continue;
        }
        let device = nvml
            .device_by_uuid(uuid.as_str())
            .with_context(|| format!("GPU {uuid}"))?;
        let max = device
            .mig_device_count()
            .with_context(|| format!("nvmlDeviceGetMaxMigDeviceCount of {uuid}"))?;
        for index in 0..max {
            let mig = match device.mig_device_by_index(index) {
                Ok(m) => m,
                // A slot without a MIG device, or one NVML will not hand out: go-nvlib's
                // VisitMigDevices skips both (pkg/nvlib/device/device.go).
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
                Err(e) => return Err(e).context(format!("MIG device {index} of {uuid}")),
            };
            let mig_uuid = mig.uuid().context("nvmlDeviceGetUUID of a MIG device")?;
            let attrs = mig
                .attributes()
                .with_context(|| format!("nvmlDeviceGetAttributes of {mig_uuid}"))?;
            let (gpu_instance, compute_instance) = nvml_raw::instance_ids(&mig)
                .with_context(|| format!("instance ids of {mig_uuid}"))?;
            let gi_profile = match nvml_raw::gpu_instance_profile(&device, gpu_instance) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(%mig_uuid, "the GPU instance profile of {mig_uuid} is unknown ({e}); naming it by its slices and memory only");
                    None
                }
            };
            let profile = mig_profile(
                attrs.gpu_instance_slice_count,
                attrs.compute_instance_slice_count,
                attrs.memory_size_mb,
                gpu.memory_bytes,
                gi_profile,
            );
            out.push(MigDevice {
                uuid: mig_uuid,
                parent,
                index,
                gpu_instance,
                compute_instance,
                profile,
                memory_bytes: attrs.memory_size_mb * 1024 * 1024,
                attributes: MigAttributes {
                    gpu_instance_slices: attrs.gpu_instance_slice_count,
                    compute_instance_slices: attrs.compute_instance_slice_count,
                    multiprocessors: attrs.multiprocessor_count,
                    copy_engines: attrs.shared_copy_engine_count,
                    decoders: attrs.shared_decoder_count,
                    encoders: attrs.shared_encoder_count,
                    jpeg_engines: attrs.shared_jpeg_count,
                    ofa_engines: attrs.shared_ofa_count,
                },
            });
        }
    }
    Ok(out)
}

/// Current MIG mode of each GPU (`false` where NVML does not see it or has no MIG).
pub fn mig_modes(nvml: &Nvml, uuids: &[Option<String>]) -> Vec<bool> {
    uuids
        .iter()
        .map(|uuid| {
            uuid.as_deref()
                .and_then(|u| nvml.device_by_uuid(u).ok())
                .and_then(|d| d.mig_mode().ok())
                .is_some_and(|m| m.current == 1)
        })
        .collect()
}

/// NVIDIA's MIG profile name (go-nvlib `pkg/nvlib/device/mig_profile.go`): `<g>g.<mem>gb`,
/// `<c>c.<g>g.<mem>gb` when the compute instance has fewer slices than its GPU instance,
/// then the attributes of the GPU instance profile `gi_profile` (an
/// `NVML_GPU_INSTANCE_PROFILE_*` constant): `+me` (media extensions), `+me.all`, `+gfx`, or
/// `-me` (none). The memory is rounded as go-nvlib does (`getMigMemorySizeGB`): the MIG
/// device's share of the GPU's memory rounded up to eighths, times the GPU's memory in whole
/// GiB. Without the GPU's total (Jetson NVML answers NotSupported) the MIG memory is rounded
/// up to GiB.
pub fn mig_profile(
    gi_slices: u32,
    ci_slices: u32,
    memory_mb: u64,
    gpu_total: Option<u64>,
    gi_profile: Option<u32>,
) -> String {
    const GIB: u64 = 1 << 30;
    let gb = match gpu_total.filter(|t| *t > 0) {
        Some(total) => {
            let share = (memory_mb * (1 << 20)) as f64 / total as f64;
            let share = (share * 8.0).ceil() / 8.0;
            let total_gb = total.div_ceil(GIB) as f64;
            (share * total_gb).round() as u64
        }
        None => (memory_mb * (1 << 20)).div_ceil(GIB),
    };
    let suffix = gi_profile.map_or("", profile_attributes);
    if ci_slices != 0 && ci_slices != gi_slices {
        format!("{ci_slices}c.{gi_slices}g.{gb}gb{suffix}")
    } else {
        format!("{gi_slices}g.{gb}gb{suffix}")
    }
}

/// go-nvlib's attributes of a GPU instance profile constant (`NewMigProfile`).
fn profile_attributes(gi_profile: u32) -> &'static str {
    use nvml_wrapper_sys::bindings as b;
    match gi_profile {
        b::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 | b::NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 => {
            "+me"
        }
        b::NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME
        | b::NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME => "+me.all",
        b::NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX
        | b::NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX
        | b::NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX => "+gfx",
        b::NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME | b::NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME => {
            "-me"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profiles_are_named_like_nvidia() {
        // A100 40 GB (40960 MiB) and H100 80 GB (81559 MiB) profiles.
        let a100 = Some(40960u64 << 20);
        assert_eq!(mig_profile(1, 1, 4864, a100, Some(0)), "1g.5gb");
        assert_eq!(mig_profile(3, 3, 19968, a100, Some(2)), "3g.20gb");
        assert_eq!(mig_profile(7, 7, 40192, a100, Some(4)), "7g.40gb");
        assert_eq!(mig_profile(3, 1, 19968, a100, Some(2)), "1c.3g.20gb");
        let h100 = Some(81559u64 << 20);
        assert_eq!(mig_profile(1, 1, 9856, h100, Some(0)), "1g.10gb");
        assert_eq!(mig_profile(2, 2, 20096, h100, None), "2g.20gb");
        assert_eq!(mig_profile(7, 7, 80896, h100, Some(4)), "7g.80gb");
        // No total (Jetson): MiB rounded up to GiB.
        assert_eq!(mig_profile(1, 1, 14336, None, None), "1g.14gb");
        // The GPU instance profile's attributes (NVML_GPU_INSTANCE_PROFILE_* 7, 15, 11, 13),
        // as go-nvlib's mig_profile_test.go names them.
        assert_eq!(mig_profile(1, 1, 9856, h100, Some(7)), "1g.10gb+me");
        assert_eq!(mig_profile(1, 1, 9856, h100, Some(15)), "1g.10gb+me.all");
        assert_eq!(mig_profile(2, 2, 20096, h100, Some(11)), "2g.20gb+gfx");
        assert_eq!(mig_profile(1, 1, 9856, h100, Some(13)), "1g.10gb-me");
        assert_eq!(mig_profile(2, 1, 20096, h100, Some(8)), "1c.2g.20gb+me");
    }

    #[test]
    fn bus_id_to_sysfs_name() {
        assert_eq!(sysfs_bus_id("00000000:17:00.0"), "0000:17:00.0");
        assert_eq!(sysfs_bus_id("0000:AF:00.0"), "0000:af:00.0");
    }
}
