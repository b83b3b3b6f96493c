//! Replicas (`<id>::<n>`: time-slicing, MPS clients, memory units) and
//! GetPreferredAllocation.
//!
//! Without replicas the preferred allocation keeps a pod on one NUMA node when it can; with
//! replicas it either spreads the pod over the physical GPUs with the fewest replicas in use
//! (`distributed`) or fills one GPU first (`packed`); memory units all come from one GPU
//! (the one with the fewest free units that fits, keeping larger holes for larger pods, as
//! gpushare's scheduler extender picks).

use std::collections::{BTreeMap, HashMap};

use crate::config::{AllocationPolicy, TimeSlicing};
use crate::gpu::health::Advertised;

/// Separator between a GPU ID and its replica number (NVIDIA's).
const REPLICA_SEPARATOR: &str = "::";

/// Time-slicing as applied to the resource this plugin serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    pub replicas: u32,
    pub fail_requests_greater_than_one: bool,
}

/// The advertised name and replication for `resource_name` under a time-slicing config.
pub fn apply(resource_name: &str, sharing: Option<&TimeSlicing>) -> (String, Option<Replication>) {
    let Some(ts) = sharing else {
        return (resource_name.to_string(), None);
    };
    match ts.resources.iter().find(|r| r.name == resource_name) {
        Some(r) => {
            let name = if ts.rename_by_default {
                format!("{resource_name}.shared")
            } else {
                resource_name.to_string()
            };
            let rep = Replication {
                replicas: r.replicas,
                fail_requests_greater_than_one: ts.fail_requests_greater_than_one,
            };
            tracing::info!(resource = %name, replicas = r.replicas, "time-slicing enabled");
            (name, Some(rep))
        }
        None => {
            let names: Vec<&str> = ts.resources.iter().map(|r| r.name.as_str()).collect();
            tracing::warn!(
                "sharing.timeSlicing names {names:?} but this plugin serves {resource_name}; no replicas advertised"
            );
            (resource_name.to_string(), None)
        }
    }
}

/// `<id>::<n>`.
pub fn replica_id(base: &str, n: u32) -> String {
    format!("{base}{REPLICA_SEPARATOR}{n}")
}

/// The GPU ID of a replica ID (`<id>::<n>` → `<id>`); other IDs are their own base.
pub fn base_id(id: &str) -> &str {
    match id.rsplit_once(REPLICA_SEPARATOR) {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => id,
    }
}

/// How a resource's devices are picked for a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Whole devices: one NUMA node when possible.
    Numa,
    /// Replicas, spread or packed.
    Replicas(AllocationPolicy),
    /// Memory units: all from one GPU.
    OneGpu,
}

/// Preferred devices for one container. `available` and `must_include` are advertised IDs
/// (the caller has checked they are known); returns `size` IDs or fewer if not enough exist.
pub fn preferred(
    advertised: &[Advertised],
    available: &[String],
    must_include: &[String],
    size: usize,
    pick: Pick,
) -> Vec<String> {
    let position: HashMap<&str, usize> = advertised
        .iter()
        .enumerate()
        .map(|(i, a)| (a.id.as_str(), i))
        .collect();
    let mut chosen: Vec<String> = Vec::new();
    for id in must_include {
        if !chosen.contains(id) && chosen.len() < size {
            chosen.push(id.clone());
        }
    }
    let mut candidates: Vec<usize> = available
        .iter()
        .filter(|id| !chosen.contains(id))
        .filter_map(|id| position.get(id.as_str()).copied())
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    let need = size.saturating_sub(chosen.len());
    if need == 0 {
        return chosen;
    }
    let picked = match pick {
        Pick::Replicas(policy) => pick_replicas(
            advertised, available, &chosen, &position, candidates, need, policy,
        ),
        Pick::Numa => pick_numa(advertised, &chosen, &position, candidates, need),
        Pick::OneGpu => pick_one_gpu(advertised, &chosen, &position, candidates, need),
    };
    chosen.extend(picked.into_iter().map(|i| advertised[i].id.clone()));
    chosen
}

