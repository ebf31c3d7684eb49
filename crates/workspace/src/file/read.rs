//! The rules for each table of the mesh file: which keys, which values. Cross-table checks (duplicates,
//! bases, paths) are in `file.rs`.
//! Long: one reader per table of the mesh file, each with its keys' rules and the fix each refusal
//! names; split by table, the shared key lists and value readers would be passed around.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;
use toml::de::DeValue;

use super::MeshError;
use super::compose::MACHINE_KEYS;
use super::names::{MAX_MACHINE_NAME, check_machine_name, check_name, check_registry, is_arg_name};
use super::table::{Pairs, Section, Source, cut, show};
use crate::mesh::model::{Backoff, BuildSecret, MultiPlatform, Platform, Policy, Registry, Target};
use crate::mesh::platform::UnknownPlatform;

pub(super) const TOP_KEYS: &[&str] = &["mesh", "target", "module", "machine", "builder"];
const MESH_KEYS: &[&str] = &[
    "name",
    "registry",
    "insecure_registry",
    "platforms",
    "publish",
    "trust",
    "multi_platform",
    "trusted_builders",
    "builder_id",
];
const TARGET_KEYS: &[&str] = &["kind", "namespace", "context", "rollout_deadline"];
const MODULE_KEYS: &[&str] = &[
    "name",
    "context",
    "dockerfile",
    "target",
    "base",
    "contexts",
    "policy",
    "platforms",
    "args",
    "rollout_restarts",
    "rollout_backoff",
    "max_unavailable",
    "secrets",
    "ssh",
];

type Value<'a, 'i> = &'a Spanned<DeValue<'i>>;

pub(super) struct Header {
    pub name: String,
    pub span: Range<usize>,
    pub registry: Option<Registry>,
    pub platforms: Vec<Platform>,
    pub publish: bool,
    /// `multi_platform = "pool" | "buildx"`: how a module with several platforms builds.
    pub multi_platform: MultiPlatform,
    /// `trust = [...]`: public key paths as written (relative to the mesh file), with their spans.
    pub trust: Vec<Spanned<String>>,
    /// `trusted_builders = [...]`: the builder ids whose provenance vouches, each with the keys
    /// that may claim it (empty: any).
    pub trusted_builders: Vec<crate::mesh::model::TrustedBuilder>,
    /// `builder_id = "…"`: what this mesh's builds name as their builder in their provenance.
    pub builder_id: Option<String>,
}

pub(super) struct RawModule {
    pub name: Spanned<String>,
    pub line: usize,
    pub context: Spanned<String>,
    pub dockerfile: Option<Spanned<String>>,
    /// `target`: the Dockerfile stage to build, checked against the Dockerfile's stages once found.
    pub target: Option<Spanned<String>>,
    pub base: Option<Spanned<String>>,
    /// `contexts = { lib = "lib" }`: the name the Dockerfile writes → the module it names.
    pub contexts: Pairs,
    pub policy: Policy,
    pub platforms: Option<Vec<Platform>>,
    pub args: BTreeMap<String, String>,
    pub backoff: Backoff,
    pub max_unavailable: Option<u32>,
    pub secrets: Vec<BuildSecret>,
    pub ssh: bool,
}

pub(super) struct RawMachine {
    pub name: Spanned<String>,
    pub module: Spanned<String>,
    /// The docker target it runs on.
    pub target: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub compose: Option<crate::mesh::model::ComposeService>,
    pub service: crate::mesh::service::Service,
}

/// `[mesh]`: name, registry (and publish), platforms.
pub(super) fn mesh_header(src: &Source<'_>, top: &Section<'_, '_>) -> Result<Header, MeshError> {
    let value = top.get("mesh").ok_or_else(|| {
        MeshError::at(
            src.file,
            Some(1),
            None,
            "the mesh file has no [mesh] table",
            "start it with [mesh] and name = \"demo\"",
        )
    })?;
    let mesh = Section::of(
        src,
        value,
        "[mesh]",
        MESH_KEYS,
        "write [mesh] on its own line, then its keys",
    )?;
    mesh.check_keys(src)?;
    let name = mesh.required_string(src, "name", "\"demo\"")?;
    check_name(src, &name, "mesh name")?;
    let (registry, publish) = registry_and_publish(src, &mesh)?;
    let platforms = platforms(src, &mesh)?.unwrap_or_default();
    let multi_platform = multi_platform(src, &mesh)?;
    let trust = match mesh.string_list(src, "trust", "[\"keys/ci.pub\"]")? {
        Some(list) if list.get_ref().is_empty() => {
            return Err(src.err(
                &list.span(),
                "`trust` in [mesh] is empty: no key could ever vouch",
                "list the public keys CI signs with, e.g. trust = [\"keys/ci.pub\"], or remove the key",
            ));
        }
        Some(list) => list.into_inner(),
        None => Vec::new(),
    };
    let trusted_builders = super::trust::trusted_builders(src, &mesh, &trust)?;
    let builder_id = mesh
        .string(src, "builder_id", "\"https://ci.example/builder\"")?
        .map(Spanned::into_inner);
    Ok(Header {
        trust,
        trusted_builders,
        builder_id,
        publish,
        multi_platform,
        name: name.into_inner(),
        span: mesh.span.clone(),
        registry,
        platforms,
    })
}

