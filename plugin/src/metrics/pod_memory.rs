//! Per-pod GPU memory: how much GPU memory each container's processes use on each GPU (or MIG
//! GPU instance), next to the limit the container was given, so that one PromQL line finds
//! the pods near their limit (docs/metrics.md, section 2.4).
//!
//! No API says which pod a GPU process belongs to, so it is pieced together at scrape time:
//!
//! 1. the GPU's processes and their memory ([`edgegpu_node::gpu::processes`]: NVML, or nvmap on an
//!    nvgpu Jetson);
//! 2. each process's pod UID, from its cgroup ([`crate::kubelet::pod_cgroup`]);
//! 3. the devices that pod UID's containers hold, from the device manager's checkpoint
//!    ([`crate::kubelet::checkpoint`]);
//! 4. the namespace, pod and container holding those device IDs, from the pod-resources API
//!    (the List every scrape makes anyway).
//!
//! A process missing any link is counted in its GPU's unattributed figure, never an error:
//! the MPS server, host processes, pods that hold none of our devices, a pod the List and the
//! checkpoint disagree on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use crate::kubelet::checkpoint::{self, PodDevices};
use crate::kubelet::pod_cgroup;
use crate::kubelet::pod_resources::DeviceHolder;
use edgegpu_node::gpu::processes::{GpuProcess, ProcessReadings, Processes};
use edgegpu_node::serving::limits::MemoryLimit;

use super::exposition::{Exposition, Kind};
use super::served::{Holder, Served};

/// What a scrape reads from the host for per-pod memory.
#[derive(Debug, Default)]
pub struct Inputs {
    processes: ProcessReadings,
    /// The pod UID of each process read that is in a pod's cgroup.
    pod_of: HashMap<u32, String>,
    /// The checkpoint's entries of our resources; `None`: no checkpoint configured, an
    /// error: it could not be read (nothing is attributed).
    pub checkpoint: Option<Result<Vec<PodDevices>, String>>,
}

impl Inputs {
    /// Reads the processes, their cgroups and the checkpoint (of `resources`). Blocking.
    pub fn read(
        processes: &Processes,
        root: &Path,
        checkpoint_file: Option<&Path>,
        resources: &[String],
    ) -> Inputs {
        let processes = processes.read();
        let mut pod_of = HashMap::new();
        let all = processes.gpus.iter().chain(&processes.migs);
        for p in all.flatten().flatten() {
            if pod_of.contains_key(&p.pid) {
                continue;
            }
            if let Some(uid) = pod_cgroup::pod_uid_of(root, p.pid) {
                pod_of.insert(p.pid, uid);
            }
        }
        let names: Vec<&str> = resources.iter().map(String::as_str).collect();
        let checkpoint = checkpoint_file.map(|f| {
            checkpoint::read(f, &names).map_err(|e| format!("device manager checkpoint: {e:#}"))
        });
        Inputs {
            processes,
            pod_of,
            checkpoint,
        }
    }
}

/// A scrape's per-pod memory, ready to render.
#[derive(Default)]
pub struct PodMemory {
    /// Per (entity, container): the bytes its processes use there; `None` where one of its
    /// processes' memory is not known.
    used: BTreeMap<(usize, Holder), Option<u64>>,
    /// Per entity with per-process figures: the known memory of processes not attributed.
    unattributed: Vec<Option<u64>>,
    /// Per (entity, container, resource position): the limit the container was given there.
    limits: Vec<(usize, Holder, usize, MemoryLimit)>,
    /// Resource names, by position.
    resources: Vec<String>,
}

