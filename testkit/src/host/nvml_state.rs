//! What a root's installed fake NVML answers at run time: its control directory, telemetry,
//! processes, compute mode, XID events and lost GPUs.

use std::path::Path;

use super::fake_host::FakeHost;

impl FakeHost {
    /// The directory holding this root's fake NVML (and its control files).
    pub fn nvml_dir(&self) -> &Path {
        self.nvml_dir
            .as_deref()
            .expect("this root has no fake NVML")
    }

    /// Sets what the fake NVML answers for GPU `gpu`'s telemetry queries: keys `gpu_util`,
    /// `mem_util`, `sm_clock`, `mem_clock`, `temp`, `power_mw`, `mem_used` (see nvml.c);
    /// a key left out answers NOT_SUPPORTED.
    pub fn set_nvml_telemetry(&self, gpu: u32, values: &[(&str, u64)]) {
        self.write_nvml_telemetry(&gpu.to_string(), values);
    }

    /// Sets what the fake NVML answers for the MIG device `uuid` (`mem_used`, bytes; its
    /// other queries are the whole GPU's and answer NOT_SUPPORTED on a MIG device).
    pub fn set_nvml_mig_telemetry(&self, uuid: &str, values: &[(&str, u64)]) {
        self.write_nvml_telemetry(uuid, values);
    }

    /// Sets the processes the fake NVML lists for GPU `gpu` (its running compute processes):
    /// `(pid, used bytes)`, `None` bytes answering `NVML_VALUE_NOT_AVAILABLE`.
    pub fn set_nvml_processes(&self, gpu: u32, processes: &[(u32, Option<u64>)]) {
        self.write_nvml_processes(&gpu.to_string(), processes);
    }

    /// The same for the MIG device `uuid` (its own processes).
    pub fn set_nvml_mig_processes(&self, uuid: &str, processes: &[(u32, Option<u64>)]) {
        self.write_nvml_processes(uuid, processes);
    }

    fn write_nvml_processes(&self, device: &str, processes: &[(u32, Option<u64>)]) {
        let text: String = processes
            .iter()
            .map(|(pid, bytes)| match bytes {
                Some(b) => format!("{pid} {b}\n"),
                None => format!("{pid} -\n"),
            })
            .collect();
        let dir = self.nvml_dir();
        let tmp = dir.join(format!("processes-{device}.tmp"));
        std::fs::write(&tmp, text).expect("write processes");
        std::fs::rename(&tmp, dir.join(format!("processes-{device}"))).expect("publish processes");
    }

    fn write_nvml_telemetry(&self, device: &str, values: &[(&str, u64)]) {
        let text: String = values.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        let dir = self.nvml_dir();
        let tmp = dir.join(format!("telemetry-{device}.tmp"));
        std::fs::write(&tmp, text).expect("write telemetry");
        std::fs::rename(&tmp, dir.join(format!("telemetry-{device}"))).expect("publish telemetry");
    }

    /// The compute mode the fake NVML holds for GPU `gpu` (NVML's enum: 0 default, 3
    /// exclusive process), as `nvmlDeviceSetComputeMode` left it.
    pub fn compute_mode(&self, gpu: u32) -> u32 {
        std::fs::read_to_string(self.nvml_dir().join(format!("compute-mode-{gpu}")))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Queues a critical XID event for the GPU with NVML index `gpu`.
    pub fn inject_xid(&self, gpu: u32, xid: u64) {
        let dir = self.nvml_dir();
        let tmp = dir.join("xid-events.tmp");
        std::fs::write(&tmp, format!("{gpu} {xid}\n")).expect("write xid");
        // Atomic: the fake consumes the file with rename.
        std::fs::rename(&tmp, dir.join("xid-events")).expect("publish xid");
    }

    /// Queues a critical XID event for MIG instance (`gi`, `ci`) of GPU `gpu`.
    pub fn inject_mig_xid(&self, gpu: u32, xid: u64, gi: u32, ci: u32) {
        let dir = self.nvml_dir();
        let tmp = dir.join("xid-events.tmp");
        std::fs::write(&tmp, format!("{gpu} {xid} {gi} {ci}\n")).expect("write xid");
        std::fs::rename(&tmp, dir.join("xid-events")).expect("publish xid");
    }

    /// Makes GPU `gpu` answer NVML_ERROR_GPU_IS_LOST (fallen off the bus).
    pub fn lose_gpu(&self, gpu: u32) {
        std::fs::write(self.nvml_dir().join(format!("lost-{gpu}")), "").expect("mark lost");
    }

    /// The GPU answers again.
    pub fn recover_gpu(&self, gpu: u32) {
        std::fs::remove_file(self.nvml_dir().join(format!("lost-{gpu}"))).expect("unmark lost");
    }
}
