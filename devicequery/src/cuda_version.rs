//! CUDA version integers (`cuDriverGetVersion`: 1000 × major + 10 × minor) and how deviceQuery
//! prints them.

use std::fmt;

/// A CUDA version as the driver reports it, e.g. `CudaVersion(12040)` for 12.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaVersion(pub i32);

impl CudaVersion {
    pub fn major(self) -> i32 {
        self.0 / 1000
    }

    /// deviceQuery's minor: `(v % 100) / 10` (so 12060 → 6, 10020 → 2).
    pub fn minor(self) -> i32 {
        (self.0 % 100) / 10
    }
}

impl fmt::Display for CudaVersion {
    /// `major.minor`, exactly as deviceQuery's `%d.%d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major(), self.minor())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_device_query() {
        assert_eq!(CudaVersion(12060).to_string(), "12.6");
        assert_eq!(CudaVersion(10020).to_string(), "10.2");
        assert_eq!(CudaVersion(10000).to_string(), "10.0");
        assert_eq!(CudaVersion(11040).to_string(), "11.4");
        assert_eq!(CudaVersion(13000).to_string(), "13.0");
        assert_eq!(CudaVersion(13020).to_string(), "13.2");
        // The patch digit is dropped, as `(v % 100) / 10` does.
        assert_eq!(CudaVersion(12085).to_string(), "12.8");
        // No devices: deviceQuery never fetched the version and prints 0.0.
        assert_eq!(CudaVersion(0).to_string(), "0.0");
    }

    #[test]
    fn orders_numerically() {
        assert!(CudaVersion(10020) < CudaVersion(11000));
        assert!(CudaVersion(11030) > CudaVersion(11020));
    }
}
