//! Lifecycle figures (printed, never asserted):
//! - start → registered with the fake kubelet (no device discovery),
//! - `kubelet.sock` recreated → re-registered, 100 restarts, with the socket listening at once
//!   and with a bind→listen gap (a plugin woken at bind is refused until listen),
//! - Allocate round trip with 1 and 32 concurrent callers (p50/p99) and the plugin thread's
//!   CPU per call. The callers run on one worker thread: on a 2-core machine the plugin's
//!   thread and the kubelet's each get a core, as two processes would,
//! - the lifecycle thread's idle wake-ups (in process, test resource),
//! - the real binary's steady-state memory after registration and 1000 Allocates (fake Orin
//!   root): VmRSS, RssAnon, VmHWM, where it goes (binary text, libraries, anonymous), what
//!   stays charged after the kernel reclaimed all it could (as root, in a memory cgroup of its
//!   own), idle context switches; then 100 kubelet restarts: re-registration times and the
//!   binary's CPU over them.
//!
//! Run: `cargo bench -p edgegpu-plugin --bench lifecycle`. Extra arguments for the binary
//! (e.g. a metrics flag): `EDGEGPU_BENCH_PLUGIN_ARGS="--flag value" cargo bench …`; only the
//! binary's figures: `EDGEGPU_BENCH_ONLY=footprint cargo bench …`; on a real host root instead of
//! the fake Orin (a GPU machine): `EDGEGPU_BENCH_HOST_ROOT=/`; another build of the binary
//! (the release one users run: `EDGEGPU_BENCH_BINARY=dist/edgegpu-<triple>`, the multi-call
//! binary). Smoke mode (a few
//! iterations, short idle windows, as scripts/test.sh runs it): `edgegpu_testkit::bench`.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegpu_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use edgegpu_kubelet_api::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, HEALTHY,
};
use edgegpu_plugin::resource::Resource;
use edgegpu_plugin::{serve, LifecycleOptions};
use edgegpu_testkit::bench::{announce_smoke_mode, iterations, window};
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::kubelet::{dial_plugin, FakeKubelet, FakeKubeletOptions};
use edgegpu_testkit::process::{
    binary_command, context_switches, cpu_time_us, machine_line, rss_by_mapping, terminate,
    Footprint,
};
use tokio::sync::{oneshot, watch};

const GPU: &str = "nvidia.com/gpu";
const WAIT: Duration = Duration::from_secs(30);

struct BenchResource {
    devices: watch::Sender<Vec<Device>>,
}

impl Resource for BenchResource {
    fn resource_name(&self) -> &str {
        GPU
    }
    fn options(&self) -> DevicePluginOptions {
        DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }
    }
    fn devices(&self) -> watch::Receiver<Vec<Device>> {
        self.devices.subscribe()
    }
    #[allow(clippy::result_large_err)]
    fn allocate(
        &self,
        request: &ContainerAllocateRequest,
    ) -> Result<ContainerAllocateResponse, tonic::Status> {
        let mut response = ContainerAllocateResponse::default();
        response.envs.insert(
            "NVIDIA_VISIBLE_DEVICES".into(),
            request.devices_ids.join(","),
        );
        Ok(response)
    }
    #[allow(clippy::result_large_err)]
    fn preferred_allocation(
        &self,
        request: &ContainerPreferredAllocationRequest,
    ) -> Result<ContainerPreferredAllocationResponse, tonic::Status> {
        Ok(ContainerPreferredAllocationResponse {
            device_i_ds: request.available_device_i_ds.clone(),
        })
    }
}

fn resource() -> Arc<BenchResource> {
    let devices = (0..4)
        .map(|i| Device {
            id: format!("GPU-{i}"),
            health: HEALTHY.into(),
            topology: None,
        })
        .collect();
    Arc::new(BenchResource {
        devices: watch::channel(devices).0,
    })
}

