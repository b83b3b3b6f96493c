//! The NVIDIA kernel driver's procfs (discrete GPUs and Jetson Thor's OpenRM driver), and its
//! parsers: what a program that cannot load NVML (node-setup is a static binary) learns about
//! the GPUs. Formats: open-gpu-kernel-modules `kernel-open/nvidia/nv-procfs.c`
//! (`information`, `version`) and `nv-caps.c` (the MIG capability tree and `mig-minors`).
//! Paths are host paths: callers read them under their own root prefix.

use crate::LineError;

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

/// The driver's control nodes a GPU container needs besides `/dev/nvidia<minor>` (those that
/// exist are used; `nvidiactl` is always there when the driver is loaded, the UVM nodes once
/// `nvidia-uvm` is loaded, `nvidia-modeset` with the display driver). libnvidia-container
/// `src/nvc_info.c` and nvidia-container-toolkit `internal/discover/char_devices.go` list the
/// same nodes.
pub const CONTROL_NODES: [&str; 4] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

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
    /// `GPU Excluded: Yes`: the driver keeps the GPU out of use (`NVreg_ExcludedGpus`);
    /// NVML does not enumerate it, so it has no NVML index and containers cannot use it.
    pub excluded: bool,
}

/// PCI location of Jetson Thor's integrated GPU under the OpenRM driver (nvidia-container-toolkit
/// `pkg/nvcdi/lib-csv.go`, `isIntegratedGPU`: domain 0, bus 1, device 0 on Thor systems).
pub const THOR_IGPU_BUS: &str = "0000:01:00.0";

impl GpuInformation {
    /// On a Jetson: whether this entry is the integrated GPU rather than a discrete GPU on
    /// the same host (IGX Orin, a Jetson with a PCIe card). The model names the iGPU
    /// (`NVIDIA Thor`, as NVML does), or its PCI location does (Thor's iGPU is always
    /// [`THOR_IGPU_BUS`]; discrete GPUs of Jetson carriers sit in other PCI domains).
    pub fn is_jetson_igpu(&self) -> bool {
        self.model
            .as_deref()
            .is_some_and(crate::is_integrated_nvml_name)
            || self.bus == THOR_IGPU_BUS
    }
}

/// Parses one `information` file (`Key: \t value` lines). `Err` names the missing or bad key.
pub fn parse_gpu_information(text: &str) -> Result<GpuInformation, String> {
    let mut model = None;
    let mut uuid = None;
    let mut bus = None;
    let mut minor = None;
    let mut excluded = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "Model" => model = Some(value.to_string()),
            "GPU UUID" if value.starts_with("GPU-") => uuid = Some(value.to_string()),
            "Bus Location" => bus = Some(value.to_ascii_lowercase()),
            "GPU Excluded" => excluded = value.eq_ignore_ascii_case("yes"),
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
        excluded,
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

/// `mig-minors`: the minor number of every capability the driver can create, so that the
/// `/dev/nvidia-caps` nodes of a MIG device are known from its GPU and instance ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigMinors {
    /// (`gpu0/gi1/ci0/access`, 13) pairs, in file order.
    entries: Vec<(String, u32)>,
}

impl MigMinors {
    /// Parses the file's `<capability> <minor>` lines; `Err` names the bad line.
    pub fn parse(text: &str) -> Result<MigMinors, LineError> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let error = |message: String| LineError {
                line: n + 1,
                message,
            };
            let (key, minor) = line
                .rsplit_once(char::is_whitespace)
                .ok_or_else(|| error(format!("`{line}` is not `<capability> <minor>`")))?;
            let minor = minor
                .parse()
                .map_err(|_| error(format!("`{minor}` is not a minor number")))?;
            entries.push((key.trim().to_string(), minor));
        }
        Ok(MigMinors { entries })
    }

    /// The minor of capability `key` (`gpu0/gi1/access`).
    pub fn minor(&self, key: &str) -> Option<u32> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, m)| *m)
    }

    /// The `/dev/nvidia-caps` nodes of MIG device (`gi`, `ci`) of the GPU with `gpu_minor`: its
    /// GPU instance's and its compute instance's. `Err` names the capability the file lacks.
    pub fn mig_nodes(&self, gpu_minor: u32, gi: u32, ci: u32) -> Result<[String; 2], String> {
        let node = |key: String| {
            self.minor(&key)
                .map(caps_node)
                .ok_or_else(|| format!("no `{key}` entry"))
        };
        Ok([
            node(format!("gpu{gpu_minor}/gi{gi}/access"))?,
            node(format!("gpu{gpu_minor}/gi{gi}/ci{ci}/access"))?,
        ])
    }
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
        assert!(!info.excluded);
        let excluded =
            parse_gpu_information(&text.replace("Excluded:\t No", "Excluded:\t Yes")).unwrap();
        assert!(excluded.excluded);
        assert!(!info.is_jetson_igpu());
        let thor = parse_gpu_information(
            "Model: \t\t NVIDIA Thor\nBus Location: \t 0000:01:00.0\nDevice Minor: \t 0\n",
        )
        .unwrap();
        assert!(thor.is_jetson_igpu());
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
        let minors =
            MigMinors::parse("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n")
                .unwrap();
        assert_eq!(minors.minor("gpu0/gi1/access"), Some(12));
        assert_eq!(
            minors.mig_nodes(0, 1, 0).unwrap(),
            [
                "/dev/nvidia-caps/nvidia-cap12".to_string(),
                "/dev/nvidia-caps/nvidia-cap13".to_string()
            ]
        );
        assert_eq!(
            minors.mig_nodes(0, 1, 1).unwrap_err(),
            "no `gpu0/gi1/ci1/access` entry"
        );
        let err = MigMinors::parse("config 1\ngpu0/gi1/access x\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(err.message, "`x` is not a minor number");
        assert_eq!(caps_node(13), "/dev/nvidia-caps/nvidia-cap13");
    }
}
