//! devicequery's expectations per Jetson generation come from the platform table
//! (`edgegpu-platform`): the published outputs it is compared with agree with the table, and
//! for every generation and CUDA version the table lists, the report shows the table's compute
//! capability and device name and `--min-compute-capability` passes at it and fails above it.

mod common;

use common::*;
use edgegpu_platform::{Generation, GENERATIONS};
use edgegpu_testkit::cuda::FakeCuda;

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

#[test]
fn every_generation_reports_and_checks_the_tables_capability() {
    for g in GENERATIONS {
        for cap in g.cuda.capability {
            // A CUDA version from which the table says this capability is reported.
            let cuda = cap.since.max((10, 2));
            let version = (cuda.0 * 1000 + cuda.1 * 10) as i32;
            let cc = (cap.major, cap.minor);
            assert_eq!(g.compute_capability(cuda), Some(cc));
            let name = g.cuda.device_name.unwrap_or("NVIDIA Tegra");
            let fake = FakeCuda::new(version).device(jetson(name, cc.0 as i32, cc.1 as i32));
            let at = format!("{}.{}", cc.0, cc.1);
            let ok = run(
                &fake,
                &["--min-compute-capability", &at, "--expect-devices", "1"],
            );
            assert_eq!(ok.status, 0, "{g:?} CUDA {cuda:?}: {}", ok.stdout);
            assert!(
                ok.stdout.contains(&format!(
                    "CUDA Capability Major/Minor version number:    {at}"
                )),
                "{g:?}: {}",
                ok.stdout
            );
            assert!(
                ok.stdout.contains(&format!("Device 0: \"{name}\"")),
                "{g:?}"
            );
            let above = format!("{}.{}", cc.0, cc.1 + 1);
            let too_high = run(&fake, &["--min-compute-capability", &above]);
            assert_ne!(too_high.status, 0, "{g:?}: {above} must fail");
            assert!(too_high.stdout.contains("below the required"), "{g:?}");
        }
    }
}
