//! The choices of the GPU settings (discovery, MIG, device IDs, device lists, allocation),
//! named by flags and by the `--config` file alike. A module of their own so that the file
//! reader ([`super::file`]) needs nothing from `config.rs`, which merges flags with the
//! file it reads.

use serde::Serialize;

/// `--discovery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscoveryStrategy {
    Auto,
    Tegra,
    Nvml,
}

/// `--mig-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MigStrategy {
    None,
    Single,
    Mixed,
}

/// `--device-id-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceIdStrategy {
    Uuid,
    Index,
}

/// One entry of `--device-list-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceListStrategy {
    Envvar,
    CdiAnnotations,
    CdiCri,
}

impl DeviceListStrategy {
    fn parse(word: &str) -> anyhow::Result<Self> {
        match word.trim() {
            "envvar" => Ok(Self::Envvar),
            "cdi-annotations" => Ok(Self::CdiAnnotations),
            "cdi-cri" => Ok(Self::CdiCri),
            // NVIDIA's plugin answers Allocate with /dev/null mounts at
            // /var/run/nvidia-container-devices/<id> (the kubelet and runtime mount them); the
            // NVIDIA runtime reads them only with accept-nvidia-visible-devices-as-volume-mounts
            // on, off by default. Not implemented here: CDI serves the same purpose.
            "volume-mounts" => anyhow::bail!(
                "device list strategy `volume-mounts` is not supported (the NVIDIA runtime honours it \
                 only with accept-nvidia-visible-devices-as-volume-mounts, off by default); use \
                 cdi-annotations or cdi-cri for GPUs a pod's environment cannot choose, or envvar"
            ),
            other => anyhow::bail!(
                "unknown device list strategy `{other}`; expected envvar, cdi-annotations or cdi-cri"
            ),
        }
    }

    /// Parses a comma-separated list (duplicates removed, order kept).
    pub fn parse_list(list: &str) -> anyhow::Result<Vec<Self>> {
        let mut out = Vec::new();
        for word in list.split(',').filter(|w| !w.trim().is_empty()) {
            let s = Self::parse(word)?;
            if !out.contains(&s) {
                out.push(s);
            }
        }
        anyhow::ensure!(!out.is_empty(), "empty device list strategy");
        Ok(out)
    }

    pub fn is_cdi(self) -> bool {
        matches!(self, Self::CdiAnnotations | Self::CdiCri)
    }
}

/// `--shared-devices-allocation-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocationPolicy {
    Distributed,
    Packed,
}
