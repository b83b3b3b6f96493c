//! Which simulated Jetson: the board and the L4T release its fake root carries. The
//! host files of a board are in [`crate::host`], its container lists in [`crate::l4t`]; both
//! read this module, neither reads the other's.

/// A Jetson module generation (with the L4T release the fake root carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Board {
    /// Jetson Nano devkit, T210, L4T r32.7.6 (JetPack 4.6.6).
    Nano,
    /// Jetson AGX Xavier, T194, L4T r35.4.1 (JetPack 5.1.2).
    Xavier,
    /// Jetson AGX Orin devkit, T234, L4T r36.4.3 (JetPack 6.2).
    Orin,
    /// Jetson Orin NX 16 GB on its devkit carrier, T234, L4T r39.2.0 (JetPack 7.2).
    OrinR39,
    /// Jetson AGX Thor devkit, T264, L4T r38.2.1 (JetPack 7.0).
    Thor,
}

impl Board {
    pub const ALL: [Board; 5] = [
        Board::Nano,
        Board::Xavier,
        Board::Orin,
        Board::OrinR39,
        Board::Thor,
    ];

    /// Lower-case name (`nano`, `xavier`, `orin`, `orin-r39`, `thor`).
    pub fn name(self) -> &'static str {
        match self {
            Board::Nano => "nano",
            Board::Xavier => "xavier",
            Board::Orin => "orin",
            Board::OrinR39 => "orin-r39",
            Board::Thor => "thor",
        }
    }

    /// The SoC (`T234`), as the platform table names it.
    pub fn soc(self) -> &'static str {
        match self {
            Board::Nano => "T210",
            Board::Xavier => "T194",
            Board::Orin | Board::OrinR39 => "T234",
            Board::Thor => "T264",
        }
    }

    /// CUDA's view of the GPU on this board's release: (CUDA driver API version, compute
    /// capability, `cuDeviceGetName`). CUDA versions: JetPack 4.6 10.2, 5.1 11.4, 6.2 12.6,
    /// 7.0 13.0, 7.2 13.2 (the JetPack release notes).
    pub fn cuda(self) -> ((u32, u32), (u32, u32), &'static str) {
        match self {
            Board::Nano => ((10, 2), (5, 3), "NVIDIA Tegra X1"),
            Board::Xavier => ((11, 4), (7, 2), "Xavier"),
            Board::Orin => ((12, 6), (8, 7), "Orin"),
            Board::OrinR39 => ((13, 2), (8, 7), "Orin"),
            Board::Thor => ((13, 0), (11, 0), "NVIDIA Thor"),
        }
    }

    pub fn from_name(name: &str) -> Option<Board> {
        Board::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The L4T version the plugin should report.
    pub fn l4t(self) -> &'static str {
        match self {
            Board::Nano => "32.7.6",
            Board::Xavier => "35.4.1",
            Board::Orin => "36.4.3",
            Board::OrinR39 => "39.2.0",
            Board::Thor => "38.2.1",
        }
    }

    /// The L4T major release.
    pub fn l4t_major(self) -> u32 {
        self.l4t().split('.').next().unwrap().parse().unwrap()
    }
}
