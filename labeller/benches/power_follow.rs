//! How long a power-mode change takes to reach the Node's labels (printed, never asserted;
//! docs/power.md quotes it): `edgegpu-labeller --wait` on a simulated AGX Orin against the
//! fake API server, the mode switched between MODE_30W and MAXN as `nvpmodel -m` does, the
//! time from the switch to the labels' change measured by polling the fake every millisecond.
//!
//! The recheck period bounds it (1 s here, `--power-recheck-seconds`; 15 s by default): the
//! figures show the wait for the next recheck (uniform over the period) plus the read and the
//! PATCH. What the program adds after it saw the change is measured from its own log line
//! (`the power mode changed`, timestamped) to the label's change.
//!
//! Run: `cargo bench -p edgegpu-labeller --bench power_follow`.

use std::io::BufRead;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use edgegpu_testkit::apiserver::FakeApiServer;
use edgegpu_testkit::bench::{announce_smoke_mode, iterations};
use edgegpu_testkit::host::{Board, FakeHost};
use edgegpu_testkit::process::{binary_command, machine_line, program};

const NODE: &str = "bench-node";
const PERIOD: Duration = Duration::from_secs(1);

/// When the label became `value`: monotonic, and wall clock (to compare with the log).
async fn label_becomes(api: &FakeApiServer, value: &str) -> (Instant, SystemTime) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if api
            .labels(NODE)
            .get("edgegpu.io/jetson.power-mode")
            .map(String::as_str)
            == Some(value)
        {
            return (Instant::now(), SystemTime::now());
        }
        assert!(Instant::now() < deadline, "the label never became {value}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    announce_smoke_mode();
    println!("{}", machine_line());
    let host = FakeHost::jetson(Board::Orin);
    let api = FakeApiServer::start(NODE, &[]).await;
    let mut child = binary_command(program("edgegpu-labeller"))
        .arg("--root")
        .arg(host.root())
        .args(["--discovery=tegra", "--wait", "--power-recheck-seconds=1"])
        .args(api.client_args())
        .env("NODE_NAME", NODE)
        .env("EDGEGPU_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the labeller");
    // Killed however the benchmark ends (a panic included): it would keep running otherwise.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stderr = child.stderr.take().unwrap();
    let _child = KillOnDrop(child);
    // The time stamp of each `the power mode changed` log line.
    let (seen_tx, seen) = mpsc::channel::<SystemTime>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("the power mode changed") {
                let stamp = line.split_whitespace().next().unwrap_or_default();
                if let Ok(t) = humantime::parse_rfc3339(stamp) {
                    let _ = seen_tx.send(t);
                }
            }
        }
    });
    label_becomes(&api, "MODE_30W").await;
    let (mut samples, mut after_seen) = (Vec::new(), Vec::new());
    for n in 0..iterations(20) {
        let (id, ceiling, name) = if n % 2 == 0 {
            (0, 1_300_500_000, "MAXN")
        } else {
            (2, 624_750_000, "MODE_30W")
        };
        // Switch at a random point of the period, as a user would.
        tokio::time::sleep(PERIOD.mul_f64(0.37 * (n % 3) as f64 + 0.1)).await;
        let switched = Instant::now();
        host.set_power_mode(Board::Orin, id, ceiling);
        let (labelled, wall) = label_becomes(&api, name).await;
        samples.push(labelled - switched);
        if let Ok(t) = seen.recv_timeout(Duration::from_secs(5)) {
            after_seen.push(wall.duration_since(t).unwrap_or_default());
        }
    }
    after_seen.sort();
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "mode change -> label, --power-recheck-seconds=1, {} changes: min {:.1?}  p50 {:.1?}  max {:.1?}",
        samples.len(),
        samples[0],
        pick(0.5),
        samples[samples.len() - 1]
    );
    if !after_seen.is_empty() {
        println!(
            "  from the program seeing the change (its log line) to the label: p50 {:.1?}  max {:.1?}",
            after_seen[(after_seen.len() - 1) / 2],
            after_seen[after_seen.len() - 1]
        );
    }
}
