//! Node labels on simulated Nano, Xavier, Orin (r36 and r39) and Thor roots, a fake-NVML
//! server and MIG servers: GFD's keys with real values on Jetson, edgegpu.io/ keys, GFD's MIG
//! labels under each MIG strategy, valid label values, time-slicing, the NFD feature file,
//! and the labeller's path (discovery without serving) agreeing with the plugin's.

use crate::gpu_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::Parser;
use edgegpu_node::labels::{self, feature_file, value, NodeLabels};
use edgegpu_node::serving::Served;
use edgegpu_plugin::{Cli, GpuResource};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};

fn map(labels: &NodeLabels) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The planned resources under the plugin's served ones (what the labels are computed from).
fn served(resources: &[Arc<GpuResource>]) -> Vec<Arc<Served>> {
    resources.iter().map(|r| r.served().clone()).collect()
}

async fn labels_of(host: &FakeHost, args: &[&str]) -> NodeLabels {
    let resources = gpu_common::resources(host.root(), args).await.unwrap();
    let from_plugin = labels::for_resources(&served(&resources));
    // The labeller computes them without serving: the same labels.
    let from_labeller = labeller_labels(host, args);
    assert_eq!(from_plugin, from_labeller);
    for (key, v) in from_plugin.iter() {
        assert!(labels::is_managed(key), "{key}");
        let (_, name) = key.split_once('/').unwrap();
        assert!(value::is_valid(name), "{key}");
        assert!(value::is_valid(v), "{key}={v:?}");
    }
    from_plugin
}

/// The labels `edgegpu-labeller` computes (discovery without serving).
fn labeller_labels(host: &FakeHost, args: &[&str]) -> NodeLabels {
    let dir = tempfile::tempdir().unwrap();
    let cli = gpu_common::cli(host.root(), dir.path(), args);
    labels::for_host(&cli.root, &cli.resource_name, &cli.gpu).unwrap()
}

fn mib(kb: u64) -> String {
    (kb / 1024).to_string()
}

/// `nvpmodel -m` changed the mode: the labels follow nvpmodel's record, not the boot default,
/// and a mode without a GPU limit is labelled with the hardware's highest clock. Thor's
/// nvpmodel file is not modelled (docs/power.md): no power labels there.
#[tokio::test]
async fn jetson_power_mode_labels_follow_nvpmodel() {
    let host = FakeHost::jetson(Board::Orin);
    host.set_power_mode(Board::Orin, 1, 420_750_000);
    let labels = labels_of(&host, &["--discovery=tegra"]).await;
    assert_eq!(labels.get("edgegpu.io/jetson.power-mode"), Some("MODE_15W"));
    assert_eq!(labels.get("edgegpu.io/jetson.power-mode.id"), Some("1"));
    assert_eq!(
        labels.get("edgegpu.io/jetson.gpu-clock-max-mhz"),
        Some("420")
    );

    host.set_power_mode(Board::Orin, 0, 1_300_500_000);
    let labels = labels_of(&host, &["--discovery=tegra"]).await;
    assert_eq!(labels.get("edgegpu.io/jetson.power-mode"), Some("MAXN"));
    assert_eq!(
        labels.get("edgegpu.io/jetson.gpu-clock-max-mhz"),
        Some("1300")
    );

    let thor = labels_of(&FakeHost::jetson(Board::Thor), &["--discovery=tegra"]).await;
    assert_eq!(thor.get("edgegpu.io/jetson.power-mode"), None);
    assert_eq!(thor.get("edgegpu.io/gpu"), Some("jetson"));
}

