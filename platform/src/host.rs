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
/// The SoC's serial number on the soc bus, where the SoC driver gives one (Linux
/// `Documentation/ABI/testing/sysfs-devices-soc`, `serial_number`).
pub const SOC0_SERIAL: &str = "/sys/devices/soc0/serial_number";
/// The board's serial number NVIDIA's bootloader writes into the device tree (what jetson_stats
/// `jtop/core/jetson_variables.py` reads as the board serial).
pub const DT_SERIAL: &str = "/proc/device-tree/serial-number";
/// The device tree in sysfs, where the host's `/proc/device-tree` points: an absolute symlink
/// (Linux `drivers/of/base.c`, `of_core_init`: `proc_symlink("device-tree", NULL,
/// "/sys/firmware/devicetree/base")`). Read through another root, e.g. a pod that mounts the
/// host's `/proc` at `/host/proc`, that link resolves in the reader's own `/sys/firmware`,
/// which container runtimes mask: readers of the `/proc/device-tree` paths above fall back to
/// the same file here ([`device_tree_in_sysfs`]).
pub const DEVICE_TREE_SYSFS: &str = "/sys/firmware/devicetree/base";

/// A `/proc/device-tree/…` path as the same file under [`DEVICE_TREE_SYSFS`]; `None` for any
/// other path.
pub fn device_tree_in_sysfs(path: &str) -> Option<String> {
    let property = path.strip_prefix("/proc/device-tree/")?;
    Some(format!("{DEVICE_TREE_SYSFS}/{property}"))
}
/// `tegra_chip_id` module parameter of L4T's `tegra_fuse` driver.
pub const CHIP_ID: &str = "/sys/module/tegra_fuse/parameters/tegra_chip_id";
/// L4T release file (package `nvidia-l4t-core`): `# R36 (release), REVISION: 4.3, …`.
pub const NV_TEGRA_RELEASE: &str = "/etc/nv_tegra_release";
/// Where devfreq devices are listed (Linux `Documentation/ABI/testing/sysfs-class-devfreq`).
pub const DEVFREQ_CLASS: &str = "/sys/class/devfreq";
/// Where the NVIDIA container runtime reads the CSV lists of host files for containers
/// (nvidia-container-toolkit, `csv` mode).
pub const CONTAINER_CSV_DIR: &str = "/etc/nvidia-container-runtime/host-files-for-container.d";

/// Kernel memory counters; `MemTotal` is the memory the integrated GPU shares with the CPU,
/// `NvMapMemUsed` what the nvmap allocator (GPU buffers) holds (L4T kernels).
pub const MEMINFO: &str = "/proc/meminfo";
/// Thermal zones (`thermal_zoneN/type`, `temp` in millidegrees Celsius; Linux
/// `Documentation/driver-api/thermal/sysfs-api.rst`).
pub const THERMAL_CLASS: &str = "/sys/class/thermal";
/// nvpmodel's configuration: the board's power modes (on L4T a link to the board's file under
/// `/etc/nvpmodel/`; format in the header of L4T's own files).
pub const NVPMODEL_CONF: &str = "/etc/nvpmodel.conf";
/// nvpmodel's record of the mode it set last (`pmode:0002 fmode:quiet`).
pub const NVPMODEL_STATUS: &str = "/var/lib/nvpmodel/status";
/// Where the INA3221 power monitors' I2C devices are listed, one directory per driver.
pub const I2C_DRIVERS: &str = "/sys/bus/i2c/drivers";

/// The memory controller's (EMC) average activity, in the order jetson_stats tries them
/// (`jtop/core/memory.py`, `read_emc`): debugfs on L4T r32 with central actmon, BPMP debugfs
/// (r34+), the sysfs actmon of r32. The debugfs files are readable by root only and need
/// debugfs mounted, so a plugin pod usually sees none of them.
pub const EMC_ACTIVITY_FILES: &[&str] = &[
    "/sys/kernel/debug/cactmon/mc_all",
    "/sys/kernel/debug/bpmp/debug/actmon/mc_all_avg_activity",
    "/sys/kernel/actmon_avg_activity/mc_all",
];
/// The EMC clock in Hz, in the order jetson_stats tries them: BPMP debugfs (r34+), the
/// bandwidth manager's devfreq node (Thor), the clock override of r32's `tegra_bwmgr`.
pub const EMC_CLOCK_FILES: &[&str] = &[
    "/sys/kernel/debug/bpmp/debug/clk/emc/rate",
    "/sys/class/devfreq/bwmgr/cur_freq",
    "/sys/kernel/debug/clk/override.emc/clk_rate",
];

