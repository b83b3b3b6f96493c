//! devicequery on every Jetson generation, with expectations taken from NVIDIA's published
//! facts (below, each with its source), never from the platform table: for each GPU and a CUDA
//! version that reports it, the report shows the published compute capability and device name,
//! and `--min-compute-capability` passes at it and fails above it. The platform table
//! (`edgegpu-platform`, which the plugin and the labeller read) is checked against the same facts
//! and against the published deviceQuery outputs in `golden/`.

use crate::common;

use common::*;
use edgegpu_platform::{Generation, GENERATIONS};
use edgegpu_testkit::cuda::FakeCuda;

/// A Jetson GPU as CUDA reports it, from published sources.
struct Published {
    /// The SoC's device-tree token, to find its entry in the platform table.
    soc: &'static str,
    /// A CUDA driver version (major, minor) of a release that runs on the board.
    cuda: (u32, u32),
    /// Compute capability (major, minor).
    capability: (u32, u32),
    /// `cuDeviceGetName`.
    name: &'static str,
}

/// Compute capabilities: NVIDIA's "CUDA GPUs – Compute Capability" list
/// (https://developer.nvidia.com/cuda-gpus: Jetson Nano / TX1 5.3, TX2 6.2, AGX Xavier 7.2,
/// AGX Orin / Orin NX / Orin Nano 8.7); Thor: 10.1 (sm_101) up to CUDA 12.9, renumbered 11.0
/// (sm_110) from CUDA 13.0 (CUDA 13.0 release notes,
/// https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/). CUDA versions: the JetPack
/// release notes (JetPack 4.6: CUDA 10.2, 5.1: 11.4, 6.2: 12.6, 7.0: 13.0,
/// https://developer.nvidia.com/embedded/jetpack-archive); 12.9 for Thor's 10.1 is the last
/// CUDA before the renumbering. Device names: the deviceQuery outputs published for the boards
/// (CUDA samples `Samples/1_Utilities/deviceQuery`, https://github.com/NVIDIA/cuda-samples:
/// Jetson Nano "NVIDIA Tegra X1", AGX Xavier "Xavier", Orin NX "Orin", AGX Thor "NVIDIA Thor";
/// three of them are in `golden/`). No deviceQuery output of a TX2 is published: its name here
/// is only what the fake driver reports, the capability is the fact.
const PUBLISHED: &[Published] = &[
    Published {
        soc: "tegra210",
        cuda: (10, 2),
        capability: (5, 3),
        name: "NVIDIA Tegra X1",
    },
    Published {
        soc: "tegra186",
        cuda: (10, 2),
        capability: (6, 2),
        name: "NVIDIA Tegra",
    },
    Published {
        soc: "tegra194",
        cuda: (11, 4),
        capability: (7, 2),
        name: "Xavier",
    },
    Published {
        soc: "tegra234",
        cuda: (12, 6),
        capability: (8, 7),
        name: "Orin",
    },
    Published {
        soc: "tegra264",
        cuda: (12, 9),
        capability: (10, 1),
        name: "NVIDIA Thor",
    },
    Published {
        soc: "tegra264",
        cuda: (13, 0),
        capability: (11, 0),
        name: "NVIDIA Thor",
    },
];

/// The `major.minor` and the device name a golden report shows.
fn golden_identity(name: &str) -> ((u32, u32), String) {
    let text = golden(name);
    let cc = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("CUDA Capability Major/Minor version number:")
        })
        .expect("capability line")
        .trim()
        .to_string();
    let (major, minor) = cc.split_once('.').unwrap();
    let device = text
        .lines()
        .find_map(|l| l.strip_prefix("Device 0: \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("device line")
        .to_string();
    ((major.parse().unwrap(), minor.parse().unwrap()), device)
}

#[test]
fn the_published_jetson_outputs_agree_with_the_platform_table() {
    // (golden file, SoC, CUDA version of the release it was taken on)
    for (file, soc, cuda) in [
        ("nano-jp4.2.1.txt", "tegra210", (10, 0)),
        ("orin-nx-jp5.txt", "tegra234", (11, 4)),
        ("thor-jp7.txt", "tegra264", (13, 0)),
    ] {
        let g = Generation::by_compatible(soc).unwrap();
        let (cc, device) = golden_identity(file);
        assert_eq!(g.compute_capability(cuda), Some(cc), "{file}");
        assert_eq!(g.cuda.device_name, Some(device.as_str()), "{file}");
    }
}

/// The platform table says what the published facts say, and covers no GPU they do not.
#[test]
fn the_platform_table_agrees_with_the_published_facts() {
    for p in PUBLISHED {
        let g = Generation::by_compatible(p.soc).unwrap();
        assert_eq!(
            g.compute_capability(p.cuda),
            Some(p.capability),
            "{g:?} CUDA {:?}",
            p.cuda
        );
        if p.soc != "tegra186" {
            assert_eq!(g.cuda.device_name, Some(p.name), "{g:?}");
        }
    }
    for g in GENERATIONS {
        for cap in g.cuda.capability {
            assert!(
                PUBLISHED
                    .iter()
                    .any(|p| p.soc == g.detect.compatible
                        && p.capability == (cap.major, cap.minor)),
                "{g:?}: {}.{} has no published fact in this test",
                cap.major,
                cap.minor
            );
        }
    }
}

#[test]
fn every_jetson_gpu_reports_and_checks_its_published_capability() {
    for p in PUBLISHED {
        let version = (p.cuda.0 * 1000 + p.cuda.1 * 10) as i32;
        let (major, minor) = p.capability;
        let fake = FakeCuda::new(version).device(jetson(p.name, major as i32, minor as i32));
        let at = format!("{major}.{minor}");
        let what = format!("{} CUDA {:?}", p.soc, p.cuda);
        let ok = run(
            &fake,
            &["--min-compute-capability", &at, "--expect-devices", "1"],
        );
        assert_eq!(ok.status, 0, "{what}: {}", ok.stdout);
        assert!(
            ok.stdout.contains(&format!(
                "CUDA Capability Major/Minor version number:    {at}"
            )),
            "{what}: {}",
            ok.stdout
        );
        assert!(
            ok.stdout.contains(&format!("Device 0: \"{}\"", p.name)),
            "{what}"
        );
        let above = format!("{major}.{}", minor + 1);
        let too_high = run(&fake, &["--min-compute-capability", &above]);
        assert_ne!(too_high.status, 0, "{what}: {above} must fail");
        assert!(too_high.stdout.contains("below the required"), "{what}");
    }
}
