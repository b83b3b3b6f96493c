//! Just enough of Go's text/template syntax to edit k3s's containerd templates safely:
//! where each action (`{{ ... }}`) is, and which lines lie inside a control structure
//! (`if`, `range`, `with`, `define`, `block` ... `end`), where an edit must never land.
//! Actions are delimited as in Go's text/template/parse lexer: `{{`, `}}`, trim markers
//! `{{- ` and ` -}}`, comments `{{/* */}}`, and quoted strings inside an action that may
//! contain `}}`.

/// What an action does to the structure of the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionKind {
    /// `if`, `range`, `with`, `define`, `block`: opens a structure closed by `end`.
    Open,
    /// `else` (also `else if ...`): stays at the same depth.
    Else,
    End,
    Comment,
    /// `template "name" ...`.
    Template(String),
    /// Anything that prints a value (`.Field`, `printf ...`, a variable).
    Output,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Byte range of `{{ ... }}` in the text.
    pub start: usize,
    pub end: usize,
    /// The words inside, trim markers removed.
    pub body: String,
    pub kind: ActionKind,
}

/// A syntax error: byte offset and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LexError {
    pub offset: usize,
    pub message: String,
}

/// Finds every action in `text`.
pub fn lex(text: &str) -> Result<Vec<Action>, LexError> {
    let bytes = text.as_bytes();
    let mut actions = Vec::new();
    let mut i = 0;
    while let Some(rel) = text[i..].find("{{") {
        let start = i + rel;
        let mut j = start + 2;
        // A trim marker is `-` followed by a space (Go: hasLeftTrimMarker).
        if text[j..].starts_with('-') && text[j + 1..].starts_with(is_go_space) {
            j += 1;
        }
        let body_start = j;
        let end;
        // A comment opens right after the delimiter (and its trim marker), nowhere else.
        let comment_at = if j > start + 2 { j + 1 } else { j };
        if text[comment_at..].starts_with("/*") {
            let open = comment_at;
            let close = text[open + 2..].find("*/").ok_or(LexError {
                offset: start,
                message: "unclosed comment".into(),
            })?;
            let after = open + 2 + close + 2;
            // Then `}}`, or a right trim marker (a space and `-`) and `}}`.
            let rest = &text[after..];
            let skip = if rest.starts_with(is_go_space) && rest[1..].starts_with("-}}") {
                2
            } else {
                0
            };
            if !rest[skip..].starts_with("}}") {
                return Err(LexError {
                    offset: start,
                    message: "comment ends before closing delimiter".into(),
                });
            }
            end = after + skip + 2;
            actions.push(Action {
                start,
                end,
                body: text[body_start..after].trim().to_string(),
                kind: ActionKind::Comment,
            });
            i = end;
            continue;
        }
        let inside = text[j..].trim_start_matches(is_go_space);
        if inside.starts_with('/') {
            return Err(LexError {
                offset: start,
                message: "unexpected \"/\" in command".into(),
            });
        }
        // `{{-` without a space starts a number (Go: `{{-3}}` prints -3).
        if let Some(after_minus) = inside.strip_prefix('-') {
            let digits = after_minus.strip_prefix('.').unwrap_or(after_minus);
            if !digits.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(LexError {
                    offset: start,
                    message: "bad number syntax after '-' (a trim marker needs a space: `{{- `)"
                        .into(),
                });
            }
        }
        let mut quote: Option<u8> = None;
        loop {
            if j >= bytes.len() {
                return Err(LexError {
                    offset: start,
                    message: "unclosed action".into(),
                });
            }
            let b = bytes[j];
            match quote {
                Some(q) => {
                    if b == b'\\' && q != b'`' {
                        j += 1;
                    } else if b == q {
                        quote = None;
                    }
                }
                None => {
                    if b == b'"' || b == b'`' || b == b'\'' {
                        quote = Some(b);
                    } else if bytes[j..].starts_with(b"}}") {
                        break;
                    }
                }
            }
            j += 1;
        }
        end = j + 2;
        let mut body = text[body_start..j].trim();
        if let Some(b) = body.strip_suffix('-') {
            body = b.trim_end();
        }
        actions.push(Action {
            start,
            end,
            body: body.to_string(),
            kind: kind_of(body),
        });
        i = end;
    }
    Ok(actions)
}

