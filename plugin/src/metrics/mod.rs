//! `GET /metrics`: the GPUs' telemetry under dcgm-exporter's names, Jetson-only signals and
//! the plugin's own health under `edgegpu_`, with the `pod`, `namespace` and `container` that
//! hold each GPU or MIG GPU instance, for every resource the plugin serves (docs/metrics.md
//! lists every series).
//!
//! Everything is read when Prometheus scrapes — sensors ([`edgegpu_node::gpu::sensors`]), the
//! kubelet's pod resources ([`crate::kubelet::pod_resources`]), the GPUs' processes and
//! which pods they belong to ([`pod_memory`]), the counters of the kubelet and allocation
//! sides — so an idle plugin does no work for its metrics.
//!
//! - [`exposition`]: the text format.
//! - `families`: one function per metric family, called in order by `render`.
//! - [`pod_memory`]: per-pod GPU memory used, and the limits.
//! - `power`: a Jetson's power mode, clock ceilings, thermal zones and throttling.
//! - [`server`]: the HTTP endpoint.

pub mod exposition;
mod families;
pub mod pod_memory;
mod power;
mod served;
pub mod server;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::allocate::GpuResource;
use crate::kubelet::pod_resources::{self, DeviceHolder};
use crate::kubelet::stats::KubeletStats;
use edgegpu_node::gpu::sensors::Readings;
use exposition::Exposition;
use served::{holders_per_entity, Holder, Served};

/// Everything a scrape reads.
pub struct MetricsSource {
    /// What the plugin serves now; replaced when the resources are rebuilt.
    served: RwLock<Arc<Served>>,
    kubelet: Arc<KubeletStats>,
    pod_resources_socket: Option<PathBuf>,
    /// The device manager's checkpoint (per-pod GPU memory); `None`: no per-pod memory.
    checkpoint: Option<PathBuf>,
    hostname: String,
    pod_resources_errors: AtomicU64,
    /// The last pod-resources call failed (so a lasting failure is logged once).
    pod_resources_failing: AtomicBool,
    /// The last checkpoint read failed (logged once until it reads again).
    checkpoint_failing: AtomicBool,
    /// The DLA cores and PVA instances served, and the root they are read under.
    engines: RwLock<(PathBuf, Vec<edgegpu_node::engines::Engine>)>,
    /// A Jetson's power facts and throttling seconds; `None` off Jetson.
    power: RwLock<Option<power::PowerSource>>,
}

impl MetricsSource {
    /// Locates the sensors of the GPUs and MIG devices `resources` serve (once) and keeps
    /// what a scrape needs. `pod_resources_socket`: `None` leaves the series without pod
    /// labels. Locating reads sysfs and NVML: call it off the async runtime.
    pub fn new(
        resources: Vec<Arc<GpuResource>>,
        kubelet: Arc<KubeletStats>,
        pod_resources_socket: Option<PathBuf>,
        hostname: String,
    ) -> Self {
        MetricsSource {
            served: RwLock::new(Arc::new(Served::new(resources))),
            kubelet,
            pod_resources_socket,
            checkpoint: None,
            hostname,
            pod_resources_errors: AtomicU64::new(0),
            pod_resources_failing: AtomicBool::new(false),
            checkpoint_failing: AtomicBool::new(false),
            engines: RwLock::new((PathBuf::from("/"), Vec::new())),
            power: RwLock::new(None),
        }
    }

    /// The Jetson power facts scrapes describe from now on (read under `root`), and the
    /// throttling seconds counted for its GPU (`None`: not counted).
    pub fn set_power(
        &self,
        root: PathBuf,
        facts: edgegpu_node::power::PowerFacts,
        throttle: Option<Arc<edgegpu_node::power::throttle::ThrottleSeconds>>,
    ) {
        *self.power.write().unwrap() = Some(power::PowerSource {
            root,
            facts,
            throttle,
        });
    }

    /// The engines scrapes describe from now on (`edgegpu_engine_*`), read under `root`.
    pub fn set_engines(&self, root: PathBuf, engines: Vec<edgegpu_node::engines::Engine>) {
        *self.engines.write().unwrap() = (root, engines);
    }

    /// Per-pod GPU memory: the device manager's checkpoint that links a process's pod UID to
    /// the devices its pod holds (`<device-plugin dir>/kubelet_internal_checkpoint`). Without
    /// it (or without the pod-resources socket) the GPUs' processes are all unattributed.
    pub fn with_checkpoint(mut self, checkpoint: PathBuf) -> Self {
        self.checkpoint = Some(checkpoint);
        self
    }

    /// The resources were rebuilt (SIGHUP, MIG reconfiguration): scrapes describe these from
    /// now on. Counters of the plugin's own (registrations, pod-resources errors) go on.
    /// Locates the new sensors like [`MetricsSource::new`]: call it off the async runtime.
    pub fn replace(&self, resources: Vec<Arc<GpuResource>>) {
        let served = Arc::new(Served::new(resources));
        *self.served.write().unwrap() = served;
    }

