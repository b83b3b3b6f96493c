//! See the device plugin work without a GPU or a kubelet:
//!
//! ```text
//! cargo run -p edgegpu-plugin --example simulate [-- --board BOARD] [--verbose] [-- PLUGIN FLAGS…]
//! ```
//!
//! Builds a simulated host root (a Jetson Orin on L4T r36 by default; every Jetson generation
//! from JetPack 4 to 7, a discrete server, and MIG servers) in a temporary directory, starts
//! the testkit's fake kubelet and the real plugin (command-line parsing, the program's own
//! round — one snapshot, the GPU and the DLA/PVA resources: `build_round` — and `serve_all`)
//! in this process, and prints what a node operator wants to know: what was
//! detected and why, the registrations (one per resource), the advertised devices, the
//! Allocate answer a pod would get, the node labels, a Prometheus scrape of `/metrics` with
//! those pods attributed (through a fake pod-resources API), and a health loss and recovery.
//! Then it shuts down and exits 0. Plugin flags after a second `--` replace the board's
//! default flags.

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use edgegpu_kubelet_api::v1beta1::{Device, HEALTHY, UNHEALTHY};
use edgegpu_node::facts::NodeFacts;
use edgegpu_node::gpu::discovery::Platform;
use edgegpu_node::labels;
use edgegpu_plugin::metrics::{self, MetricsSource};
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::{build_round, GpuResource};
use edgegpu_plugin::{serve_all, Cli};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use edgegpu_testkit::kubelet::FakeKubelet;
use edgegpu_testkit::pod_resources::FakePodResources;

const WAIT: Duration = Duration::from_secs(30);

/// What is simulated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sim {
    Jetson(Board),
    /// Two A100s, no MIG.
    Dgpu,
    /// Two H100s: GPU 0 in MIG mode (1g.10gb ×2, 3g.40gb), GPU 1 whole; --mig-strategy mixed.
    DgpuMig,
}

struct Args {
    sim: Sim,
    verbose: bool,
    plugin_flags: Vec<String>,
}

impl Sim {
    fn default_flags(self) -> Vec<String> {
        match self {
            Sim::DgpuMig => vec!["--pass-device-specs".into(), "--mig-strategy=mixed".into()],
            _ => vec!["--pass-device-specs".into()],
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        sim: Sim::Jetson(Board::Orin),
        verbose: false,
        plugin_flags: Vec::new(),
    };
    let mut flags = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--board" => {
                let b = it.next().ok_or("--board needs a value")?;
                args.sim = match b.as_str() {
                    "dgpu" => Sim::Dgpu,
                    "dgpu-mig" => Sim::DgpuMig,
                    name => Sim::Jetson(Board::from_name(name).ok_or(format!(
                        "unknown board {name}; use nano, xavier, orin, orin-r39, thor, dgpu or dgpu-mig"
                    ))?),
                };
            }
            "--verbose" | "-v" => args.verbose = true,
            "--" => {
                flags = Some(it.by_ref().collect());
            }
            "--help" | "-h" => {
                println!(
                    "usage: cargo run -p edgegpu-plugin --example simulate -- [OPTIONS] [-- PLUGIN FLAGS…]

Runs the real device plugin against a simulated host and an in-process fake kubelet, and
prints detection, registration, devices, an allocation and a health loss/recovery.

options:
  --board BOARD   nano      Jetson Nano devkit, T210, L4T r32.7.6 (JetPack 4.6.6), no NVML
                  xavier    Jetson AGX Xavier, T194, L4T r35.4.1 (JetPack 5.1.2), no NVML
                  orin      Jetson AGX Orin devkit, T234, L4T r36.4.3 (JetPack 6.2) [default]
                  orin-r39  Jetson Orin NX, T234, L4T r39.2.0 (JetPack 7.2)
                  thor      Jetson AGX Thor devkit, T264, L4T r38.2.1 (JetPack 7.0)
                  dgpu      x86_64/arm64 server, 2 GPUs on 2 NUMA nodes (fake libnvidia-ml)
                  dgpu-mig  2 H100s, GPU 0 split into MIG devices (--mig-strategy=mixed)
                The JetPack 6/7 boards carry their release's NVML, answering NotSupported
                where that driver does (identity from NVML, health from sysfs and NVML).
  --verbose, -v   show the plugin's info logs (default: warnings only)
  -- FLAGS…       plugin flags (see edgegpu-device-plugin --help) instead of the board's
                  default (--pass-device-specs, plus --mig-strategy=mixed on dgpu-mig), e.g.
                  -- --device-list-strategy=cdi-cri --device-id-strategy=index"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (see --help)")),
        }
    }
    args.plugin_flags = flags.unwrap_or_else(|| args.sim.default_flags());
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
        "warn,edgegpu_node::gpu::health=error"
    };
    common::init_logging(level);
    common::run_to_exit("simulate", simulate(args))
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
        Some(Platform::Tegra { detection, nvml }) => {
            match nvml {
                Some(_) => println!("  platform      tegra, hybrid (identity from NVML; health from device nodes, sysfs and NVML)"),
                None => println!("  platform      tegra (Jetson integrated GPU, no NVML needed)"),
            }
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
            if let Some(n) = nvml {
                println!(
                    "  NVML          reports `{}` ({}), served as the Tegra GPU",
                    n.name, n.uuid
                );
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
                    "  GPU {}         {} {}, {} GiB, PCI {}, NUMA node {}{}",
                    g.index,
                    g.uuid,
                    g.name,
                    g.memory_bytes.unwrap_or(0) / (1 << 30),
                    g.pci_bus_id.as_deref().unwrap_or("-"),
                    g.numa_node.map(|n| n.to_string()).unwrap_or("-".into()),
                    if g.mig_enabled { ", MIG mode" } else { "" }
                );
            }
        }
        None => println!("  platform      none (no GPU found; running with zero devices)"),
    }
    println!();
}

