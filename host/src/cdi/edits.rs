//! The container edits a spec collects — device nodes, read-only bind mounts, the symlinks to
//! recreate and the library directories — and how they become the spec's edits: hooks
//! (`create-symlinks`, `update-ldcache`, as nvidia-container-toolkit writes them) where a hook
//! program is installed, bind mounts at the links' paths where none is.
//!
//! Files are mounted where they really are: every symlink on the way is followed inside the
//! root (a library listed as `…/tegra/libnvv4l2.so` on JetPack 6, where `tegra` links to
//! `nvidia`, is mounted at `…/nvidia/libnvv4l2.so`, as nvidia-container-toolkit's locators do).
//! A mount at the unresolved path would make the runtime create a directory `tegra` in the
//! container while the hook tries to make `tegra` a symlink.

use super::spec::{ContainerEdits, DeviceNode, Hook, Mount};
use crate::root::HostRoot;

/// Symlink chains longer than this are loops (the kernel's limit).
const MAX_LINKS: usize = 40;

/// A symlink of the host to recreate in the container.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    /// The link's content, as written (`libcuda.so.1.1`, `nvidia`).
    target: String,
    /// Host path of the link itself (its parent directories resolved).
    at: String,
    /// Host path of the file or directory the chain ends at.
    resolved: String,
}

/// Edits being collected for one spec.
#[derive(Debug, Default)]
pub struct EditsBuilder {
    pub nodes: Vec<DeviceNode>,
    mounts: Vec<Mount>,
    links: Vec<Link>,
    /// Directories of mounted libraries, for `update-ldcache`.
    lib_dirs: Vec<String>,
}

impl EditsBuilder {
    pub fn add_node(&mut self, path: &str) {
        if !self.nodes.iter().any(|n| n.path == path) {
            self.nodes.push(DeviceNode {
                path: path.to_string(),
            });
        }
    }

    /// A mount, unless one at the same container path exists.
    pub fn add_mount(&mut self, mount: Mount) {
        if !self
            .mounts
            .iter()
            .any(|m| m.container_path == mount.container_path)
        {
            self.mounts.push(mount);
        }
    }

    /// A file or directory of the host (`lib`, `sym` and `dir` entries, driver files): the
    /// place it really is gets mounted; each symlink of its chain is recreated. What cannot
    /// be mounted is added to `skipped`, saying why.
    pub fn add_path(&mut self, root: &HostRoot, path: &str, skipped: &mut Vec<String>) {
        let mut chain = Vec::new();
        let mut at = match root.locate(path) {
            Ok(at) => at,
            Err(e) => {
                skipped.push(format!("{path} ({e})"));
                return;
            }
        };
        while let Some((target, names)) = root.link_target(&at) {
            if chain.len() == MAX_LINKS {
                skipped.push(format!("{path} (symlink loop)"));
                return;
            }
            chain.push((target, at));
            at = match root.locate(&names) {
                Ok(next) => next,
                Err(e) => {
                    skipped.push(format!("{path} ({e})"));
                    return;
                }
            };
        }
        let on_disk = root.path(&at);
        if std::fs::metadata(&on_disk).is_err() {
            skipped.push(format!("{path} (dangling symlink to {at})"));
            return;
        }
        if on_disk.is_dir() {
            self.add_mount(Mount::bind(&at));
        } else {
            self.add_mount(Mount::bind(&at));
            if is_library(&at) {
                let dir = parent(&at);
                if !self.lib_dirs.contains(&dir) {
                    self.lib_dirs.push(dir);
                }
            }
        }
        for (target, link_at) in chain {
            let link = Link {
                target,
                at: link_at,
                resolved: at.clone(),
            };
            if !self.links.contains(&link) {
                self.links.push(link);
            }
        }
    }

