//! A Jetson's power modes as L4T's `nvpmodel` defines them, and the mode in force.
//!
//! The configuration (`/etc/nvpmodel.conf`, on L4T a link to the board's file under
//! `/etc/nvpmodel/`) is the format its own header documents:
//!
//! - `< PARAM TYPE=FILE|CLOCK NAME=<param> >` blocks name the sysfs files a setting writes;
//! - `< POWER_MODEL ID=<n> NAME=<name> >` starts a mode, followed by `<param> <arg> <value>`
//!   lines (`GPU MAX_FREQ 624750000`, `CPU_ONLINE CORE_4 0`); for a CLOCK `-1` is "no limit"
//!   (nvpmodel prints it as `2147483647`), and `EMC MAX_FREQ 0` lifts the memory-clock cap;
//! - `< PM_CONFIG DEFAULT=<id> >` names the mode a board boots in.
//!
//! The first L4T releases (TX2, 2017) wrote a mode's lines as `<sysfs path> <value>`
//! instead; those are read too. `_KNEXT` arguments (the same setting on a later kernel's
//! path) say nothing new and are skipped.
//!
//! The mode in force is nvpmodel's own record, `/var/lib/nvpmodel/status`
//! (`pmode:0002 fmode:quiet`), or what `nvpmodel -q` prints (`NV Power Mode: MODE_30W`, then
//! the id on a line of its own).

use std::collections::BTreeMap;
use std::fmt;

/// A clock limit a mode sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    /// No limit under this mode: the hardware's own maximum.
    Unlimited,
    /// At most this many Hz (kHz for the CPU clusters, as cpufreq counts).
    At(u64),
}

/// One `< POWER_MODEL >` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerMode {
    pub id: u32,
    pub name: String,
    /// `GPU MAX_FREQ` (Hz), where the mode sets it.
    pub gpu_max: Option<Ceiling>,
    /// `EMC MAX_FREQ` (Hz): the memory clock's cap.
    pub emc_max: Option<Ceiling>,
    /// `MAX_FREQ` of each CPU cluster parameter (`CPU_A78_0`: kHz).
    pub cpu_max: BTreeMap<String, Ceiling>,
    /// `CPU_ONLINE CORE_<n> <0|1>`: the cores this mode keeps online or takes offline.
    pub cores_online: BTreeMap<u32, bool>,
}

impl PowerMode {
    /// The CPU cores this mode keeps online, where it says.
    pub fn online_cores(&self) -> Option<usize> {
        (!self.cores_online.is_empty())
            .then(|| self.cores_online.values().filter(|on| **on).count())
    }
}

/// A board's power modes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerModes {
    /// In the file's order.
    pub modes: Vec<PowerMode>,
    /// `PM_CONFIG DEFAULT`: the mode the board boots in.
    pub default: Option<u32>,
}

impl PowerModes {
    pub fn by_id(&self, id: u32) -> Option<&PowerMode> {
        self.modes.iter().find(|m| m.id == id)
    }

    /// The board's mode names and ids, for a message that names what the board has.
    pub fn names(&self) -> String {
        let names: Vec<String> = self
            .modes
            .iter()
            .map(|m| format!("{} ({})", m.name, m.id))
            .collect();
        names.join(", ")
    }
}

/// A line of an nvpmodel configuration that is not what the format allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfError {
    /// 1-based.
    pub line: usize,
    pub what: String,
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ConfError {}

/// nvpmodel writes "no limit" as -1 in the file and INT_MAX when it prints it; larger values
/// are real (an Orin's EMC runs at 3.2 GHz).
const INT_MAX: i64 = i32::MAX as i64;