/// `[mesh]`'s `registry` (with `insecure_registry`) and whether it `publish`es there: the two flags
/// mean something only with a registry, and are refused without one.
fn registry_and_publish(
    src: &Source<'_>,
    mesh: &Section<'_, '_>,
) -> Result<(Option<Registry>, bool), MeshError> {
    let insecure = mesh.boolean(src, "insecure_registry")?;
    let publish = mesh.boolean(src, "publish")?;
    let registry = match mesh.string(src, "registry", "\"localhost:5000\"")? {
        Some(host) => {
            check_registry(host.get_ref())
                .map_err(|(what, fix)| src.err(&host.span(), what, fix))?;
            Some(Registry {
                host: host.into_inner(),
                insecure: insecure.map(Spanned::into_inner).unwrap_or(false),
            })
        }
        None => {
            // A key that only means something with a registry, set without one.
            let orphan = [("insecure_registry", &insecure), ("publish", &publish)]
                .into_iter()
                .find_map(|(key, flag)| Some((key, flag.as_ref()?)));
            if let Some((key, flag)) = orphan {
                return Err(src.err(
                    &flag.span(),
                    format!("`{key}` in [mesh] is set but there is no `registry`"),
                    format!("add registry = \"host:port\" or remove {key}"),
                ));
            }
            None
        }
    };
    let publish = registry.is_some() && publish.is_some_and(Spanned::into_inner);
    Ok((registry, publish))
}

/// `[mesh]`'s `multi_platform`: how a module of several platforms builds (`pool` by default).
fn multi_platform(src: &Source<'_>, mesh: &Section<'_, '_>) -> Result<MultiPlatform, MeshError> {
    let Some(word) = mesh.string(src, "multi_platform", "\"buildx\"")? else {
        return Ok(MultiPlatform::Pool);
    };
    match word.get_ref().as_str() {
        "pool" => Ok(MultiPlatform::Pool),
        "buildx" => Ok(MultiPlatform::Buildx),
        other => Err(src.err(
            &word.span(),
            format!("`multi_platform` in [mesh] is {other:?}, which meshtop does not know"),
            "write multi_platform = \"pool\" (each platform on a builder that builds it; the default) or \"buildx\" (this machine's docker buildx)",
        )),
    }
}

/// `[target]`: docker (default) or kubernetes with namespace, context and rollout_deadline (the last
/// returned beside the target).
pub(super) fn target(
    src: &Source<'_>,
    value: Option<Value<'_, '_>>,
    mesh_name: &str,
) -> Result<(Target, Option<std::time::Duration>), MeshError> {
    let Some(value) = value else {
        return Ok((Target::Docker, None));
    };
    let target = Section::of(
        src,
        value,
        "[target]",
        TARGET_KEYS,
        "write [target] on its own line, then kind = \"docker\"",
    )?;
    target.check_keys(src)?;
    target_kind(src, &target, mesh_name)
}

