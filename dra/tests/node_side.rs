//! The node side of the DRA driver on simulated hosts (testkit fake roots: Jetson Xavier,
//! AGX Orin, Orin NX r39, Thor, a discrete server, a MIG server): the published devices and
//! their attributes (the same facts as the node labels), prepare / unprepare, idempotence,
//! restarts from the checkpoint, a corrupt checkpoint, busy devices, bad configs, MPS. Every
//! CDI spec written is loaded and its devices resolved by the CDI project's Go library
//! (node-setup's tests/cdi_validate, built against Debian's package as node-setup's tests do).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use clap::Parser;
use edgegpu_dra::api_versions::{Feature, Features};
use edgegpu_dra::checkpoint::CheckpointError;
use edgegpu_dra::claims::{AllocatedDevice, ClaimAllocation, ConfigSource, OpaqueConfig};
use edgegpu_dra::inventory::{Attr, Inventory, ShareOptions};
use edgegpu_dra::kubelet::{ClaimRef, Driver, Health};
use edgegpu_dra::mps_daemon::{self, NoDaemon};
use edgegpu_dra::prepare::{NodeDriver, NodeOptions, PrepareError, RecoveryError};
use edgegpu_dra::serialize;
use edgegpu_dra::sharing::{MpsHost, ShareLimits};
use edgegpu_node::config::{GpuArgs, MigStrategy};
use edgegpu_node::labels;
use edgegpu_node::mps::plan::DaemonSettings;
use edgegpu_node::mps::status::{self as mps_status, Desired, State, Status};
use edgegpu_node::mps::support::MpsUnsupported;
use edgegpu_node::snapshot::Snapshot;
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use serde_json::{json, Value};

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    gpu: GpuArgs,
}

fn gpu_args(args: &[&str]) -> GpuArgs {
    let mut argv = vec!["test"];
    argv.extend_from_slice(args);
    Args::parse_from(argv).gpu
}

const POOL: &str = "node-a";

/// Discovery loads the fake root's libnvidia-ml by its soname: two tests loading different
/// fake NVMLs at once in this process would share whichever was loaded first, so discovery
/// runs one test at a time (the library is closed again when discovery ends).
static DISCOVERY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn inventory(host: &FakeHost, args: &[&str]) -> Inventory {
    discover_with(host, args, POOL, ShareOptions::default())
}

/// Discovery on `host` with the plugin's `args` (one at a time: see [`DISCOVERY`]).
pub(crate) fn discover_with(
    host: &FakeHost,
    args: &[&str],
    pool: &str,
    shares: ShareOptions,
) -> Inventory {
    let _one_at_a_time = DISCOVERY.lock().unwrap_or_else(|p| p.into_inner());
    Inventory::discover(host.root(), &gpu_args(args), pool, shares).unwrap()
}

fn attr<'a>(inv: &'a Inventory, device: &str, name: &str) -> Option<&'a Attr> {
    inv.get(device)
        .unwrap_or_else(|| panic!("no device {device}"))
        .attributes
        .get(name)
}

fn s(v: &str) -> Attr {
    Attr::String(v.into())
}

fn v(v: &str) -> Attr {
    Attr::Version(v.into())
}

const MIB: u64 = 1 << 20;

#[test]
fn jetson_gpus_carry_the_labels_facts() {
    for (board, product, arch, cc, l4t, jp) in [
        (Board::Xavier, "Xavier", "volta", "7.2.0", "35.4.1", 5),
        (Board::Orin, "Orin", "ampere", "8.7.0", "36.4.3", 6),
        (Board::OrinR39, "Orin", "ampere", "8.7.0", "39.2.0", 7),
        (
            Board::Thor,
            "NVIDIA Thor",
            "blackwell",
            "11.0.0",
            "38.2.1",
            7,
        ),
    ] {
        let host = FakeHost::jetson_with_nvml(board);
        let inv = inventory(&host, &[]);
        let names: Vec<&str> = inv.devices.iter().map(|d| d.name.as_str()).collect();
        // The engines whose nodes the fake root carries: the r39 Orin NX root carries none,
        // as an Orin Nano (engines fused off) has none; Thor has no DLA and its root no PVA node.
        let engines: &[&str] = match board {
            Board::Xavier => &["dla-0", "dla-1"],
            Board::Orin => &["dla-0"],
            _ => &[],
        };
        let mut want = vec!["gpu-0"];
        want.extend_from_slice(engines);
        assert_eq!(names, want, "{board:?}");
        let labels = labels::for_host(host.root(), "nvidia.com/gpu", &gpu_args(&[])).unwrap();
        let label = |k: &str| labels.get(k).map(str::to_string);
        let gpu = inv.get("gpu-0").unwrap();
        assert_eq!(gpu.attributes["type"], s("gpu"), "{board:?}");
        assert_eq!(gpu.attributes["integrated"], Attr::Bool(true));
        // NVML's or CUDA's name as is (the label value is the same name made a valid label
        // value: `Orin (nvgpu)` → `Orin-nvgpu`).
        assert!(label("nvidia.com/gpu.product")
            .unwrap()
            .starts_with(&product.replace(' ', "-")));
        assert!(
            matches!(&gpu.attributes["productName"], Attr::String(p) if p.contains(product)),
            "{board:?}: {:?}",
            gpu.attributes["productName"]
        );
        assert_eq!(
            attr(&inv, "gpu-0", "architecture"),
            Some(&s(arch)),
            "{board:?}"
        );
        assert_eq!(label("nvidia.com/gpu.family").as_deref(), Some(arch));
        let cc_label = format!(
            "{}.{}.0",
            label("nvidia.com/gpu.compute.major").unwrap(),
            label("nvidia.com/gpu.compute.minor").unwrap()
        );
        assert_eq!(cc_label, cc, "{board:?}");
        assert_eq!(attr(&inv, "gpu-0", "cudaComputeCapability"), Some(&v(cc)));
        let cuda = format!(
            "{}.{}.0",
            label("nvidia.com/cuda.driver.major").unwrap(),
            label("nvidia.com/cuda.driver.minor").unwrap()
        );
        assert_eq!(attr(&inv, "gpu-0", "cudaDriverVersion"), Some(&v(&cuda)));
        assert_eq!(
            attr(&inv, "gpu-0", "l4tRelease"),
            Some(&v(l4t)),
            "{board:?}"
        );
        assert_eq!(attr(&inv, "gpu-0", "jetpackMajor"), Some(&Attr::Int(jp)));
        // The power mode and the GPU's clock ceiling under it, as the labels say them (a CEL
        // selector can ask for a GPU at MAXN or above a clock): docs/power.md.
        assert_eq!(
            attr(&inv, "gpu-0", "powerMode").cloned(),
            label("edgegpu.io/jetson.power-mode").map(|m| s(&m)),
            "{board:?}"
        );
        assert_eq!(
            attr(&inv, "gpu-0", "gpuClockMaxMHz"),
            label("edgegpu.io/jetson.gpu-clock-max-mhz")
                .map(|m| Attr::Int(m.parse().unwrap()))
                .as_ref(),
            "{board:?}"
        );
        // Attributes are not labels: the device-tree model as written, spaces and all (a
        // selector written from docs/dra.md matches), where the label has its escaped form.
        assert_eq!(
            attr(&inv, "gpu-0", "board"),
            Some(&s(board.model())),
            "{board:?}"
        );
        assert!(board.model().contains(' '));
        assert_eq!(
            label("edgegpu.io/jetson.board").unwrap(),
            board.model().replace(' ', "-")
        );
        assert_eq!(
            attr(&inv, "gpu-0", "module"),
            label("edgegpu.io/jetson.module").map(|b| s(&b)).as_ref()
        );
        assert!(attr(&inv, "gpu-0", "module").is_some(), "{board:?}");
        assert!(attr(&inv, "gpu-0", "resource.kubernetes.io/pciBusID").is_none());
        // The shared memory, as the label says it (MemTotal in whole MiB).
        assert_eq!(gpu.capacity["memory"], board.mem_total_kb() / 1024 * MIB);
        assert_eq!(
            label("nvidia.com/gpu.memory").unwrap(),
            (board.mem_total_kb() / 1024).to_string()
        );
        check_slice_device_schema(&inv);
    }
}

/// What the API server's validation checks of a Device (`k8s.io/api/resource/v1`): a DNS
/// label name, ≤32 attributes and capacities, ids ≤32, strings ≤64, versions semver, exactly
/// one value per attribute.
fn check_slice_device_schema(inv: &Inventory) {
    let semver = |s: &str| {
        let parts: Vec<&str> = s.split('.').collect();
        parts.len() == 3
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && (p.len() == 1 || !p.starts_with('0'))
            })
    };
    for d in inv.slice_devices() {
        let name = d["name"].as_str().unwrap();
        assert!(
            name.len() <= 63
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        let attrs = d["attributes"].as_object().unwrap();
        let caps = d["capacity"].as_object().map_or(0, |c| c.len());
        assert!(attrs.len() + caps <= 32, "{d}");
        for (k, a) in attrs {
            let id = k.rsplit('/').next().unwrap();
            assert!(id.len() <= 32, "{k}");
            let a = a.as_object().unwrap();
            assert_eq!(a.len(), 1, "{k}: {a:?}");
            if let Some(s) = a.get("string") {
                assert!(s.as_str().unwrap().len() <= 64, "{k}");
            }
            if let Some(s) = a.get("version") {
                assert!(semver(s.as_str().unwrap()), "{k}: {s}");
            }
        }
    }
}