#[tokio::test]
async fn jetson_labels_per_generation() {
    let nano = labels_of(&FakeHost::jetson(Board::Nano), &["--discovery=tegra"]).await;
    assert_eq!(
        map(&nano),
        expect(&[
            ("nvidia.com/gpu.present", "true"),
            ("nvidia.com/gpu.count", "1"),
            ("nvidia.com/gpu.product", "NVIDIA-Tegra-X1"),
            ("nvidia.com/gpu.memory", &mib(Board::Nano.mem_total_kb())),
            ("nvidia.com/gpu.family", "maxwell"),
            ("nvidia.com/gpu.compute.major", "5"),
            ("nvidia.com/gpu.compute.minor", "3"),
            ("nvidia.com/cuda.driver.major", "10"),
            ("nvidia.com/cuda.driver.minor", "2"),
            ("nvidia.com/gpu.replicas", "1"),
            ("nvidia.com/gpu.sharing-strategy", "none"),
            ("nvidia.com/mps.capable", "false"),
            ("edgegpu.io/gpu", "jetson"),
            (
                "edgegpu.io/jetson.board",
                "NVIDIA-Jetson-Nano-Developer-Kit"
            ),
            ("edgegpu.io/jetson.module", "p3448-0000-b00"),
            ("edgegpu.io/jetson.product", "Jetson-Nano"),
            ("edgegpu.io/jetson.soc", "T210"),
            ("edgegpu.io/jetson.l4t", "32.7.6"),
            ("edgegpu.io/jetson.jetpack.major", "4"),
            // nvpmodel's boot default; MAXN sets no GPU limit: the hardware's 921.6 MHz.
            ("edgegpu.io/jetson.power-mode", "MAXN"),
            ("edgegpu.io/jetson.power-mode.id", "0"),
            ("edgegpu.io/jetson.gpu-clock-max-mhz", "921"),
        ])
    );

    let xavier = labels_of(&FakeHost::jetson(Board::Xavier), &["--discovery=tegra"]).await;
    for (k, v) in [
        ("nvidia.com/gpu.product", "Xavier"),
        ("nvidia.com/gpu.family", "volta"),
        ("nvidia.com/gpu.compute.major", "7"),
        ("nvidia.com/gpu.compute.minor", "2"),
        ("nvidia.com/cuda.driver.major", "11"),
        ("nvidia.com/cuda.driver.minor", "4"),
        ("edgegpu.io/jetson.product", "Jetson-AGX-Xavier"),
        ("edgegpu.io/jetson.jetpack.major", "5"),
    ] {
        assert_eq!(xavier.get(k), Some(v), "{k}");
    }

    let orin = labels_of(&FakeHost::jetson(Board::Orin), &["--discovery=tegra"]).await;
    for (k, v) in [
        ("nvidia.com/gpu.product", "Orin"),
        (
            "nvidia.com/gpu.memory",
            mib(Board::Orin.mem_total_kb()).as_str(),
        ),
        ("nvidia.com/gpu.family", "ampere"),
        ("nvidia.com/gpu.compute.major", "8"),
        ("nvidia.com/gpu.compute.minor", "7"),
        ("nvidia.com/cuda.driver.major", "12"),
        ("nvidia.com/cuda.driver.minor", "6"),
        (
            "edgegpu.io/jetson.board",
            "NVIDIA-Jetson-AGX-Orin-Developer-Kit",
        ),
        ("edgegpu.io/jetson.module", "p3701-0005"),
        ("edgegpu.io/jetson.product", "Jetson-AGX-Orin"),
        ("edgegpu.io/jetson.soc", "T234"),
        ("edgegpu.io/jetson.l4t", "36.4.3"),
        ("edgegpu.io/jetson.jetpack.major", "6"),
        ("edgegpu.io/jetson.power-mode", "MODE_30W"),
        ("edgegpu.io/jetson.power-mode.id", "2"),
        ("edgegpu.io/jetson.gpu-clock-max-mhz", "624"),
    ] {
        assert_eq!(orin.get(k), Some(v), "{k}");
    }

    // Thor on CUDA 13.0: SM110 (renumbered from 10.1), still Blackwell.
    let thor = labels_of(&FakeHost::jetson(Board::Thor), &["--discovery=tegra"]).await;
    for (k, v) in [
        // Without NVML the product is CUDA's device name (deviceQuery on Thor: NVIDIA Thor).
        ("nvidia.com/gpu.product", "NVIDIA-Thor"),
        ("nvidia.com/gpu.family", "blackwell"),
        ("nvidia.com/gpu.compute.major", "11"),
        ("nvidia.com/gpu.compute.minor", "0"),
        ("nvidia.com/cuda.driver.major", "13"),
        ("nvidia.com/cuda.driver.minor", "0"),
        ("edgegpu.io/jetson.soc", "T264"),
        ("edgegpu.io/jetson.jetpack.major", "7"),
    ] {
        assert_eq!(thor.get(k), Some(v), "{k}");
    }
}

