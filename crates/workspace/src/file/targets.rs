//! The targets of a mesh file: a single `[target]` table (named `default`, as before targets had
//! names), or `[[target]]` tables, each naming its target, its kind and settings, where it is
//! promoted from and whether it holds its machines (`policy = "record"`).

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;
use toml::de::DeValue;

use super::MeshError;
use super::names::check_name;
use super::read::{self, elements};
use super::table::{Section, Source, show};
use super::typos::suggest_target;
use crate::mesh::model::{Environment, Policy, Target};

/// The keys of a `[[target]]` table.
const NAMED_KEYS: &[&str] = &[
    "name",
    "kind",
    "namespace",
    "context",
    "rollout_deadline",
    "promote_from",
    "policy",
    "require_signed",
    "require_provenance",
];

type Value<'a, 'i> = &'a Spanned<DeValue<'i>>;

/// The mesh's targets, read and checked.
pub(super) struct Targets {
    pub targets: BTreeMap<String, Target>,
    /// In file order: the first is the one a command acts on when it names none.
    pub environments: Vec<Environment>,
    /// The single `[target]`'s `rollout_deadline` (the mesh's, as before targets had names).
    pub rollout_deadline: Option<std::time::Duration>,
}

impl Targets {
    /// The names of the targets `[[machine]]` tables may run on (the docker ones), in file order:
    /// the reader asks this, so that a kind that takes declared machines is said here alone.
    pub(super) fn machine_targets(&self) -> Vec<&str> {
        self.environments
            .iter()
            .filter(|e| matches!(self.targets.get(&e.name), Some(Target::Docker)))
            .map(|e| e.name.as_str())
            .collect()
    }

    pub(super) fn named(&self) -> bool {
        self.environments.iter().any(|e| e.named)
    }
}

/// `target`: absent (the host daemon), a `[target]` table, or `[[target]]` tables.
pub(super) fn targets(
    src: &Source<'_>,
    value: Option<Value<'_, '_>>,
    mesh_name: &str,
) -> Result<Targets, MeshError> {
    if let Some(value) = value
        && let DeValue::Array(_) = value.get_ref()
    {
        return named(src, value, mesh_name);
    }
    let (target, rollout_deadline) = read::target(src, value, mesh_name)?;
    let line = value.map_or(0, |v| src.line(&v.span()));
    Ok(Targets {
        targets: crate::mesh::model::single_target(target),
        environments: vec![Environment {
            rollout_deadline,
            line,
            ..Environment::default_one()
        }],
        rollout_deadline,
    })
}

/// One `[[target]]` as read, before the checks across targets.
struct Raw {
    name: Spanned<String>,
    span: Range<usize>,
    target: Target,
    promote_from: Option<Spanned<String>>,
    environment: Environment,
}

/// Every `[[target]]`: names unique, a kubernetes one names its context, no two share one
/// namespace of one context (they would share one record), `promote_from` names another target
/// and no chain comes back on itself.
fn named(src: &Source<'_>, value: Value<'_, '_>, mesh_name: &str) -> Result<Targets, MeshError> {
    let items = elements(src, Some(value), "target")?;
    if items.is_empty() {
        return Err(src.err(
            &value.span(),
            "`target` is an empty list",
            "declare each target in its own [[target]] table, or remove the key (the target is then the host daemon)",
        ));
    }
    let mut raws: Vec<Raw> = Vec::with_capacity(items.len());
    for item in items {
        let raw = one(src, item, mesh_name)?;
        if let Some(first) = raws.iter().find(|r| r.name.get_ref() == raw.name.get_ref()) {
            return Err(src.err(
                &raw.name.span(),
                format!(
                    "target {} is declared twice (lines {} and {})",
                    show(raw.name.get_ref()),
                    first.environment.line,
                    raw.environment.line
                ),
                "rename one of them or remove the duplicate [[target]] table",
            ));
        }
        raws.push(raw);
    }
    shared_namespaces(src, &raws)?;
    sources(src, &raws)?;
    Ok(Targets {
        targets: raws
            .iter()
            .map(|r| (r.name.get_ref().clone(), r.target.clone()))
            .collect(),
        environments: raws.into_iter().map(|r| r.environment).collect(),
        rollout_deadline: None,
    })
}