/// Attributes the processes of `inputs` to the containers of `list` (the pod-resources
/// answer; `None` when it failed or is off).
pub(super) fn attribute(
    served: &Served,
    list: Option<&[DeviceHolder]>,
    inputs: &Inputs,
) -> PodMemory {
    let n = served.entities.len();
    // Per container, per entity it holds: the device IDs per resource.
    let mut held: BTreeMap<(Holder, usize), BTreeMap<usize, Vec<String>>> = BTreeMap::new();
    for d in list.unwrap_or_default() {
        let Some(r) = served.resource_position(&d.resource) else {
            continue;
        };
        let Some(e) = served.entity_of(r, &d.device_id) else {
            continue;
        };
        let holder = Holder {
            namespace: d.namespace.clone(),
            pod: d.pod.clone(),
            container: d.container.clone(),
        };
        held.entry((holder, e))
            .or_default()
            .entry(r)
            .or_default()
            .push(d.device_id.clone());
    }
    let mut limits = Vec::new();
    for ((holder, e), per_resource) in &held {
        for (r, ids) in per_resource {
            if let Some(limit) = served.resources[*r].memory_limit(ids) {
                limits.push((*e, holder.clone(), *r, limit));
            }
        }
    }
    let mut memory = PodMemory {
        used: BTreeMap::new(),
        unattributed: vec![None; n],
        limits,
        resources: served
            .resources
            .iter()
            .map(|r| r.name().to_string())
            .collect(),
    };

    let processes = processes_per_entity(served, &inputs.processes);
    let entries = match &inputs.checkpoint {
        Some(Ok(entries)) if list.is_some() => entries.as_slice(),
        // Without the checkpoint or the List no process can be named: all unattributed.
        _ => &[],
    };
    let pods = PodNames::new(entries, list.unwrap_or_default());
    // A container that holds a GPU where the processes are known uses 0 until one shows up;
    // only containers whose pod the checkpoint names can have processes attributed.
    for (holder, e) in held.keys() {
        if processes[*e].is_some() && pods.named.contains(&(&holder.namespace, &holder.pod)) {
            memory.used.insert((*e, holder.clone()), Some(0));
        }
    }
    for (e, list) in processes.iter().enumerate() {
        let Some(list) = list else { continue };
        let mut unattributed = 0u64;
        for p in list {
            let holder = inputs
                .pod_of
                .get(&p.pid)
                .and_then(|uid| pods.container_of(uid, e, &held));
            match holder {
                Some(holder) => {
                    let sum = memory.used.entry((e, holder)).or_insert(Some(0));
                    *sum = sum.zip(p.used_bytes).map(|(a, b)| a.saturating_add(b));
                }
                None => unattributed = unattributed.saturating_add(p.used_bytes.unwrap_or(0)),
            }
        }
        memory.unattributed[e] = Some(unattributed);
    }
    memory
}

/// Per entity, its processes (each PID once), or `None` without per-process figures: a whole
/// GPU its GPU's, a GPU instance those of its MIG devices (compute instances).
fn processes_per_entity(
    served: &Served,
    readings: &ProcessReadings,
) -> Vec<Option<Vec<GpuProcess>>> {
    served
        .entities
        .iter()
        .enumerate()
        .map(|(e, entity)| match &entity.instance {
            None => readings.gpus.get(entity.gpu).cloned().flatten(),
            Some(_) => {
                let mut known = false;
                let mut out: Vec<GpuProcess> = Vec::new();
                for m in &served.entity_process_migs[e] {
                    let Some(Some(list)) = readings.migs.get(*m) else {
                        continue;
                    };
                    known = true;
                    for p in list {
                        if !out.iter().any(|o| o.pid == p.pid) {
                            out.push(*p);
                        }
                    }
                }
                known.then_some(out)
            }
        })
        .collect()
}

/// For one pod UID: the (namespace, pod) names its checkpoint entries match in the List, and
/// its containers.
type Candidates<'a> = (BTreeSet<(&'a String, &'a String)>, BTreeSet<&'a str>);

/// Pod UIDs to the names the pod-resources API gives them.
struct PodNames<'a> {
    /// Per pod UID: its namespace and name (only where the List and the checkpoint agree on
    /// exactly one pod) and its containers that hold our devices.
    by_uid: HashMap<&'a str, ((&'a str, &'a str), BTreeSet<&'a str>)>,
    /// The (namespace, pod) of every named UID.
    named: BTreeSet<(&'a String, &'a String)>,
}

