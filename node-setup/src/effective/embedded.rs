//! Which containerd generation a binary is, read from the binary without running it (an
//! image's binaries cannot run at build time, and node-setup runs nothing to plan): Go
//! keeps every function's full package path in the binary's symbol table (`pclntab`), which
//! stripping does not remove. containerd 2.x is the module `github.com/containerd/containerd/v2`
//! (its go.mod), so its packages are `github.com/containerd/containerd/v2/...`; 1.x's are
//! `github.com/containerd/containerd/...` without `v2`.

use std::io::Read;

use edgegpu_host::root::HostRoot;

/// Where a system containerd binary is installed, first found wins.
pub const CONTAINERD_BINARIES: [&str; 3] = [
    "/usr/bin/containerd",
    "/usr/local/bin/containerd",
    "/usr/sbin/containerd",
];

const V2_PACKAGES: &[u8] = b"github.com/containerd/containerd/v2/";
const ANY_PACKAGES: &[u8] = b"github.com/containerd/containerd/";
/// The most read of one binary (containerd 2.1 is ~40 MiB).
const MAX_BYTES: u64 = 256 << 20;

/// A binary's containerd generation and what said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// 1 or 2.
    pub major: u32,
    /// For messages: `its binary /usr/bin/containerd holds the packages
    /// github.com/containerd/containerd/v2/...`.
    pub signal: String,
}

/// The generation the containerd binaries under the root tell; `None` where none is there,
/// none holds containerd's package paths, or two tell different generations (an old binary
/// left beside a newer one: which one the service runs is not known here).
pub fn containerd_generation(host: &HostRoot) -> Option<Generation> {
    let found: Vec<Generation> = CONTAINERD_BINARIES
        .iter()
        .filter_map(|path| {
            let disk = host.resolve(path).ok()?;
            let file = std::fs::File::open(disk).ok()?;
            let (v2, any) = scan(file.take(MAX_BYTES)).ok()?;
            let (major, packages) = match (v2, any) {
                (true, _) => (2, "github.com/containerd/containerd/v2/..."),
                (false, true) => (1, "github.com/containerd/containerd/... and none under v2/"),
                (false, false) => return None,
            };
            Some(Generation {
                major,
                signal: format!("its binary {path} holds the packages {packages}"),
            })
        })
        .collect();
    let first = found.first()?;
    found
        .iter()
        .all(|g| g.major == first.major)
        .then(|| first.clone())
}

/// Whether `input` holds the v2 package prefix, and any of containerd's: read in blocks,
/// each with the tail of the one before (so a prefix split across two is found).
fn scan(mut input: impl Read) -> std::io::Result<(bool, bool)> {
    let keep = V2_PACKAGES.len() - 1;
    let mut buffer = vec![0u8; 1 << 20];
    let (mut start, mut v2, mut any) = (0usize, false, false);
    loop {
        let read = input.read(&mut buffer[start..])?;
        if read == 0 {
            return Ok((v2, any));
        }
        let window = &buffer[..start + read];
        any |= contains(window, ANY_PACKAGES);
        v2 |= contains(window, V2_PACKAGES);
        if v2 {
            return Ok((true, true));
        }
        let tail = window.len().saturating_sub(keep);
        buffer.copy_within(tail..start + read, 0);
        start = start + read - tail;
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_split_across_blocks_is_found() {
        let mut data = vec![b'x'; (1 << 20) - 10];
        data.extend_from_slice(b"github.com/containerd/containerd/v2/core/runtime.init");
        assert_eq!(scan(&data[..]).unwrap(), (true, true));
        let one = b"\0github.com/containerd/containerd/pkg/cri.init\0".to_vec();
        assert_eq!(scan(&one[..]).unwrap(), (false, true));
        assert_eq!(
            scan(&b"github.com/containerd/ttrpc"[..]).unwrap(),
            (false, false)
        );
    }

    #[test]
    fn the_first_binary_that_tells() {
        let root = tempfile::tempdir().unwrap();
        let host = HostRoot::new(root.path());
        assert_eq!(containerd_generation(&host), None);
        let bin = root.path().join("usr/local/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(
            bin.join("containerd"),
            b"\x7fELF..github.com/containerd/containerd/v2/cmd",
        )
        .unwrap();
        let found = containerd_generation(&host).unwrap();
        assert_eq!(found.major, 2);
        assert_eq!(
            found.signal,
            "its binary /usr/local/bin/containerd holds the packages github.com/containerd/containerd/v2/..."
        );
        // An old 1.x binary left beside it: which one runs is not known, so neither says.
        let usr_bin = root.path().join("usr/bin");
        std::fs::create_dir_all(&usr_bin).unwrap();
        std::fs::write(
            usr_bin.join("containerd"),
            b"github.com/containerd/containerd/pkg/cri",
        )
        .unwrap();
        assert_eq!(containerd_generation(&host), None);
    }
}