/// One `[[target]]` table, its own keys checked.
fn one(src: &Source<'_>, item: Value<'_, '_>, mesh_name: &str) -> Result<Raw, MeshError> {
    let line = src.line(&item.span());
    let mut section = Section::of(
        src,
        item,
        format!("the [[target]] at line {line}"),
        NAMED_KEYS,
        "use [[target]] tables",
    )?;
    if let Some(name) = section.get("name").and_then(|v| v.get_ref().as_str()) {
        section.label = format!("target {}", show(name));
    }
    section.check_keys(src)?;
    let name = section.required_string(src, "name", "\"staging\"")?;
    check_name(src, &name, "target name")?;
    let (target, rollout_deadline) = read::target_kind(src, &section, mesh_name)?;
    if let Target::Kubernetes { context: None, .. } = &target {
        return Err(src.err(
            &section.span,
            format!("{} is kubernetes and names no `context`", section.label),
            "a named target always uses the context it names, never the kubeconfig's current one: add context = \"<a context of your kubeconfig>\"",
        ));
    }
    let promote_from = section.string(src, "promote_from", "\"staging\" (another target)")?;
    let policy = match section.string(src, "policy", "\"record\"")? {
        None => None,
        Some(p) if p.get_ref() == "record" => Some(Policy::Record),
        Some(p) => {
            return Err(src.err(
                &p.span(),
                format!("unknown policy {} for {}", show(p.get_ref()), section.label),
                "a target's policy can only hold its machines: write policy = \"record\" (machines there move only when a person sends or promotes), or remove the key to follow each module's own policy",
            ));
        }
    };
    let require_signed = section
        .boolean(src, "require_signed")?
        .is_some_and(Spanned::into_inner);
    let require_provenance = section
        .boolean(src, "require_provenance")?
        .is_some_and(Spanned::into_inner);
    Ok(Raw {
        span: section.span.clone(),
        environment: Environment {
            require_signed,
            require_provenance,
            name: name.get_ref().clone(),
            promote_from: promote_from.as_ref().map(|p| p.get_ref().clone()),
            policy,
            named: true,
            rollout_deadline,
            line,
        },
        name,
        target,
        promote_from,
    })
}

/// Two kubernetes targets in one namespace of one context would share one record, lock and pins.
fn shared_namespaces(src: &Source<'_>, raws: &[Raw]) -> Result<(), MeshError> {
    let mut seen: BTreeMap<(String, String), &Raw> = BTreeMap::new();
    for raw in raws {
        let Target::Kubernetes {
            namespace,
            context: Some(context),
        } = &raw.target
        else {
            continue;
        };
        let key = (context.clone(), namespace.clone());
        if let Some(first) = seen.insert(key, raw) {
            return Err(src.err(
                &raw.span,
                format!(
                    "targets {} and {} both name context {}, namespace {}: they would share one record, one lock and one history",
                    show(first.name.get_ref()),
                    show(raw.name.get_ref()),
                    show(context),
                    show(namespace)
                ),
                "give each target its own namespace (namespace = \"…\") or its own context",
            ));
        }
    }
    Ok(())
}

/// `promote_from` names another target of the mesh, and following it never comes back.
fn sources(src: &Source<'_>, raws: &[Raw]) -> Result<(), MeshError> {
    let names: Vec<&str> = raws.iter().map(|r| r.name.get_ref().as_str()).collect();
    for raw in raws {
        let Some(from) = &raw.promote_from else {
            continue;
        };
        if from.get_ref() == raw.name.get_ref() {
            return Err(src.err(
                &from.span(),
                format!(
                    "target {} names itself as its promote_from",
                    show(raw.name.get_ref())
                ),
                "name the target its artifacts come from, or remove promote_from",
            ));
        }
        if !names.contains(&from.get_ref().as_str()) {
            let others: Vec<&str> = names
                .iter()
                .copied()
                .filter(|n| n != raw.name.get_ref())
                .collect();
            return Err(src.err(
                &from.span(),
                format!(
                    "target {} is promoted from {}, which is not a target of this mesh",
                    show(raw.name.get_ref()),
                    show(from.get_ref())
                ),
                suggest_target(from.get_ref(), &others),
            ));
        }
    }
    for raw in raws {
        let mut chain = vec![raw.name.get_ref().as_str()];
        let mut at = raw;
        while let Some(from) = &at.promote_from {
            let Some(next) = raws.iter().find(|r| r.name.get_ref() == from.get_ref()) else {
                break;
            };
            chain.push(next.name.get_ref());
            if next.name.get_ref() == raw.name.get_ref() {
                chain.reverse();
                return Err(src.err(
                    &raw.span,
                    format!("promote_from cycle: {}", chain.join(" → ")),
                    "artifacts go one way along promote_from: remove or change one of these promote_from keys",
                ));
            }
            if chain.len() > raws.len() {
                break;
            }
            at = next;
        }
    }
    Ok(())
}
