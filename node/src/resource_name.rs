//! Extended resource names (`nvidia.com/gpu`): the one check the config file and the MPS
//! companion both apply. The companion uses the name as a folder beneath its MPS root, so
//! the check is what keeps `../x` or `/etc` from ever becoming a path there.

/// Longest fully qualified resource name (NVIDIA's `MaxResourceNameLength`).
pub const MAX_LEN: usize = 63;

/// Why a resource name is refused, in words a config error can carry.
pub fn check(full: &str) -> Result<(), String> {
    if full.len() > MAX_LEN {
        return Err(format!(
            "fully-qualified resource name must be {MAX_LEN} characters or less: {full}"
        ));
    }
    let Some((prefix, name)) = full.split_once('/') else {
        return Err(format!(
            "incorrect format for resource name '{full}': it needs a domain prefix (nvidia.com/…)"
        ));
    };
    if !is_dns_subdomain(prefix) {
        return Err(format!(
            "incorrect format for resource name '{full}': the prefix must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)"
        ));
    }
    if !is_dns_subdomain(name) {
        return Err(format!(
            "incorrect format for resource name '{full}': the part after the prefix must be lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// RFC 1123 subdomain, as Kubernetes' `NameIsDNSSubdomain` checks it.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table the API client's node-name check passes too.
    #[test]
    fn dns_subdomains() {
        for (name, valid) in edgegpu_testkit::names::DNS_SUBDOMAIN_CASES {
            assert_eq!(is_dns_subdomain(name), *valid, "{name:?}");
        }
        let (longest, too_long) = edgegpu_testkit::names::longest_and_too_long();
        assert!(is_dns_subdomain(&longest));
        assert!(!is_dns_subdomain(&too_long));
    }

    #[test]
    fn whole_names() {
        for good in [
            "nvidia.com/gpu",
            "nvidia.com/gpu-mem",
            "example.org/mig-1g.5gb",
        ] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        // What would be a path outside the MPS root, or a second folder level.
        for bad in [
            "../gpu",
            "/gpu",
            "nvidia.com/../x",
            "nvidia.com/a/b",
            "nvidia.com/..",
            "..",
            "gpu",
            "nvidia.com/",
            "Nvidia.com/gpu",
            "nvidia.com/gpu\nx",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        assert!(check(&format!("nvidia.com/{}", "a".repeat(60)))
            .unwrap_err()
            .contains("63 characters or less"));
    }
}
