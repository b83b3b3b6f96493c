//! k3s's templates are Go text/template files. Before the TOML is parsed, every line that
//! is not plain TOML outside a control structure is replaced by a comment that stands in
//! for it (a `key = {{ ... }}` line keeps its key), and restored byte for byte
//! afterwards. After an edit the tables it added are placed behind the template's own
//! lines, and the result is checked: no edit inside `{{ if }}`/`{{ range }}`/..., no
//! template line moved under another table.

use std::path::Path;

use toml_edit::{DocumentMut, Table};

use super::version::Flavor;
use crate::formats::go_template::{self, ActionKind};
use edgegpu_host::error::{line_column, Result, SetupError};

/// Prefix of the comment that stands in for a Go-template line while the TOML is parsed.
const PLACEHOLDER: &str = "#edgegpu-node-setup:template-line:";
/// A `key = {{ ... }}` line keeps its key (so it stays in its table while tables are
/// added around it); only the value is replaced by this string.
pub(super) const VALUE_PLACEHOLDER: &str = "@@edgegpu-node-setup:template-value:";

/// How one template line was replaced.
#[derive(Debug, Clone)]
pub(super) enum TemplateLine {
    /// The whole line became a comment.
    Line(String),
    /// Only the value of `key = value` was replaced; holds the original value text.
    Value(String),
}

/// A template turned into parseable TOML, and what its Go-template parts decide.
#[derive(Debug, Clone, Default)]
pub(super) struct Skeleton {
    /// TOML with one line per template line.
    pub(super) text: String,
    pub(super) lines: Vec<TemplateLine>,
    /// 0-based line of `{{ template "base" . }}` (outside any control structure).
    pub(super) base_line: Option<usize>,
    /// 0-based line of the first action that reads k3s's `--default-runtime`.
    pub(super) default_from_k3s: Option<usize>,
    /// 0-based line of a `{{ range }}` over k3s's detected runtimes (`.ExtraRuntimes`).
    pub(super) extra_runtimes_loop: Option<usize>,
    /// Lines replaced by a stand-in comment: (0-based line, original text).
    pub(super) opaque: Vec<(usize, String)>,
}

/// `{{ template "base" . }}`, possibly with trim markers, comments (`{{/* */}}` or a
/// TOML `#` comment) or blanks around it on its line.
fn is_base_line(line: &go_template::Line) -> bool {
    let mut base = false;
    for a in &line.actions {
        match &a.kind {
            ActionKind::Template(name) if name == "base" => base = true,
            ActionKind::Comment => {}
            _ => return false,
        }
    }
    let rest = line.literal();
    let rest = rest.trim();
    base && (rest.is_empty() || rest.starts_with('#'))
}

/// `Some(index of '=')` when the line is `key = value` with the markup in the value.
fn value_assignment(line: &go_template::Line) -> Option<usize> {
    let body = line.text;
    let eq = body.find('=')?;
    let key = body[..eq].trim();
    let markup = line.actions.first()?.start;
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\'' | ' '));
    (key_ok && eq < markup).then_some(eq)
}

