//! One function per metric family of a scrape (the table-driven DCGM fields: one row each),
//! written in the order [`super::MetricsSource::render`] calls them. Each takes what its
//! series are about and writes nothing when it has no sample.

use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::HEALTHY;

use crate::kubelet::stats::{RegistrationStats, Reregistration};
use crate::resource::Resource;
use edgegpu_node::gpu::health::HealthCounts;
use edgegpu_node::gpu::sensors::{Reading, Readings};
use edgegpu_node::gpu::Platform;

use super::exposition::{Exposition, Family, Kind};
use super::served::{Entity, Holder, Served};

/// The identifying labels of a scrape's series in dcgm-exporter's order: gpu, UUID, device,
/// modelName, then a GPU instance's GPU_I_PROFILE and GPU_I_ID, then Hostname.
pub(super) struct SeriesLabels<'s> {
    gpus: Vec<[(&'static str, String); 4]>,
    entities: &'s [Entity],
    gi_ids: Vec<String>,
    hostname: &'s str,
}

impl<'s> SeriesLabels<'s> {
    /// The labels of `served`'s GPUs (as its first resource sees them) and entities.
    pub(super) fn new(served: &'s Served, hostname: &'s str) -> Self {
        let (gpus, platform) = match served.resources.first() {
            Some(first) => (first.gpus(), first.platform()),
            None => (&[][..], None),
        };
        let gpus = gpus
            .iter()
            .map(|g| {
                [
                    ("gpu", g.index.to_string()),
                    (
                        "UUID",
                        platform.map_or_else(|| g.uuid.clone(), |p| p.uuid_label(g)),
                    ),
                    ("device", format!("nvidia{}", g.minor.unwrap_or(g.index))),
                    (
                        "modelName",
                        platform
                            .map_or(g.name.as_str(), |p| p.model_name(g))
                            .to_string(),
                    ),
                ]
            })
            .collect();
        let gi_ids = served
            .entities
            .iter()
            .map(|e| {
                e.instance
                    .as_ref()
                    .map_or(String::new(), |i| i.id.to_string())
            })
            .collect();
        SeriesLabels {
            gpus,
            entities: &served.entities,
            gi_ids,
            hostname,
        }
    }

    /// A whole GPU's labels, by its position in the node's GPU list.
    fn gpu(&self, gpu: usize) -> Vec<(&str, &str)> {
        let mut labels: Vec<(&str, &str)> = self.gpus[gpu]
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        labels.push(("Hostname", self.hostname));
        labels
    }

    /// An entity's labels: its GPU's, and a GPU instance's profile and id.
    pub(super) fn entity(&self, e: usize) -> Vec<(&str, &str)> {
        let entity = &self.entities[e];
        let mut labels: Vec<(&str, &str)> = self.gpus[entity.gpu]
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        if let Some(i) = &entity.instance {
            labels.push(("GPU_I_PROFILE", i.profile.as_str()));
            labels.push(("GPU_I_ID", self.gi_ids[e].as_str()));
        }
        labels.push(("Hostname", self.hostname));
        labels
    }
}

/// What each entity reads: a GPU its own reading; a GPU instance its GPU's clocks,
/// temperature and power with its own framebuffer, and no utilisation (NVML and DCGM
/// report none per instance; the GPU's would be every instance's).
pub(super) fn entity_readings(served: &Served, readings: &Readings) -> Vec<Reading> {
    let no_reading = Reading::default();
    served
        .entities
        .iter()
        .map(|e| {
            let gpu = readings.gpus.get(e.gpu).unwrap_or(&no_reading);
            match &e.instance {
                None => gpu.clone(),
                Some(i) => {
                    let mig = readings.migs.get(i.mig).unwrap_or(&no_reading);
                    Reading {
                        utilization_percent: None,
                        sm_clock_mhz: gpu.sm_clock_mhz,
                        memory_clock_mhz: gpu.memory_clock_mhz,
                        temperature_celsius: gpu.temperature_celsius,
                        power_watts: gpu.power_watts,
                        framebuffer_used_mib: mig.framebuffer_used_mib,
                        framebuffer_free_mib: mig.framebuffer_free_mib,
                        ..Reading::default()
                    }
                }
            }
        })
        .collect()
}

/// A DCGM field: its name, help and where an entity's reading has it.
type Field = (&'static str, &'static str, fn(&Reading) -> Option<f64>);

/// dcgm-exporter's fields (etc/default-counters.csv), one family each.
const DCGM: [Field; 7] = [
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        |r| r.sm_clock_mhz,
    ),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        |r| r.memory_clock_mhz,
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |r| {
        r.temperature_celsius
    }),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |r| {
        r.power_watts
    }),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |r| {
        r.utilization_percent
    }),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        |r| r.framebuffer_free_mib,
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        |r| r.framebuffer_used_mib,
    ),
];

