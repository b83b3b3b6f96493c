//! The NVIDIA kernel driver's procfs (discrete GPUs and Jetson Thor's OpenRM driver), and its
//! parsers: what a program that cannot load NVML (node-setup is a static binary) learns about
//! the GPUs. Formats: open-gpu-kernel-modules `kernel-open/nvidia/nv-procfs.c`
//! (`information`, `version`) and `nv-caps.c` (the MIG capability tree and `mig-minors`).
//! Paths are host paths: callers read them under their own root prefix.

/// One directory per GPU, named by its PCI bus id (`0000:17:00.0`), holding `information`.
pub const GPUS_DIR: &str = "/proc/driver/nvidia/gpus";
/// `NVRM version: NVIDIA UNIX … Kernel Module  550.54.15  Release Build …`.
pub const VERSION: &str = "/proc/driver/nvidia/version";
/// The capability tree: `gpu<minor>/mig/gi<G>/access` and `…/gi<G>/ci<C>/access` exist for
/// every GPU instance and compute instance that has been created.
pub const CAPABILITIES_DIR: &str = "/proc/driver/nvidia/capabilities";
/// Minor numbers of every possible capability: `gpu<minor>/gi<G>/ci<C>/access <n>` lines;
/// the device node is `/dev/nvidia-caps/nvidia-cap<n>`.
pub const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";
/// Where the capability device nodes live.
pub const CAPS_DEV_DIR: &str = "/dev/nvidia-caps";

/// What `information` says about one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInformation {
    /// `Model:`, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: Option<String>,
    /// `GPU UUID:`, `GPU-…` (absent while the GPU is not initialised).
    pub uuid: Option<String>,
    /// `Bus Location:`, `0000:17:00.0`.
    pub bus: String,
    /// `Device Minor:`: the GPU is `/dev/nvidia<minor>`.
    pub minor: u32,
}

/// Parses one `information` file (`Key: \t value` lines). `Err` names the missing or bad key.
pub fn parse_gpu_information(text: &str) -> Result<GpuInformation, String> {
    let mut model = None;
    let mut uuid = None;
    let mut bus = None;
    let mut minor = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "Model" => model = Some(value.to_string()),
            "GPU UUID" if value.starts_with("GPU-") => uuid = Some(value.to_string()),
            "Bus Location" => bus = Some(value.to_ascii_lowercase()),
            "Device Minor" => {
                minor = Some(
                    value
                        .parse::<u32>()
                        .map_err(|_| format!("`Device Minor: {value}` is not a number"))?,
                )
            }
            _ => {}
        }
    }
    Ok(GpuInformation {
        model,
        uuid,
        bus: bus.ok_or("no `Bus Location:` line")?,
        minor: minor.ok_or("no `Device Minor:` line")?,
    })
}

/// The driver version in `version`: `NVRM version: NVIDIA UNIX x86_64 Kernel Module
/// 550.54.15 …` → `550.54.15` (the first token that looks like a version).
pub fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.chars().all(|c| c.is_ascii_digit() || c == '.')
                && w.starts_with(|c: char| c.is_ascii_digit())
        })
        .map(str::to_string)
}

/// Parses `mig-minors`: (`gpu0/gi1/ci0/access`, 13) pairs. `Err` names the bad line (1-based).
pub fn parse_mig_minors(text: &str) -> Result<Vec<(String, u32)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (key, minor) = line
            .rsplit_once(char::is_whitespace)
            .ok_or_else(|| format!("line {}: `{line}` is not `<capability> <minor>`", n + 1))?;
        let minor = minor
            .parse()
            .map_err(|_| format!("line {}: `{minor}` is not a minor number", n + 1))?;
        out.push((key.trim().to_string(), minor));
    }
    Ok(out)
}

/// The `mig-minors` keys of a MIG device: its GPU instance and its compute instance.
pub fn mig_capability_keys(gpu_minor: u32, gi: u32, ci: u32) -> [String; 2] {
    [
        format!("gpu{gpu_minor}/gi{gi}/access"),
        format!("gpu{gpu_minor}/gi{gi}/ci{ci}/access"),
    ]
}

/// The device node of capability minor `n`.
pub fn caps_node(minor: u32) -> String {
    format!("{CAPS_DEV_DIR}/nvidia-cap{minor}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn information_file() {
        let text = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 187\nGPU UUID: \t GPU-5d2e7b1a-0c4f-4e3b-a1d2-7f6e5d4c3b01\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:1B:00.0\nDevice Minor: \t 3\nGPU Excluded:\t No\n";
        let info = parse_gpu_information(text).unwrap();
        assert_eq!(info.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(
            info.uuid.as_deref(),
            Some("GPU-5d2e7b1a-0c4f-4e3b-a1d2-7f6e5d4c3b01")
        );
        assert_eq!(info.bus, "0000:1b:00.0");
        assert_eq!(info.minor, 3);
        // Before the GPU is initialised the UUID reads as a placeholder.
        let info = parse_gpu_information(
            "GPU UUID: \t ??\nBus Location: \t 0000:01:00.0\nDevice Minor: \t 0\n",
        )
        .unwrap();
        assert_eq!(info.uuid, None);
        let err = parse_gpu_information("Model: x\nBus Location: 0000:01:00.0\n").unwrap_err();
        assert!(err.contains("Device Minor"), "{err}");
        let err =
            parse_gpu_information("Bus Location: 0000:01:00.0\nDevice Minor: x\n").unwrap_err();
        assert!(err.contains("not a number"), "{err}");
    }

    #[test]
    fn driver_version() {
        assert_eq!(
            parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Release Build  (dvs-builder@U16)  Tue Mar  5 UTC 2024\nGCC version:  gcc 12\n").as_deref(),
            Some("550.54.15")
        );
        assert_eq!(
            parse_driver_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.00  Release Build\n"
            )
            .as_deref(),
            Some("580.00")
        );
        assert_eq!(parse_driver_version("nothing"), None);
    }

    #[test]
    fn mig_minors() {
        let pairs =
            parse_mig_minors("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n")
                .unwrap();
        assert_eq!(pairs[2], ("gpu0/gi1/access".to_string(), 12));
        assert_eq!(pairs[3].1, 13);
        let err = parse_mig_minors("config 1\ngpu0/gi1/access x\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        assert_eq!(
            mig_capability_keys(1, 2, 0),
            [
                "gpu1/gi2/access".to_string(),
                "gpu1/gi2/ci0/access".to_string()
            ]
        );
        assert_eq!(caps_node(13), "/dev/nvidia-caps/nvidia-cap13");
    }
}