#[test]
fn discrete_gpus() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.with_driver_libs();
    let inv = inventory(&host, &[]);
    let names: Vec<&str> = inv.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["gpu-0", "gpu-1"]);
    assert_eq!(attr(&inv, "gpu-0", "uuid"), Some(&s(&gpus[0].uuid)));
    assert_eq!(
        attr(&inv, "gpu-0", "productName"),
        Some(&s("NVIDIA A100-SXM4-40GB"))
    );
    assert_eq!(attr(&inv, "gpu-0", "integrated"), Some(&Attr::Bool(false)));
    assert_eq!(
        attr(&inv, "gpu-1", "resource.kubernetes.io/pciBusID"),
        Some(&s("0000:ca:00.0"))
    );
    assert_eq!(
        attr(&inv, "gpu-1", "resource.kubernetes.io/numaNode"),
        Some(&Attr::Int(1))
    );
    assert_eq!(attr(&inv, "gpu-0", "driverVersion"), Some(&v("550.54.15")));
    assert_eq!(attr(&inv, "gpu-0", "architecture"), Some(&s("ampere")));
    assert_eq!(
        attr(&inv, "gpu-0", "cudaComputeCapability"),
        Some(&v("8.0.0"))
    );
    assert!(attr(&inv, "gpu-0", "l4tRelease").is_none());
    assert_eq!(inv.get("gpu-0").unwrap().capacity["memory"], 42_949_672_960);
    // The device's own node, the driver's files spec-wide (cdi generate's split).
    let nodes: Vec<&str> = inv
        .get("gpu-1")
        .unwrap()
        .edits
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect();
    assert_eq!(nodes, ["/dev/nvidia1"]);
    assert!(inv
        .common_edits
        .device_nodes
        .iter()
        .any(|n| n.path == "/dev/nvidiactl"));
    check_slice_device_schema(&inv);
    let slice = inv.slice_devices();
    assert_eq!(slice[0]["capacity"]["memory"]["value"], "42949672960");
    assert_eq!(slice[0]["attributes"]["type"], json!({"string": "gpu"}));
    assert!(slice[0].get("taints").is_none());
}

#[test]
fn mig_devices_replace_their_gpu() {
    let (host, gpus) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let mut inv = inventory(&host, &["--mig-strategy=mixed"]);
    // Without partitionable devices the MIG GPU is not published whole.
    inv.set_features(Features::ALL.without(Feature::PartitionableDevices));
    let published = inv.slice_devices();
    let names: Vec<&str> = published
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["gpu-1", "gpu-0-mig-1-0", "gpu-0-mig-5-0", "gpu-0-mig-6-0"]
    );
    assert!(inv.get("gpu-0").is_none(), "not published, not prepared");
    assert!(inv.slice_content().counter_sets.is_empty());
    let mig = inv.get("gpu-0-mig-5-0").unwrap();
    assert_eq!(mig.attributes["type"], s("mig"));
    assert_eq!(mig.attributes["parentUUID"], s(&gpus[0].uuid));
    assert_eq!(mig.attributes["profile"], s("1g.10gb"));
    assert!(matches!(&mig.attributes["uuid"], Attr::String(u) if u.starts_with("MIG-")));
    assert_eq!(mig.capacity["memory"], 9856 * MIB);
    assert!(mig.capacity["multiprocessors"] > 0);
    let nodes: Vec<&str> = mig
        .edits
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect();
    assert_eq!(
        nodes,
        [
            "/dev/nvidia0",
            "/dev/nvidia-caps/nvidia-cap53",
            "/dev/nvidia-caps/nvidia-cap54"
        ]
    );
    check_slice_device_schema(&inv);
    // Without a MIG strategy the GPUs are whole (as the plugin serves them).
    let whole = inventory(&host, &[]);
    let names: Vec<&str> = whole.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["gpu-0", "gpu-1"]);
}

#[test]
fn no_gpu_no_devices() {
    let host = FakeHost::empty();
    // Tegra discovery only: an NVML probe by soname in this process can find the fake NVML
    // another test loaded from its root.
    assert!(inventory(&host, &["--discovery=tegra"]).devices.is_empty());
}

// ---- prepare ----------------------------------------------------------------------------

struct Node {
    _host: FakeHost,
    dirs: tempfile::TempDir,
    inventory: Inventory,
    share_limits: ShareLimits,
}

impl Node {
    fn new(host: FakeHost, args: &[&str]) -> Node {
        let inventory = inventory(&host, args);
        Node {
            _host: host,
            dirs: tempfile::tempdir().unwrap(),
            inventory,
            share_limits: ShareLimits::default(),
        }
    }

    /// A node whose GPUs are shared by memory in steps of `step` bytes, the shares' limits
    /// reaching containers as `limits` says.
    fn with_memory_shares(host: FakeHost, args: &[&str], step: u64, limits: ShareLimits) -> Node {
        let shares = ShareOptions {
            memory_step: Some(step),
        };
        let inventory = discover_with(&host, args, POOL, shares);
        Node {
            _host: host,
            dirs: tempfile::tempdir().unwrap(),
            inventory,
            share_limits: limits,
        }
    }

    fn options(&self) -> NodeOptions {
        NodeOptions {
            plugin_dir: self.dirs.path().join("plugins/edgegpu.io"),
            cdi_dir: self.cdi_dir(),
            mps: MpsHost {
                mps_root: self.dirs.path().join("mps"),
                resource: "nvidia.com/gpu".into(),
            },
            share_limits: self.share_limits.clone(),
        }
    }

    fn cdi_dir(&self) -> PathBuf {
        self.dirs.path().join("cdi")
    }

    /// What the MPS companion and the driver leave under the MPS root for the node's daemon:
    /// the driver's list asking for it (no limits), and, with a state, the companion's status
    /// and its pipe directory.
    fn mps_daemon(&self, state: Option<(State, Option<&str>)>) {
        let host = self.options().mps;
        let daemon = DaemonSettings {
            resource: host.resource.clone(),
            active_thread_percentage: None,
            pinned_memory_limits: vec![],
            exclusive_gpus: vec![],
        };
        mps_status::write_desired(
            &host.mps_root,
            &Desired {
                daemons: vec![daemon.clone()],
            },
        )
        .unwrap();
        if let Some((state, reason)) = state {
            let paths = host.paths();
            std::fs::create_dir_all(&paths.pipe).unwrap();
            mps_status::write(
                &paths.status,
                &Status {
                    state,
                    reason: reason.map(str::to_string),
                    pid: Some(4242),
                    restarts: 0,
                    settings: daemon,
                },
            )
            .unwrap();
        }
    }

    fn driver(&self) -> Result<NodeDriver, RecoveryError> {
        NodeDriver::new(self.inventory.clone(), self.options(), None)
    }

    fn spec_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.cdi_dir())
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        files
    }
}

fn claim(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "default".into(),
        name: format!("claim-{uid}"),
        uid: uid.into(),
    }
}

fn alloc(devices: &[&str]) -> ClaimAllocation {
    ClaimAllocation {
        devices: devices
            .iter()
            .enumerate()
            .map(|(i, d)| AllocatedDevice {
                request: format!("req{i}"),
                pool: POOL.into(),
                device: d.to_string(),
                admin_access: false,
                share_id: None,
                consumed_capacity: Default::default(),
            })
            .collect(),
        configs: Vec::new(),
    }
}

fn with_config(mut a: ClaimAllocation, parameters: Value) -> ClaimAllocation {
    a.configs.push(OpaqueConfig {
        requests: Vec::new(),
        parameters,
        source: ConfigSource::Claim,
    });
    a
}

/// `a` with an opaque config from `source` naming `requests` (none: every request), after the
/// configs it has (class configs go first, as [`edgegpu_dra::claims::fetch`] orders them).
fn with_source_config(
    mut a: ClaimAllocation,
    source: ConfigSource,
    requests: &[&str],
    parameters: Value,
) -> ClaimAllocation {
    a.configs.push(OpaqueConfig {
        requests: requests.iter().map(|r| r.to_string()).collect(),
        parameters,
        source,
    });
    a
}

/// A `GpuConfig` with `sharing` (`None`: none).
fn gpu_config(sharing: Option<Value>) -> Value {
    let mut c = json!({"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig"});
    if let Some(s) = sharing {
        c["sharing"] = s;
    }
    c
}

/// The environment of the `i`th device of claim `uid`'s spec.
fn device_env(node: &Node, uid: &str, i: usize) -> Vec<String> {
    let spec = spec_json(&node.cdi_dir().join(format!("edgegpu.io-claim_{uid}.json")));
    spec["devices"][i]["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect()
}

const UID_A: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
const UID_B: &str = "a8098c1a-f86e-11da-bd1a-00112444be1e";

/// Loads every file with the CDI library and resolves `ids` from `dir` as a runtime does.
fn assert_cdi_resolves(dir: &Path, ids: &[String]) {
    let Some(validator) = cdi_validator() else {
        return;
    };
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let out = Command::new(&validator).args(&files).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the CDI library rejects a spec:\n{report}"
    );
    assert_eq!(report.matches(": valid").count(), files.len(), "{report}");
    let out = Command::new(&validator)
        .arg("-resolve")
        .arg(dir)
        .args(ids)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!report.contains("ERROR"), "{report}");
    for id in ids {
        assert!(
            report.contains(&format!("{id}: resolved from")),
            "{id} not resolved:\n{report}"
        );
    }
}

const CDI_GOPATH: &str = "/usr/share/gocode";
const CDI_PACKAGE: &str = "github.com/container-orchestrated-devices/container-device-interface";
const REQUIRE_REAL_TOOLS: &str = "EDGEGPU_REQUIRE_REAL_TOOLS";