/// Per-process GPU memory of the nvgpu driver's nvmap allocator (the IOVMM heap, where CUDA's
/// buffers live), in debugfs: root-only, and only where debugfs is mounted. Written by
/// `nvmap_debug_maps_show` (L4T kernel `drivers/video/tegra/nvmap/nvmap_dev.c` up to r35; the
/// out-of-tree nvmap of r36+, nvidia-oot `drivers/video/tegra/nvmap/nvmap_debug.c`, prints the
/// same lines); jetson_stats reads it for its process list (`jtop/core/processes.py`). OpenRM
/// (Thor) has no nvmap: NVML answers there.
pub const NVMAP_IOVMM_MAPS: &str = "/sys/kernel/debug/nvmap/iovmm/maps";

/// Each process's nvmap memory in bytes, from [`NVMAP_IOVMM_MAPS`]: `(pid, bytes)`, summed
/// per PID (a process that opened `/dev/nvmap` twice has two clients), sorted by PID.
///
/// One line per client starts at column 0: `client_stringify`'s `"%-18s %18s %8u"` (client
/// name, command, PID of the thread-group leader; `kernel` and 0 for kernel clients), then
/// `" %10lluK"`: the client's share of its handles (each handle's size divided by the number
/// of clients sharing it), in KiB. The handle and mapping lines under it start with the
/// 18-space padding of an empty name, the headers with `CLIENT` or spaces, the last line with
/// `total`. The command may contain spaces, so the line is read from its right end. Lines
/// that do not fit are skipped: a format change loses data, it does not invent it.
pub fn parse_nvmap_maps(text: &str) -> Vec<(u32, u64)> {
    let mut per_pid: Vec<(u32, u64)> = Vec::new();
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = line.split_whitespace().rev();
        let (Some(size), Some(pid), Some(_command), Some(_client)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            continue;
        };
        let Some(kib) = size.strip_suffix('K').and_then(|k| k.parse::<u64>().ok()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        // PID 0: a kernel client, no process.
        if pid == 0 {
            continue;
        }
        let bytes = kib.saturating_mul(1024);
        match per_pid.iter_mut().find(|(p, _)| *p == pid) {
            Some((_, sum)) => *sum = sum.saturating_add(bytes),
            None => per_pid.push((pid, bytes)),
        }
    }
    per_pid.sort_unstable();
    per_pid
}

/// What a JetPack release line ships: its major version and the CUDA driver version
/// (`cuDriverGetVersion`) of its L4T `libcuda`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JetPack {
    pub major: u32,
    pub cuda: (u32, u32),
}

/// The JetPack an L4T version (`36.4.3`) belongs to, from the JetPack release notes: r32 is
/// JetPack 4 (CUDA 10.0 up to 32.3, 10.2 from 32.4), r35 JetPack 5 (CUDA 11.4), r36 JetPack 6
/// (CUDA 12.2 on 36.3, 12.6 from 36.4), r38 JetPack 7.0/7.1 (CUDA 13.0), r39 JetPack 7.2
/// (CUDA 13.2). `None` for releases not listed.
pub fn jetpack(l4t: &str) -> Option<JetPack> {
    let mut parts = l4t.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let (jetpack, cuda) = match (major, minor) {
        (32, 0..=3) => (4, (10, 0)),
        (32, _) => (4, (10, 2)),
        (35, _) => (5, (11, 4)),
        (36, 0..=3) => (6, (12, 2)),
        (36, _) => (6, (12, 6)),
        (38, _) => (7, (13, 0)),
        (39, _) => (7, (13, 2)),
        _ => return None,
    };
    Some(JetPack {
        major: jetpack,
        cuda,
    })
}

