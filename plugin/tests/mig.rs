//! MIG through the fake NVML: `--mig-strategy none|single|mixed` with NVIDIA's resource
//! names, one socket per resource, MIG device UUIDs (or NVIDIA's `<gpu>:<mig>` indices) and
//! CDI names in what a pod receives, their `/dev/nvidia-caps` nodes, health per MIG device,
//! Jetson Thor's MIG, and a MIG reconfiguration while the real binary runs.

use crate::gpu_common;

use std::process::{Child, Stdio};

use edgegpu_kubelet_api::v1beta1::{HEALTHY, UNHEALTHY};
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use edgegpu_testkit::kubelet::FakeKubelet;
use edgegpu_testkit::process::binary_command;
use gpu_common::{ids, spec_paths, Node, WAIT};

/// Two H100s: GPU 0 split into 3g.40gb (GPU instance 1) and two 1g.10gb (5, 6); GPU 1 whole.
fn mixed_host() -> (FakeHost, Vec<FakeGpu>) {
    FakeHost::mig_server(&[0], &FakeMig::h100_mixed())
}

/// Both H100s split into 1g.10gb devices only.
fn uniform_host() -> (FakeHost, Vec<FakeGpu>, Vec<FakeMig>) {
    let migs = vec![
        FakeMig::h100(0, 7, "1g.10gb"),
        FakeMig::h100(0, 8, "1g.10gb"),
        FakeMig::h100(1, 7, "1g.10gb"),
    ];
    let (host, gpus) = FakeHost::mig_server(&[0, 1], &migs);
    (host, gpus, migs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_serves_mig_enabled_gpus_whole() {
    let (host, gpus) = mixed_host();
    let node = Node::start(host.root(), &["--mig-strategy=none"])
        .await
        .unwrap();
    assert_eq!(node.names(), vec!["nvidia.com/gpu"]);
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/gpu")),
        vec![gpus[0].uuid.clone(), gpus[1].uuid.clone()]
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_serves_one_resource_per_profile_on_its_own_socket() {
    let (host, gpus) = mixed_host();
    let node = Node::start(
        host.root(),
        &[
            "--mig-strategy=mixed",
            "--pass-device-specs",
            "--device-list-strategy=envvar,cdi-cri",
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        node.names(),
        vec![
            "nvidia.com/gpu",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-3g.40gb"
        ]
    );
    // One socket per resource, each registered on its own endpoint.
    let endpoints: Vec<String> = node
        .names()
        .iter()
        .map(|n| {
            let info = node.kubelet.resource(n).unwrap();
            info.endpoint
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert!(endpoints[0].starts_with("nvidia-gpu-"), "{endpoints:?}");
    assert!(
        endpoints[1].starts_with("nvidia-mig-1g.10gb-"),
        "{endpoints:?}"
    );
    assert!(
        endpoints[2].starts_with("nvidia-mig-3g.40gb-"),
        "{endpoints:?}"
    );

    // The whole GPU 1 under nvidia.com/gpu; GPU 0 is in MIG mode and not served whole.
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/gpu")),
        vec![gpus[1].uuid.clone()]
    );
    let small = FakeMig::h100(0, 5, "1g.10gb");
    let small2 = FakeMig::h100(0, 6, "1g.10gb");
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/mig-1g.10gb")),
        vec![small.uuid.clone(), small2.uuid.clone()]
    );
    // NUMA node of the parent GPU.
    let numa = node.kubelet.devices("nvidia.com/mig-1g.10gb")[0]
        .topology
        .clone()
        .unwrap()
        .nodes[0]
        .id;
    assert_eq!(numa, 0);

    // The pod receives the MIG device's UUID, its CDI name and its caps nodes.
    let r = node
        .kubelet
        .allocate("nvidia.com/mig-1g.10gb", &[&small2.uuid])
        .await
        .unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], small2.uuid);
    let cdi: Vec<&str> = r.cdi_devices.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cdi, vec!["nvidia.com/gpu=0:gi6:ci0"]);
    let paths = spec_paths(&r);
    // mig-minors of the fake driver: gpu<minor>/gi<G>/access = 3 + 200*minor + 10*G, ci0 +1.
    for p in [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap63",
        "/dev/nvidia-caps/nvidia-cap64",
        "/dev/nvidiactl",
    ] {
        assert!(paths.contains(&p.to_string()), "{p} missing from {paths:?}");
    }
    assert!(!paths.contains(&"/dev/nvidia1".to_string()), "{paths:?}");
    node.stop().await;
}

/// The caps nodes are not looked up inside Allocate but kept current from inotify, like the
/// GPU nodes: created after the start (nvidia-modprobe makes them when a GPU instance is
/// created, `/dev/nvidia-caps` included), they reach the next Allocate; until then Allocate
/// refuses the MIG device and says which node is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_nodes_created_after_the_start_reach_allocate() {
    let (host, _gpus) = mixed_host();
    std::fs::remove_dir_all(host.path("/dev/nvidia-caps")).unwrap();
    let node = Node::start(
        host.root(),
        &["--mig-strategy=mixed", "--pass-device-specs"],
    )
    .await
    .unwrap();
    let small = FakeMig::h100(0, 5, "1g.10gb");
    let err = node
        .kubelet
        .allocate("nvidia.com/mig-1g.10gb", &[&small.uuid])
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message()
            .contains("/dev/nvidia-caps/nvidia-cap53 does not exist"),
        "{err:?}"
    );

    // mig-minors of the fake driver: gi5 = 3 + 10*5 = 53, its ci0 54.
    host.restore_node("/dev/nvidia-caps/nvidia-cap53");
    host.restore_node("/dev/nvidia-caps/nvidia-cap54");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match node
            .kubelet
            .allocate("nvidia.com/mig-1g.10gb", &[&small.uuid])
            .await
        {
            Ok(r) => {
                let paths = spec_paths(&r);
                for p in [
                    "/dev/nvidia-caps/nvidia-cap53",
                    "/dev/nvidia-caps/nvidia-cap54",
                ] {
                    assert!(paths.contains(&p.to_string()), "{p} missing from {paths:?}");
                }
                break;
            }
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "the caps nodes never reached Allocate: {e:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_serves_mig_devices_as_nvidia_com_gpu_with_nvidia_indices() {
    let (host, _gpus, migs) = uniform_host();
    let node = Node::start(host.root(), &["--mig-strategy", "single"])
        .await
        .unwrap();
    assert_eq!(node.names(), vec!["nvidia.com/gpu"]);
    let uuids: Vec<String> = migs.iter().map(|m| m.uuid.clone()).collect();
    assert_eq!(ids(&node.kubelet.devices("nvidia.com/gpu")), uuids);
    let r = node
        .kubelet
        .allocate("nvidia.com/gpu", &[&uuids[0], &uuids[2]])
        .await
        .unwrap();
    assert_eq!(
        r.envs["NVIDIA_VISIBLE_DEVICES"],
        format!("{},{}", uuids[0], uuids[2])
    );
    node.stop().await;

    // --device-id-strategy index: NVIDIA's `<gpu index>:<mig index>`.
    let node = Node::start(
        host.root(),
        &["--mig-strategy=single", "--device-id-strategy=index"],
    )
    .await
    .unwrap();
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/gpu")),
        vec!["0:0", "0:1", "1:0"]
    );
    let r = node
        .kubelet
        .allocate("nvidia.com/gpu", &["1:0"])
        .await
        .unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "1:0");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_refuses_mixed_profiles_and_mixed_modes_like_nvidia() {
    let (host, _) = mixed_host();
    let err = Node::start(host.root(), &["--mig-strategy=single"])
        .await
        .err()
        .expect("single with mixed modes fails");
    let text = format!("{err:#}");
    assert!(text.contains("same migEnabled value"), "{text}");

    // MIG enabled on GPU 1 without a MIG device: single refuses it; mixed serves GPU 0
    // whole and nothing of GPU 1 (NVIDIA's assertAllMigDevicesAreValid only warns there).
    let gpus = FakeGpu::two_h100();
    let host = FakeHost::discrete(&gpus);
    host.set_mig(&gpus, &[1], &[]);
    let err = Node::start(host.root(), &["--mig-strategy=single"])
        .await
        .err()
        .expect("single refuses a MIG-enabled GPU without MIG devices");
    let text = format!("{err:#}");
    assert!(
        text.contains("has MIG enabled but no MIG devices"),
        "{text}"
    );
    let node = Node::start(host.root(), &["--mig-strategy=mixed"])
        .await
        .unwrap();
    assert_eq!(node.names(), vec!["nvidia.com/gpu"]);
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/gpu")),
        vec![gpus[0].uuid.clone()]
    );
    node.stop().await;

    // Single compares NVML's attributes: 1g.10gb and 1g.10gb+me have the same slices and
    // memory but not the same engines (NVML: GPU instance profile ids 19 and 20).
    let (host, _) = FakeHost::mig_server(
        &[0, 1],
        &[
            FakeMig::h100(0, 9, "1g.10gb"),
            FakeMig::h100(1, 10, "1g.10gb+me"),
        ],
    );
    let err = Node::start(host.root(), &["--mig-strategy=single"])
        .await
        .err()
        .expect("single refuses 1g.10gb with 1g.10gb+me");
    let text = format!("{err:#}");
    assert!(text.contains("more than one MIG device type"), "{text}");
    assert!(text.contains("1g.10gb+me"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_names_media_extension_profiles_like_nvidia() {
    // NVML reports the GPU instance profile (id 20 = NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
    // on an H100); NVIDIA names its resource mig-1g.10gb.me (rm.go: "+" becomes ".").
    let migs = [
        FakeMig::h100(0, 9, "1g.10gb"),
        FakeMig::h100(0, 10, "1g.10gb+me"),
        FakeMig::h100(0, 11, "1g.20gb"),
    ];
    let (host, _) = FakeHost::mig_server(&[0], &migs);
    let node = Node::start(host.root(), &["--mig-strategy=mixed"])
        .await
        .unwrap();
    assert_eq!(
        node.names(),
        vec![
            "nvidia.com/gpu",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-1g.10gb.me",
            "nvidia.com/mig-1g.20gb"
        ]
    );
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/mig-1g.10gb.me")),
        vec![migs[1].uuid.clone()]
    );
    node.stop().await;

    // A compute instance smaller than its GPU instance (1c.3g.40gb): NVIDIA's mixed strategy
    // has no resource for it and refuses the node.
    let partial = FakeMig {
        ci_slices: 1,
        ..FakeMig::h100(0, 1, "3g.40gb")
    };
    let (host, _) = FakeHost::mig_server(&[0], &[partial]);
    let err = Node::start(host.root(), &["--mig-strategy=mixed"])
        .await
        .err()
        .expect("mixed refuses 1c.3g.40gb");
    assert!(format!("{err:#}").contains("1c.3g.40gb"), "{err:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_slots_nvml_will_not_name_are_skipped_like_go_nvlib() {
    // Slot 0 answers INVALID_ARGUMENT and slot 2 NOT_FOUND; the devices sit in slots 1 and 3.
    let gpus = FakeGpu::two_h100();
    let host = FakeHost::discrete(&gpus);
    let migs = [
        FakeMig::h100(0, 7, "1g.10gb"),
        FakeMig::h100(0, 8, "1g.10gb"),
    ];
    host.set_mig_with_slot_errors(&gpus, &[0], &migs, &[(0, 0, 2), (0, 2, 6)]);
    let node = Node::start(
        host.root(),
        &["--mig-strategy=mixed", "--device-id-strategy=index"],
    )
    .await
    .unwrap();
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/mig-1g.10gb")),
        vec!["0:1", "0:3"]
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_between_discovery_and_the_watch_is_noticed() {
    use edgegpu_node::config::DiscoveryStrategy;
    use edgegpu_node::gpu::discovery;
    let (host, gpus) = mixed_host();
    let dir = tempfile::tempdir().unwrap();
    let cli = gpu_common::cli(host.root(), dir.path(), &["--mig-strategy=mixed"]);
    let config = cli.gpu.resolve().unwrap();
    let discovered = discovery::discover(host.root(), DiscoveryStrategy::Nvml, true).unwrap();
    // The administrator reconfigures after discovery, before the resources are built.
    host.set_mig(&gpus, &[0], &[FakeMig::h100(0, 1, "3g.40gb")]);
    let mut node =
        edgegpu_plugin::node::resources_of(host.root(), &cli.resource_name, &config, discovered)
            .await
            .unwrap();
    tokio::time::timeout(WAIT, node.reconfigured.wait_for(|c| *c))
        .await
        .expect("the MIG watch notices the change made after discovery")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_per_mig_device() {
    let (host, gpus) = mixed_host();
    let node = Node::start(
        host.root(),
        &["--mig-strategy=mixed", "--health-recovery-seconds=1"],
    )
    .await
    .unwrap();
    let big = FakeMig::h100(0, 1, "3g.40gb").uuid;
    let small = FakeMig::h100(0, 5, "1g.10gb").uuid;
    let small2 = FakeMig::h100(0, 6, "1g.10gb").uuid;
    // An XID on GPU instance 5 hits only that MIG device.
    host.inject_mig_xid(0, 79, 5, 0);
    node.wait_health("nvidia.com/mig-1g.10gb", &small, UNHEALTHY)
        .await;
    assert_eq!(
        node.kubelet
            .devices("nvidia.com/mig-1g.10gb")
            .iter()
            .find(|d| d.id == small2)
            .unwrap()
            .health,
        HEALTHY
    );
    assert!(node
        .kubelet
        .devices("nvidia.com/mig-3g.40gb")
        .iter()
        .all(|d| d.health == HEALTHY));
    // It recovers after the recovery delay.
    node.wait_health("nvidia.com/mig-1g.10gb", &small, HEALTHY)
        .await;

    // An XID without instance ids hits every MIG device of its GPU, not the other GPU.
    host.inject_xid(0, 48);
    node.wait_health("nvidia.com/mig-3g.40gb", &big, UNHEALTHY)
        .await;
    node.wait_health("nvidia.com/mig-1g.10gb", &small2, UNHEALTHY)
        .await;
    assert_eq!(node.kubelet.devices("nvidia.com/gpu")[0].health, HEALTHY);
    node.wait_health("nvidia.com/mig-3g.40gb", &big, HEALTHY)
        .await;

    // The parent GPU lost: its MIG devices go, the whole GPU 1 stays.
    host.lose_gpu(0);
    node.wait_health("nvidia.com/mig-3g.40gb", &big, UNHEALTHY)
        .await;
    assert_eq!(node.kubelet.devices("nvidia.com/gpu")[0].id, gpus[1].uuid);
    assert_eq!(node.kubelet.devices("nvidia.com/gpu")[0].health, HEALTHY);
    host.recover_gpu(0);
    node.wait_health("nvidia.com/mig-3g.40gb", &big, HEALTHY)
        .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thor_mig_through_nvml_with_its_jetson_nodes() {
    let thor = Board::Thor.nvml().unwrap();
    let host = FakeHost::jetson_with_nvml(Board::Thor);
    let gpus = [thor.clone()];
    let migs = [
        FakeMig {
            gpu: 0,
            uuid: "MIG-7c1e0b2d-3a4f-5e6d-8c9b-00000000b101".into(),
            gi: 1,
            ci: 0,
            gi_slices: 1,
            ci_slices: 1,
            memory_mib: 30720,
            profile: "1g.30gb",
            gi_profile_id: None,
        },
        FakeMig {
            gpu: 0,
            uuid: "MIG-7c1e0b2d-3a4f-5e6d-8c9b-00000000b102".into(),
            gi: 2,
            ci: 0,
            gi_slices: 1,
            ci_slices: 1,
            memory_mib: 30720,
            profile: "1g.30gb",
            gi_profile_id: None,
        },
    ];
    host.set_mig(&gpus, &[0], &migs);
    let node = Node::start(
        host.root(),
        &["--mig-strategy=mixed", "--pass-device-specs"],
    )
    .await
    .unwrap();
    // Thor's NVML answers NotSupported for memory: the profile memory is the MIG device's own.
    assert_eq!(node.names(), vec!["nvidia.com/mig-1g.30gb"]);
    assert_eq!(
        ids(&node.kubelet.devices("nvidia.com/mig-1g.30gb")),
        vec![migs[0].uuid.clone(), migs[1].uuid.clone()]
    );
    let r = node
        .kubelet
        .allocate("nvidia.com/mig-1g.30gb", &[&migs[1].uuid])
        .await
        .unwrap();
    assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], migs[1].uuid);
    let paths = spec_paths(&r);
    // The Jetson's own nodes plus the MIG device's caps nodes (gi2: 3 + 20 = 23, ci0: 24).
    for p in [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-caps/nvidia-cap23",
        "/dev/nvidia-caps/nvidia-cap24",
    ] {
        assert!(paths.contains(&p.to_string()), "{p} missing from {paths:?}");
    }
    // The Jetson files watch the MIG devices too: a missing required node hits both.
    host.remove_node("/dev/nvidiactl");
    node.wait_health("nvidia.com/mig-1g.30gb", &migs[0].uuid, UNHEALTHY)
        .await;
    node.wait_health("nvidia.com/mig-1g.30gb", &migs[1].uuid, UNHEALTHY)
        .await;
    host.restore_node("/dev/nvidiactl");
    node.wait_health("nvidia.com/mig-1g.30gb", &migs[0].uuid, HEALTHY)
        .await;
    node.stop().await;
}

struct Running(Child);

impl Running {
    /// The real binary on `root` with `--mig-strategy=<strategy>`, registering in `dir`;
    /// its log goes to `log` (or nowhere).
    fn start(
        root: &std::path::Path,
        dir: &std::path::Path,
        strategy: &str,
        log: Option<&std::path::Path>,
    ) -> Running {
        let (stdout, stderr) = match log {
            Some(path) => {
                let file = std::fs::File::create(path).unwrap();
                (Stdio::from(file.try_clone().unwrap()), Stdio::from(file))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        Running(
            binary_command(edgegpu_testkit::process::program("edgegpu-device-plugin"))
                .arg("--root")
                .arg(root)
                .arg("--device-plugin-path")
                .arg(dir)
                .arg(format!("--mig-strategy={strategy}"))
                .stdout(stdout)
                .stderr(stderr)
                .spawn()
                .unwrap(),
        )
    }

    /// SIGTERM; the plugin must exit cleanly.
    fn terminate(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.0.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real binary: a MIG geometry change while it runs is seen on the health tick; it stops
/// the old resources, discovers again and registers the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconfiguring_mig_while_running_re_advertises() {
    let (host, gpus) = mixed_host();
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let child = Running::start(host.root(), dir.path(), "mixed", None);
    kubelet
        .wait_for_registration("nvidia.com/mig-3g.40gb", WAIT)
        .await
        .unwrap();
    kubelet
        .wait_for_registration("nvidia.com/mig-1g.10gb", WAIT)
        .await
        .unwrap();

    // The administrator replaces the 3g.40gb instance by two 2g.20gb and splits GPU 1 too.
    let new = [
        FakeMig::h100(0, 3, "2g.20gb"),
        FakeMig::h100(0, 4, "2g.20gb"),
        FakeMig::h100(0, 5, "1g.10gb"),
        FakeMig::h100(0, 6, "1g.10gb"),
        FakeMig::h100(1, 1, "3g.40gb"),
    ];
    host.set_mig(&gpus, &[0, 1], &new);
    let twos = kubelet
        .wait_for_registration("nvidia.com/mig-2g.20gb", WAIT)
        .await
        .unwrap();
    assert_eq!(
        ids(&twos.devices),
        vec![new[0].uuid.clone(), new[1].uuid.clone()]
    );
    kubelet
        .wait_until("3g.40gb re-advertised with GPU 1's instance", WAIT, |k| {
            k.resource("nvidia.com/mig-3g.40gb")
                .is_some_and(|r| !r.stopped && ids(&r.devices) == vec![new[4].uuid.clone()])
        })
        .await
        .unwrap();
    // GPU 1 is in MIG mode now: nvidia.com/gpu is no longer served.
    kubelet
        .wait_until("nvidia.com/gpu withdrawn", WAIT, |k| {
            k.resource("nvidia.com/gpu").map_or(true, |r| r.stopped)
        })
        .await
        .unwrap();
    child.terminate();
}

/// The real binary through a MIG reconfiguration that passes through geometries `single`
/// refuses (`nvidia-smi mig -dci -dgi` leaves MIG on without instances; the first `-cgi`
/// leaves two profiles): it keeps running and serves nothing meanwhile, warns once, and
/// serves the new geometry once it is valid and stable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconfiguration_through_refused_geometries_does_not_end_the_plugin() {
    let (host, gpus, _) = uniform_host();
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(dir.path()).await.unwrap();
    let log_path = dir.path().join("plugin.log");
    let mut child = Running::start(host.root(), dir.path(), "single", Some(&log_path));
    kubelet
        .wait_for_registration("nvidia.com/gpu", WAIT)
        .await
        .unwrap();

    // -dci/-dgi on both GPUs: MIG on, no instances.
    host.set_mig(&gpus, &[0, 1], &[]);
    kubelet
        .wait_until("nvidia.com/gpu withdrawn", WAIT, |k| {
            k.resource("nvidia.com/gpu").map_or(true, |r| r.stopped)
        })
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert!(child.0.try_wait().unwrap().is_none(), "the plugin exited");
    // The first -cgi: a 2g.20gb on GPU 0 and a 1g.10gb on GPU 1, two types.
    host.set_mig(
        &gpus,
        &[0, 1],
        &[
            FakeMig::h100(0, 3, "2g.20gb"),
            FakeMig::h100(1, 9, "1g.10gb"),
        ],
    );
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert!(child.0.try_wait().unwrap().is_none(), "the plugin exited");
    assert!(kubelet
        .resource("nvidia.com/gpu")
        .map_or(true, |r| r.stopped));

    // The end of the reconfiguration: 2g.20gb on both GPUs.
    let end = [
        FakeMig::h100(0, 3, "2g.20gb"),
        FakeMig::h100(1, 3, "2g.20gb"),
    ];
    host.set_mig(&gpus, &[0, 1], &end);
    kubelet
        .wait_until("the new geometry served", WAIT, |k| {
            k.resource("nvidia.com/gpu").is_some_and(|r| {
                !r.stopped && ids(&r.devices) == vec![end[0].uuid.clone(), end[1].uuid.clone()]
            })
        })
        .await
        .unwrap();
    child.terminate();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let warnings = log.matches("MIG geometry refused").count();
    assert_eq!(warnings, 1, "one warning per reconfiguration:\n{log}");
}
