//! L4T's container mount lists on the host (format and glob matching in
//! `edgegpu_platform::csv`). The NVIDIA container runtime mounts the entries that exist and
//! skips the rest (nvidia-container-toolkit `internal/platform-support/tegra/csv`); so does the
//! generator.

use std::path::{Path, PathBuf};

pub use edgegpu_platform::csv::{Entry, Kind};

use crate::error::{Result, SetupError};
use crate::root::HostRoot;

/// The CSV files in `dir` (on disk), sorted by name; none if the directory does not exist.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SetupError::unreadable(dir.display().to_string(), e)),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Parses one CSV file; a bad line is an error naming the file and line.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Entry>> {
    edgegpu_platform::csv::parse(text).map_err(|e| SetupError::Malformed {
        file: file.to_path_buf(),
        line: e.line,
        column: 1,
        message: e.message,
    })
}

/// The host paths `pattern` names that exist under `root` (the last component's links not
/// followed, so a `sym` entry is found even when dangling).
pub fn expand(root: &HostRoot, pattern: &str) -> Vec<String> {
    let list = |dir: &str| -> Vec<String> {
        std::fs::read_dir(root.path(dir))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect()
    };
    edgegpu_platform::csv::expand(pattern, list)
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(root.path(p)).is_ok())
        .collect()
}

/// The file names of the CSV lists, for messages.
pub fn names(files: &[PathBuf]) -> String {
    files
        .iter()
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