/// node-setup's tests/cdi_validate built with Debian's CDI Go library (GOPATH mode, no
/// network), once per test process; `None` (skip, said on stderr) without Go or the package,
/// unless EDGEGPU_REQUIRE_REAL_TOOLS=1.
fn cdi_validator() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let required = std::env::var(REQUIRE_REAL_TOOLS).as_deref() == Ok("1");
            let go = std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join("go"))
                    .find(|p| p.is_file())
            });
            let sources = Path::new(CDI_GOPATH).join("src").join(CDI_PACKAGE);
            let (Some(go), true) = (go, sources.join("pkg/cdi/spec.go").is_file()) else {
                assert!(
                    !required,
                    "Go and the CDI Go library are required ({REQUIRE_REAL_TOOLS}=1)"
                );
                eprintln!(
                    "SKIP CDI library check: no go on PATH or no {}",
                    sources.display()
                );
                return None;
            };
            let src = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../node-setup/tests/cdi_validate/main.go");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("dra_cdi_validate-{}", std::process::id()));
            let status = Command::new(go)
                .args(["build", "-o"])
                .arg(&out)
                .arg(&src)
                .env("GOTOOLCHAIN", "local")
                .env("GO111MODULE", "off")
                .env("GOPATH", CDI_GOPATH)
                .env("GOPROXY", "off")
                .env("GOFLAGS", "")
                .status()
                .expect("run go build");
            assert!(status.success(), "go build of {} failed", src.display());
            Some(out)
        })
        .clone()
}

/// The device nodes of device `i` of a claim's spec.
fn spec_device_nodes(spec: &Value, i: usize) -> Vec<&str> {
    spec["devices"][i]["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect()
}

fn spec_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_jetson_gpu_claim_gets_cdi_generates_edits() {
    for board in [Board::Xavier, Board::Orin, Board::OrinR39, Board::Thor] {
        let node = Node::new(FakeHost::jetson_with_nvml(board), &[]);
        let driver = node.driver().unwrap();
        let prepared = driver
            .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
            .unwrap();
        assert_eq!(prepared.len(), 1);
        assert_eq!(prepared[0].device, "gpu-0");
        assert_eq!(prepared[0].pool, POOL);
        assert_eq!(prepared[0].requests, ["req0"]);
        let id = format!("edgegpu.io/claim={UID_A}-gpu-0");
        assert_eq!(prepared[0].cdi_device_ids, std::slice::from_ref(&id));
        let files = node.spec_files();
        let file = node
            .cdi_dir()
            .join(format!("edgegpu.io-claim_{UID_A}.json"));
        assert_eq!(files, std::slice::from_ref(&file), "{board:?}");
        let spec = spec_json(&file);
        assert_eq!(spec["kind"], "edgegpu.io/claim");
        // The device's nodes and the spec-wide edits are cdi generate's for this board.
        let gpu = node.inventory.get("gpu-0").unwrap();
        let nodes: Vec<&str> = spec["devices"][0]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["path"].as_str().unwrap())
            .collect();
        let want: Vec<&str> = gpu
            .edits
            .device_nodes
            .iter()
            .map(|n| n.path.as_str())
            .collect();
        assert!(!want.is_empty(), "{board:?}");
        assert_eq!(nodes, want, "{board:?}");
        assert_eq!(
            spec["containerEdits"],
            serde_json::to_value(&node.inventory.common_edits).unwrap()
        );
        assert!(spec["devices"][0]["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("EDGEGPU_DRA_CLAIM={UID_A}"))));
        assert_cdi_resolves(&node.cdi_dir(), &[id]);
        driver.unprepare_claim(&claim(UID_A)).unwrap();
        assert!(node.spec_files().is_empty());
        assert!(driver.prepared_claims().is_empty());
    }
}

#[test]
fn discrete_and_mig_claims() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.with_driver_libs();
    let node = Node::new(host, &[]);
    let driver = node.driver().unwrap();
    let p = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0", "gpu-1"]))
        .unwrap();
    let ids: Vec<String> = p.iter().flat_map(|d| d.cdi_device_ids.clone()).collect();
    assert_eq!(
        ids,
        [
            format!("edgegpu.io/claim={UID_A}-gpu-0"),
            format!("edgegpu.io/claim={UID_A}-gpu-1")
        ]
    );
    let spec = spec_json(&node.spec_files()[0]);
    assert_eq!(
        spec["devices"][1]["containerEdits"]["deviceNodes"],
        json!([{"path": "/dev/nvidia1"}])
    );
    assert!(spec["containerEdits"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["hostPath"]
            .as_str()
            .unwrap()
            .ends_with("libcuda.so.550.54.15")));
    assert_cdi_resolves(&node.cdi_dir(), &ids);

    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let node = Node::new(host, &["--mig-strategy=mixed"]);
    let driver = node.driver().unwrap();
    let p = driver
        .prepare_allocation(&claim(UID_B), &alloc(&["gpu-0-mig-5-0", "gpu-1"]))
        .unwrap();
    let ids: Vec<String> = p.iter().flat_map(|d| d.cdi_device_ids.clone()).collect();
    let spec = spec_json(&node.spec_files()[0]);
    assert_eq!(
        spec["devices"][0]["containerEdits"]["deviceNodes"],
        json!([{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia-caps/nvidia-cap53"}, {"path": "/dev/nvidia-caps/nvidia-cap54"}])
    );
    assert_cdi_resolves(&node.cdi_dir(), &ids);
}

/// A MIG GPU published whole (partitionable devices): its claim gets every MIG device of
/// the GPU, and the driver never prepares the GPU and one of its MIG devices for two claims,
/// whatever the scheduler allocated; two MIG devices of it are independent.
#[test]
fn a_mig_gpu_whole_is_its_mig_devices_together() {
    const UID_C: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let node = Node::new(host, &["--mig-strategy=mixed"]);
    let driver = node.driver().unwrap();
    let p = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    let spec = spec_json(&node.spec_files()[0]);
    let nodes = spec_device_nodes(&spec, 0);
    assert_eq!(nodes[0], "/dev/nvidia0");
    for mig in ["gpu-0-mig-1-0", "gpu-0-mig-5-0", "gpu-0-mig-6-0"] {
        for n in nodes_of_device(&node.inventory, mig) {
            assert!(nodes.contains(&n.as_str()), "{mig}: {n} in {nodes:?}");
        }
    }
    assert_eq!(
        nodes.len(),
        1 + 3 * 2,
        "the parent and two nodes per MIG device"
    );
    let ids: Vec<String> = p.iter().flat_map(|d| d.cdi_device_ids.clone()).collect();
    assert_cdi_resolves(&node.cdi_dir(), &ids);

    let busy = |uid: &str, allocation: ClaimAllocation, held_by: &[&str]| {
        let e = driver
            .prepare_allocation(&claim(uid), &allocation)
            .unwrap_err();
        assert!(
            matches!(&e, PrepareError::PartBusy { holder, .. } if held_by.contains(&holder.uid.as_str())),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("(part of the same GPU) is prepared for claim"),
            "{e}"
        );
    };
    busy(UID_B, alloc(&["gpu-0-mig-5-0"]), &[UID_A]);
    // However both are shared: a whole GPU and its MIG device never go to two claims.
    let time_slicing = || gpu_config(Some(json!({"strategy": "TimeSlicing"})));
    busy(
        UID_B,
        with_config(alloc(&["gpu-0-mig-5-0"]), time_slicing()),
        &[UID_A],
    );
    driver.unprepare_claim(&claim(UID_A)).unwrap();
    driver
        .prepare_allocation(&claim(UID_B), &alloc(&["gpu-0-mig-5-0"]))
        .unwrap();
    driver
        .prepare_allocation(&claim(UID_C), &alloc(&["gpu-0-mig-1-0"]))
        .unwrap();
    busy(UID_A, alloc(&["gpu-0"]), &[UID_B, UID_C]);
    // MPS serves whole GPUs not in MIG mode only.
    let mps = gpu_config(Some(json!({"strategy": "MPS"})));
    let e = driver
        .prepare_allocation(
            &claim("3f2504e0-4f89-41d3-9a0c-0305e82c3301"),
            &with_config(alloc(&["gpu-0-mig-6-0"]), mps),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("sharing.strategy MPS is not supported for gpu-0-mig-6-0, a MIG device"),
        "{e}"
    );

    // Where the cluster has no partitionable devices the whole GPU is not published, and a
    // claim naming it is refused.
    driver.set_features(Features::ALL.without(Feature::PartitionableDevices));
    let e = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap_err();
    assert!(matches!(&e, PrepareError::UnknownDevice { .. }), "{e:?}");
}

/// `devices` allocated as memory shares: each result with a share ID and `memory` bytes
/// consumed (what the scheduler writes for a device with allowMultipleAllocations).
fn shares(devices: &[(&str, u64)]) -> ClaimAllocation {
    let mut a = alloc(&devices.iter().map(|(d, _)| *d).collect::<Vec<_>>());
    for (result, (_, bytes)) in a.devices.iter_mut().zip(devices) {
        result.share_id = Some(format!("{:08x}-0000-4000-8000-000000000000", bytes >> 20));
        result.consumed_capacity = [("memory".to_string(), *bytes)].into_iter().collect();
    }
    a
}

/// The variables of device `i` of claim `uid`'s spec, as `KEY=VALUE`.
fn claim_env(node: &Node, uid: &str, i: usize) -> Vec<String> {
    let spec = spec_json(&node.cdi_dir().join(format!("edgegpu.io-claim_{uid}.json")));
    spec["devices"][i]["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Memory shares where MPS runs (a Jetson Orin on JetPack 6.2 with the driver's daemon):
/// each claim's share is its MPS pinned-memory limit; two shares of the GPU are prepared at
/// once; an MPS config's own limit is lowered to the share; a claim waits, with its own
/// error, while the daemon is not ready.
#[test]
fn a_memory_share_is_the_claims_mps_limit_where_mps_runs() {
    const GIB: u64 = 1 << 30;
    let node = Node::with_memory_shares(
        FakeHost::jetson(Board::Orin),
        &["--discovery=tegra"],
        256 << 20,
        ShareLimits::Mps,
    );
    let driver = node.driver().unwrap();
    node.mps_daemon(Some((State::Starting, None)));
    let e = driver
        .prepare_allocation(&claim(UID_A), &shares(&[("gpu-0", 2 * GIB)]))
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "the MPS control daemon for nvidia.com/gpu is not ready: its state is starting"
        ),
        "{e}"
    );
    assert!(node.spec_files().is_empty());

    node.mps_daemon(Some((State::Ready, None)));
    driver
        .prepare_allocation(&claim(UID_A), &shares(&[("gpu-0", 2 * GIB)]))
        .unwrap();
    let pipe = node.options().mps.paths().pipe;
    let env = claim_env(&node, UID_A, 0);
    for want in [
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M".to_string(),
        format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display()),
        "EDGEGPU_GPU_MEMORY_LIMIT_MIB=2048".to_string(),
        "EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED=true".to_string(),
    ] {
        assert!(env.contains(&want), "{want} in {env:?}");
    }
    assert!(!env
        .iter()
        .any(|v| v.starts_with("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")));

    // A second share of the same GPU, with an MPS config whose limit is above its share
    // and a compute share: the lower of the two, and its compute share.
    let mps = gpu_config(Some(json!({"strategy": "MPS",
        "mps": {"activeThreadPercentage": 40, "pinnedMemoryLimit": "4Gi"}})));
    driver
        .prepare_allocation(
            &claim(UID_B),
            &with_config(shares(&[("gpu-0", 1536 << 20)]), mps),
        )
        .unwrap();
    let env = claim_env(&node, UID_B, 0);
    assert!(
        env.contains(&"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1536M".to_string()),
        "{env:?}"
    );
    assert!(
        env.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40".to_string()),
        "{env:?}"
    );
    assert_eq!(
        driver.prepared_claims().len(),
        2,
        "both shares are prepared"
    );
}

/// Where MPS does not run (a Jetson without it, or the driver without --mps), and under
/// TimeSlicing, the share is told to the container and marked not enforced, with why: the
/// device plugin's memory-unit contract. A device not published with memory shares ignores
/// what the allocation says it consumed.
#[test]
fn a_memory_share_is_accounted_where_mps_does_not_run() {
    const GIB: u64 = 1 << 30;
    let why = "MPS cannot run here: Xavier: MPS needs JetPack 6.1";
    let node = Node::with_memory_shares(
        FakeHost::jetson(Board::Orin),
        &["--discovery=tegra"],
        256 << 20,
        ShareLimits::Accounted { why: why.into() },
    );
    let driver = node.driver().unwrap();
    driver
        .prepare_allocation(&claim(UID_A), &shares(&[("gpu-0", 3 * GIB)]))
        .unwrap();
    let env = claim_env(&node, UID_A, 0);
    for want in [
        "EDGEGPU_GPU_MEMORY_LIMIT_MIB=3072".to_string(),
        "EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED=false".to_string(),
        format!("EDGEGPU_GPU_MEMORY_LIMIT_NOTE={why}"),
    ] {
        assert!(env.contains(&want), "{want} in {env:?}");
    }
    assert!(!env.iter().any(|v| v.starts_with("CUDA_MPS_")), "{env:?}");

    let time_slicing = gpu_config(Some(json!({"strategy": "TimeSlicing"})));
    driver
        .prepare_allocation(
            &claim(UID_B),
            &with_config(shares(&[("gpu-0", GIB)]), time_slicing),
        )
        .unwrap();
    let env = claim_env(&node, UID_B, 0);
    assert!(
        env.contains(&"EDGEGPU_GPU_MEMORY_LIMIT_MIB=1024".to_string()),
        "{env:?}"
    );
    assert!(
        env.iter()
            .any(|v| v.starts_with("EDGEGPU_GPU_MEMORY_LIMIT_NOTE=sharing.strategy TimeSlicing")),
        "{env:?}"
    );

    // The same allocation on a node without memory shares: nothing of it reaches the
    // container (the device was not published shareable; the scheduler counted nothing).
    let plain = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let driver = plain.driver().unwrap();
    driver
        .prepare_allocation(&claim(UID_A), &shares(&[("gpu-0", 3 * GIB)]))
        .unwrap();
    let env = claim_env(&plain, UID_A, 0);
    assert!(
        !env.iter()
            .any(|v| v.starts_with("EDGEGPU_GPU_MEMORY_LIMIT")),
        "{env:?}"
    );
}

/// A MIG GPU whole is as healthy as its MIG devices (the plugin's health table names MIG
/// devices, never their GPU): tainted and refused while one of them is unhealthy.
#[test]
fn a_mig_gpu_whole_follows_its_mig_devices_health() {
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let node = Node::new(host, &["--mig-strategy=mixed"]);
    let driver = node.driver().unwrap();
    assert!(driver.set_health("gpu-0-mig-5-0", Health::Unhealthy, "XID 79"));
    let whole = driver
        .slice_devices()
        .into_iter()
        .find(|d| d["name"] == "gpu-0")
        .unwrap();
    assert_eq!(whole["taints"][0]["key"], "edgegpu.io/unhealthy", "{whole}");
    let e = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("MIG device gpu-0-mig-5-0 is unhealthy: XID 79"),
        "{e}"
    );
    assert!(driver.set_health("gpu-0-mig-5-0", Health::Healthy, "back"));
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
}

/// A GPU in MIG mode is never shared by memory, whatever the MIG strategy: MPS, which
/// enforces shares, does not run on it.
#[test]
fn a_gpu_in_mig_mode_gets_no_memory_shares() {
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let node = Node::with_memory_shares(host, &[], 1 << 30, ShareLimits::default());
    let published = node.inventory.slice_devices();
    let shared: Vec<&str> = published
        .iter()
        .filter(|d| d.get("allowMultipleAllocations").is_some())
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(shared, ["gpu-1"], "gpu-0 is in MIG mode");
}

#[test]
fn prepare_is_idempotent_and_survives_a_restart() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let driver = node.driver().unwrap();
    let first = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    let spec = std::fs::read(&node.spec_files()[0]).unwrap();
    // Again, even with another allocation: the stored result, nothing rewritten.
    let again = driver
        .prepare_allocation(&claim(UID_A), &alloc(&[]))
        .unwrap();
    assert_eq!(first, again);
    drop(driver);
    // A restart: the checkpoint has it.
    let driver = node.driver().unwrap();
    assert_eq!(
        driver
            .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
            .unwrap(),
        first
    );
    assert_eq!(std::fs::read(&node.spec_files()[0]).unwrap(), spec);
    let cp: Value = spec_json(&node.options().plugin_dir.join("checkpoint.json"));
    assert_eq!(cp["claims"][UID_A]["state"], "PrepareCompleted");
    assert_eq!(
        cp["claims"][UID_A]["claim"]["name"],
        format!("claim-{UID_A}")
    );
    // The kubelet side's prepare: a completed claim needs no API server.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(Driver::prepare(&driver, &claim(UID_A)))
            .unwrap(),
        first
    );
    // Not in the checkpoint and no API server: an error, nothing written. The node side's
    // error reaches the kubelet side whole.
    let e = rt
        .block_on(Driver::prepare(&driver, &claim(UID_B)))
        .unwrap_err();
    assert!(
        matches!(e.downcast_ref(), Some(PrepareError::NoApiServer)),
        "{e:?}"
    );
    rt.block_on(Driver::unprepare(&driver, &claim(UID_A)))
        .unwrap();
    rt.block_on(Driver::unprepare(&driver, &claim(UID_A)))
        .unwrap();
    assert!(node.spec_files().is_empty());
    drop(driver);
    assert!(node.driver().unwrap().prepared_claims().is_empty());
}

