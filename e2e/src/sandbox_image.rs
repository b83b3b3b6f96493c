//! The pod sandbox ("pause") image, built offline: nothing can be pulled in CI. A static C
//! program (`pause.c`, `cc -static`) packed as a one-layer OCI image archive by `oci_archive.py`
//! (Python standard library only).

use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The name the base config's sandbox image setting and the import use.
pub const SANDBOX_IMAGE: &str = "edgegpu.test/e2e/pause:1";

/// Builds the archive in `dir`, returns its path.
pub fn build(dir: &Path) -> Result<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bin = dir.join("pause");
    let st = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&bin)
        .arg(src.join("pause.c"))
        .status()
        .context("cc")?;
    ensure!(st.success(), "cc -static pause.c failed");
    let out = dir.join("pause.oci.tar");
    let st = Command::new("python3")
        .arg(src.join("oci_archive.py"))
        .arg(&bin)
        .arg(&out)
        .arg(SANDBOX_IMAGE)
        .status()
        .context("python3")?;
    ensure!(st.success(), "oci_archive.py failed");
    Ok(out)
}
