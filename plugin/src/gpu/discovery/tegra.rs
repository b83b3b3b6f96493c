//! Jetson/Tegra detection from files, without NVML (JetPack ≤ 5 has no real NVML).
//!
//! Every signal of the reference is checked, not just the first that matches, so the log
//! can say exactly why a host was (or was not) recognised: "Detected platform: unknown" with
//! no reason is the most reported Jetson failure of NVIDIA's plugin.

use std::path::Path;

use serde::Serialize;

use super::under_root;

/// Tegra SoC generations that carry a CUDA-capable GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Generation {
    /// T210: Jetson Nano, TX1.
    NanoTx1,
    /// T186: TX2, TX2i, TX2 NX.
    Tx2,
    /// T194: AGX Xavier, Xavier NX.
    Xavier,
    /// T234: AGX Orin, Orin NX, Orin Nano.
    Orin,
    /// T264: AGX Thor.
    Thor,
}

impl Generation {
    pub const ALL: [Generation; 5] = [
        Generation::NanoTx1,
        Generation::Tx2,
        Generation::Xavier,
        Generation::Orin,
        Generation::Thor,
    ];

    /// Human name, e.g. `Orin (T234)`.
    pub fn name(self) -> &'static str {
        match self {
            Self::NanoTx1 => "Nano/TX1 (T210)",
            Self::Tx2 => "TX2 (T186)",
            Self::Xavier => "Xavier (T194)",
            Self::Orin => "Orin (T234)",
            Self::Thor => "Thor (T264)",
        }
    }

    /// Short SoC name, e.g. `T234`.
    pub fn soc(self) -> &'static str {
        match self {
            Self::NanoTx1 => "T210",
            Self::Tx2 => "T186",
            Self::Xavier => "T194",
            Self::Orin => "T234",
            Self::Thor => "T264",
        }
    }

    /// From a device-tree SoC token such as `tegra234`.
    pub fn from_soc_token(token: &str) -> Option<Self> {
        match token {
            "tegra210" => Some(Self::NanoTx1),
            "tegra186" => Some(Self::Tx2),
            "tegra194" => Some(Self::Xavier),
            "tegra234" => Some(Self::Orin),
            "tegra264" => Some(Self::Thor),
            _ => None,
        }
    }

    /// From `tegra_chip_id` (33, 24, 25, 35, 38).
    pub fn from_chip_id(id: u32) -> Option<Self> {
        match id {
            0x21 => Some(Self::NanoTx1),
            0x18 => Some(Self::Tx2),
            0x19 => Some(Self::Xavier),
            0x23 => Some(Self::Orin),
            0x26 => Some(Self::Thor),
            _ => None,
        }
    }
}

/// One detection signal that matched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signal {
    /// The host path read (e.g. `/proc/device-tree/compatible`).
    pub path: &'static str,
    /// What it contained (trimmed, NULs shown as spaces).
    pub value: String,
    /// What we concluded from it.
    pub meaning: String,
}

/// Everything the Tegra probe found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TegraDetection {
    /// Signals that matched; empty means "not a Tegra host".
    pub signals: Vec<Signal>,
    /// Signals checked that did not match, with the reason (for the "nothing matched" log).
    pub looked_for: Vec<String>,
    pub generation: Option<Generation>,
    /// The signal the generation was taken from.
    pub generation_from: Option<&'static str>,
    /// `/proc/device-tree/model`, e.g. `NVIDIA Jetson AGX Orin Developer Kit`.
    pub model: Option<String>,
    /// Module part number from `compatible`, e.g. `p3701-0000`, and its product name.
    pub module: Option<String>,
    pub module_name: Option<&'static str>,
    /// L4T version from `/etc/nv_tegra_release`, e.g. `36.4.3`.
    pub l4t: Option<String>,
}

const COMPATIBLE: &str = "/proc/device-tree/compatible";
const MODEL: &str = "/proc/device-tree/model";
const DTSFILENAME: &str = "/proc/device-tree/nvidia,dtsfilename";
const SOC0_FAMILY: &str = "/sys/devices/soc0/family";
const SOC0_SOC_ID: &str = "/sys/devices/soc0/soc_id";
const CHIP_ID: &str = "/sys/module/tegra_fuse/parameters/tegra_chip_id";
const NV_TEGRA_RELEASE: &str = "/etc/nv_tegra_release";
const THOR_DEVFREQ: &str = "/sys/class/devfreq/gpu-gpc-0";

/// Module part number → product (reference §1).
fn module_product(part: &str) -> Option<&'static str> {
    let id = part.split('-').next()?;
    Some(match id {
        "p3448" => "Jetson Nano",
        "p2180" => "Jetson TX1",
        "p3310" => "Jetson TX2",
        "p3489" => "Jetson TX2i",
        "p3636" => "Jetson TX2 NX",
        "p2888" => "Jetson AGX Xavier",
        "p3668" => "Jetson Xavier NX",
        "p3701" => "Jetson AGX Orin",
        "p3767" => match part {
            "p3767-0003" | "p3767-0004" | "p3767-0005" => "Jetson Orin Nano",
            _ => "Jetson Orin NX",
        },
        "p3834" => "Jetson AGX Thor",
        _ => return None,
    })
}

