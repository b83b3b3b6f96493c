//! Which mode `auto` picks from what is installed (`effective::inventory`), or whether the
//! requested one fits the host — with the reasons, so the operator can see why.

use crate::effective::engine::CONTAINERD;
use crate::effective::inventory::Inventory;
use crate::effective::k3s::{K3sEngine, K3S_TEMPLATES};
use crate::mode::{ContainerdTarget, Mode};
use edgegpu_host::error::{Result, SetupError};

/// The mode and the reasons for it.
#[derive(Debug, Clone)]
pub struct Choice {
    pub mode: Mode,
    pub findings: Vec<String>,
    pub reason: String,
    /// What the choice does beyond the runtime that the operator must know before
    /// applying it (auto moving k3s to another container engine), with what to pass
    /// instead.
    pub warnings: Vec<String>,
}

/// What `--mode` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModeRequest {
    /// Pick from what is installed (explained in the output).
    Auto,
    /// k3s config.yaml.d drop-in `default-runtime` (k3s >= v1.29.0) plus a RuntimeClass.
    K3sDefaultRuntime,
    /// containerd TOML: the system config.toml, or k3s's config*.toml.tmpl.
    Containerd,
    /// `--docker` in the k3s units and docker's daemon.json.
    Docker,
}

/// The engine every k3s service uses, or a refusal when they differ or one is unknown.
fn k3s_engine(inv: &Inventory) -> Result<Option<(K3sEngine, String)>> {
    let mut found: Option<(K3sEngine, String)> = None;
    for (k, engine) in inv.engines() {
        if let K3sEngine::UnknownEndpoint(e) = &engine {
            return Err(SetupError::Refused(format!(
                "{}: {} uses the CRI socket {} (container-runtime-endpoint), which is neither k3s's containerd nor the system containerd: node-setup cannot tell which runtime serves it. Configure that runtime by hand, or remove the setting",
                e.source,
                k.name(),
                e.value
            )));
        }
        let same_kind =
            |a: &K3sEngine, b: &K3sEngine| std::mem::discriminant(a) == std::mem::discriminant(b);
        match &found {
            // A run that was interrupted while adding --docker to the units: finish it.
            Some((K3sEngine::Docker(_), _)) if engine == K3sEngine::Embedded => {}
            Some((K3sEngine::Embedded, _)) if matches!(engine, K3sEngine::Docker(_)) => {
                found = Some((engine, k.name().to_string()));
            }
            Some((other, name)) if !same_kind(other, &engine) => {
                return Err(SetupError::Refused(format!(
                    "{name} and {} run containers differently ({other:?} / {engine:?}); configure them one at a time with --mode",
                    k.name()
                )));
            }
            Some(_) => {}
            None => found = Some((engine, k.name().to_string())),
        }
    }
    Ok(found)
}

/// Why k3s uses the system containerd, when it does.
fn uses_system_containerd(engine: &K3sEngine, unit: &str) -> Option<String> {
    match engine {
        K3sEngine::SystemContainerd(e) => Some(format!(
            "{unit} uses the system containerd's socket {} ({}): editing the system containerd's config",
            e.value, e.source
        )),
        K3sEngine::RequiresContainerdService(path) => Some(format!(
            "{path} requires containerd.service (meta-virtualization layout), so the system containerd serves k3s: editing the system containerd's config"
        )),
        _ => None,
    }
}

fn containerd_target(inv: &Inventory) -> Result<(ContainerdTarget, String)> {
    let Some((engine, unit)) = k3s_engine(inv)? else {
        return Ok((
            ContainerdTarget::System,
            "no k3s: editing the system containerd's config".into(),
        ));
    };
    if let K3sEngine::Docker(src) = &engine {
        return Err(SetupError::Refused(format!(
            "--mode containerd: {unit} runs with docker ({src}), so containerd's default runtime does not apply; use --mode docker (or remove the docker setting)"
        )));
    }
    if let Some(why) = uses_system_containerd(&engine, &unit) {
        return Ok((ContainerdTarget::System, why));
    }
    let mut why = format!(
        "{unit} runs its own containerd (no container-runtime-endpoint): editing its template (never the generated config.toml)"
    );
    if inv.system_containerd.is_some() {
        why.push_str(&format!(
            "; not editing {}: k3s does not use the system containerd",
            CONTAINERD.config
        ));
    }
    Ok((ContainerdTarget::K3sTemplate, why))
}

