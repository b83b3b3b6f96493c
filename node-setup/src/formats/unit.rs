//! A minimal systemd unit-file reader and the one edit this tool makes to a k3s unit:
//! adding `--docker` right after the `server`/`agent` subcommand of `ExecStart=`.
//!
//! Hand-written because no maintained crate edits unit files while keeping the layout
//! byte-for-byte (the k3s installer's quoted, TAB-indented continuation lines).

use std::path::{Path, PathBuf};

use super::Edit;
use edgegpu_host::error::{Result, SetupError};

/// One `Key=Value` assignment, possibly spread over continuation lines.
#[derive(Debug, Clone)]
pub struct Assignment {
    pub section: String,
    pub key: String,
    /// The value with continuations joined by a space (systemd's rule), comments inside
    /// the continuation dropped.
    pub value: String,
    /// 0-based index of the first physical line.
    pub line: usize,
    /// Physical pieces of the value: (line index, byte column where the piece starts in
    /// that line, piece length) — maps value offsets back onto the file.
    pieces: Vec<(usize, usize, usize)>,
}

#[derive(Debug, Clone)]
pub struct UnitFile {
    pub file: PathBuf,
    lines: Vec<String>,
    trailing_newline: bool,
    pub assignments: Vec<Assignment>,
}

/// A word of a command line with its position in the value string.
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    pub text: String,
    pub start: usize,
    pub end: usize,
}

impl Assignment {
    /// Number of physical lines the value spans (1 for a single-line assignment).
    pub fn line_count(&self) -> usize {
        self.pieces.len()
    }
}

impl UnitFile {
    pub fn parse(file: &Path, text: &str) -> Result<UnitFile> {
        let trailing_newline = text.ends_with('\n');
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines: Vec<String> = if text.is_empty() {
            Vec::new()
        } else {
            body.split('\n').map(|l| l.to_string()).collect()
        };
        let malformed = |line: usize, column: usize, message: &str| SetupError::Malformed {
            file: file.to_path_buf(),
            line: line + 1,
            column,
            message: message.to_string(),
        };
        let mut section: Option<String> = None;
        let mut assignments = Vec::new();
        let mut open: Option<Assignment> = None;
        for (i, raw) in lines.iter().enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if let Some(mut a) = open.take() {
                let trimmed = line.trim_start();
                if trimmed.starts_with('#') || trimmed.starts_with(';') {
                    // Comment lines inside a continuation are skipped by systemd.
                    open = Some(a);
                    continue;
                }
                let (piece, continues) = split_continuation(line);
                a.value.push(' ');
                a.pieces.push((i, 0, piece.len()));
                a.value.push_str(piece);
                if continues {
                    open = Some(a);
                } else {
                    assignments.push(a);
                }
                continue;
            }
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
                continue;
            }
            if trimmed.starts_with('[') {
                if !trimmed.ends_with(']') || trimmed.len() < 3 {
                    return Err(malformed(
                        i,
                        line.len() + 1,
                        "section header is missing ']'",
                    ));
                }
                section = Some(trimmed[1..trimmed.len() - 1].to_string());
                continue;
            }
            let Some(current) = section.clone() else {
                return Err(malformed(
                    i,
                    1,
                    "assignment before the first [Section] header",
                ));
            };
            let Some(eq) = line.find('=') else {
                let col = line.len() - line.trim_start().len() + 1;
                return Err(malformed(i, col, "expected Key=Value"));
            };
            let key = line[..eq].trim();
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(malformed(i, 1, "invalid key before '='"));
            }
            let rest = &line[eq + 1..];
            let lead = rest.len() - rest.trim_start().len();
            let (piece, continues) = split_continuation(&rest[lead..]);
            let a = Assignment {
                section: current,
                key: key.to_string(),
                value: piece.to_string(),
                line: i,
                pieces: vec![(i, eq + 1 + lead, piece.len())],
            };
            if continues {
                open = Some(a);
            } else {
                assignments.push(a);
            }
        }
        if let Some(a) = open {
            // systemd accepts a continuation that runs into the end of the file.
            assignments.push(a);
        }
        Ok(UnitFile {
            file: file.to_path_buf(),
            lines,
            trailing_newline,
            assignments,
        })
    }

    pub fn render(&self) -> String {
        let mut out = self.lines.join("\n");
        if self.trailing_newline {
            out.push('\n');
        }
        out
    }

    /// The effective `ExecStart=` of `[Service]` in this file alone.
    pub fn exec_start(&self) -> Result<&Assignment> {
        let found = self
            .assignments
            .iter()
            .filter(|a| a.section == "Service" && a.key == "ExecStart")
            .map(|a| ((), a));
        match exec_start_of(found) {
            Ok(((), one)) => Ok(one),
            Err(None) => Err(SetupError::invalid(
                &self.file,
                "no ExecStart= in [Service]",
            )),
            Err(Some(((), second))) => Err(SetupError::Malformed {
                file: self.file.clone(),
                line: second.line + 1,
                column: 1,
                message: "more than one ExecStart= (a long-running service has one)".into(),
            }),
        }
    }

    /// The words of `ExecStart=` (quotes removed, the `-@:+!` prefixes stripped from the
    /// program).
    pub fn exec_start_words(&self) -> Result<Vec<Word>> {
        let exec = self.exec_start()?;
        let mut words = split_words(&exec.value).map_err(|offset| {
            let (line, column) = self.position(exec, offset);
            SetupError::Malformed {
                file: self.file.clone(),
                line,
                column,
                message: "unterminated quote in ExecStart=".into(),
            }
        })?;
        if let Some(first) = words.first_mut() {
            first.text = strip_exec_prefixes(&first.text);
        }
        Ok(words)
    }

    /// 1-based (line, column) of byte `offset` inside the value of `a`.
    pub fn position(&self, a: &Assignment, offset: usize) -> (usize, usize) {
        let mut value_pos = 0;
        for (idx, &(line, col, len)) in a.pieces.iter().enumerate() {
            if idx > 0 {
                value_pos += 1; // the joining space
            }
            if offset <= value_pos + len {
                return (line + 1, col + offset.saturating_sub(value_pos) + 1);
            }
            value_pos += len;
        }
        (a.line + 1, 1)
    }
}

