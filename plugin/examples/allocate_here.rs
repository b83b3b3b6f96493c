//! Run the real plugin against *this* machine's GPUs with an in-process fake kubelet and
//! write what containers would receive — for checking a node by hand (a GPU server, a
//! Jetson) without a kubelet:
//!
//! ```text
//! cargo run --release -p edgegpu-plugin --example allocate_here -- \
//!     [--count N] [--size K] [--out DIR] [--wait SECONDS] [-- PLUGIN FLAGS…]
//! ```
//!
//! Starts the plugin with the given flags (`--root` defaults to `/`), waits until the devices
//! are healthy (with MPS: until the companion reports its daemon ready), admits `N`
//! containers asking for `K` devices each the way the kubelet does (GetPreferredAllocation,
//! then Allocate), and writes for container `i` `DIR/container-<i>.env` (`NAME=value`
//! lines) and `DIR/container-<i>.mounts` (`host container` lines). A script can then start
//! the container's process with that environment and those mounts (see
//! scripts/mps-hardware-check.sh). Prints one summary line per container; exits non-zero when
//! a container could not be admitted.

use std::path::PathBuf;
mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use edgegpu_kubelet_api::v1beta1::HEALTHY;
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::{build_gpu_resources, serve_all, Cli};
use edgegpu_testkit::kubelet::FakeKubelet;

struct Args {
    count: usize,
    size: usize,
    out: PathBuf,
    wait: Duration,
    plugin_flags: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        count: 1,
        size: 1,
        out: PathBuf::from("allocations"),
        wait: Duration::from_secs(60),
        plugin_flags: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--count" => {
                args.count = value("--count")?
                    .parse()
                    .map_err(|e| format!("--count: {e}"))?
            }
            "--size" => {
                args.size = value("--size")?
                    .parse()
                    .map_err(|e| format!("--size: {e}"))?
            }
            "--out" => args.out = PathBuf::from(value("--out")?),
            "--wait" => {
                args.wait = Duration::from_secs(
                    value("--wait")?
                        .parse()
                        .map_err(|e| format!("--wait: {e}"))?,
                )
            }
            "--" => args.plugin_flags = it.by_ref().collect(),
            "--help" | "-h" => {
                println!("usage: allocate_here [--count N] [--size K] [--out DIR] [--wait SECONDS] [-- PLUGIN FLAGS…]");
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
            eprintln!("allocate_here: {e}");
            return ExitCode::from(2);
        }
    };
    common::init_logging(&std::env::var("EDGEGPU_LOG").unwrap_or_else(|_| "info".into()));
    common::run_to_exit("allocate_here", run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let kubelet = FakeKubelet::start(dir.path()).await?;
    let mut argv = vec![
        "edgegpu-device-plugin".to_string(),
        "--device-plugin-path".into(),
        dir.path().display().to_string(),
        "--pod-resources-socket=".into(),
        "--feature-file=".into(),
    ];
    argv.extend(args.plugin_flags.iter().cloned());
    let cli = Cli::try_parse_from(argv)?;
    let node = build_gpu_resources(&cli.root, &cli.resource_name, &cli.gpu).await?;
    let names: Vec<String> = node
        .resources
        .iter()
        .map(|r| r.name().to_string())
        .collect();
    let served: Vec<Arc<dyn Resource>> = node
        .resources
        .iter()
        .map(|r| r.clone() as Arc<dyn Resource>)
        .collect();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(serve_all(served, cli.lifecycle_options(), async move {
        let _ = stopped.await;
    }));
    let name = names.first().cloned().unwrap_or_default();
    kubelet.wait_for_registration(&name, args.wait).await?;
    let t0 = Instant::now();
    let healthy = kubelet
        .wait_until("healthy devices", args.wait, |k| {
            let d = k.devices(&name);
            !d.is_empty() && d.iter().all(|x| x.health == HEALTHY)
        })
        .await;
    if let Err(e) = healthy {
        let unhealthy: Vec<String> = node.resources[0]
            .health()
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.healthy)
            .map(|(i, _)| node.resources[0].base_ids()[i].clone())
            .collect();
        anyhow::bail!("{e:#}; unhealthy: {unhealthy:?} (the plugin's log says why)");
    }
    println!(
        "{name}: {} devices healthy after {:.2?}",
        kubelet.devices(&name).len(),
        t0.elapsed()
    );
    std::fs::create_dir_all(&args.out)?;
    for i in 0..args.count {
        let (ids, response) = kubelet
            .admit(&name, args.size)
            .await
            .map_err(|s| anyhow::anyhow!("container {i}: {}", s.message()))?;
        let mut env: Vec<String> = response
            .envs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        env.sort();
        let mounts: Vec<String> = response
            .mounts
            .iter()
            .map(|m| format!("{} {}", m.host_path, m.container_path))
            .collect();
        std::fs::write(
            args.out.join(format!("container-{i}.env")),
            env.join("\n") + "\n",
        )?;
        std::fs::write(
            args.out.join(format!("container-{i}.mounts")),
            mounts.join("\n") + "\n",
        )?;
        println!("container {i}: {} -> {}", ids.join(","), env.join(" "));
    }
    let _ = stop.send(());
    serving.await??;
    Ok(())
}