/// Every DCGM field: one series per GPU or GPU instance, or one per container holding it
/// (time-slicing: several).
pub(super) fn dcgm_fields(
    e: &mut Exposition,
    labels: &SeriesLabels,
    entity_readings: &[Reading],
    holders: &[Vec<Holder>],
) {
    for (name, help, get) in DCGM {
        let mut family = e.family(name, Kind::Gauge, help);
        for (n, reading) in entity_readings.iter().enumerate() {
            let Some(value) = get(reading) else { continue };
            let base = labels.entity(n);
            per_holder(&mut family, &base, &holders[n], value);
        }
    }
}

/// One sample per container holding the GPU (its `pod`, `namespace`, `container` added to
/// `base`), or one without them where none does: how dcgm-exporter attributes a GPU's series.
pub(super) fn per_holder(
    family: &mut Family<'_>,
    base: &[(&str, &str)],
    holders: &[Holder],
    value: f64,
) {
    if holders.is_empty() {
        family.sample(base, value);
    }
    for h in holders {
        let mut labels = base.to_vec();
        labels.extend([
            ("pod", h.pod.as_str()),
            ("namespace", h.namespace.as_str()),
            ("container", h.container.as_str()),
        ]);
        family.sample(&labels, value);
    }
}

/// The GPUs' readings with their position, those with labels only (Jetson signals
/// dcgm-exporter has no name for are per GPU).
fn per_gpu<'r>(
    labels: &SeriesLabels,
    readings: &'r Readings,
) -> impl Iterator<Item = (usize, &'r Reading)> {
    readings.gpus.iter().enumerate().take(labels.gpus.len())
}

pub(super) fn emc_utilization(e: &mut Exposition, labels: &SeriesLabels, readings: &Readings) {
    let mut emc = e.family(
        "edgegpu_emc_utilization_percent",
        Kind::Gauge,
        "Jetson memory controller (EMC) load (in %).",
    );
    for (p, r) in per_gpu(labels, readings) {
        if let Some(v) = r.emc_utilization_percent {
            emc.sample(&labels.gpu(p), v);
        }
    }
}

pub(super) fn power_rails(e: &mut Exposition, labels: &SeriesLabels, readings: &Readings) {
    let mut rails = e.family(
        "edgegpu_power_rail_watts",
        Kind::Gauge,
        "Jetson INA3221 power rail (in W); feeds_gpu: the rail powers the GPU, alone or with other units.",
    );
    for (p, r) in per_gpu(labels, readings) {
        for rail in &r.rails {
            let mut labels = labels.gpu(p);
            labels.push(("rail", &rail.label));
            labels.push(("feeds_gpu", if rail.feeds_gpu { "true" } else { "false" }));
            rails.sample(&labels, rail.watts);
        }
    }
}

pub(super) fn shared_memory_used(e: &mut Exposition, labels: &SeriesLabels, readings: &Readings) {
    let mut used = e.family(
        "edgegpu_gpu_shared_memory_used_bytes",
        Kind::Gauge,
        "Jetson memory held by the GPU's nvmap allocator (NvMapMemUsed, in bytes).",
    );
    for (p, r) in per_gpu(labels, readings) {
        if let Some(v) = r.shared_memory_used_bytes {
            used.sample(&labels.gpu(p), v as f64);
        }
    }
}