/// The `ExecStart=` systemd runs among `ExecStart=` assignments in the order they apply
/// (across a unit and its drop-ins, each tagged with where it is): an empty one clears
/// the list, and a service that is not `Type=oneshot` has exactly one. `Err(None)`: there
/// is none; `Err(Some(second))`: a second one without a reset (systemd refuses the unit).
pub fn exec_start_of<'a, T>(
    assignments: impl IntoIterator<Item = (T, &'a Assignment)>,
) -> std::result::Result<(T, &'a Assignment), Option<(T, &'a Assignment)>> {
    let mut effective = Vec::new();
    for (at, a) in assignments {
        if a.value.trim().is_empty() {
            effective.clear();
        } else {
            effective.push((at, a));
        }
    }
    let mut effective = effective.into_iter();
    match (effective.next(), effective.next()) {
        (Some(one), None) => Ok(one),
        (None, _) => Err(None),
        (Some(_), second) => Err(second),
    }
}

/// The program of an `Exec*=` line without the `-@:+!` prefixes that change how systemd
/// runs it (systemd.service(5)).
pub fn strip_exec_prefixes(program: &str) -> String {
    program
        .trim_start_matches(['-', '@', ':', '+', '!'])
        .to_string()
}

/// Splits the trailing backslash continuation off a physical line.
fn split_continuation(line: &str) -> (&str, bool) {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.strip_suffix('\\') {
        Some(rest) => (rest, true),
        None => (line, false),
    }
}

