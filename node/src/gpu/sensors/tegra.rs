//! A Jetson's GPU sensors from sysfs. Every file is located once at start (directory scans)
//! and only read when asked, so a reading is a handful of small reads:
//!
//! | Reading | File (host path) | Source of the fact |
//! |---|---|---|
//! | utilisation | the GPU device's `load` (per mille) | nvgpu `os/linux/sysfs.c` |
//! | SM clock | the GPU's devfreq `cur_freq` (Hz) | Linux `sysfs-class-devfreq` ABI |
//! | temperature | `thermal_zone*/temp` (m°C) of the zone whose `type` the table names | L4T device trees |
//! | rails, GPU power | INA3221: `ina3221x` `in_power<N>_input` (mW), `ina3221` hwmon `in<N>_input` (mV) × `curr<N>_input` (mA) | L4T r32 IIO driver; Linux `hwmon/ina3221.rst` |
//! | EMC clock and load | `platform::host::EMC_CLOCK_FILES`, `EMC_ACTIVITY_FILES`; load = activity / clock in kHz | jetson_stats `jtop/core/memory.py` |
//! | shared memory | `/proc/meminfo` `NvMapMemUsed`, `MemTotal` | L4T nvmap driver |
//!
//! Where NVML is loaded (a hybrid Jetson, JetPack 6+) it is asked what the platform table
//! says the running L4T release's NVML answers (Thor's utilisation; nothing but identity on
//! Orin's r36 and r39; everything when the release is not in the table): its answers are
//! taken, sysfs gives the rest.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use edgegpu_platform::host::{
    meminfo_bytes, EMC_ACTIVITY_FILES, EMC_CLOCK_FILES, I2C_DRIVERS, MEMINFO, THERMAL_CLASS,
};
use edgegpu_platform::{Generation, GENERATIONS};
use nvml_wrapper::Nvml;

use super::nvml::Queries;
use super::reading::{RailReading, Reading};
use crate::gpu::discovery::TegraDetection;
use crate::gpu::sysfs::GpuSysfs;
use crate::gpu::under_root;

/// How one rail is read.
#[derive(Debug, Clone, PartialEq)]
enum RailFiles {
    /// `ina3221x` (L4T r32): power in mW.
    Power(PathBuf),
    /// `ina3221` hwmon: bus voltage in mV and current in mA.
    VoltageCurrent(PathBuf, PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
struct Rail {
    label: String,
    files: RailFiles,
}

/// The located files of a Jetson's GPU (absolute paths under the root).
pub struct TegraSensors {
    load: Option<PathBuf>,
    cur_freq: Option<PathBuf>,
    temperature: Option<PathBuf>,
    rails: Vec<Rail>,
    /// The label of the rail feeding the GPU, and whether it feeds the GPU alone.
    gpu_rail: Option<(&'static str, bool)>,
    emc_activity: Option<PathBuf>,
    emc_clock: Option<PathBuf>,
    meminfo: PathBuf,
    /// NVML, where it stays loaded (a hybrid Jetson); the Jetson's GPU is its device 0.
    nvml: Option<Arc<Nvml>>,
    /// What to ask NVML (what this release's NVML answers).
    nvml_queries: Queries,
}

impl std::fmt::Debug for TegraSensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TegraSensors")
            .field("load", &self.load)
            .field("cur_freq", &self.cur_freq)
            .field("temperature", &self.temperature)
            .field("rails", &self.rails)
            .field("gpu_rail", &self.gpu_rail)
            .field("emc_activity", &self.emc_activity)
            .field("emc_clock", &self.emc_clock)
            .field("nvml", &self.nvml.is_some())
            .field("nvml_queries", &self.nvml_queries)
            .finish()
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| {
        s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
            .to_string()
    })
}

fn read_number(path: &Path) -> Option<f64> {
    read_trimmed(path)?.parse::<f64>().ok()
}

/// Entries of a directory, sorted (sysfs lists them in creation order).
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// The `temp` file of the GPU's thermal zone: the first zone type of `names` (in their
/// order) that a zone has. Neither the first nor the hottest zone is taken: Nano's `PMIC-Die`
/// reads a constant 100 °C.
fn find_thermal_zone(root: &Path, names: &[&str]) -> Option<PathBuf> {
    let zones: Vec<(String, PathBuf)> = sorted_entries(&under_root(root, THERMAL_CLASS))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("thermal_zone"))
        })
        .filter_map(|p| Some((read_trimmed(&p.join("type"))?, p.join("temp"))))
        .collect();
    names
        .iter()
        .find_map(|name| zones.iter().find(|(t, _)| t == name))
        .map(|(_, temp)| temp.clone())
}