    /// The spec-level edits: the collected mounts and, with a hook program (`path`, argv
    /// prefix), the two hooks; without one, each link's target is bind-mounted at the link.
    /// Mounts that another directory mount already covers are dropped.
    pub fn finish(self, hook: Option<&(&str, &[&str])>) -> ContainerEdits {
        let mut mounts = self.mounts;
        let mut hooks = Vec::new();
        match hook {
            Some((path, prefix)) => {
                let make = |args: Vec<String>| Hook {
                    hook_name: "createContainer".into(),
                    path: path.to_string(),
                    args: prefix.iter().map(|s| s.to_string()).chain(args).collect(),
                };
                if !self.links.is_empty() {
                    // The hook makes the links: nothing may be mounted there.
                    mounts.retain(|m| !self.links.iter().any(|l| l.at == m.container_path));
                    let mut args = vec!["create-symlinks".to_string()];
                    for l in &self.links {
                        args.push("--link".into());
                        args.push(format!("{}::{}", l.target, l.at));
                    }
                    hooks.push(make(args));
                }
                if !self.lib_dirs.is_empty() {
                    let mut args = vec!["update-ldcache".to_string()];
                    for d in &self.lib_dirs {
                        args.push("--folder".into());
                        args.push(d.clone());
                    }
                    hooks.push(make(args));
                }
            }
            None => {
                for l in &self.links {
                    if !mounts.iter().any(|m| m.container_path == l.at) {
                        mounts.push(Mount::bind_at(&l.resolved, &l.at));
                    }
                }
            }
        }
        let covered: Vec<bool> = mounts
            .iter()
            .map(|m| mounts.iter().any(|d| covers(d, m)))
            .collect();
        let mut covered = covered.into_iter();
        mounts.retain(|_| !covered.next().unwrap_or(false));
        ContainerEdits {
            device_nodes: self.nodes,
            hooks,
            mounts,
            ..Default::default()
        }
    }
}

/// Whether mount `dir` (a directory) already shows what `m` mounts: `m` lies below it in the
/// container and comes from the same place below it on the host.
fn covers(dir: &Mount, m: &Mount) -> bool {
    let below = |outer: &str, inner: &str| {
        inner
            .strip_prefix(outer)
            .filter(|rest| rest.starts_with('/'))
            .map(str::to_string)
    };
    match (
        below(&dir.container_path, &m.container_path),
        below(&dir.host_path, &m.host_path),
    ) {
        (Some(c), Some(h)) => c == h,
        _ => false,
    }
}

/// Whether `path` names a shared library (`lib?*.so*` with nothing but version numbers after
/// `.so`), the files whose directories `update-ldcache` needs — nvidia-container-toolkit's
/// `internal/discover/ldconfig.go` rule; firmware, programs and JSON files are not.
pub fn is_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some(rest) = name.strip_prefix("lib") else {
        return false;
    };
    let Some(pos) = rest.find(".so") else {
        return false;
    };
    if pos == 0 {
        return false;
    }
    let after = &rest[pos..];
    let tail = after.rsplit(".so").next().unwrap_or("");
    tail.is_empty() || tail.starts_with('.')
}

