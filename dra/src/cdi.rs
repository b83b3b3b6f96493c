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

/// A claim UID that is not a UUID ([`check_uid`]): it never names a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("claim UID {uid:?} is not a UUID (8-4-4-4-12 hexadecimal digits, as Kubernetes generates): refused, nothing written")]
pub struct InvalidClaimUid {
    pub uid: String,
}

/// Why a claim's spec file could not be written or removed.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    #[error(transparent)]
    InvalidUid(#[from] InvalidClaimUid),
    /// The spec built for the claim fails the CDI rules (`reason`: the host library's check).
    #[error("the CDI spec of claim {uid} is invalid: {reason}")]
    InvalidSpec { uid: String, reason: String },
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint entry names a file that is not the claim's spec: never deleted.
    #[error("the checkpoint names {path} as claim {uid}'s CDI spec, which is not {expected}: not removed")]
    NotTheClaimSpec {
        path: PathBuf,
        uid: String,
        expected: String,
    },
    #[error("cannot remove {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Checks that `uid` is a claim UID as Kubernetes generates them, a UUID
/// (`8-4-4-4-12` hexadecimal digits, either case), before it names a file (the claim's spec
/// here, the checkpoint's entry and the spec it records): a UID with `/`, `..` or anything
/// else never reaches a path. The kubelet sends whatever the claim's `metadata.uid` holds.
pub fn check_uid(uid: &str) -> Result<(), InvalidClaimUid> {
    let groups: Vec<&str> = uid.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lengths == [8, 4, 4, 4, 12]
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        Ok(())
    } else {
        Err(InvalidClaimUid {
            uid: uid.to_string(),
        })
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
pub fn write(cdi_dir: &Path, uid: &str, spec: &Spec) -> Result<PathBuf, CdiError> {
    check_uid(uid)?;
    spec.validate().map_err(|reason| CdiError::InvalidSpec {
        uid: uid.to_string(),
        reason,
    })?;
    std::fs::create_dir_all(cdi_dir).map_err(|source| CdiError::CreateDir {
        path: cdi_dir.to_path_buf(),
        source,
    })?;
    let path = spec_path(cdi_dir, uid);
    let mut text = serde_json::to_vec_pretty(spec).expect("a spec serialises");
    text.push(b'\n');
    match edgegpu_host::fsops::atomic_write(&path, &text, 0o644) {
        Ok(()) => Ok(path),
        Err(source) => Err(CdiError::Write { path, source }),
    }
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
pub fn remove_claim_spec(path: &Path, uid: &str) -> Result<(), CdiError> {
    let expected = format!("edgegpu.io-claim_{uid}.json");
    if path.file_name().and_then(|n| n.to_str()) != Some(expected.as_str()) {
        return Err(CdiError::NotTheClaimSpec {
            path: path.to_path_buf(),
            uid: uid.to_string(),
            expected,
        });
    }
    remove(path)
}

/// Removes claim `uid`'s spec; a missing file is fine.
pub fn remove(path: &Path) -> Result<(), CdiError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CdiError::Remove {
            path: path.to_path_buf(),
            source,
        }),
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
        assert!(
            matches!(&e, CdiError::NotTheClaimSpec { path, .. } if path == Path::new("/etc/passwd")),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "the checkpoint names /etc/passwd as claim 0b1c2d3e-aaaa-bbbb-cccc-1234567890ab's CDI \
             spec, which is not edgegpu.io-claim_0b1c2d3e-aaaa-bbbb-cccc-1234567890ab.json: not removed"
        );
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
            assert_eq!(e.uid, bad);
            assert!(e.to_string().contains("is not a UUID"), "{bad}: {e}");
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
        assert!(
            matches!(&e, CdiError::InvalidUid(InvalidClaimUid { uid }) if uid == "../../etc/x"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "claim UID \"../../etc/x\" is not a UUID (8-4-4-4-12 hexadecimal digits, as Kubernetes \
             generates): refused, nothing written"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
