//! Shared by the integration tests: machine profiles for the fake driver, running the real
//! binary against it, and golden-file comparison.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use edgegpu_testkit::cuda::devices::jetson;
use edgegpu_testkit::cuda::devices::{ampere_textures, capability, common, pci};
use edgegpu_testkit::cuda::{attr, variant, FakeCuda, FakeCudaDevice};
use edgegpu_testkit::process::binary_command;

pub const BIN: &str = env!("CARGO_BIN_EXE_devicequery");

/// Jetson Nano 4 GB as JetPack 4.2.1 reports it (values of the published deviceQuery output).
pub fn nano() -> FakeCudaDevice {
    let d = common(FakeCudaDevice::new("NVIDIA Tegra X1", 4148543488));
    let d = pci(capability(d, 5, 3), 0, 0, 0);
    d.attr(attr::MULTIPROCESSOR_COUNT, 1)
        .attr(attr::CLOCK_RATE, 921600)
        .attr(attr::MEMORY_CLOCK_RATE, 12750)
        .attr(attr::GLOBAL_MEMORY_BUS_WIDTH, 64)
        .attr(attr::L2_CACHE_SIZE, 262144)
        .attr(attr::MAXIMUM_TEXTURE1D_WIDTH, 65536)
        .attr(attr::MAXIMUM_TEXTURE2D_WIDTH, 65536)
        .attr(attr::MAXIMUM_TEXTURE2D_HEIGHT, 65536)
        .attr(attr::MAXIMUM_TEXTURE3D_WIDTH, 4096)
        .attr(attr::MAXIMUM_TEXTURE3D_HEIGHT, 4096)
        .attr(attr::MAXIMUM_TEXTURE3D_DEPTH, 4096)
        .attr(attr::MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 16384)
        .attr(attr::MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 2048)
        .attr(attr::MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 16384)
        .attr(attr::MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 16384)
        .attr(attr::MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048)
        .attr(attr::MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 65536)
        .attr(attr::MAX_REGISTERS_PER_BLOCK, 32768)
        .attr(attr::MAX_THREADS_PER_MULTIPROCESSOR, 2048)
        .attr(attr::ASYNC_ENGINE_COUNT, 1)
        .attr(attr::KERNEL_EXEC_TIMEOUT, 1)
        .attr(attr::INTEGRATED, 1)
        .attr(attr::ECC_ENABLED, 0)
        .attr(attr::COMPUTE_PREEMPTION_SUPPORTED, 0)
        .attr(attr::COOPERATIVE_LAUNCH, 0)
        .attr(attr::COOPERATIVE_MULTI_DEVICE_LAUNCH, 0)
}

/// Orin NX 16 GB as JetPack 5 reports it (values of the published deviceQuery output).
pub fn orin_nx() -> FakeCudaDevice {
    jetson("Orin", 8, 7)
}

pub const H100_UUID: [u8; 16] = [
    0x7d, 0x3c, 0x91, 0x4e, 0x2a, 0x10, 0x5f, 0x6b, 0x8c, 0x0d, 0x4e, 0x1f, 0x2b, 0x3a, 0x49, 0x58,
];

/// H100 SXM5 80 GB.
pub fn h100() -> FakeCudaDevice {
    let d = ampere_textures(common(FakeCudaDevice::new(
        "NVIDIA H100 80GB HBM3",
        84942979072,
    )));
    let d = pci(capability(d, 9, 0), 0, 0x18, 0);
    d.attr(attr::MULTIPROCESSOR_COUNT, 132)
        .attr(attr::CLOCK_RATE, 1980000)
        .attr(attr::MEMORY_CLOCK_RATE, 2619000)
        .attr(attr::GLOBAL_MEMORY_BUS_WIDTH, 5120)
        .attr(attr::L2_CACHE_SIZE, 52428800)
        .attr(attr::MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472)
        .attr(attr::MAX_REGISTERS_PER_BLOCK, 65536)
        .attr(attr::MAX_THREADS_PER_MULTIPROCESSOR, 2048)
        .attr(attr::ASYNC_ENGINE_COUNT, 3)
        .attr(attr::KERNEL_EXEC_TIMEOUT, 0)
        .attr(attr::INTEGRATED, 0)
        .attr(attr::ECC_ENABLED, 1)
        .attr(attr::COMPUTE_PREEMPTION_SUPPORTED, 1)
        .attr(attr::COOPERATIVE_LAUNCH, 1)
        .attr(attr::COOPERATIVE_MULTI_DEVICE_LAUNCH, 1)
        .uuid(H100_UUID)
}