pub fn parent(path: &str) -> String {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/".into(),
        Some((dir, _)) => dir.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, HostRoot) {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        (dir, root)
    }

    fn write(dir: &tempfile::TempDir, path: &str) {
        let p = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }

    fn link(dir: &tempfile::TempDir, at: &str, target: &str) {
        let p = dir.path().join(at.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    #[test]
    fn library_names() {
        for lib in [
            "/usr/lib/libcuda.so",
            "/usr/lib/libcuda.so.1.1",
            "libnvidia-ml.so.550.54.15",
            "/x/libgstnvvidconv.so",
        ] {
            assert!(is_library(lib), "{lib}");
        }
        for other in [
            "/usr/sbin/nvidia-smi",
            "/lib/firmware/tegra19x/nvhost_nvdec040_ns.fw",
            "/usr/lib/aarch64-linux-gnu/nvidia/nvidia_icd.json",
            "/usr/lib/aarch64-linux-gnu/nvidia/ld.so.conf",
            "/usr/lib/aarch64-linux-gnu/nvidia/weston/desktop-shell.so",
            "/usr/lib/lib.so",
            "/usr/lib/libfoo.sox",
        ] {
            assert!(!is_library(other), "{other}");
        }
    }

    #[test]
    fn paths_through_linked_directories_are_mounted_where_they_are() {
        // JetPack 6: tegra -> nvidia; libcuda.so -> tegra/libcuda.so -> libcuda.so.1.1.
        let (dir, root) = tree();
        let lib = "/usr/lib/aarch64-linux-gnu";
        write(&dir, &format!("{lib}/nvidia/libcuda.so.1.1"));
        write(&dir, &format!("{lib}/nvidia/libnvv4l2.so"));
        link(&dir, &format!("{lib}/tegra"), "nvidia");
        link(&dir, &format!("{lib}/nvidia/libcuda.so"), "libcuda.so.1.1");
        link(&dir, &format!("{lib}/libcuda.so"), "tegra/libcuda.so");
        let mut b = EditsBuilder::default();
        let mut skipped = Vec::new();
        b.add_path(&root, &format!("{lib}/tegra/libnvv4l2.so"), &mut skipped);
        b.add_path(&root, &format!("{lib}/libcuda.so"), &mut skipped);
        b.add_path(&root, &format!("{lib}/libcuda.so"), &mut skipped);
        b.add_path(&root, &format!("{lib}/tegra/missing.so"), &mut skipped);
        assert_eq!(
            skipped,
            vec![format!(
                "{lib}/tegra/missing.so (dangling symlink to {lib}/nvidia/missing.so)"
            )]
        );
        let edits = b.finish(Some(&("/usr/bin/nvidia-cdi-hook", &["nvidia-cdi-hook"])));
        let mounts: Vec<&str> = edits
            .mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            vec![
                format!("{lib}/nvidia/libnvv4l2.so"),
                format!("{lib}/nvidia/libcuda.so.1.1")
            ]
        );
        assert_eq!(
            edits.hooks[0].args,
            vec![
                "nvidia-cdi-hook".to_string(),
                "create-symlinks".into(),
                "--link".into(),
                format!("tegra/libcuda.so::{lib}/libcuda.so"),
                "--link".into(),
                format!("libcuda.so.1.1::{lib}/nvidia/libcuda.so"),
            ]
        );
        assert_eq!(
            edits.hooks[1].args,
            vec![
                "nvidia-cdi-hook".to_string(),
                "update-ldcache".into(),
                "--folder".into(),
                format!("{lib}/nvidia"),
            ]
        );
    }

    #[test]
    fn nested_mounts_under_a_mounted_directory_are_dropped() {
        let (dir, root) = tree();
        write(&dir, "/lib/firmware/tegra19x/nvhost_nvdec040_ns.fw");
        write(&dir, "/usr/lib/nvidia/libcuda.so.1.1");
        link(&dir, "/usr/lib/tegra", "nvidia");
        let mut b = EditsBuilder::default();
        let mut skipped = Vec::new();
        for p in [
            "/lib/firmware/tegra19x",
            "/lib/firmware/tegra19x/nvhost_nvdec040_ns.fw",
            "/usr/lib/tegra",
            "/usr/lib/tegra/libcuda.so.1.1",
        ] {
            b.add_path(&root, p, &mut skipped);
        }
        assert!(skipped.is_empty(), "{skipped:?}");
        // No hook program: the `tegra` link becomes a bind mount of the directory, which
        // covers the library below it too.
        let edits = b.finish(None);
        let mounts: Vec<(&str, &str)> = edits
            .mounts
            .iter()
            .map(|m| (m.host_path.as_str(), m.container_path.as_str()))
            .collect();
        assert_eq!(
            mounts,
            vec![
                ("/lib/firmware/tegra19x", "/lib/firmware/tegra19x"),
                ("/usr/lib/nvidia", "/usr/lib/nvidia"),
                ("/usr/lib/nvidia", "/usr/lib/tegra"),
            ]
        );
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let (dir, root) = tree();
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        // An image's absolute link: inside the root it means <root>/run.
        link(&dir, "/var/run", "/run");
        link(&dir, "/run/link", "../lib/x");
        write(&dir, "/lib/x");
        link(&dir, "/run/loop", "loop");
        let mut b = EditsBuilder::default();
        let mut skipped = Vec::new();
        b.add_path(&root, "/var/run/link", &mut skipped);
        b.add_path(&root, "/run/loop", &mut skipped);
        assert_eq!(skipped, vec!["/run/loop (symlink loop)".to_string()]);
        let edits = b.finish(Some(&("/usr/bin/nvidia-ctk", &["nvidia-ctk", "hook"])));
        assert_eq!(edits.mounts[0].container_path, "/lib/x");
        assert_eq!(edits.hooks[0].args[4], "../lib/x::/run/link");
    }
}