/// Every labelled channel of every INA3221 monitor bound to one of `drivers`.
fn find_rails(root: &Path, drivers: &[&str]) -> Vec<Rail> {
    let mut rails = Vec::new();
    for driver in drivers {
        for device in sorted_entries(&under_root(root, I2C_DRIVERS).join(driver)) {
            if !device.is_dir() {
                continue; // bind, unbind, uevent, module
            }
            if *driver == "ina3221x" {
                for iio in sorted_entries(&device) {
                    let is_iio = iio
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("iio:device"));
                    if is_iio {
                        rails.extend(iio_rails(&iio));
                    }
                }
            } else {
                for hwmon in sorted_entries(&device.join("hwmon")) {
                    rails.extend(hwmon_rails(&hwmon));
                }
            }
        }
    }
    rails
}

/// A channel without a rail behind it is labelled `NC` (not connected) or left empty.
fn usable_label(label: Option<String>) -> Option<String> {
    label.filter(|l| !l.is_empty() && l != "NC")
}

/// `ina3221x`: `rail_name_<N>` and `in_power<N>_input`.
fn iio_rails(dir: &Path) -> Vec<Rail> {
    (0..8)
        .filter_map(|n| {
            let label = usable_label(read_trimmed(&dir.join(format!("rail_name_{n}"))))?;
            Some(Rail {
                label,
                files: RailFiles::Power(dir.join(format!("in_power{n}_input"))),
            })
        })
        .collect()
}

/// `ina3221` hwmon: `in<N>_label`, `in<N>_input`, `curr<N>_input` (N from 1).
fn hwmon_rails(dir: &Path) -> Vec<Rail> {
    (1..=8)
        .filter_map(|n| {
            let label = usable_label(read_trimmed(&dir.join(format!("in{n}_label"))))?;
            Some(Rail {
                label,
                files: RailFiles::VoltageCurrent(
                    dir.join(format!("in{n}_input")),
                    dir.join(format!("curr{n}_input")),
                ),
            })
        })
        .collect()
}

/// The first of `files` that exists under `root`.
fn first_existing(root: &Path, files: &[&str]) -> Option<PathBuf> {
    files
        .iter()
        .map(|f| under_root(root, f))
        .find(|p| p.is_file())
}

/// The generation's rail entry for this module (or for every module).
fn gpu_rail(generation: &Generation, module: Option<&str>) -> Option<(&'static str, bool)> {
    generation
        .power_rails
        .iter()
        .find(|r| {
            r.modules.is_empty()
                || module.is_some_and(|m| r.modules.iter().any(|part| m.starts_with(part)))
        })
        .and_then(|r| r.gpu_rail.map(|label| (label, r.gpu_rail_is_gpu_only)))
}

