//! L4T's container mount lists, `/etc/nvidia-container-runtime/host-files-for-container.d/
//! *.csv` (JetPack's `l4t.csv`, `devices.csv`, `drivers.csv`; meta-tegra's
//! `recipes-bsp/tegra-binaries/tegra-configs/{devices,drivers}.csv`): one entry per line,
//! `<kind>, <path>` with kind `dev`, `lib`, `sym` or `dir`; paths may hold `*`/`?` globs in a
//! component (`dev, /dev/dri/card*`); r32's files name devices bare (`dev, nvhost-gpu`). The
//! parser and the glob expansion, without I/O: callers list directories under their own root.

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
    /// 1-based line number.
    pub line: usize,
}

pub use crate::LineError;

/// Parses a CSV file's text; blank lines and `#` comments are skipped.
pub fn parse(text: &str) -> Result<Vec<Entry>, LineError> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let error = |message: String| LineError {
            line: n + 1,
            message,
        };
        let (kind, path) = line.split_once(',').ok_or_else(|| {
            error(format!(
                "`{line}` is not `<kind>, <path>` (kind dev, lib, sym or dir)"
            ))
        })?;
        let kind = match kind.trim() {
            "dev" => Kind::Dev,
            "lib" => Kind::Lib,
            "sym" => Kind::Sym,
            "dir" => Kind::Dir,
            other => {
                return Err(error(format!(
                    "unknown kind `{other}` (expected dev, lib, sym or dir)"
                )))
            }
        };
        let path = path.trim();
        if path.is_empty() {
            return Err(error("the path is empty".into()));
        }
        let pattern = if path.starts_with('/') {
            path.to_string()
        } else if kind == Kind::Dev && !path.contains('/') {
            format!("/dev/{path}")
        } else {
            return Err(error(format!("`{path}` is not an absolute path")));
        };
        out.push(Entry {
            kind,
            pattern,
            line: n + 1,
        });
    }
    Ok(out)
}

/// `*` and `?` matching of one path component.
pub fn component_matches(pattern: &str, name: &str) -> bool {
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

/// The host paths `pattern` can name: each globbed component is matched against the entries
/// `list_dir` gives for the host directory so far (sorted here); plain components are kept as
/// they are. Whether the results exist is the caller's to check.
pub fn expand(pattern: &str, list_dir: impl Fn(&str) -> Vec<String>) -> Vec<String> {
    let mut current: Vec<String> = vec![String::new()];
    for component in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for prefix in &current {
            if component.contains(['*', '?']) {
                let mut names = list_dir(if prefix.is_empty() { "/" } else { prefix });
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
    current.retain(|p| !p.is_empty());
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_kinds_and_bare_device_names() {
        let entries = parse("# comment\n\ndev, nvhost-gpu\nlib,/usr/lib/libcuda.so.1.1\nsym, /usr/lib/libcuda.so\ndir, /dev/dri/by-path\ndev, /dev/dri/card*\n").unwrap();
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[0].pattern, "/dev/nvhost-gpu");
        assert_eq!(entries[0].line, 3);
        assert_eq!(entries[1].kind, Kind::Lib);
        assert_eq!(entries[3].kind, Kind::Dir);
    }

    #[test]
    fn bad_lines_say_which_and_why() {
        let err = parse("dev, /dev/nvmap\nfile, /dev/x\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(
            err.message,
            "unknown kind `file` (expected dev, lib, sym or dir)"
        );
        assert!(parse("dev /dev/nvmap\n")
            .unwrap_err()
            .message
            .contains("is not `<kind>, <path>`"));
        assert!(parse("lib, usr/lib/x.so\n")
            .unwrap_err()
            .message
            .contains("not an absolute path"));
        assert_eq!(parse("lib, \n").unwrap_err().message, "the path is empty");
    }

    #[test]
    fn globs() {
        assert!(component_matches("card*", "card0"));
        assert!(component_matches("igpu*", "igpu-0000:01:00.0"));
        assert!(component_matches("renderD1?8", "renderD128"));
        assert!(!component_matches("card?", "card10"));
        assert!(!component_matches("card*", "renderD128"));
        let dirs = |dir: &str| match dir {
            "/dev" => vec!["nvgpu".into(), "nvmap".into()],
            "/dev/nvgpu" => vec!["igpu0".into(), "igpu-0000:01:00.0".into()],
            _ => Vec::new(),
        };
        assert_eq!(
            expand("/dev/nvgpu/igpu*/ctrl", dirs),
            vec!["/dev/nvgpu/igpu-0000:01:00.0/ctrl", "/dev/nvgpu/igpu0/ctrl"]
        );
        assert_eq!(expand("/dev/nvmap", dirs), vec!["/dev/nvmap"]);
        assert!(expand("/dev/x*", dirs).is_empty());
    }
}
