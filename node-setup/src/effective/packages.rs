//! Which release of a program is installed, from the package manager's status file under
//! the root: dpkg's `/var/lib/dpkg/status` (Debian, Ubuntu, Yocto images built with deb
//! packages) and opkg's `status` (Yocto images built with ipk packages; `/var/lib/opkg`
//! or `/usr/lib/opkg`, OPKGLIBDIR). Both are paragraphs of `Field: value` lines with
//! `Package:`, `Status:` and `Version:` (deb-control(5)). Binaries themselves do not say
//! their version in a form one can read without running them, and an image's binaries
//! cannot be run at build time.

use edgegpu_host::error::Result;
use edgegpu_host::root::HostRoot;

const STATUS_FILES: [&str; 3] = [
    "/var/lib/dpkg/status",
    "/var/lib/opkg/status",
    "/usr/lib/opkg/status",
];

/// A release number `major.minor.patch` (missing parts are 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release(pub u32, pub u32, pub u32);

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// An installed package and its release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub package: String,
    /// The version as the status file writes it (`5:25.0.3-1~debian.12~bookworm`).
    pub version: String,
    pub release: Release,
    /// Host path of the status file.
    pub status_file: String,
}

impl Installed {
    /// `docker.io 20.10.24 (20.10.24+dfsg1-1+b3 in /var/lib/dpkg/status)`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} {} ({} in {})",
            self.package, self.release, self.version, self.status_file
        )
    }
}

/// The upstream release in a package version: the epoch (`5:`) dropped, then the
/// leading dotted numbers (`20.10.24+dfsg1-1` → 20.10.24).
pub fn release_of(version: &str) -> Option<Release> {
    let upstream = version.split_once(':').map_or(version, |(_, v)| v);
    let numbers: String = upstream
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = numbers.split('.').filter(|p| !p.is_empty());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    Some(Release(major, minor, patch))
}

/// The first of `packages` (in that order of preference) that a status file under the
/// root lists as installed. A status file that cannot be read as text counts as absent:
/// the release is then unknown, which callers handle.
pub fn installed(host: &HostRoot, packages: &[&str]) -> Result<Option<Installed>> {
    for status_file in STATUS_FILES {
        let Ok(Some(text)) = host.read(status_file) else {
            continue;
        };
        let mut found: Vec<Installed> = Vec::new();
        for paragraph in text.split("\n\n") {
            let field = |name: &str| {
                paragraph
                    .lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
            };
            let (Some(package), Some(version)) = (field("Package"), field("Version")) else {
                continue;
            };
            let installed = field("Status").is_some_and(|s| s.ends_with(" installed"));
            if !installed || !packages.contains(&package) {
                continue;
            }
            if let Some(release) = release_of(version) {
                found.push(Installed {
                    package: package.to_string(),
                    version: version.to_string(),
                    release,
                    status_file: status_file.to_string(),
                });
            }
        }
        let first = packages
            .iter()
            .find_map(|p| found.iter().find(|i| i.package == *p));
        if let Some(i) = first {
            return Ok(Some(i.clone()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_read_from_debian_and_yocto_versions() {
        assert_eq!(release_of("20.10.24+dfsg1-1+b3"), Some(Release(20, 10, 24)));
        assert_eq!(
            release_of("5:25.0.3-1~debian.12~bookworm"),
            Some(Release(25, 0, 3))
        );
        assert_eq!(release_of("1.6.20~ds1-1+deb12u3"), Some(Release(1, 6, 20)));
        assert_eq!(release_of("2.0.0+git0+abc-r0"), Some(Release(2, 0, 0)));
        assert_eq!(release_of("28.2"), Some(Release(28, 2, 0)));
        assert_eq!(release_of("git-r0"), None);
    }
}