/// The kind of a target's table and its settings (namespace, context, rollout_deadline), checked;
/// messages name the table as its label does (`[target]`, `target "prod"`).
pub(super) fn target_kind(
    src: &Source<'_>,
    target: &Section<'_, '_>,
    mesh_name: &str,
) -> Result<(Target, Option<std::time::Duration>), MeshError> {
    let label = &target.label;
    let kind = target.string(src, "kind", "\"docker\"")?;
    let namespace = target.string(src, "namespace", "\"demo\"")?;
    let context = target.string(src, "context", "\"kind-demo\"")?;
    let deadline = target.string(src, "rollout_deadline", "\"15m\"")?;
    let rollout_deadline = match &deadline {
        None => None,
        Some(text) => Some(parse_duration(text.get_ref()).ok_or_else(|| {
            src.err(
                &text.span(),
                format!("`rollout_deadline` in {label} is not a duration: {}", show(text.get_ref())),
                "write a whole number of seconds, minutes or hours, e.g. rollout_deadline = \"15m\"",
            )
        })?),
    };
    match kind.as_ref().map(|k| k.get_ref().as_str()) {
        None | Some("docker") => {
            for (key, given) in [
                ("namespace", &namespace),
                ("context", &context),
                ("rollout_deadline", &deadline),
            ] {
                if let Some(given) = given {
                    return Err(src.err(
                        &given.span(),
                        format!(
                            "`{key}` in {label} is a kubernetes setting, but the target is docker"
                        ),
                        format!("remove `{key}`, or set kind = \"kubernetes\""),
                    ));
                }
            }
            Ok((Target::Docker, None))
        }
        Some("kubernetes") => {
            let namespace = match namespace {
                Some(ns) => {
                    check_name(src, &ns, "kubernetes namespace")?;
                    ns.into_inner()
                }
                None => mesh_name.to_string(),
            };
            if let Some(ctx) = &context
                && ctx.get_ref().trim().is_empty()
            {
                return Err(src.err(
                    &ctx.span(),
                    format!("`context` in {label} is empty"),
                    "name a kubeconfig context, or remove the key to use the current one",
                ));
            }
            Ok((
                Target::Kubernetes {
                    namespace,
                    context: context.map(Spanned::into_inner),
                },
                rollout_deadline,
            ))
        }
        Some(other) => {
            let span = kind.as_ref().map(|k| k.span()).unwrap_or_default();
            Err(src.err(
                &span,
                format!("unknown target kind {}", show(other)),
                "write kind = \"docker\" or kind = \"kubernetes\"",
            ))
        }
    }
}

/// `90s`, `15m`, `1h` (a whole, positive number and a unit).
fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let unit = text.chars().last()?;
    let seconds = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        _ => return None,
    };
    let number: u64 = text[..text.len() - 1].parse().ok().filter(|n| *n > 0)?;
    number
        .checked_mul(seconds)
        .map(std::time::Duration::from_secs)
}

/// The elements of an array of tables (`[[module]]`), or of an inline array of tables.
pub(super) fn elements<'a, 'i>(
    src: &Source<'_>,
    value: Option<Value<'a, 'i>>,
    key: &str,
) -> Result<Vec<Value<'a, 'i>>, MeshError> {
    match value.map(|v| (v, v.get_ref())) {
        None => Ok(Vec::new()),
        Some((_, DeValue::Array(items))) => Ok(items.iter().collect()),
        Some((v, _)) => Err(src.err(
            &v.span(),
            format!("`{key}` must be an array of tables"),
            format!("declare each one under its own [[{key}]] header (double brackets)"),
        )),
    }
}

