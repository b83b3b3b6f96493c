//! The runtime edit: declares the NVIDIA runtime's table (with the settings of the
//! runtime pods use now) and, where asked, makes it the default, in a containerd config
//! or a k3s template; and the checks every edit's output passes before it may be written.

use std::path::Path;

use toml_edit::{DocumentMut, Item, Value};

use super::copy::RuntimeCopy;
use super::describe::{describe_as, DefaultRuntime, Description};
use super::template::{
    edits_at_top_level, guard_new_tables, place_new_tables_last, prepare, restore_template,
    template_lines_keep_their_tables, Skeleton, TemplateLine, VALUE_PLACEHOLDER,
};
use super::toml::{self, dotted, parse};
use super::version::{CriKeys, Flavor};
use crate::formats::Edit;
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::error::{Result, SetupError};

/// The runc v2 shim: NVIDIA's runtime is runc-compatible and runs under it.
const RUNC_V2: &str = "io.containerd.runc.v2";

/// What an edit must achieve.
#[derive(Debug, Clone, Copy)]
pub struct Want<'a> {
    pub spec: &'a RuntimeSpec,
    /// Write the runtime's table in this file (false: k3s declares it itself).
    pub declare_runtime: bool,
    /// Write `default_runtime_name` in this file.
    pub set_default: bool,
    /// The config version whose CRI plugin name the file's runtimes are read and written
    /// under, when it is not the file's own: containerd reads an imported file with the
    /// merged config's version (see effective::containerd). `None`: the file's own.
    pub version: Option<i64>,
    /// What the runtime's table copies from the runtime pods use now.
    pub copy: CopyFrom<'a>,
}

/// Where the new runtime's copied settings come from (see [`copy`]).
#[derive(Debug, Clone, Copy)]
pub enum CopyFrom<'a> {
    /// The runtime pods use now as this file alone says.
    ThisFile,
    /// As the caller found it, other files included (containerd merges its imports):
    /// `None` when no runtime qualifies.
    Given(Option<&'a RuntimeCopy>),
}

/// Adds the runtime table (with what `copy` says the runtime pods use now has) and, if
/// asked, the default to `doc`. An existing table of the runtime keeps what it says,
/// except: `BinaryName` is ours, a type other than the runc shim's becomes
/// `io.containerd.runc.v2`, keys it lacks are copied, and `SystemdCgroup` is made the
/// copied runtime's (a pod moved to the NVIDIA runtime must keep its cgroup driver).
/// `extra_options` are added where missing. Returns whether the document changed.
fn add_runtime(
    file: &Path,
    doc: &mut DocumentMut,
    version: i64,
    want: Want,
    copy: Option<&RuntimeCopy>,
    extra_options: &[(&str, Value)],
) -> Result<bool> {
    let keys = CriKeys::for_version(version);
    let spec = want.spec;
    let root = doc.as_item_mut();
    let mut changed = false;
    toml::table_mut(file, root, &keys.containerd())?;
    if want.declare_runtime {
        let rt = keys.runtime(&spec.name);
        let options: Vec<&str> = rt.iter().copied().chain(["options"]).collect();
        let has = |root: &Item, table: &[&str], k: &str| {
            toml::get(root, table).and_then(|t| t.get(k)).is_some()
        };
        toml::table_mut(file, root, &rt)?;
        let runc_type = toml::get(root, &rt)
            .and_then(|t| t.get("runtime_type"))
            .and_then(Item::as_str)
            .is_some_and(|t| t == RUNC_V2 || t == "io.containerd.runc.v1");
        if !runc_type {
            changed |= toml::set(file, root, &rt, "runtime_type", Value::from(RUNC_V2))?;
        }
        for (k, v) in copy.iter().flat_map(|c| &c.top) {
            if !has(root, &rt, k) {
                changed |= toml::set(file, root, &rt, k, v.clone())?;
            }
        }
        let binary = Value::from(spec.path.as_str());
        changed |= toml::set(file, root, &options, "BinaryName", binary)?;
        let copied = copy
            .iter()
            .flat_map(|c| c.options.iter().map(|(k, v)| (k.as_str(), v)));
        // The cgroup driver is made the default runtime's; with the runtime already the
        // default (or a stand-in for a default that is not runc) what it has stays.
        let keep_driver = copy.is_some_and(|c| c.is_default) || !extra_options.is_empty();
        for (k, v) in copied.chain(extra_options.iter().map(|(k, v)| (*k, v))) {
            // (A value a template expression renders is the template's to decide.)
            let templated = toml::get(root, &options)
                .and_then(|t| t.get(k))
                .and_then(Item::as_str)
                .is_some_and(|t| t.starts_with(VALUE_PLACEHOLDER));
            if !has(root, &options, k) || (k == "SystemdCgroup" && keep_driver && !templated) {
                changed |= toml::set(file, root, &options, k, v.clone())?;
            }
        }
    }
    if want.set_default {
        let name = Value::from(spec.name.as_str());
        let containerd = keys.containerd();
        changed |= toml::set(file, root, &containerd, "default_runtime_name", name)?;
    }
    Ok(changed)
}