#[test]
fn an_interrupted_prepare_is_rolled_back_on_restart() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let driver = node.driver().unwrap();
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    driver
        .prepare_allocation(&claim(UID_B), &with_config(alloc(&["gpu-0"]), json!({"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}})))
        .unwrap_err();
    drop(driver);
    // Make claim A look interrupted between PrepareStarted and PrepareCompleted.
    let cp_path = node.options().plugin_dir.join("checkpoint.json");
    let mut cp = spec_json(&cp_path);
    cp["claims"][UID_A]["state"] = json!("PrepareStarted");
    cp["claims"][UID_A]["devices"] = json!([]);
    std::fs::write(&cp_path, serde_json::to_vec(&cp).unwrap()).unwrap();
    assert_eq!(node.spec_files().len(), 1);
    let driver = node.driver().unwrap();
    assert!(
        node.spec_files().is_empty(),
        "the interrupted claim's spec is removed"
    );
    assert!(driver.prepared_claims().is_empty());
    // And it prepares again from scratch.
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    assert_eq!(node.spec_files().len(), 1);
    drop(driver);
    // A spec no claim owns and an interrupted write's temporary file are removed at start;
    // the prepared claim's spec and other files stay.
    let orphan = node
        .cdi_dir()
        .join(format!("edgegpu.io-claim_{UID_B}.json"));
    std::fs::copy(&node.spec_files()[0], &orphan).unwrap();
    let temp = node
        .cdi_dir()
        .join(format!(".edgegpu.io-claim_{UID_B}.json.edgegpu-tmp.99999"));
    std::fs::write(&temp, "{").unwrap();
    let other = node.cdi_dir().join("nvidia.yaml");
    std::fs::write(&other, "not ours").unwrap();
    assert_eq!(node.spec_files().len(), 4);
    let _driver = node.driver().unwrap();
    assert_eq!(
        node.spec_files(),
        [
            node.cdi_dir()
                .join(format!("edgegpu.io-claim_{UID_A}.json")),
            other
        ]
    );
}

#[test]
fn a_corrupt_checkpoint_is_named_and_kept() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let driver = node.driver().unwrap();
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    drop(driver);
    let cp_path = node.options().plugin_dir.join("checkpoint.json");
    let good = std::fs::read(&cp_path).unwrap();
    std::fs::write(&cp_path, &good[..good.len() / 2]).unwrap();
    let e = node
        .driver()
        .err()
        .expect("a corrupt checkpoint is an error");
    assert!(
        matches!(&e, RecoveryError::Checkpoint(CheckpointError::Corrupt { path, .. }) if *path == cp_path),
        "{e:?}"
    );
    let e = e.to_string();
    assert!(e.contains(&cp_path.display().to_string()), "{e}");
    assert!(e.contains("corrupt"), "{e}");
    // Left as it was: claim A's record can still be repaired.
    assert_eq!(std::fs::read(&cp_path).unwrap(), &good[..good.len() / 2]);
    std::fs::write(&cp_path, &good).unwrap();
    assert_eq!(node.driver().unwrap().prepared_claims().len(), 1);
}

/// The two pods of a rolling update, each with its own copy of the checkpoint it read at its
/// start: what one prepares or unprepares the other sees at its next call (the device busy,
/// the claim answered from the checkpoint, its spec removed by the other pod), and no write
/// of one drops an entry of the other.
#[test]
fn two_instances_see_each_others_claims() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let old = node.driver().unwrap();
    let new = node.driver().unwrap();
    let prepared = old
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    let e = new
        .prepare_allocation(&claim(UID_B), &alloc(&["gpu-0"]))
        .unwrap_err();
    assert!(
        matches!(&e, PrepareError::Busy { holder, .. } if *holder == claim(UID_A)),
        "{e:?}"
    );
    // The kubelet side's prepare answers from the checkpoint (no API server here).
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(Driver::prepare(&new, &claim(UID_A))).unwrap(),
        prepared
    );
    new.unprepare_claim(&claim(UID_A)).unwrap();
    assert!(node.spec_files().is_empty(), "the other pod's spec removed");
    // The device is free for the first pod again, and its write keeps nothing stale.
    old.prepare_allocation(&claim(UID_B), &alloc(&["gpu-0"]))
        .unwrap();
    let cp = spec_json(&node.options().plugin_dir.join("checkpoint.json"));
    let uids: Vec<&String> = cp["claims"].as_object().unwrap().keys().collect();
    assert_eq!(uids, [UID_B]);
    // A checkpoint that turned unreadable stops a call instead of being overwritten.
    let cp_path = node.options().plugin_dir.join("checkpoint.json");
    std::fs::write(&cp_path, "{").unwrap();
    let e = new.unprepare_claim(&claim(UID_B)).unwrap_err();
    assert!(
        matches!(
            &e,
            PrepareError::Checkpoint(CheckpointError::Corrupt { .. })
        ),
        "{e:?}"
    );
    assert_eq!(std::fs::read(&cp_path).unwrap(), b"{");
}

