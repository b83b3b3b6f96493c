//! The NVIDIA-runtime mode: the runtime registered in k3s's template (or found by k3s
//! itself), in the system containerd's config or in daemon.json, made the default where
//! asked, and a RuntimeClass for k3s servers.

use std::path::Path;

use super::builder::{finish_plan, Builder};
use super::model::{CheckItem, Options, Plan};
use crate::effective::containerd::Containerd;
use crate::effective::containerd_merge::{system_merges, Layer, Merge, MergedCri, Signal};
use crate::effective::docker::Docker;
use crate::effective::inventory::Inventory;
use crate::effective::k3s::K3s;
use crate::effective::k3s_template::{self, EXTRA_SEARCH_DIRS};
use crate::effective::runtime::View;
use crate::effective::systemd::DEFAULT_PATH;
use crate::formats::containerd::{self, CopyFrom, DefaultRuntime, Flavor, RuntimeCopy, Want};
use crate::formats::{daemon_json, k3s_yaml, Edit};
use crate::mode::{ContainerdTarget, Mode};
use crate::restart::Service;
use crate::runtime_spec::RuntimeSpec;
use edgegpu_host::error::{Result, SetupError};

/// Our k3s drop-in (in the `.d` directory of the config file k3s reads); `99-` so that
/// it sorts after the usual ones (later wins).
const K3S_DROP_IN: &str = "99-edgegpu-nvidia-runtime.yaml";
const K3S_MANIFESTS_DIR: &str = "/var/lib/rancher/k3s/server/manifests";
/// RuntimeClasses k3s ≥ v1.29.0 deploys itself (`runtimes.yaml`).
const K3S_RUNTIME_CLASSES: [&str; 2] = ["nvidia", "nvidia-experimental"];

pub(super) fn build(opts: &Options, for_check: bool) -> Result<Plan> {
    let inv = Inventory::scan(&opts.host, opts.k3s_version.as_deref())?;
    let choice = crate::detect::choose(&inv, opts.mode)?;
    if choice.mode == Mode::Docker
        && daemon_json::DOCKER_BUILTIN_RUNTIMES.contains(&opts.spec.name.as_str())
    {
        return Err(SetupError::Refused(format!(
            "runtime name '{}' is reserved by docker",
            opts.spec.name
        )));
    }
    let runtime_present = opts.host.is_executable(&opts.spec.path);
    if opts.spec.set_default && !runtime_present && !opts.force && !for_check {
        return Err(SetupError::Refused(format!(
            "the runtime binary {} does not exist under {} (or is not executable): making '{}' the default runtime would stop every container from starting. Install the NVIDIA container toolkit first, or pass --force",
            opts.spec.path,
            opts.host.root().display(),
            opts.spec.name
        )));
    }
    let mut b = Builder {
        opts,
        inv: &inv,
        plan: Plan::new(&opts.spec, runtime_present, Some(choice.clone())),
    };
    let planned = match &choice.mode {
        Mode::K3sDefaultRuntime | Mode::Containerd(ContainerdTarget::K3sTemplate) => {
            b.k3s_containerd()
        }
        Mode::Containerd(ContainerdTarget::System) => b.system_containerd(),
        Mode::Docker => b.docker(),
    };
    let now = View {
        host: &opts.host,
        inv: &inv,
        spec: &opts.spec,
    };
    finish_plan(
        &mut b,
        planned,
        for_check,
        |b| {
            b.plan.effective = now.effective(&choice.mode)?;
            b.report_effective();
            Ok(())
        },
        |host, inv| {
            View {
                host,
                inv,
                spec: &opts.spec,
            }
            .problems(&choice.mode)
        },
    )?;
    Ok(b.plan)
}

pub(super) fn validate_spec(spec: &RuntimeSpec) -> Result<()> {
    let name_ok = !spec.name.is_empty()
        && spec
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        return Err(SetupError::Refused(format!(
            "--runtime-name {:?}: use letters, digits, '-', '_' or '.'",
            spec.name
        )));
    }
    if !spec.path.starts_with('/') || spec.path.contains(['\n', '"', '\'']) {
        return Err(SetupError::Refused(format!(
            "--runtime-path {:?} must be an absolute path",
            spec.path
        )));
    }
    Ok(())
}

