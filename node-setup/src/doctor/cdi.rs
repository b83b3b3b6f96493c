//! Link 4: the CDI specs on disk against the driver files on the host now. After a JetPack,
//! L4T or driver upgrade a spec that was not regenerated names libraries that are gone
//! (the container fails to start: "no such file or directory"), or the libraries of the
//! old driver next to the new kernel module (CUDA fails: "driver/library version
//! mismatch"), or misses a GPU added since.
//!
//! Judged so that it holds for specs `nvidia-ctk` wrote as well as ours: every path a spec
//! names must exist, driver libraries must carry the loaded driver's version, and the GPU
//! spec must name the nodes of every device the generator finds now (the common nodes, where
//! generators differ, are not compared).

use std::collections::BTreeSet;

use edgegpu_host::cdi;
use edgegpu_host::root::HostRoot;
use edgegpu_platform::procfs::VERSION;
use serde_json::Value;

use crate::effective::cdi::DEFAULT_SPEC_DIRS;

use super::finding::{Facts, Finding, Link, Verdict};
use super::safe_read;

/// Specs of these kinds are the GPU's and its engines' (`nvidia.com/gpu`, `/dla`, `/pva`).
const KIND_PREFIX: &str = "nvidia.com/";

const FIX: &str = "sudo edgegpu-node-setup cdi generate (or, for a spec nvidia-ctk wrote: sudo nvidia-ctk cdi generate --output=<that file>)";

/// One spec file and the paths it names.
struct SpecFile {
    path: String,
    kind: String,
    /// Host paths it mounts or runs (mounts' hostPath, hooks' path).
    files: BTreeSet<String>,
    /// Device nodes (hostPath where given, else path).
    nodes: BTreeSet<String>,
}

/// Largest spec read (a MIG server's is a few hundred KiB).
const MAX_SPEC_BYTES: u64 = 8 << 20;

