//! `/metrics` on simulated Nano, Xavier, Orin (r36 and r39) and Thor roots, fake-NVML servers
//! and MIG servers: each series against the files' (or the fake NVML's) values, values
//! following changes, series a board cannot measure left out, hybrid Jetsons asking NVML only
//! what their release's NVML answers, one series per MIG GPU instance (dcgm-exporter's
//! `GPU_I_PROFILE` / `GPU_I_ID`), pod labels appearing and disappearing with the fake
//! pod-resources server (time-sliced replicas, MIG resources and renamed `.shared` resources
//! too), the plugin's own counters per resource, the HTTP endpoint, and the text checked with
//! Prometheus' own parser (Python `prometheus_client`).

use crate::gpu_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use edgegpu_kubelet_api::v1beta1::{ContainerAllocateRequest, HEALTHY, UNHEALTHY};
use edgegpu_plugin::kubelet::stats::KubeletStats;
use edgegpu_plugin::metrics::MetricsSource;
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::GpuResource;
use edgegpu_testkit::host::{
    Board, CgroupDriver, CgroupVersion, CheckpointEntry, CheckpointShape, FakeGpu, FakeHost,
    FakeMig,
};
use edgegpu_testkit::pod_resources::FakePodResources;
use gpu_common::Plugin;

/// One parsed sample.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Reads our own output back (the Python check below is the independent one).
fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => {
                let body = rest.strip_suffix('}').unwrap();
                let mut labels = BTreeMap::new();
                // Test values contain no `",` sequences.
                for pair in body.split("\",") {
                    let (k, v) = pair.split_once("=\"").unwrap();
                    labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                (n.to_string(), labels)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        out.push(Sample {
            name,
            labels,
            value: value.parse().unwrap(),
        });
    }
    out
}

fn series<'a>(samples: &'a [Sample], name: &str) -> Vec<&'a Sample> {
    samples.iter().filter(|s| s.name == name).collect()
}

/// The one sample of `name` (panics unless there is exactly one).
fn one(samples: &[Sample], name: &str) -> f64 {
    let found = series(samples, name);
    assert_eq!(found.len(), 1, "{name}: {found:?}");
    found[0].value
}

fn absent(samples: &[Sample], name: &str) {
    assert!(series(samples, name).is_empty(), "{name} must be absent");
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

/// The metrics of the plugin built for `host` with `args`.
async fn metrics_of(host: &FakeHost, args: &[&str], socket: Option<&Path>) -> MetricsSource {
    let resource = gpu_common::resource(host.root(), args).await.unwrap();
    source(&resource, socket)
}

fn source(resource: &Arc<GpuResource>, socket: Option<&Path>) -> MetricsSource {
    sources(std::slice::from_ref(resource), socket)
}

/// The metrics of every resource of a node.
fn sources(resources: &[Arc<GpuResource>], socket: Option<&Path>) -> MetricsSource {
    MetricsSource::new(
        resources.to_vec(),
        Arc::new(KubeletStats::default()),
        socket.map(Path::to_path_buf),
        "node-1".into(),
    )
}

async fn scrape(source: &MetricsSource) -> Vec<Sample> {
    let text = source.render().await;
    prometheus_parses(&text);
    parse(&text)
}

/// Parses `text` with Prometheus' Python client (`prometheus_client.parser`) and compares its
/// samples with ours. Skipped when the package is missing, unless EDGEGPU_REQUIRE_REAL_TOOLS=1
/// (scripts/setup.sh installs it into .tools/venv, which scripts/test.sh puts on PATH).
fn prometheus_parses(text: &str) {
    const SCRIPT: &str = "import sys, json\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        out = []\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in family.samples:\n\
        \x20       out.append([s.name, s.labels, s.value])\n\
        print(json.dumps(out))\n";
    let run = std::process::Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        });
    let output = match run {
        Ok(o) if o.status.success() => o,
        Ok(o)
            if String::from_utf8_lossy(&o.stderr)
                .contains("No module named 'prometheus_client'") =>
        {
            if std::env::var("EDGEGPU_REQUIRE_REAL_TOOLS").as_deref() == Ok("1") {
                panic!("python3 lacks prometheus_client (scripts/setup.sh installs it)");
            }
            eprintln!("SKIP Prometheus parser check: pip install prometheus-client");
            return;
        }
        Ok(o) => panic!(
            "Prometheus' parser rejected the exposition:\n{}\n{text}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            if std::env::var("EDGEGPU_REQUIRE_REAL_TOOLS").as_deref() == Ok("1") {
                panic!("cannot run python3: {e}");
            }
            eprintln!("SKIP Prometheus parser check: python3: {e}");
            return;
        }
    };
    let theirs: Vec<(String, BTreeMap<String, String>, f64)> =
        serde_json::from_slice(&output.stdout).expect("parser output");
    let ours = parse(text);
    assert_eq!(theirs.len(), ours.len(), "{text}");
    for (t, o) in theirs.iter().zip(&ours) {
        assert_eq!(t.0, o.name);
        assert_eq!(t.1, o.labels);
        assert!(close(t.2, o.value), "{t:?} vs {o:?}");
    }
}

fn gpu_labels(s: &Sample) -> (&str, &str, &str, &str, &str) {
    let l = |k: &str| s.labels.get(k).map(String::as_str).unwrap_or("");
    (
        l("gpu"),
        l("UUID"),
        l("device"),
        l("modelName"),
        l("Hostname"),
    )
}

fn rail(samples: &[Sample], label: &str) -> (f64, String) {
    let s = series(samples, "edgegpu_power_rail_watts")
        .into_iter()
        .find(|s| s.labels["rail"] == label)
        .unwrap_or_else(|| panic!("rail {label}"));
    (s.value, s.labels["feeds_gpu"].clone())
}

#[tokio::test]
async fn nano_series_follow_the_files() {
    let host = FakeHost::jetson(Board::Nano);
    // The board serial NVIDIA's bootloader puts in the device tree (NUL-terminated): every
    // Jetson of a fleet gets its own UUID label.
    host.write("/proc/device-tree/serial-number", "1422919082137\0");
    let src = metrics_of(&host, &["--discovery=tegra"], None).await;
    host.set_gpu_load(455);
    let s = scrape(&src).await;
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 45.5);
    assert_eq!(one(&s, "DCGM_FI_DEV_SM_CLOCK"), 306.0);
    // GPU-therm, not the first zone (PMIC-Die, a constant 100 °C).
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_TEMP"), 39.5);
    // POM_5V_GPU feeds the GPU alone: its power is the GPU's.
    // ina3221x reports power itself (mW): 5048 mV × 120 mA = 605 mW.
    assert_eq!(one(&s, "DCGM_FI_DEV_POWER_USAGE"), 0.605);
    // EMC: the bandwidth manager's clock; load = mc_all / clock in kHz.
    assert_eq!(one(&s, "DCGM_FI_DEV_MEM_CLOCK"), 1600.0);
    assert_eq!(one(&s, "edgegpu_emc_utilization_percent"), 30.0);
    assert_eq!(rail(&s, "POM_5V_IN").1, "false");
    assert_eq!(rail(&s, "POM_5V_GPU").1, "true");
    assert_eq!(rail(&s, "POM_5V_CPU").0, 1.011);
    assert_eq!(
        one(&s, "edgegpu_gpu_shared_memory_used_bytes"),
        (65_536u64 * 1024) as f64
    );
    assert_eq!(
        one(&s, "edgegpu_gpu_shared_memory_total_bytes"),
        (Board::Nano.mem_total_kb() * 1024) as f64
    );
    // No dedicated memory on a Jetson.
    absent(&s, "DCGM_FI_DEV_FB_USED");
    absent(&s, "DCGM_FI_DEV_FB_FREE");
    let util = series(&s, "DCGM_FI_DEV_GPU_UTIL")[0];
    assert_eq!(
        gpu_labels(util),
        (
            "0",
            "tegra-1422919082137",
            "nvidia0",
            "NVIDIA Tegra X1",
            "node-1"
        )
    );
    assert!(!util.labels.contains_key("pod"));

    // Values follow the files.
    host.set_gpu_load(1000);
    host.set_gpu_frequency(921_600_000);
    host.set_thermal_zone("GPU-therm", 52_000);
    host.set_rail("POM_5V_GPU", 5_000, 2_000);
    host.set_nvmap_used_kb(1_048_576);
    let s = scrape(&src).await;
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 100.0);
    assert_eq!(one(&s, "DCGM_FI_DEV_SM_CLOCK"), 921.6);
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_TEMP"), 52.0);
    assert_eq!(one(&s, "DCGM_FI_DEV_POWER_USAGE"), 10.0);
    assert_eq!(
        one(&s, "edgegpu_gpu_shared_memory_used_bytes"),
        (1u64 << 30) as f64
    );
}

