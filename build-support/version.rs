//! Build script shared by the three programs: records the git commit and target triple, and
//! the `--version` line built from them (`EDGEGPU_LONG_VERSION`).
fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    let commit = std::env::var("EDGEGPU_GIT_COMMIT").unwrap_or(commit);
    let target = std::env::var("TARGET").unwrap();
    let version = std::env::var("CARGO_PKG_VERSION").unwrap();
    println!("cargo:rustc-env=EDGEGPU_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=EDGEGPU_TARGET={target}");
    // The one `--version` line all three programs print after their name.
    println!("cargo:rustc-env=EDGEGPU_LONG_VERSION={version} (commit {commit}, target {target})");
    println!("cargo:rerun-if-env-changed=EDGEGPU_GIT_COMMIT");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
}