/// Picks the mode (or checks the requested one against the host).
pub fn choose(inv: &Inventory, request: ModeRequest) -> Result<Choice> {
    let findings = inv.findings();
    let (mode, reason) = match request {
        ModeRequest::Docker => (Mode::Docker, "--mode docker".to_string()),
        ModeRequest::Containerd => {
            let (target, why) = containerd_target(inv)?;
            (
                Mode::Containerd(target),
                format!("--mode containerd: {why}"),
            )
        }
        ModeRequest::K3sDefaultRuntime => {
            if !inv.has_k3s() {
                return Err(SetupError::Refused(
                    "--mode k3s-default-runtime: k3s is not installed under this root".into(),
                ));
            }
            match k3s_engine(inv)? {
                Some((K3sEngine::Docker(src), unit)) => {
                    return Err(SetupError::Refused(format!(
                        "--mode k3s-default-runtime: {unit} runs with docker ({src}); k3s's default-runtime only applies to its own containerd. Use --mode docker"
                    )))
                }
                Some((e, unit)) if uses_system_containerd(&e, &unit).is_some() => {
                    return Err(SetupError::Refused(format!(
                        "--mode k3s-default-runtime: {}; k3s's default-runtime does not apply to it. Use --mode containerd",
                        uses_system_containerd(&e, &unit).unwrap_or_default()
                    )))
                }
                _ => {}
            }
            (
                Mode::K3sDefaultRuntime,
                "--mode k3s-default-runtime".to_string(),
            )
        }
        ModeRequest::Auto => auto(inv)?,
    };
    let warnings = match (request, &mode) {
        (ModeRequest::Auto, Mode::Docker) => engine_switch(inv).into_iter().collect(),
        _ => Vec::new(),
    };
    Ok(Choice {
        mode,
        findings,
        reason,
        warnings,
    })
}

/// When auto's docker mode moves k3s services that run their own containerd to docker:
/// what that means and what to pass to keep containerd.
fn engine_switch(inv: &Inventory) -> Option<String> {
    let moved: Vec<String> = inv
        .engines()
        .into_iter()
        .filter(|(_, e)| *e == K3sEngine::Embedded)
        .map(|(k, _)| {
            k.unit
                .as_ref()
                .map_or("k3s".to_string(), |u| u.name.clone())
        })
        .collect();
    if moved.is_empty() {
        return None;
    }
    Some(format!(
        "auto moves {} from k3s's own containerd to docker: apply adds --docker to k3s, and after the restart its pods run under docker (images pulled into k3s's containerd are not in docker's image store). To keep k3s on containerd, pass --mode containerd --no-set-default (the runtime is registered, not made the default: pods ask for it with runtimeClassName), or upgrade k3s to v1.29.0 or later and run apply again (k3s-default-runtime mode)",
        moved.join(" and ")
    ))
}

fn auto(inv: &Inventory) -> Result<(Mode, String)> {
    if let Some((engine, unit)) = k3s_engine(inv)? {
        if let K3sEngine::Docker(src) = &engine {
            return Ok((
                Mode::Docker,
                format!("{unit} runs with docker ({src}), so docker's default runtime decides: docker mode"),
            ));
        }
        if let Some(why) = uses_system_containerd(&engine, &unit) {
            return Ok((
                Mode::Containerd(ContainerdTarget::System),
                format!("containerd mode: {why}"),
            ));
        }
        let template = inv.k3s.iter().find_map(|k| {
            K3S_TEMPLATES
                .iter()
                .map(|(n, _)| format!("{}/{n}", k.template_dir()))
                .find(|p| inv.host_has(p))
        });
        if let Some(path) = template {
            return Ok((
                Mode::Containerd(ContainerdTarget::K3sTemplate),
                format!("containerd mode: k3s renders its containerd config from the existing template {path}; editing it (never the generated config.toml)"),
            ));
        }
        return Ok(match inv.version() {
            Some(v) if v.has_default_runtime() => (
                Mode::K3sDefaultRuntime,
                format!("k3s {v} detects the NVIDIA runtime itself and has the default-runtime setting (v1.29.0+): k3s-default-runtime mode, no unit or TOML edits"),
            ),
            Some(v) if inv.docker.is_some() => (
                Mode::Docker,
                format!("k3s {v} predates the default-runtime setting (v1.29.0) and docker is installed: docker mode (the Wind River procedure)"),
            ),
            Some(v) => (
                Mode::Containerd(ContainerdTarget::K3sTemplate),
                format!("k3s {v} predates the default-runtime setting (v1.29.0): containerd mode on k3s's template"),
            ),
            None => (
                Mode::K3sDefaultRuntime,
                "k3s version unknown, assumed current (set --k3s-version or --mode to override): k3s-default-runtime mode".into(),
            ),
        });
    }
    if inv.docker.is_some() {
        return Ok((
            Mode::Docker,
            "no k3s; docker is installed: docker mode (daemon.json)".into(),
        ));
    }
    if inv.system_containerd.is_some() {
        return Ok((
            Mode::Containerd(ContainerdTarget::System),
            "no k3s; containerd is installed: containerd mode (/etc/containerd/config.toml)".into(),
        ));
    }
    Err(SetupError::Refused(
        "nothing to configure: no k3s, containerd or docker found under the root".into(),
    ))
}