/// Every `[[module]]`, in file order, with its own checks done.
pub(super) fn modules(
    src: &Source<'_>,
    value: Option<Value<'_, '_>>,
    header: &Header,
) -> Result<Vec<RawModule>, MeshError> {
    let items = elements(src, value, "module")?;
    if items.is_empty() {
        return Err(src.err(
            &header.span,
            "the mesh declares no module",
            "add a [[module]] table with name = \"…\" and context = \"…\"",
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let line = src.line(&item.span());
        let mut module = Section::of(
            src,
            item,
            format!("the [[module]] at line {line}"),
            MODULE_KEYS,
            "use [[module]] tables",
        )?;
        if let Some(name) = module.get("name").and_then(|v| v.get_ref().as_str()) {
            module.label = format!("module {}", show(name));
        }
        module.check_keys(src)?;
        let name = module.required_string(src, "name", "\"api\"")?;
        check_name(src, &name, "module name")?;
        let context = module.required_string(
            src,
            "context",
            "\"api\" (a directory relative to mesh.toml)",
        )?;
        let dockerfile = module.string(src, "dockerfile", "\"Dockerfile\"")?;
        let target = module.string(src, "target", "\"run\" (a stage: FROM … AS run)")?;
        if let Some(stage) = &target
            && !super::names::is_stage_name(stage.get_ref())
        {
            return Err(src.err(
                &stage.span(),
                format!(
                    "`target` {} of {} is not a stage name",
                    show(stage.get_ref()),
                    module.label
                ),
                "name a stage of the Dockerfile as its `FROM … AS <name>` writes it: a letter, then letters, digits, '_', '-' or '.'",
            ));
        }
        let base = module.string(src, "base", "\"base\" (another module's name)")?;
        let policy = match module.string(src, "policy", "\"rollout\"")? {
            None => Policy::Rollout,
            Some(p) => match p.get_ref().as_str() {
                "rollout" => Policy::Rollout,
                "record" => Policy::Record,
                other => {
                    return Err(src.err(
                        &p.span(),
                        format!("unknown policy {} for {}", show(other), module.label),
                        "write policy = \"rollout\" or policy = \"record\"",
                    ));
                }
            },
        };
        let platforms = platforms(src, &module)?;
        let backoff = backoff(src, &module)?;
        let max_unavailable = module
            .count(src, "max_unavailable", "1")?
            .map(Spanned::into_inner);
        let mut args = BTreeMap::new();
        for (key, value) in module
            .string_map(src, "args", "{ KEY = \"value\" }")?
            .unwrap_or_default()
        {
            let k = key.get_ref();
            if k == "BASE" {
                return Err(src.err(
                    &key.span(),
                    format!("{} declares the build arg BASE, which meshtop reserves", module.label),
                    "remove it: meshtop sets BASE to the base module's artifact (use `ARG BASE` and `FROM ${BASE}`)",
                ));
            }
            if !is_arg_name(k) {
                return Err(src.err(
                    &key.span(),
                    format!(
                        "build arg `{}` of {} is not a valid name",
                        cut(k),
                        module.label
                    ),
                    "use letters, digits and '_', not starting with a digit",
                ));
            }
            args.insert(k.clone(), value.into_inner());
        }
        let secrets = super::secrets::secrets(src, &module)?;
        let ssh = super::secrets::ssh(src, &module)?;
        let contexts = named_contexts(src, &module)?;
        out.push(RawModule {
            name,
            line,
            context,
            dockerfile,
            target,
            base,
            contexts,
            policy,
            platforms,
            args,
            backoff,
            max_unavailable,
            secrets,
            ssh,
        });
    }
    Ok(out)
}

/// `contexts = { lib = "lib" }` of a `[[module]]`: each name as a Dockerfile writes it (`FROM lib`,
/// `COPY --from=lib`) and the module whose artifact it names (which module exists is checked with
/// the tiers, once every module is read).
fn named_contexts(src: &Source<'_>, module: &Section<'_, '_>) -> Result<Pairs, MeshError> {
    let pairs = module
        .string_map(
            src,
            "contexts",
            "{ lib = \"lib\" } (the name in the Dockerfile = a module)",
        )?
        .unwrap_or_default();
    for (name, target) in &pairs {
        if !is_context_name(name.get_ref()) {
            return Err(src.err(
                &name.span(),
                format!("named context `{}` of {} is not a name a Dockerfile can write after FROM", cut(name.get_ref()), module.label),
                "use lowercase letters, digits, '.', '_', '-' and '/', starting with a letter or digit (not `scratch`)",
            ));
        }
        if let Some(module_name) = target.get_ref().strip_prefix("target:") {
            return Err(src.err(
                &target.span(),
                format!(
                    "named context `{}` of {} is written as bake writes it",
                    cut(name.get_ref()),
                    module.label
                ),
                format!(
                    "write the module's name alone: {} = \"{}\"",
                    name.get_ref(),
                    cut(module_name)
                ),
            ));
        }
    }
    Ok(pairs)
}

/// What BuildKit's Dockerfile frontend reads after `FROM` as an image name (lowercase), not
/// `scratch`, which names no image.
fn is_context_name(name: &str) -> bool {
    name != "scratch"
        && name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | '/')
        })
}

/// `rollout_restarts` and `rollout_backoff` of a `[[module]]`: when a back-off of its new pods fails a send.
fn backoff(src: &Source<'_>, module: &Section<'_, '_>) -> Result<Backoff, MeshError> {
    let mut backoff = Backoff::default();
    if let Some(restarts) = module.count(src, "rollout_restarts", "3")? {
        backoff.restarts = restarts.into_inner();
    }
    if let Some(text) = module.string(src, "rollout_backoff", "\"60s\"")? {
        backoff.persists = parse_duration(text.get_ref()).ok_or_else(|| {
            src.err(
                &text.span(),
                format!(
                    "`rollout_backoff` in {} is not a duration: {}",
                    module.label,
                    show(text.get_ref())
                ),
                "write a whole number of seconds, minutes or hours, e.g. rollout_backoff = \"60s\"",
            )
        })?;
    }
    Ok(backoff)
}

