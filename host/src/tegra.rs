//! Jetson/Tegra detection from files, without NVML (JetPack ≤ 5 has no real NVML): what the
//! device plugin's discovery and `edgegpu-node-setup doctor` both go by.
//!
//! Every detection signal is checked, not just the first that matches, so the log
//! can say exactly why a host was (or was not) recognised: "Detected platform: unknown" with
//! no reason is the most reported Jetson failure of NVIDIA's plugin.

use std::path::{Path, PathBuf};

use edgegpu_platform::host::{
    device_tree_in_sysfs, parse_chip_id, parse_l4t_release, CHIP_ID, COMPATIBLE, DTSFILENAME,
    DT_SERIAL, MODEL, NV_TEGRA_RELEASE, SOC0_FAMILY, SOC0_SERIAL, SOC0_SOC_ID,
};
use edgegpu_platform::{module_product, Generation, GENERATIONS};

/// `abs` (a host path such as `/etc/nv_tegra_release`) as seen under `root`.
fn under_root(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

/// One detection signal that matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    /// The host path read (e.g. `/proc/device-tree/compatible`).
    pub path: &'static str,
    /// What it contained (trimmed, NULs shown as spaces).
    pub value: String,
    /// What we concluded from it.
    pub meaning: String,
}

/// Everything the Tegra probe found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TegraDetection {
    /// Signals that matched; empty means "not a Tegra host".
    pub signals: Vec<Signal>,
    /// Signals checked that did not match, with the reason (for the "nothing matched" log).
    pub looked_for: Vec<String>,
    pub generation: Option<&'static Generation>,
    /// The signal the generation was taken from.
    pub generation_from: Option<&'static str>,
    /// `/proc/device-tree/model`, e.g. `NVIDIA Jetson AGX Orin Developer Kit`.
    pub model: Option<String>,
    /// Module part number from `compatible`, e.g. `p3701-0000`, and its product name.
    pub module: Option<String>,
    pub module_name: Option<&'static str>,
    /// L4T version from `/etc/nv_tegra_release`, e.g. `36.4.3`.
    pub l4t: Option<String>,
    /// The board's serial number (soc bus, else the device tree): a per-board ID for telemetry.
    pub serial: Option<String>,
}

/// Why a signal's file was not read.
const MISSING: &str = "is missing or unreadable";

/// Reads host file `path` under `root`; a `/proc/device-tree/…` file that is not there is read
/// from the device tree in sysfs. The host's `/proc/device-tree` is an absolute link into
/// `/sys/firmware`: in a pod that mounts the host's `/proc` (per-pod GPU memory) it resolves
/// in the pod's own, masked, `/sys/firmware`, while the DaemonSet mounts the device tree at
/// `/host/sys/firmware/devicetree/base` (`edgegpu_platform::host::DEVICE_TREE_SYSFS`).
fn read_host(root: &Path, path: &str) -> Option<Vec<u8>> {
    std::fs::read(under_root(root, path)).ok().or_else(|| {
        let sysfs = device_tree_in_sysfs(path)?;
        std::fs::read(under_root(root, &sysfs)).ok()
    })
}

