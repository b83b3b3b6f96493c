//! k3s's config files (`config.yaml` and its `config.yaml.d/*.yaml` drop-ins): a YAML
//! mapping of long flag names (without `--`) to a scalar or a list. A key ending in `+`
//! appends to the value of earlier files (k3s pkg/configfilearg/parser.go). Read with a
//! real YAML parser (yaml-rust2) so quoting, flow lists and comments are understood, and
//! each key keeps its line for messages.

use std::path::Path;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

use crate::error::{Result, SetupError};

/// One top-level key of a k3s config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The flag name, without a trailing `+`.
    pub key: String,
    /// `key+:` appends to earlier values instead of replacing them.
    pub append: bool,
    /// The scalar, or the items of a list.
    pub values: Vec<String>,
    /// 1-based line of the key.
    pub line: usize,
}

/// Collects the top-level mapping's keys and their scalar or list values.
#[derive(Default)]
struct Collector {
    depth: usize,
    /// Key waiting for its value (at depth 1).
    key: Option<(String, usize)>,
    /// Value being collected when it is a list.
    list: Option<Vec<String>>,
    entries: Vec<Entry>,
    /// Line of the first thing that is not a k3s setting (a nested mapping, an alias).
    unsupported: Option<(usize, &'static str)>,
}

impl Collector {
    fn push(&mut self, values: Vec<String>) {
        if let Some((key, line)) = self.key.take() {
            let (key, append) = match key.strip_suffix('+') {
                Some(k) => (k.to_string(), true),
                None => (key, false),
            };
            self.entries.push(Entry {
                key,
                append,
                values,
                line,
            });
        }
    }
}

impl MarkedEventReceiver for Collector {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::Scalar(..) | Event::SequenceStart(..) if self.depth == 0 => {
                self.unsupported
                    .get_or_insert((line, "a document that is not a mapping"));
            }
            Event::MappingStart(..) => {
                self.depth += 1;
                if self.depth > 1 {
                    self.unsupported.get_or_insert((line, "a nested mapping"));
                }
            }
            Event::MappingEnd => {
                if self.depth == 2 {
                    self.key = None;
                }
                self.depth = self.depth.saturating_sub(1);
            }
            Event::SequenceStart(..) if self.depth == 1 && self.list.is_none() => {
                self.list = Some(Vec::new());
            }
            Event::SequenceStart(..) => {
                self.unsupported.get_or_insert((line, "a nested list"));
            }
            Event::SequenceEnd => {
                if let Some(items) = self.list.take() {
                    self.push(items);
                }
            }
            Event::Scalar(text, ..) if self.depth == 1 => {
                if let Some(items) = &mut self.list {
                    items.push(text);
                } else if self.key.is_none() {
                    self.key = Some((text, line));
                } else {
                    self.push(vec![text]);
                }
            }
            Event::Alias(_) => {
                self.unsupported.get_or_insert((line, "an alias"));
            }
            _ => {}
        }
    }
}

/// Parses one k3s config file. An empty file has no entries; anything but a mapping at
/// the top is refused with its line.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Entry>> {
    let mut collector = Collector::default();
    let mut parser = Parser::new_from_str(text);
    parser
        .load(&mut collector, false)
        .map_err(|e| SetupError::Malformed {
            file: file.to_path_buf(),
            line: e.marker().line(),
            column: e.marker().col() + 1,
            message: format!("invalid YAML: {}", e.info()),
        })?;
    if let Some((line, what)) = collector.unsupported {
        return Err(SetupError::Malformed {
            file: file.to_path_buf(),
            line,
            column: 1,
            message: format!(
                "{what}: a k3s config file maps flag names to strings or lists of strings"
            ),
        });
    }
    Ok(collector.entries)
}

/// Content of a drop-in of ours that sets one `key: value`, with a comment saying why.
pub fn drop_in(why: &str, key: &str, value: &str) -> String {
    format!(
        "# Written by edgegpu-node-setup: {why}.\n# Undo with `edgegpu-node-setup revert`.\n{key}: {value}\n"
    )
}