/// Whether `/proc/locks` lists a process waiting for the `flock` of the file `path`.
fn flock_waiter(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let inode = format!(":{}", std::fs::metadata(path).unwrap().ino());
    std::fs::read_to_string("/proc/locks")
        .expect("/proc/locks")
        .lines()
        .any(|l| l.contains("-> FLOCK") && l.split_whitespace().any(|f| f.ends_with(&inode)))
}

/// Waits (bounded) until `work` waits for the `flock` of `lock_file`, or has ended (it would,
/// did it not take the lock).
fn waits_for_lock<T>(lock_file: &Path, work: &std::thread::JoinHandle<T>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !flock_waiter(lock_file) && !work.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "neither waits for the lock nor ends"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// While the other pod holds the lock (it prepares or unprepares), a prepare waits and
/// writes nothing; it goes on once the lock is free.
#[test]
fn a_prepare_waits_for_the_other_instances_call() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let driver = std::sync::Arc::new(node.driver().unwrap());
    let held = serialize::lock(&node.options().plugin_dir).unwrap();
    let preparing = {
        let driver = driver.clone();
        std::thread::spawn(move || {
            driver
                .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
                .map_err(|e| e.to_string())
        })
    };
    waits_for_lock(
        &node.options().plugin_dir.join(serialize::FILE_NAME),
        &preparing,
    );
    assert!(!preparing.is_finished(), "prepared while the lock was held");
    assert!(node.spec_files().is_empty());
    drop(held);
    preparing.join().unwrap().unwrap();
    assert_eq!(node.spec_files().len(), 1);
}

/// A pod of a rolling update that starts while the other pod prepares a claim (the lock held,
/// the entry `PrepareStarted`, its spec written) waits for that preparation to end, and keeps
/// the claim: only an entry found `PrepareStarted` under the lock is an abandoned one.
#[test]
fn a_starting_instance_waits_for_the_other_ones_prepare() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let old = node.driver().unwrap();
    old.prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    let cp_path = node.options().plugin_dir.join("checkpoint.json");
    let completed = std::fs::read(&cp_path).unwrap();
    let held = serialize::lock(&node.options().plugin_dir).unwrap();
    let mut started = spec_json(&cp_path);
    started["claims"][UID_A]["state"] = json!("PrepareStarted");
    started["claims"][UID_A]["devices"] = json!([]);
    std::fs::write(&cp_path, serde_json::to_vec(&started).unwrap()).unwrap();

    let (inventory, options) = (node.inventory.clone(), node.options());
    let starting = std::thread::spawn(move || NodeDriver::new(inventory, options, None));
    waits_for_lock(
        &node.options().plugin_dir.join(serialize::FILE_NAME),
        &starting,
    );
    // The preparation completes; the lock goes.
    std::fs::write(&cp_path, &completed).unwrap();
    drop(held);
    let new = starting.join().unwrap().unwrap();
    assert_eq!(node.spec_files().len(), 1, "the other pod's spec stays");
    let claims = new.prepared_claims();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].claim, claim(UID_A));
}

#[test]
fn busy_devices_and_what_shares_them() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.with_driver_libs();
    let node = Node::new(host, &[]);
    let driver = node.driver().unwrap();
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    let e = driver
        .prepare_allocation(&claim(UID_B), &alloc(&["gpu-0"]))
        .unwrap_err();
    assert!(
        matches!(&e, PrepareError::Busy { claim: c, device, holder, held_exclusively: true }
            if c.uid == UID_B && device == "gpu-0" && holder.uid == UID_A),
        "{e:?}"
    );
    let e = e.to_string();
    assert!(
        e.contains(UID_B) && e.contains("gpu-0 is busy") && e.contains(UID_A),
        "{e}"
    );
    // Nothing of B was written or recorded.
    assert_eq!(node.spec_files().len(), 1);
    assert_eq!(driver.prepared_claims().len(), 1);
    // Admin access holds nothing and is not blocked.
    let mut admin = alloc(&["gpu-0"]);
    admin.devices[0].admin_access = true;
    driver.prepare_allocation(&claim(UID_B), &admin).unwrap();
    driver.unprepare_claim(&claim(UID_B)).unwrap();
    driver.unprepare_claim(&claim(UID_A)).unwrap();
    // Time-sliced claims share; an exclusive one is then refused.
    let ts = json!({"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}});
    driver
        .prepare_allocation(&claim(UID_A), &with_config(alloc(&["gpu-1"]), ts.clone()))
        .unwrap();
    driver
        .prepare_allocation(&claim(UID_B), &with_config(alloc(&["gpu-1"]), ts))
        .unwrap();
    let e = driver
        .prepare_allocation(
            &claim("c0ffee00-0000-0000-0000-000000000003"),
            &alloc(&["gpu-1"]),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("prepared shared"), "{e}");
    let mut ids = Vec::new();
    for c in driver.prepared_claims() {
        ids.extend(c.devices.iter().flat_map(|d| d.cdi_device_ids.clone()));
    }
    assert_eq!(ids.len(), 2);
    assert_cdi_resolves(&node.cdi_dir(), &ids);
}

#[test]
fn bad_configs_and_devices_are_refused_naming_the_claim_and_field() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let driver = node.driver().unwrap();
    let cases = [
        (
            with_config(
                alloc(&["gpu-0"]),
                json!({"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"activeThreadPercentage": 150}}}),
            ),
            "config[0] (from the claim): opaque.parameters.sharing.mps.activeThreadPercentage",
        ),
        (
            with_config(
                alloc(&["gpu-0"]),
                json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}),
            ),
            "opaque.parameters.apiVersion",
        ),
        (
            alloc(&["gpu-7"]),
            "device gpu-7 is not one of this node's devices",
        ),
        (alloc(&[]), "no device of edgegpu.io is allocated"),
    ];
    for (a, want) in cases {
        let e = driver
            .prepare_allocation(&claim(UID_A), &a)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && e.contains(UID_A), "{want}: {e}");
    }
    let mut other_pool = alloc(&["gpu-0"]);
    other_pool.devices[0].pool = "node-b".into();
    let e = driver
        .prepare_allocation(&claim(UID_A), &other_pool)
        .unwrap_err();
    assert!(
        matches!(&e, PrepareError::OtherNode { pool, device, .. } if pool == "node-b" && device == "gpu-0"),
        "{e:?}"
    );
    assert!(e.to_string().contains("not on this node"), "{e}");
    // Unhealthy: tainted in the slice, refused, reported to the kubelet.
    let rx = Driver::health(&driver);
    assert!(driver.set_health("gpu-0", Health::Unhealthy, "GPU sysfs unreadable"));
    assert_eq!(rx.borrow()[0].health, Health::Unhealthy);
    assert_eq!(
        driver.slice_devices()[0]["taints"][0]["key"],
        "edgegpu.io/unhealthy"
    );
    let e = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unhealthy: GPU sysfs unreadable"), "{e}");
    assert!(node.spec_files().is_empty());
    assert!(driver.prepared_claims().is_empty());
}

/// The daemon `--mps` asks the MPS companion for on `host`, discovered with `args`.
fn mps_daemon_of(host: &FakeHost, args: &[&str]) -> Result<DaemonSettings, NoDaemon> {
    let _one_at_a_time = DISCOVERY.lock().unwrap_or_else(|p| p.into_inner());
    let snapshot = Snapshot::take(host.root(), &gpu_args(args)).unwrap();
    mps_daemon::wanted(
        snapshot.gpus_found().expect("a GPU"),
        snapshot.config.mig_strategy != MigStrategy::None,
        "nvidia.com/gpu",
    )
}