#[tokio::test]
async fn jetpack6_names_the_product_as_nvml_does() {
    let host = FakeHost::jetson(Board::Orin).with_nvml(
        "/usr/lib/aarch64-linux-gnu/nvidia",
        &[FakeGpu::orin_nvgpu()],
    );
    let labels = labels_of(&host, &[]).await;
    assert_eq!(labels.get("nvidia.com/gpu.product"), Some("Orin-nvgpu"));
    assert_eq!(labels.get("edgegpu.io/gpu"), Some("jetson"));

    // Orin NX on JetPack 7.2 (r39) with its NVML: NVML's name, the rest from the host files
    // and the platform table (NVML answers nothing else there).
    let r39 = labels_of(&FakeHost::jetson_with_nvml(Board::OrinR39), &[]).await;
    assert_eq!(
        map(&r39),
        expect(&[
            ("nvidia.com/gpu.present", "true"),
            ("nvidia.com/gpu.count", "1"),
            ("nvidia.com/gpu.product", "Orin-nvgpu"),
            ("nvidia.com/gpu.memory", &mib(Board::OrinR39.mem_total_kb())),
            ("nvidia.com/gpu.family", "ampere"),
            ("nvidia.com/gpu.compute.major", "8"),
            ("nvidia.com/gpu.compute.minor", "7"),
            ("nvidia.com/cuda.driver.major", "13"),
            ("nvidia.com/cuda.driver.minor", "2"),
            ("nvidia.com/gpu.replicas", "1"),
            ("nvidia.com/gpu.sharing-strategy", "none"),
            ("nvidia.com/mps.capable", "false"),
            ("edgegpu.io/gpu", "jetson"),
            (
                "edgegpu.io/jetson.board",
                "NVIDIA-Jetson-Orin-NX-Engineering-Reference-Developer-Kit"
            ),
            ("edgegpu.io/jetson.module", "p3767-0000"),
            ("edgegpu.io/jetson.product", "Jetson-Orin-NX"),
            ("edgegpu.io/jetson.soc", "T234"),
            ("edgegpu.io/jetson.l4t", "39.2.0"),
            ("edgegpu.io/jetson.jetpack.major", "7"),
            ("edgegpu.io/jetson.power-mode", "25W"),
            ("edgegpu.io/jetson.power-mode.id", "3"),
            ("edgegpu.io/jetson.gpu-clock-max-mhz", "918"),
        ])
    );
    // Without NVML the generation's CUDA name.
    let r39 = labels_of(&FakeHost::jetson(Board::OrinR39), &["--discovery=tegra"]).await;
    assert_eq!(r39.get("nvidia.com/gpu.product"), Some("Orin"));
    // Thor with JetPack 7's NVML: `NVIDIA Thor`.
    let thor = labels_of(&FakeHost::jetson_with_nvml(Board::Thor), &[]).await;
    assert_eq!(thor.get("nvidia.com/gpu.product"), Some("NVIDIA-Thor"));
    assert_eq!(thor.get("nvidia.com/gpu.family"), Some("blackwell"));
    // --mig-strategy on a Jetson without MIG devices: the strategy, nothing else changes.
    let thor_mig = labels_of(
        &FakeHost::jetson_with_nvml(Board::Thor),
        &["--mig-strategy=mixed"],
    )
    .await;
    assert_eq!(thor_mig.get("nvidia.com/mig.strategy"), Some("mixed"));
    assert_eq!(thor_mig.get("nvidia.com/gpu.count"), Some("1"));
    assert_eq!(thor_mig.get("nvidia.com/gpu.replicas"), Some("1"));
}