/// Written only beside the used bytes (a total alone says nothing about the GPU).
pub(super) fn shared_memory_total(e: &mut Exposition, labels: &SeriesLabels, readings: &Readings) {
    let mut total = e.family(
        "edgegpu_gpu_shared_memory_total_bytes",
        Kind::Gauge,
        "Jetson memory the GPU shares with the CPU (MemTotal, in bytes).",
    );
    for (p, r) in per_gpu(labels, readings) {
        if let (Some(_), Some(v)) = (r.shared_memory_used_bytes, r.shared_memory_total_bytes) {
            total.sample(&labels.gpu(p), v as f64);
        }
    }
}

pub(super) fn build_info(e: &mut Exposition, served: &Served) {
    let platform_name = match served.resources.first().and_then(|r| r.platform()) {
        Some(Platform::Tegra { .. }) => "tegra",
        Some(Platform::Nvml) => "nvml",
        None => "none",
    };
    let mut build = e.family(
        "edgegpu_build_info",
        Kind::Gauge,
        "The plugin's version and platform, per served resource; always 1.",
    );
    for r in &served.resources {
        build.sample(
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("platform", platform_name),
                ("resource", r.name()),
            ],
            1.0,
        );
    }
}

/// Each served resource's name and registration counters.
pub(super) type ResourceStats<'s> = [(&'s str, Arc<RegistrationStats>)];

pub(super) fn registered(e: &mut Exposition, stats: &ResourceStats) {
    let mut registered = e.family(
        "edgegpu_registered",
        Kind::Gauge,
        "1 while the kubelet has accepted the current registration.",
    );
    for (name, k) in stats {
        registered.sample(
            &[("resource", name)],
            f64::from(u8::from(k.is_registered())),
        );
    }
}

pub(super) fn registrations(e: &mut Exposition, stats: &ResourceStats) {
    let mut registrations = e.family(
        "edgegpu_registrations_total",
        Kind::Counter,
        "Registrations the kubelet accepted.",
    );
    for (name, k) in stats {
        registrations.sample(&[("resource", name)], k.registrations() as f64);
    }
}

pub(super) fn registration_failures(e: &mut Exposition, stats: &ResourceStats) {
    let mut failures = e.family(
        "edgegpu_registration_failures_total",
        Kind::Counter,
        "Registration attempts that failed (each is retried).",
    );
    for (name, k) in stats {
        failures.sample(&[("resource", name)], k.registration_failures() as f64);
    }
}

pub(super) fn reregistrations(e: &mut Exposition, stats: &ResourceStats) {
    let mut rereg = e.family(
        "edgegpu_reregistrations_total",
        Kind::Counter,
        "Times the plugin served and registered again, by reason.",
    );
    for (name, k) in stats {
        for reason in Reregistration::ALL {
            rereg.sample(
                &[("resource", name), ("reason", reason.label())],
                k.reregistrations(reason) as f64,
            );
        }
    }
}

pub(super) fn allocations(e: &mut Exposition, served: &Served) {
    let mut allocations = e.family(
        "edgegpu_allocations_total",
        Kind::Counter,
        "Container allocations answered with devices.",
    );
    for r in &served.resources {
        allocations.sample(
            &[("resource", r.name())],
            r.allocations().succeeded() as f64,
        );
    }
}

pub(super) fn allocation_failures(e: &mut Exposition, served: &Served) {
    let mut refused = e.family(
        "edgegpu_allocation_failures_total",
        Kind::Counter,
        "Container allocations refused (unknown, unhealthy or too many device IDs).",
    );
    for r in &served.resources {
        refused.sample(&[("resource", r.name())], r.allocations().failed() as f64);
    }
}

pub(super) fn devices_by_health(e: &mut Exposition, served: &Served) {
    let mut by_health = e.family(
        "edgegpu_devices",
        Kind::Gauge,
        "Devices advertised to the kubelet (GPUs, MIG devices or time-slicing replicas), by health.",
    );
    for r in &served.resources {
        let devices = r.devices().borrow().clone();
        let healthy = devices.iter().filter(|d| d.health == HEALTHY).count();
        by_health.sample(
            &[("resource", r.name()), ("health", "Healthy")],
            healthy as f64,
        );
        by_health.sample(
            &[("resource", r.name()), ("health", "Unhealthy")],
            (devices.len() - healthy) as f64,
        );
    }
}

