//! Which deviceQuery sample release the text report imitates.
//!
//! The sample's output changed over CUDA releases; devicequery follows the release that
//! matches the driver's CUDA version, so it reproduces the outputs people have on record for
//! that driver (e.g. JetPack 4's CUDA 10.x layout on a Nano).

use crate::cuda_version::CudaVersion;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleLayout {
    /// CUDA ≥ 11.3: `(%03d) Multiprocessors, (%03d) CUDA Cores/MP:    %d CUDA Cores`;
    /// before: `(%2d) Multiprocessors, (%3d) CUDA Cores/MP:     %d CUDA Cores`.
    pub zero_padded_sm_line: bool,
    /// CUDA ≥ 11.0: `Total shared memory per multiprocessor:` and
    /// `Device supports Managed Memory:` lines.
    pub shared_memory_per_sm_and_managed_memory: bool,
    /// CUDA < 13.0: `Supports MultiDevice Co-op Kernel Launch:` line.
    pub multi_device_cooperative_launch: bool,
}

impl SampleLayout {
    pub fn for_driver(version: CudaVersion) -> SampleLayout {
        SampleLayout {
            zero_padded_sm_line: version >= CudaVersion(11030),
            shared_memory_per_sm_and_managed_memory: version >= CudaVersion(11000),
            multi_device_cooperative_launch: version < CudaVersion(13000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(v: i32) -> (bool, bool, bool) {
        let l = SampleLayout::for_driver(CudaVersion(v));
        (
            l.zero_padded_sm_line,
            l.shared_memory_per_sm_and_managed_memory,
            l.multi_device_cooperative_launch,
        )
    }

    #[test]
    fn release_boundaries() {
        assert_eq!(layout(10000), (false, false, true)); // JetPack 4.2
        assert_eq!(layout(10020), (false, false, true)); // JetPack 4.6
        assert_eq!(layout(11000), (false, true, true));
        assert_eq!(layout(11020), (false, true, true));
        assert_eq!(layout(11030), (true, true, true));
        assert_eq!(layout(11040), (true, true, true)); // JetPack 5
        assert_eq!(layout(12090), (true, true, true));
        assert_eq!(layout(13000), (true, true, false)); // JetPack 7
        assert_eq!(layout(13020), (true, true, false));
    }
}