impl Builder<'_> {
    /// Whether k3s registers `--runtime-name` with `--runtime-path` by itself; refuses
    /// when it would register it with another binary (a template cannot declare the
    /// same runtime again).
    fn k3s_registers(&self, k: &K3s) -> Result<bool> {
        let found = k3s_template::detects(self.host(), k, &self.spec().name);
        let spec_file = self.host().resolve(&self.spec().path).ok();
        let same = |p: &String| p == &self.spec().path || self.host().resolve(p).ok() == spec_file;
        match found.as_slice() {
            [] => Ok(false),
            [one] if same(one) => Ok(true),
            _ => {
                let others: Vec<&String> = found.iter().filter(|p| !same(p)).collect();
                let path = k.path();
                Err(SetupError::Refused(format!(
                    "k3s registers runtime '{}' by itself with the first {} it finds on its PATH ({}: {}) or in {}; it finds {}, not --runtime-path {}. Remove the other binary (a leftover of the GPU Operator's toolkit?), or pass --runtime-path {} (or another --runtime-name)",
                    self.spec().name,
                    found[0].rsplit('/').next().unwrap_or_default(),
                    path.source,
                    path.value,
                    EXTRA_SEARCH_DIRS.join(", "),
                    others.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" and "),
                    self.spec().path,
                    others[0]
                )))
            }
        }
    }

    /// k3s's own containerd: the runtime is registered by k3s itself or declared in its
    /// template, and made the default in the template or through k3s's `default-runtime`.
    fn k3s_containerd(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let services: Vec<K3s> = k3s_template::services(self.inv)
            .into_iter()
            .cloned()
            .collect();
        for k in &services {
            let t = k3s_template::template(self.host(), self.inv, k)?;
            let flavor = Flavor::K3sTemplate { version: t.version };
            let desc = containerd::describe(Path::new(&t.path), t.text.as_deref(), flavor)?;
            let new_or_base =
                t.text.as_deref().map_or(true, |s| s.trim().is_empty()) || desc.base_line.is_some();
            self.base_conflicts(&t, &desc)?;
            let emits_detected = new_or_base || desc.extra_runtimes_loop.is_some();
            let by_k3s = emits_detected && self.k3s_registers(k)?;
            if by_k3s {
                if let Some(d) = desc.runtimes.get(&spec.name) {
                    return Err(SetupError::Refused(format!(
                        "{}:{}: the template declares runtime '{}', which k3s also declares (it finds the binary on its PATH): containerd refuses a table declared twice. Remove that table and run apply again",
                        t.path, d.line, spec.name
                    )));
                }
                self.plan.notes.push(format!(
                    "k3s registers runtime '{}' itself ({} is on its PATH); not declaring it again",
                    spec.name, spec.path
                ));
            } else if !new_or_base || desc.runtimes.contains_key(&spec.name) {
                // A full template declares the runtimes itself.
            } else {
                self.plan.notes.push(format!(
                    "k3s does not register runtime '{}' with {} by itself (not one of its names, or not on its PATH {}): declaring it in {}",
                    spec.name, spec.path, k.path().value, t.path
                ));
            }
            let default_via_k3s = spec.set_default
                && (new_or_base || matches!(desc.default, DefaultRuntime::FromK3sSetting { .. }));
            let default_in_file = spec.set_default && !default_via_k3s;
            let declare = !by_k3s;
            let changes_file = t.text.is_some() || declare;
            if t.text.is_none() && declare {
                if let Some(v) = self.inv.version() {
                    if !v.has_base_template() {
                        return Err(SetupError::Refused(format!(
                            "k3s {v} predates {{{{ template \"base\" . }}}} (v1.24.17, v1.25.13, v1.26.8, v1.27.5, v1.28.1): a new {} would have to copy k3s's whole config. Use --mode docker or upgrade k3s",
                            t.path
                        )));
                    }
                }
            }
            if changes_file {
                let want = Want {
                    spec: &spec,
                    declare_runtime: declare,
                    set_default: default_in_file,
                    version: None,
                    copy: CopyFrom::ThisFile,
                };
                let edit = containerd::edit(Path::new(&t.path), t.text.as_deref(), flavor, want)?;
                let what = runtime_change(
                    "containerd",
                    &spec,
                    default_in_file.then_some("the default"),
                );
                let services = self.k3s_units();
                self.file(&t.path, t.text.clone(), edit, what, services)?;
            }
            if default_via_k3s {
                if new_or_base {
                    self.plan.notes.push(
                        "the base template emits the table holding default_runtime_name; the default is set through k3s's default-runtime setting instead".into(),
                    );
                }
                if let Some(v) = self.inv.version() {
                    if !v.has_default_runtime() {
                        return Err(SetupError::Refused(format!(
                            "k3s {v}: the base template owns default_runtime_name and this k3s has no default-runtime setting (v1.29.0+). Pass --no-set-default (pods then use runtimeClassName: {}) or use --mode docker",
                            spec.name
                        )));
                    }
                }
                self.k3s_default_setting(k)?;
            }
        }
        self.runtime_class()
    }

    /// `default-runtime: <name>` through our drop-in in the `.d` directory of the config
    /// file k3s reads, unless k3s's effective setting already says so. (A flag or a file
    /// read after ours that says otherwise is found by the check of the planned result.)
    fn k3s_default_setting(&mut self, k: &K3s) -> Result<()> {
        let name = self.spec().name.clone();
        let path = format!("{}/{K3S_DROP_IN}", k.drop_in_dir());
        let ours = self.host().read(&path)?;
        let content = k3s_yaml::drop_in(
            "containers run with the NVIDIA runtime by default",
            "default-runtime",
            &name,
        );
        let edit = match k.setting(&["default-runtime"]) {
            Some(s) if s.value == name => Edit::unchanged(),
            _ => Edit::replace(ours.as_deref(), content),
        };
        let services = self.k3s_units();
        self.file(
            &path,
            ours,
            edit,
            format!("k3s default-runtime is '{name}'"),
            services,
        )
    }

    /// A RuntimeClass so pods can ask for the runtime by name (servers only; k3s ≥ v1.29
    /// deploys its own for the names it detects).
    fn runtime_class(&mut self) -> Result<()> {
        let name = self.spec().name.clone();
        if !self.inv.is_k3s_server() {
            self.plan
                .notes
                .push("agent node: the RuntimeClass is deployed from a server".into());
            return Ok(());
        }
        if let Some(v) = self.inv.version() {
            if v.has_default_runtime() && K3S_RUNTIME_CLASSES.contains(&name.as_str()) {
                self.plan.notes.push(format!(
                    "k3s {v} deploys RuntimeClass '{name}' itself (runtimes.yaml); not adding another"
                ));
                return Ok(());
            }
        }
        let path = format!("{K3S_MANIFESTS_DIR}/edgegpu-runtimeclass-{name}.yaml");
        let content = format!(
            "# Written by edgegpu-node-setup: lets pods select the NVIDIA runtime with runtimeClassName: {name}\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {name}\nhandler: {name}\n"
        );
        let old = self.host().read(&path)?;
        let edit = Edit::replace(old.as_deref(), content);
        // k3s's deploy controller watches the folder: no restart needed.
        self.file(
            &path,
            old,
            edit,
            format!("RuntimeClass '{name}' manifest"),
            Vec::new(),
        )
    }

    /// The system containerd: the file whose CRI plugin table takes effect, as containerd
    /// merges its files (see [`Merge`]: before 2.0 the last file with the table the
    /// merged version names; from 2.0 the last one with a table that wins the merge) gets
    /// the runtime and the default. When the release is not known and the two rules
    /// name different files, the first edit that works under both is planned (else the
    /// first, which the check of the planned result refuses, naming what decides).
    fn system_containerd(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let c = Containerd::load(self.host())?;
        let basis = system_merges(self.host(), &c.files[0])?;
        let (merges, release) = (basis.merges, basis.why);
        let layers: Vec<Layer> = c.files.iter().map(Layer::of).collect();
        let merged: Vec<MergedCri> = merges.iter().map(|m| MergedCri::of(&layers, *m)).collect();
        if spec.set_default {
            legacy_default_settings(&merged, &spec)?;
        }
        let copy = merged[0].copy(&spec.name);
        let mut owners: Vec<(usize, Option<i64>)> = Vec::new();
        for m in &merged {
            let (file, version) = m.owner;
            let empty = c.files[file]
                .text
                .as_deref()
                .map_or(true, |t| t.trim().is_empty());
            // An empty file is written with a version of its own (2, read by both).
            let owner = (file, (!empty).then_some(version));
            if !owners.contains(&owner) {
                owners.push(owner);
            }
        }
        let mut planned = Vec::new();
        for &owner in &owners {
            let edit = self.system_edit(&c, owner, copy.as_ref())?;
            let works = owners.len() == 1 || self.works_everywhere(&c, owner.0, &edit, &merges)?;
            planned.push((owner, edit));
            if works {
                let last = planned.len() - 1;
                planned.swap(0, last);
                break;
            }
        }
        let ((file, _), edit) = planned.swap_remove(0);
        let owner = c.files[file].clone();
        if c.files.len() > 1 {
            self.plan.notes.push(format!(
                "containerd imports files; how they merge: {release}"
            ));
        } else if basis.signal == Signal::Binary {
            self.plan
                .notes
                .push(format!("containerd's release: {release}"));
        }
        if owner.path != c.config.value {
            let how = match merges.as_slice() {
                [Merge::Keys] => "containerd 2 merges imported tables key by key and this is the last file with the CRI plugin table",
                _ => "its CRI plugin table replaces the earlier one before containerd 2.0",
            };
            self.plan.notes.push(format!(
                "{} is imported by {} ({how}): editing {}",
                owner.path, c.config.value, owner.path
            ));
        }
        if let Some(copy) = &copy {
            self.plan.notes.push(format!(
                "runtime '{}' copies the settings of runtime '{}', which pods use now (SystemdCgroup included)",
                spec.name, copy.from
            ));
        }
        let what = runtime_change(
            "containerd",
            &spec,
            spec.set_default.then_some("the default"),
        );
        let services = self.system_containerd_services();
        self.file(&owner.path, owner.text.clone(), edit, what, services)
    }

    /// The edit of the system containerd's file `owner` (index in `c.files`, and the
    /// config version whose CRI plugin name to write under, `None`: the file's own).
    fn system_edit(
        &self,
        c: &Containerd,
        owner: (usize, Option<i64>),
        copy: Option<&RuntimeCopy>,
    ) -> Result<Edit> {
        let spec = self.spec();
        let f = &c.files[owner.0];
        let want = Want {
            spec,
            declare_runtime: true,
            set_default: spec.set_default,
            version: owner.1,
            copy: CopyFrom::Given(copy),
        };
        containerd::edit(Path::new(&f.path), f.text.as_deref(), Flavor::System, want)
    }

    /// Whether, with `edit` written to file `index`, containerd would use the runtime (as
    /// the default, if asked) however it merges its files (`merges`).
    fn works_everywhere(
        &self,
        c: &Containerd,
        index: usize,
        edit: &Edit,
        merges: &[Merge],
    ) -> Result<bool> {
        let spec = self.spec();
        let mut files = c.files.clone();
        if let Some(new) = &edit.new {
            let f = &mut files[index];
            f.description = containerd::describe(Path::new(&f.path), Some(new), Flavor::System)?;
            f.text = Some(new.clone());
        }
        let layers: Vec<Layer> = files.iter().map(Layer::of).collect();
        Ok(merges.iter().all(|m| {
            let merged = MergedCri::of(&layers, *m);
            (!spec.set_default || merged.default().value == spec.name)
                && merged.binary(&spec.name).value.as_deref() == Some(spec.path.as_str())
        }))
    }

    fn docker(&mut self) -> Result<()> {
        let spec = self.spec().clone();
        let d = Docker::load(self.host())?;
        // A --default-runtime flag decides, and the same setting in daemon.json would
        // stop dockerd: then the default is not written (the planned result says
        // whether the flag's value is the one asked for).
        let default_in_file = spec.set_default && d.default_flag.is_none();
        self.k3s_uses_docker()?;
        let path = d.daemon_json.value.clone();
        let old = self.host().read(&path)?;
        // JetPack's daemon.json names the runtime by its bare name, which dockerd looks
        // up on its PATH: fine when that finds --runtime-path.
        let basename = spec.path.rsplit('/').next().unwrap_or_default();
        let bare_name_ok = self
            .host()
            .executables_in(DEFAULT_PATH.split(':'), basename)
            .first()
            .is_some_and(|p| *p == spec.path);
        let want = daemon_json::Want {
            set_default: default_in_file,
            bare_name_ok,
        };
        let edit = daemon_json::edit(Path::new(&path), old.as_deref(), &spec, want)?;
        let what = runtime_change(
            "docker",
            &spec,
            default_in_file.then_some("default-runtime"),
        );
        // A reload picks up what apply adds; whatever it cannot carry out (see
        // reload_applies) gets a restart.
        let service = match &edit.new {
            Some(new) if !daemon_json::reload_applies(old.as_deref(), Some(new)) => {
                Service::DockerRestart
            }
            _ => Service::Docker,
        };
        self.file(&path, old, edit, what, vec![service])?;
        if self.inv.docker.is_none() {
            self.plan
                .notes
                .push("docker was not found under the root; daemon.json is prepared for it".into());
        }
        Ok(())
    }

    /// What each engine uses now, added to the checks: `check` never says "configured"
    /// while the effective default runtime (or the runtime's binary) is another.
    fn report_effective(&mut self) {
        let spec = self.spec().clone();
        for e in self.plan.effective.clone() {
            if spec.set_default {
                self.plan.checks.push(CheckItem {
                    file: e.default_runtime.source.to_string(),
                    what: format!(
                        "{}: effective default runtime is '{}' (now: '{}')",
                        e.engine, spec.name, e.default_runtime.value
                    ),
                    ok: e.default_runtime.value == spec.name,
                });
            }
            let now = e
                .runtime_binary
                .value
                .clone()
                .unwrap_or_else(|| "not registered".into());
            self.plan.checks.push(CheckItem {
                file: e.runtime_binary.source.to_string(),
                what: format!(
                    "{}: runtime '{}' runs {} (now: {now})",
                    e.engine, spec.name, spec.path
                ),
                ok: now == spec.path,
            });
        }
    }
}

