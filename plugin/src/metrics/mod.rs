//! `GET /metrics`: the GPUs' telemetry under dcgm-exporter's names, Jetson-only signals and
//! the plugin's own health under `edgegpu_`, with the `pod`, `namespace` and `container` that
//! hold each GPU or MIG GPU instance, for every resource the plugin serves (docs/metrics.md
//! lists every series).
//!
//! Everything is read when Prometheus scrapes — sensors ([`crate::gpu::sensors`]), the
//! kubelet's pod resources ([`crate::kubelet::pod_resources`]), the GPUs' processes and
//! which pods they belong to ([`pod_memory`]), the counters of the kubelet and allocation
//! sides — so an idle plugin does no work for its metrics.
//!
//! - [`exposition`]: the text format.
//! - [`pod_memory`]: per-pod GPU memory used, and the limits.
//! - [`server`]: the HTTP endpoint.

pub mod exposition;
pub mod pod_memory;
pub mod server;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use edgegpu_kubelet_api::v1beta1::HEALTHY;

use crate::allocate::GpuResource;
use crate::gpu::health::HealthCounts;
use crate::gpu::processes::Processes;
use crate::gpu::sensors::{Reading, Readings, Sensors};
use crate::gpu::{MigDevice, Platform};
use crate::kubelet::pod_resources::{self, DeviceHolder};
use crate::kubelet::stats::{KubeletStats, Reregistration};
use crate::resource::Resource;
use exposition::{Exposition, Kind};

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
}

/// The resources of one round of serving, what their series are about, and their sensors.
struct Served {
    resources: Vec<Arc<GpuResource>>,
    /// The series' subjects: whole GPUs and MIG GPU instances, each once.
    entities: Vec<Entity>,
    /// Per resource, per unit: the entity the unit belongs to.
    unit_entity: Vec<Vec<usize>>,
    sensors: Arc<Sensors>,
    /// The GPUs' processes; per entity, its MIG devices' positions in their readings (every
    /// compute instance of a GPU instance: each has its own processes).
    processes: Arc<Processes>,
    entity_process_migs: Vec<Vec<usize>>,
    /// The host root (the host's `/proc` for the processes' cgroups).
    root: PathBuf,
}

/// What one set of GPU series describes, as dcgm-exporter cuts them: a whole GPU, or one GPU
/// instance of a MIG-enabled GPU (its compute instances share it).
#[derive(Debug, Clone, PartialEq)]
struct Entity {
    /// Position of the GPU (the instance's parent) in the node's GPU list.
    gpu: usize,
    instance: Option<Instance>,
}

/// A MIG GPU instance.
#[derive(Debug, Clone, PartialEq)]
struct Instance {
    /// `GPU_I_ID`: the GPU instance id.
    id: u32,
    /// `GPU_I_PROFILE`: the GPU instance's profile (`1g.10gb`).
    profile: String,
    /// Index of its (first) MIG device in the sensors' MIG readings.
    mig: usize,
}

/// The pod a GPU series is attributed to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Holder {
    namespace: String,
    pod: String,
    container: String,
}

impl Served {
    /// The entities of `resources` and their sensors (located once per round).
    fn new(resources: Vec<Arc<GpuResource>>) -> Served {
        let mut entities: Vec<Entity> = Vec::new();
        let mut migs: Vec<MigDevice> = Vec::new();
        let mut process_migs: Vec<MigDevice> = Vec::new();
        let mut entity_process_migs: Vec<Vec<usize>> = Vec::new();
        let mut unit_entity = Vec::new();
        for r in &resources {
            let mut of_units = Vec::new();
            for unit in r.units() {
                let gi = unit.mig.as_ref().map(|m| m.gpu_instance);
                let found = entities
                    .iter()
                    .position(|e| e.gpu == unit.gpu && e.instance.as_ref().map(|i| i.id) == gi);
                let e = found.unwrap_or_else(|| {
                    let instance = unit.mig.as_ref().map(|m| {
                        migs.push(m.clone());
                        Instance {
                            id: m.gpu_instance,
                            profile: m.gpu_instance_profile().to_string(),
                            mig: migs.len() - 1,
                        }
                    });
                    entities.push(Entity {
                        gpu: unit.gpu,
                        instance,
                    });
                    entity_process_migs.push(Vec::new());
                    entities.len() - 1
                });
                if let Some(m) = &unit.mig {
                    let p = match process_migs.iter().position(|p| p.uuid == m.uuid) {
                        Some(p) => p,
                        None => {
                            process_migs.push(m.clone());
                            process_migs.len() - 1
                        }
                    };
                    if !entity_process_migs[e].contains(&p) {
                        entity_process_migs[e].push(p);
                    }
                }
                of_units.push(e);
            }
            unit_entity.push(of_units);
        }
        let (sensors, processes, root) = match resources.first() {
            Some(r) => (
                Sensors::locate(r.root(), r.platform(), r.gpus(), &migs, r.nvml().cloned()),
                Processes::locate(
                    r.root(),
                    r.platform(),
                    r.gpus(),
                    &process_migs,
                    r.nvml().cloned(),
                ),
                r.root().to_path_buf(),
            ),
            None => (
                Sensors::locate(Path::new("/"), None, &[], &[], None),
                Processes::locate(Path::new("/"), None, &[], &[], None),
                PathBuf::from("/"),
            ),
        };
        Served {
            resources,
            entities,
            unit_entity,
            sensors: Arc::new(sensors),
            processes: Arc::new(processes),
            entity_process_migs,
            root,
        }
    }
}