#[test]
fn the_mps_daemon_asked_for_follows_the_platform() {
    // No default limits (each claim's own are its limits) and no GPU in EXCLUSIVE_PROCESS
    // (the same GPUs serve claims outside MPS).
    let plain = DaemonSettings {
        resource: "nvidia.com/gpu".into(),
        active_thread_percentage: None,
        pinned_memory_limits: vec![],
        exclusive_gpus: vec![],
    };
    for board in [Board::Orin, Board::OrinR39, Board::Thor] {
        let host = FakeHost::jetson(board);
        assert_eq!(
            mps_daemon_of(&host, &["--discovery=tegra"]),
            Ok(plain.clone()),
            "{board:?}"
        );
    }
    // Xavier's L4T 35 ships no control binary; the Nano's Maxwell GPU predates Volta.
    let e = mps_daemon_of(&FakeHost::jetson(Board::Xavier), &["--discovery=tegra"]).unwrap_err();
    assert!(
        matches!(
            e,
            NoDaemon::Unsupported(MpsUnsupported::L4tWithoutBinary { .. })
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("L4T 35.4.1 ships no nvidia-cuda-mps-control"),
        "{e}"
    );
    let e = mps_daemon_of(&FakeHost::jetson(Board::Nano), &["--discovery=tegra"]).unwrap_err();
    assert!(
        matches!(e, NoDaemon::Unsupported(MpsUnsupported::Jetson { .. })),
        "{e:?}"
    );
    // Discrete A100s (compute capability 8.0): the same daemon.
    let gpus = FakeGpu::two_on_two_numa_nodes();
    assert_eq!(
        mps_daemon_of(&FakeHost::discrete(&gpus), &[]),
        Ok(plain.clone())
    );
    // Both GPUs published as MIG devices: no whole GPU for MPS to serve; without a MIG
    // strategy they are published whole.
    let migs = [
        FakeMig::h100(0, 1, "3g.40gb"),
        FakeMig::h100(1, 1, "3g.40gb"),
    ];
    let (host, _) = FakeHost::mig_server(&[0, 1], &migs);
    assert_eq!(
        mps_daemon_of(&host, &["--mig-strategy=mixed"]),
        Err(NoDaemon::NoWholeGpu)
    );
    assert_eq!(mps_daemon_of(&host, &[]), Ok(plain));
}

#[test]
fn mps_claims_join_the_nodes_daemon() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    let driver = node.driver().unwrap();
    let mps = json!({"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"activeThreadPercentage": 30, "pinnedMemoryLimit": "2Gi"}}});
    let prefix = format!("claim default/claim-{UID_A} ({UID_A}): ");
    let status_file = node
        .options()
        .mps
        .mps_root
        .join("nvidia.com/gpu/status.json");
    let refused = |why: &str| {
        let e = driver
            .prepare_allocation(&claim(UID_A), &with_config(alloc(&["gpu-0"]), mps.clone()))
            .unwrap_err();
        assert!(
            matches!(&e, PrepareError::NoMpsDaemon { claim: c, .. } if *c == claim(UID_A)),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.starts_with(&prefix), "{text}");
        assert!(text.contains(why), "{text}");
        // Nothing written for the refused claim: the kubelet's retry starts afresh.
        assert!(node.spec_files().is_empty());
        assert!(driver.prepared_claims().is_empty());
    };
    // No daemon asked for (the driver runs without --mps).
    refused("no MPS control daemon is asked for on this node");
    // Asked for, but no companion has reported on it.
    node.mps_daemon(None);
    refused(&format!(
        "has reported no state ({} does not exist): is the MPS companion",
        status_file.display()
    ));
    // The companion's states, with its reason.
    node.mps_daemon(Some((State::Starting, None)));
    refused("the MPS control daemon for nvidia.com/gpu is not ready: its state is starting (");
    node.mps_daemon(Some((State::Failed, Some("the daemon exited (status 3)"))));
    refused("its state is failed: the daemon exited (status 3) (");
    refused("the MPS companion restarts it");
    node.mps_daemon(Some((
        State::Refused,
        Some("the host has no nvidia-cuda-mps-control"),
    )));
    refused("its state is refused: the host has no nvidia-cuda-mps-control");
    // Ready: the claims join it.
    node.mps_daemon(Some((State::Ready, None)));
    let pipe = node.options().mps.paths().pipe;
    let p = driver
        .prepare_allocation(&claim(UID_A), &with_config(alloc(&["gpu-0"]), mps.clone()))
        .unwrap();
    driver
        .prepare_allocation(&claim(UID_B), &with_config(alloc(&["gpu-0"]), mps))
        .unwrap();
    let spec = spec_json(
        &node
            .cdi_dir()
            .join(format!("edgegpu.io-claim_{UID_A}.json")),
    );
    let edits = &spec["devices"][0]["containerEdits"];
    let env: Vec<&str> = edits["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        env.contains(&format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display()).as_str()),
        "{env:?}"
    );
    assert!(
        env.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"),
        "{env:?}"
    );
    assert!(
        env.contains(&"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M"),
        "{env:?}"
    );
    assert_eq!(edits["mounts"][1]["containerPath"], "/dev/shm");
    let mut ids = p[0].cdi_device_ids.clone();
    ids.push(format!("edgegpu.io/claim={UID_B}-gpu-0"));
    assert_cdi_resolves(&node.cdi_dir(), &ids);
}

#[test]
fn thor_mig_devices_are_integrated_and_prepare() {
    let host = FakeHost::jetson_with_nvml(Board::Thor);
    let thor = Board::Thor.nvml().unwrap();
    host.set_mig(
        std::slice::from_ref(&thor),
        &[0],
        &[
            FakeMig::h100(0, 1, "1g.10gb"),
            FakeMig::h100(0, 2, "1g.10gb"),
        ],
    );
    let node = Node::new(host, &["--mig-strategy=mixed"]);
    let names: Vec<&str> = node
        .inventory
        .devices
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["gpu-0-mig-1-0", "gpu-0-mig-2-0", "gpu-0"]);
    assert_eq!(
        attr(&node.inventory, "gpu-0", "migEnabled"),
        Some(&Attr::Bool(true))
    );
    assert_eq!(
        attr(&node.inventory, "gpu-0-mig-2-0", "integrated"),
        Some(&Attr::Bool(true))
    );
    assert_eq!(
        attr(&node.inventory, "gpu-0-mig-2-0", "parentUUID"),
        Some(&s(&thor.uuid))
    );
    assert_eq!(
        attr(&node.inventory, "gpu-0-mig-2-0", "l4tRelease"),
        Some(&v("38.2.1"))
    );
    check_slice_device_schema(&node.inventory);
    let driver = node.driver().unwrap();
    let p = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0-mig-2-0"]))
        .unwrap();
    let spec = spec_json(&node.spec_files()[0]);
    let nodes = spec_device_nodes(&spec, 0);
    assert!(
        nodes.contains(&"/dev/nvidia-caps/nvidia-cap23"),
        "{nodes:?}"
    );
    assert!(nodes.contains(&"/dev/nvidia0"), "{nodes:?}");
    assert_cdi_resolves(&node.cdi_dir(), &p[0].cdi_device_ids);
}

#[test]
fn the_plugins_health_reaches_the_slice_and_the_kubelet() {
    use edgegpu_kubelet_api::v1beta1::{Device, HEALTHY, UNHEALTHY};
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    host.with_driver_libs();
    let node = Node::new(host, &[]);
    let driver = node.driver().unwrap();
    let rx = Driver::health(&driver);
    let dev = |id: &str, health: &str| Device {
        id: id.into(),
        health: health.into(),
        ..Default::default()
    };
    // Replicas of GPU 1: one unhealthy makes the device unhealthy.
    let list = vec![
        dev(&gpus[0].uuid, HEALTHY),
        dev(&format!("{}::0", gpus[1].uuid), HEALTHY),
        dev(&format!("{}::1", gpus[1].uuid), UNHEALTHY),
        dev("GPU-unknown", UNHEALTHY),
    ];
    assert!(driver.apply_plugin_health(&list));
    assert!(!driver.apply_plugin_health(&list), "nothing changed");
    let health: Vec<(String, Health)> = rx
        .borrow()
        .iter()
        .map(|h| (h.device.clone(), h.health))
        .collect();
    assert_eq!(
        health,
        [
            ("gpu-0".to_string(), Health::Healthy),
            ("gpu-1".to_string(), Health::Unhealthy)
        ]
    );
    assert_eq!(rx.borrow()[1].pool, POOL);
    let slice = driver.slice_devices();
    assert!(slice[0].get("taints").is_none());
    assert_eq!(slice[1]["taints"][0]["effect"], "NoSchedule");
    assert!(driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-1"]))
        .unwrap_err()
        .to_string()
        .contains("unhealthy"));
    assert!(driver.apply_plugin_health(&[dev(&gpus[1].uuid, HEALTHY)]));
    assert!(driver.slice_devices()[1].get("taints").is_none());
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-1"]))
        .unwrap();
}

/// Every device node `cdi generate`'s spec gives (spec-wide and per device).
fn generated_nodes(host: &FakeHost) -> Vec<String> {
    let g = edgegpu_host::cdi::generate(&edgegpu_host::root::HostRoot::new(host.root())).unwrap();
    g.spec
        .container_edits
        .device_nodes
        .iter()
        .chain(
            g.spec
                .devices
                .iter()
                .flat_map(|d| d.container_edits.device_nodes.iter()),
        )
        .map(|n| n.path.clone())
        .collect()
}

fn nodes_of_device(inv: &Inventory, device: &str) -> Vec<String> {
    inv.get(device)
        .unwrap()
        .edits
        .device_nodes
        .iter()
        .map(|n| n.path.clone())
        .collect()
}

#[test]
fn engines_get_their_kinds_nodes_and_a_gpu_claim_no_longer_has_them() {
    let host = FakeHost::jetson(Board::Orin);
    // The fake AGX Orin root carries DLA 0's node only; an AGX Orin has two DLA cores and a
    // PVA (L4T r36 nodes: nvhost-ctrl-nvdla<N>, nvhost-ctrl-pva0).
    host.write("/dev/nvhost-ctrl-nvdla1", "");
    host.write("/dev/nvhost-ctrl-pva0", "");
    // L4T's lists give a GPU container every engine node (what cdi generate copies).
    let generated = generated_nodes(&host);
    assert!(
        generated.contains(&"/dev/nvhost-ctrl-nvdla0".to_string()),
        "{generated:?}"
    );
    let node = Node::new(host, &["--discovery=tegra"]);
    let names: Vec<&str> = node
        .inventory
        .devices
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["gpu-0", "dla-0", "dla-1", "pva-0"]);
    let gpu_nodes: Vec<String> = node
        .inventory
        .common_edits
        .device_nodes
        .iter()
        .map(|n| n.path.clone())
        .chain(nodes_of_device(&node.inventory, "gpu-0"))
        .collect();
    assert!(
        !gpu_nodes
            .iter()
            .any(|n| n.contains("nvdla") || n.contains("pva")),
        "{gpu_nodes:?}"
    );
    // The device plugin's rule (docs/engines.md section 2): every node of the kind, and
    // nvmap for the PVA.
    assert_eq!(
        nodes_of_device(&node.inventory, "dla-1"),
        ["/dev/nvhost-ctrl-nvdla0", "/dev/nvhost-ctrl-nvdla1"]
    );
    assert_eq!(
        nodes_of_device(&node.inventory, "pva-0"),
        ["/dev/nvhost-ctrl-pva0", "/dev/nvmap"]
    );
    assert_eq!(attr(&node.inventory, "dla-1", "type"), Some(&s("dla")));
    assert_eq!(attr(&node.inventory, "dla-1", "index"), Some(&Attr::Int(1)));
    assert_eq!(
        attr(&node.inventory, "pva-0", "l4tRelease"),
        Some(&v("36.4.3"))
    );
    assert_eq!(
        attr(&node.inventory, "dla-0", "module"),
        attr(&node.inventory, "gpu-0", "module")
    );
    // The engines run under the same power mode; the clock ceiling is the GPU's own.
    assert_eq!(
        attr(&node.inventory, "dla-0", "powerMode"),
        Some(&s("MODE_30W"))
    );
    assert_eq!(
        attr(&node.inventory, "gpu-0", "powerModeId"),
        Some(&Attr::Int(2))
    );
    assert_eq!(attr(&node.inventory, "dla-0", "gpuClockMaxMHz"), None);
    check_slice_device_schema(&node.inventory);

    let driver = node.driver().unwrap();
    // A pod's GPU claim and DLA claim: two specs, resolved together.
    let gpu = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    let dla = driver
        .prepare_allocation(&claim(UID_B), &alloc(&["dla-0", "dla-1"]))
        .unwrap();
    let spec = spec_json(
        &node
            .cdi_dir()
            .join(format!("edgegpu.io-claim_{UID_B}.json")),
    );
    for i in 0..2 {
        let edits = &spec["devices"][i]["containerEdits"];
        assert_eq!(
            edits["deviceNodes"],
            json!([{ "path": "/dev/nvhost-ctrl-nvdla0" }, { "path": "/dev/nvhost-ctrl-nvdla1" }])
        );
        assert!(
            edits["env"]
                .as_array()
                .unwrap()
                .contains(&json!("EDGEGPU_DLA_CORES=0,1")),
            "{edits}"
        );
    }
    let ids: Vec<String> = gpu
        .iter()
        .chain(&dla)
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_cdi_resolves(&node.cdi_dir(), &ids);
    // Sharing is for GPUs.
    let e = driver
        .prepare_allocation(
            &claim("c0ffee00-0000-0000-0000-000000000003"),
            &{
                let mut a = with_config(alloc(&["pva-0"]), json!({"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}));
                a.configs[0].requests = vec!["req0".into()];
                a
            },
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("not to pva-0"), "{e}");
    // A claim-wide sharing config passes over the engines (and applies to the GPU).
    let mut mixed = alloc(&["gpu-0", "pva-0"]);
    mixed.configs.push(OpaqueConfig {
        requests: vec![],
        parameters: json!({"apiVersion": "edgegpu.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}),
        source: ConfigSource::Claim,
    });
    driver.unprepare_claim(&claim(UID_A)).unwrap();
    let uid = "c0ffee00-0000-0000-0000-000000000005";
    driver.prepare_allocation(&claim(uid), &mixed).unwrap();
    let held = driver
        .prepared_claims()
        .into_iter()
        .find(|c| c.claim.uid == uid)
        .unwrap()
        .held;
    assert_eq!(
        held,
        [("gpu-0".to_string(), false), ("pva-0".to_string(), true)]
    );
    // ... but one naming the PVA's request is refused.
    mixed.configs[0].requests = vec!["req1".into()];
    let e = driver
        .prepare_allocation(&claim("c0ffee00-0000-0000-0000-000000000006"), &mixed)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("request req1") && e.contains("not to pva-0"),
        "{e}"
    );
    // DLA cores are exclusive like GPUs.
    let e = driver
        .prepare_allocation(
            &claim("c0ffee00-0000-0000-0000-000000000004"),
            &alloc(&["dla-1"]),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("dla-1 is busy"), "{e}");
    // Engine health: the plugin's check (node present) marks a DLA core unhealthy.
    let rx = Driver::health(&driver);
    assert!(!driver.check_engine_health(node._host.root()));
    node._host.remove_node("/dev/nvhost-ctrl-nvdla1");
    assert!(driver.check_engine_health(node._host.root()));
    let dla1 = rx
        .borrow()
        .iter()
        .find(|h| h.device == "dla-1")
        .cloned()
        .unwrap();
    assert_eq!(dla1.health, Health::Unhealthy);
    assert!(
        dla1.message.contains("/dev/nvhost-ctrl-nvdla1"),
        "{}",
        dla1.message
    );
    let slice = driver.slice_devices();
    let tainted: Vec<&str> = slice
        .iter()
        .filter(|d| d.get("taints").is_some())
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(tainted, ["dla-1"]);
    node._host.restore_node("/dev/nvhost-ctrl-nvdla1");
    assert!(driver.check_engine_health(node._host.root()));
    assert!(driver
        .slice_devices()
        .iter()
        .all(|d| d.get("taints").is_none()));
}

/// The device nodes and environment of the only device of claim `uid`'s spec.
fn claim_nodes_and_env(node: &Node, uid: &str) -> (Vec<String>, Vec<String>) {
    let spec = spec_json(&node.cdi_dir().join(format!("edgegpu.io-claim_{uid}.json")));
    let devices = spec["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{spec}");
    let edits = &devices[0]["containerEdits"];
    let strings = |v: &Value, key: &str| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| match key {
                "" => x.as_str().unwrap().to_string(),
                k => x[k].as_str().unwrap().to_string(),
            })
            .collect()
    };
    (
        strings(&edits["deviceNodes"], "path"),
        strings(&edits["env"], ""),
    )
}

#[test]
fn a_claim_for_one_core_sees_it_under_its_host_index_on_r35_and_r36() {
    // R36 (control nodes only): a claim for DLA core 1 gets both cores' control nodes, so
    // index 1 is core 1 whether user space opens `nvhost-ctrl-nvdla1` by name or counts the
    // nodes it sees; the variable names the core the claim holds.
    let node = Node::new(
        FakeHost::jetson_with_engines(Board::Orin),
        &["--discovery=tegra"],
    );
    let driver = node.driver().unwrap();
    let dla = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["dla-1"]))
        .unwrap();
    let (nodes, env) = claim_nodes_and_env(&node, UID_A);
    assert_eq!(
        nodes,
        ["/dev/nvhost-ctrl-nvdla0", "/dev/nvhost-ctrl-nvdla1"]
    );
    assert!(env.contains(&"EDGEGPU_DLA_CORES=1".to_string()), "{env:?}");
    let pva = driver
        .prepare_allocation(&claim(UID_B), &alloc(&["pva-0"]))
        .unwrap();
    let (nodes, env) = claim_nodes_and_env(&node, UID_B);
    assert_eq!(nodes, ["/dev/nvhost-ctrl-pva0", "/dev/nvmap"]);
    assert!(
        env.contains(&"EDGEGPU_PVA_INSTANCES=0".to_string()),
        "{env:?}"
    );
    let ids: Vec<String> = dla
        .iter()
        .chain(&pva)
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();
    assert_cdi_resolves(&node.cdi_dir(), &ids);

    // R35 (a control and a plain node per engine): the same rule, every node of the kind.
    let node = Node::new(
        FakeHost::jetson_with_engines(Board::Xavier),
        &["--discovery=tegra"],
    );
    let driver = node.driver().unwrap();
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["dla-1"]))
        .unwrap();
    let (nodes, env) = claim_nodes_and_env(&node, UID_A);
    assert_eq!(
        nodes,
        [
            "/dev/nvhost-ctrl-nvdla0",
            "/dev/nvhost-nvdla0",
            "/dev/nvhost-ctrl-nvdla1",
            "/dev/nvhost-nvdla1"
        ]
    );
    assert!(env.contains(&"EDGEGPU_DLA_CORES=1".to_string()), "{env:?}");
    driver
        .prepare_allocation(&claim(UID_B), &alloc(&["pva-1"]))
        .unwrap();
    let (nodes, _) = claim_nodes_and_env(&node, UID_B);
    assert_eq!(
        nodes,
        [
            "/dev/nvhost-ctrl-pva0",
            "/dev/nvhost-pva0",
            "/dev/nvhost-ctrl-pva1",
            "/dev/nvhost-pva1",
            "/dev/nvmap"
        ]
    );
}