/// Reads an nvpmodel configuration.
pub fn parse_conf(text: &str) -> Result<PowerModes, ConfError> {
    let mut out = PowerModes::default();
    let mut current: Option<PowerMode> = None;
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let err = |what: String| ConfError {
            line: line_no,
            what,
        };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('<') {
            let header = header.strip_suffix('>').ok_or_else(|| {
                err(format!(
                    "`{line}` opens a block header but does not close it with `>`"
                ))
            })?;
            let mut words = header.split_whitespace();
            let kind = words.next().unwrap_or("");
            let fields: BTreeMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
            if let Some(mode) = current.take() {
                push_mode(&mut out, mode, line_no)?;
            }
            match kind {
                "POWER_MODEL" => {
                    let id = fields
                        .get("ID")
                        .ok_or_else(|| err("a POWER_MODEL block without ID=".into()))?;
                    let id: u32 = id
                        .parse()
                        .map_err(|_| err(format!("POWER_MODEL ID `{id}` is not a number")))?;
                    let name = fields
                        .get("NAME")
                        .ok_or_else(|| err(format!("POWER_MODEL ID={id} has no NAME=")))?;
                    current = Some(PowerMode {
                        id,
                        name: (*name).to_string(),
                        gpu_max: None,
                        emc_max: None,
                        cpu_max: BTreeMap::new(),
                        cores_online: BTreeMap::new(),
                    });
                }
                // The first releases called it PM_STATUS.
                "PM_CONFIG" | "PM_STATUS" => {
                    let default = fields
                        .get("DEFAULT")
                        .ok_or_else(|| err(format!("{kind} without DEFAULT=")))?;
                    out.default = Some(default.parse().map_err(|_| {
                        err(format!("{kind} DEFAULT `{default}` is not a mode id"))
                    })?);
                }
                // PARAM and FAN blocks, and whatever a later release adds: not a mode.
                _ => {}
            }
            continue;
        }
        let Some(mode) = current.as_mut() else {
            // A PARAM block's lines (`MAX_FREQ /sys/...`).
            continue;
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [param, arg, value] => setting(mode, param, arg, value).map_err(err)?,
            [path, value] if path.starts_with('/') => path_setting(mode, path, value).map_err(err)?,
            _ => {
                return Err(err(format!(
                    "`{line}` in POWER_MODEL {} is neither `<param> <arg> <value>` nor `<sysfs path> <value>`",
                    mode.name
                )))
            }
        }
    }
    if let Some(mode) = current.take() {
        let last = text.lines().count();
        push_mode(&mut out, mode, last)?;
    }
    if out.modes.is_empty() {
        return Err(ConfError {
            line: text.lines().count().max(1),
            what: "no POWER_MODEL block".into(),
        });
    }
    if let Some(default) = out.default {
        if out.by_id(default).is_none() {
            return Err(ConfError {
                line: text.lines().count().max(1),
                what: format!(
                    "the default mode {default} is not one of the modes ({})",
                    out.names()
                ),
            });
        }
    }
    Ok(out)
}

fn push_mode(out: &mut PowerModes, mode: PowerMode, line: usize) -> Result<(), ConfError> {
    if let Some(twin) = out.by_id(mode.id) {
        return Err(ConfError {
            line,
            what: format!(
                "POWER_MODEL ID={} is defined twice ({} and {})",
                mode.id, twin.name, mode.name
            ),
        });
    }
    out.modes.push(mode);
    Ok(())
}

fn clock(value: &str) -> Result<Ceiling, String> {
    let v: i64 = value
        .parse()
        .map_err(|_| format!("clock value `{value}` is not a number"))?;
    Ok(match v {
        v if v < 0 || v == INT_MAX => Ceiling::Unlimited,
        v => Ceiling::At(v as u64),
    })
}

/// The memory clock's cap: a clock, where 0 lifts the cap (MAXN writes it).
fn emc_cap(value: &str) -> Result<Ceiling, String> {
    Ok(match clock(value)? {
        Ceiling::At(0) => Ceiling::Unlimited,
        c => c,
    })
}

fn setting(mode: &mut PowerMode, param: &str, arg: &str, value: &str) -> Result<(), String> {
    if arg.ends_with("_KNEXT") {
        return Ok(());
    }
    match (param, arg) {
        ("GPU", "MAX_FREQ") => mode.gpu_max = Some(clock(value)?),
        ("EMC", "MAX_FREQ") => mode.emc_max = Some(emc_cap(value)?),
        ("CPU_ONLINE", core) => {
            let n = core
                .strip_prefix("CORE_")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("CPU_ONLINE `{core}` is not CORE_<n>"))?;
            mode.cores_online.insert(n, online(value)?);
        }
        (cluster, "MAX_FREQ") if cluster.starts_with("CPU_") => {
            mode.cpu_max.insert(cluster.to_string(), clock(value)?);
        }
        _ => {}
    }
    Ok(())
}

fn online(value: &str) -> Result<bool, String> {
    match value {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(format!("a core's online value `{value}` is not 0 or 1")),
    }
}