impl Served {
    /// The entity an advertised device ID of resource `r` belongs to.
    fn entity_of(&self, r: usize, device_id: &str) -> Option<usize> {
        let unit = self.resources[r].physical_of(device_id)?;
        self.unit_entity[r].get(unit).copied()
    }

    /// The position of the resource named `name`.
    fn resource_position(&self, name: &str) -> Option<usize> {
        self.resources.iter().position(|r| r.name() == name)
    }
}

/// Per entity, the containers holding it (sorted, each once); empty lists without a list.
fn holders_per_entity(served: &Served, list: Option<&[DeviceHolder]>) -> Vec<Vec<Holder>> {
    let mut per_entity = vec![Vec::new(); served.entities.len()];
    for d in list.unwrap_or_default() {
        let Some(r) = served.resource_position(&d.resource) else {
            continue;
        };
        if let Some(e) = served.entity_of(r, &d.device_id) {
            per_entity[e].push(Holder {
                namespace: d.namespace.clone(),
                pod: d.pod.clone(),
                container: d.container.clone(),
            });
        }
    }
    for list in &mut per_entity {
        list.sort();
        list.dedup();
    }
    per_entity
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
        }
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
        let read = tokio::task::spawn_blocking(move || {
            let readings = sensors.read();
            let inputs = pod_memory::Inputs::read(&processes, &root, checkpoint.as_deref(), &names);
            (readings, inputs)
        })
        .await;
        let (readings, inputs) = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("reading the GPU sensors failed: {e}");
                (Readings::default(), pod_memory::Inputs::default())
            }
        };
        self.log_checkpoint(&inputs);
        let memory = pod_memory::attribute(&served, list.as_deref(), &inputs);
        self.render_with(&served, &holders, &readings, &memory)
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

    fn render_with(
        &self,
        served: &Served,
        holders: &[Vec<Holder>],
        readings: &Readings,
        memory: &pod_memory::PodMemory,
    ) -> String {
        let Some(first) = served.resources.first() else {
            return String::new();
        };
        let gpus = first.gpus();
        let platform = first.platform();
        let gpu_labels: Vec<[(&str, String); 4]> = gpus
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
        // dcgm-exporter's label order: gpu, UUID, device, modelName, then a GPU instance's
        // GPU_I_PROFILE and GPU_I_ID, then Hostname.
        let gpu_id_labels = |gpu: usize| -> Vec<(&str, &str)> {
            let mut labels: Vec<(&str, &str)> = gpu_labels[gpu]
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            labels.push(("Hostname", self.hostname.as_str()));
            labels
        };
        let gi_ids: Vec<String> = served
            .entities
            .iter()
            .map(|e| {
                e.instance
                    .as_ref()
                    .map_or(String::new(), |i| i.id.to_string())
            })
            .collect();
        let entity_labels = |e: usize| -> Vec<(&str, &str)> {
            let entity = &served.entities[e];
            let mut labels: Vec<(&str, &str)> = gpu_labels[entity.gpu]
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            if let Some(i) = &entity.instance {
                labels.push(("GPU_I_PROFILE", i.profile.as_str()));
                labels.push(("GPU_I_ID", gi_ids[e].as_str()));
            }
            labels.push(("Hostname", self.hostname.as_str()));
            labels
        };
        // What an entity reads: a GPU its own reading; a GPU instance its GPU's clocks,
        // temperature and power with its own framebuffer, and no utilisation (NVML and DCGM
        // report none per instance; the GPU's would be every instance's).
        let no_reading = Reading::default();
        let entity_readings: Vec<Reading> = served
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
            .collect();
        let mut e = Exposition::new();

        // dcgm-exporter's fields (etc/default-counters.csv): one series per GPU or GPU
        // instance, or one per container holding it (time-slicing: several).
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
            for (n, reading) in entity_readings.iter().enumerate() {
                let Some(value) = get(reading) else { continue };
                let base = entity_labels(n);
                if holders[n].is_empty() {
                    family.sample(&base, value);
                }
                for h in &holders[n] {
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

        // Jetson signals dcgm-exporter has no name for: per GPU.
        let per_gpu = || readings.gpus.iter().enumerate().take(gpu_labels.len());
        let mut emc = e.family(
            "edgegpu_emc_utilization_percent",
            Kind::Gauge,
            "Jetson memory controller (EMC) load (in %).",
        );
        for (p, r) in per_gpu() {
            if let Some(v) = r.emc_utilization_percent {
                emc.sample(&gpu_id_labels(p), v);
            }
        }
        let mut rails = e.family(
            "edgegpu_power_rail_watts",
            Kind::Gauge,
            "Jetson INA3221 power rail (in W); feeds_gpu: the rail powers the GPU, alone or with other units.",
        );
        for (p, r) in per_gpu() {
            for rail in &r.rails {
                let mut labels = gpu_id_labels(p);
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
        for (p, r) in per_gpu() {
            if let Some(v) = r.shared_memory_used_bytes {
                used.sample(&gpu_id_labels(p), v as f64);
            }
        }
        let mut total = e.family(
            "edgegpu_gpu_shared_memory_total_bytes",
            Kind::Gauge,
            "Jetson memory the GPU shares with the CPU (MemTotal, in bytes).",
        );
        for (p, r) in per_gpu() {
            if let (Some(_), Some(v)) = (r.shared_memory_used_bytes, r.shared_memory_total_bytes) {
                total.sample(&gpu_id_labels(p), v as f64);
            }
        }

        // Per-pod GPU memory: what each container's processes use, and its limit.
        pod_memory::render(&mut e, memory, &entity_labels);

        // The plugin's own health, per served resource.
        let platform_name = match platform {
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
        let stats: Vec<_> = served
            .resources
            .iter()
            .map(|r| (r.name(), self.kubelet.resource(r.name())))
            .collect();
        let mut registered = e.family(
            "edgegpu_registered",
            Kind::Gauge,
            "1 while the kubelet has accepted the current registration.",
        );
        for (name, k) in &stats {
            registered.sample(
                &[("resource", name)],
                f64::from(u8::from(k.is_registered())),
            );
        }
        let mut registrations = e.family(
            "edgegpu_registrations_total",
            Kind::Counter,
            "Registrations the kubelet accepted.",
        );
        for (name, k) in &stats {
            registrations.sample(&[("resource", name)], k.registrations() as f64);
        }
        let mut failures = e.family(
            "edgegpu_registration_failures_total",
            Kind::Counter,
            "Registration attempts that failed (each is retried).",
        );
        for (name, k) in &stats {
            failures.sample(&[("resource", name)], k.registration_failures() as f64);
        }
        let mut rereg = e.family(
            "edgegpu_reregistrations_total",
            Kind::Counter,
            "Times the plugin served and registered again, by reason.",
        );
        for (name, k) in &stats {
            for reason in Reregistration::ALL {
                rereg.sample(
                    &[("resource", name), ("reason", reason.label())],
                    k.reregistrations(reason) as f64,
                );
            }
        }
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
        let mut refused = e.family(
            "edgegpu_allocation_failures_total",
            Kind::Counter,
            "Container allocations refused (unknown, unhealthy or too many device IDs).",
        );
        for r in &served.resources {
            refused.sample(&[("resource", r.name())], r.allocations().failed() as f64);
        }
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
        // Per entity: healthy while every unit of it is; transitions of all its units.
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
        let mut gpu_healthy = e.family(
            "edgegpu_gpu_healthy",
            Kind::Gauge,
            "1 while the GPU (or MIG GPU instance) passes its health checks.",
        );
        for (n, h) in health.iter().enumerate() {
            if let Some(h) = h {
                gpu_healthy.sample(&entity_labels(n), f64::from(u8::from(h.healthy)));
            }
        }
        let mut transitions = e.family(
            "edgegpu_gpu_health_transitions_total",
            Kind::Counter,
            "Health changes of the GPU (or MIG GPU instance), by the state it changed to.",
        );
        for (n, h) in health.iter().enumerate() {
            if let Some(h) = h {
                let mut labels = entity_labels(n);
                labels.push(("to", "unhealthy"));
                transitions.sample(&labels, h.became_unhealthy as f64);
                labels.pop();
                labels.push(("to", "healthy"));
                transitions.sample(&labels, h.became_healthy as f64);
            }
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