#[tokio::test]
async fn orin_and_xavier_series_follow_the_files() {
    let host = FakeHost::jetson(Board::Orin);
    let src = metrics_of(&host, &["--discovery=tegra"], None).await;
    host.set_gpu_load(125);
    let s = scrape(&src).await;
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 12.5);
    assert_eq!(one(&s, "DCGM_FI_DEV_SM_CLOCK"), 306.0);
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_TEMP"), 46.093);
    // AGX Orin's GPU rail also feeds the SoC: no GPU power, but the rail itself.
    absent(&s, "DCGM_FI_DEV_POWER_USAGE");
    let (watts, feeds_gpu) = rail(&s, "VDD_GPU_SOC");
    assert!(close(watts, 19.960 * 1.240), "{watts}");
    assert_eq!(feeds_gpu, "true");
    assert_eq!(rail(&s, "VIN_SYS_5V0").1, "false");
    assert_eq!(series(&s, "edgegpu_power_rail_watts").len(), 3);
    // The EMC is only in debugfs on r36: left out, never 0.
    absent(&s, "DCGM_FI_DEV_MEM_CLOCK");
    absent(&s, "edgegpu_emc_utilization_percent");
    host.set_rail("VDD_GPU_SOC", 20_000, 2_500);
    host.set_thermal_zone("gpu-thermal", 71_500);
    let s = scrape(&src).await;
    assert_eq!(rail(&s, "VDD_GPU_SOC").0, 50.0);
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_TEMP"), 71.5);

    // Neither serial readable: the device ID.
    assert_eq!(gpu_labels(series(&s, "DCGM_FI_DEV_GPU_UTIL")[0]).1, "tegra");

    // AGX Xavier on r35: load, clock, GPU-therm and its INA3221 rails.
    let host = FakeHost::jetson(Board::Xavier);
    // The soc bus's serial comes before the device tree's.
    host.write("/sys/devices/soc0/serial_number", "0x1a2b3c4d\n");
    host.write("/proc/device-tree/serial-number", "1422919082137\0");
    let s = scrape(&metrics_of(&host, &["--discovery=tegra"], None).await).await;
    assert_eq!(
        gpu_labels(series(&s, "DCGM_FI_DEV_GPU_UTIL")[0]).1,
        "tegra-0x1a2b3c4d"
    );
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 0.0);
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_TEMP"), 43.0);
    // AGX Xavier's GPU has a rail of its own: its power is the GPU's.
    assert_eq!(one(&s, "DCGM_FI_DEV_POWER_USAGE"), 1.0);
    assert_eq!(rail(&s, "GPU"), (1.0, "true".to_string()));
    assert_eq!(rail(&s, "SOC").1, "false");
    assert_eq!(series(&s, "edgegpu_power_rail_watts").len(), 3);
}

#[tokio::test]
async fn thor_without_and_with_nvml() {
    // JetPack 7 without NVML reachable: no load file, no known GPU zone, no rails.
    let host = FakeHost::jetson(Board::Thor);
    let s = scrape(&metrics_of(&host, &["--discovery=tegra"], None).await).await;
    absent(&s, "DCGM_FI_DEV_GPU_UTIL");
    absent(&s, "DCGM_FI_DEV_GPU_TEMP");
    absent(&s, "DCGM_FI_DEV_POWER_USAGE");
    absent(&s, "edgegpu_gpu_shared_memory_used_bytes");
    assert_eq!(one(&s, "DCGM_FI_DEV_SM_CLOCK"), 306.0);
    // The bandwidth manager's devfreq node is the EMC clock.
    assert_eq!(one(&s, "DCGM_FI_DEV_MEM_CLOCK"), 4266.0);

    // With its release's NVML (`NVIDIA Thor`, JetPack 7): utilisation from NVML, the clock
    // from sysfs. The platform table says r38's NVML answers NotSupported for temperature,
    // clocks and power, so they are not asked even where the fake has a value.
    let host = FakeHost::jetson_with_nvml(Board::Thor);
    host.set_nvml_telemetry(0, &[("gpu_util", 33), ("temp", 58), ("sm_clock", 999)]);
    let src = metrics_of(&host, &[], None).await;
    let s = scrape(&src).await;
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 33.0);
    absent(&s, "DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(one(&s, "DCGM_FI_DEV_SM_CLOCK"), 306.0);
    let util = series(&s, "DCGM_FI_DEV_GPU_UTIL")[0];
    assert_eq!(
        gpu_labels(util),
        (
            "0",
            "GPU-e1c7a9d2-38f4-4b6a-9d3e-00000000b100",
            "nvidia0",
            "NVIDIA Thor",
            "node-1"
        )
    );
    host.set_nvml_telemetry(0, &[("gpu_util", 97)]);
    let s = scrape(&src).await;
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 97.0);
}

#[tokio::test]
async fn hybrid_orin_takes_from_nvml_only_what_its_release_answers() {
    // Orin NX on JetPack 7.2 (r39) with its NVML: identity from NVML (`Orin (nvgpu)`), every
    // value from sysfs; the fake NVML's values are never asked for (the table: NotSupported).
    let host = FakeHost::jetson_with_nvml(Board::OrinR39);
    host.set_nvml_telemetry(0, &[("gpu_util", 77), ("temp", 90), ("power_mw", 1)]);
    let src = metrics_of(&host, &[], None).await;
    host.set_gpu_load(250);
    let s = scrape(&src).await;
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 25.0);
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_TEMP"), 42.968);
    assert_eq!(one(&s, "DCGM_FI_DEV_SM_CLOCK"), 306.0);
    assert_eq!(
        gpu_labels(series(&s, "DCGM_FI_DEV_GPU_UTIL")[0]),
        (
            "0",
            "GPU-6a1f0c3e-39b2-5e0d-8c4f-0000000a10b1",
            "nvidia0",
            "Orin (nvgpu)",
            "node-1"
        )
    );
    // Orin NX's GPU rail also feeds the CPU and CV units: the rail, no GPU power.
    absent(&s, "DCGM_FI_DEV_POWER_USAGE");
    let (watts, feeds_gpu) = rail(&s, "VDD_CPU_GPU_CV");
    assert!(close(watts, 5.016 * 0.520), "{watts}");
    assert_eq!(feeds_gpu, "true");
    assert_eq!(rail(&s, "VDD_IN").1, "false");
    assert_eq!(rail(&s, "VDD_SOC").1, "false");
    assert_eq!(
        one(&s, "edgegpu_gpu_shared_memory_total_bytes"),
        (Board::OrinR39.mem_total_kb() * 1024) as f64
    );
    absent(&s, "DCGM_FI_DEV_MEM_CLOCK");
    // JetPack 6 (r36) Orin with its NVML: the same, through r36's table entry.
    let host = FakeHost::jetson_with_nvml(Board::Orin);
    host.set_nvml_telemetry(0, &[("gpu_util", 77)]);
    host.set_gpu_load(125);
    let s = scrape(&metrics_of(&host, &[], None).await).await;
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_UTIL"), 12.5);
    assert_eq!(one(&s, "DCGM_FI_DEV_GPU_TEMP"), 46.093);
}