impl<'a> PodNames<'a> {
    /// A checkpoint entry (UID, container, resource, IDs) names the pod whose container of
    /// that name holds those IDs of that resource in the List.
    fn new(entries: &'a [PodDevices], list: &'a [DeviceHolder]) -> PodNames<'a> {
        let mut candidates: HashMap<&str, Candidates> = HashMap::new();
        for entry in entries {
            let (names, containers) = candidates.entry(&entry.pod_uid).or_default();
            containers.insert(&entry.container);
            for d in list {
                if d.resource == entry.resource
                    && d.container == entry.container
                    && entry.device_ids.binary_search(&d.device_id).is_ok()
                {
                    names.insert((&d.namespace, &d.pod));
                }
            }
        }
        let mut by_uid = HashMap::new();
        let mut named = BTreeSet::new();
        for (uid, (names, containers)) in candidates {
            // Two pods for one UID (a finished pod still listed with its devices): neither.
            if names.len() != 1 {
                continue;
            }
            let (namespace, pod) = *names.iter().next().expect("one name");
            named.insert((namespace, pod));
            by_uid.insert(uid, ((namespace.as_str(), pod.as_str()), containers));
        }
        PodNames { by_uid, named }
    }

    /// The container a process of pod `uid` running on entity `e` is counted for: the pod's
    /// one container holding our devices on `e` (else its one container holding any); the pod
    /// without a container where several qualify (a process's cgroup names its container by
    /// runtime ID, which neither API gives).
    fn container_of(
        &self,
        uid: &str,
        e: usize,
        held: &BTreeMap<(Holder, usize), BTreeMap<usize, Vec<String>>>,
    ) -> Option<Holder> {
        let ((namespace, pod), containers) = self.by_uid.get(uid)?;
        let holder = |container: &str| Holder {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
        };
        let on_entity: Vec<&str> = containers
            .iter()
            .copied()
            .filter(|c| held.contains_key(&(holder(c), e)))
            .collect();
        let all: Vec<&str> = containers.iter().copied().collect();
        let container: &str = match (on_entity.as_slice(), all.as_slice()) {
            ([one], _) | ([], [one]) => one,
            _ => "",
        };
        Some(holder(container))
    }
}

