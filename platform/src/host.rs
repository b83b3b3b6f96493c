//! The host files that describe a Jetson whatever its generation, and their parsers.
//! Paths are host paths: callers read them under their own root prefix.

/// NUL-separated device-tree `compatible` strings, most specific first, SoC token last
/// (Linux `Documentation/devicetree/usage-model.rst`).
pub const COMPATIBLE: &str = "/proc/device-tree/compatible";
/// Device-tree board name, e.g. `NVIDIA Jetson AGX Orin Developer Kit`.
pub const MODEL: &str = "/proc/device-tree/model";
/// The L4T device tree's source file name; its first dash token is the SoC (`tegra234-…`).
pub const DTSFILENAME: &str = "/proc/device-tree/nvidia,dtsfilename";
/// SoC family from the kernel's soc bus (`drivers/soc/tegra/fuse/fuse-tegra.c`): `Tegra`.
pub const SOC0_FAMILY: &str = "/sys/devices/soc0/family";
/// The chip id on the same soc bus device.
pub const SOC0_SOC_ID: &str = "/sys/devices/soc0/soc_id";
/// `tegra_chip_id` module parameter of L4T's `tegra_fuse` driver.
pub const CHIP_ID: &str = "/sys/module/tegra_fuse/parameters/tegra_chip_id";
/// L4T release file (package `nvidia-l4t-core`): `# R36 (release), REVISION: 4.3, …`.
pub const NV_TEGRA_RELEASE: &str = "/etc/nv_tegra_release";
/// Where devfreq devices are listed (Linux `Documentation/ABI/testing/sysfs-class-devfreq`).
pub const DEVFREQ_CLASS: &str = "/sys/class/devfreq";
/// Where the NVIDIA container runtime reads the CSV lists of host files for containers
/// (nvidia-container-toolkit, `csv` mode).
pub const CONTAINER_CSV_DIR: &str = "/etc/nvidia-container-runtime/host-files-for-container.d";

/// Where distributions put the NVIDIA driver's user-space libraries (`libnvidia-ml.so.1`,
/// `libcuda.so.*`): go-nvlib's search list (`/usr/lib64`, `/usr/lib/{x86_64,aarch64}-linux-gnu`,
/// `/lib64`, `/lib/{x86_64,aarch64}-linux-gnu`), plus JetPack 6+'s `nvidia/` directory and
/// Yocto's `/usr/lib`.
pub const DRIVER_LIB_DIRS: &[&str] = &[
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/nvidia",
    "/usr/lib",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
];

/// Parses a chip id written in decimal (`35`) or with a C prefix (`0x23`), as tools do.
pub fn parse_chip_id(text: &str) -> Option<u32> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// The L4T version in `/etc/nv_tegra_release`: `# R36 (release), REVISION: 4.3, …` →
/// `36.4.3`; `REVISION: 5` → `32.5`.
pub fn parse_l4t_release(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.trim_start().starts_with("# R"))?;
    let after_r = line.trim_start().strip_prefix("# R")?;
    let major: String = after_r.chars().take_while(|c| c.is_ascii_digit()).collect();
    if major.is_empty() {
        return None;
    }
    let revision = line
        .split(',')
        .find_map(|part| part.trim().strip_prefix("REVISION:"))
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    Some(match revision {
        Some(rev) => format!("{major}.{rev}"),
        None => major,
    })
}

/// The major release of an L4T version string (`36.4.3` → 36).
pub fn l4t_major(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l4t_release_lines() {
        assert_eq!(
            parse_l4t_release("# R32 (release), REVISION: 7.6, GCID: 38171779, BOARD: t210ref, EABI: aarch64, DATE: x").as_deref(),
            Some("32.7.6")
        );
        assert_eq!(
            parse_l4t_release("# R32 (release), REVISION: 5, GCID: 1").as_deref(),
            Some("32.5")
        );
        assert_eq!(parse_l4t_release("garbage"), None);
        assert_eq!(l4t_major("38.2.1"), Some(38));
        assert_eq!(l4t_major("x"), None);
    }

    #[test]
    fn chip_ids_in_both_notations() {
        assert_eq!(parse_chip_id("35\n"), Some(35));
        assert_eq!(parse_chip_id("0x23"), Some(35));
        assert_eq!(parse_chip_id("tegra"), None);
    }
}