/// Per entity: healthy while every unit of it is; transitions of all its units (`None`:
/// no served unit).
pub(super) fn entity_health(served: &Served) -> Vec<Option<HealthCounts>> {
    let mut health: Vec<Option<HealthCounts>> = vec![None; served.entities.len()];
    for (r, resource) in served.resources.iter().enumerate() {
        for (unit, counts) in resource.health().into_iter().enumerate() {
            let slot = &mut health[served.unit_entity[r][unit]];
            let sum = slot.get_or_insert(HealthCounts {
                healthy: true,
                ..HealthCounts::default()
            });
            sum.healthy &= counts.healthy;
            sum.became_unhealthy += counts.became_unhealthy;
            sum.became_healthy += counts.became_healthy;
        }
    }
    health
}

pub(super) fn gpu_healthy(
    e: &mut Exposition,
    labels: &SeriesLabels,
    health: &[Option<HealthCounts>],
) {
    let mut gpu_healthy = e.family(
        "edgegpu_gpu_healthy",
        Kind::Gauge,
        "1 while the GPU (or MIG GPU instance) passes its health checks.",
    );
    for (n, h) in health.iter().enumerate() {
        if let Some(h) = h {
            gpu_healthy.sample(&labels.entity(n), f64::from(u8::from(h.healthy)));
        }
    }
}

pub(super) fn gpu_health_transitions(
    e: &mut Exposition,
    labels: &SeriesLabels,
    health: &[Option<HealthCounts>],
) {
    let mut transitions = e.family(
        "edgegpu_gpu_health_transitions_total",
        Kind::Counter,
        "Health changes of the GPU (or MIG GPU instance), by the state it changed to.",
    );
    for (n, h) in health.iter().enumerate() {
        if let Some(h) = h {
            let mut labels = labels.entity(n);
            labels.push(("to", "unhealthy"));
            transitions.sample(&labels, h.became_unhealthy as f64);
            labels.pop();
            labels.push(("to", "healthy"));
            transitions.sample(&labels, h.became_healthy as f64);
        }
    }
}

pub(super) fn pod_resources_errors(e: &mut Exposition, errors: u64) {
    e.family(
        "edgegpu_pod_resources_errors_total",
        Kind::Counter,
        "Scrapes whose pod-resources List call failed (series then carry no pod labels).",
    )
    .sample(&[], errors as f64);
}

/// `edgegpu_engine_active` and `edgegpu_engine_clock_hertz`: per DLA core / PVA instance, only
/// the samples the kernel gave (a missing file is no sample).
pub(super) fn engines(
    e: &mut Exposition,
    hostname: &str,
    readings: &[(
        edgegpu_node::engines::Engine,
        edgegpu_node::engines::EngineReading,
    )],
) {
    let ids: Vec<String> = readings.iter().map(|(engine, _)| engine.id()).collect();
    let labels = |n: usize| {
        [
            ("engine", ids[n].as_str()),
            ("kind", readings[n].0.kind.name()),
            ("Hostname", hostname),
        ]
    };
    let mut active = e.family(
        "edgegpu_engine_active",
        Kind::Gauge,
        "1 while the DLA core or PVA instance is runtime-active, 0 while suspended (idle).",
    );
    for (n, (_, r)) in readings.iter().enumerate() {
        if let Some(a) = r.active {
            active.sample(&labels(n), f64::from(u8::from(a)));
        }
    }
    let mut clock = e.family(
        "edgegpu_engine_clock_hertz",
        Kind::Gauge,
        "Clock rate of the DLA core or PVA instance (debugfs clk_rate), where readable.",
    );
    for (n, (_, r)) in readings.iter().enumerate() {
        if let Some(hz) = r.clock_hz {
            clock.sample(&labels(n), hz as f64);
        }
    }
}
