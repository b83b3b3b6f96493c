//! What the doctor finds: the links of the chain, a finding's verdict and evidence, the whole
//! report and its exit code; and the facts one link learns for the next ones.

use std::time::Duration;

use serde::Serialize;

use edgegpu_host::tegra::TegraDetection;

/// One link of the chain, in the order a GPU pod depends on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Link {
    /// The board or GPU, and the L4T or driver release (known to edgegpu's table?).
    Platform,
    /// The GPU's device nodes.
    DeviceNodes,
    /// The container runtime configuration the engines will load.
    Runtime,
    /// CDI specs on disk against the driver's files now.
    CdiSpec,
    /// The device plugin or DRA driver, registered with the kubelet.
    Kubelet,
    /// The MPS control daemons, where sharing uses MPS.
    Mps,
    /// The Node's labels against the facts (`--cluster`).
    Labels,
    /// The Jetson power mode.
    Power,
}

impl Link {
    pub const ALL: [Link; 8] = [
        Link::Platform,
        Link::DeviceNodes,
        Link::Runtime,
        Link::CdiSpec,
        Link::Kubelet,
        Link::Mps,
        Link::Labels,
        Link::Power,
    ];

    /// The link's name in text, JSON, metrics and labels.
    pub fn id(self) -> &'static str {
        match self {
            Link::Platform => "platform",
            Link::DeviceNodes => "device-nodes",
            Link::Runtime => "runtime",
            Link::CdiSpec => "cdi-spec",
            Link::Kubelet => "kubelet",
            Link::Mps => "mps",
            Link::Labels => "labels",
            Link::Power => "power",
        }
    }
}

/// A finding's verdict, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    /// Not used on this node, or not asked for (`--cluster`): nothing to check.
    Skipped,
    /// Works now, but something is off (a release edgegpu does not know, a mode change
    /// waiting for a reboot).
    Warning,
    /// Could not be checked: a file could not be read (not root?).
    Unknown,
    /// A GPU pod fails because of this link.
    Broken,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Skipped => "skipped",
            Verdict::Warning => "warning",
            Verdict::Unknown => "unknown",
            Verdict::Broken => "broken",
        }
    }
}

/// What one check found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub link: Link,
    pub verdict: Verdict,
    /// One line: what was found.
    pub summary: String,
    /// More lines: what was looked at, the evidence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// Host files and commands the finding comes from.
    pub sources: Vec<String>,
    /// The one command (or step) that fixes it; `None` when nothing needs fixing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn new(link: Link, verdict: Verdict, summary: impl Into<String>) -> Finding {
        Finding {
            link,
            verdict,
            summary: summary.into(),
            details: Vec::new(),
            sources: Vec::new(),
            fix: None,
        }
    }

    pub fn source(mut self, source: impl Into<String>) -> Finding {
        self.sources.push(source.into());
        self
    }

    pub fn sources<S: Into<String>>(mut self, sources: impl IntoIterator<Item = S>) -> Finding {
        self.sources.extend(sources.into_iter().map(Into::into));
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Finding {
        self.details.push(detail.into());
        self
    }

    pub fn details<S: Into<String>>(mut self, details: impl IntoIterator<Item = S>) -> Finding {
        self.details.extend(details.into_iter().map(Into::into));
        self
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

/// Exit codes of `doctor` (docs/troubleshooting.md): a link is broken (1), or nothing is
/// broken but a link could not be checked (3: run it as root). Warnings leave it at 0.
pub mod exit {
    pub const HEALTHY: u8 = 0;
    pub const BROKEN: u8 = 1;
    pub const CANNOT_TELL: u8 = 3;
}

/// Every finding, in the chain's order, and what it took.
#[derive(Debug, Clone)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub elapsed: Duration,
    /// Host files read on the way (for the bundle), each once.
    pub files_read: Vec<String>,
}

impl Report {
    /// The worst verdict of all (a skipped link counts as ok: nothing there to fail).
    pub fn worst(&self) -> Verdict {
        self.findings
            .iter()
            .map(|f| match f.verdict {
                Verdict::Skipped => Verdict::Ok,
                v => v,
            })
            .max()
            .unwrap_or(Verdict::Ok)
    }

    /// The first broken link in the chain: where to start.
    pub fn first_broken(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.verdict == Verdict::Broken)
    }

    pub fn exit_code(&self) -> u8 {
        match self.worst() {
            Verdict::Broken => exit::BROKEN,
            Verdict::Unknown => exit::CANNOT_TELL,
            _ => exit::HEALTHY,
        }
    }
}

/// What the board check learnt that later links need.
#[derive(Debug, Clone)]
pub struct Facts {
    pub tegra: TegraDetection,
    /// `/proc/driver/nvidia/version`'s driver version, where a driver is loaded.
    pub driver_version: Option<String>,
    /// Whether the runtime link found the node configured in CDI mode.
    pub cdi_mode: bool,
    /// The CDI spec the generator makes for this host now (the device nodes and the specs on
    /// disk are judged against it), or why it cannot; made once per run.
    pub spec_now: Result<edgegpu_host::cdi::Generated, String>,
}
