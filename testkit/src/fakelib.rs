//! Where the fake NVIDIA driver libraries (and the fake `nvidia-cuda-mps-control`, in
//! `mps-control/`) built by `build.rs` live.

use std::path::PathBuf;

/// Directory holding one sub-directory per fake library variant (see `build.rs`), each
/// containing the library under its real soname (e.g. `libcuda.so.1`).
pub fn variant_dir(variant: &str) -> PathBuf {
    let dir = PathBuf::from(env!("EDGEGPU_FAKE_LIBS_DIR")).join(variant);
    assert!(
        dir.is_dir(),
        "fake library variant {variant} was not built: {}",
        dir.display()
    );
    dir
}
