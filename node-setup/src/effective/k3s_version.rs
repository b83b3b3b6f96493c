//! The k3s release: parsed from `--k3s-version` or read from the k3s binary, and what each
//! release supports (the default-runtime setting, the base template, containerd 2.0).

use std::fmt;
use std::io::Read;

use edgegpu_host::error::{Result, SetupError};
use edgegpu_host::root::HostRoot;

/// A k3s release number such as `v1.29.3+k3s1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct K3sVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl K3sVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        K3sVersion {
            major,
            minor,
            patch,
        }
    }

    /// Parses `v1.29.3+k3s1`, `1.29.3`, `v1.29.3-rc1+k3s1`.
    pub fn parse(s: &str) -> Option<K3sVersion> {
        let s = s.trim().trim_start_matches('v');
        let core = s.split(['+', '-']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
        let v = K3sVersion::new(parts.next()??, parts.next()??, parts.next()??);
        if parts.next().is_some() {
            return None;
        }
        Some(v)
    }

    /// `default-runtime` exists from v1.29.0 (backports to 1.25–1.28 are unverified, so
    /// they are not relied on).
    pub fn has_default_runtime(self) -> bool {
        self >= K3sVersion::new(1, 29, 0)
    }

    /// `{{ template "base" . }}` exists from the September 2023 releases.
    pub fn has_base_template(self) -> bool {
        let first_patch = match (self.major, self.minor) {
            (1, 24) => 17,
            (1, 25) => 13,
            (1, 26) => 8,
            (1, 27) => 5,
            (1, 28) => 1,
            (1, m) if m > 28 => 0,
            _ => return false,
        };
        self.patch >= first_patch
    }

    /// k3s ships containerd 2.0 (config version 3) from v1.31.6 / v1.32.2.
    pub fn uses_containerd2(self) -> bool {
        match (self.major, self.minor) {
            (1, 31) => self.patch >= 6,
            (1, 32) => self.patch >= 2,
            (1, m) => m > 32,
            _ => false,
        }
    }
}

impl fmt::Display for K3sVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Reads the k3s release number embedded in the binary (`v1.29.3+k3s1`), scanning it in
/// blocks so a 70 MB binary never sits in memory at once.
pub fn version_from_binary(host: &HostRoot, bin: &str) -> Result<Option<K3sVersion>> {
    const MARK: &[u8] = b"+k3s";
    const OVERLAP: usize = 32;
    let path = host.resolve(bin)?;
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(_) => return Ok(None),
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut keep = 0;
    loop {
        let n = file
            .read(&mut buf[keep..])
            .map_err(|e| SetupError::unreadable(bin, e))?;
        let filled = keep + n;
        let window = &buf[..filled];
        let mut from = 0;
        while let Some(pos) = window[from..].windows(MARK.len()).position(|w| w == MARK) {
            let at = from + pos;
            if let Some(v) = version_before(&window[..at]) {
                return Ok(Some(v));
            }
            from = at + 1;
        }
        if n == 0 {
            return Ok(None);
        }
        keep = filled.min(OVERLAP);
        buf.copy_within(filled - keep..filled, 0);
    }
}

/// `v1.2.3` ending exactly at the end of `bytes`.
fn version_before(bytes: &[u8]) -> Option<K3sVersion> {
    let start = bytes.len().saturating_sub(20);
    let tail = &bytes[start..];
    let v = tail.iter().rposition(|&b| b == b'v')?;
    let candidate = std::str::from_utf8(&tail[v + 1..]).ok()?;
    if !candidate.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    K3sVersion::parse(candidate)
}
