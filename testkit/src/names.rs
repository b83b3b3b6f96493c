//! Kubernetes names both sides of the workspace check: one table of DNS subdomains (RFC 1123,
//! Kubernetes' `NameIsDNSSubdomain`) that the node library's resource-name check and the API
//! client's node-name check must both agree with, so the two copies cannot drift.

/// `(name, is a DNS subdomain)`.
pub const DNS_SUBDOMAIN_CASES: &[(&str, bool)] = &[
    ("gpu", true),
    ("gpu.shared", true),
    ("mig-1g.5gb", true),
    ("orin-01", true),
    ("ip-10-0-0-1.ec2.internal", true),
    ("0", true),
    ("a-b.c-d", true),
    ("", false),
    ("$invalid$", false),
    ("Gpu", false),
    ("Node", false),
    ("-gpu", false),
    ("gpu-", false),
    ("a..b", false),
    (".", false),
    ("..", false),
    (".a", false),
    ("a.", false),
    ("a/b", false),
    ("a_b", false),
    ("a b", false),
    ("gpu\nx", false),
    ("ö", false),
];

/// The longest DNS subdomain (253 characters), and one character more.
pub fn longest_and_too_long() -> (String, String) {
    let label = "a".repeat(63);
    let longest = format!("{label}.{label}.{label}.{}", "a".repeat(61));
    assert_eq!(longest.len(), 253);
    let too_long = format!("{longest}a");
    (longest, too_long)
}