#[test]
fn a_spec_that_cannot_be_written_leaves_no_claim_behind() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    // The CDI directory's place is taken by a file.
    std::fs::write(node.cdi_dir(), "not a directory").unwrap();
    let driver = node.driver().unwrap();
    let e = driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap_err();
    assert!(matches!(e, PrepareError::Spec { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains(UID_A) && e.contains(&node.cdi_dir().display().to_string()),
        "{e}"
    );
    assert!(driver.prepared_claims().is_empty());
    let cp = spec_json(&node.options().plugin_dir.join("checkpoint.json"));
    assert_eq!(cp["claims"], json!({}));
    // Once the directory can be made, the kubelet's retry succeeds.
    std::fs::remove_file(node.cdi_dir()).unwrap();
    driver
        .prepare_allocation(&claim(UID_A), &alloc(&["gpu-0"]))
        .unwrap();
    assert_eq!(node.spec_files().len(), 1);
}

/// The Orin's GPU allocated for `req0/small` (a subrequest), with the DeviceClass's `class`
/// config (naming `req0`, as the scheduler copies class configs) and then the claim's
/// `claim_config` (naming no request).
fn class_and_claim(class: Value, claim_config: Value) -> ClaimAllocation {
    let mut a = alloc(&["gpu-0"]);
    a.devices[0].request = "req0/small".into();
    let a = with_source_config(a, ConfigSource::Class, &["req0"], class);
    with_source_config(a, ConfigSource::Claim, &[], claim_config)
}

#[test]
fn a_device_classs_mps_limits_are_a_ceiling_the_claim_cannot_raise() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    node.mps_daemon(Some((State::Ready, None)));
    let driver = node.driver().unwrap();
    let class = gpu_config(Some(
        json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 50, "pinnedMemoryLimit": "4Gi"}}),
    ));
    let name = format!("claim default/claim-{UID_A} ({UID_A}): request req0/small: ");
    // A claim asking for more than the class allows is refused (before, its config won).
    let cases = [
        (
            json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 100}}),
            "the claim's sharing.mps.activeThreadPercentage 100 exceeds the DeviceClass's 50",
        ),
        (
            json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 50, "pinnedMemoryLimit": "8Gi"}}),
            "the claim's sharing.mps.pinnedMemoryLimit 8Gi exceeds the DeviceClass's 4Gi",
        ),
        (
            json!({"strategy": "MPS", "mps": {"pinnedMemoryLimit": 4294967297u64}}),
            "the claim's sharing.mps.pinnedMemoryLimit 4294967297 exceeds the DeviceClass's 4Gi",
        ),
    ];
    for (sharing, want) in cases {
        let e = driver
            .prepare_allocation(
                &claim(UID_A),
                &class_and_claim(class.clone(), gpu_config(Some(sharing))),
            )
            .unwrap_err();
        assert!(matches!(e, PrepareError::ClassCeiling { .. }), "{e:?}");
        assert_eq!(e.to_string(), format!("{name}{want}"));
    }
    assert!(node.spec_files().is_empty());
    assert!(driver.prepared_claims().is_empty());
    // At or below the class's limits: the claim's; a limit it leaves out: the class's.
    let allowed = [
        (
            json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 30, "pinnedMemoryLimit": "2Gi"}}),
            [
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M",
            ],
        ),
        (
            json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 20}}),
            [
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M",
            ],
        ),
        (
            json!({"strategy": "MPS"}),
            [
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M",
            ],
        ),
    ];
    for (sharing, want) in allowed {
        driver
            .prepare_allocation(
                &claim(UID_A),
                &class_and_claim(class.clone(), gpu_config(Some(sharing.clone()))),
            )
            .unwrap();
        let env = device_env(&node, UID_A, 0);
        for w in want {
            assert!(env.contains(&w.to_string()), "{sharing}: {env:?}");
        }
        driver.unprepare_claim(&claim(UID_A)).unwrap();
    }
    // Without a claim config the class's applies.
    let a = with_source_config(
        alloc(&["gpu-0"]),
        ConfigSource::Class,
        &["req0"],
        class.clone(),
    );
    driver.prepare_allocation(&claim(UID_A), &a).unwrap();
    let env = device_env(&node, UID_A, 0);
    assert!(
        env.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50".to_string()),
        "{env:?}"
    );
    driver.unprepare_claim(&claim(UID_A)).unwrap();
    // A limit the class does not set is the claim's to set.
    let memory_only = gpu_config(Some(
        json!({"strategy": "MPS", "mps": {"pinnedMemoryLimit": "4Gi"}}),
    ));
    driver
        .prepare_allocation(
            &claim(UID_A),
            &class_and_claim(
                memory_only,
                gpu_config(Some(
                    json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 100}}),
                )),
            ),
        )
        .unwrap();
    let env = device_env(&node, UID_A, 0);
    assert!(
        env.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100".to_string()),
        "{env:?}"
    );
    assert!(
        env.contains(&"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M".to_string()),
        "{env:?}"
    );
    assert_cdi_resolves(
        &node.cdi_dir(),
        &[format!("edgegpu.io/claim={UID_A}-gpu-0")],
    );
}

