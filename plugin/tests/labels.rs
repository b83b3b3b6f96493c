//! Node labels on simulated Nano, Xavier, Orin and Thor roots and a fake-NVML server: GFD's
//! keys with real values on Jetson, edgegpu.io/ keys, valid label values, time-slicing, the
//! NFD feature file, and the labeller's path (discovery without serving) agreeing with the
//! plugin's.

mod gpu_common;

use std::collections::BTreeMap;

use clap::Parser;
use edgegpu_plugin::labels::{self, feature_file, value, NodeLabels};
use edgegpu_plugin::Cli;
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};

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

async fn labels_of(host: &FakeHost, args: &[&str]) -> NodeLabels {
    let resources = gpu_common::resources(host.root(), args).await.unwrap();
    let from_plugin = labels::for_resources(&resources);
    // The labeller computes them without serving: the same labels.
    let dir = tempfile::tempdir().unwrap();
    let cli = gpu_common::cli(host.root(), dir.path(), args);
    let from_labeller = labels::for_host(&cli.root, &cli.resource_name, &cli.gpu).unwrap();
    assert_eq!(from_plugin, from_labeller);
    for (key, v) in from_plugin.iter() {
        assert!(labels::is_managed(key), "{key}");
        assert!(value::is_valid(v), "{key}={v:?}");
    }
    from_plugin
}

fn mib(kb: u64) -> String {
    (kb / 1024).to_string()
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
    ] {
        assert_eq!(orin.get(k), Some(v), "{k}");
    }

    // Thor on CUDA 13.0: SM110 (renumbered from 10.1), still Blackwell.
    let thor = labels_of(&FakeHost::jetson(Board::Thor), &["--discovery=tegra"]).await;
    for (k, v) in [
        ("nvidia.com/gpu.product", "NVIDIA-Tegra-T264"),
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
            ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB"),
            ("nvidia.com/gpu.memory", "40960"),
            ("nvidia.com/gpu.family", "ampere"),
            ("nvidia.com/gpu.compute.major", "8"),
            ("nvidia.com/gpu.compute.minor", "0"),
            ("nvidia.com/cuda.driver.major", "12"),
            ("nvidia.com/cuda.driver.minor", "4"),
            ("nvidia.com/gpu.replicas", "4"),
            ("nvidia.com/gpu.sharing-strategy", "time-slicing"),
            ("edgegpu.io/gpu", "discrete"),
        ])
    );
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
    let labels = labels::for_resources(&resources);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edgegpu");
    assert!(feature_file::write(&path, &labels).unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    // NFD's local source: comment lines, then `name=value` lines.
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), labels.iter().count());
    assert!(lines.contains(&"nvidia.com/gpu.present=true"), "{text}");
    assert!(lines.contains(&"edgegpu.io/jetson.l4t=36.4.3"), "{text}");
    // Only the file itself is left (the temporary file was renamed).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // Rewritten in place on the next start.
    assert!(feature_file::write(&path, &NodeLabels::default()).unwrap());
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .all(|l| l.starts_with('#')));
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