/// A100 PCIe 40 GB on PCI bus `bus`.
pub fn a100(bus: i32) -> FakeCudaDevice {
    let d = ampere_textures(common(FakeCudaDevice::new(
        "NVIDIA A100-PCIE-40GB",
        42505273344,
    )));
    let d = pci(capability(d, 8, 0), 0, bus, 0);
    d.attr(attr::MULTIPROCESSOR_COUNT, 108)
        .attr(attr::CLOCK_RATE, 1410000)
        .attr(attr::MEMORY_CLOCK_RATE, 1215000)
        .attr(attr::GLOBAL_MEMORY_BUS_WIDTH, 5120)
        .attr(attr::L2_CACHE_SIZE, 41943040)
        .attr(attr::MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 167936)
        .attr(attr::MAX_REGISTERS_PER_BLOCK, 65536)
        .attr(attr::MAX_THREADS_PER_MULTIPROCESSOR, 2048)
        .attr(attr::ASYNC_ENGINE_COUNT, 3)
        .attr(attr::KERNEL_EXEC_TIMEOUT, 0)
        .attr(attr::INTEGRATED, 0)
        .attr(attr::ECC_ENABLED, 1)
        .attr(attr::COMPUTE_PREEMPTION_SUPPORTED, 1)
        .attr(attr::COOPERATIVE_LAUNCH, 1)
        .attr(attr::COOPERATIVE_MULTI_DEVICE_LAUNCH, 1)
}

/// AGX Thor with JetPack 7 (CUDA 13: SM 11.0).
pub fn thor() -> FakeCudaDevice {
    let d = ampere_textures(common(FakeCudaDevice::new("NVIDIA Thor", 128546734080)));
    let d = pci(capability(d, 11, 0), 0, 0, 0);
    d.attr(attr::MULTIPROCESSOR_COUNT, 20)
        .attr(attr::CLOCK_RATE, 1049000)
        .attr(attr::MEMORY_CLOCK_RATE, 4266000)
        .attr(attr::GLOBAL_MEMORY_BUS_WIDTH, 256)
        .attr(attr::L2_CACHE_SIZE, 33554432)
        .attr(attr::MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472)
        .attr(attr::MAX_REGISTERS_PER_BLOCK, 65536)
        .attr(attr::MAX_THREADS_PER_MULTIPROCESSOR, 1536)
        .attr(attr::ASYNC_ENGINE_COUNT, 2)
        .attr(attr::KERNEL_EXEC_TIMEOUT, 0)
        .attr(attr::INTEGRATED, 1)
        .attr(attr::ECC_ENABLED, 0)
        .attr(attr::COMPUTE_PREEMPTION_SUPPORTED, 1)
        .attr(attr::COOPERATIVE_LAUNCH, 1)
        .attr(attr::COOPERATIVE_MULTI_DEVICE_LAUNCH, 1)
}

/// The result of one devicequery run.
pub struct Run {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(output: Output) -> Run {
        Run {
            status: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    pub fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or("")
    }
}

/// The variables a shared GPU's container gets (read by `--check-limits`): never inherited
/// from the test's own environment.
pub const LIMIT_VARIABLES: [&str; 5] = [
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "EDGEGPU_GPU_MEMORY_LIMIT_MIB",
    "EDGEGPU_GPU_MEMORY_LIMIT_ENFORCED",
];

/// The command that runs the real binary with the fake driver `variant` configured as `fake`
/// (its configuration written into `dir`) and `env` set.
pub fn command(
    fake: &FakeCuda,
    library_variant: &str,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let mut cmd = binary_command(BIN);
    fake.configure(&mut cmd, library_variant, dir);
    for name in LIMIT_VARIABLES {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied()).args(args);
    // The power line reads the machine's own files by default: a test on a Jetson would
    // print it. Each test reads `dir` (no power files) unless it names a root.
    if !args.iter().any(|a| a.starts_with("--root")) {
        cmd.arg("--root").arg(dir);
    }
    cmd
}

/// Runs the real binary with the fake driver `variant` configured as `fake`.
pub fn run_with(fake: &FakeCuda, library_variant: &str, args: &[&str]) -> Run {
    run_with_env(fake, library_variant, args, &[])
}

/// [`run_with`] with `env` set (e.g. the variables of [`LIMIT_VARIABLES`]).
pub fn run_with_env(
    fake: &FakeCuda,
    library_variant: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(fake, library_variant, dir.path(), args, env);
    Run::from(cmd.output().expect("devicequery starts"))
}

pub fn run(fake: &FakeCuda, args: &[&str]) -> Run {
    run_with(fake, variant::CURRENT, args)
}

/// Runs the binary with `LD_LIBRARY_PATH` set to a directory holding no libcuda.
pub fn run_without_library(args: &[&str]) -> Run {
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = binary_command(BIN);
    cmd.env("LD_LIBRARY_PATH", empty.path())
        .env_remove(edgegpu_testkit::cuda::CONFIG_ENV)
        .args(args);
    Run::from(cmd.output().expect("devicequery starts"))
}

pub fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// The golden text with deviceQuery's `./deviceQuery` argv[0] replaced by the path the test
/// ran, which the first line must echo.
pub fn golden(name: &str) -> String {
    let path = golden_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    match text.strip_prefix("./deviceQuery Starting...") {
        Some(rest) => format!("{BIN} Starting...{rest}"),
        None => text,
    }
}

/// Exact comparison with a unified diff on mismatch.
pub fn assert_same_text(expected: &str, actual: &str, what: &str) {
    if expected != actual {
        let diff = similar::TextDiff::from_lines(expected, actual);
        panic!(
            "{what}: output differs from the expected text\n{}",
            diff.unified_diff()
                .context_radius(3)
                .header("expected", "actual")
        );
    }
}

pub fn assert_golden(name: &str, run: &Run) {
    assert_same_text(
        &golden(name),
        &run.stdout,
        &format!("golden {name} (stderr: {})", run.stderr),
    );
}