#[test]
fn a_claim_cannot_switch_drop_or_add_the_device_classs_sharing() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    node.mps_daemon(Some((State::Ready, None)));
    let driver = node.driver().unwrap();
    let mps = gpu_config(Some(
        json!({"strategy": "MPS", "mps": {"activeThreadPercentage": 50}}),
    ));
    let time_slicing = gpu_config(Some(json!({"strategy": "TimeSlicing"})));
    let exclusive = gpu_config(None);
    let cases = [
        // MPS → time-slicing: the MPS limits would be gone.
        (
            mps.clone(),
            time_slicing.clone(),
            "request req0/small: the claim's sharing.strategy TimeSlicing differs from the DeviceClass's MPS",
        ),
        (
            time_slicing.clone(),
            mps.clone(),
            "request req0/small: the claim's sharing.strategy MPS differs from the DeviceClass's TimeSlicing",
        ),
        // Dropping the class's sharing.
        (
            mps.clone(),
            exclusive.clone(),
            "request req0/small: the claim's config has no sharing, which would drop the DeviceClass's sharing.strategy MPS",
        ),
        // Sharing a device the class holds exclusively.
        (
            exclusive.clone(),
            time_slicing.clone(),
            "request req0/small: the claim's sharing.strategy TimeSlicing is not allowed: the DeviceClass's config sets no sharing (the device is held exclusively)",
        ),
    ];
    for (class, from_claim, want) in cases {
        let e = driver
            .prepare_allocation(&claim(UID_A), &class_and_claim(class, from_claim))
            .unwrap_err()
            .to_string();
        assert!(e.contains(UID_A) && e.ends_with(want), "{want}: {e}");
    }
    assert!(node.spec_files().is_empty());
    assert!(driver.prepared_claims().is_empty());
    // The class's exclusive device stays exclusive; its time-sliced one is shared by two
    // claims, one of which says nothing.
    driver
        .prepare_allocation(
            &claim(UID_A),
            &class_and_claim(exclusive.clone(), exclusive),
        )
        .unwrap();
    assert_eq!(
        driver.prepared_claims()[0].held,
        [("gpu-0".to_string(), true)]
    );
    driver.unprepare_claim(&claim(UID_A)).unwrap();
    driver
        .prepare_allocation(
            &claim(UID_A),
            &class_and_claim(time_slicing.clone(), time_slicing.clone()),
        )
        .unwrap();
    let class_only = with_source_config(alloc(&["gpu-0"]), ConfigSource::Class, &[], time_slicing);
    driver
        .prepare_allocation(&claim(UID_B), &class_only)
        .unwrap();
    assert_eq!(driver.prepared_claims().len(), 2);
    // Without a class config, the claim's applies as before.
    driver.unprepare_claim(&claim(UID_A)).unwrap();
    driver.unprepare_claim(&claim(UID_B)).unwrap();
    let a = with_source_config(alloc(&["gpu-0"]), ConfigSource::Claim, &["req0"], mps);
    driver.prepare_allocation(&claim(UID_A), &a).unwrap();
    assert!(
        device_env(&node, UID_A, 0).contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50".to_string())
    );
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn a_claim_uid_that_is_not_a_uuid_names_no_file() {
    let node = Node::new(FakeHost::jetson(Board::Orin), &["--discovery=tegra"]);
    // What a traversal would need to land outside the CDI directory.
    std::fs::create_dir_all(node.cdi_dir().join("edgegpu.io-claim_..")).unwrap();
    std::fs::create_dir_all(node.dirs.path().join("etc")).unwrap();
    let driver = node.driver().unwrap();
    for uid in [
        "../../../etc/x",
        "a/b",
        "not-a-uuid",
        "7c9e6679-7425-40de-944b-e07fc1f90ae7/..",
    ] {
        let e = driver
            .prepare_allocation(&claim(uid), &alloc(&["gpu-0"]))
            .unwrap_err();
        assert!(
            matches!(&e, PrepareError::InvalidUid { source, .. } if source.uid == uid),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "claim default/claim-{uid} ({uid}): claim UID {uid:?} is not a UUID (8-4-4-4-12 hexadecimal digits, as Kubernetes generates): refused, nothing written"
            )
        );
        let e = driver.unprepare_claim(&claim(uid)).unwrap_err().to_string();
        assert!(e.contains("is not a UUID"), "{e}");
    }
    // Nothing written: no spec, no checkpoint, inside the CDI directory or out of it; only
    // the lock file that start-up took (edgegpu_dra::serialize).
    assert_eq!(
        files_under(node.dirs.path()),
        [node.options().plugin_dir.join(serialize::FILE_NAME)]
    );
    assert!(driver.prepared_claims().is_empty());
    // Kubernetes' UIDs, in either case, are fine.
    let upper = UID_A.to_uppercase();
    driver
        .prepare_allocation(&claim(&upper), &alloc(&["gpu-0"]))
        .unwrap();
    assert_eq!(
        node.spec_files().last().unwrap(),
        &node
            .cdi_dir()
            .join(format!("edgegpu.io-claim_{upper}.json"))
    );
    driver.unprepare_claim(&claim(&upper)).unwrap();
}