/// Turns a template into TOML: plain lines outside control structures stay, the rest is
/// stood in for. After a line that may emit a table header we cannot see (the base
/// template, a header inside `{{ if }}`, a printed value), keys before the next visible
/// header belong to an unknown table and are stood in for too.
fn skeleton(file: &Path, text: &str) -> Result<Skeleton> {
    let lines = go_template::lines(text).map_err(|e| {
        let (line, column) = line_column(text, e.offset);
        SetupError::Malformed {
            file: file.to_path_buf(),
            line,
            column,
            message: format!("invalid Go template: {}", e.message),
        }
    })?;
    let mut sk = Skeleton::default();
    let mut unknown_table = false;
    let raw_lines: Vec<&str> = text.split_inclusive('\n').collect();
    for line in &lines {
        let nl = if raw_lines[line.index].ends_with('\n') {
            "\n"
        } else {
            ""
        };
        for a in &line.actions {
            if a.body.contains(".NodeConfig.DefaultRuntime") {
                sk.default_from_k3s.get_or_insert(line.index);
            }
            if a.kind == ActionKind::Open
                && a.body.starts_with("range")
                && a.body.contains(".ExtraRuntimes")
            {
                sk.extra_runtimes_loop.get_or_insert(line.index);
            }
        }
        let trimmed = line.text.trim();
        let plain = line.actions.is_empty() && line.at_top_level();
        if plain {
            let is_header = trimmed.starts_with('[');
            let is_blank = trimmed.is_empty() || trimmed.starts_with('#');
            if is_header {
                unknown_table = false;
            }
            if is_header || is_blank || !unknown_table {
                sk.text.push_str(line.text);
                sk.text.push_str(nl);
                continue;
            }
        }
        let n = sk.lines.len();
        if line.at_top_level() && !unknown_table {
            if let Some(eq) = value_assignment(line) {
                let value = &line.text[eq + 1..];
                let lead = &value[..value.len() - value.trim_start().len()];
                sk.text.push_str(&format!(
                    "{}{lead}\"{VALUE_PLACEHOLDER}{n}@@\"{nl}",
                    &line.text[..=eq]
                ));
                sk.lines
                    .push(TemplateLine::Value(value.trim_start().to_string()));
                continue;
            }
        }
        if line.at_top_level() && is_base_line(line) {
            sk.base_line.get_or_insert(line.index);
            unknown_table = true;
        } else if !(line.at_top_level()
            && line.actions.iter().all(|a| a.kind == ActionKind::Comment)
            && {
                let l = line.literal();
                let l = l.trim();
                l.is_empty() || l.starts_with('#')
            })
        {
            sk.opaque.push((line.index, line.text.to_string()));
            let literal = line.literal();
            let prints = line
                .actions
                .iter()
                .any(|a| matches!(a.kind, ActionKind::Output | ActionKind::Template(_)));
            if literal.trim_start().starts_with('[') || (prints && literal.trim().is_empty()) {
                unknown_table = true;
            }
        }
        sk.text.push_str(&format!("{PLACEHOLDER}{n}{nl}"));
        sk.lines.push(TemplateLine::Line(line.text.to_string()));
    }
    Ok(sk)
}

pub(super) fn restore_template(file: &Path, text: &str, lines: &[TemplateLine]) -> Result<String> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut next_line = 0;
    let mut values_seen = vec![false; lines.len()];
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if let Some(n) = body.trim().strip_prefix(PLACEHOLDER) {
            // Whole-line stand-ins must come back once each, in their order.
            while matches!(lines.get(next_line), Some(TemplateLine::Value(_))) {
                next_line += 1;
            }
            match (n.parse::<usize>().ok(), lines.get(next_line)) {
                (Some(n), Some(TemplateLine::Line(original))) if n == next_line => {
                    out.push_str(original);
                    out.push_str(nl);
                    next_line += 1;
                    continue;
                }
                _ => {
                    return Err(SetupError::invalid(
                        file,
                        "template lines were reordered while editing; edit the template by hand",
                    ))
                }
            }
        }
        let mut restored = body.to_string();
        while let Some(start) = restored.find(&format!("\"{VALUE_PLACEHOLDER}")) {
            let rest = &restored[start + 1 + VALUE_PLACEHOLDER.len()..];
            let end = rest.find("@@\"").ok_or_else(|| {
                SetupError::invalid(file, "template value placeholder damaged while editing")
            })?;
            let n: usize = rest[..end].parse().map_err(|_| {
                SetupError::invalid(file, "template value placeholder damaged while editing")
            })?;
            let Some(TemplateLine::Value(original)) = lines.get(n) else {
                return Err(SetupError::invalid(
                    file,
                    "template value placeholder damaged while editing",
                ));
            };
            values_seen[n] = true;
            let token_len = 1 + VALUE_PLACEHOLDER.len() + end + 3;
            restored.replace_range(start..start + token_len, original);
        }
        out.push_str(&restored);
        out.push_str(nl);
    }
    let lines_left = lines[next_line.min(lines.len())..]
        .iter()
        .any(|l| matches!(l, TemplateLine::Line(_)));
    let values_lost = lines
        .iter()
        .zip(&values_seen)
        .any(|(l, seen)| matches!(l, TemplateLine::Value(_)) && !seen);
    if lines_left || values_lost {
        return Err(SetupError::invalid(
            file,
            "template lines were lost while editing",
        ));
    }
    Ok(out)
}

