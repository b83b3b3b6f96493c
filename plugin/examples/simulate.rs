//! See the device plugin work without a GPU or a kubelet:
//!
//! ```text
//! cargo run -p edgegpu-plugin --example simulate [-- --board nano|xavier|orin|thor|dgpu] [--verbose] [-- PLUGIN FLAGS…]
//! ```
//!
//! Builds a simulated host root (a Jetson Orin on L4T r36 by default) in a temporary
//! directory, starts the testkit's fake kubelet and the real plugin (command-line parsing,
//! GPU discovery, `serve`) in this process, and prints what a node operator wants to know:
//! what was detected and why, the registration, the advertised devices, the Allocate answer
//! a pod would get, the node labels, a Prometheus scrape of `/metrics` with that pod
//! attributed (through a fake pod-resources API), and a health loss and recovery. Then it
//! shuts down and exits 0.
//! Plugin flags after a second `--` replace the default `--pass-device-specs`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use edgegpu_kubelet_api::v1beta1::{Device, HEALTHY, UNHEALTHY};
use edgegpu_plugin::gpu::discovery::Platform;
use edgegpu_plugin::metrics::{self, MetricsSource};
use edgegpu_plugin::{build_gpu_resource, labels, GpuResource};
use edgegpu_plugin::{serve, Cli};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost};
use edgegpu_testkit::kubelet::FakeKubelet;
use edgegpu_testkit::pod_resources::FakePodResources;

const WAIT: Duration = Duration::from_secs(30);

