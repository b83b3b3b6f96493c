//! The CDI spec of one prepared claim: kind `edgegpu.io/claim`, one device
//! `<claimUID>-<deviceName>` per prepared device, in the file
//! `<cdi dir>/edgegpu.io-claim_<claimUID>.json`. The claim UID in the names keeps a runtime's
//! CDI cache from ever resolving a reused name to an old claim's edits (the contract of
//! `k8s.io/dynamic-resource-allocation/kubeletplugin`'s DRAPlugin docs; NVIDIA's DRA driver
//! does the same with `k8s.gpu.nvidia.com/claim=<claimUID>-<device>`).
//!
//! A device's edits are those `edgegpu-node-setup cdi generate` gives the same device
//! (its device nodes), plus the claim's environment (sharing, engine selection); the edits
//! every device of the node needs (driver libraries, control nodes, hooks: `cdi generate`'s
//! spec-wide edits) are the claim spec's own, so they apply once whatever the devices.
//! Written atomically (temporary file in the same directory, fsync, rename, fsync of the
//! directory: node-setup's `fsops::atomic_write`; the temporary name ends in the writer's
//! pid, which the CDI library's `*.json`/`*.yaml` scan never loads).

use std::path::{Path, PathBuf};

use edgegpu_host::cdi::spec::{minimum_version, ContainerEdits, Device, Mount, Spec};

/// The CDI kind (vendor/class) of claim devices.
pub const KIND: &str = "edgegpu.io/claim";

/// Checks that `uid` is a claim UID as Kubernetes generates them, a UUID
/// (`8-4-4-4-12` hexadecimal digits, either case), before it names a file (the claim's spec
/// here, the checkpoint's entry and the spec it records): a UID with `/`, `..` or anything
/// else never reaches a path. The kubelet sends whatever the claim's `metadata.uid` holds.
pub fn check_uid(uid: &str) -> Result<(), String> {
    let groups: Vec<&str> = uid.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lengths == [8, 4, 4, 4, 12]
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        Ok(())
    } else {
        Err(format!(
            "claim UID {uid:?} is not a UUID (8-4-4-4-12 hexadecimal digits, as Kubernetes generates): refused, nothing written"
        ))
    }
}

/// The spec file of claim `uid` under `cdi_dir` (`uid` checked by [`check_uid`]).
pub fn spec_path(cdi_dir: &Path, uid: &str) -> PathBuf {
    cdi_dir.join(format!("edgegpu.io-claim_{uid}.json"))
}

/// The CDI device name of `device` in claim `uid`.
pub fn device_name(uid: &str, device: &str) -> String {
    format!("{uid}-{device}")
}

/// The fully qualified CDI ID the runtime resolves: `edgegpu.io/claim=<uid>-<device>`.
pub fn qualified(uid: &str, device: &str) -> String {
    format!("{KIND}={}", device_name(uid, device))
}

/// One device of a claim spec.
#[derive(Debug, Clone)]
pub struct ClaimDevice {
    /// The DRA device name.
    pub device: String,
    /// Its own edits (device nodes).
    pub edits: ContainerEdits,
    /// `KEY=VALUE` environment the claim adds for it.
    pub env: Vec<String>,
    /// Mounts the claim adds for it (MPS).
    pub mounts: Vec<Mount>,
}

/// The claim's spec: `common` spec-wide, one device per entry of `devices`.
pub fn claim_spec(uid: &str, common: &ContainerEdits, devices: &[ClaimDevice]) -> Spec {
    let devices = devices
        .iter()
        .map(|d| {
            let mut edits = d.edits.clone();
            for e in &d.env {
                if !edits.env.contains(e) {
                    edits.env.push(e.clone());
                }
            }
            for m in &d.mounts {
                if !edits.mounts.contains(m) {
                    edits.mounts.push(m.clone());
                }
            }
            Device {
                name: device_name(uid, &d.device),
                container_edits: edits,
            }
        })
        .collect();
    let mut spec = Spec {
        cdi_version: String::new(),
        kind: KIND.to_string(),
        devices,
        container_edits: common.clone(),
    };
    spec.cdi_version = minimum_version(&spec).to_string();
    spec
}