/// Refuses to make a runc v2 runtime the default where containerd 1.x's deprecated CRI
/// settings decide the default (a `default_runtime` table) or need it under the legacy
/// shim (`systemd_cgroup`, `no_pivot`: the CRI plugin would not load), naming them as
/// the files say now (pkg/cri/config ValidatePluginConfig).
fn legacy_default_settings(merged: &[MergedCri], spec: &RuntimeSpec) -> Result<()> {
    let mut why = Vec::new();
    for m in merged {
        if let Some(at) = &m.legacy_default {
            why.push(format!(
                "{at}: {} uses the deprecated default_runtime table as its default runtime (named 'default'), whatever default_runtime_name says (pkg/cri/config ValidatePluginConfig): node-setup cannot make '{}' the default. Move its settings into a runtimes table (and default_runtime_name) and remove it, then run apply again; or pass --no-set-default to only register the runtime",
                m.merge.releases(),
                spec.name
            ));
        }
        for (key, at) in m.legacy_switches() {
            why.push(format!(
                "{at}: with runtime '{}' (io.containerd.runc.v2) as the default, {}'s CRI plugin would not load: the deprecated {key} only works while the default runtime runs under io.containerd.runtime.v1.linux (pkg/cri/config ValidatePluginConfig). Remove {key} (for systemd_cgroup: set SystemdCgroup = true in the options of each runtime instead) and run apply again; or pass --no-set-default to only register the runtime",
                spec.name,
                m.merge.releases()
            ));
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(SetupError::Refused(why.join("\n")))
    }
}

/// How the plan lists a runtime entry written to `engine`'s config file: the runtime, its
/// binary and, where the same file makes it the default, the setting that does.
fn runtime_change(engine: &str, spec: &RuntimeSpec, default_setting: Option<&str>) -> String {
    let entry = format!("{engine} runtime '{}' → {}", spec.name, spec.path);
    match default_setting {
        Some(setting) => format!("{entry} and {setting}"),
        None => entry,
    }
}