/// The plugin's lifecycle on its own single-threaded runtime and thread, like the binary.
struct PluginThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    tid: i32,
}

impl PluginThread {
    fn start(dir: &Path) -> PluginThread {
        let (stop, stopped) = oneshot::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let opts = LifecycleOptions::new(dir);
        let thread = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                serve(resource(), opts, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        PluginThread {
            stop: Some(stop),
            thread: Some(thread),
            tid: tid_rx.recv().unwrap(),
        }
    }
}

impl Drop for PluginThread {
    fn drop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        let _ = self.thread.take().unwrap().join();
    }
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "n={} min {:.2?} p50 {:.2?} p90 {:.2?} p99 {:.2?} max {:.2?}",
        samples.len(),
        samples[0],
        pick(0.5),
        pick(0.9),
        pick(0.99),
        samples[samples.len() - 1]
    )
}

async fn start_to_registered(rounds: usize) {
    let mut samples = Vec::new();
    for _ in 0..iterations(rounds) {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
        let t0 = Instant::now();
        let plugin = PluginThread::start(dir.path());
        kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
        samples.push(t0.elapsed());
        drop(plugin);
    }
    println!(
        "start -> registered (first ListAndWatch list received): {}",
        summary(samples)
    );
}

async fn restart_to_reregistered(rounds: usize, listen_delay: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = FakeKubeletOptions::new(dir.path());
    opts.listen_delay = listen_delay;
    let kubelet = FakeKubelet::start_with(opts).await.unwrap();
    let _plugin = PluginThread::start(dir.path());
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    let mut from_create = Vec::new();
    let mut from_listen = Vec::new();
    for _ in 0..iterations(rounds) {
        let before = kubelet.registration_count();
        kubelet.stop().await;
        // t0: the kubelet deletes the sockets and creates kubelet.sock again.
        let t0 = Instant::now();
        kubelet.start_again().await.unwrap();
        kubelet
            .wait_for_registrations(GPU, before + 1, WAIT)
            .await
            .unwrap();
        let done = Instant::now();
        from_create.push(done - t0);
        from_listen.push(done - kubelet.listening_since().unwrap_or(t0));
    }
    println!(
        "kubelet.sock recreated -> re-registered (bind->listen gap {listen_delay:?}): {}",
        summary(from_create)
    );
    if !listen_delay.is_zero() {
        println!(
            "  kubelet.sock listening -> re-registered: {}",
            summary(from_listen)
        );
    }
}

/// CPU time (user + system) a thread used so far, from /proc (clock ticks → µs).
fn thread_cpu_us(tid: i32) -> u64 {
    cpu_time_us(&format!("/proc/self/task/{tid}/stat"))
}