/// Writes `spec` for claim `uid` atomically; returns the file.
pub fn write(cdi_dir: &Path, uid: &str, spec: &Spec) -> Result<PathBuf, String> {
    check_uid(uid)?;
    spec.validate()
        .map_err(|e| format!("the CDI spec of claim {uid} is invalid: {e}"))?;
    std::fs::create_dir_all(cdi_dir)
        .map_err(|e| format!("cannot create {}: {e}", cdi_dir.display()))?;
    let path = spec_path(cdi_dir, uid);
    let mut text = serde_json::to_vec_pretty(spec).expect("a spec serialises");
    text.push(b'\n');
    edgegpu_host::fsops::atomic_write(&path, &text, 0o644)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The claim UIDs of the claim specs in `cdi_dir` (`edgegpu.io-claim_<uid>.json`), and the
/// temporary files an interrupted write left there; a missing directory has none.
pub fn claim_files(cdi_dir: &Path) -> (Vec<(String, PathBuf)>, Vec<PathBuf>) {
    let mut specs = Vec::new();
    let mut temps = Vec::new();
    let Ok(entries) = std::fs::read_dir(cdi_dir) else {
        return (specs, temps);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(uid) = name
            .strip_prefix("edgegpu.io-claim_")
            .and_then(|n| n.strip_suffix(".json"))
        {
            specs.push((uid.to_string(), e.path()));
        } else if name.starts_with(".edgegpu.io-claim_") && name.contains(".edgegpu-tmp.") {
            temps.push(e.path());
        }
    }
    specs.sort();
    temps.sort();
    (specs, temps)
}

/// Removes the spec file a checkpoint entry of claim `uid` names, after checking that it is
/// one (`edgegpu.io-claim_<uid>.json`): a damaged or edited checkpoint never makes the driver
/// delete another file.
pub fn remove_claim_spec(path: &Path, uid: &str) -> Result<(), String> {
    let expected = format!("edgegpu.io-claim_{uid}.json");
    if path.file_name().and_then(|n| n.to_str()) != Some(expected.as_str()) {
        return Err(format!(
            "the checkpoint names {} as claim {uid}'s CDI spec, which is not {expected}: not removed",
            path.display()
        ));
    }
    remove(path)
}

/// Removes claim `uid`'s spec; a missing file is fine.
pub fn remove(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegpu_host::cdi::spec::DeviceNode;

    #[test]
    fn names_and_files() {
        let uid = "0b1c2d3e-aaaa-bbbb-cccc-1234567890ab";
        assert_eq!(
            qualified(uid, "gpu-0"),
            "edgegpu.io/claim=0b1c2d3e-aaaa-bbbb-cccc-1234567890ab-gpu-0"
        );
        let dir = tempfile::tempdir().unwrap();
        let spec = claim_spec(
            uid,
            &ContainerEdits::default(),
            &[ClaimDevice {
                device: "gpu-0".into(),
                edits: ContainerEdits {
                    device_nodes: vec![DeviceNode {
                        path: "/dev/nvidia0".into(),
                    }],
                    ..Default::default()
                },
                env: vec!["A=1".into()],
                mounts: vec![],
            }],
        );
        // A device name starting with a digit needs CDI 0.5.0.
        assert_eq!(spec.cdi_version, "0.5.0");
        let path = write(dir.path(), uid, &spec).unwrap();
        assert_eq!(path, spec_path(dir.path(), uid));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["kind"], KIND);
        assert_eq!(v["devices"][0]["containerEdits"]["env"][0], "A=1");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        remove_claim_spec(&path, uid).unwrap();
        remove_claim_spec(&path, uid).unwrap();
        let e = remove_claim_spec(Path::new("/etc/passwd"), uid).unwrap_err();
        assert!(e.contains("not removed"), "{e}");
        assert!(!path.exists());
    }

    #[test]
    fn only_uuids_name_files() {
        for good in [
            "0b1c2d3e-aaaa-bbbb-cccc-1234567890ab",
            "7C9E6679-7425-40DE-944B-E07FC1F90AE7",
        ] {
            check_uid(good).unwrap();
        }
        for bad in [
            "",
            "../../etc/x",
            "a/b",
            "..",
            "not-a-uuid",
            "0b1c2d3e-aaaa-bbbb-cccc-1234567890a",
            "0b1c2d3e-aaaa-bbbb-cccc-1234567890abc",
            "0b1c2d3eaaaabbbbcccc1234567890ab",
            "0b1c2d3e-aaaa-bbbb-cccc-1234567890ag",
            "0b1c2d3e-aaaa-bbbb-cccc-12345678/0ab",
            "+b1c2d3e-aaaa-bbbb-cccc-1234567890ab",
            "0b1c2d3e-aaaa-bbbb-cccc-1234567890ab\n",
        ] {
            let e = check_uid(bad).unwrap_err();
            assert!(e.contains("is not a UUID"), "{bad}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let cdi = dir.path().join("cdi");
        let spec = claim_spec(
            "a/b",
            &ContainerEdits::default(),
            &[ClaimDevice {
                device: "gpu-0".into(),
                edits: ContainerEdits::default(),
                env: vec!["A=1".into()],
                mounts: vec![],
            }],
        );
        let e = write(&cdi, "../../etc/x", &spec).unwrap_err();
        assert!(e.contains("is not a UUID"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