struct Args {
    board: Option<Board>,
    verbose: bool,
    plugin_flags: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        board: Some(Board::Orin),
        verbose: false,
        plugin_flags: vec!["--pass-device-specs".into()],
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--board" => {
                let b = it.next().ok_or("--board needs a value")?;
                args.board = match b.as_str() {
                    "dgpu" => None,
                    name => Some(Board::from_name(name).ok_or(format!(
                        "unknown board {name}; use nano, xavier, orin, thor or dgpu"
                    ))?),
                };
            }
            "--verbose" | "-v" => args.verbose = true,
            "--" => {
                args.plugin_flags = it.by_ref().collect();
            }
            "--help" | "-h" => {
                println!(
                    "usage: cargo run -p edgegpu-plugin --example simulate -- [OPTIONS] [-- PLUGIN FLAGS…]

Runs the real device plugin against a simulated host and an in-process fake kubelet, and
prints detection, registration, devices, an allocation and a health loss/recovery.

options:
  --board BOARD   nano    Jetson Nano devkit, T210, L4T r32.7.6 (JetPack 4.6.6)
                  xavier  Jetson AGX Xavier, T194, L4T r35.4.1 (JetPack 5.1.2)
                  orin    Jetson AGX Orin devkit, T234, L4T r36.4.3 (JetPack 6.2) [default]
                  thor    Jetson AGX Thor devkit, T264, L4T r38.2.1 (JetPack 7.0)
                  dgpu    x86_64/arm64 server, 2 GPUs on 2 NUMA nodes (fake libnvidia-ml)
  --verbose, -v   show the plugin's info logs (default: warnings only)
  -- FLAGS…       plugin flags (see edgegpu-device-plugin --help) instead of the default
                  --pass-device-specs, e.g. -- --device-list-strategy=cdi-cri --device-id-strategy=index"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (see --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("simulate: {e}");
            return ExitCode::from(2);
        }
    };
    // The example narrates health transitions itself; their warnings would repeat it.
    let level = if args.verbose {
        "info"
    } else {
        "warn,edgegpu_plugin::gpu::health=error"
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(level))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match runtime.block_on(simulate(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("simulate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn health_line(d: &Device) -> String {
    let numa = match &d.topology {
        Some(t) => format!(
            "NUMA node {}",
            t.nodes
                .iter()
                .map(|n| n.id.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        None => "no NUMA topology".into(),
    };
    format!("{:<44} {:<10} {numa}", d.id, d.health)
}

fn show_detection(resource: &GpuResource) {
    println!("Detection");
    match resource.platform() {
        Some(Platform::Tegra {
            detection,
            nvml_name,
        }) => {
            println!("  platform      tegra (Jetson integrated GPU, no NVML needed)");
            println!(
                "  board         {}",
                detection.model.as_deref().unwrap_or("unknown")
            );
            if let Some(m) = &detection.module {
                println!(
                    "  module        {m} ({})",
                    detection.module_name.unwrap_or("unknown product")
                );
            }
            match detection.generation {
                Some(g) => println!(
                    "  SoC           {} (from {})",
                    g.name,
                    detection.generation_from.unwrap_or("-")
                ),
                None => println!("  SoC           unknown generation"),
            }
            println!(
                "  L4T           {}",
                detection.l4t.as_deref().unwrap_or("unknown")
            );
            if let Some(n) = nvml_name {
                println!("  NVML          reports `{n}` (JetPack 6+), served as the Tegra GPU");
            }
            println!("  signals matched:");
            for s in &detection.signals {
                let mut value = s.value.clone();
                if value.len() > 60 {
                    value.truncate(57);
                    value.push_str("...");
                }
                println!("    {:<50} {}", s.path, s.meaning);
                println!("    {:<50}   = {value:?}", "");
            }
        }
        Some(Platform::Nvml) => {
            println!("  platform      nvml (discrete GPUs)");
            for g in resource.gpus() {
                println!(
                    "  GPU {}         {} {}, {} GiB, PCI {}, NUMA node {}",
                    g.index,
                    g.uuid,
                    g.name,
                    g.memory_bytes.unwrap_or(0) / (1 << 30),
                    g.pci_bus_id.as_deref().unwrap_or("-"),
                    g.numa_node.map(|n| n.to_string()).unwrap_or("-".into())
                );
            }
        }
        None => println!("  platform      none (no GPU found; running with zero devices)"),
    }
    println!();
}

async fn simulate(args: Args) -> anyhow::Result<()> {
    let host = match args.board {
        Some(board) => FakeHost::jetson(board),
        None => FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes()),
    };
    // Something for the scrape to show: a busy GPU.
    match args.board {
        Some(board) if board.load_file().is_some() => host.set_gpu_load(420),
        Some(_) => {}
        None => {
            for gpu in 0..2 {
                host.set_nvml_telemetry(
                    gpu,
                    &[
                        ("gpu_util", 42),
                        ("sm_clock", 1410),
                        ("mem_clock", 1215),
                        ("temp", 55),
                        ("power_mw", 182_000),
                    ],
                );
            }
        }
    }
    let title = match args.board {
        Some(b) => format!("simulated {} (L4T {})", b.model(), b.l4t()),
        None => "simulated discrete-GPU server (2 GPUs, 2 NUMA nodes, fake NVML)".into(),
    };
    println!("edgegpu device plugin: {title}");
    println!("host root: {}\n", host.root().display());

    let plugin_dir = tempfile::Builder::new()
        .prefix("device-plugins-")
        .tempdir()?;
    let kubelet = FakeKubelet::start(plugin_dir.path()).await?;

    // The real command line, as the DaemonSet would pass it.
    let mut argv = vec![
        "edgegpu-device-plugin".to_string(),
        "--root".into(),
        host.root().display().to_string(),
        "--device-plugin-path".into(),
        plugin_dir.path().display().to_string(),
    ];
    argv.extend(args.plugin_flags.iter().cloned());
    let cli = Cli::try_parse_from(&argv)?;
    println!("plugin flags: {}\n", args.plugin_flags.join(" "));

    let resource = build_gpu_resource(&cli.root, &cli.resource_name, &cli.gpu).await?;
    show_detection(&resource);

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = cli.lifecycle_options();
    let stats = options.stats.clone();
    let server = tokio::spawn(serve(resource.clone(), options, async move {
        let _ = stopped.await;
    }));
    let name = resource.name().to_string();
    let info = kubelet.wait_for_registration(&name, WAIT).await?;
    println!("Registration (fake kubelet, API v1beta1)");
    println!("  resource      {name}");
    println!(
        "  endpoint      {}",
        info.endpoint
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    println!(
        "  options       GetPreferredAllocation: {}, PreStartContainer: {}\n",
        yes_no(info.options.get_preferred_allocation_available),
        yes_no(info.options.pre_start_required)
    );

    println!("Devices (ListAndWatch)");
    for d in kubelet.devices(&name) {
        println!("  {}", health_line(&d));
    }
    println!(
        "  allocatable   {} of {}\n",
        kubelet.allocatable(&name),
        kubelet.capacity(&name)
    );

    println!("Allocate (a pod asking for {name}: 1)");
    let (chosen, response) = kubelet.admit(&name, 1).await?;
    println!("  devices       {}", chosen.join(", "));
    let mut envs: Vec<_> = response.envs.iter().collect();
    envs.sort();
    if envs.is_empty() {
        println!("  env           (none)");
    }
    for (k, v) in envs {
        println!("  env           {k}={v}");
    }
    if response.devices.is_empty() {
        println!("  device specs  (none; the NVIDIA runtime injects the nodes)");
    } else {
        println!("  device specs  {} nodes:", response.devices.len());
        for chunk in response.devices.chunks(3) {
            let line: Vec<String> = chunk
                .iter()
                .map(|d| format!("{} ({})", d.host_path, d.permissions))
                .collect();
            println!("                {}", line.join("  "));
        }
    }
    for (k, v) in &response.annotations {
        println!("  annotation    {k}={v}");
    }
    for c in &response.cdi_devices {
        println!("  CDI device    {}", c.name);
    }
    println!();

    show_labels(&resource);
    let pod_resources =
        FakePodResources::start(&plugin_dir.path().join("pod-resources.sock")).await?;
    let ids: Vec<&str> = chosen.iter().map(String::as_str).collect();
    pod_resources.assign("default", "cuda-sample", "main", &name, &ids);
    show_scrape(MetricsSource::new(
        resource.clone(),
        stats,
        Some(pod_resources.socket().to_path_buf()),
        "sim-node".into(),
    ))
    .await?;

    if resource.config().health_checks {
        show_health(
            &host,
            &kubelet,
            &name,
            chosen.first().cloned().unwrap_or_default(),
        )
        .await?;
    }

    let _ = stop.send(());
    server.await??;
    println!("Shut down cleanly (socket removed).");
    Ok(())
}

/// The node labels the plugin writes for NFD and the labeller puts on the Node.
fn show_labels(resource: &GpuResource) {
    println!("Node labels (NFD feature file / edgegpu-labeller; docs/labels.md)");
    for (key, value) in labels::for_resource(resource).iter() {
        println!("  {key}={value}");
    }
    println!();
}

/// Serves /metrics on a loopback port and shows one scrape, as Prometheus gets it.
async fn show_scrape(source: MetricsSource) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = metrics::server::bind("127.0.0.1:0".parse()?).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(metrics::server::serve(
        listener,
        std::sync::Arc::new(source),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: sim-node\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let _ = stop.send(());
    server.await?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    println!("Metrics (GET http://{addr}/metrics; the pod above holds the GPU; # HELP/# TYPE lines left out)");
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        println!("  {line}");
    }
    println!();
    Ok(())
}

/// Breaks the GPU the way the health checks see it, and repairs it.
async fn show_health(
    host: &FakeHost,
    kubelet: &FakeKubelet,
    name: &str,
    id: String,
) -> anyhow::Result<()> {
    let how = if host.board().is_some() {
        "device nodes and sysfs watched with inotify"
    } else {
        "NVML XID events and probes"
    };
    println!("Health ({how}; recovers by itself)");
    let (what_breaks, what_repairs): (String, String) = match host.board() {
        Some(board) => {
            let node = if board == Board::Thor {
                "/dev/nvidiactl"
            } else {
                "/dev/nvmap"
            };
            host.remove_node(node);
            wait_health(kubelet, name, &id, UNHEALTHY).await?;
            let broke = format!("removed {node}");
            host.restore_node(node);
            wait_health(kubelet, name, &id, HEALTHY).await?;
            (broke, format!("restored {node}"))
        }
        None => {
            host.lose_gpu(0);
            let uuid = &FakeGpu::two_on_two_numa_nodes()[0].uuid;
            wait_health(kubelet, name, uuid, UNHEALTHY).await?;
            host.recover_gpu(0);
            wait_health(kubelet, name, uuid, HEALTHY).await?;
            (
                "GPU 0 fell off the bus".into(),
                "GPU 0 answers again".into(),
            )
        }
    };
    let history = kubelet
        .resource(name)
        .map(|r| r.history)
        .unwrap_or_default();
    println!("  {what_breaks:<28} → Unhealthy (allocatable dropped)");
    println!("  {what_repairs:<28} → Healthy again");
    println!("  device lists sent to the kubelet: {}\n", history.len());
    Ok(())
}

async fn wait_health(
    kubelet: &FakeKubelet,
    name: &str,
    id: &str,
    health: &str,
) -> anyhow::Result<()> {
    kubelet
        .wait_until(&format!("{id} {health}"), WAIT, |k| {
            k.devices(name)
                .iter()
                .any(|d| d.id.starts_with(id) && d.health == health)
        })
        .await
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