/// The original template text behind a value placeholder.
pub(super) fn template_value(sk: &Skeleton, placeholder: &str) -> Option<String> {
    let n: usize = placeholder
        .strip_prefix(VALUE_PLACEHOLDER)?
        .strip_suffix("@@")?
        .parse()
        .ok()?;
    match sk.lines.get(n)? {
        TemplateLine::Value(v) => Some(v.clone()),
        TemplateLine::Line(_) => None,
    }
}

/// Splits off the template skeleton; template markup is refused outside k3s templates.
pub(super) fn prepare(file: &Path, text: &str, flavor: Flavor) -> Result<Skeleton> {
    let sk = skeleton(file, text)?;
    if flavor == Flavor::System && !sk.lines.is_empty() {
        return Err(SetupError::invalid(
            file,
            "contains Go-template markup ({{ ... }}); only k3s templates may",
        ));
    }
    Ok(sk)
}

/// Marks where the tables an edit adds to a template begin, until the template lines
/// are restored ([`guard_new_tables`]).
const NEW_TABLES_MARK: &str = "#edgegpu-node-setup:new-tables";

/// Written between a template line that ends in a right trim marker (`-}}`, which eats
/// the line breaks after it) and the tables an edit adds after it, so that the first new
/// header still starts a line when Go renders the template. It renders as nothing.
const TRIM_GUARD: &str = "{{/* edgegpu-node-setup: keeps the next table on its own line */}}";

/// Moves the tables an edit created behind every table of the template, and behind the
/// template lines that end it. toml_edit puts a new table right after its sibling tables
/// and keeps the lines after the last key as the document's trailing text; either way a
/// template line that emits keys for the table before it (`{{- if }}` ... `{{- end }}`)
/// would end up in the new table when Go renders it.
pub(super) fn place_new_tables_last(doc: &mut DocumentMut) {
    fn last_position(t: &Table) -> usize {
        t.iter()
            .filter_map(|(_, v)| v.as_table())
            .map(last_position)
            .fold(t.position().unwrap_or(0), usize::max)
    }
    /// Numbers the new tables that print a header; returns the first one's position.
    fn number(t: &mut Table, next: &mut usize, first: &mut Option<usize>) {
        let hidden = t.is_implicit() && t.get_values().is_empty();
        let printed = !t.is_dotted() && !hidden;
        if t.position().is_none() && printed {
            *next += 1;
            t.set_position(*next);
            first.get_or_insert(*next);
        }
        for (_, v) in t.iter_mut() {
            if let Some(child) = v.as_table_mut() {
                number(child, next, first);
            }
        }
    }
    fn at(t: &mut Table, position: usize) -> Option<&mut Table> {
        if t.position() == Some(position) {
            return Some(t);
        }
        t.iter_mut()
            .filter_map(|(_, v)| v.as_table_mut())
            .find_map(|c| at(c, position))
    }
    let mut next = last_position(doc.as_table());
    let mut first = None;
    // The root (top-level keys, no header) keeps its place.
    for (_, v) in doc.as_table_mut().iter_mut() {
        if let Some(t) = v.as_table_mut() {
            number(t, &mut next, &mut first);
        }
    }
    let Some(first) = first else {
        return;
    };
    let trailing = doc.trailing().as_str().unwrap_or_default().to_string();
    doc.set_trailing("");
    if let Some(t) = at(doc.as_table_mut(), first) {
        t.decor_mut()
            .set_prefix(format!("{trailing}{NEW_TABLES_MARK}\n\n"));
    }
}

/// Replaces the mark [`place_new_tables_last`] left by [`TRIM_GUARD`] where the line
/// before it trims the line break, and removes it everywhere else.
pub(super) fn guard_new_tables(text: &str) -> String {
    let mark = format!("{NEW_TABLES_MARK}\n");
    let Some(at) = text.find(&mark) else {
        return text.to_string();
    };
    let (before, after) = (&text[..at], &text[at + mark.len()..]);
    if before.trim_end().ends_with("-}}") {
        format!("{before}{TRIM_GUARD}\n{after}")
    } else {
        format!("{before}{after}")
    }
}