impl TegraSensors {
    /// Locates every sensor file of the Jetson `detection` describes, under `root`.
    pub fn locate(root: &Path, detection: &TegraDetection, nvml: Option<Arc<Nvml>>) -> Self {
        let generation = detection.generation;
        let l4t_major = detection
            .l4t
            .as_deref()
            .and_then(edgegpu_platform::host::l4t_major);
        let sysfs = GpuSysfs::find(root, generation, l4t_major);
        let nvml_queries = match generation.zip(l4t_major) {
            Some((g, l4t)) => match g.nvml_answers(l4t) {
                Some(a) => Queries {
                    utilization: a.utilization,
                    clocks: a.clocks,
                    temperature: a.temperature,
                    power: a.power,
                    framebuffer: false,
                },
                // The table knows no NVML on this release: whatever is loaded answers.
                None => Queries {
                    framebuffer: false,
                    ..Queries::ALL
                },
            },
            None => Queries {
                framebuffer: false,
                ..Queries::ALL
            },
        };
        // Zone names and rail drivers: the generation's, or every generation's when unknown.
        let zone_names: Vec<&str> = match generation {
            Some(g) => g.thermal_zones.to_vec(),
            None => GENERATIONS
                .iter()
                .flat_map(|g| g.thermal_zones.iter().copied())
                .collect(),
        };
        let mut drivers: Vec<&str> = GENERATIONS
            .iter()
            .flat_map(|g| g.power_rails.iter().map(|r| r.driver))
            .collect();
        drivers.sort_unstable();
        drivers.dedup();
        let sensors = TegraSensors {
            load: sysfs.load.as_deref().map(|p| under_root(root, p)),
            cur_freq: sysfs.cur_freq().map(|p| under_root(root, &p)),
            temperature: find_thermal_zone(root, &zone_names),
            rails: find_rails(root, &drivers),
            gpu_rail: generation.and_then(|g| gpu_rail(g, detection.module.as_deref())),
            emc_activity: first_existing(root, EMC_ACTIVITY_FILES),
            emc_clock: first_existing(root, EMC_CLOCK_FILES),
            meminfo: under_root(root, MEMINFO),
            nvml,
            nvml_queries,
        };
        tracing::info!(sensors = ?sensors, "Jetson GPU sensors located");
        sensors
    }

    /// Reads every located file once.
    pub fn read(&self) -> Reading {
        let emc_clock_hz = self.emc_clock.as_deref().and_then(read_number);
        let rails: Vec<RailReading> = self
            .rails
            .iter()
            .filter_map(|r| {
                let watts = match &r.files {
                    RailFiles::Power(mw) => read_number(mw)? / 1000.0,
                    RailFiles::VoltageCurrent(mv, ma) => {
                        read_number(mv)? * read_number(ma)? / 1_000_000.0
                    }
                };
                Some(RailReading {
                    feeds_gpu: self.gpu_rail.is_some_and(|(label, _)| label == r.label),
                    label: r.label.clone(),
                    watts,
                })
            })
            .collect();
        let power_watts = match self.gpu_rail {
            Some((label, true)) => rails.iter().find(|r| r.label == label).map(|r| r.watts),
            _ => None,
        };
        let meminfo = std::fs::read_to_string(&self.meminfo).ok();
        let mut reading = Reading {
            utilization_percent: self.load.as_deref().and_then(read_number).map(|l| l / 10.0),
            sm_clock_mhz: self
                .cur_freq
                .as_deref()
                .and_then(read_number)
                .map(|hz| hz / 1e6),
            memory_clock_mhz: emc_clock_hz.map(|hz| hz / 1e6),
            temperature_celsius: self
                .temperature
                .as_deref()
                .and_then(read_number)
                .map(|m| m / 1000.0),
            power_watts,
            framebuffer_used_mib: None,
            framebuffer_free_mib: None,
            emc_utilization_percent: match (self.emc_activity.as_deref(), emc_clock_hz) {
                (Some(activity), Some(hz)) if hz > 0.0 => {
                    read_number(activity).map(|a| a / (hz / 1000.0))
                }
                _ => None,
            },
            rails,
            shared_memory_used_bytes: meminfo
                .as_deref()
                .and_then(|m| meminfo_bytes(m, "NvMapMemUsed")),
            shared_memory_total_bytes: meminfo
                .as_deref()
                .and_then(|m| meminfo_bytes(m, "MemTotal")),
        };
        if let Some(nvml) = &self.nvml {
            // NVML's answer where the release's NVML gives one; sysfs for the rest.
            let from_nvml = super::nvml::read_device(nvml.device_by_index(0), self.nvml_queries);
            let r = &mut reading;
            r.utilization_percent = from_nvml.utilization_percent.or(r.utilization_percent);
            r.sm_clock_mhz = from_nvml.sm_clock_mhz.or(r.sm_clock_mhz);
            r.memory_clock_mhz = from_nvml.memory_clock_mhz.or(r.memory_clock_mhz);
            r.temperature_celsius = from_nvml.temperature_celsius.or(r.temperature_celsius);
            r.power_watts = from_nvml.power_watts.or(r.power_watts);
        }
        reading
    }
}