/// The TX2-era form: `/sys/devices/system/cpu/cpu1/online 1`,
/// `/sys/devices/17000000.gp10b/devfreq/17000000.gp10b/max_freq 1300500000`.
fn path_setting(mode: &mut PowerMode, path: &str, value: &str) -> Result<(), String> {
    if let Some(cpu) = path
        .strip_prefix("/sys/devices/system/cpu/cpu")
        .and_then(|rest| rest.strip_suffix("/online"))
    {
        if let Ok(n) = cpu.parse() {
            mode.cores_online.insert(n, online(value)?);
        }
    } else if path.contains("/devfreq/") && path.ends_with("/max_freq") {
        mode.gpu_max = Some(clock(value)?);
    } else if path.ends_with("/emc_iso_cap") {
        mode.emc_max = Some(emc_cap(value)?);
    } else if let Some(cpu) = path
        .strip_prefix("/sys/devices/system/cpu/cpu")
        .and_then(|rest| rest.strip_suffix("/cpufreq/scaling_max_freq"))
    {
        mode.cpu_max.insert(format!("cpu{cpu}"), clock(value)?);
    }
    Ok(())
}

/// Where edgegpu's power policy records the mode it asked a reboot for, and in which boot
/// (a host path; `edgegpu-node-setup doctor` reads it too).
pub const REBOOT_RECORD: &str = "/var/lib/edgegpu/power-mode-reboot";

/// The content of [`REBOOT_RECORD`]: `mode=<id> boot=<boot id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootRecord {
    pub mode: u32,
    /// `/proc/sys/kernel/random/boot_id` of the boot that asked.
    pub boot: String,
}

impl RebootRecord {
    pub fn parse(text: &str) -> Option<RebootRecord> {
        let field = |name: &str| text.split_whitespace().find_map(|f| f.strip_prefix(name));
        Some(RebootRecord {
            mode: field("mode=")?.parse().ok()?,
            boot: field("boot=")?.to_string(),
        })
    }

    pub fn render(&self) -> String {
        format!("mode={} boot={}\n", self.mode, self.boot)
    }
}

/// The mode id in nvpmodel's status file (`pmode:0002 fmode:quiet`).
pub fn parse_status(text: &str) -> Option<u32> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("pmode:"))
        .and_then(|id| id.parse().ok())
}