/// Writes the three families. `entity_labels`: the GPU (instance) labels of an entity.
pub(super) fn render<'a>(
    e: &mut Exposition,
    memory: &'a PodMemory,
    entity_labels: &dyn Fn(usize) -> Vec<(&'a str, &'a str)>,
) {
    let with_pod = |entity: usize, h: &'a Holder| {
        let mut labels = entity_labels(entity);
        labels.push(("pod", h.pod.as_str()));
        labels.push(("namespace", h.namespace.as_str()));
        // A process of a pod whose container cannot be told apart: the pod alone.
        if !h.container.is_empty() {
            labels.push(("container", h.container.as_str()));
        }
        labels
    };
    let mut used = e.family(
        "edgegpu_pod_gpu_memory_used_bytes",
        Kind::Gauge,
        "GPU memory the container's processes use on this GPU or MIG GPU instance (in bytes).",
    );
    for ((entity, holder), bytes) in &memory.used {
        if let Some(bytes) = bytes {
            used.sample(&with_pod(*entity, holder), *bytes as f64);
        }
    }
    let mut limit = e.family(
        "edgegpu_pod_gpu_memory_limit_bytes",
        Kind::Gauge,
        "GPU memory limit the container was given on this GPU or MIG GPU instance (in bytes); enforced: whether something enforces it.",
    );
    for (entity, holder, r, l) in &memory.limits {
        let mut labels = with_pod(*entity, holder);
        labels.push(("resource", memory.resources[*r].as_str()));
        labels.push(("enforced", if l.enforced { "true" } else { "false" }));
        limit.sample(&labels, l.bytes as f64);
    }
    let mut unattributed = e.family(
        "edgegpu_gpu_memory_unattributed_bytes",
        Kind::Gauge,
        "GPU memory of processes on this GPU or MIG GPU instance attributed to no container holding it (in bytes).",
    );
    for (entity, bytes) in memory.unattributed.iter().enumerate() {
        if let Some(bytes) = bytes {
            unattributed.sample(&entity_labels(entity), *bytes as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pod: &str, container: &str) -> Holder {
        Holder {
            namespace: "ml".into(),
            pod: pod.into(),
            container: container.into(),
        }
    }

    /// The series as (name, labels, value), labels sorted.
    fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let (name, body) = series.split_once('{').unwrap();
                let labels = body
                    .trim_end_matches('}')
                    .split("\",")
                    .map(|pair| {
                        let (k, v) = pair.split_once("=\"").unwrap();
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                (name.to_string(), labels, value.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn used_and_limit_series_join_on_the_documented_labels() {
        // Entity 0: a whole GPU; entity 1: GPU instance 3 of another GPU.
        let gpu_labels: [Vec<(&str, &str)>; 2] = [
            vec![
                ("gpu", "0"),
                ("UUID", "GPU-a"),
                ("device", "nvidia0"),
                ("modelName", "H100"),
                ("Hostname", "n1"),
            ],
            vec![
                ("gpu", "1"),
                ("UUID", "GPU-b"),
                ("device", "nvidia1"),
                ("modelName", "H100"),
                ("GPU_I_PROFILE", "1g.10gb"),
                ("GPU_I_ID", "3"),
                ("Hostname", "n1"),
            ],
        ];
        let memory = PodMemory {
            used: BTreeMap::from([
                ((0, holder("a", "app")), Some(3 << 30)),
                ((0, holder("b", "app")), Some(0)),
                ((1, holder("a", "app")), Some(1 << 20)),
                ((1, holder("c", "")), Some(7)),
                ((1, holder("d", "app")), None),
            ]),
            unattributed: vec![Some(512), None],
            limits: vec![
                (
                    0,
                    holder("a", "app"),
                    0,
                    MemoryLimit {
                        bytes: 4 << 30,
                        enforced: true,
                    },
                ),
                (
                    1,
                    holder("a", "app"),
                    1,
                    MemoryLimit {
                        bytes: 2 << 20,
                        enforced: false,
                    },
                ),
            ],
            resources: vec![
                "nvidia.com/gpu.shared".into(),
                "nvidia.com/mig-1g.10gb".into(),
            ],
        };
        let mut e = Exposition::new();
        render(&mut e, &memory, &|n| gpu_labels[n].clone());
        let text = e.into_text();
        assert!(
            text.contains("# TYPE edgegpu_pod_gpu_memory_used_bytes gauge\n"),
            "{text}"
        );
        let s = samples(&text);
        let of = |name: &str| -> Vec<&(String, BTreeMap<String, String>, f64)> {
            s.iter().filter(|x| x.0 == name).collect()
        };
        // A process whose memory NVML does not give leaves its container's series out.
        assert_eq!(of("edgegpu_pod_gpu_memory_used_bytes").len(), 4);
        assert!(of("edgegpu_pod_gpu_memory_used_bytes").iter().all(|x| x
            .1
            .get("pod")
            .map(String::as_str)
            != Some("d")));
        // A pod whose container cannot be told: no container label.
        let c = of("edgegpu_pod_gpu_memory_used_bytes")
            .into_iter()
            .find(|x| x.1["pod"] == "c")
            .unwrap();
        assert!(!c.1.contains_key("container"));
        assert_eq!(of("edgegpu_gpu_memory_unattributed_bytes").len(), 1);
        assert_eq!(of("edgegpu_gpu_memory_unattributed_bytes")[0].2, 512.0);
        let limits = of("edgegpu_pod_gpu_memory_limit_bytes");
        assert_eq!(limits[0].1["enforced"], "true");
        assert_eq!(limits[1].1["resource"], "nvidia.com/mig-1g.10gb");

        // docs/metrics.md's line: used / on(Hostname, UUID, GPU_I_ID, namespace, pod,
        // container) limit. Each side must be unique per key, and the pairs must be the ones
        // meant.
        const ON: [&str; 6] = [
            "Hostname",
            "UUID",
            "GPU_I_ID",
            "namespace",
            "pod",
            "container",
        ];
        let key = |labels: &BTreeMap<String, String>| -> Vec<String> {
            ON.iter()
                .map(|k| labels.get(*k).cloned().unwrap_or_default())
                .collect()
        };
        let mut ratios = Vec::new();
        for used in of("edgegpu_pod_gpu_memory_used_bytes") {
            let matching: Vec<_> = limits
                .iter()
                .filter(|l| key(&l.1) == key(&used.1))
                .collect();
            assert!(matching.len() <= 1, "{used:?}");
            if let Some(limit) = matching.first() {
                ratios.push((used.1["UUID"].clone(), used.2 / limit.2));
            }
        }
        assert_eq!(
            ratios,
            vec![("GPU-a".to_string(), 0.75), ("GPU-b".to_string(), 0.5)]
        );
    }
}
