//! A YAML document as a small tree whose every node knows its line and column, built from
//! saphyr-parser's events (why that crate: the workspace `Cargo.toml`). The config file's
//! meaning is given by [`super::file`], which reads this tree the way NVIDIA's parser reads
//! its JSON; keeping the two apart keeps YAML syntax out of the config rules.
//!
//! Only the parser's event iterator is used (`Parser::load` asserts on malformed event
//! sequences, and a panic would abort the plugin); nesting is bounded, so hostile input can
//! neither exhaust the stack nor make the tree large through aliases.

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// Deeper than any config file needs; bounds recursion in the tree's users and its drop.
const MAX_DEPTH: usize = 64;
/// Nodes an alias may copy in all; stops "billion laughs" documents.
const MAX_ALIAS_NODES: usize = 10_000;

/// One node with its position (1-based line and column).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A scalar. `plain` is false for quoted and block scalars: `"true"` is a string and
    /// `true` a boolean, as in every YAML schema.
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    /// Entries in file order (duplicates kept: the reader decides).
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// A plain scalar that YAML resolves to null (`null`, `Null`, `NULL`, `~` or nothing).
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// What the node is, for error messages.
    pub fn kind(&self) -> &'static str {
        match &self.value {
            _ if self.is_null() => "null",
            Value::Scalar { .. } => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// A syntax error, with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// The first document of `text` (`None`: there is none, e.g. only comments), and whether
/// more documents follow (NVIDIA's parser, like every YAML-to-JSON reader, uses the first).
pub fn parse(text: &str) -> Result<(Option<Node>, bool), SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| SyntaxError {
            line: e.marker().line(),
            column: e.marker().col() + 1,
            message: e.info().to_string(),
        })?;
        if builder.event(event, span)? == Flow::Stop {
            break;
        }
    }
    Ok((builder.document, builder.more_documents))
}

#[derive(PartialEq)]
enum Flow {
    Continue,
    Stop,
}

/// A collection being built: its node (value filled in when it ends) and, for a mapping,
/// the key waiting for its value.
struct Open {
    node: Node,
    anchor: usize,
    pending_key: Option<Node>,
}

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    anchors: HashMap<usize, Node>,
    alias_nodes: usize,
    document: Option<Node>,
    in_document: bool,
    more_documents: bool,
}

fn at(span: Span) -> (usize, usize) {
    (span.start.line(), span.start.col() + 1)
}

fn error(span: Span, message: impl Into<String>) -> SyntaxError {
    let (line, column) = at(span);
    SyntaxError {
        line,
        column,
        message: message.into(),
    }
}

fn count_nodes(node: &Node) -> usize {
    1 + match &node.value {
        Value::Scalar { .. } => 0,
        Value::Seq(items) => items.iter().map(count_nodes).sum(),
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| count_nodes(k) + count_nodes(v))
            .sum(),
    }
}

impl Builder {
    fn event(&mut self, event: Event<'_>, span: Span) -> Result<Flow, SyntaxError> {
        let (line, column) = at(span);
        match event {
            Event::DocumentStart(_) => {
                if self.document.is_some() {
                    self.more_documents = true;
                    return Ok(Flow::Stop);
                }
                self.in_document = true;
            }
            Event::DocumentEnd => self.in_document = false,
            Event::Scalar(text, style, anchor, _tag) => {
                let node = Node {
                    value: Value::Scalar {
                        text: Cow::into_owned(text),
                        plain: style == ScalarStyle::Plain,
                    },
                    line,
                    column,
                };
                self.remember(anchor, &node);
                self.add(node, span)?;
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    return Err(error(
                        span,
                        format!("nested deeper than {MAX_DEPTH} levels"),
                    ));
                }
                let value = if matches!(event, Event::SequenceStart(..)) {
                    Value::Seq(Vec::new())
                } else {
                    Value::Map(Vec::new())
                };
                self.stack.push(Open {
                    node: Node {
                        value,
                        line,
                        column,
                    },
                    anchor,
                    pending_key: None,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(open) = self.stack.pop() else {
                    return Err(error(span, "end of a collection that was never opened"));
                };
                if open.pending_key.is_some() {
                    return Err(error(span, "mapping key without a value"));
                }
                self.remember(open.anchor, &open.node);
                self.add(open.node, span)?;
            }
            Event::Alias(anchor) => {
                let Some(node) = self.anchors.get(&anchor).cloned() else {
                    return Err(error(span, "alias to an unknown anchor"));
                };
                self.alias_nodes += count_nodes(&node);
                if self.alias_nodes > MAX_ALIAS_NODES {
                    return Err(error(
                        span,
                        format!("aliases expand to more than {MAX_ALIAS_NODES} nodes"),
                    ));
                }
                self.add(node, span)?;
            }
            Event::StreamStart | Event::StreamEnd | Event::Nothing => {}
        }
        Ok(Flow::Continue)
    }

    fn remember(&mut self, anchor: usize, node: &Node) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
    }

