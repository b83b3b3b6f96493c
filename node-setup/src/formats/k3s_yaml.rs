//! k3s's config files (`config.yaml` and its `config.yaml.d/*.yaml` drop-ins): a YAML
//! mapping of long flag names (without `--`) to a scalar or a list. A key ending in `+`
//! appends to the value of earlier files (k3s pkg/configfilearg/parser.go). Read with a
//! real YAML parser (yaml-rust2) so quoting, flow lists and comments are understood, and
//! each key keeps its line for messages. k3s decodes with gopkg.in/yaml.v2 (YAML 1.1), so
//! an unquoted `yes`/`on`/`y` is the boolean true and reaches k3s's flag parser as
//! `true`: plain scalars get the same reading here.

use std::path::Path;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use edgegpu_host::error::{Result, SetupError};

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
    /// A value that is not a string or a list of strings (a nested mapping, an alias):
    /// its 1-based line and what it is. k3s ignores flags it does not know, so this only
    /// matters for a key that is read.
    pub unsupported: Option<(usize, &'static str)>,
}

/// The string yaml.v2 gives a plain (unquoted) scalar: its YAML 1.1 booleans become
/// `true` / `false` (gopkg.in/yaml.v2 resolve.go), anything else stays as written.
fn yaml_v2_plain(text: String) -> String {
    match text.as_str() {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            "true".into()
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            "false".into()
        }
        _ => text,
    }
}

/// Collects the top-level mapping's keys and their scalar or list values.
#[derive(Default)]
struct Collector {
    /// Open mappings and lists (the top-level mapping is 1).
    depth: usize,
    /// Key waiting for its value (at depth 1).
    key: Option<(String, usize)>,
    /// Value being collected when it is a list.
    list: Option<Vec<String>>,
    /// Inside a value that is not a string or list of strings: the depth where it
    /// started, its line and what it is.
    skipping: Option<(usize, usize, &'static str)>,
    entries: Vec<Entry>,
    /// Line of something that makes the file no k3s config at all (not a mapping).
    not_a_mapping: Option<(usize, &'static str)>,
}

impl Collector {
    fn push(&mut self, values: Vec<String>, unsupported: Option<(usize, &'static str)>) {
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
                unsupported,
            });
        }
    }

    /// A collection opens at `line`: a list value, or something node-setup skips.
    fn open(&mut self, line: usize, list: bool) {
        self.depth += 1;
        if self.skipping.is_some() || self.depth == 1 {
            return;
        }
        if list && self.depth == 2 && self.key.is_some() && self.list.is_none() {
            self.list = Some(Vec::new());
        } else {
            let what = if list {
                "a nested list"
            } else {
                "a nested mapping"
            };
            self.skipping = Some((self.depth, line, what));
        }
    }

    fn close(&mut self) {
        match self.skipping {
            Some((depth, line, what)) if depth == self.depth => {
                self.skipping = None;
                self.list = None;
                self.push(Vec::new(), Some((line, what)));
            }
            Some(_) => {}
            None if self.depth == 2 => {
                if let Some(items) = self.list.take() {
                    self.push(items, None);
                }
            }
            None => {}
        }
        self.depth = self.depth.saturating_sub(1);
    }
}

impl MarkedEventReceiver for Collector {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::Scalar(..) | Event::SequenceStart(..) | Event::Alias(_) if self.depth == 0 => {
                self.not_a_mapping
                    .get_or_insert((line, "a document that is not a mapping"));
            }
            Event::MappingStart(..) => self.open(line, false),
            Event::SequenceStart(..) => self.open(line, true),
            Event::MappingEnd | Event::SequenceEnd => self.close(),
            _ if self.skipping.is_some() => {}
            Event::Scalar(text, style, ..) => {
                let text = if style == TScalarStyle::Plain {
                    yaml_v2_plain(text)
                } else {
                    text
                };
                match (&mut self.list, self.depth) {
                    (Some(items), 2) => items.push(text),
                    (None, 1) if self.key.is_none() => self.key = Some((text, line)),
                    (None, 1) => self.push(vec![text], None),
                    _ => {}
                }
            }
            Event::Alias(_) if self.depth == 1 && self.key.is_some() => {
                self.push(Vec::new(), Some((line, "an alias")));
            }
            Event::Alias(_) if self.list.is_some() => {
                // The whole list is unusable: skip to its end.
                self.list = None;
                self.skipping = Some((self.depth, line, "an alias"));
            }
            Event::Alias(_) => {
                self.not_a_mapping
                    .get_or_insert((line, "an alias as a key"));
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
    if let Some((line, what)) = collector.not_a_mapping {
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
