//! Builds the fake NVIDIA driver libraries (C sources in `fakes/`) as real shared objects for
//! the target being tested, so tests exercise the production `dlopen` path, and the fake
//! `nvidia-cuda-mps-control` as a static executable for that target.
//!
//! Why C and not a Rust cdylib: the fakes must match NVIDIA's C ABI exactly, and one source
//! is compiled into several variants (e.g. an old CUDA 10.2 driver without newer symbols)
//! with preprocessor flags — cargo cannot build one crate twice with different features.
//! The `cc` crate picks the right compiler for `TARGET`, so aarch64 test runs get aarch64 fakes.

use std::path::PathBuf;

/// (variant directory, source file, soname, extra compiler flags)
const FAKES: &[(&str, &str, &str, &[&str])] = &[
    // devicequery: a current driver, old drivers without newer symbols, a library missing a
    // required symbol, and the toolkit stub (installed as `libcuda.so`, the name it has).
    ("cuda", "cuda.c", "libcuda.so.1", &[]),
    (
        "cuda-10.2",
        "cuda.c",
        "libcuda.so.1",
        &["-DFAKE_CUDA_LEGACY_10_2"],
    ),
    (
        "cuda-9.0",
        "cuda.c",
        "libcuda.so.1",
        &["-DFAKE_CUDA_LEGACY_9_0"],
    ),
    (
        "cuda-no-total-mem",
        "cuda.c",
        "libcuda.so.1",
        &["-DFAKE_CUDA_OMIT_TOTAL_MEM"],
    ),
    ("cuda-stub", "cuda.c", "libcuda.so", &["-DFAKE_CUDA_STUB"]),
    // device plugin: NVML configured per copy by files next to the library (see nvml.c).
    ("nvml", "nvml.c", "libnvidia-ml.so.1", &[]),
    // An R470 driver: no nvmlDeviceGetMemoryInfo_v2.
    (
        "nvml-r470",
        "nvml.c",
        "libnvidia-ml.so.1",
        &["-DFAKE_NVML_NO_MEMORY_INFO_V2"],
    ),
];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    for (variant, source, soname, flags) in FAKES {
        let dir = out.join(variant);
        std::fs::create_dir_all(&dir).unwrap();
        let src = PathBuf::from("fakes").join(source);
        println!("cargo:rerun-if-changed={}", src.display());
        let status = compiler
            .to_command()
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
            .arg(format!("-Wl,-soname,{soname}"))
            .args(*flags)
            .arg("-o")
            .arg(dir.join(soname))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C compiler for {source}: {e}"));
        assert!(
            status.success(),
            "building fake {variant} from {source} failed"
        );
    }
    build_mps_control(&compiler, &out);
    println!("cargo:rustc-env=EDGEGPU_FAKE_LIBS_DIR={}", out.display());
    println!("cargo:rerun-if-changed=build.rs");
}

/// The fake `nvidia-cuda-mps-control`, linked statically: the device plugin runs the host's
/// binary in a chroot of the host root, and a fake host root has no libc to load. Compiled and
/// linked in two steps so a missing static libc is told apart from an error in the source.
fn build_mps_control(compiler: &cc::Tool, out: &std::path::Path) {
    let dir = out.join("mps-control");
    std::fs::create_dir_all(&dir).unwrap();
    let src = PathBuf::from("fakes/mps_control.c");
    let object = out.join("mps_control.o");
    println!("cargo:rerun-if-changed={}", src.display());
    let run = |cmd: &mut std::process::Command| {
        let output = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler for mps_control.c: {e}"));
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (compiled, errors) = run(compiler
        .to_command()
        .args(["-c", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&object)
        .arg(&src));
    assert!(compiled, "compiling fakes/mps_control.c failed\n{errors}");
    let (linked, errors) = run(compiler
        .to_command()
        .arg("-static")
        .arg("-o")
        .arg(dir.join("nvidia-cuda-mps-control"))
        .arg(&object));
    if !linked {
        let target = std::env::var("TARGET").unwrap_or_default();
        panic!(
            "cannot link the fake nvidia-cuda-mps-control statically for {target}: it runs in a \
             chroot without libc, so the target's static C library (libc.a: libc6-dev, or \
             libc6-dev-arm64-cross for aarch64) must be installed\n{errors}"
        );
    }
}