pub fn check(host: &HostRoot, facts: &Facts) -> Finding {
    let mut specs = Vec::new();
    // Files the runtimes skip, and why.
    let mut unparsable = Vec::new();
    let mut unreadable = Vec::new();
    for dir in DEFAULT_SPEC_DIRS {
        for f in host.list_dir(dir, "").unwrap_or_default() {
            if ![".yaml", ".yml", ".json"].iter().any(|e| f.ends_with(e)) || host.is_dir(&f) {
                continue;
            }
            // The DRA driver writes specs here too: read without following a link.
            let text = match safe_read::read_text(&safe_read::on_disk(host, &f), MAX_SPEC_BYTES) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    unreadable.push(f);
                    continue;
                }
                Err(e) => {
                    unparsable.push(format!("{f}: {e}"));
                    continue;
                }
            };
            host.note_read(&f);
            match parse(&f, &text) {
                Some(s) if s.kind.starts_with(KIND_PREFIX) => specs.push(s),
                Some(_) => {}
                None => unparsable.push(format!("{f}: not a CDI spec (the runtimes skip it)")),
            }
        }
    }
    if !unreadable.is_empty() && specs.is_empty() {
        return Finding::new(
            Link::CdiSpec,
            Verdict::Unknown,
            format!("cannot read {}", unreadable.join(", ")),
        )
        .sources(unreadable)
        .fix("run it as root: sudo edgegpu-node-setup doctor");
    }
    let sources: Vec<String> = DEFAULT_SPEC_DIRS.iter().map(|d| d.to_string()).collect();
    if specs.is_empty() {
        let f = Finding::new(
            Link::CdiSpec,
            if facts.cdi_mode {
                Verdict::Broken
            } else {
                Verdict::Skipped
            },
            if facts.cdi_mode {
                "the engines inject GPUs from CDI specs, but no spec describes them"
            } else {
                "no CDI spec of the GPU (needed only in CDI mode or with the device plugin's cdi-* strategies)"
            },
        )
        .sources(sources)
        .details(unparsable.iter().cloned());
        return if facts.cdi_mode {
            f.fix("sudo edgegpu-node-setup cdi generate")
        } else {
            f
        };
    }
    let mut broken = Vec::new();
    let mut details = Vec::new();
    if facts.cdi_mode && !specs.iter().any(|s| s.kind == cdi::spec::KIND) {
        broken.push(format!(
            "the engines inject GPUs from CDI specs, but none is of kind {}",
            cdi::spec::KIND
        ));
    }
    let now = facts.spec_now.as_ref().ok();
    for s in &specs {
        details.push(format!(
            "{}: kind {}, {} device node(s), {} file(s)",
            s.path,
            s.kind,
            s.nodes.len(),
            s.files.len()
        ));
        let gone: Vec<&String> = s
            .files
            .iter()
            .chain(&s.nodes)
            .filter(|p| !host.exists(p))
            .collect();
        if !gone.is_empty() {
            broken.push(format!(
                "{} names {} path(s) that are gone, e.g. {}: written before the driver or L4T changed",
                s.path,
                gone.len(),
                gone.iter().take(3).map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        if let Some(loaded) = &facts.driver_version {
            let old: BTreeSet<&str> = s
                .files
                .iter()
                .filter_map(|p| driver_library_version(p))
                .filter(|v| v != loaded)
                .collect();
            if !old.is_empty() {
                broken.push(format!(
                    "{} mounts the libraries of driver {}, but driver {loaded} is loaded ({VERSION})",
                    s.path,
                    old.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        if s.kind == cdi::spec::KIND {
            if let Some(g) = &now {
                // The devices' own nodes (a GPU's /dev/nvidia<N>, a MIG device's capability
                // nodes): generators differ in the common nodes, not in these.
                let expected: BTreeSet<&str> = g
                    .spec
                    .devices
                    .iter()
                    .flat_map(|d| &d.container_edits.device_nodes)
                    .map(|n| n.path.as_str())
                    .collect();
                let missing: Vec<&str> = expected
                    .into_iter()
                    .filter(|n| !s.nodes.contains(*n))
                    .collect();
                if !missing.is_empty() {
                    broken.push(format!(
                        "{} does not name {} that the host has now (a GPU or MIG device added since it was written?)",
                        s.path,
                        missing.join(", ")
                    ));
                }
            }
        }
    }
    details.extend(unparsable.iter().cloned());
    let paths: Vec<String> = specs.iter().map(|s| s.path.clone()).collect();
    if broken.is_empty() {
        Finding::new(
            Link::CdiSpec,
            Verdict::Ok,
            format!("{} CDI spec(s) match the host's driver files", specs.len()),
        )
        .sources(paths)
        .details(details)
    } else {
        Finding::new(
            Link::CdiSpec,
            Verdict::Broken,
            "a CDI spec is stale: it no longer matches the driver files on the host",
        )
        .sources(paths)
        .source(VERSION)
        .details(broken)
        .details(details)
        .fix(FIX)
    }
}

/// `…/libcuda.so.550.54.15` → `550.54.15`: the driver version in the name of one of the
/// libraries that must match the kernel module (a Jetson's `libcuda.so.1.1` has none).
fn driver_library_version(path: &str) -> Option<&str> {
    let name = path.rsplit('/').next()?;
    let version = [
        "libcuda.so.",
        "libnvidia-ml.so.",
        "libnvidia-ptxjitcompiler.so.",
    ]
    .iter()
    .find_map(|prefix| name.strip_prefix(prefix))?;
    // Driver versions are `<major ≥ 100>.<minor>[.<patch>]`; L4T's soname versions
    // (`libcuda.so.1.1`) are not.
    let major: u32 = version.split('.').next()?.parse().ok()?;
    (major >= 100
        && version.contains('.')
        && version.chars().all(|c| c.is_ascii_digit() || c == '.'))
    .then_some(version)
}

/// A spec's kind and the paths it names; `None` when it does not parse.
fn parse(path: &str, text: &str) -> Option<SpecFile> {
    let value: Value = if path.ends_with(".json") {
        serde_json::from_str(text).ok()?
    } else {
        yaml_to_json(yaml_rust2::YamlLoader::load_from_str(text).ok()?.first()?)
    };
    let mut spec = SpecFile {
        path: path.to_string(),
        kind: value["kind"].as_str()?.to_string(),
        files: BTreeSet::new(),
        nodes: BTreeSet::new(),
    };
    let edits = std::iter::once(&value["containerEdits"]).chain(
        value["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| &d["containerEdits"]),
    );
    for e in edits {
        for n in e["deviceNodes"].as_array().into_iter().flatten() {
            if let Some(p) = n["hostPath"].as_str().or_else(|| n["path"].as_str()) {
                spec.nodes.insert(p.to_string());
            }
        }
        for m in e["mounts"].as_array().into_iter().flatten() {
            if let Some(p) = m["hostPath"].as_str() {
                spec.files.insert(p.to_string());
            }
        }
        for h in e["hooks"].as_array().into_iter().flatten() {
            if let Some(p) = h["path"].as_str() {
                spec.files.insert(p.to_string());
            }
        }
    }
    Some(spec)
}

/// yaml-rust2's tree as JSON values (only strings, lists and maps matter here).
fn yaml_to_json(y: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match y {
        Yaml::String(s) | Yaml::Real(s) => Value::String(s.clone()),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(a) => Value::Array(a.iter().map(yaml_to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), yaml_to_json(v))))
                .collect(),
        ),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_versions_come_from_the_libraries_that_must_match_the_module() {
        assert_eq!(
            driver_library_version("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"),
            Some("550.54.15")
        );
        assert_eq!(
            driver_library_version("/usr/lib/libnvidia-ml.so.535.104.05"),
            Some("535.104.05")
        );
        assert_eq!(
            driver_library_version("/usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1.1"),
            None
        );
        assert_eq!(driver_library_version("/usr/lib/libcuda.so.1"), None);
        assert_eq!(driver_library_version("/usr/lib/libcudart.so.12.2.1"), None);
    }

    #[test]
    fn yaml_and_json_specs_name_the_same_paths() {
        let yaml = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\ncontainerEdits:\n  mounts:\n  - hostPath: /usr/lib/libcuda.so.550.54.15\n    containerPath: /usr/lib/libcuda.so.550.54.15\n  hooks:\n  - hookName: createContainer\n    path: /usr/bin/nvidia-cdi-hook\n";
        let json = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}],"containerEdits":{"mounts":[{"hostPath":"/usr/lib/libcuda.so.550.54.15","containerPath":"/x"}],"hooks":[{"hookName":"createContainer","path":"/usr/bin/nvidia-cdi-hook"}]}}"#;
        for (name, text) in [("a.yaml", yaml), ("a.json", json)] {
            let s = parse(name, text).unwrap();
            assert_eq!(s.kind, "nvidia.com/gpu");
            assert_eq!(s.nodes.iter().collect::<Vec<_>>(), ["/dev/nvidia0"]);
            assert_eq!(
                s.files.iter().collect::<Vec<_>>(),
                ["/usr/bin/nvidia-cdi-hook", "/usr/lib/libcuda.so.550.54.15"]
            );
        }
        assert!(parse("b.yaml", "kind: [unclosed").is_none());
    }
}
