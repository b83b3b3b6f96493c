//! A CRI plugin table as plain data: what containerd merges from the files it loads
//! (`imports`), and what a new runtime copies from the runtime pods use now. Tables keep
//! their keys in file order; every table and value carries where it comes from (`A`: a
//! 1-based line in one file, or a source once files are merged).

use toml_edit::{Item, Value};

use super::toml::span_line;

#[derive(Debug, Clone)]
pub enum Node<A> {
    Table {
        entries: Vec<(String, Node<A>)>,
        at: A,
    },
    Value {
        value: Value,
        at: A,
    },
}

impl<A: Clone> Node<A> {
    pub fn empty_table(at: A) -> Node<A> {
        Node::Table {
            entries: Vec::new(),
            at,
        }
    }

    pub fn at(&self) -> &A {
        match self {
            Node::Table { at, .. } | Node::Value { at, .. } => at,
        }
    }

    /// The entries of a table (none for a value).
    pub fn entries(&self) -> &[(String, Node<A>)] {
        match self {
            Node::Table { entries, .. } => entries,
            Node::Value { .. } => &[],
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node<A>> {
        self.entries()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn path(&self, keys: &[&str]) -> Option<&Node<A>> {
        keys.iter().try_fold(self, |n, k| n.get(k))
    }

    pub fn value(&self) -> Option<&Value> {
        match self {
            Node::Value { value, .. } => Some(value),
            Node::Table { .. } => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        self.value()?.as_str()
    }

    pub fn is_table(&self) -> bool {
        matches!(self, Node::Table { .. })
    }

    /// Sets `key` of a table to `node` (in place, or appended).
    pub fn insert(&mut self, key: &str, node: Node<A>) {
        if let Node::Table { entries, .. } = self {
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some((_, old)) => *old = node,
                None => entries.push((key.to_string(), node)),
            }
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node<A>> {
        match self {
            Node::Table { entries, .. } => {
                entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
            }
            Node::Value { .. } => None,
        }
    }

    /// The same tree with every `at` turned into `f(at)`.
    pub fn map_at<B: Clone>(&self, f: &impl Fn(&A) -> B) -> Node<B> {
        match self {
            Node::Table { entries, at } => Node::Table {
                entries: entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.map_at(f)))
                    .collect(),
                at: f(at),
            },
            Node::Value { value, at } => Node::Value {
                value: value.clone(),
                at: f(at),
            },
        }
    }

    /// Merges `src` into `self` the way containerd 2 merges the plugin tables of the
    /// files it imports (cmd/containerd/server/config/config.go mergeConfig: mergo with
    /// override): tables key by key, a value (arrays included) of the later file wins,
    /// whatever it is. A table keeps the place where it was last declared.
    pub fn merge_from(&mut self, src: &Node<A>) {
        match (self, src) {
            (
                Node::Table { entries, at },
                Node::Table {
                    entries: from,
                    at: src_at,
                },
            ) => {
                *at = src_at.clone();
                for (k, v) in from {
                    match entries.iter_mut().find(|(key, _)| key == k) {
                        Some((_, old)) if old.is_table() && v.is_table() => old.merge_from(v),
                        Some((_, old)) => *old = v.clone(),
                        None => entries.push((k.clone(), v.clone())),
                    }
                }
            }
            (dst, src) => *dst = src.clone(),
        }
    }
}

/// The tree under `item` (a parsed file), with 1-based lines of `text` (what was parsed).
pub(super) fn from_item(text: &str, item: &Item) -> Option<Node<usize>> {
    let line = |span| span_line(text, span);
    match item {
        Item::Value(Value::InlineTable(t)) => Some(Node::Table {
            entries: t
                .iter()
                .filter_map(|(k, v)| {
                    from_item(text, &Item::Value(v.clone())).map(|n| (k.to_string(), n))
                })
                .collect(),
            at: line(t.span()),
        }),
        Item::Value(v) => Some(Node::Value {
            value: v.clone(),
            at: line(v.span()),
        }),
        Item::Table(t) => {
            let entries: Vec<(String, Node<usize>)> = t
                .iter()
                .filter_map(|(k, v)| from_item(text, v).map(|n| (k.to_string(), n)))
                .collect();
            // A table declared only through its sub-tables has no span: its first child's.
            let at = t
                .span()
                .map(|s| line(Some(s)))
                .or_else(|| entries.iter().map(|(_, n)| *n.at()).find(|l| *l > 0))
                .unwrap_or(0);
            Some(Node::Table { entries, at })
        }
        Item::ArrayOfTables(_) | Item::None => None,
    }
}
