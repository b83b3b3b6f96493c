//! `EXCLUSIVE_PROCESS` on discrete GPUs while MPS serves them: in that compute mode only one
//! process may hold a context on the GPU — the MPS server — so a client that drops
//! `CUDA_MPS_PIPE_DIRECTORY` cannot run outside MPS and its limits (NVIDIA's plugin sets the
//! same mode, `cmd/mps-control-daemon/mps/daemon.go` `setComputeMode`). The mode each GPU had
//! before is restored when the daemon stops. Tegra cannot change compute modes (MPS
//! documentation), so Jetsons are never asked. Blocking NVML calls: run on the blocking pool.

use nvml_wrapper::enum_wrappers::device::ComputeMode;
use nvml_wrapper::Nvml;

/// GPUs switched to `EXCLUSIVE_PROCESS`, with the mode each had before.
#[derive(Debug, Default)]
pub struct Exclusive {
    previous: Vec<(String, ComputeMode)>,
}

/// Puts each of `uuids` in `EXCLUSIVE_PROCESS`; returns what to restore and, per GPU that
/// could not be switched, why (MPS still works there, only without that fence).
pub fn enter(nvml: &Nvml, uuids: &[String]) -> (Exclusive, Vec<String>) {
    let mut exclusive = Exclusive::default();
    let mut problems = Vec::new();
    for uuid in uuids {
        let result = nvml.device_by_uuid(uuid.as_str()).and_then(|mut device| {
            let before = device.compute_mode()?;
            if before != ComputeMode::ExclusiveProcess {
                device.set_compute_mode(ComputeMode::ExclusiveProcess)?;
            }
            Ok(before)
        });
        match result {
            Ok(before) => exclusive.previous.push((uuid.clone(), before)),
            Err(e) => problems.push(format!("GPU {uuid}: cannot set EXCLUSIVE_PROCESS: {e}")),
        }
    }
    (exclusive, problems)
}

/// Gives every GPU back the compute mode it had before [`enter`]; returns what failed.
pub fn restore(nvml: &Nvml, exclusive: Exclusive) -> Vec<String> {
    let mut problems = Vec::new();
    for (uuid, mode) in exclusive.previous {
        if mode == ComputeMode::ExclusiveProcess {
            continue;
        }
        let result = nvml
            .device_by_uuid(uuid.as_str())
            .and_then(|mut device| device.set_compute_mode(mode));
        if let Err(e) = result {
            problems.push(format!(
                "GPU {uuid}: cannot restore the compute mode {mode:?}: {e}"
            ));
        }
    }
    problems
}