    /// Puts a finished node into its parent (or makes it the document).
    fn add(&mut self, node: Node, span: Span) -> Result<(), SyntaxError> {
        let Some(parent) = self.stack.last_mut() else {
            if !self.in_document || self.document.is_some() {
                return Err(error(span, "content outside a document"));
            }
            self.document = Some(node);
            return Ok(());
        };
        match &mut parent.node.value {
            Value::Seq(items) => items.push(node),
            Value::Map(entries) => match parent.pending_key.take() {
                None => parent.pending_key = Some(node),
                Some(key) => entries.push((key, node)),
            },
            Value::Scalar { .. } => return Err(error(span, "a scalar cannot hold children")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(text: &str, line: usize, column: usize) -> Node {
        Node {
            value: Value::Scalar {
                text: text.into(),
                plain: true,
            },
            line,
            column,
        }
    }

    #[test]
    fn nodes_carry_one_based_lines_and_columns() {
        let (doc, more) = parse("a: 1\nb:\n  - x\n  - 'y'\n").unwrap();
        assert!(!more);
        let doc = doc.unwrap();
        let Value::Map(entries) = &doc.value else {
            panic!("{doc:?}")
        };
        assert_eq!(entries[0], (scalar("a", 1, 1), scalar("1", 1, 4)));
        assert_eq!(entries[1].0, scalar("b", 2, 1));
        let Value::Seq(items) = &entries[1].1.value else {
            panic!()
        };
        assert_eq!(items[0], scalar("x", 3, 5));
        assert_eq!(
            items[1].value,
            Value::Scalar {
                text: "y".into(),
                plain: false
            }
        );
        assert_eq!((items[1].line, items[1].column), (4, 5));
    }

    #[test]
    fn empty_documents_nulls_and_more_documents() {
        assert_eq!(parse("").unwrap(), (None, false));
        assert_eq!(parse("# only a comment\n").unwrap(), (None, false));
        let (doc, more) = parse("a: ~\n---\nb: 2\n").unwrap();
        assert!(more);
        let Value::Map(entries) = doc.unwrap().value else {
            panic!()
        };
        assert!(entries[0].1.is_null());
    }

    #[test]
    fn aliases_are_resolved_and_bounded() {
        let (doc, _) = parse("a: &x {k: v}\nb: *x\n").unwrap();
        let Value::Map(entries) = doc.unwrap().value else {
            panic!()
        };
        assert_eq!(entries[0].1.value, entries[1].1.value);

        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let err = parse(&bomb).unwrap_err();
        assert!(err.message.contains("aliases expand"), "{err:?}");
    }

    #[test]
    fn syntax_errors_and_depth_have_positions() {
        let err = parse("a: 1\nb:\n\tc: 2\n").unwrap_err();
        assert_eq!(err.line, 3, "{err:?}");
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let err = parse(&deep).unwrap_err();
        assert!(err.message.contains("nested deeper"), "{err:?}");
    }
}