async fn allocate_latency(callers: usize, calls_each: usize, shared_connection: bool) {
    let calls_each = iterations(calls_each);
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let plugin = PluginThread::start(dir.path());
    let info = kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    // One connection shared by every caller (like the kubelet's), or one per caller.
    let shared = dial_plugin(&info.endpoint, false, WAIT).await.unwrap();
    let mut channels = Vec::new();
    for _ in 0..callers {
        channels.push(if shared_connection {
            shared.clone()
        } else {
            dial_plugin(&info.endpoint, false, WAIT).await.unwrap()
        });
    }
    let cpu_before = thread_cpu_us(plugin.tid);
    let mut tasks = Vec::new();
    for (c, channel) in channels.into_iter().enumerate() {
        let mut client = DevicePluginClient::new(channel);
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(calls_each);
            for _ in 0..calls_each {
                let request = AllocateRequest {
                    container_requests: vec![ContainerAllocateRequest {
                        devices_ids: vec![format!("GPU-{}", c % 4)],
                    }],
                };
                let t0 = Instant::now();
                client.allocate(request).await.unwrap();
                samples.push(t0.elapsed());
            }
            samples
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let server_cpu = thread_cpu_us(plugin.tid) - cpu_before;
    let calls = all.len();
    let how = if shared_connection {
        "one shared connection"
    } else {
        "one connection each"
    };
    println!(
        "Allocate round trip, {callers} concurrent caller(s), {how}: {} (plugin thread CPU {:.1} µs per call)",
        summary(all),
        server_cpu as f64 / calls as f64
    );
}

async fn lifecycle_idle_wakeups(seconds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let plugin = PluginThread::start(dir.path());
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    tokio::time::sleep(window(Duration::from_millis(500))).await;
    let files = vec![format!("/proc/self/task/{}/status", plugin.tid)];
    let before = context_switches(&files);
    let idle = window(Duration::from_secs(seconds));
    tokio::time::sleep(idle).await;
    let after = context_switches(&files);
    println!(
        "lifecycle thread idle for {idle:?} (registered, ListAndWatch open): {} context switches",
        after - before
    );
}

/// The binary's figures twice: with the host's C library, which every process here maps (so
/// the plugin cannot hand its pages back), and with its own copy of it, as the image runs it
/// (scripts/build-images.sh puts Debian's glibc into the plugin's own layer).
async fn binary_footprint(seconds: u64) {
    // The binary this bench built has the test doubles' features too (cargo unifies them, e.g.
    // tokio's multi-threaded scheduler); the one users run comes from `cargo build --release`
    // or scripts/build-release.sh, and is measured by naming it here.
    let bin = edgegpu_testkit::process::bench_program("edgegpu-device-plugin")
        .display()
        .to_string();
    println!("binary measured: {bin}");
    let libraries = run_binary(binary_command(&bin), "host's C library", seconds).await;
    // Under an emulator the figures are the emulator's: one run is enough.
    if std::env::var(edgegpu_testkit::process::RUNNER_ENV).is_ok_and(|r| !r.is_empty()) {
        return;
    }
    let Some(loader) = libraries.iter().find(|l| l.contains("/ld-linux")) else {
        println!("binary: no dynamic loader found in its mappings; one run only");
        return;
    };
    let own = tempfile::tempdir().unwrap();
    for library in &libraries {
        let copy = own.path().join(Path::new(library).file_name().unwrap());
        std::fs::copy(library, &copy).unwrap();
        // Written back, as an image layer unpacked before the pod starts is: the kernel does
        // not reclaim dirty pages on the plugin's advice.
        std::fs::File::open(&copy).unwrap().sync_all().unwrap();
    }
    let loader = own.path().join(Path::new(loader).file_name().unwrap());
    let mut command = std::process::Command::new(loader);
    command.arg("--library-path").arg(own.path()).arg(&bin);
    run_binary(
        command,
        "own copy of the C library, as in its image",
        seconds,
    )
    .await;
}

/// Starts the plugin through `command` on a fake Orin (or the host root that
/// `EDGEGPU_BENCH_HOST_ROOT` names, e.g. `/` on a GPU machine), registers it, sends 1000
/// Allocates of its first device, prints its footprint and stops it; returns the shared
/// libraries it had mapped.
async fn run_binary(mut command: std::process::Command, libc: &str, seconds: u64) -> Vec<String> {
    let real_root = std::env::var("EDGEGPU_BENCH_HOST_ROOT")
        .ok()
        .filter(|r| !r.is_empty());
    let fake = real_root.is_none().then(|| FakeHost::jetson(Board::Orin));
    let root = real_root.as_deref().map_or_else(
        || fake.as_ref().expect("made when no root is named").root(),
        Path::new,
    );
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let t0 = Instant::now();
    let extra = std::env::var("EDGEGPU_BENCH_PLUGIN_ARGS").unwrap_or_default();
    let mut child = command
        .arg("--device-plugin-path")
        .arg(dir.path())
        .arg("--root")
        .arg(root)
        .args(extra.split_whitespace())
        .env("EDGEGPU_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kubelet.wait_for_registration(GPU, WAIT).await.unwrap();
    println!(
        "binary ({libc}): process start -> registered (root {}, includes discovery): {:.2?}",
        real_root.as_deref().unwrap_or("fake Orin"),
        t0.elapsed()
    );
    if !extra.is_empty() {
        println!("binary: extra arguments: {extra}");
    }
    let device = kubelet.devices(GPU)[0].id.clone();
    let allocates = iterations(1000);
    for _ in 0..allocates {
        kubelet.allocate(GPU, &[device.as_str()]).await.unwrap();
    }
    tokio::time::sleep(window(Duration::from_secs(1))).await;
    let pid = child.id();
    let footprint = Footprint::measure(pid, window(Duration::from_secs(seconds))).await;
    println!("binary ({libc}): steady state after {allocates} Allocates: {footprint}");
    println!("  where it goes (Rss by mapping): {}", rss_by_mapping(pid));
    println!(
        "  what the kernel cannot take back: {}",
        edgegpu_testkit::process::unreclaimable_memory(pid)
    );
    // The kubelet restarts (kubelet.sock recreated): the binary registers again each time.
    let restarts = iterations(100);
    let cpu_before = cpu_time_us(&format!("/proc/{pid}/stat"));
    let mut again = Vec::new();
    for _ in 0..restarts {
        let before = kubelet.registration_count();
        kubelet.stop().await;
        let t0 = Instant::now();
        kubelet.start_again().await.unwrap();
        kubelet
            .wait_for_registrations(GPU, before + 1, WAIT)
            .await
            .unwrap();
        again.push(t0.elapsed());
    }
    let cpu_ms = (cpu_time_us(&format!("/proc/{pid}/stat")) - cpu_before) as f64 / 1000.0;
    println!(
        "binary ({libc}): kubelet.sock recreated -> re-registered, {restarts} restarts: {}; the plugin's CPU over them {cpu_ms:.0} ms",
        summary(again)
    );
    // Memory only: the restarts' blocking-pool threads exit meanwhile, so no switch count.
    let after = Footprint::measure(pid, Duration::ZERO).await;
    println!(
        "binary ({libc}): after the restarts: VmRSS {} (RssAnon {}, RssFile {}; VmHWM {})",
        after.vm_rss, after.rss_anon, after.rss_file, after.vm_hwm
    );
    let libraries = shared_libraries(pid);
    let own = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n != "kubelet.sock"))
        .unwrap();
    let t0 = Instant::now();
    terminate(pid);
    let status = child.wait().unwrap();
    drop(kubelet);
    println!(
        "binary ({libc}): SIGTERM -> exit {:.2?} (status {status}, own socket removed: {})",
        t0.elapsed(),
        !own.exists()
    );
    libraries
}

/// The shared objects (`*.so*`) a process maps, from `/proc/PID/maps`.
fn shared_libraries(pid: u32) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut libraries: Vec<String> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.starts_with('/') && path.contains(".so"))
        .map(str::to_string)
        .collect();
    libraries.dedup();
    libraries
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters nothing here.
    // One worker: the fake kubelet and its callers get one core, the plugin thread the other.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    println!("{}", machine_line());
    announce_smoke_mode();
    // EDGEGPU_BENCH_ONLY=footprint: only the binary's figures (quick when trying build settings).
    let only_footprint = std::env::var("EDGEGPU_BENCH_ONLY").is_ok_and(|v| v == "footprint");
    rt.block_on(async {
        if only_footprint {
            binary_footprint(5).await;
            return;
        }
        start_to_registered(30).await;
        restart_to_reregistered(100, Duration::ZERO).await;
        restart_to_reregistered(100, Duration::from_millis(2)).await;
        allocate_latency(1, 500, true).await;
        allocate_latency(32, 200, true).await;
        allocate_latency(32, 200, false).await;
        lifecycle_idle_wakeups(5).await;
        binary_footprint(5).await;
    });
}