/// Reads a device-tree string property: NUL-separated, NUL-terminated.
fn read_dt_strings(root: &Path, path: &str) -> Option<Vec<String>> {
    let bytes = read_host(root, path)?;
    Some(
        bytes
            .split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

fn read_trimmed(root: &Path, path: &str) -> Option<String> {
    let bytes = read_host(root, path)?;
    let text = String::from_utf8(bytes).ok()?;
    Some(
        text.trim_matches(|c: char| c.is_whitespace() || c == '\0')
            .to_string(),
    )
}

impl TegraDetection {
    /// True when at least one signal matched.
    pub fn is_tegra(&self) -> bool {
        !self.signals.is_empty()
    }

    fn matched(
        &mut self,
        path: &'static str,
        value: impl Into<String>,
        meaning: impl Into<String>,
    ) {
        self.signals.push(Signal {
            path,
            value: value.into(),
            meaning: meaning.into(),
        });
    }

    fn missed(&mut self, root: &Path, path: &str, why: &str) {
        let mut line = format!("{} {why}", under_root(root, path).display());
        if why == MISSING {
            if let Some(sysfs) = device_tree_in_sysfs(path) {
                line += &format!(", as is {}", under_root(root, &sysfs).display());
            }
        }
        self.looked_for.push(line);
    }

    fn set_generation(&mut self, generation: Option<&'static Generation>, from: &'static str) {
        if self.generation.is_none() {
            if let Some(g) = generation {
                self.generation = Some(g);
                self.generation_from = Some(from);
            }
        }
    }

    /// Checks every signal under `root`. Never fails: unreadable files are "not matched".
    pub fn probe(root: &Path) -> Self {
        let mut d = TegraDetection::default();

        // 1. device-tree `compatible`: any `nvidia,tegra<digits>` entry; the SoC token names
        //    the generation; `nvidia,pNNNN-NNNN` entries name the module.
        match read_dt_strings(root, COMPATIBLE) {
            Some(entries) => {
                let soc = entries.iter().find_map(|e| {
                    let t = e.strip_prefix("nvidia,tegra")?;
                    (!t.is_empty() && t.chars().all(|c| c.is_ascii_digit()))
                        .then(|| format!("tegra{t}"))
                });
                for e in &entries {
                    if let Some(part) = e.strip_prefix("nvidia,") {
                        // Skip carrier+module pairs; take the module alone.
                        let is_part = part.len() == 10
                            && part.starts_with('p')
                            && part.as_bytes()[5] == b'-'
                            && part[1..5].chars().all(|c| c.is_ascii_digit());
                        if is_part && d.module.is_none() {
                            d.module = Some(part.to_string());
                            d.module_name = module_product(part);
                        }
                    }
                }
                // Carrier+module entries (`nvidia,p3737-0000+p3701-0000`) when no bare one.
                if d.module.is_none() {
                    if let Some(m) = entries
                        .iter()
                        .find_map(|e| e.split('+').nth(1).map(str::to_string))
                    {
                        d.module_name = module_product(&m);
                        d.module = Some(m);
                    }
                }
                match soc {
                    Some(token) => {
                        let gen = Generation::by_compatible(&token);
                        let meaning = match gen {
                            Some(g) => format!("Tegra SoC {token} → {}", g.name),
                            None => format!("Tegra SoC {token} (unknown generation)"),
                        };
                        d.matched(COMPATIBLE, entries.join(" "), meaning);
                        d.set_generation(gen, COMPATIBLE);
                    }
                    None => d.missed(root, COMPATIBLE, "has no `nvidia,tegra<N>` entry"),
                }
            }
            None => d.missed(root, COMPATIBLE, MISSING),
        }

        // 2. device-tree `model`: human board name.
        match read_dt_strings(root, MODEL).and_then(|v| v.into_iter().next()) {
            Some(model)
                if model.contains("Jetson") || model.to_ascii_lowercase().contains("tegra") =>
            {
                d.matched(MODEL, model.clone(), "Jetson board model");
                d.model = Some(model);
            }
            Some(model) => {
                d.missed(
                    root,
                    MODEL,
                    &format!("is `{model}` (no Jetson/Tegra in it)"),
                );
                d.model = Some(model);
            }
            None => d.missed(root, MODEL, MISSING),
        }

        // 3. `nvidia,dtsfilename`: first dash token of the file name is the SoC.
        match read_dt_strings(root, DTSFILENAME).and_then(|v| v.into_iter().next()) {
            Some(path) => {
                let file = path.rsplit('/').next().unwrap_or(&path).to_string();
                let token = file.split('-').next().unwrap_or("").to_string();
                if token.starts_with("tegra") {
                    let gen = Generation::by_compatible(&token);
                    d.matched(
                        DTSFILENAME,
                        path.clone(),
                        format!("device tree built for {token}"),
                    );
                    d.set_generation(gen, DTSFILENAME);
                } else {
                    d.missed(root, DTSFILENAME, &format!("is `{path}` (not a tegra dts)"));
                }
            }
            None => d.missed(root, DTSFILENAME, MISSING),
        }

        // 4. soc0/family starts with "tegra" (go-nvlib's test); soc0/soc_id may hold the chip id.
        match read_trimmed(root, SOC0_FAMILY) {
            Some(family) if family.to_ascii_lowercase().starts_with("tegra") => {
                d.matched(SOC0_FAMILY, family, "SoC family Tegra");
                if let Some(gen) = read_trimmed(root, SOC0_SOC_ID)
                    .and_then(|s| parse_chip_id(&s))
                    .and_then(Generation::by_chip_id)
                {
                    d.set_generation(Some(gen), SOC0_SOC_ID);
                }
            }
            Some(family) => d.missed(root, SOC0_FAMILY, &format!("is `{family}` (not Tegra)")),
            None => d.missed(root, SOC0_FAMILY, MISSING),
        }

        // 5. tegra_fuse chip id (what Wind River's patch checked).
        match read_trimmed(root, CHIP_ID) {
            Some(text) => match parse_chip_id(&text) {
                Some(id) => {
                    let gen = Generation::by_chip_id(id);
                    let meaning = match gen {
                        Some(g) => format!("chip id {id} (0x{id:x}) → {}", g.name),
                        None => format!("chip id {id} (0x{id:x}), generation unknown"),
                    };
                    d.matched(CHIP_ID, text, meaning);
                    d.set_generation(gen, CHIP_ID);
                }
                None => d.missed(root, CHIP_ID, &format!("holds `{text}`, not a number")),
            },
            None => d.missed(root, CHIP_ID, MISSING),
        }

        // 6. /etc/nv_tegra_release: L4T version (BOARD is unreliable and not used).
        match std::fs::read_to_string(under_root(root, NV_TEGRA_RELEASE)) {
            Ok(text) => {
                let l4t = parse_l4t_release(&text);
                let first = text.lines().next().unwrap_or("").trim().to_string();
                match &l4t {
                    Some(v) => d.matched(NV_TEGRA_RELEASE, first, format!("L4T {v}")),
                    None => d.matched(
                        NV_TEGRA_RELEASE,
                        first,
                        "L4T release file (version unreadable)",
                    ),
                }
                // Only a release that runs on one generation alone names it (r38: Thor);
                // r32/r35/r36 span several SoCs.
                let by_release = l4t
                    .as_deref()
                    .and_then(edgegpu_platform::host::l4t_major)
                    .and_then(Generation::by_l4t_major);
                d.set_generation(by_release, NV_TEGRA_RELEASE);
                d.l4t = l4t;
            }
            Err(_) => d.missed(root, NV_TEGRA_RELEASE, MISSING),
        }

        // 7. Files whose existence alone names a generation (Thor's devfreq node, jtop's test).
        for g in GENERATIONS {
            if let Some(marker) = g.detect.marker_file {
                if under_root(root, marker).exists() {
                    d.matched(marker, "present", format!("marker file of {}", g.name));
                    d.set_generation(Some(g), marker);
                }
            }
        }
        // Not a signal: only a Tegra board's serial is of use.
        if d.is_tegra() {
            d.serial = [SOC0_SERIAL, DT_SERIAL]
                .into_iter()
                .filter_map(|p| read_trimmed(root, p))
                .find(|s| !s.is_empty());
        }
        d
    }

    /// Logs the outcome: which signals matched, board, generation, L4T; or what was looked for.
    pub fn log(&self, root: &Path) {
        if self.is_tegra() {
            for s in &self.signals {
                tracing::info!(signal = s.path, value = %s.value, "Tegra signal matched: {}", s.meaning);
            }
            tracing::info!(
                board = self.model.as_deref().unwrap_or("unknown"),
                module = self.module.as_deref().unwrap_or("unknown"),
                product = self.module_name.unwrap_or("unknown"),
                generation = self.generation.map_or("unknown", |g| g.name),
                generation_from = self.generation_from.unwrap_or("-"),
                l4t = self.l4t.as_deref().unwrap_or("unknown"),
                "Detected platform: tegra"
            );
        } else {
            tracing::warn!(
                root = %root.display(),
                "No Tegra signal matched; looked for: {}",
                self.looked_for.join("; ")
            );
        }
    }
}