#[tokio::test]
async fn discrete_labels_and_time_slicing() {
    let (_config, config_flag) = gpu_common::time_slicing_config(4);
    let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
    let labels = labels_of(&host, &["--discovery=nvml", &config_flag]).await;
    assert_eq!(
        map(&labels),
        expect(&[
            ("nvidia.com/gpu.present", "true"),
            ("nvidia.com/gpu.count", "2"),
            // GFD marks a time-sliced product that keeps its resource name.
            ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-SHARED"),
            ("nvidia.com/gpu.memory", "40960"),
            ("nvidia.com/gpu.family", "ampere"),
            ("nvidia.com/gpu.compute.major", "8"),
            ("nvidia.com/gpu.compute.minor", "0"),
            ("nvidia.com/cuda.driver.major", "12"),
            ("nvidia.com/cuda.driver.minor", "4"),
            ("nvidia.com/gpu.replicas", "4"),
            ("nvidia.com/gpu.sharing-strategy", "time-slicing"),
            ("nvidia.com/mps.capable", "false"),
            ("edgegpu.io/gpu", "discrete"),
        ])
    );
}

#[tokio::test]
async fn renamed_shares_keep_the_plain_product() {
    // renameByDefault: the shares are `nvidia.com/gpu.shared`, the product stays unmarked
    // (GFD `internal/lm/resource.go`: `-SHARED` only where the resource is not renamed).
    let (_config, flag) = gpu_common::config_file(
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
    );
    let host = FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes());
    let labels = labels_of(&host, &["--discovery=nvml", &flag]).await;
    assert_eq!(
        labels.get("nvidia.com/gpu.product"),
        Some("NVIDIA-A100-SXM4-40GB")
    );
    assert_eq!(labels.get("nvidia.com/gpu.replicas"), Some("4"));
    // A Jetson time-sliced under its own name.
    let (_config, flag) = gpu_common::time_slicing_config(2);
    let orin = labels_of(
        &FakeHost::jetson(Board::Orin),
        &["--discovery=tegra", &flag],
    )
    .await;
    assert!(orin
        .get("nvidia.com/gpu.product")
        .is_some_and(|p| p.ends_with("-SHARED")));
}

#[tokio::test]
async fn r470_gpu_memory_label() {
    // No nvmlDeviceGetMemoryInfo_v2 before R510: the memory comes from the original call.
    let host = FakeHost::discrete_r470(&FakeGpu::two_on_two_numa_nodes());
    let labels = labels_of(&host, &["--discovery=nvml"]).await;
    assert_eq!(labels.get("nvidia.com/gpu.memory"), Some("40960"));
}

#[tokio::test]
async fn no_gpu_no_labels() {
    let host = FakeHost::empty();
    let dir = tempfile::tempdir().unwrap();
    let cli = gpu_common::cli(host.root(), dir.path(), &[]);
    let labels = labels::for_host(&cli.root, &cli.resource_name, &cli.gpu).unwrap();
    assert!(labels.is_empty());
}

#[tokio::test]
async fn the_feature_file() {
    let host = FakeHost::jetson(Board::Orin);
    let resources = gpu_common::resources(host.root(), &["--discovery=tegra"])
        .await
        .unwrap();
    let labels = labels::for_resources(&served(&resources));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edgegpu");
    assert!(feature_file::write(&path, &labels).unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    // NFD's local source: `name=value` lines only (NFD before v0.14 has no comments).
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), labels.iter().count());
    assert!(
        lines.iter().all(|l| l.contains('=') && !l.starts_with('#')),
        "{text}"
    );
    assert!(lines.contains(&"nvidia.com/gpu.present=true"), "{text}");
    assert!(lines.contains(&"edgegpu.io/jetson.l4t=36.4.3"), "{text}");
    // Only the file itself is left (the temporary file was renamed).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // Rewritten in place on the next start.
    assert!(feature_file::write(&path, &NodeLabels::default()).unwrap());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    // Removed at shutdown; removing it twice is no error.
    assert!(feature_file::remove(&path).unwrap());
    assert!(!path.exists());
    assert!(!feature_file::remove(&path).unwrap());
    // NFD not installed: its directory is missing and nothing is created.
    let missing = dir.path().join("features.d/edgegpu");
    assert!(!feature_file::write(&missing, &labels).unwrap());
    assert!(!dir.path().join("features.d").exists());
}

