//! Link 8: a Jetson's power mode (L4T's nvpmodel): which mode is in force and the GPU clock
//! it allows, and whether a change edgegpu's power policy asked for waits for a reboot
//! (docs/power.md).

use edgegpu_host::root::HostRoot;
use edgegpu_platform::host::{NVPMODEL_CONF, NVPMODEL_STATUS};
use edgegpu_platform::nvpmodel::{parse_conf, parse_status, Ceiling, RebootRecord, REBOOT_RECORD};

use super::finding::{Facts, Finding, Link, Verdict};

/// The running boot's id (Linux `drivers/char/random.c`).
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

pub fn check(host: &HostRoot, facts: &Facts) -> Finding {
    if !facts.tegra.is_tegra() {
        return Finding::new(
            Link::Power,
            Verdict::Skipped,
            "not a Jetson: no nvpmodel power mode",
        );
    }
    let sources = vec![NVPMODEL_CONF.to_string(), NVPMODEL_STATUS.to_string()];
    let conf = match host.read(NVPMODEL_CONF) {
        Ok(Some(text)) => text,
        _ => {
            return Finding::new(
                Link::Power,
                Verdict::Skipped,
                format!("nvpmodel is not configured on this image ({NVPMODEL_CONF} is missing): the power mode cannot be read"),
            )
            .sources(sources)
        }
    };
    let modes = match parse_conf(&conf) {
        Ok(m) => m,
        Err(e) => return Finding::new(
            Link::Power,
            Verdict::Warning,
            format!("{NVPMODEL_CONF}: {e}"),
        )
        .sources(sources)
        .fix(
            "restore the board's nvpmodel configuration from its L4T package (nvidia-l4t-nvpmodel)",
        ),
    };
    let id = host
        .read(NVPMODEL_STATUS)
        .ok()
        .flatten()
        .and_then(|t| parse_status(&t))
        .or(modes.default);
    let Some(mode) = id.and_then(|id| modes.by_id(id)) else {
        return Finding::new(
            Link::Power,
            Verdict::Warning,
            format!(
                "the power mode in force ({}) is not one of the board's: {}",
                id.map_or("unknown".into(), |i| i.to_string()),
                modes.names()
            ),
        )
        .sources(sources)
        .fix("set a mode: sudo nvpmodel -m <id> (or the edgegpu.io/power-mode annotation with the power policy)");
    };
    let ceiling = match mode.gpu_max {
        Some(Ceiling::At(hz)) => format!("GPU clock capped at {} MHz", hz / 1_000_000),
        _ => "GPU clock not capped".into(),
    };
    let mut f = Finding::new(
        Link::Power,
        Verdict::Ok,
        format!("power mode {} (id {}): {ceiling}", mode.name, mode.id),
    )
    .sources(sources)
    .source(REBOOT_RECORD);
    if let Some(record) = host
        .read(REBOOT_RECORD)
        .ok()
        .flatten()
        .and_then(|t| RebootRecord::parse(&t))
    {
        let wanted = modes
            .by_id(record.mode)
            .map_or(record.mode.to_string(), |m| {
                format!("{} (id {})", m.name, m.id)
            });
        let this_boot = host
            .read(BOOT_ID)
            .ok()
            .flatten()
            .is_some_and(|b| b.trim() == record.boot);
        if record.mode != mode.id {
            f.verdict = Verdict::Warning;
            f.summary = if this_boot {
                format!(
                    "power mode {wanted} waits for a reboot; {} is in force",
                    mode.name
                )
            } else {
                format!(
                    "a reboot did not bring power mode {wanted}; {} is in force",
                    mode.name
                )
            };
            f = f.detail(format!(
                "{REBOOT_RECORD}: mode {} asked in boot {}",
                record.mode, record.boot
            ));
            f.fix = Some(if this_boot {
                "reboot the node (sudo reboot) when its pods can move, or allow kured to".into()
            } else {
                "set the mode by hand and read nvpmodel's answer: sudo nvpmodel -m <id>".into()
            });
        }
    }
    f
}