/// Go's text/template isSpace: the characters that may follow a trim marker.
fn is_go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn kind_of(body: &str) -> ActionKind {
    let first = body.split_whitespace().next().unwrap_or("");
    match first {
        "if" | "range" | "with" | "define" | "block" => ActionKind::Open,
        "else" => ActionKind::Else,
        "end" => ActionKind::End,
        "template" => {
            let name = body["template".len()..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_matches(|c| c == '"' || c == '`')
                .to_string();
            ActionKind::Template(name)
        }
        _ => ActionKind::Output,
    }
}

/// Per line: the control depth at its start and end, the lowest depth inside it, and
/// the actions on it.
#[derive(Debug, Clone)]
pub struct Line<'a> {
    /// 0-based.
    pub index: usize,
    /// The line without its newline.
    pub text: &'a str,
    pub depth_start: usize,
    pub depth_end: usize,
    /// True when an `end` on this line closes a structure opened before the line.
    pub closes_outer: bool,
    /// The line starts inside an action that began on an earlier line.
    pub in_action: bool,
    /// Actions starting on this line; offsets relative to the line's start.
    pub actions: Vec<Action>,
}

impl Line<'_> {
    /// Outside every control structure from start to end (actions on it, if any, are
    /// balanced within the line and end on it).
    pub fn at_top_level(&self) -> bool {
        self.depth_start == 0
            && self.depth_end == 0
            && !self.closes_outer
            && !self.in_action
            && self.actions.iter().all(|a| a.end <= self.text.len())
    }

    /// The line's text with every action removed.
    pub fn literal(&self) -> String {
        let mut out = String::new();
        let mut at = 0;
        for a in &self.actions {
            out.push_str(&self.text[at.min(self.text.len())..a.start.min(self.text.len())]);
            at = a.end;
        }
        out.push_str(&self.text[at.min(self.text.len())..]);
        out
    }
}

/// Splits `text` into lines with their depth, or the error of an unbalanced structure.
pub fn lines(text: &str) -> Result<Vec<Line<'_>>, LexError> {
    let actions = lex(text)?;
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut offset = 0;
    let mut next = 0;
    let mut action_reach = 0;
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let body = raw.strip_suffix('\n').unwrap_or(raw);
        let line_end = offset + raw.len();
        let depth_start = depth;
        let mut closes_outer = false;
        let mut mine = Vec::new();
        let in_action = action_reach > offset;
        while next < actions.len() && actions[next].start < line_end {
            let a = actions[next].clone();
            match a.kind {
                ActionKind::Open => depth += 1,
                ActionKind::End => {
                    if depth == 0 {
                        return Err(LexError {
                            offset: a.start,
                            message: "{{ end }} without a matching if/range/with".into(),
                        });
                    }
                    depth -= 1;
                }
                _ => {}
            }
            action_reach = action_reach.max(a.end);
            if depth < depth_start
                || (a.kind == ActionKind::Else && depth_start > 0 && depth == depth_start)
            {
                closes_outer = true;
            }
            // Actions may span lines; they belong to the line they start on.
            mine.push(Action {
                start: a.start - offset,
                end: a.end.saturating_sub(offset),
                ..a
            });
            next += 1;
        }
        out.push(Line {
            index,
            text: body,
            depth_start,
            depth_end: depth,
            closes_outer,
            in_action,
            actions: mine,
        });
        offset = line_end;
    }
    if depth != 0 {
        return Err(LexError {
            offset: text.len(),
            message: "a control structure (if/range/with) is never closed with {{ end }}".into(),
        });
    }
    Ok(out)
}