    /// One scrape: every series, in the text format.
    pub async fn render(&self) -> String {
        let served = self.served.read().unwrap().clone();
        let list = self.pod_resources(&served).await;
        let holders = holders_per_entity(&served, list.as_deref());
        let (sensors, processes, root) = (
            served.sensors.clone(),
            served.processes.clone(),
            served.root.clone(),
        );
        let checkpoint = self.checkpoint.clone();
        let names: Vec<String> = served
            .resources
            .iter()
            .map(|r| r.name().to_string())
            .collect();
        let (engine_root, engines) = self.engines.read().unwrap().clone();
        let power = self.power.read().unwrap().clone();
        let read = tokio::task::spawn_blocking(move || {
            let power = power.map(|p| p.read());
            let readings = sensors.read();
            let inputs = pod_memory::Inputs::read(&processes, &root, checkpoint.as_deref(), &names);
            let engine_readings: Vec<_> = engines
                .into_iter()
                .map(|e| {
                    let r = e.read(&engine_root);
                    (e, r)
                })
                .collect();
            (readings, inputs, engine_readings, power)
        })
        .await;
        let (readings, inputs, engine_readings, power) = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("reading the GPU sensors failed: {e}");
                (
                    Readings::default(),
                    pod_memory::Inputs::default(),
                    Vec::new(),
                    None,
                )
            }
        };
        self.log_checkpoint(&inputs);
        let memory = pod_memory::attribute(&served, list.as_deref(), &inputs);
        let mut text = self.render_with(&served, &holders, &readings, &memory, power.as_ref());
        if !engine_readings.is_empty() {
            let mut e = Exposition::new();
            families::engines(&mut e, &self.hostname, &engine_readings);
            text.push_str(&e.into_text());
        }
        text
    }

    /// Logs a checkpoint that cannot be read once, until it reads again.
    fn log_checkpoint(&self, inputs: &pod_memory::Inputs) {
        let Some(read) = &inputs.checkpoint else {
            return;
        };
        let was_failing = self
            .checkpoint_failing
            .swap(read.is_err(), Ordering::Relaxed);
        match (read, was_failing) {
            (Err(e), false) => {
                tracing::info!("{e}; GPU processes are not attributed to pods until it reads")
            }
            (Ok(_), true) => {
                tracing::info!("device manager checkpoint read; per-pod GPU memory is back")
            }
            _ => {}
        }
    }

    /// Which container holds which device ID of our resources (one List call); `None` when
    /// the pod-resources API is off or does not answer (counted, logged once).
    async fn pod_resources(&self, served: &Served) -> Option<Vec<DeviceHolder>> {
        let socket = self.pod_resources_socket.as_ref()?;
        let names: Vec<&str> = served.resources.iter().map(|r| r.name()).collect();
        match pod_resources::holders(socket, &names).await {
            Ok(list) => {
                if self.pod_resources_failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("pod-resources API answers again; per-pod labels are back");
                }
                Some(list)
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
                None
            }
        }
    }

    /// Every family, in the order they are written: the GPUs' telemetry, per-pod memory,
    /// then the plugin's own health.
    fn render_with(
        &self,
        served: &Served,
        holders: &[Vec<Holder>],
        readings: &Readings,
        memory: &pod_memory::PodMemory,
        power: Option<&power::PowerReading>,
    ) -> String {
        if served.resources.is_empty() {
            return String::new();
        }
        let labels = families::SeriesLabels::new(served, &self.hostname);
        let mut e = Exposition::new();
        let entity_readings = families::entity_readings(served, readings);
        families::dcgm_fields(&mut e, &labels, &entity_readings, holders);
        families::emc_utilization(&mut e, &labels, readings);
        families::power_rails(&mut e, &labels, readings);
        families::shared_memory_used(&mut e, &labels, readings);
        families::shared_memory_total(&mut e, &labels, readings);
        pod_memory::render(&mut e, memory, &|n| labels.entity(n));
        if let Some(power) = power {
            power::render(&mut e, &labels, holders, &self.hostname, power);
        }
        families::build_info(&mut e, served);
        let stats: Vec<_> = served
            .resources
            .iter()
            .map(|r| (r.name(), self.kubelet.resource(r.name())))
            .collect();
        families::registered(&mut e, &stats);
        families::registrations(&mut e, &stats);
        families::registration_failures(&mut e, &stats);
        families::reregistrations(&mut e, &stats);
        families::allocations(&mut e, served);
        families::allocation_failures(&mut e, served);
        families::devices_by_health(&mut e, served);
        let health = families::entity_health(served);
        families::gpu_healthy(&mut e, &labels, &health);
        families::gpu_health_transitions(&mut e, &labels, &health);
        if self.pod_resources_socket.is_some() {
            let errors = self.pod_resources_errors.load(Ordering::Relaxed);
            families::pod_resources_errors(&mut e, errors);
        }
        e.into_text()
    }
}