/// A `/proc/meminfo` value in bytes (`NvMapMemUsed:  123456 kB` → 126418944).
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != key {
            return None;
        }
        let mut words = rest.split_whitespace();
        let value: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => value.checked_mul(1024),
            None => Some(value),
            Some(_) => None,
        }
    })
}

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
    fn device_tree_paths_in_sysfs() {
        assert_eq!(
            device_tree_in_sysfs(COMPATIBLE).as_deref(),
            Some("/sys/firmware/devicetree/base/compatible")
        );
        assert_eq!(
            device_tree_in_sysfs(DTSFILENAME).as_deref(),
            Some("/sys/firmware/devicetree/base/nvidia,dtsfilename")
        );
        assert_eq!(device_tree_in_sysfs(MEMINFO), None);
        assert_eq!(device_tree_in_sysfs("/proc/device-tree"), None);
    }

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
    fn nvmap_maps_per_process() {
        // Lines as nvmap_debug_maps_show prints them: two clients of PID 4242 (summed), a
        // command with a space, a kernel client, handle and mapping lines whose last words
        // look like a PID and a size, and the total.
        let pad = " ".repeat(18);
        let text = format!(
            "{:<18} {:>18} {:>8} {:>11}\n\
             {pad} {:>18} {:>8} {:>11} {:>8} {:>6} {:>9} {:>21} {:>18}\n\
             {:<18} {:>18} {:>8} {:>10}K\n\
             {pad} {pad} {:>8x} {:>10}K {:>8x} {:>6} {:>16} {:>12} {:>12} {:>6}K\n\
             {pad} {pad} {:>8} {:>11} {:>8} {:>6} {:>16} {:<12x}-{:>12x} {:>6}K\n\
             \n\
             {:<18} {:>18} {:>8} {:>10}K\n\
             \n\
             {:<18} {:>18} {:>8} {:>10}K\n\
             \n\
             {:<18} {:>18} {:>8} {:>10}K\n\
             \n\
             {:<18} {:<18} {:>8} {:>10}K\n",
            "CLIENT",
            "PROCESS",
            "PID",
            "SIZE",
            "",
            "BASE",
            "SIZE",
            "FLAGS",
            "SHARE",
            "UID",
            "MAPS",
            "MAPSIZE",
            "user",
            "python3",
            4242,
            1_048_576,
            0,
            1_048_576,
            0x500,
            1,
            "0000000012345678",
            "",
            "",
            1_048_576,
            "",
            "",
            "",
            "",
            "",
            0xffff_8000_0000u64,
            0xffff_c000_0000u64,
            1_048_576,
            "user",
            "python3",
            4242,
            2048,
            "user",
            "my app",
            77,
            512,
            "user",
            "kernel",
            0,
            64,
            "total",
            "",
            "",
            1_050_688,
        );
        assert_eq!(
            parse_nvmap_maps(&text),
            vec![(77, 512 * 1024), (4242, (1_048_576 + 2048) * 1024)]
        );
        assert_eq!(parse_nvmap_maps(""), vec![]);
        assert_eq!(parse_nvmap_maps("garbage line\nuser x y zK\n"), vec![]);
    }

    #[test]
    fn jetpack_of_each_release_line() {
        let jp = |v: &str| jetpack(v).map(|j| (j.major, j.cuda));
        assert_eq!(jp("32.7.6"), Some((4, (10, 2))));
        assert_eq!(jp("32.3.1"), Some((4, (10, 0))));
        assert_eq!(jp("35.4.1"), Some((5, (11, 4))));
        assert_eq!(jp("36.3.0"), Some((6, (12, 2))));
        assert_eq!(jp("36.4.3"), Some((6, (12, 6))));
        assert_eq!(jp("38.2.1"), Some((7, (13, 0))));
        assert_eq!(jp("39.2.0"), Some((7, (13, 2))));
        assert_eq!(jp("31.1"), None);
        assert_eq!(jp("x"), None);
    }

    #[test]
    fn meminfo_values() {
        let text =
            "MemTotal:        7994548 kB\nNvMapMemUsed:     123456 kB\nHugePages_Total:       0\n";
        assert_eq!(meminfo_bytes(text, "MemTotal"), Some(7_994_548 * 1024));
        assert_eq!(meminfo_bytes(text, "NvMapMemUsed"), Some(123_456 * 1024));
        assert_eq!(meminfo_bytes(text, "HugePages_Total"), Some(0));
        assert_eq!(meminfo_bytes(text, "Mem"), None);
        assert_eq!(meminfo_bytes("MemTotal: x kB", "MemTotal"), None);
    }

    #[test]
    fn chip_ids_in_both_notations() {
        assert_eq!(parse_chip_id("35\n"), Some(35));
        assert_eq!(parse_chip_id("0x23"), Some(35));
        assert_eq!(parse_chip_id("tegra"), None);
    }
}