/// The mode `nvpmodel -q` prints: `NV Power Mode: <name>`, the id on a line of its own
/// (warnings such as `NVPM WARN: fan mode is not set!` may come first).
pub fn parse_query(output: &str) -> Option<(u32, String)> {
    let mut lines = output.lines().map(str::trim);
    let name = lines.find_map(|l| l.strip_prefix("NV Power Mode:"))?.trim();
    let id = lines.find(|l| !l.is_empty())?.parse().ok()?;
    Some((id, name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Orin-style file written for this test in the format L4T's header documents: PARAM
    /// blocks first (with bare `MAX_FREQ` lines that are not a mode's), comments after values.
    const ORIN: &str = "\
# FORMAT: see nvpmodel's header
< PARAM TYPE=FILE NAME=CPU_ONLINE >
CORE_0 /sys/devices/system/cpu/cpu0/online
CORE_1 /sys/devices/system/cpu/cpu1/online
< PARAM TYPE=CLOCK NAME=GPU >
MAX_FREQ /sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu/max_freq
MAX_FREQ_KNEXT /sys/devices/platform/bus@0/17000000.gpu/devfreq_dev/max_freq
< PARAM TYPE=CLOCK NAME=EMC >
MAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap

< POWER_MODEL ID=0 NAME=MAXN >
CPU_ONLINE CORE_0 1
CPU_ONLINE CORE_1 1
CPU_A78_0 MIN_FREQ 729600
CPU_A78_0 MAX_FREQ -1
GPU MIN_FREQ 0
GPU MAX_FREQ -1   # 1300500000[Hz]
GPU MAX_FREQ_KNEXT 5
EMC MAX_FREQ 0

< POWER_MODEL ID=2 NAME=MODE_30W >
CPU_ONLINE CORE_0 1
CPU_ONLINE CORE_1 0
CPU_A78_0 MAX_FREQ 1728000
GPU MAX_FREQ 624750000
EMC MAX_FREQ 3199000000

< PM_CONFIG DEFAULT=2 >
";

    #[test]
    fn modes_their_ceilings_and_the_default() {
        let modes = parse_conf(ORIN).unwrap();
        assert_eq!(modes.default, Some(2));
        assert_eq!(modes.modes.len(), 2);
        let maxn = modes.by_id(0).unwrap();
        assert_eq!(maxn.name, "MAXN");
        assert_eq!(maxn.gpu_max, Some(Ceiling::Unlimited));
        assert_eq!(maxn.emc_max, Some(Ceiling::Unlimited));
        assert_eq!(maxn.cpu_max["CPU_A78_0"], Ceiling::Unlimited);
        assert_eq!(maxn.online_cores(), Some(2));
        let w30 = modes.by_id(2).unwrap();
        assert_eq!(w30.gpu_max, Some(Ceiling::At(624_750_000)));
        assert_eq!(w30.emc_max, Some(Ceiling::At(3_199_000_000)));
        assert_eq!(w30.cpu_max["CPU_A78_0"], Ceiling::At(1_728_000));
        assert_eq!(w30.online_cores(), Some(1));
        assert_eq!(modes.names(), "MAXN (0), MODE_30W (2)");
    }

    #[test]
    fn the_first_releases_wrote_sysfs_paths() {
        let tx2 = "\
< POWER_MODEL ID=0 NAME=MAXN >
/sys/devices/system/cpu/cpu1/online 1
/sys/devices/system/cpu/cpu2/online 0
/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq 2035200
/sys/devices/17000000.gp10b/devfreq/17000000.gp10b/min_freq 0
/sys/devices/17000000.gp10b/devfreq/17000000.gp10b/max_freq 1300500000
/sys/kernel/nvpmodel_emc_cap/emc_iso_cap 0
< PM_STATUS DEFAULT=0 >
";
        let modes = parse_conf(tx2).unwrap();
        let m = modes.by_id(0).unwrap();
        assert_eq!(m.gpu_max, Some(Ceiling::At(1_300_500_000)));
        assert_eq!(m.emc_max, Some(Ceiling::Unlimited));
        assert_eq!(m.cpu_max["cpu0"], Ceiling::At(2_035_200));
        assert_eq!(m.cores_online, BTreeMap::from([(1, true), (2, false)]));
        assert_eq!(modes.default, Some(0));
    }

    #[test]
    fn what_nvpmodel_prints_as_int_max_is_no_limit() {
        let modes =
            parse_conf("< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ 2147483647\n").unwrap();
        assert_eq!(modes.modes[0].gpu_max, Some(Ceiling::Unlimited));
        assert_eq!(modes.default, None);
    }

    #[test]
    fn bad_files_name_the_line_and_what_is_wrong() {
        let cases = [
            (
                "< POWER_MODEL ID=x NAME=A >\n",
                1,
                "POWER_MODEL ID `x` is not a number",
            ),
            ("< POWER_MODEL ID=0 >\n", 1, "POWER_MODEL ID=0 has no NAME="),
            (
                "< POWER_MODEL ID=0 NAME=A\n",
                1,
                "does not close it with `>`",
            ),
            (
                "< POWER_MODEL ID=0 NAME=A >\nGPU MAX_FREQ fast\n",
                2,
                "clock value `fast` is not a number",
            ),
            (
                "< POWER_MODEL ID=0 NAME=A >\nCPU_ONLINE CORE_1 2\n",
                2,
                "is not 0 or 1",
            ),
            ("< POWER_MODEL ID=0 NAME=A >\nGPU\n", 2, "is neither"),
            (
                "< POWER_MODEL ID=0 NAME=A >\n< POWER_MODEL ID=0 NAME=B >\n",
                2,
                "defined twice (A and B)",
            ),
            (
                "< POWER_MODEL ID=0 NAME=A >\n< PM_CONFIG DEFAULT=3 >\n",
                2,
                "the default mode 3 is not one of the modes (A (0))",
            ),
            ("# nothing\n", 1, "no POWER_MODEL block"),
        ];
        for (text, line, what) in cases {
            let e = parse_conf(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
        }
    }

    #[test]
    fn status_and_query_output() {
        assert_eq!(parse_status("pmode:0002 fmode:quiet\n"), Some(2));
        assert_eq!(parse_status("pmode:0000"), Some(0));
        assert_eq!(parse_status("fmode:quiet"), None);
        assert_eq!(
            parse_query("NVPM WARN: fan mode is not set!\nNV Power Mode: MODE_30W\n2\n"),
            Some((2, "MODE_30W".into()))
        );
        assert_eq!(
            parse_query("NV Fan Mode:quiet\nNV Power Mode: MAXN\n0\n"),
            Some((0, "MAXN".into()))
        );
        assert_eq!(parse_query("NV Power Mode: MAXN\n"), None);
    }
}
