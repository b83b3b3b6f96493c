//! End-to-end test helpers: a private containerd started on a node-setup-written config
//! ([`containerd_instance`]), a CRI client that runs pods as the kubelet does ([`cri_pod`]),
//! the kubelet's conversion of a device plugin's Allocate response into a CRI container
//! config ([`kubelet_conversion`]), a stand-in for NVIDIA's container runtime
//! ([`runtime_standin`]) and the offline sandbox image ([`sandbox_image`]).
//!
//! The tests (tests/cri_e2e.rs) need root, the containerd releases fetched by
//! scripts/setup.sh and `dist/` (EDGEGPU_E2E_DIST); they are `#[ignore]`d in the plain
//! workspace run and run as their own step of scripts/test.sh.

pub mod cdi_spec;
pub mod containerd_instance;
pub mod cri_pod;
pub mod device_plugin;
pub mod kubelet_conversion;
pub mod runtime_standin;
pub mod sandbox_image;

use std::path::PathBuf;

/// Where the release binaries and images are (`EDGEGPU_E2E_DIST`), or why the test cannot run.
pub fn dist_dir() -> Result<PathBuf, String> {
    match std::env::var_os("EDGEGPU_E2E_DIST") {
        Some(d) => Ok(PathBuf::from(d)),
        None => {
            Err("EDGEGPU_E2E_DIST is not set (scripts/test.sh sets it after building dist/)".into())
        }
    }
}

/// The workspace root (for `.tools/`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// EDGEGPU_E2E_VERBOSE=1: print every config, node-setup's output, the Allocate responses and
/// the pods' logs (by default only one line per pod and the timings; failures print their log).
pub fn verbose() -> bool {
    std::env::var_os("EDGEGPU_E2E_VERBOSE").is_some_and(|v| v == "1")
}

/// eprintln! only under EDGEGPU_E2E_VERBOSE=1.
#[macro_export]
macro_rules! vlog {
    ($($t:tt)*) => {
        if $crate::verbose() {
            eprintln!($($t)*);
        }
    };
}
