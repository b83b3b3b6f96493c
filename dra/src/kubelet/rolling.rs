//! Rolling updates of the driver's DaemonSet (`maxSurge: 1`, `maxUnavailable: 0`): the new pod
//! starts while the old one still serves, so each pod needs sockets of its own. As the
//! kubeletplugin helper's `RollingUpdate(podUID)` option does (k8s.io/dynamic-resource-allocation
//! v0.36.0 `kubeletplugin/draplugin.go` Start), the pod's UID goes into both names:
//! `<driver>-<uid>-reg.sock` in the plugin watcher's directory and `dra-<uid>.sock` in the
//! driver's directory. The kubelet (1.33+, `pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go`)
//! keeps every registered plugin of a driver, calls the newest one (since 1.34 the newest
//! connected one), and falls back to the others when one's registration socket goes away.
//! What the two pods share, the checkpoint and the CDI specs, is kept consistent by
//! [`crate::serialize`].

use std::fmt;

/// A value of `--rolling-update-pod-uid` that cannot name a socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod UID {uid:?} cannot name a socket: it must be 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (a Kubernetes pod UID, metadata.uid, is such a UUID)")]
pub struct InvalidPodUid {
    pub uid: String,
}

/// The UID of the pod this driver instance runs in: an RFC 1123 label (a Kubernetes pod UID
/// is a lowercase UUID), so it never puts a `/` or `..` into a socket's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodUid(String);

impl PodUid {
    /// Checks `uid` ([`InvalidPodUid`] names what is wrong).
    pub fn parse(uid: &str) -> Result<PodUid, InvalidPodUid> {
        let bytes = uid.as_bytes();
        let label = (1..=63).contains(&bytes.len())
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            && bytes.first() != Some(&b'-')
            && bytes.last() != Some(&b'-');
        if label {
            Ok(PodUid(uid.to_string()))
        } else {
            Err(InvalidPodUid {
                uid: uid.to_string(),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_uids_name_sockets_only_when_they_are_labels() {
        let uid = "3f9b8c1e-7d2a-4b6e-9c0d-5e4f3a2b1c0d";
        assert_eq!(PodUid::parse(uid).unwrap().as_str(), uid);
        assert!(PodUid::parse("a").is_ok());
        for bad in [
            "",
            "-a",
            "a-",
            "3F9B8C1E-7D2A-4B6E-9C0D-5E4F3A2B1C0D",
            "../x",
            "a/b",
            "a.b",
            "a b",
            &"a".repeat(64),
        ] {
            let e = PodUid::parse(bad).unwrap_err();
            assert_eq!(e.uid, bad);
            assert!(e.to_string().contains("cannot name a socket"), "{e}");
        }
    }
}
