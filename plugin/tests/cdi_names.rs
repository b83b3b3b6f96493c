//! The CDI strategies name devices that exist: for every simulated platform (each Jetson
//! generation with its release's NVML, Thor with MIG, a discrete server, a MIG server under
//! every MIG strategy and both ID strategies), every name in an Allocate response is a device
//! of the spec `edgegpu-node-setup cdi generate` writes for the same host.

use crate::gpu_common;

use std::collections::BTreeSet;
use std::path::Path;

use edgegpu_host::cdi;
use edgegpu_host::root::HostRoot;
use edgegpu_testkit::host::{Board, FakeGpu, FakeHost, FakeMig};
use gpu_common::Node;

/// Allocates every advertised device of every resource under `args` and returns the CDI
/// names the responses carry (CRI devices and annotation values alike).
async fn cdi_names_allocated(root: &Path, args: &[&str]) -> BTreeSet<String> {
    let node = Node::start(root, args).await.unwrap();
    let mut names = BTreeSet::new();
    for r in &node.resources {
        for d in node.kubelet.devices(r.name()) {
            let resp = node.kubelet.allocate(r.name(), &[&d.id]).await.unwrap();
            assert_eq!(resp.cdi_devices.len(), 1, "{}", d.id);
            for c in &resp.cdi_devices {
                names.insert(c.name.clone());
            }
            for v in resp.annotations.values() {
                names.extend(v.split(',').map(str::to_string));
            }
        }
    }
    node.stop().await;
    names
}

/// Asserts every `kind=name` is in the spec generated for `root`.
fn assert_in_spec(root: &Path, names: &BTreeSet<String>, what: &str) {
    let spec = cdi::generate(&HostRoot::new(root))
        .unwrap_or_else(|e| panic!("{what}: cdi generate: {e}"))
        .spec;
    assert!(!names.is_empty(), "{what}: no CDI names allocated");
    for full in names {
        let (kind, name) = full.split_once('=').expect("kind=name");
        assert_eq!(kind, spec.kind, "{what}: {full}");
        assert!(
            spec.device_names().contains(&name),
            "{what}: {full} is not in the spec (devices {:?})",
            spec.device_names()
        );
    }
}

const CDI: &str = "--device-list-strategy=cdi-cri,cdi-annotations";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_jetson_generation() {
    for board in Board::ALL {
        let host = FakeHost::jetson_with_nvml(board);
        // Roots without NVML: `tegra`, or glibc would hand `auto`'s soname fallback a fake NVML
        // another test of this binary loaded (see platforms.rs).
        let discovery = if board.nvml().is_some() {
            "--discovery=auto"
        } else {
            "--discovery=tegra"
        };
        for ids in ["--device-id-strategy=uuid", "--device-id-strategy=index"] {
            let names = cdi_names_allocated(host.root(), &[CDI, ids, discovery]).await;
            assert_in_spec(host.root(), &names, &format!("{board:?} {ids}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thor_with_mig_under_every_strategy() {
    // JetPack 7 offers MIG on Thor: the MIG strategies hand out 0:gi<G>:ci<C>, which the
    // spec must define with Thor's Jetson nodes and the instances' capability nodes.
    let thor = Board::Thor.nvml().unwrap();
    let host = FakeHost::jetson_with_nvml(Board::Thor);
    host.set_mig(
        std::slice::from_ref(&thor),
        &[0],
        &[
            FakeMig::h100(0, 1, "1g.10gb"),
            FakeMig::h100(0, 2, "1g.10gb"),
        ],
    );
    for mig in ["--mig-strategy=mixed", "--mig-strategy=single"] {
        for ids in ["--device-id-strategy=uuid", "--device-id-strategy=index"] {
            let names = cdi_names_allocated(host.root(), &[CDI, ids, mig]).await;
            assert_eq!(
                names.iter().filter(|n| n.contains(":gi")).count(),
                2,
                "{mig} {ids}: {names:?}"
            );
            assert_in_spec(host.root(), &names, &format!("Thor {mig} {ids}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrete_and_mig_under_every_strategy() {
    let gpus = FakeGpu::two_on_two_numa_nodes();
    let host = FakeHost::discrete(&gpus);
    for ids in ["--device-id-strategy=uuid", "--device-id-strategy=index"] {
        let names = cdi_names_allocated(host.root(), &[CDI, ids]).await;
        assert_in_spec(host.root(), &names, &format!("discrete {ids}"));
    }

    let (host, gpus) = FakeHost::mig_server(&[0], &FakeMig::h100_mixed());
    for mig in ["--mig-strategy=none", "--mig-strategy=mixed"] {
        for ids in ["--device-id-strategy=uuid", "--device-id-strategy=index"] {
            let names = cdi_names_allocated(host.root(), &[CDI, ids, mig]).await;
            assert_in_spec(host.root(), &names, &format!("MIG host {mig} {ids}"));
        }
    }
    let uniform = FakeHost::discrete(&gpus);
    uniform.set_mig(
        &gpus,
        &[0, 1],
        &[
            FakeMig::h100(0, 7, "1g.10gb"),
            FakeMig::h100(1, 8, "1g.10gb"),
        ],
    );
    let names = cdi_names_allocated(uniform.root(), &[CDI, "--mig-strategy=single"]).await;
    assert_eq!(
        names.iter().filter(|n| n.contains(":gi")).count(),
        2,
        "{names:?}"
    );
    assert_in_spec(uniform.root(), &names, "MIG single");
}