/// Every `[[machine]]`, in file order (docker targets only: `docker` names them, in file order;
/// `named`: the mesh names its targets with `[[target]]`).
pub(super) fn machines(
    src: &Source<'_>,
    value: Option<Value<'_, '_>>,
    docker: &[&str],
    named: bool,
) -> Result<Vec<RawMachine>, MeshError> {
    let items = elements(src, value, "machine")?;
    if let (Some(first), true) = (items.first(), docker.is_empty()) {
        let what = if named {
            "[[machine]] tables are for docker targets, but every target of this mesh is kubernetes"
        } else {
            "[[machine]] tables are for the docker target, but the target is kubernetes"
        };
        return Err(src.err(
            &first.span(),
            what,
            "remove them: on kubernetes, machines are workloads labelled jr2.dev/module=<module>",
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let line = src.line(&item.span());
        let mut machine = Section::of(
            src,
            item,
            format!("the [[machine]] at line {line}"),
            MACHINE_KEYS,
            "use [[machine]] tables",
        )?;
        if let Some(name) = machine.get("name").and_then(|v| v.get_ref().as_str()) {
            machine.label = format!("machine {}", show(name));
        }
        machine.check_keys(src)?;
        let name = machine.required_string(src, "name", "\"api-1\"")?;
        if let Err(problem) = check_machine_name(name.get_ref()) {
            return Err(src.err(
                &name.span(),
                format!("machine name {} {problem}", show(name.get_ref())),
                format!(
                    "a machine name is a container name: [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most {MAX_MACHINE_NAME} characters"
                ),
            ));
        }
        let module = machine.required_string(src, "module", "\"api\" (a module of this mesh)")?;
        let target = machine_target(src, &machine, docker)?;
        let compose = super::compose::compose(src, &machine)?;
        let service = super::service::service(src, &machine)?;
        let command = machine
            .string_list(src, "command", "[\"sh\", \"-c\", \"sleep 3600\"]")?
            .map(|list| {
                list.into_inner()
                    .into_iter()
                    .map(Spanned::into_inner)
                    .collect()
            })
            .unwrap_or_default();
        let mut env = BTreeMap::new();
        for (key, value) in machine
            .string_map(src, "env", "{ KEY = \"value\" }")?
            .unwrap_or_default()
        {
            let k = key.get_ref();
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(src.err(
                    &key.span(),
                    format!(
                        "environment variable `{}` of {} is not a valid name",
                        cut(k),
                        machine.label
                    ),
                    "use a non-empty name without '='",
                ));
            }
            env.insert(k.clone(), value.into_inner());
        }
        out.push(RawMachine {
            name,
            module,
            target,
            command,
            env,
            compose,
            service,
        });
    }
    Ok(out)
}

/// The docker target a `[[machine]]` runs on: its `target`, else the mesh's only docker target.
fn machine_target(
    src: &Source<'_>,
    machine: &Section<'_, '_>,
    docker: &[&str],
) -> Result<String, MeshError> {
    let given = machine.string(src, "target", "\"staging\" (a docker target of this mesh)")?;
    match (given, docker) {
        (Some(target), _) if docker.contains(&target.get_ref().as_str()) => Ok(target.into_inner()),
        (Some(target), _) => Err(src.err(
            &target.span(),
            format!(
                "{} runs on target {}, which is not a docker target of this mesh",
                machine.label,
                show(target.get_ref())
            ),
            super::typos::suggest_target(target.get_ref(), docker),
        )),
        (None, [only]) => Ok((*only).to_string()),
        (None, _) => Err(src.err(
            &machine.span,
            format!(
                "{} names no target, and the mesh has {} docker targets ({})",
                machine.label,
                docker.len(),
                docker.join(", ")
            ),
            format!(
                "add target = {} (the docker target it runs on)",
                show(docker.first().copied().unwrap_or("default"))
            ),
        )),
    }
}

/// `platforms = [...]` of a section: each known, none twice, not empty; sorted.
pub(super) fn platforms(
    src: &Source<'_>,
    section: &Section<'_, '_>,
) -> Result<Option<Vec<Platform>>, MeshError> {
    let Some(list) = section.string_list(src, "platforms", "[\"linux/amd64\"]")? else {
        return Ok(None);
    };
    if list.get_ref().is_empty() {
        return Err(src.err(
            &list.span(),
            format!("`platforms` of {} is empty", section.label),
            "list at least one platform, or remove the key to use the default (the daemon's own)",
        ));
    }
    let mut out: Vec<Platform> = Vec::with_capacity(list.get_ref().len());
    for item in list.get_ref() {
        let platform = Platform::parse(item.get_ref()).map_err(|_| {
            let fix = UnknownPlatform::fix();
            src.err(
                &item.span(),
                format!(
                    "unknown platform {} in {}",
                    show(item.get_ref()),
                    section.label
                ),
                fix,
            )
        })?;
        if out.contains(&platform) {
            return Err(src.err(
                &item.span(),
                format!("platform {platform} is listed twice in {}", section.label),
                "remove the duplicate",
            ));
        }
        out.push(platform);
    }
    out.sort();
    Ok(Some(out))
}