/// What every edit does with its TOML output before it may be written: the template
/// lines are put back, nothing landed inside a control structure or moved to another
/// table, and no table a control structure may emit is now declared outside it too.
/// `None` when the output equals `original`; else the output and its description.
pub(super) fn finish_edit(
    file: &Path,
    original: &str,
    source: &str,
    sk: &Skeleton,
    before: &Description,
    edited: &str,
    flavor: Flavor,
) -> Result<Option<(String, Description)>> {
    let out = guard_new_tables(&restore_template(file, edited, &sk.lines)?);
    if out == original {
        return Ok(None);
    }
    if matches!(flavor, Flavor::K3sTemplate { .. }) {
        edits_at_top_level(file, original, &out)?;
        template_lines_keep_their_tables(file, source, &out)?;
    }
    // Validate our own output before it may be written.
    let after = describe_as(file, Some(&out), flavor, Some(before.version))?;
    // A table we now write outside every control structure must not be one a control
    // structure may emit as well (a table declared twice).
    if let Some((line, path)) = before.hidden_tables.iter().find(|(_, p)| {
        after.visible_tables.iter().any(|(v, _)| v == p)
            && !before.visible_tables.iter().any(|(v, _)| v == p)
    }) {
        return Err(SetupError::Refused(format!(
            "{}:{line}: the template declares [{}] inside a template control structure; node-setup cannot add to it there, and declaring it again would make a table declared twice. Edit the template by hand (or move that table out of the control structure)",
            file.display(),
            dotted(path)
        )));
    }
    Ok(Some((out, after)))
}

/// Plans the edit of a containerd config (`flavor` System) or a k3s template so that it
/// does what `want` asks. A new or empty k3s template starts from the base template.
pub fn edit(file: &Path, text: Option<&str>, flavor: Flavor, want: Want) -> Result<Edit> {
    let original = text.unwrap_or("");
    let is_template = matches!(flavor, Flavor::K3sTemplate { .. });
    let source = if is_template && original.trim().is_empty() {
        "{{ template \"base\" . }}\n".to_string()
    } else {
        original.to_string()
    };
    let mut sk = prepare(file, &source, flavor)?;
    let before = describe_as(file, Some(&source), flavor, want.version)?;
    let spec = want.spec;
    let has_runtime = before
        .runtimes
        .get(&spec.name)
        .is_some_and(|r| r.binary.as_deref() == Some(spec.path.as_str()));
    let declare = want.declare_runtime;
    if declare && !has_runtime {
        if let Some((line, text)) = before.hidden_runtime_table(&spec.name) {
            return Err(SetupError::Refused(format!(
                "{}:{line}: a template line declares runtime '{}' ({}) where node-setup cannot edit it (a template expression or control structure); edit the template by hand",
                file.display(),
                spec.name,
                text.trim()
            )));
        }
    }
    if want.set_default {
        match &before.default {
            DefaultRuntime::Unknown { line, text } => {
                return Err(SetupError::Refused(format!(
                    "{}:{line}: default_runtime_name is decided by a template expression or inside a control structure ({text}); node-setup cannot change it. Edit the template by hand",
                    file.display()
                )))
            }
            DefaultRuntime::FromK3sSetting { .. } => {
                return Err(SetupError::invalid(
                    file,
                    "internal error: the default of this template comes from k3s's default-runtime setting",
                ))
            }
            DefaultRuntime::Unset | DefaultRuntime::Literal { .. } => {}
        }
    }
    let version = before.version;
    let mut result = Edit::unchanged();
    let out = if let Some(base) = sk.base_line {
        if !declare || has_runtime {
            // Nothing to add after the base: leave the file (or its absence) alone.
            return Ok(result);
        }
        // Only new tables go after the base, at the end. The base renders runc's
        // SystemdCgroup from k3s's data; the new runtime gets the same.
        let split = sk
            .text
            .split_inclusive('\n')
            .take(base + 1)
            .map(str::len)
            .sum::<usize>();
        let (head, tail) = sk.text.split_at(split);
        let mut tail_doc = parse(file, tail, base + 1)?;
        let n = sk.lines.len();
        sk.lines
            .push(TemplateLine::Value("{{ .SystemdCgroup }}".into()));
        let systemd_cgroup = Value::from(format!("{VALUE_PLACEHOLDER}{n}@@"));
        let declare_only = Want {
            set_default: false,
            ..want
        };
        add_runtime(
            file,
            &mut tail_doc,
            version,
            declare_only,
            None,
            &[("SystemdCgroup", systemd_cgroup)],
        )?;
        place_new_tables_last(&mut tail_doc);
        let mut text = head.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        // (The new tables start with a blank line: see place_new_tables_last.)
        text.push_str(&tail_doc.to_string());
        text
    } else {
        let mut doc = parse(file, &sk.text, 0)?;
        let empty = original.trim().is_empty();
        if empty && version != 1 {
            // Without a version key containerd would read the file as version 1.
            doc.insert("version", Item::Value(Value::from(version)));
        }
        let own;
        let copy = match want.copy {
            CopyFrom::Given(copy) => copy,
            CopyFrom::ThisFile => {
                own = before.own_copy(&spec.name);
                own.as_ref()
            }
        };
        let want = Want {
            declare_runtime: declare,
            ..want
        };
        add_runtime(file, &mut doc, version, want, copy, &[])?;
        if is_template {
            place_new_tables_last(&mut doc);
        }
        if version == 1 {
            result
                .notes
                .push("config version 1 is legacy (containerd 1.x only)".into());
        }
        doc.to_string()
    };
    let Some((out, after)) = finish_edit(file, original, &source, &sk, &before, &out, flavor)?
    else {
        return Ok(result);
    };
    let declared = after
        .runtimes
        .get(&spec.name)
        .is_some_and(|r| r.binary.as_deref() == Some(spec.path.as_str()));
    let defaulted =
        matches!(&after.default, DefaultRuntime::Literal { name, .. } if *name == spec.name);
    if (want.declare_runtime && !declared) || (want.set_default && !defaulted) {
        return Err(SetupError::invalid(
            file,
            "internal error: the edited configuration does not contain the runtime",
        ));
    }
    result.new = Some(out);
    Ok(result)
}
