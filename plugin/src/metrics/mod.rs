//! `GET /metrics`: the GPUs' telemetry under dcgm-exporter's names, Jetson-only signals and
//! the plugin's own health under `edgegpu_`, with the `pod`, `namespace` and `container` that
//! hold each GPU (docs/metrics.md lists every series).
//!
//! Everything is read when Prometheus scrapes — sensors ([`crate::gpu::sensors`]), the
//! kubelet's pod resources ([`crate::kubelet::pod_resources`]), the counters of the kubelet
//! and allocation sides — so an idle plugin does no work for its metrics.
//!
//! - [`exposition`]: the text format.
//! - [`server`]: the HTTP endpoint.

pub mod exposition;
pub mod server;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::HEALTHY;

use crate::allocate::GpuResource;
use crate::gpu::sensors::{Reading, Sensors};
use crate::gpu::Platform;
use crate::kubelet::pod_resources::{self, DeviceHolder};
use crate::kubelet::stats::{KubeletStats, Reregistration};
use crate::resource::Resource;
use exposition::{Exposition, Kind};

/// Everything a scrape reads.
pub struct MetricsSource {
    resource: Arc<GpuResource>,
    kubelet: Arc<KubeletStats>,
    sensors: Arc<Sensors>,
    pod_resources_socket: Option<PathBuf>,
    hostname: String,
    pod_resources_errors: AtomicU64,
    /// The last pod-resources call failed (so a lasting failure is logged once).
    pod_resources_failing: AtomicBool,
}

/// The pod a GPU series is attributed to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Holder {
    namespace: String,
    pod: String,
    container: String,
}

impl MetricsSource {
    /// Locates the sensors of `resource`'s GPUs (once) and keeps what a scrape needs.
    /// `pod_resources_socket`: `None` leaves the series without pod labels.
    pub fn new(
        resource: Arc<GpuResource>,
        kubelet: Arc<KubeletStats>,
        pod_resources_socket: Option<PathBuf>,
        hostname: String,
    ) -> Self {
        let sensors = Sensors::locate(
            resource.root(),
            resource.platform(),
            resource.gpus(),
            resource.nvml().cloned(),
        );
        MetricsSource {
            resource,
            kubelet,
            sensors: Arc::new(sensors),
            pod_resources_socket,
            hostname,
            pod_resources_errors: AtomicU64::new(0),
            pod_resources_failing: AtomicBool::new(false),
        }
    }