/// Full GPUs: all from one NUMA node when possible (the must-include node first, else the
/// smallest node that fits, which keeps bigger nodes free for bigger pods).
fn pick_numa(
    advertised: &[Advertised],
    chosen: &[String],
    position: &HashMap<&str, usize>,
    candidates: Vec<usize>,
    need: usize,
) -> Vec<usize> {
    let mut by_node: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for i in candidates {
        by_node
            .entry(advertised[i].numa_node.unwrap_or(-1))
            .or_default()
            .push(i);
    }
    let home = chosen
        .iter()
        .filter_map(|id| position.get(id.as_str()))
        .map(|i| advertised[*i].numa_node.unwrap_or(-1))
        .next();
    let mut order: Vec<(i64, usize)> = by_node.iter().map(|(n, v)| (*n, v.len())).collect();
    order.sort_by_key(|(node, count)| {
        let is_home = Some(*node) == home;
        let fits = *count >= need;
        // home first; then nodes that fit, smallest first; then the rest, largest first.
        (
            !is_home,
            !fits,
            if fits {
                *count as i64
            } else {
                -(*count as i64)
            },
            *node,
        )
    });
    let mut out = Vec::new();
    for (node, _) in order {
        for i in &by_node[&node] {
            if out.len() == need {
                return out;
            }
            out.push(*i);
        }
    }
    out
}

/// Memory units: every unit from one GPU — the must-include units' GPU, else the GPU with
/// the fewest free units that still has `need`, else (nothing fits) the one with the most,
/// which Allocate then refuses with its reason.
fn pick_one_gpu(
    advertised: &[Advertised],
    chosen: &[String],
    position: &HashMap<&str, usize>,
    candidates: Vec<usize>,
    need: usize,
) -> Vec<usize> {
    let mut by_gpu: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in candidates {
        by_gpu.entry(advertised[i].physical).or_default().push(i);
    }
    let home = chosen
        .iter()
        .filter_map(|id| position.get(id.as_str()))
        .map(|i| advertised[*i].physical)
        .next();
    let gpu = match home {
        Some(gpu) => Some(gpu),
        None => by_gpu
            .iter()
            .filter(|(_, free)| free.len() >= need)
            .min_by_key(|(gpu, free)| (free.len(), **gpu))
            .or_else(|| {
                by_gpu
                    .iter()
                    .max_by_key(|(gpu, free)| (free.len(), std::cmp::Reverse(**gpu)))
            })
            .map(|(gpu, _)| *gpu),
    };
    gpu.and_then(|g| by_gpu.remove(&g))
        .map(|free| free.into_iter().take(need).collect())
        .unwrap_or_default()
}

