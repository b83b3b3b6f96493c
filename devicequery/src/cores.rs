//! CUDA cores per multiprocessor by compute capability: the `_ConvertSMVer2Cores` table of the
//! CUDA samples' helper_cuda.h (current tree, including Thor's renumbered SM 11.0).

/// (compute capability as `(major << 4) + minor`, cores per SM), in the samples' order.
const CORES_PER_SM: [(u32, u32); 24] = [
    (0x30, 192), // Kepler
    (0x32, 192), // Kepler (TK1)
    (0x35, 192),
    (0x37, 192),
    (0x50, 128), // Maxwell
    (0x52, 128),
    (0x53, 128), // TX1 / Nano
    (0x60, 64),  // Pascal
    (0x61, 128),
    (0x62, 128), // TX2
    (0x70, 64),  // Volta
    (0x72, 64),  // Xavier
    (0x75, 64),  // Turing
    (0x80, 64),  // Ampere A100
    (0x86, 128),
    (0x87, 128), // Orin
    (0x89, 128), // Ada
    (0x90, 128), // Hopper
    (0xa0, 128), // Blackwell
    (0xa1, 128), // Thor with CUDA <= 12.9
    (0xa3, 128),
    (0xb0, 128), // Thor with CUDA >= 13.0
    (0xc0, 128),
    (0xc1, 128), // GB10
];

/// Cores per SM for compute capability `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoresPerSm {
    pub cores: u32,
    /// false when the capability is not in the table and the samples' default (the last
    /// entry) was used; deviceQuery then prints a `MapSMtoCores ... is undefined` line.
    pub known: bool,
}

pub fn cores_per_sm(major: i32, minor: i32) -> CoresPerSm {
    let key = ((major as u32) << 4).wrapping_add(minor as u32);
    match CORES_PER_SM.iter().find(|(sm, _)| *sm == key) {
        Some(&(_, cores)) => CoresPerSm { cores, known: true },
        None => CoresPerSm {
            cores: CORES_PER_SM[CORES_PER_SM.len() - 1].1,
            known: false,
        },
    }
}

/// The line helper_cuda.h prints for an unknown capability.
pub fn undefined_message(major: i32, minor: i32, cores: u32) -> String {
    format!("MapSMtoCores for SM {major}.{minor} is undefined.  Default to use {cores} Cores/SM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jetson_and_datacenter_generations() {
        let known = |major, minor, cores| {
            assert_eq!(
                cores_per_sm(major, minor),
                CoresPerSm { cores, known: true },
                "SM {major}.{minor}"
            )
        };
        known(3, 2, 192); // TK1
        known(5, 3, 128); // Nano
        known(6, 0, 64); // P100
        known(6, 2, 128); // TX2
        known(7, 0, 64); // V100
        known(7, 2, 64); // Xavier
        known(7, 5, 64); // T4
        known(8, 0, 64); // A100
        known(8, 6, 128);
        known(8, 7, 128); // Orin
        known(8, 9, 128); // L4
        known(9, 0, 128); // H100
        known(10, 0, 128); // B200
        known(10, 1, 128); // Thor, CUDA 12.x
        known(11, 0, 128); // Thor, CUDA 13
        known(12, 1, 128); // GB10
    }

    #[test]
    fn unknown_capability_defaults_to_last_entry() {
        assert_eq!(
            cores_per_sm(13, 5),
            CoresPerSm {
                cores: 128,
                known: false
            }
        );
        assert_eq!(
            cores_per_sm(2, 1),
            CoresPerSm {
                cores: 128,
                known: false
            }
        ); // Fermi left the table
        assert_eq!(
            undefined_message(13, 5, 128),
            "MapSMtoCores for SM 13.5 is undefined.  Default to use 128 Cores/SM"
        );
    }

    #[test]
    fn values_from_a_broken_driver_are_unknown_not_a_panic() {
        assert!(!cores_per_sm(-1, -1).known);
        assert!(!cores_per_sm(i32::MAX, i32::MAX).known);
    }
}