/// Reads a device-tree string property: NUL-separated, NUL-terminated.
fn read_dt_strings(root: &Path, path: &str) -> Option<Vec<String>> {
    let bytes = std::fs::read(under_root(root, path)).ok()?;
    Some(
        bytes
            .split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

fn read_trimmed(root: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(under_root(root, path))
        .ok()
        .map(|s| {
            s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
                .to_string()
        })
}

/// Parses a chip id written in decimal (`35`) or with a C prefix (`0x23`), as tools do.
fn parse_chip_id(text: &str) -> Option<u32> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// `# R36 (release), REVISION: 4.3, …` → `36.4.3`; `REVISION: 5` → `32.5`.
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
        self.looked_for
            .push(format!("{} {why}", under_root(root, path).display()));
    }

    fn set_generation(&mut self, generation: Option<Generation>, from: &'static str) {
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
                        let gen = Generation::from_soc_token(&token);
                        let meaning = match gen {
                            Some(g) => format!("Tegra SoC {token} → {}", g.name()),
                            None => format!("Tegra SoC {token} (unknown generation)"),
                        };
                        d.matched(COMPATIBLE, entries.join(" "), meaning);
                        d.set_generation(gen, COMPATIBLE);
                    }
                    None => d.missed(root, COMPATIBLE, "has no `nvidia,tegra<N>` entry"),
                }
            }
            None => d.missed(root, COMPATIBLE, "is missing or unreadable"),
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
            None => d.missed(root, MODEL, "is missing or unreadable"),
        }

        // 3. `nvidia,dtsfilename`: first dash token of the file name is the SoC.
        match read_dt_strings(root, DTSFILENAME).and_then(|v| v.into_iter().next()) {
            Some(path) => {
                let file = path.rsplit('/').next().unwrap_or(&path).to_string();
                let token = file.split('-').next().unwrap_or("").to_string();
                if token.starts_with("tegra") {
                    let gen = Generation::from_soc_token(&token);
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
            None => d.missed(root, DTSFILENAME, "is missing or unreadable"),
        }

        // 4. soc0/family starts with "tegra" (go-nvlib's test); soc0/soc_id may hold the chip id.
        match read_trimmed(root, SOC0_FAMILY) {
            Some(family) if family.to_ascii_lowercase().starts_with("tegra") => {
                d.matched(SOC0_FAMILY, family, "SoC family Tegra");
                if let Some(gen) = read_trimmed(root, SOC0_SOC_ID)
                    .and_then(|s| parse_chip_id(&s))
                    .and_then(Generation::from_chip_id)
                {
                    d.set_generation(Some(gen), SOC0_SOC_ID);
                }
            }
            Some(family) => d.missed(root, SOC0_FAMILY, &format!("is `{family}` (not Tegra)")),
            None => d.missed(root, SOC0_FAMILY, "is missing or unreadable"),
        }

        // 5. tegra_fuse chip id (what Wind River's patch checked).
        match read_trimmed(root, CHIP_ID) {
            Some(text) => match parse_chip_id(&text) {
                Some(id) => {
                    let gen = Generation::from_chip_id(id);
                    let meaning = match gen {
                        Some(g) => format!("chip id {id} (0x{id:x}) → {}", g.name()),
                        None => format!("chip id {id} (0x{id:x}), generation unknown"),
                    };
                    d.matched(CHIP_ID, text, meaning);
                    d.set_generation(gen, CHIP_ID);
                }
                None => d.missed(root, CHIP_ID, &format!("holds `{text}`, not a number")),
            },
            None => d.missed(root, CHIP_ID, "is missing or unreadable"),
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
                // Only r38+ pins the generation (Thor only); r32/r35/r36 span several SoCs.
                let major = l4t
                    .as_deref()
                    .and_then(|v| v.split('.').next()?.parse::<u32>().ok());
                if major == Some(38) {
                    d.set_generation(Some(Generation::Thor), NV_TEGRA_RELEASE);
                }
                d.l4t = l4t;
            }
            Err(_) => d.missed(root, NV_TEGRA_RELEASE, "is missing or unreadable"),
        }

        // 7. Thor's devfreq node (jtop's test).
        if under_root(root, THOR_DEVFREQ).exists() {
            d.matched(THOR_DEVFREQ, "present", "Thor GPU devfreq node");
            d.set_generation(Some(Generation::Thor), THOR_DEVFREQ);
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
                generation = self.generation.map(Generation::name).unwrap_or("unknown"),
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
    }

    #[test]
    fn chip_ids_in_both_notations() {
        assert_eq!(parse_chip_id("35\n"), Some(35));
        assert_eq!(parse_chip_id("0x23"), Some(35));
        assert_eq!(Generation::from_chip_id(33), Some(Generation::NanoTx1));
        assert_eq!(Generation::from_chip_id(38), Some(Generation::Thor));
        assert_eq!(Generation::from_chip_id(7), None);
    }
}
