//! Sharing a GPU with limits through the fake kubelet: MPS replicas and memory units, what
//! a container receives, when the devices are healthy (the companion's status), and the
//! refusals where a platform cannot run MPS.

use crate::gpu_common;

use edgegpu_kubelet_api::v1beta1::{HEALTHY, UNHEALTHY};
use edgegpu_node::mps::plan::{DaemonSettings, DeviceLimit};
use edgegpu_node::mps::status::{self, State, Status};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use gpu_common::{config_file, ids, Plugin};

const MIB: u64 = 1 << 20;
/// `nvidia.com/gpu`'s shared-memory directory under the MPS root: one per resource.
const GPU_RESOURCE_SHM: &str = "nvidia.com/gpu/shm";

/// `--mps-root` in a temporary directory (the flag's value and the directory).
fn mps_root() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let flag = format!("--mps-root={}", dir.path().display());
    (dir, flag)
}

/// What the companion would report for `settings`.
fn report(root: &std::path::Path, settings: &DaemonSettings, state: State) {
    let path = root.join(&settings.resource).join("status.json");
    status::write(
        &path,
        &Status {
            state,
            reason: Some("test".into()),
            pid: Some(1),
            restarts: 0,
            settings: settings.clone(),
        },
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orin_mps_replicas_wait_for_the_daemon_and_carry_their_limits() {
    let host = FakeHost::jetson(Board::Orin);
    let (root, root_flag) = mps_root();
    let (_config, config) = config_file(
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
    );
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", &config, &root_flag]).await;
    assert_eq!(
        ids(&plugin.devices()),
        ["tegra::0", "tegra::1", "tegra::2", "tegra::3"]
    );

    // The even split of the board's memory (MemTotal: the GPU's memory on a Jetson) and its
    // threads, asked of the companion by index (a Jetson GPU has no UUID without NVML).
    let per_replica_mib = Board::Orin.mem_total_kb() * 1024 / 4 / MIB;
    let wanted = DaemonSettings {
        resource: "nvidia.com/gpu".into(),
        exclusive_gpus: vec![],
        active_thread_percentage: Some(25),
        pinned_memory_limits: vec![DeviceLimit {
            ordinal: 0,
            uuid: None,
            mib: per_replica_mib,
        }],
    };
    let desired = status::read_desired(root.path())
        .unwrap()
        .expect("daemons.json");
    assert_eq!(desired.daemons, std::slice::from_ref(&wanted));

    // No daemon yet: no pod may start a client.
    plugin
        .wait_devices("unhealthy until the daemon is ready", |d| {
            d.len() == 4 && d.iter().all(|x| x.health == UNHEALTHY)
        })
        .await;
    report(root.path(), &wanted, State::Ready);
    plugin
        .wait_devices("healthy once ready", |d| {
            d.iter().all(|x| x.health == HEALTHY)
        })
        .await;

    let (_, r) = plugin.kubelet.admit(&plugin.name, 1).await.expect("admit");
    let pipe = root.path().join("nvidia.com/gpu/pipe");
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "tegra");
    assert_eq!(
        r.envs["CUDA_MPS_PIPE_DIRECTORY"],
        pipe.display().to_string()
    );
    assert_eq!(
        r.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
        format!("0={per_replica_mib}M")
    );
    assert_eq!(r.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    assert_eq!(
        r.envs["EDGEGPU_GPU_MEMORY_LIMIT_MIB"],
        per_replica_mib.to_string()
    );
    assert_eq!(r.envs["EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED"], "true");
    let mounts: Vec<(String, String)> = r
        .mounts
        .iter()
        .map(|m| (m.host_path.clone(), m.container_path.clone()))
        .collect();
    assert_eq!(
        mounts,
        [
            (pipe.display().to_string(), pipe.display().to_string()),
            (
                root.path().join(GPU_RESOURCE_SHM).display().to_string(),
                "/dev/shm".to_string()
            ),
        ]
    );
    // NVIDIA's MPS default: one replica per container.
    let err = plugin
        .allocate(&["tegra::0", "tegra::1"])
        .await
        .unwrap_err();
    assert!(err
        .message()
        .contains("maximum request size for shared resources is 1"));

    // The daemon dies: no new clients until it is back; settings of another config are not
    // taken for ready.
    report(root.path(), &wanted, State::Failed);
    plugin
        .wait_devices("unhealthy after a failure", |d| {
            d.iter().all(|x| x.health == UNHEALTHY)
        })
        .await;
    let other = DaemonSettings {
        active_thread_percentage: Some(50),
        ..wanted.clone()
    };
    report(root.path(), &other, State::Ready);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(plugin.devices().iter().all(|x| x.health == UNHEALTHY));
    report(root.path(), &wanted, State::Ready);
    plugin
        .wait_devices("healthy again", |d| d.iter().all(|x| x.health == HEALTHY))
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_mps_names_gpus_by_uuid_with_overrides() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let (root, root_flag) = mps_root();
    let (_config, config) = config_file(
        "version: v1\nsharing:\n  mps:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n      activeThreadPercentage: 40\n      pinnedDeviceMemoryLimit: 3Gi\n",
    );
    let plugin = Plugin::start(host.root(), &[&config, &root_flag]).await;
    assert_eq!(plugin.name, "nvidia.com/gpu.shared");
    let desired = status::read_desired(root.path()).unwrap().unwrap();
    let wanted = &desired.daemons[0];
    assert_eq!(wanted.resource, "nvidia.com/gpu.shared");
    // Discrete GPUs go EXCLUSIVE_PROCESS while MPS serves them (not a Jetson: see the Orin test).
    assert_eq!(
        wanted.exclusive_gpus,
        gpus.iter().map(|g| g.uuid.clone()).collect::<Vec<_>>()
    );
    assert_eq!(wanted.active_thread_percentage, Some(40));
    assert_eq!(
        wanted.pinned_memory_limits,
        gpus.iter()
            .enumerate()
            .map(|(i, g)| DeviceLimit {
                ordinal: i as u32,
                uuid: Some(g.uuid.clone()),
                mib: 3072,
            })
            .collect::<Vec<_>>()
    );
    report(root.path(), wanted, State::Ready);
    plugin
        .wait_devices("healthy", |d| d.iter().all(|x| x.health == HEALTHY))
        .await;
    let second = format!("{}::2", gpus[1].uuid);
    let r = plugin.allocate(&[&second]).await.unwrap();
    assert_eq!(
        r.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
        format!("{}=3072M", gpus[1].uuid)
    );
    assert_eq!(r.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "40");
    assert_eq!(
        r.envs["CUDA_MPS_PIPE_DIRECTORY"],
        root.path()
            .join("nvidia.com/gpu.shared/pipe")
            .display()
            .to_string()
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_units_where_mps_cannot_run_are_accounted_and_say_so() {
    let host = FakeHost::jetson(Board::Nano);
    let (root, root_flag) = mps_root();
    let (_config, config) = config_file(
        "version: v1\nsharing:\n  gpuMemory:\n    unit: 512Mi\n    resources:\n    - name: nvidia.com/gpu\n",
    );
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", &config, &root_flag]).await;
    assert_eq!(plugin.name, "nvidia.com/gpu-mem");
    // Every unit of the board's memory, healthy at once: no daemon to wait for.
    let units = Board::Nano.mem_total_kb() * 1024 / (512 * MIB);
    let devices = plugin.devices();
    assert_eq!(devices.len() as u64, units);
    assert!(devices.iter().all(|d| d.health == HEALTHY));
    assert_eq!(
        status::read_desired(root.path()).unwrap(),
        None,
        "nothing asked of a companion"
    );

    let (chosen, r) = plugin.kubelet.admit(&plugin.name, 3).await.unwrap();
    assert_eq!(chosen.len(), 3);
    assert_eq!(r.envs["EDGEGPU_GPU_MEMORY_LIMIT_MIB"], "1536");
    assert_eq!(r.envs["EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED"], "false");
    let note = &r.envs["EDGEGPU_GPU_MEMORY_LIMIT_NOTE"];
    assert!(note.contains("Volta"), "{note}");
    assert!(
        !r.envs.keys().any(|k| k.starts_with("CUDA_MPS_")),
        "{:?}",
        r.envs
    );
    assert!(r.mounts.is_empty());
    let resource = &plugin.resource;
    let limit = resource.memory_limit(&chosen).unwrap();
    assert_eq!(limit.bytes, 1536 * MIB);
    assert!(!limit.enforced);
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_units_of_one_container_come_from_one_gpu() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    let (_root, root_flag) = mps_root();
    let (_config, config) = config_file(&format!(
        "version: v1\nsharing:\n  gpuMemory:\n    unit: 1Gi\n    enforcement: none\n    resources:\n    - name: nvidia.com/gpu\n      memory: {}Mi\n",
        4 * 1024
    ));
    let plugin = Plugin::start(host.root(), &[&config, &root_flag]).await;
    assert_eq!(plugin.devices().len(), 8, "4 units on each of 2 GPUs");
    // 3 units, then 2: the second container cannot fit on the first GPU and gets the other.
    let (a, ra) = plugin.kubelet.admit(&plugin.name, 3).await.unwrap();
    let (b, _) = plugin.kubelet.admit(&plugin.name, 2).await.unwrap();
    let gpu_of = |id: &String| id.split("::").next().unwrap().to_string();
    assert!(a.iter().all(|id| gpu_of(id) == gpu_of(&a[0])), "{a:?}");
    assert!(b.iter().all(|id| gpu_of(id) == gpu_of(&b[0])), "{b:?}");
    assert_ne!(gpu_of(&a[0]), gpu_of(&b[0]));
    assert_eq!(ra.envs["NVIDIA_VISIBLE_DEVICES"], gpu_of(&a[0]));
    assert_eq!(ra.envs["EDGEGPU_GPU_MEMORY_LIMIT_MIB"], "3072");
    assert_eq!(
        ra.envs["EDGEGPU_GPU_MEMORY_LIMIT_NOTE"],
        "sharing.gpuMemory.enforcement is none: accounting only"
    );
    // A kubelet without GetPreferredAllocation could hand over a split: refused, named.
    let split = [
        format!("{}::0", gpus[0].uuid),
        format!("{}::3", gpus[1].uuid),
    ];
    let refs: Vec<&str> = split.iter().map(String::as_str).collect();
    let err = plugin.allocate(&refs).await.unwrap_err();
    assert!(
        err.message().contains("must come from one GPU"),
        "{}",
        err.message()
    );
    assert!(err.message().contains(&gpus[0].uuid), "{}", err.message());
    plugin.stop().await;
}

#[tokio::test]
async fn mps_is_refused_where_the_platform_cannot_run_it() {
    let mps = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n";
    let (_config, config) = config_file(mps);
    let (_root, root_flag) = mps_root();
    for (board, words) in [
        (Board::Nano, &["Maxwell", "only Volta MPS"][..]),
        (
            Board::Xavier,
            &["L4T 35.4.1 ships no nvidia-cuda-mps-control", "R36.4"][..],
        ),
    ] {
        let host = FakeHost::jetson(board);
        let err = gpu_common::resource(host.root(), &["--discovery=tegra", &config, &root_flag])
            .await
            .err()
            .unwrap_or_else(|| panic!("{board:?}: MPS accepted"));
        let text = format!("{err:#}");
        assert!(
            text.contains("sharing.mps for nvidia.com/gpu refused"),
            "{text}"
        );
        for w in words {
            assert!(text.contains(w), "{board:?}: {w:?} missing in {text}");
        }
    }
    // Memory units demanding MPS enforcement are refused likewise; time-slicing still works.
    let host = FakeHost::jetson(Board::Nano);
    let (_c, strict) = config_file(
        "version: v1\nsharing:\n  gpuMemory:\n    enforcement: mps\n    resources:\n    - name: nvidia.com/gpu\n",
    );
    let err = gpu_common::resource(host.root(), &["--discovery=tegra", &strict, &root_flag])
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("enforcement: mps"), "{err:#}");
    let (_t, ts) = gpu_common::time_slicing_config(2);
    let r = gpu_common::resource(host.root(), &["--discovery=tegra", &ts, &root_flag])
        .await
        .unwrap();
    assert_eq!(r.advertised().len(), 2);
}

#[tokio::test]
async fn mps_with_mig_devices_is_refused() {
    let (host, _) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    let (_config, config) = config_file(
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n",
    );
    let (_root, root_flag) = mps_root();
    let err = gpu_common::resources(host.root(), &["--mig-strategy=mixed", &config, &root_flag])
        .await
        .err()
        .expect("refused");
    assert!(
        format!("{err:#}").contains("MPS is not supported for MIG devices"),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thor_on_jetpack_7_runs_mps_by_ordinal_without_touching_the_compute_mode() {
    // Thor's CUDA 13.0 brings MPS (L4T R38.2); like every Jetson it has no compute mode to
    // change and its one GPU is CUDA device 0.
    let host = FakeHost::jetson(Board::Thor);
    let (root, root_flag) = mps_root();
    let (_config, config) = config_file(
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
    );
    let plugin = Plugin::start(host.root(), &["--discovery=tegra", &config, &root_flag]).await;
    let desired = status::read_desired(root.path())
        .unwrap()
        .expect("daemons.json");
    let wanted = &desired.daemons[0];
    assert_eq!(wanted.active_thread_percentage, Some(50));
    assert!(wanted.exclusive_gpus.is_empty());
    assert_eq!(
        wanted.pinned_memory_limits,
        [DeviceLimit {
            ordinal: 0,
            uuid: None,
            mib: Board::Thor.mem_total_kb() * 1024 / 2 / MIB,
        }]
    );
    report(root.path(), wanted, State::Ready);
    plugin
        .wait_devices("healthy", |d| d.iter().all(|x| x.health == HEALTHY))
        .await;
    let r = plugin.allocate(&["tegra::1"]).await.unwrap();
    assert_eq!(
        r.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
        format!("0={}M", Board::Thor.mem_total_kb() * 1024 / 2 / MIB)
    );
    plugin.stop().await;
}
