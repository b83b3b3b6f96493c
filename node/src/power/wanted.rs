//! Which power mode an operator wants on a node: the Node's own annotation, else the first
//! rule of the policy file (the chart's `powerPolicy.rules`) whose node selector the Node's
//! labels match, else none (the policy then leaves the board alone). docs/power.md, "Policy".

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::policy::{ModeRequest, PolicyError};

/// The Node annotation that names the wanted mode for one node (a mode's name or id).
pub const MODE_ANNOTATION: &str = "edgegpu.io/power-mode";
/// `"true"`: pin the clocks with jetson_clocks; `"false"`: restore the clocks the policy
/// pinned. Absent: leave them.
pub const CLOCKS_ANNOTATION: &str = "edgegpu.io/jetson-clocks";
/// `"true"`: for a change that needs a reboot, the reboot-required sentinel is left for the
/// operator's reboot tooling (the reboot happens outside edgegpu).
pub const ALLOW_REBOOT_ANNOTATION: &str = "edgegpu.io/power-mode-allow-reboot";

/// One rule of the policy file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// Labels a Node must all carry (empty: every node).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    pub mode: String,
    #[serde(default)]
    pub jetson_clocks: Option<bool>,
    #[serde(default)]
    pub allow_reboot: bool,
}

/// The policy file: `{"rules": [...]}` (JSON, as the chart renders it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// Why a policy file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("{file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: line {line}, column {column}: {message}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}: rule {index}: {source}")]
    Mode {
        file: String,
        index: usize,
        source: PolicyError,
    },
}

impl Rules {
    /// Reads and checks a policy file: every rule's mode must be a mode's name or id (whether
    /// the board has it is known only on the node).
    pub fn read(file: &Path) -> Result<Rules, RulesError> {
        let name = file.display().to_string();
        let text = std::fs::read_to_string(file).map_err(|source| RulesError::Read {
            file: name.clone(),
            source,
        })?;
        Rules::parse(&name, &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<Rules, RulesError> {
        let rules: Rules = serde_json::from_str(text).map_err(|e| RulesError::Syntax {
            file: file.to_string(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        for (index, rule) in rules.rules.iter().enumerate() {
            rule.mode
                .parse::<ModeRequest>()
                .map_err(|source| RulesError::Mode {
                    file: file.to_string(),
                    index,
                    source,
                })?;
        }
        Ok(rules)
    }
}

/// Where a wanted mode came from (said in every report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Annotation,
    /// The rule's position in the policy file.
    Rule(usize),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Annotation => write!(f, "the Node's annotation {MODE_ANNOTATION}"),
            Source::Rule(n) => write!(f, "power policy rule {n}"),
        }
    }
}

/// What the operator wants on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub mode: ModeRequest,
    pub jetson_clocks: Option<bool>,
    pub allow_reboot: bool,
    pub source: Source,
}

/// The Node's wanted mode: its annotation, else the first rule its labels match.
pub fn wanted(
    rules: &Rules,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Wanted>, PolicyError> {
    // `true` or `false` (any case); anything else is refused, never read as one of them.
    let flag = |key: &str| -> Result<Option<bool>, PolicyError> {
        match annotations.get(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(None),
            Some(v) if v == "true" => Ok(Some(true)),
            Some(v) if v == "false" => Ok(Some(false)),
            Some(_) => Err(PolicyError::NotABoolean {
                key: key.to_string(),
                value: annotations[key].clone(),
            }),
        }
    };
    if let Some(mode) = annotations.get(MODE_ANNOTATION) {
        return Ok(Some(Wanted {
            mode: mode.parse()?,
            jetson_clocks: flag(CLOCKS_ANNOTATION)?,
            allow_reboot: flag(ALLOW_REBOOT_ANNOTATION)?.unwrap_or(false),
            source: Source::Annotation,
        }));
    }
    let Some((index, rule)) = rules.rules.iter().enumerate().find(|(_, r)| {
        r.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }) else {
        return Ok(None);
    };
    Ok(Some(Wanted {
        mode: rule.mode.parse()?,
        jetson_clocks: rule.jetson_clocks,
        allow_reboot: rule.allow_reboot,
        source: Source::Rule(index),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const FILE: &str = r#"{"rules": [
        {"nodeSelector": {"fleet": "robots"}, "mode": "MAXN", "jetsonClocks": true},
        {"mode": "2", "allowReboot": true}
    ]}"#;

    #[test]
    fn the_annotation_then_the_first_matching_rule() {
        let rules = Rules::parse("policy.json", FILE).unwrap();
        let robot = map(&[("fleet", "robots")]);
        let w = wanted(&rules, &robot, &BTreeMap::new()).unwrap().unwrap();
        assert_eq!(
            (w.mode, w.jetson_clocks, w.allow_reboot, w.source),
            (
                ModeRequest::Name("MAXN".into()),
                Some(true),
                false,
                Source::Rule(0)
            )
        );
        let other = wanted(&rules, &map(&[("fleet", "cams")]), &BTreeMap::new())
            .unwrap()
            .unwrap();
        assert_eq!(
            (other.mode, other.allow_reboot, other.source.to_string()),
            (ModeRequest::Id(2), true, "power policy rule 1".to_string())
        );
        let one = map(&[(MODE_ANNOTATION, "MODE_15W"), (CLOCKS_ANNOTATION, "false")]);
        let w = wanted(&rules, &robot, &one).unwrap().unwrap();
        assert_eq!(
            (w.mode, w.jetson_clocks, w.source),
            (
                ModeRequest::Name("MODE_15W".into()),
                Some(false),
                Source::Annotation
            )
        );
        assert_eq!(
            wanted(&Rules::default(), &robot, &BTreeMap::new()).unwrap(),
            None
        );
        let yes = map(&[(MODE_ANNOTATION, "MAXN"), (CLOCKS_ANNOTATION, "yes")]);
        assert_eq!(
            wanted(&rules, &robot, &yes).unwrap_err().to_string(),
            "edgegpu.io/jetson-clocks: `yes` is neither true nor false"
        );
        let bad = map(&[(MODE_ANNOTATION, "MAXN please")]);
        assert!(matches!(
            wanted(&rules, &robot, &bad),
            Err(PolicyError::NotAMode(_))
        ));
    }

    #[test]
    fn a_bad_file_names_the_file_the_line_and_the_rule() {
        let err = Rules::parse("policy.json", "{\"rules\": [\n {\"mode\": \"MAXN\",}\n]}")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("policy.json: line 2, column "), "{err}");
        let err = Rules::parse("policy.json", r#"{"rules": [{"mode": "x y"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("policy.json: rule 0: `x y` is not a power mode"),
            "{err}"
        );
        let err = Rules::parse(
            "policy.json",
            r#"{"rules": [{"mode": "MAXN", "jetsonclocks": true}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `jetsonclocks`"), "{err}");
    }
}
