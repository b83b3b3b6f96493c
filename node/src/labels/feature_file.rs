//! The Node Feature Discovery local feature file (`--feature-file`): one `key=value` line per
//! label, read by nfd-worker's `local` source from
//! `/etc/kubernetes/node-feature-discovery/features.d/` (NFD docs, "Local feature source").
//! Keys with a prefix (`nvidia.com/…`, `edgegpu.io/…`) become labels as they are; nfd-master
//! allows every namespace but `kubernetes.io` by default (v0.13 on).

use std::io::Write;
use std::path::Path;

use super::NodeLabels;

/// The default location: where GFD writes its file (`features.d/gfd`), named after us.
pub const DEFAULT_PATH: &str = "/etc/kubernetes/node-feature-discovery/features.d/edgegpu";

/// The file's text: `key=value` lines only. No comment line: NFD reads `#` lines as comments
/// only from v0.14 (`source/local/local.go`, "support comments in input"); older workers would
/// take one for a feature.
pub fn render(labels: &NodeLabels) -> String {
    let mut text = String::new();
    for (key, value) in labels.iter() {
        text.push_str(key);
        text.push('=');
        text.push_str(value);
        text.push('\n');
    }
    text
}

/// Removes the file at shutdown (as GPU Feature Discovery removes its own), so that NFD drops
/// the labels of a node whose plugin is gone. `Ok(false)`: there was none.
pub fn remove(path: &Path) -> anyhow::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => anyhow::bail!("cannot remove the feature file {}: {e}", path.display()),
    }
}

/// Writes the file atomically (a temporary file in the same directory, then rename), so
/// nfd-worker never reads half of it. A missing directory (NFD not installed) is not an
/// error: `Ok(false)` and nothing written.
pub fn write(path: &Path, labels: &NodeLabels) -> anyhow::Result<bool> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Ok(false);
    }
    let name = path
        .file_name()
        .ok_or_else(|| anyhow::anyhow!("--feature-file {} names no file", path.display()))?;
    // A dot file: nfd-worker reads every file of the directory but skips hidden ones.
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(render(labels).as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        anyhow::bail!("cannot write the feature file {}: {e}", path.display());
    }
    Ok(true)
}