/// A template line (0-based index, text) and the table header in effect before it.
type LineInTable<'a> = (usize, &'a str, Option<&'a str>);

/// The template lines of `text` (lines with actions, or inside a control structure)
/// that render something, each with the table header in effect before it: what Go
/// renders there lands in that table.
fn template_line_tables(text: &str) -> Result<Vec<LineInTable<'_>>, go_template::LexError> {
    let mut header = None;
    let mut out = Vec::new();
    for line in go_template::lines(text)? {
        let plain = line.actions.is_empty() && line.at_top_level();
        if plain {
            if line.text.trim_start().starts_with('[') {
                header = Some(line.text.trim());
            }
            continue;
        }
        let renders_nothing = line.at_top_level()
            && line.actions.iter().all(|a| a.kind == ActionKind::Comment)
            && line.literal().trim().is_empty();
        if !renders_nothing {
            out.push((line.index, line.text, header));
        }
    }
    Ok(out)
}

/// Checks that every template line renders under the same table header after the edit
/// as before it (lines the edit adds, such as `SystemdCgroup = {{ .SystemdCgroup }}`,
/// are skipped).
pub(super) fn template_lines_keep_their_tables(file: &Path, old: &str, new: &str) -> Result<()> {
    let lex = |e: go_template::LexError| {
        SetupError::invalid(
            file,
            format!("internal error: template does not lex: {}", e.message),
        )
    };
    let before = template_line_tables(old).map_err(lex)?;
    let after = template_line_tables(new).map_err(lex)?;
    let mut rest = after.iter();
    for (line, text, was) in &before {
        let Some((_, _, now)) = rest.find(|(_, t, _)| t == text) else {
            return Err(SetupError::invalid(
                file,
                format!(
                    "internal error: template line {} was lost while editing",
                    line + 1
                ),
            ));
        };
        if now != was {
            return Err(SetupError::Refused(format!(
                "{}:{}: node-setup's edit would put this template line ({}) under {} instead of {}; edit the template by hand",
                file.display(),
                line + 1,
                text.trim(),
                now.unwrap_or("the top level"),
                was.unwrap_or("the top level")
            )));
        }
    }
    Ok(())
}

/// Checks that every line an edit changed or added lies outside every control structure
/// of the template (an edit inside `{{ if }}` or `{{ range }}` would render zero or many
/// times).
pub(super) fn edits_at_top_level(file: &Path, old: &str, new: &str) -> Result<()> {
    let lines = go_template::lines(new).map_err(|e| {
        SetupError::invalid(
            file,
            format!(
                "internal error: edited template does not lex: {}",
                e.message
            ),
        )
    })?;
    let diff = similar::TextDiff::from_lines(old, new);
    for op in diff.ops() {
        for change in diff.iter_changes(op) {
            if change.tag() != similar::ChangeTag::Insert {
                continue;
            }
            let Some(i) = change.new_index() else {
                continue;
            };
            if let Some(line) = lines.get(i) {
                if !line.at_top_level() {
                    return Err(SetupError::invalid(
                        file,
                        format!(
                            "line {} would land inside a template control structure ({{{{ if }}}}/{{{{ range }}}}); edit the template by hand",
                            i + 1
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last guard of a template edit: a template line that would render under another
    /// table than before is refused, naming its line (the placement of new tables makes
    /// this unreachable through `edit`, which is why it is checked here directly).
    #[test]
    fn a_template_line_moved_under_another_table_is_refused() {
        let old = "[a]\nx = 1\n{{- if .X }}\ny = 2\n{{- end }}\n";
        let moved = "[a]\nx = 1\n\n[b]\nz = 3\n{{- if .X }}\ny = 2\n{{- end }}\n";
        let err = template_lines_keep_their_tables(Path::new("t"), old, moved).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("t:3: ") && msg.contains("under [b] instead of [a]"),
            "{msg}"
        );
        // Lines added by the edit (a new table after the template's own lines) are fine.
        let added = format!("{old}\n[b]\nz = {{{{ .SystemdCgroup }}}}\n");
        template_lines_keep_their_tables(Path::new("t"), old, &added).unwrap();
    }
}