async fn simulate(args: Args) -> anyhow::Result<()> {
    let host = match args.sim {
        Sim::Jetson(board) => FakeHost::jetson_with_nvml(board),
        Sim::Dgpu => FakeHost::discrete(&FakeGpu::two_on_two_numa_nodes()),
        Sim::DgpuMig => FakeHost::mig_server(&[0], &FakeMig::h100_mixed()).0,
    };
    // Something for the scrape to show: a busy GPU.
    match args.sim {
        Sim::Jetson(board) if board.load_file().is_some() => host.set_gpu_load(420),
        Sim::Jetson(_) => {}
        Sim::Dgpu | Sim::DgpuMig => {
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
    let title = match args.sim {
        Sim::Jetson(b) => format!("simulated {} (L4T {})", b.model(), b.l4t()),
        Sim::Dgpu => "simulated discrete-GPU server (2 GPUs, 2 NUMA nodes, fake NVML)".into(),
        Sim::DgpuMig => "simulated MIG server (2 H100, GPU 0 in MIG mode, fake NVML)".into(),
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

    // The program's own round: one snapshot, the GPU resources, the DLA/PVA resources and
    // the labels' facts, as `edgegpu_plugin::run` builds them.
    let round = build_round(&cli.root, &cli.resource_name, &cli.gpu).await?;
    let resources = round.gpus.resources;
    show_detection(&resources[0]);

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served: Vec<Arc<dyn Resource>> = resources
        .iter()
        .map(|r| r.clone() as Arc<dyn Resource>)
        .chain(round.engines.iter().map(|e| e.clone() as Arc<dyn Resource>))
        .collect();
    let options = cli.lifecycle_options();
    let stats = options.stats.clone();
    let server = tokio::spawn(serve_all(served.clone(), options, async move {
        let _ = stopped.await;
    }));
    println!("Registration (fake kubelet, API v1beta1; one socket per resource)");
    for r in &served {
        let name = r.resource_name();
        let info = kubelet.wait_for_registration(name, WAIT).await?;
        println!(
            "  {name:<24} endpoint {}  (GetPreferredAllocation: {}, PreStartContainer: {})",
            info.endpoint
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            yes_no(info.options.get_preferred_allocation_available),
            yes_no(info.options.pre_start_required)
        );
    }
    println!();

    let mut first_chosen = None;
    let mut allocated = Vec::new();
    for r in &served {
        let name = r.resource_name().to_string();
        println!("Devices of {name} (ListAndWatch)");
        for d in kubelet.devices(&name) {
            println!("  {}", health_line(&d));
        }
        println!(
            "  allocatable   {} of {}\n",
            kubelet.allocatable(&name),
            kubelet.capacity(&name)
        );
        if kubelet.capacity(&name) == 0 {
            continue;
        }
        println!("Allocate (a pod asking for {name}: 1)");
        let (chosen, response) = kubelet.admit(&name, 1).await?;
        show_response(&chosen, &response);
        if first_chosen.is_none() {
            first_chosen = chosen.first().cloned().map(|id| (name.clone(), id));
        }
        allocated.push((name, chosen));
    }

    show_labels(&resources, &round.facts);
    let pod_resources =
        FakePodResources::start(&plugin_dir.path().join("pod-resources.sock")).await?;
    for (n, (name, chosen)) in allocated.iter().enumerate() {
        let ids: Vec<&str> = chosen.iter().map(String::as_str).collect();
        pod_resources.assign("default", &format!("cuda-sample-{n}"), "main", name, &ids);
    }
    show_scrape(MetricsSource::new(
        resources.clone(),
        stats,
        Some(pod_resources.socket().to_path_buf()),
        "sim-node".into(),
    ))
    .await?;

    if resources[0].config().health_checks {
        if let Some((name, id)) = first_chosen {
            show_health(&host, args.sim, &kubelet, &name, id, &resources).await?;
        }
    }

    let _ = stop.send(());
    server.await??;
    println!("Shut down cleanly (sockets removed).");
    Ok(())
}

fn show_response(
    chosen: &[String],
    response: &edgegpu_kubelet_api::v1beta1::ContainerAllocateResponse,
) {
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
}

/// The node labels the plugin writes for NFD and the labeller puts on the Node.
fn show_labels(resources: &[Arc<GpuResource>], facts: &NodeFacts) {
    println!("Node labels (NFD feature file / edgegpu-labeller; docs/labels.md)");
    for (key, value) in labels::for_served(
        &resources
            .iter()
            .map(|r| r.served().clone())
            .collect::<Vec<_>>(),
        facts,
    )
    .iter()
    {
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
        Arc::new(source),
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
    println!("Metrics (GET http://{addr}/metrics; the pods above hold their devices; # HELP/# TYPE lines left out)");
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        println!("  {line}");
    }
    println!();
    Ok(())
}

/// Breaks the device the way the health checks see it, and repairs it.
async fn show_health(
    host: &FakeHost,
    sim: Sim,
    kubelet: &FakeKubelet,
    name: &str,
    id: String,
    resources: &[Arc<GpuResource>],
) -> anyhow::Result<()> {
    let how = match sim {
        Sim::Jetson(b) if b.nvml().is_some() => "device nodes and sysfs (inotify) plus NVML probes",
        Sim::Jetson(_) => "device nodes and sysfs watched with inotify",
        Sim::Dgpu => "NVML XID events and probes",
        Sim::DgpuMig => "NVML XID events per MIG device and probes",
    };
    println!("Health ({how}; recovers by itself)");
    let (what_breaks, what_repairs): (String, String) = match sim {
        Sim::Jetson(board) => {
            let node = board.required_node();
            host.remove_node(node);
            wait_health(kubelet, name, &id, UNHEALTHY).await?;
            let broke = format!("removed {node}");
            host.restore_node(node);
            wait_health(kubelet, name, &id, HEALTHY).await?;
            (broke, format!("restored {node}"))
        }
        Sim::Dgpu => {
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
        Sim::DgpuMig => {
            // A critical XID on the 3g.40gb MIG device (GPU instance 1): only it turns
            // Unhealthy; recovery after --health-recovery-seconds (60 by default) is not
            // waited for here.
            let r = resources
                .iter()
                .find(|r| r.name() == "nvidia.com/mig-3g.40gb")
                .expect("the 3g.40gb resource");
            let id = r.devices().borrow()[0].id.clone();
            host.inject_mig_xid(0, 79, 1, 0);
            wait_health(kubelet, r.name(), &id, UNHEALTHY).await?;
            let others_healthy = kubelet
                .devices("nvidia.com/mig-1g.10gb")
                .iter()
                .all(|d| d.health == HEALTHY);
            println!(
                "  XID 79 on MIG GPU instance 1 → {id} Unhealthy; the 1g.10gb devices stay {}",
                if others_healthy {
                    "Healthy"
                } else {
                    "UNHEALTHY (unexpected)"
                }
            );
            println!();
            return Ok(());
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