/// systemd-style word splitting: whitespace separates, '…' and "…" quote, backslash
/// escapes the next character. `Err(offset)` for an unterminated quote.
pub fn split_words(value: &str) -> std::result::Result<Vec<Word>, usize> {
    let mut words = Vec::new();
    let mut chars = value.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut text = String::new();
        let mut end = start;
        while let Some(&(i, c)) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            end = i + c.len_utf8();
            match c {
                '\'' | '"' => {
                    let mut closed = false;
                    for (j, q) in chars.by_ref() {
                        end = j + q.len_utf8();
                        if q == c {
                            closed = true;
                            break;
                        }
                        text.push(q);
                    }
                    if !closed {
                        return Err(i);
                    }
                }
                '\\' => {
                    if let Some((j, n)) = chars.next() {
                        end = j + n.len_utf8();
                        text.push(n);
                    }
                }
                _ => text.push(c),
            }
        }
        words.push(Word { text, start, end });
    }
    Ok(words)
}

/// k3s subcommands whose ExecStart we edit.
const K3S_SUBCOMMANDS: [&str; 2] = ["server", "agent"];

/// Whether the k3s ExecStart already passes `--docker`.
pub fn k3s_uses_docker(words: &[Word]) -> bool {
    words
        .iter()
        .skip(1)
        .any(|w| w.text == "--docker" || w.text == "--docker=true")
}

/// Index of the `server`/`agent` word in a k3s ExecStart.
pub fn k3s_subcommand(words: &[Word]) -> Option<usize> {
    words
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, w)| K3S_SUBCOMMANDS.contains(&w.text.as_str()))
        .map(|(i, _)| i)
}

/// Returns the unit text with `--docker` added after the k3s subcommand, keeping the
/// layout: the installer's one-argument-per-line form gets a new `<TAB>'--docker' \` line,
/// a single-line ExecStart gets ` --docker` after the subcommand. No change when the
/// flag is already there.
pub fn add_k3s_docker_flag(unit: &UnitFile) -> Result<Edit> {
    let words = unit.exec_start_words()?;
    if k3s_uses_docker(&words) {
        return Ok(Edit::unchanged());
    }
    if let Some(w) = words.iter().find(|w| w.text.starts_with("--docker=")) {
        return Err(SetupError::invalid(
            &unit.file,
            format!("ExecStart= already has '{}'; remove it first", w.text),
        ));
    }
    let exec = unit.exec_start()?;
    let sub = k3s_subcommand(&words).ok_or_else(|| {
        SetupError::invalid(
            &unit.file,
            "ExecStart= has no k3s 'server' or 'agent' subcommand",
        )
    })?;
    let (line_no, column) = unit.position(exec, words[sub].end);
    let (line_idx, col) = (line_no - 1, column - 1);
    let mut edited = unit.clone();
    let line = &unit.lines[line_idx];
    let after = &line[col..];
    let continues_here = after.trim_end_matches('\r').trim() == "\\";
    if continues_here {
        // Installer layout: one argument per line. Copy indentation and quoting from the
        // next argument line; the installer itself uses a TAB and single quotes.
        let next = unit
            .lines
            .get(line_idx + 1)
            .map(|s| s.as_str())
            .unwrap_or("");
        let (indent, quote) = if next.trim().is_empty() {
            ("\t".to_string(), "'")
        } else {
            let indent = &next[..next.len() - next.trim_start().len()];
            let quote = if next.trim_start().starts_with('\'') {
                "'"
            } else if next.trim_start().starts_with('"') {
                "\""
            } else {
                ""
            };
            (indent.to_string(), quote)
        };
        edited
            .lines
            .insert(line_idx + 1, format!("{indent}{quote}--docker{quote} \\"));
    } else {
        edited.lines[line_idx] = format!("{} --docker{}", &line[..col], after);
    }
    let text = edited.render();
    // Re-read our own output: the command line must be exactly the old one plus the flag.
    let check = UnitFile::parse(&unit.file, &text)?;
    let new_words: Vec<String> = check
        .exec_start_words()?
        .into_iter()
        .map(|w| w.text)
        .collect();
    let mut expected: Vec<String> = words.into_iter().map(|w| w.text).collect();
    expected.insert(sub + 1, "--docker".into());
    if new_words != expected {
        return Err(SetupError::invalid(
            &unit.file,
            "could not add --docker without changing the rest of ExecStart= (unusual layout); edit it by hand",
        ));
    }
    Ok(Edit {
        new: Some(text),
        notes: Vec::new(),
    })
}
