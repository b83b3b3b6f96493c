//! L4T's container mount lists: `/etc/nvidia-container-runtime/host-files-for-container.d/
//! *.csv` (JetPack's `l4t.csv`, `devices.csv`, `drivers.csv`; meta-tegra's
//! `recipes-bsp/tegra-binaries/tegra-configs/{devices,drivers}.csv`). One entry per line,
//! `<kind>, <path>` with kind `dev`, `lib`, `sym` or `dir`; paths may hold `*`/`?` globs
//! (`dev, /dev/dri/card*`); old r32 files name devices bare (`dev, nvhost-gpu`). The NVIDIA
//! container runtime mounts what exists and skips the rest (nvidia-container-toolkit
//! `internal/platform-support/tegra/csv`); so does this.

use std::path::{Path, PathBuf};

use crate::error::{Result, SetupError};
use crate::host::HostRoot;

/// What an entry mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dev,
    Lib,
    Sym,
    Dir,
}

/// One line of a CSV file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// Host-absolute path, possibly with globs.
    pub pattern: String,
}

/// The CSV files in `dir` (on disk), sorted by name; none if the directory does not exist.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SetupError::io(format!("reading {}", dir.display()), e)),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Parses one CSV file; an unknown kind or a line that is not `<kind>, <path>` is an error
/// naming the file and line.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let malformed = |message: String| SetupError::Malformed {
            file: file.to_path_buf(),
            line: n + 1,
            column: 1,
            message,
        };
        let (kind, path) = line.split_once(',').ok_or_else(|| {
            malformed(format!(
                "`{line}` is not `<kind>, <path>` (kind dev, lib, sym or dir)"
            ))
        })?;
        let kind = match kind.trim() {
            "dev" => Kind::Dev,
            "lib" => Kind::Lib,
            "sym" => Kind::Sym,
            "dir" => Kind::Dir,
            other => {
                return Err(malformed(format!(
                    "unknown kind `{other}` (expected dev, lib, sym or dir)"
                )))
            }
        };
        let path = path.trim();
        if path.is_empty() {
            return Err(malformed("the path is empty".into()));
        }
        let pattern = if path.starts_with('/') {
            path.to_string()
        } else if kind == Kind::Dev && !path.contains('/') {
            format!("/dev/{path}")
        } else {
            return Err(malformed(format!("`{path}` is not an absolute path")));
        };
        out.push(Entry { kind, pattern });
    }
    Ok(out)
}

/// `*` and `?` matching of one path component.
fn component_matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// The host paths `pattern` names that exist under `root` (links not followed for the last
/// component, so a `sym` entry is found even when dangling), sorted per glob component.
pub fn expand(root: &HostRoot, pattern: &str) -> Vec<String> {
    let mut current: Vec<String> = vec![String::new()];
    for component in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for prefix in &current {
            if component.contains(['*', '?']) {
                let dir = root.path(if prefix.is_empty() { "/" } else { prefix });
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                let mut names: Vec<String> = entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect();
                names.sort();
                for name in names {
                    if component_matches(component, &name) {
                        next.push(format!("{prefix}/{name}"));
                    }
                }
            } else {
                next.push(format!("{prefix}/{component}"));
            }
        }
        current = next;
    }
    current
        .into_iter()
        .filter(|p| !p.is_empty() && std::fs::symlink_metadata(root.path(p)).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_kinds_and_bare_device_names() {
        let f = Path::new("/x/l4t.csv");
        let entries = parse(f, "# comment\n\ndev, nvhost-gpu\nlib,/usr/lib/libcuda.so.1.1\nsym, /usr/lib/libcuda.so\ndir, /dev/dri/by-path\ndev, /dev/dri/card*\n").unwrap();
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[0].pattern, "/dev/nvhost-gpu");
        assert_eq!(entries[1].kind, Kind::Lib);
        assert_eq!(entries[3].kind, Kind::Dir);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let f = Path::new("/x/devices.csv");
        let err = parse(f, "dev, /dev/nvmap\nfile, /dev/x\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "/x/devices.csv:2:1: unknown kind `file` (expected dev, lib, sym or dir)"
        );
        let err = parse(f, "dev /dev/nvmap\n").unwrap_err().to_string();
        assert!(
            err.starts_with("/x/devices.csv:1:1: `dev /dev/nvmap` is not"),
            "{err}"
        );
        let err = parse(f, "lib, usr/lib/x.so\n").unwrap_err().to_string();
        assert!(
            err.contains(":1:1: `usr/lib/x.so` is not an absolute path"),
            "{err}"
        );
        let err = parse(f, "lib, \n").unwrap_err().to_string();
        assert!(err.contains("the path is empty"), "{err}");
    }

    #[test]
    fn globs() {
        assert!(component_matches("card*", "card0"));
        assert!(component_matches("igpu*", "igpu-0000:01:00.0"));
        assert!(!component_matches("card?", "card10"));
    }
}