#[tokio::test]
async fn discrete_series_follow_nvml() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.set_nvml_telemetry(
        0,
        &[
            ("gpu_util", 87),
            ("sm_clock", 1410),
            ("mem_clock", 1215),
            ("temp", 61),
            ("power_mw", 250_500),
            ("mem_used", 1 << 30),
        ],
    );
    // GPU 1 answers only its temperature (and memory, which NVML always has here).
    host.set_nvml_telemetry(1, &[("temp", 40)]);
    let src = metrics_of(&host, &["--discovery=nvml"], None).await;
    let s = scrape(&src).await;
    let of = |name: &str, gpu: &str| -> Option<f64> {
        series(&s, name)
            .into_iter()
            .find(|x| x.labels["gpu"] == gpu)
            .map(|x| x.value)
    };
    assert_eq!(of("DCGM_FI_DEV_GPU_UTIL", "0"), Some(87.0));
    assert_eq!(of("DCGM_FI_DEV_SM_CLOCK", "0"), Some(1410.0));
    assert_eq!(of("DCGM_FI_DEV_MEM_CLOCK", "0"), Some(1215.0));
    assert_eq!(of("DCGM_FI_DEV_GPU_TEMP", "0"), Some(61.0));
    assert_eq!(of("DCGM_FI_DEV_POWER_USAGE", "0"), Some(250.5));
    assert_eq!(of("DCGM_FI_DEV_FB_USED", "0"), Some(1024.0));
    let total_mib = gpus[0].memory_bytes as f64 / (1024.0 * 1024.0);
    assert_eq!(of("DCGM_FI_DEV_FB_FREE", "0"), Some(total_mib - 1024.0));
    assert_eq!(of("DCGM_FI_DEV_GPU_TEMP", "1"), Some(40.0));
    assert_eq!(of("DCGM_FI_DEV_GPU_UTIL", "1"), None);
    assert_eq!(of("DCGM_FI_DEV_POWER_USAGE", "1"), None);
    // The fake's default: 1 % of the memory used (integer bytes).
    let used_mib = (gpus[1].memory_bytes / 100) as f64 / (1024.0 * 1024.0);
    assert_eq!(of("DCGM_FI_DEV_FB_USED", "1"), Some(used_mib));
    let util = series(&s, "DCGM_FI_DEV_GPU_UTIL")[0];
    assert_eq!(
        gpu_labels(util),
        (
            "0",
            gpus[0].uuid.as_str(),
            "nvidia0",
            "NVIDIA A100-SXM4-40GB",
            "node-1"
        )
    );
    // No Jetson series on a server.
    absent(&s, "edgegpu_power_rail_watts");
    absent(&s, "edgegpu_gpu_shared_memory_used_bytes");

    host.set_nvml_telemetry(0, &[("gpu_util", 3), ("power_mw", 61_000)]);
    let s = scrape(&src).await;
    let util: Vec<f64> = series(&s, "DCGM_FI_DEV_GPU_UTIL")
        .iter()
        .map(|x| x.value)
        .collect();
    assert_eq!(util, vec![3.0]);
    assert_eq!(one(&s, "DCGM_FI_DEV_POWER_USAGE"), 61.0);
    // A lost GPU answers nothing: its series go, none reads 0.
    host.lose_gpu(0);
    let s = scrape(&src).await;
    absent(&s, "DCGM_FI_DEV_GPU_UTIL");
    assert_eq!(series(&s, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
}

fn pods_of<'a>(samples: &'a [Sample], name: &str) -> Vec<(&'a str, &'a str, &'a str)> {
    let mut v: Vec<_> = series(samples, name)
        .into_iter()
        .map(|s| {
            let l = |k: &str| s.labels.get(k).map(String::as_str).unwrap_or("");
            (l("namespace"), l("pod"), l("container"))
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn pod_labels_follow_the_pod_resources_api() {
    let host = FakeHost::jetson(Board::Orin);
    let (_config, config_flag) = gpu_common::time_slicing_config(4);
    let resource = gpu_common::resource(host.root(), &["--discovery=tegra", &config_flag])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    let src = source(&resource, Some(pods.socket()));
    let util = "DCGM_FI_DEV_GPU_UTIL";

    // Nobody holds the GPU: one series, no pod labels.
    let s = scrape(&src).await;
    assert_eq!(pods_of(&s, util), vec![("", "", "")]);

    // Two pods share the GPU through replicas: one series each, same value; other
    // resources and other IDs are ignored.
    pods.assign("ml", "infer-a", "app", "nvidia.com/gpu", &["tegra::0"]);
    pods.assign("ml", "infer-b", "worker", "nvidia.com/gpu", &["tegra::3"]);
    pods.assign(
        "ml",
        "infer-b",
        "sidecar",
        "example.com/fpga",
        &["tegra::1"],
    );
    host.set_gpu_load(500);
    let s = scrape(&src).await;
    assert_eq!(
        pods_of(&s, util),
        vec![("ml", "infer-a", "app"), ("ml", "infer-b", "worker")]
    );
    assert!(series(&s, util).iter().all(|x| x.value == 50.0));
    assert_eq!(pods_of(&s, "DCGM_FI_DEV_GPU_TEMP").len(), 2);
    // Jetson-only series stay per GPU.
    assert_eq!(series(&s, "edgegpu_emc_utilization_percent").len(), 0);
    assert_eq!(
        pods_of(&s, "edgegpu_gpu_shared_memory_used_bytes"),
        vec![("", "", "")]
    );

    // One pod with two replicas of the same GPU: one series for it.
    pods.remove_pod("ml", "infer-b");
    pods.assign(
        "ml",
        "infer-c",
        "app",
        "nvidia.com/gpu",
        &["tegra::1", "tegra::2"],
    );
    let s = scrape(&src).await;
    assert_eq!(
        pods_of(&s, util),
        vec![("ml", "infer-a", "app"), ("ml", "infer-c", "app")]
    );

    // Pods end: back to one unlabelled series.
    pods.remove_pod("ml", "infer-a");
    pods.remove_pod("ml", "infer-c");
    let s = scrape(&src).await;
    assert_eq!(pods_of(&s, util), vec![("", "", "")]);

    // The kubelet does not answer: series without pod labels, and the error is counted.
    pods.assign("ml", "infer-d", "app", "nvidia.com/gpu", &["tegra::0"]);
    pods.set_failing(true);
    let s = scrape(&src).await;
    assert_eq!(pods_of(&s, util), vec![("", "", "")]);
    assert_eq!(one(&s, "edgegpu_pod_resources_errors_total"), 1.0);
    pods.set_failing(false);
    let s = scrape(&src).await;
    assert_eq!(pods_of(&s, util), vec![("ml", "infer-d", "app")]);
    assert_eq!(pods.list_calls(), 6, "one List per scrape");
}

#[tokio::test]
async fn pod_labels_on_a_discrete_server() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.set_nvml_telemetry(0, &[("gpu_util", 10)]);
    host.set_nvml_telemetry(1, &[("gpu_util", 20)]);
    let resource = gpu_common::resource(host.root(), &["--discovery=nvml"])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    pods.assign(
        "team",
        "train",
        "main",
        "nvidia.com/gpu",
        &[gpus[1].uuid.as_str()],
    );
    let s = scrape(&source(&resource, Some(pods.socket()))).await;
    let by_gpu: Vec<(String, Option<String>, f64)> = series(&s, "DCGM_FI_DEV_GPU_UTIL")
        .into_iter()
        .map(|x| {
            (
                x.labels["gpu"].clone(),
                x.labels.get("pod").cloned(),
                x.value,
            )
        })
        .collect();
    assert_eq!(
        by_gpu,
        vec![
            ("0".to_string(), None, 10.0),
            ("1".to_string(), Some("train".to_string()), 20.0)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugins_own_health() {
    let host = FakeHost::jetson(Board::Orin);
    let plugin = Plugin::start(host.root(), &["--discovery=tegra"]).await;
    let src = MetricsSource::new(
        vec![plugin.resource.clone()],
        plugin.stats.clone(),
        None,
        "node-1".into(),
    );
    let stats = plugin.stats.resource("nvidia.com/gpu");
    // The kubelet records the registration before the plugin sees Register's answer.
    wait_for(|| stats.registrations() == 1).await;
    let s = scrape(&src).await;
    let with = |s: &[Sample], name: &str, key: &str, value: &str| -> f64 {
        series(s, name)
            .into_iter()
            .find(|x| x.labels.get(key).map(String::as_str) == Some(value))
            .unwrap_or_else(|| panic!("{name}{{{key}={value}}}"))
            .value
    };
    assert_eq!(one(&s, "edgegpu_registrations_total"), 1.0);
    assert_eq!(one(&s, "edgegpu_registered"), 1.0);
    assert_eq!(one(&s, "edgegpu_allocations_total"), 0.0);
    assert_eq!(one(&s, "edgegpu_gpu_healthy"), 1.0);
    assert_eq!(with(&s, "edgegpu_devices", "health", "Healthy"), 1.0);
    assert_eq!(
        with(
            &s,
            "edgegpu_reregistrations_total",
            "reason",
            "kubelet_restart"
        ),
        0.0
    );
    assert_eq!(with(&s, "edgegpu_build_info", "platform", "tegra"), 1.0);

    plugin.allocate(&["tegra"]).await.unwrap();
    // The kubelet never asks for an unknown ID; a direct call is refused and counted.
    plugin
        .resource
        .allocate(&ContainerAllocateRequest {
            devices_ids: vec!["nope".into()],
        })
        .unwrap_err();
    host.remove_node("/dev/nvmap");
    plugin.wait_health("tegra", UNHEALTHY).await;
    let s = scrape(&src).await;
    assert_eq!(one(&s, "edgegpu_allocations_total"), 1.0);
    assert_eq!(one(&s, "edgegpu_allocation_failures_total"), 1.0);
    assert_eq!(one(&s, "edgegpu_gpu_healthy"), 0.0);
    assert_eq!(with(&s, "edgegpu_devices", "health", "Unhealthy"), 1.0);
    assert_eq!(
        with(
            &s,
            "edgegpu_gpu_health_transitions_total",
            "to",
            "unhealthy"
        ),
        1.0
    );
    host.restore_node("/dev/nvmap");
    plugin.wait_health("tegra", HEALTHY).await;

    plugin.kubelet.restart().await.unwrap();
    plugin
        .kubelet
        .wait_until("re-registered", gpu_common::WAIT, |k| {
            k.resource("nvidia.com/gpu")
                .is_some_and(|r| r.registrations >= 2 && !r.stopped)
        })
        .await
        .unwrap();
    wait_for(|| stats.registrations() == 2).await;
    let s = scrape(&src).await;
    assert_eq!(one(&s, "edgegpu_registrations_total"), 2.0);
    assert_eq!(
        with(
            &s,
            "edgegpu_reregistrations_total",
            "reason",
            "kubelet_restart"
        ),
        1.0
    );
    assert_eq!(
        with(&s, "edgegpu_gpu_health_transitions_total", "to", "healthy"),
        1.0
    );
    plugin.stop().await;
}

async fn wait_for(condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + gpu_common::WAIT;
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// A raw HTTP/1.1 exchange (what Prometheus sends, without a client library).
async fn http(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn the_http_endpoint() {
    let host = FakeHost::jetson(Board::Nano);
    let resource = gpu_common::resource(host.root(), &["--discovery=tegra"])
        .await
        .unwrap();
    let listener = edgegpu_plugin::metrics::server::bind(
        edgegpu_plugin::metrics::server::BindAddress::Exact("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edgegpu_plugin::metrics::server::serve(
        listener,
        Arc::new(source(&resource, None)),
        async move {
            let _ = stopped.await;
        },
    ));
    let ok = http(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let (head, body) = ok.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(body.contains("\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\""), "{body}");
    let missing = http(
        addr,
        "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    let post = http(
        addr,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    assert!(
        post.to_ascii_lowercase().contains("allow: get, head"),
        "{post}"
    );
    let _ = stop.send(());
    server.await.unwrap();
    // Stopped: nothing listens any more.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// The `(gpu, GPU_I_ID, GPU_I_PROFILE)` of a sample ("" where absent).
fn instance(s: &Sample) -> (String, String, String) {
    let l = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
    (l("gpu"), l("GPU_I_ID"), l("GPU_I_PROFILE"))
}

fn by_instance(samples: &[Sample], name: &str) -> Vec<((String, String, String), f64)> {
    let mut v: Vec<_> = series(samples, name)
        .into_iter()
        .map(|s| (instance(s), s.value))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn key(gpu: &str, gi: &str, profile: &str) -> (String, String, String) {
    (gpu.into(), gi.into(), profile.into())
}

#[tokio::test]
async fn mig_series_per_gpu_instance_with_pods() {
    // GPU 0 split into 3g.40gb (GPU instance 1) and two 1g.10gb (5, 6); GPU 1 whole.
    let migs = FakeMig::h100_mixed();
    let (host, gpus) = FakeHost::mig_server(&[0], &migs);
    host.set_nvml_telemetry(
        0,
        &[
            ("gpu_util", 99),
            ("sm_clock", 1755),
            ("temp", 45),
            ("power_mw", 300_000),
        ],
    );
    host.set_nvml_telemetry(1, &[("gpu_util", 12), ("temp", 33)]);
    host.set_nvml_mig_telemetry(&migs[1].uuid, &[("mem_used", 2 << 30)]);
    let resources = gpu_common::resources(host.root(), &["--mig-strategy=mixed"])
        .await
        .unwrap();
    let names: Vec<&str> = resources.iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        [
            "nvidia.com/gpu",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-3g.40gb"
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    pods.assign(
        "ml",
        "small",
        "app",
        "nvidia.com/mig-1g.10gb",
        &[migs[2].uuid.as_str()],
    );
    pods.assign(
        "ml",
        "big",
        "app",
        "nvidia.com/gpu",
        &[gpus[1].uuid.as_str()],
    );
    let src = sources(&resources, Some(pods.socket()));
    let s = scrape(&src).await;

    // GPU-wide values on every GPU instance of GPU 0; GPU 1 as a whole GPU.
    assert_eq!(
        by_instance(&s, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            (key("0", "1", "3g.40gb"), 45.0),
            (key("0", "5", "1g.10gb"), 45.0),
            (key("0", "6", "1g.10gb"), 45.0),
            (key("1", "", ""), 33.0),
        ]
    );
    assert_eq!(
        by_instance(&s, "DCGM_FI_DEV_POWER_USAGE"),
        vec![
            (key("0", "1", "3g.40gb"), 300.0),
            (key("0", "5", "1g.10gb"), 300.0),
            (key("0", "6", "1g.10gb"), 300.0),
        ]
    );
    // No utilisation per GPU instance (NVML has none for a MIG-enabled GPU).
    assert_eq!(
        by_instance(&s, "DCGM_FI_DEV_GPU_UTIL"),
        vec![(key("1", "", ""), 12.0)]
    );
    // Each GPU instance's own framebuffer (the fake's default: 1 % used).
    let mib = |mig: &FakeMig| mig.memory_mib as f64;
    let one_percent = |mig: &FakeMig| (mig.memory_mib * 1024 * 1024 / 100) as f64 / 1048576.0;
    let fb_used = by_instance(&s, "DCGM_FI_DEV_FB_USED");
    assert_eq!(
        fb_used[0],
        (key("0", "1", "3g.40gb"), one_percent(&migs[0]))
    );
    assert_eq!(fb_used[1], (key("0", "5", "1g.10gb"), 2048.0));
    assert_eq!(
        fb_used[2],
        (key("0", "6", "1g.10gb"), one_percent(&migs[2]))
    );
    let fb_free = by_instance(&s, "DCGM_FI_DEV_FB_FREE");
    assert_eq!(
        fb_free[1],
        (key("0", "5", "1g.10gb"), mib(&migs[1]) - 2048.0)
    );
    // dcgm-exporter's labels: the parent's gpu, UUID and device, then the instance.
    let gi6 = series(&s, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .find(|x| instance(x) == key("0", "6", "1g.10gb"))
        .unwrap();
    assert_eq!(
        gpu_labels(gi6),
        (
            "0",
            gpus[0].uuid.as_str(),
            "nvidia0",
            "NVIDIA H100 80GB HBM3",
            "node-1"
        )
    );
    let names: Vec<&str> = gi6.labels.keys().map(String::as_str).collect();
    assert!(names.contains(&"GPU_I_PROFILE") && names.contains(&"GPU_I_ID"));
    // Pods: the 1g.10gb holder on GPU instance 6, the whole-GPU holder on GPU 1.
    let pod_of = |s: &[Sample], k: (String, String, String)| -> Vec<String> {
        series(s, "DCGM_FI_DEV_GPU_TEMP")
            .into_iter()
            .filter(|x| instance(x) == k)
            .map(|x| x.labels.get("pod").cloned().unwrap_or_default())
            .collect()
    };
    assert_eq!(pod_of(&s, key("0", "6", "1g.10gb")), ["small"]);
    assert_eq!(pod_of(&s, key("0", "5", "1g.10gb")), [""]);
    assert_eq!(pod_of(&s, key("1", "", "")), ["big"]);
    // Health and counters per GPU instance and per resource.
    assert_eq!(series(&s, "edgegpu_gpu_healthy").len(), 4);
    let per_resource: Vec<&str> = series(&s, "edgegpu_build_info")
        .iter()
        .map(|x| x.labels["resource"].as_str())
        .collect();
    assert_eq!(
        per_resource,
        [
            "nvidia.com/gpu",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-3g.40gb"
        ]
    );
    assert_eq!(series(&s, "edgegpu_registrations_total").len(), 3);
    assert_eq!(
        pods.list_calls(),
        1,
        "one List per scrape for every resource"
    );

    // The MIG geometry changes and the resources are rebuilt: the series follow.
    let new = [FakeMig::h100(0, 2, "7g.80gb")];
    host.set_mig(&gpus, &[0], &new);
    let rebuilt = gpu_common::resources(host.root(), &["--mig-strategy=mixed"])
        .await
        .unwrap();
    src.replace(rebuilt);
    let s = scrape(&src).await;
    assert_eq!(
        by_instance(&s, "DCGM_FI_DEV_GPU_TEMP"),
        vec![(key("0", "2", "7g.80gb"), 45.0), (key("1", "", ""), 33.0)]
    );
    // The pod on the GPU instance that is gone no longer shows; GPU 1's still does.
    assert!(pod_of(&s, key("0", "6", "1g.10gb")).is_empty());
    assert_eq!(pod_of(&s, key("1", "", "")), ["big"]);
    assert_eq!(pod_of(&s, key("0", "2", "7g.80gb")), [""]);
}

#[tokio::test]
async fn mig_single_and_shared_resources_are_attributed() {
    // --mig-strategy single: the MIG devices are `nvidia.com/gpu`; two GPU instances with
    // id 7 on different GPUs stay apart.
    let migs = vec![
        FakeMig::h100(0, 7, "1g.10gb"),
        FakeMig::h100(0, 8, "1g.10gb"),
        FakeMig::h100(1, 7, "1g.10gb"),
    ];
    let (host, _gpus) = FakeHost::mig_server(&[0, 1], &migs);
    host.set_nvml_telemetry(1, &[("temp", 51)]);
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    let resources = gpu_common::resources(host.root(), &["--mig-strategy=single"])
        .await
        .unwrap();
    assert_eq!(resources.len(), 1);
    pods.assign("ml", "a", "app", "nvidia.com/gpu", &[migs[2].uuid.as_str()]);
    let s = scrape(&sources(&resources, Some(pods.socket()))).await;
    let temps: Vec<((String, String, String), String)> = series(&s, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .map(|x| {
            (
                instance(x),
                x.labels.get("pod").cloned().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(temps, vec![(key("1", "7", "1g.10gb"), "a".to_string())]);
    let fb: Vec<_> = by_instance(&s, "DCGM_FI_DEV_FB_USED")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        fb,
        vec![
            key("0", "7", "1g.10gb"),
            key("0", "8", "1g.10gb"),
            key("1", "7", "1g.10gb")
        ]
    );

    // Time-sliced MIG devices renamed `.shared`: replicas of one GPU instance, two pods.
    let (_config, flag) = gpu_common::config_file(
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n",
    );
    let resources = gpu_common::resources(host.root(), &["--mig-strategy=single", &flag])
        .await
        .unwrap();
    assert_eq!(resources[0].name(), "nvidia.com/gpu.shared");
    let replica = |n: u32| format!("{}::{n}", migs[0].uuid);
    pods.remove_pod("ml", "a");
    pods.assign("ml", "b", "app", "nvidia.com/gpu.shared", &[&replica(0)]);
    pods.assign("ml", "c", "app", "nvidia.com/gpu.shared", &[&replica(2)]);
    // The same IDs under the unrenamed name are someone else's resource.
    pods.assign("ml", "d", "app", "nvidia.com/gpu", &[&replica(1)]);
    let s = scrape(&sources(&resources, Some(pods.socket()))).await;
    let held: Vec<(String, String)> = series(&s, "DCGM_FI_DEV_FB_USED")
        .into_iter()
        .filter(|x| x.labels.contains_key("pod"))
        .map(|x| (x.labels["GPU_I_ID"].clone(), x.labels["pod"].clone()))
        .collect();
    assert_eq!(
        held,
        vec![
            ("7".to_string(), "b".to_string()),
            ("7".to_string(), "c".to_string())
        ]
    );
    assert_eq!(
        series(&s, "edgegpu_build_info")[0].labels["resource"],
        "nvidia.com/gpu.shared"
    );
}

#[tokio::test]
async fn r470_without_memory_info_v2_still_has_framebuffer_series() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete_r470(&gpus);
    let s = scrape(&metrics_of(&host, &["--discovery=nvml"], None).await).await;
    let used = series(&s, "DCGM_FI_DEV_FB_USED");
    assert_eq!(used.len(), 2);
    // The fake's default: 1 % of the memory used (nvmlDeviceGetMemoryInfo, version 1).
    let used_mib = (gpus[0].memory_bytes / 100) as f64 / (1024.0 * 1024.0);
    assert_eq!(used[0].value, used_mib);
    assert_eq!(series(&s, "DCGM_FI_DEV_FB_FREE").len(), 2);
}

// Per-pod GPU memory, through the real binary: its `/metrics` over HTTP, with the fake host's
// processes (fake NVML or nvmap debugfs), their cgroups, the kubelet's checkpoint in the
// device-plugin directory and the fake pod-resources server.

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const USED: &str = "edgegpu_pod_gpu_memory_used_bytes";
const LIMIT: &str = "edgegpu_pod_gpu_memory_limit_bytes";
const UNATTRIBUTED: &str = "edgegpu_gpu_memory_unattributed_bytes";

/// The plugin binary serving `host` (registered with a fake kubelet in the host's
/// device-plugin directory), its metrics on a port it picked.
struct RunningPlugin {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    log: Arc<std::sync::Mutex<String>>,
    _kubelet: edgegpu_testkit::kubelet::FakeKubelet,
}

impl RunningPlugin {
    async fn start(host: &FakeHost, pod_resources: &Path, args: &[&str]) -> RunningPlugin {
        use std::io::BufRead;
        let dir = host.device_plugin_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let kubelet = edgegpu_testkit::kubelet::FakeKubelet::start(&dir)
            .await
            .unwrap();
        let mut child = edgegpu_testkit::process::binary_command(
            edgegpu_testkit::process::program("edgegpu-device-plugin"),
        )
        .arg("--root")
        .arg(host.root())
        .arg("--device-plugin-path")
        .arg(&dir)
        .arg("--pod-resources-socket")
        .arg(pod_resources)
        .args([
            "--metrics-bind-address=127.0.0.1:0",
            "--node-name=node-1",
            "--feature-file=",
        ])
        .args(args)
        .env("EDGEGPU_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
        // The log names the port; the rest of it is kept for the test's messages.
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(rest) = line.split("Serving metrics on http://").nth(1) {
                    let addr = rest.trim_end_matches("/metrics").trim().to_string();
                    let _ = tx.send(addr);
                }
                keep.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let addr = rx
            .recv_timeout(gpu_common::WAIT)
            .unwrap_or_else(|_| panic!("no metrics address in the log:\n{}", log.lock().unwrap()))
            .parse()
            .unwrap();
        RunningPlugin {
            child,
            addr,
            log,
            _kubelet: kubelet,
        }
    }

    /// `GET /metrics`: must answer 200; the body checked by Prometheus' parser, then parsed.
    async fn scrape(&self) -> Vec<Sample> {
        let response = http(
            self.addr,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        // HTTP/1.1 chunked bodies are not expected: hyper sends a Content-Length for a String.
        prometheus_parses(body);
        parse(body)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGTERM: the plugin must exit cleanly.
    fn terminate(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}\n{}", self.log());
    }
}

impl Drop for RunningPlugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(gpu, namespace, pod, container)` → value of every sample of `name`.
fn per_pod(samples: &[Sample], name: &str) -> BTreeMap<(String, String, String, String), f64> {
    series(samples, name)
        .into_iter()
        .map(|s| {
            let l = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
            (
                (l("gpu"), l("namespace"), l("pod"), l("container")),
                s.value,
            )
        })
        .collect()
}

fn pod_key(gpu: &str, pod: &str, container: &str) -> (String, String, String, String) {
    (gpu.into(), "ml".into(), pod.into(), container.into())
}

/// `gpu` → unattributed bytes.
fn unattributed(samples: &[Sample]) -> BTreeMap<String, f64> {
    series(samples, UNATTRIBUTED)
        .into_iter()
        .map(|s| (s.labels["gpu"].clone(), s.value))
        .collect()
}

const UID_A: &str = "0c8a5e7d-1f2b-4c3d-9e8f-a1b2c3d4e5f6";
const UID_B: &str = "7d2e9f10-3a4b-4c5d-8e6f-0a1b2c3d4e5f";
const UID_C: &str = "a3b4c5d6-e7f8-4a9b-8c0d-1e2f3a4b5c6d";
/// A pod that holds none of our devices (its process is not any GPU pod's).
const UID_OTHER: &str = "f0e1d2c3-b4a5-4968-8776-655443322110";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_gpu_memory_on_a_discrete_server() {
    // Two pods share GPU 0 through time-slicing replicas; a third holds a replica of GPU 1.
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let (_config, config_flag) = gpu_common::time_slicing_config(4);
    let replica = |gpu: usize, n: u32| format!("{}::{n}", gpus[gpu].uuid);
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("pod-resources.sock"))
        .await
        .unwrap();
    pods.assign("ml", "a", "app", "nvidia.com/gpu", &[&replica(0, 0)]);
    pods.assign("ml", "b", "worker", "nvidia.com/gpu", &[&replica(0, 1)]);
    pods.assign("ml", "b", "sidecar", "example.com/fpga", &["f0"]);
    pods.assign("ml", "c", "app", "nvidia.com/gpu", &[&replica(1, 2)]);
    let entries = [
        CheckpointEntry::new(UID_A, "app", "nvidia.com/gpu", &[&replica(0, 0)]),
        CheckpointEntry::new(UID_B, "worker", "nvidia.com/gpu", &[&replica(0, 1)]),
        CheckpointEntry::new(UID_B, "sidecar", "example.com/fpga", &["f0"]),
        CheckpointEntry::new(UID_C, "app", "nvidia.com/gpu", &[&replica(1, 2)]),
    ];
    host.write_kubelet_checkpoint(&entries, CheckpointShape::PerNumaNode);
    // GPU 0: pod a's process (systemd driver, cgroup v2), pod b's two (cgroupfs, v1), the
    // MPS server or any host process (a systemd service), a process of a pod holding none of
    // our devices, and one that ended before its cgroup was read (no /proc entry).
    host.set_nvml_processes(
        0,
        &[
            (1001, Some(3 * GIB)),
            (1002, Some(GIB)),
            (1003, Some(512 * MIB)),
            (1004, Some(256 * MIB)),
            (1005, Some(128 * MIB)),
            (1006, Some(64 * MIB)),
        ],
    );
    host.set_nvml_processes(1, &[]);
    host.put_process_in_pod(
        1001,
        UID_A,
        "burstable",
        CgroupDriver::Systemd,
        CgroupVersion::V2,
    );
    for pid in [1002, 1003] {
        host.put_process_in_pod(
            pid,
            UID_B,
            "besteffort",
            CgroupDriver::Cgroupfs,
            CgroupVersion::V1,
        );
    }
    host.put_process_in_cgroup(1004, "/system.slice/nvidia-mps.service", CgroupVersion::V2);
    host.put_process_in_pod(
        1005,
        UID_OTHER,
        "guaranteed",
        CgroupDriver::Systemd,
        CgroupVersion::V2,
    );

    let plugin = RunningPlugin::start(&host, pods.socket(), &[&config_flag]).await;
    let expected_used = BTreeMap::from([
        (pod_key("0", "a", "app"), (3 * GIB) as f64),
        (pod_key("0", "b", "worker"), (GIB + 512 * MIB) as f64),
        // Pod c holds GPU 1, where nothing runs.
        (pod_key("1", "c", "app"), 0.0),
    ]);
    let expected_unattributed = BTreeMap::from([
        ("0".to_string(), ((256 + 128 + 64) * MIB) as f64),
        ("1".to_string(), 0.0),
    ]);
    let s = plugin.scrape().await;
    assert_eq!(per_pod(&s, USED), expected_used, "{}", plugin.log());
    assert_eq!(unattributed(&s), expected_unattributed);
    // The per-GPU labels, as on the GPU's other series.
    let a = series(&s, USED)
        .into_iter()
        .find(|x| x.labels["pod"] == "a")
        .unwrap();
    assert_eq!(
        gpu_labels(a),
        (
            "0",
            gpus[0].uuid.as_str(),
            "nvidia0",
            "NVIDIA A100-SXM4-40GB",
            "node-1"
        )
    );
    // No resource gives a limit yet: no limit series.
    absent(&s, LIMIT);

    // A kubelet of 1.19 or older writes the IDs as a plain list: the same answer.
    host.write_kubelet_checkpoint(&entries, CheckpointShape::ListBefore1_20);
    let s = plugin.scrape().await;
    assert_eq!(per_pod(&s, USED), expected_used);
    assert_eq!(unattributed(&s), expected_unattributed);

    // NVML does not give one of pod b's processes' memory: b's figure is left out, never
    // undercounted.
    host.set_nvml_processes(0, &[(1001, Some(3 * GIB)), (1002, Some(GIB)), (1003, None)]);
    let s = plugin.scrape().await;
    assert_eq!(
        per_pod(&s, USED),
        BTreeMap::from([
            (pod_key("0", "a", "app"), (3 * GIB) as f64),
            (pod_key("1", "c", "app"), 0.0),
        ])
    );
    assert_eq!(unattributed(&s)["0"], 0.0);

    // No checkpoint (a kubelet that has not written it): no per-pod series, every process
    // unattributed, the scrape still whole.
    host.remove_kubelet_checkpoint();
    let s = plugin.scrape().await;
    absent(&s, USED);
    assert_eq!(unattributed(&s)["0"], (4 * GIB) as f64);
    assert_eq!(series(&s, "DCGM_FI_DEV_FB_USED").len(), 3, "{s:?}");
    assert!(plugin.log().contains("device manager checkpoint"));
    plugin.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_gpu_memory_on_an_orin_from_nvmap() {
    // JetPack 6 Orin with its NVML (identity only): the processes come from nvmap's debugfs.
    let host = FakeHost::jetson_with_nvml(Board::Orin);
    let (_config, config_flag) = gpu_common::time_slicing_config(4);
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("pod-resources.sock"))
        .await
        .unwrap();
    pods.assign("ml", "a", "infer", "nvidia.com/gpu", &["tegra::0"]);
    pods.assign(
        "ml",
        "b",
        "infer",
        "nvidia.com/gpu",
        &["tegra::1", "tegra::2"],
    );
    host.write_kubelet_checkpoint(
        &[
            CheckpointEntry::new(UID_A, "infer", "nvidia.com/gpu", &["tegra::0"]),
            CheckpointEntry::new(UID_B, "infer", "nvidia.com/gpu", &["tegra::1", "tegra::2"]),
        ],
        CheckpointShape::ListBefore1_20,
    );
    // Pod a: cgroupfs driver on cgroup v2 (k3s); pod b: systemd on v1, two processes (one
    // with two nvmap clients); nvargus-daemon on the host.
    host.put_process_in_pod(
        2001,
        UID_A,
        "burstable",
        CgroupDriver::Cgroupfs,
        CgroupVersion::V2,
    );
    for pid in [2002, 2003] {
        host.put_process_in_pod(
            pid,
            UID_B,
            "guaranteed",
            CgroupDriver::Systemd,
            CgroupVersion::V1,
        );
    }
    host.put_process_in_cgroup(
        2004,
        "/system.slice/nvargus-daemon.service",
        CgroupVersion::V1,
    );
    host.write_nvmap_maps(&[
        ("python3", 2001, 1_572_864),
        ("trtexec", 2002, 524_288),
        ("trtexec", 2002, 4096),
        ("gst-launch-1.0", 2003, 65_536),
        ("nvargus-daemon", 2004, 32_768),
    ]);
    let plugin = RunningPlugin::start(&host, pods.socket(), &[&config_flag]).await;
    let s = plugin.scrape().await;
    assert_eq!(
        per_pod(&s, USED),
        BTreeMap::from([
            (pod_key("0", "a", "infer"), (1_572_864u64 * 1024) as f64),
            (
                pod_key("0", "b", "infer"),
                ((524_288u64 + 4096 + 65_536) * 1024) as f64
            ),
        ]),
        "{}",
        plugin.log()
    );
    assert_eq!(
        unattributed(&s),
        BTreeMap::from([("0".to_string(), (32_768u64 * 1024) as f64)])
    );
    assert_eq!(
        gpu_labels(series(&s, USED)[0]),
        (
            "0",
            "GPU-00000000-0000-0000-0000-0000000a10b0",
            "nvidia0",
            "Orin (nvgpu)",
            "node-1"
        )
    );

    // debugfs not mounted (the DaemonSets' default): no per-process figures, so no per-pod
    // or unattributed series; the rest of the scrape is there.
    host.remove_nvmap_maps();
    let s = plugin.scrape().await;
    absent(&s, USED);
    absent(&s, UNATTRIBUTED);
    assert_eq!(series(&s, "DCGM_FI_DEV_GPU_UTIL").len(), 2);
    plugin.terminate();
}

/// `(gpu, GPU_I_ID, pod, container)` → value of every sample of `name`.
fn per_instance_pod(
    samples: &[Sample],
    name: &str,
) -> BTreeMap<(String, String, String, String), f64> {
    series(samples, name)
        .into_iter()
        .map(|s| {
            let l = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
            ((l("gpu"), l("GPU_I_ID"), l("pod"), l("container")), s.value)
        })
        .collect()
}

fn instance_pod(
    gpu: &str,
    gi: &str,
    pod: &str,
    container: &str,
) -> (String, String, String, String) {
    (gpu.into(), gi.into(), pod.into(), container.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_gpu_memory_per_mig_instance_and_on_thor() {
    // A MIG server under `mixed`: a pod on GPU instance 5, another on the whole GPU 1. A MIG
    // device's processes are its own (NVML's query on the MIG device handle).
    let migs = FakeMig::h100_mixed();
    let (host, gpus) = FakeHost::mig_server(&[0], &migs);
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    pods.assign(
        "ml",
        "small",
        "app",
        "nvidia.com/mig-1g.10gb",
        &[&migs[1].uuid],
    );
    pods.assign("ml", "big", "app", "nvidia.com/gpu", &[&gpus[1].uuid]);
    host.write_kubelet_checkpoint(
        &[
            CheckpointEntry::new(UID_A, "app", "nvidia.com/mig-1g.10gb", &[&migs[1].uuid]),
            CheckpointEntry::new(UID_B, "app", "nvidia.com/gpu", &[&gpus[1].uuid]),
        ],
        CheckpointShape::PerNumaNode,
    );
    host.set_nvml_mig_processes(&migs[1].uuid, &[(3001, Some(2 * GIB))]);
    host.set_nvml_mig_processes(&migs[2].uuid, &[(3003, Some(MIB))]);
    host.set_nvml_processes(1, &[(3002, Some(5 * GIB))]);
    host.put_process_in_pod(
        3001,
        UID_A,
        "besteffort",
        CgroupDriver::Systemd,
        CgroupVersion::V2,
    );
    host.put_process_in_pod(
        3002,
        UID_B,
        "burstable",
        CgroupDriver::Systemd,
        CgroupVersion::V2,
    );
    let resources = gpu_common::resources(host.root(), &["--mig-strategy=mixed"])
        .await
        .unwrap();
    let src = sources(&resources, Some(pods.socket()))
        .with_checkpoint(host.device_plugin_dir().join("kubelet_internal_checkpoint"));
    let s = scrape(&src).await;
    assert_eq!(
        per_instance_pod(&s, USED),
        BTreeMap::from([
            (instance_pod("0", "5", "small", "app"), (2 * GIB) as f64),
            (instance_pod("1", "", "big", "app"), (5 * GIB) as f64),
        ])
    );
    // Every GPU instance has its own figure; instance 6's process is nobody's.
    assert_eq!(
        per_instance_pod(&s, UNATTRIBUTED),
        BTreeMap::from([
            (instance_pod("0", "1", "", ""), 0.0),
            (instance_pod("0", "5", "", ""), 0.0),
            (instance_pod("0", "6", "", ""), MIB as f64),
            (instance_pod("1", "", "", ""), 0.0),
        ])
    );
    let small = series(&s, USED)
        .into_iter()
        .find(|x| x.labels["pod"] == "small")
        .unwrap();
    assert_eq!(small.labels["GPU_I_PROFILE"], "1g.10gb");

    // Thor (OpenRM): no nvmap, NVML lists the processes. Two containers of one pod hold
    // replicas of the GPU: its process cannot be pinned on either, so it counts for the pod.
    let host = FakeHost::jetson_with_nvml(Board::Thor);
    let (_config, config_flag) = gpu_common::time_slicing_config(4);
    pods.remove_pod("ml", "small");
    pods.remove_pod("ml", "big");
    pods.assign("ml", "two", "x", "nvidia.com/gpu", &["tegra::0"]);
    pods.assign("ml", "two", "y", "nvidia.com/gpu", &["tegra::1"]);
    pods.assign("ml", "one", "app", "nvidia.com/gpu", &["tegra::2"]);
    host.write_kubelet_checkpoint(
        &[
            CheckpointEntry::new(UID_A, "x", "nvidia.com/gpu", &["tegra::0"]),
            CheckpointEntry::new(UID_A, "y", "nvidia.com/gpu", &["tegra::1"]),
            CheckpointEntry::new(UID_C, "app", "nvidia.com/gpu", &["tegra::2"]),
        ],
        CheckpointShape::PerNumaNode,
    );
    host.set_nvml_processes(0, &[(4001, Some(GIB)), (4002, Some(2 * GIB))]);
    host.put_process_in_pod(
        4001,
        UID_A,
        "burstable",
        CgroupDriver::Cgroupfs,
        CgroupVersion::V2,
    );
    host.put_process_in_pod(
        4002,
        UID_C,
        "burstable",
        CgroupDriver::Cgroupfs,
        CgroupVersion::V2,
    );
    let resource = gpu_common::resource(host.root(), &[&config_flag])
        .await
        .unwrap();
    let src = source(&resource, Some(pods.socket()))
        .with_checkpoint(host.device_plugin_dir().join("kubelet_internal_checkpoint"));
    let s = scrape(&src).await;
    assert_eq!(
        per_instance_pod(&s, USED),
        BTreeMap::from([
            (instance_pod("0", "", "one", "app"), (2 * GIB) as f64),
            // Both containers hold the GPU and use nothing the plugin can pin on them...
            (instance_pod("0", "", "two", "x"), 0.0),
            (instance_pod("0", "", "two", "y"), 0.0),
            // ...and the pod's process is counted for the pod alone.
            (instance_pod("0", "", "two", ""), GIB as f64),
        ])
    );
    assert_eq!(
        gpu_labels(series(&s, USED)[0]).1,
        "GPU-e1c7a9d2-38f4-4b6a-9d3e-00000000b100"
    );
}

#[tokio::test]
async fn processes_nvml_does_not_list_leave_the_gpu_without_memory_series() {
    // GPU 1's driver answers NOT_SUPPORTED for its processes: "unknown", not "no process".
    let mut gpus = FakeGpu::two_on_two_numa_nodes();
    gpus[1].unsupported = "processes";
    let host = FakeHost::discrete(&gpus);
    host.set_nvml_processes(0, &[(5001, Some(GIB))]);
    host.set_nvml_processes(1, &[(5002, Some(GIB))]);
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    pods.assign("ml", "a", "app", "nvidia.com/gpu", &[&gpus[0].uuid]);
    pods.assign("ml", "b", "app", "nvidia.com/gpu", &[&gpus[1].uuid]);
    host.write_kubelet_checkpoint(
        &[
            CheckpointEntry::new(UID_A, "app", "nvidia.com/gpu", &[&gpus[0].uuid]),
            CheckpointEntry::new(UID_B, "app", "nvidia.com/gpu", &[&gpus[1].uuid]),
        ],
        CheckpointShape::PerNumaNode,
    );
    for (pid, uid) in [(5001, UID_A), (5002, UID_B)] {
        host.put_process_in_pod(
            pid,
            uid,
            "besteffort",
            CgroupDriver::Systemd,
            CgroupVersion::V2,
        );
    }
    let resource = gpu_common::resource(host.root(), &["--discovery=nvml"])
        .await
        .unwrap();
    let src = source(&resource, Some(pods.socket()))
        .with_checkpoint(host.device_plugin_dir().join("kubelet_internal_checkpoint"));
    let s = scrape(&src).await;
    assert_eq!(
        per_pod(&s, USED),
        BTreeMap::from([(pod_key("0", "a", "app"), GIB as f64)])
    );
    assert_eq!(unattributed(&s), BTreeMap::from([("0".to_string(), 0.0)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_outside_the_host_pid_namespace_does_not_claim_idle_gpus() {
    // The host's /proc says this process has a PID in the host's namespace and one in its
    // own: NVML would list none of the pods' processes, so the GPU's used memory is unknown,
    // not 0.
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.set_nvml_processes(0, &[(5001, Some(GIB))]);
    host.write(
        "/proc/self/status",
        "Name:\tedgegpu-device-\nNSpid:\t4242\t7\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("kubelet.sock"))
        .await
        .unwrap();
    pods.assign("ml", "a", "app", "nvidia.com/gpu", &[&gpus[0].uuid]);
    host.write_kubelet_checkpoint(
        &[CheckpointEntry::new(
            UID_A,
            "app",
            "nvidia.com/gpu",
            &[&gpus[0].uuid],
        )],
        CheckpointShape::PerNumaNode,
    );
    host.put_process_in_pod(
        5001,
        UID_A,
        "besteffort",
        CgroupDriver::Systemd,
        CgroupVersion::V2,
    );
    let resource = gpu_common::resource(host.root(), &["--discovery=nvml"])
        .await
        .unwrap();
    let src = source(&resource, Some(pods.socket()))
        .with_checkpoint(host.device_plugin_dir().join("kubelet_internal_checkpoint"));
    let s = scrape(&src).await;
    assert_eq!(per_pod(&s, USED), BTreeMap::new());
    assert_eq!(unattributed(&s), BTreeMap::new());
    // In the host's namespace the same host reads the process.
    host.write(
        "/proc/self/status",
        "Name:\tedgegpu-device-\nNSpid:\t4242\n",
    );
    let resource = gpu_common::resource(host.root(), &["--discovery=nvml"])
        .await
        .unwrap();
    let src = source(&resource, Some(pods.socket()))
        .with_checkpoint(host.device_plugin_dir().join("kubelet_internal_checkpoint"));
    let s = scrape(&src).await;
    assert_eq!(
        per_pod(&s, USED),
        BTreeMap::from([(pod_key("0", "a", "app"), GIB as f64)])
    );
}

/// `edgegpu_gpu_throttle_seconds_total{reason}` of the pod holding the GPU.
fn throttled(samples: &[Sample], reason: &str) -> f64 {
    let found: Vec<_> = series(samples, "edgegpu_gpu_throttle_seconds_total")
        .into_iter()
        .filter(|s| s.labels["reason"] == reason)
        .collect();
    assert_eq!(found.len(), 1, "{reason}: {found:?}");
    assert_eq!(
        (
            found[0].labels["pod"].as_str(),
            found[0].labels["gpu"].as_str()
        ),
        ("a", "0")
    );
    found[0].value
}

impl RunningPlugin {
    /// Scrapes until `done` holds (the throttling sampler looks once a second).
    async fn scrape_until(&self, what: &str, done: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
        let deadline = std::time::Instant::now() + gpu_common::WAIT;
        loop {
            let s = self.scrape().await;
            if done(&s) {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: timed out\n{}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

/// An AGX Orin's power series: the mode in force, the GPU's ceilings and clock floor, the
/// zones against their nearest trip point, and the seconds the busy GPU ran below its
/// highest clock per reason, attributed to the pod holding the GPU. `nvpmodel -m` and a
/// passive trip point reached show without a restart; an idle GPU is not throttled.
#[tokio::test]
async fn power_mode_ceilings_and_throttling_on_an_orin() {
    let host = FakeHost::jetson(Board::Orin);
    host.set_thermal_trip("gpu-thermal", 0, "passive", 99_000);
    host.set_thermal_trip("gpu-thermal", 1, "critical", 105_000);
    let dir = tempfile::tempdir().unwrap();
    let pods = FakePodResources::start(&dir.path().join("pod-resources.sock"))
        .await
        .unwrap();
    pods.assign("ml", "a", "infer", "nvidia.com/gpu", &["tegra"]);
    let plugin = RunningPlugin::start(&host, pods.socket(), &[]).await;

    // Orin's boot default, MODE_30W (id 2): its GPU limit, enforced by devfreq.
    let s = plugin.scrape().await;
    let mode = series(&s, "edgegpu_jetson_power_mode");
    assert_eq!(mode.len(), 1, "{}", plugin.log());
    assert_eq!(
        (
            mode[0].labels["mode"].as_str(),
            mode[0].labels["id"].as_str()
        ),
        ("MODE_30W", "2")
    );
    assert_eq!(one(&s, "edgegpu_gpu_clock_ceiling_hertz"), 624_750_000.0);
    assert_eq!(one(&s, "edgegpu_gpu_clock_limit_hertz"), 624_750_000.0);
    assert_eq!(one(&s, "edgegpu_gpu_clock_max_hertz"), 1_300_500_000.0);
    assert_eq!(one(&s, "edgegpu_jetson_clocks_pinned"), 0.0);
    let gpu_zone = |s: &[Sample], name: &str| -> Vec<(String, f64)> {
        series(s, name)
            .into_iter()
            .filter(|x| x.labels["zone"] == "gpu-thermal")
            .map(|x| (x.labels.get("type").cloned().unwrap_or_default(), x.value))
            .collect()
    };
    assert_eq!(
        gpu_zone(&s, "edgegpu_thermal_zone_temperature_celsius"),
        [(String::new(), 46.093)]
    );
    assert_eq!(
        gpu_zone(&s, "edgegpu_thermal_zone_next_trip_celsius"),
        [("passive".to_string(), 99.0)]
    );
    // Only zones with a passive trip point can throttle.
    assert_eq!(one(&s, "edgegpu_thermal_zone_throttling"), 0.0);
    // Idle at 306 MHz: not throttled.
    for reason in ["thermal", "power_mode", "clocks_not_pinned", "other"] {
        assert_eq!(throttled(&s, reason), 0.0, "{reason}");
    }

    // Busy at the mode's ceiling: the power mode holds it below 1.3 GHz.
    host.set_gpu_load(800);
    host.set_gpu_frequency(624_750_000);
    plugin
        .scrape_until("power_mode", |s| throttled(s, "power_mode") >= 1.0)
        .await;

    // `nvpmodel -m 0`: MAXN, whose ceiling is the hardware's; at 624 MHz the governor's
    // choice now, as jetson_clocks is off.
    host.set_power_mode(Board::Orin, 0, 1_300_500_000);
    let s = plugin
        .scrape_until("clocks_not_pinned", |s| {
            throttled(s, "clocks_not_pinned") >= 1.0
        })
        .await;
    let mode = series(&s, "edgegpu_jetson_power_mode");
    assert_eq!(
        (
            mode[0].labels["mode"].as_str(),
            mode[0].labels["id"].as_str()
        ),
        ("MAXN", "0")
    );
    assert_eq!(one(&s, "edgegpu_gpu_clock_ceiling_hertz"), 1_300_500_000.0);

    // The GPU zone reaches its passive trip point: thermal, whatever else holds.
    let before = throttled(&s, "power_mode");
    host.set_thermal_zone("gpu-thermal", 99_500);
    let s = plugin
        .scrape_until("thermal", |s| throttled(s, "thermal") >= 1.0)
        .await;
    assert_eq!(one(&s, "edgegpu_thermal_zone_throttling"), 1.0);
    assert_eq!(
        gpu_zone(&s, "edgegpu_thermal_zone_next_trip_celsius"),
        [("critical".to_string(), 105.0)]
    );
    assert_eq!(throttled(&s, "power_mode"), before, "a counter only grows");
    plugin.terminate();
}