#[test]
fn the_default_feature_file_is_nfds_directory() {
    let cli = Cli::try_parse_from(["x"]).unwrap();
    assert_eq!(
        cli.feature_file().unwrap(),
        std::path::Path::new(feature_file::DEFAULT_PATH)
    );
    assert!(feature_file::DEFAULT_PATH
        .starts_with("/etc/kubernetes/node-feature-discovery/features.d/"));
}

/// Labels of `nvidia.com/<prefix>.*` (the MIG attributes GFD writes), as (suffix, value).
fn under<'a>(labels: &'a NodeLabels, prefix: &str) -> BTreeMap<&'a str, &'a str> {
    labels
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?, v)))
        .collect()
}

#[tokio::test]
async fn mig_labels_as_gfd_writes_them() {
    // mixed: GPU 0 in MIG mode (3g.40gb, 1g.10gb ×2), GPU 1 whole.
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let mixed = labels_of(&host, &["--mig-strategy=mixed"]).await;
    assert_eq!(mixed.get("nvidia.com/mig.strategy"), Some("mixed"));
    // The whole-GPU keys describe the GPUs (both counted, GPU 1's sharing).
    assert_eq!(mixed.get("nvidia.com/gpu.count"), Some("2"));
    assert_eq!(
        mixed.get("nvidia.com/gpu.product"),
        Some("NVIDIA-H100-80GB-HBM3")
    );
    assert_eq!(mixed.get("nvidia.com/gpu.memory"), Some("81559"));
    assert_eq!(mixed.get("nvidia.com/gpu.replicas"), Some("1"));
    assert_eq!(mixed.get("nvidia.com/gpu.slices.gi"), None);
    let small = under(&mixed, "nvidia.com/mig-1g.10gb.");
    assert_eq!(
        small,
        [
            ("count", "2"),
            ("engines.copy", "1"),
            ("engines.decoder", "1"),
            ("engines.encoder", "0"),
            ("engines.jpeg", "1"),
            ("engines.ofa", "0"),
            ("memory", "9856"),
            ("multiprocessors", "14"),
            ("product", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"),
            ("replicas", "1"),
            ("slices.ci", "1"),
            ("slices.gi", "1"),
        ]
        .into_iter()
        .collect()
    );
    let big = under(&mixed, "nvidia.com/mig-3g.40gb.");
    assert_eq!(big["count"], "1");
    assert_eq!(big["memory"], "40320");
    assert_eq!(big["slices.gi"], "3");
    assert_eq!(big["multiprocessors"], "42");
    // A +me profile: its keys under its resource name (nvidia.com/mig-1g.10gb.me), its OFA.
    let (me_host, _) = FakeHost::mig_server(&[0], &[FakeMig::h100(0, 9, "1g.10gb+me")]);
    let me = labels_of(&me_host, &["--mig-strategy=mixed"]).await;
    let me = under(&me, "nvidia.com/mig-1g.10gb.me.");
    assert_eq!((me["count"], me["engines.ofa"]), ("1", "1"), "{me:?}");
    // strategy none: MIG devices are not served; no MIG keys.
    let none = labels_of(&host, &[]).await;
    assert!(none.iter().all(|(k, _)| !k.contains("mig")), "{none:?}");
    assert_eq!(none.get("nvidia.com/gpu.count"), Some("2"));

    // single: the MIG devices are nvidia.com/gpu; its keys describe them.
    let migs = [
        FakeMig::h100(0, 7, "1g.10gb"),
        FakeMig::h100(0, 8, "1g.10gb"),
        FakeMig::h100(1, 7, "1g.10gb"),
    ];
    let (host, _) = FakeHost::mig_server(&[0, 1], &migs);
    let single = labels_of(&host, &["--mig-strategy=single"]).await;
    for (k, v) in [
        ("nvidia.com/mig.strategy", "single"),
        (
            "nvidia.com/gpu.product",
            "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        ),
        ("nvidia.com/gpu.count", "3"),
        ("nvidia.com/gpu.memory", "9856"),
        ("nvidia.com/gpu.replicas", "1"),
        ("nvidia.com/gpu.slices.gi", "1"),
        ("nvidia.com/gpu.multiprocessors", "14"),
        ("nvidia.com/gpu.family", "ampere"),
        ("nvidia.com/gpu.sharing-strategy", "none"),
    ] {
        assert_eq!(single.get(k), Some(v), "{k}");
    }
    assert!(single
        .iter()
        .all(|(k, _)| !k.starts_with(labels::MIG_PROFILE_PREFIX)));

    // single with two profiles: the plugin refuses to serve; the labeller writes GFD's
    // INVALID labels.
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    assert!(
        gpu_common::resources(host.root(), &["--mig-strategy=single"])
            .await
            .is_err()
    );
    let invalid = labeller_labels(&host, &["--mig-strategy=single"]);
    for (k, v) in [
        ("nvidia.com/mig.strategy", "single"),
        (
            "nvidia.com/gpu.product",
            "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
        ),
        ("nvidia.com/gpu.count", "0"),
        ("nvidia.com/gpu.replicas", "0"),
        ("nvidia.com/gpu.memory", "0"),
    ] {
        assert_eq!(invalid.get(k), Some(v), "{k}");
    }
}

#[tokio::test]
async fn time_sliced_mig_devices_carry_their_replicas() {
    let (_config, flag) = gpu_common::config_file(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 4\n",
    );
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let labels = labels_of(&host, &["--mig-strategy=mixed", &flag]).await;
    assert_eq!(labels.get("nvidia.com/mig-1g.10gb.replicas"), Some("4"));
    assert_eq!(
        labels.get("nvidia.com/mig-1g.10gb.product"),
        Some("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED")
    );
    assert_eq!(labels.get("nvidia.com/mig-3g.40gb.replicas"), Some("1"));
    assert_eq!(
        labels.get("nvidia.com/mig-3g.40gb.product"),
        Some("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb")
    );
    assert_eq!(labels.get("nvidia.com/gpu.replicas"), Some("1"));
    assert_eq!(labels.get("nvidia.com/gpu.sharing-strategy"), Some("none"));
}

#[tokio::test]
async fn engine_counts_only_where_the_host_has_engines() {
    let count = |l: &NodeLabels, k: &str| l.get(k).map(str::to_string);
    let xavier = labels_of(
        &FakeHost::jetson_with_engines(Board::Xavier),
        &["--discovery=tegra"],
    )
    .await;
    assert_eq!(count(&xavier, "nvidia.com/dla.count").as_deref(), Some("2"));
    assert_eq!(count(&xavier, "nvidia.com/pva.count").as_deref(), Some("2"));
    let orin_nx_8gb = FakeHost::jetson_with_engines(Board::OrinR39);
    orin_nx_8gb.remove_engine("dla", 1);
    let orin = labels_of(&orin_nx_8gb, &["--discovery=tegra"]).await;
    assert_eq!(count(&orin, "nvidia.com/dla.count").as_deref(), Some("1"));
    assert_eq!(count(&orin, "nvidia.com/pva.count").as_deref(), Some("1"));
    let thor = labels_of(
        &FakeHost::jetson_with_engines(Board::Thor),
        &["--discovery=tegra"],
    )
    .await;
    assert_eq!(count(&thor, "nvidia.com/dla.count"), None);
    assert_eq!(count(&thor, "nvidia.com/pva.count").as_deref(), Some("1"));
    let nano = labels_of(
        &FakeHost::jetson_with_engines(Board::Nano),
        &["--discovery=tegra"],
    )
    .await;
    assert_eq!(count(&nano, "nvidia.com/dla.count"), None);
    assert_eq!(count(&nano, "nvidia.com/pva.count"), None);
}