/// Replicas: `distributed` takes from the GPU with the fewest replicas in use, `packed` from
/// the GPU with the most (that still has a free replica).
fn pick_replicas(
    advertised: &[Advertised],
    available: &[String],
    chosen: &[String],
    position: &HashMap<&str, usize>,
    mut candidates: Vec<usize>,
    need: usize,
    policy: AllocationPolicy,
) -> Vec<usize> {
    // In use = advertised replicas of the GPU that are not available, plus those chosen.
    let mut total: HashMap<usize, usize> = HashMap::new();
    for a in advertised {
        *total.entry(a.physical).or_default() += 1;
    }
    let mut free: HashMap<usize, usize> = HashMap::new();
    for id in available {
        if let Some(i) = position.get(id.as_str()) {
            *free.entry(advertised[*i].physical).or_default() += 1;
        }
    }
    let mut used: HashMap<usize, usize> = total
        .iter()
        .map(|(p, t)| (*p, t - free.get(p).copied().unwrap_or(0)))
        .collect();
    for id in chosen {
        if let Some(i) = position.get(id.as_str()) {
            *used.entry(advertised[*i].physical).or_default() += 1;
        }
    }
    let mut out = Vec::new();
    while out.len() < need && !candidates.is_empty() {
        let best = (0..candidates.len())
            .min_by_key(|k| {
                let i = candidates[*k];
                let p = advertised[i].physical;
                let u = used.get(&p).copied().unwrap_or(0) as i64;
                let key = match policy {
                    AllocationPolicy::Distributed => u,
                    AllocationPolicy::Packed => -u,
                };
                (key, p, i)
            })
            .expect("candidates is not empty");
        let i = candidates.remove(best);
        *used.entry(advertised[i].physical).or_default() += 1;
        out.push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_ids_of_replicas() {
        assert_eq!(base_id("tegra::3"), "tegra");
        assert_eq!(base_id(&replica_id("GPU-1a", 12)), "GPU-1a");
        assert_eq!(base_id("GPU-1a"), "GPU-1a");
        assert_eq!(base_id("a::b"), "a::b");
        assert_eq!(base_id("a::"), "a::");
    }

    fn gpus(numa: &[Option<i64>], replicas: u32) -> Vec<Advertised> {
        let mut out = Vec::new();
        for (p, n) in numa.iter().enumerate() {
            if replicas == 0 {
                out.push(Advertised {
                    id: format!("GPU-{p}"),
                    physical: p,
                    numa_node: *n,
                });
            } else {
                for r in 0..replicas {
                    out.push(Advertised {
                        id: replica_id(&format!("GPU-{p}"), r),
                        physical: p,
                        numa_node: *n,
                    });
                }
            }
        }
        out
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn numa_prefers_one_node_that_fits() {
        let adv = gpus(&[Some(0), Some(1), Some(1), Some(0), Some(0)], 0);
        let all: Vec<String> = adv.iter().map(|a| a.id.clone()).collect();
        // 2 GPUs: node 1 has exactly 2 (smallest that fits).
        let got = preferred(&adv, &all, &[], 2, Pick::Numa);
        assert_eq!(got, ids(&["GPU-1", "GPU-2"]));
        // must include GPU-0 (node 0) → the other picks come from node 0.
        let got = preferred(&adv, &all, &ids(&["GPU-0"]), 2, Pick::Numa);
        assert_eq!(got, ids(&["GPU-0", "GPU-3"]));
    }

    #[test]
    fn replicas_distributed_and_packed() {
        let adv = gpus(&[Some(0), Some(1)], 4);
        let all: Vec<String> = adv.iter().map(|a| a.id.clone()).collect();
        let got = preferred(
            &adv,
            &all,
            &[],
            2,
            Pick::Replicas(AllocationPolicy::Distributed),
        );
        assert_eq!(got, ids(&["GPU-0::0", "GPU-1::0"]));
        let got = preferred(&adv, &all, &[], 2, Pick::Replicas(AllocationPolicy::Packed));
        assert_eq!(got, ids(&["GPU-0::0", "GPU-0::1"]));
        // GPU-0 already has 3 replicas in use → distributed picks GPU-1 first.
        let avail: Vec<String> = all
            .iter()
            .filter(|id| !id.starts_with("GPU-0::") || id.ends_with("::3"))
            .cloned()
            .collect();
        let got = preferred(
            &adv,
            &avail,
            &[],
            1,
            Pick::Replicas(AllocationPolicy::Distributed),
        );
        assert_eq!(got, ids(&["GPU-1::0"]));
        let got = preferred(
            &adv,
            &avail,
            &[],
            1,
            Pick::Replicas(AllocationPolicy::Packed),
        );
        assert_eq!(got, ids(&["GPU-0::3"]));
    }

    #[test]
    fn memory_units_come_from_one_gpu_best_fit() {
        // GPU-0 has 4 units, GPU-1 has 4; GPU-1's first 2 are taken → GPU-1 has 2 free.
        let adv = gpus(&[None, None], 4);
        let avail: Vec<String> = adv
            .iter()
            .map(|a| a.id.clone())
            .filter(|id| id != "GPU-1::0" && id != "GPU-1::1")
            .collect();
        // 2 units: GPU-1 (2 free) fits exactly and leaves GPU-0's 4 for a bigger pod.
        assert_eq!(
            preferred(&adv, &avail, &[], 2, Pick::OneGpu),
            ids(&["GPU-1::2", "GPU-1::3"])
        );
        // 3 units: only GPU-0 fits.
        assert_eq!(
            preferred(&adv, &avail, &[], 3, Pick::OneGpu),
            ids(&["GPU-0::0", "GPU-0::1", "GPU-0::2"])
        );
        // A must-include unit fixes the GPU.
        assert_eq!(
            preferred(&adv, &avail, &ids(&["GPU-1::3"]), 2, Pick::OneGpu),
            ids(&["GPU-1::3", "GPU-1::2"])
        );
        // 5 units fit on no GPU: the fullest candidate only (Allocate refuses a split).
        assert_eq!(preferred(&adv, &avail, &[], 5, Pick::OneGpu).len(), 4);
    }
}
