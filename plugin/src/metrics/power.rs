//! A Jetson's power mode, clock ceilings, thermal zones and throttling (docs/power.md,
//! docs/metrics.md). The mode, the clocks and the temperatures are read at each scrape; the
//! throttling seconds are counted between scrapes by [`edgegpu_node::power::throttle`].

use std::path::PathBuf;
use std::sync::Arc;

use edgegpu_node::power::throttle::{Reason, ThrottleSeconds};
use edgegpu_node::power::{Ceiling, PowerFacts, ThermalZone};

use super::exposition::{Exposition, Kind};
use super::families::{per_holder, SeriesLabels};
use super::served::Holder;

/// What a scrape reads the power series from.
#[derive(Debug, Clone)]
pub(super) struct PowerSource {
    pub(super) root: PathBuf,
    /// Discovery's facts: where the GPU's devfreq directory and the thermal zones are.
    pub(super) facts: PowerFacts,
    /// Counted by the sampler the metrics endpoint runs; `None` without a GPU devfreq.
    pub(super) throttle: Option<Arc<ThrottleSeconds>>,
}

/// One scrape's reading.
#[derive(Debug, Clone)]
pub(super) struct PowerReading {
    /// The mode and the GPU's clocks, read now (the configuration is discovery's).
    facts: PowerFacts,
    zones: Vec<ThermalZone>,
    throttle: Option<Arc<ThrottleSeconds>>,
}

impl PowerSource {
    /// Reads what changes: the mode in force, the GPU's clocks, the zones' temperatures.
    /// Blocking: a few small files.
    pub(super) fn read(&self) -> PowerReading {
        let facts = self.facts.with_mode_read(&self.root);
        let zones = self
            .facts
            .thermal
            .iter()
            .map(|z| z.reread(&self.root))
            .collect();
        PowerReading {
            facts,
            zones,
            throttle: self.throttle.clone(),
        }
    }
}

/// Every power series of a scrape. The GPU series are the Jetson's one GPU's (the first
/// entity), with the pods holding it as the other GPU series carry them.
pub(super) fn render(
    e: &mut Exposition,
    labels: &SeriesLabels,
    holders: &[Vec<Holder>],
    hostname: &str,
    reading: &PowerReading,
) {
    let node = [("Hostname", hostname)];
    let facts = &reading.facts;
    if let Some(current) = &facts.current {
        let id = current.id.to_string();
        e.family(
            "edgegpu_jetson_power_mode",
            Kind::Gauge,
            "1 for the nvpmodel power mode in force (mode: its name, empty when the \
             configuration has no such id; id: its number).",
        )
        .sample(
            &[
                ("mode", current.name.as_deref().unwrap_or("")),
                ("id", id.as_str()),
                ("Hostname", hostname),
            ],
            1.0,
        );
    }
    let gpu = (!holders.is_empty()).then(|| labels.entity(0));
    let clock = facts.gpu_clock.unwrap_or_default();
    if let Some(gpu) = &gpu {
        let gauges: [(&'static str, &'static str, Option<u64>); 3] = [
            (
                "edgegpu_gpu_clock_ceiling_hertz",
                "The GPU's clock ceiling under the power mode in force (the mode's GPU \
                 limit; the hardware's highest clock where the mode sets none).",
                facts.gpu_ceiling_hz(),
            ),
            (
                "edgegpu_gpu_clock_limit_hertz",
                "The GPU's clock ceiling devfreq enforces now (max_freq): the mode's, or \
                 lower where something else capped it.",
                clock.max,
            ),
            (
                "edgegpu_gpu_clock_max_hertz",
                "The GPU's highest clock (devfreq available_frequencies).",
                clock.hardware_max,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(hz) = value {
                e.family(name, Kind::Gauge, help).sample(gpu, hz as f64);
            }
        }
        if let Some(pinned) = clock.pinned() {
            e.family(
                "edgegpu_jetson_clocks_pinned",
                Kind::Gauge,
                "1 while the GPU's clock floor is at its ceiling (what jetson_clocks sets).",
            )
            .sample(gpu, f64::from(u8::from(pinned)));
        }
    }
    if let Some(Ceiling::At(hz)) = facts.current_mode().and_then(|m| m.emc_max) {
        e.family(
            "edgegpu_memory_clock_ceiling_hertz",
            Kind::Gauge,
            "The memory (EMC) clock ceiling the power mode sets, where it sets one.",
        )
        .sample(&node, hz as f64);
    }
    thermal(e, hostname, &reading.zones);
    if let (Some(gpu), Some(seconds)) = (&gpu, &reading.throttle) {
        let mut family = e.family(
            "edgegpu_gpu_throttle_seconds_total",
            Kind::Counter,
            "Seconds the busy GPU ran below its highest clock, by reason (thermal, \
             power_mode, clocks_not_pinned, other), since the plugin started.",
        );
        for reason in Reason::ALL {
            let value = seconds.seconds(reason);
            let mut base = gpu.clone();
            base.push(("reason", reason.as_str()));
            per_holder(&mut family, &base, &holders[0], value);
        }
    }
}

/// Each zone's temperature, its nearest trip point ahead, and whether it throttles.
fn thermal(e: &mut Exposition, hostname: &str, zones: &[ThermalZone]) {
    let mut temperature = e.family(
        "edgegpu_thermal_zone_temperature_celsius",
        Kind::Gauge,
        "A thermal zone's temperature.",
    );
    for z in zones {
        if let Some(m) = z.millicelsius {
            temperature.sample(
                &[("zone", z.name.as_str()), ("Hostname", hostname)],
                m as f64 / 1000.0,
            );
        }
    }
    let mut trip = e.family(
        "edgegpu_thermal_zone_next_trip_celsius",
        Kind::Gauge,
        "The lowest trip point at or above the zone's temperature (type: passive lowers \
         clocks, active starts a fan, hot, critical shuts down).",
    );
    for z in zones {
        if let Some(t) = z.next_trip() {
            trip.sample(
                &[
                    ("zone", z.name.as_str()),
                    ("type", t.kind.as_str()),
                    ("Hostname", hostname),
                ],
                t.millicelsius as f64 / 1000.0,
            );
        }
    }
    let mut throttling = e.family(
        "edgegpu_thermal_zone_throttling",
        Kind::Gauge,
        "1 while the zone is at or above a passive trip point (the kernel lowers clocks).",
    );
    for z in zones.iter().filter(|z| z.millicelsius.is_some()) {
        if z.trips.iter().any(|t| t.kind == "passive") {
            throttling.sample(
                &[("zone", z.name.as_str()), ("Hostname", hostname)],
                f64::from(u8::from(z.throttling())),
            );
        }
    }
}