    /// One scrape: every series, in the text format.
    pub async fn render(&self) -> String {
        let holders = self.holders().await;
        let sensors = self.sensors.clone();
        let readings = match tokio::task::spawn_blocking(move || sensors.read()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("reading the GPU sensors failed: {e}");
                Vec::new()
            }
        };
        self.render_with(&holders, &readings)
    }

    /// Per physical GPU, the containers holding it (sorted, each once). Empty lists when the
    /// pod-resources API is off or does not answer.
    async fn holders(&self) -> Vec<Vec<Holder>> {
        let mut per_gpu = vec![Vec::new(); self.resource.gpus().len()];
        let Some(socket) = &self.pod_resources_socket else {
            return per_gpu;
        };
        match pod_resources::holders(socket, self.resource.name()).await {
            Ok(list) => {
                if self.pod_resources_failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("pod-resources API answers again; per-pod labels are back");
                }
                for DeviceHolder {
                    namespace,
                    pod,
                    container,
                    device_id,
                } in list
                {
                    if let Some(p) = self.resource.physical_of(&device_id) {
                        per_gpu[p].push(Holder {
                            namespace,
                            pod,
                            container,
                        });
                    }
                }
                for list in &mut per_gpu {
                    list.sort();
                    list.dedup();
                }
            }
            Err(e) => {
                self.pod_resources_errors.fetch_add(1, Ordering::Relaxed);
                if !self.pod_resources_failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "pod-resources API: {e:#}; GPU series have no pod labels until it answers \
                         (mount /var/lib/kubelet/pod-resources, or --pod-resources-socket=\"\" to \
                         turn attribution off)"
                    );
                }
            }
        }
        per_gpu
    }

    fn render_with(&self, holders: &[Vec<Holder>], readings: &[Reading]) -> String {
        let res = &self.resource;
        let gpu_labels: Vec<[(&str, String); 5]> = res
            .gpus()
            .iter()
            .map(|g| {
                [
                    ("gpu", g.index.to_string()),
                    ("UUID", g.uuid.clone()),
                    ("device", format!("nvidia{}", g.minor.unwrap_or(g.index))),
                    (
                        "modelName",
                        res.platform()
                            .map_or(g.name.as_str(), |p| p.model_name(g))
                            .to_string(),
                    ),
                    ("Hostname", self.hostname.clone()),
                ]
            })
            .collect();
        let labels_of = |p: usize| -> Vec<(&str, &str)> {
            gpu_labels[p]
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect()
        };
        let mut e = Exposition::new();

        // dcgm-exporter's fields (etc/default-counters.csv): one series per GPU, or one per
        // container holding it (time-slicing: several).
        type Field = (&'static str, &'static str, fn(&Reading) -> Option<f64>);
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
        for (name, help, get) in DCGM {
            let mut family = e.family(name, Kind::Gauge, help);
            for (p, reading) in readings.iter().enumerate().take(gpu_labels.len()) {
                let Some(value) = get(reading) else { continue };
                let base = labels_of(p);
                if holders[p].is_empty() {
                    family.sample(&base, value);
                }
                for h in &holders[p] {
                    let mut labels = base.clone();
                    labels.extend([
                        ("pod", h.pod.as_str()),
                        ("namespace", h.namespace.as_str()),
                        ("container", h.container.as_str()),
                    ]);
                    family.sample(&labels, value);
                }
            }
        }

        // Jetson signals dcgm-exporter has no name for.
        let mut emc = e.family(
            "edgegpu_emc_utilization_percent",
            Kind::Gauge,
            "Jetson memory controller (EMC) load (in %).",
        );
        for (p, r) in readings.iter().enumerate().take(gpu_labels.len()) {
            if let Some(v) = r.emc_utilization_percent {
                emc.sample(&labels_of(p), v);
            }
        }
        let mut rails = e.family(
            "edgegpu_power_rail_watts",
            Kind::Gauge,
            "Jetson INA3221 power rail (in W); feeds_gpu: the rail powers the GPU, alone or with other units.",
        );
        for (p, r) in readings.iter().enumerate().take(gpu_labels.len()) {
            for rail in &r.rails {
                let mut labels = labels_of(p);
                labels.push(("rail", &rail.label));
                labels.push(("feeds_gpu", if rail.feeds_gpu { "true" } else { "false" }));
                rails.sample(&labels, rail.watts);
            }
        }
        let mut used = e.family(
            "edgegpu_gpu_shared_memory_used_bytes",
            Kind::Gauge,
            "Jetson memory held by the GPU's nvmap allocator (NvMapMemUsed, in bytes).",
        );
        for (p, r) in readings.iter().enumerate().take(gpu_labels.len()) {
            if let Some(v) = r.shared_memory_used_bytes {
                used.sample(&labels_of(p), v as f64);
            }
        }
        let mut total = e.family(
            "edgegpu_gpu_shared_memory_total_bytes",
            Kind::Gauge,
            "Jetson memory the GPU shares with the CPU (MemTotal, in bytes).",
        );
        for (p, r) in readings.iter().enumerate().take(gpu_labels.len()) {
            if let (Some(_), Some(v)) = (r.shared_memory_used_bytes, r.shared_memory_total_bytes) {
                total.sample(&labels_of(p), v as f64);
            }
        }

        // The plugin's own health.
        let name = res.name();
        let platform = match res.platform() {
            Some(Platform::Tegra { .. }) => "tegra",
            Some(Platform::Nvml) => "nvml",
            None => "none",
        };
        e.family(
            "edgegpu_build_info",
            Kind::Gauge,
            "The plugin's version and platform; always 1.",
        )
        .sample(
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("platform", platform),
                ("resource", name),
            ],
            1.0,
        );
        let k = &self.kubelet;
        e.family(
            "edgegpu_registered",
            Kind::Gauge,
            "1 while the kubelet has accepted the current registration.",
        )
        .sample(
            &[("resource", name)],
            f64::from(u8::from(k.is_registered())),
        );
        e.family(
            "edgegpu_registrations_total",
            Kind::Counter,
            "Registrations the kubelet accepted.",
        )
        .sample(&[("resource", name)], k.registrations() as f64);
        e.family(
            "edgegpu_registration_failures_total",
            Kind::Counter,
            "Registration attempts that failed (each is retried).",
        )
        .sample(&[("resource", name)], k.registration_failures() as f64);
        let mut rereg = e.family(
            "edgegpu_reregistrations_total",
            Kind::Counter,
            "Times the plugin served and registered again, by reason.",
        );
        for reason in Reregistration::ALL {
            rereg.sample(
                &[("resource", name), ("reason", reason.label())],
                k.reregistrations(reason) as f64,
            );
        }
        e.family(
            "edgegpu_allocations_total",
            Kind::Counter,
            "Container allocations answered with devices.",
        )
        .sample(&[("resource", name)], res.allocations().succeeded() as f64);
        e.family(
            "edgegpu_allocation_failures_total",
            Kind::Counter,
            "Container allocations refused (unknown, unhealthy or too many device IDs).",
        )
        .sample(&[("resource", name)], res.allocations().failed() as f64);
        let devices = res.devices().borrow().clone();
        let healthy = devices.iter().filter(|d| d.health == HEALTHY).count();
        let mut by_health = e.family(
            "edgegpu_devices",
            Kind::Gauge,
            "Devices advertised to the kubelet (GPUs or time-slicing replicas), by health.",
        );
        by_health.sample(&[("resource", name), ("health", "Healthy")], healthy as f64);
        by_health.sample(
            &[("resource", name), ("health", "Unhealthy")],
            (devices.len() - healthy) as f64,
        );
        let health = res.health();
        let mut gpu_healthy = e.family(
            "edgegpu_gpu_healthy",
            Kind::Gauge,
            "1 while the GPU passes its health checks.",
        );
        for (p, h) in health.iter().enumerate() {
            gpu_healthy.sample(&labels_of(p), f64::from(u8::from(h.healthy)));
        }
        let mut transitions = e.family(
            "edgegpu_gpu_health_transitions_total",
            Kind::Counter,
            "Health changes of the GPU, by the state it changed to.",
        );
        for (p, h) in health.iter().enumerate() {
            let mut labels = labels_of(p);
            labels.push(("to", "unhealthy"));
            transitions.sample(&labels, h.became_unhealthy as f64);
            labels.pop();
            labels.push(("to", "healthy"));
            transitions.sample(&labels, h.became_healthy as f64);
        }
        if self.pod_resources_socket.is_some() {
            e.family(
                "edgegpu_pod_resources_errors_total",
                Kind::Counter,
                "Scrapes whose pod-resources List call failed (series then carry no pod labels).",
            )
            .sample(
                &[],
                self.pod_resources_errors.load(Ordering::Relaxed) as f64,
            );
        }
        e.into_text()
    }
}
