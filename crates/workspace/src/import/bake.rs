//! A bake file (`docker-bake.hcl`): one module per target that builds something of its own, with
//! `inherits` resolved (later parents over earlier ones, the target's own keys over all; `args`
//! and `contexts` merged key by key, as bake merges them), `variable` blocks at their defaults and
//! every `${…}` evaluated. A `contexts` entry `name = "target:other"` is an edge between modules.
//!
//! Variables take their defaults, never the environment of the `init` process: the mesh file is
//! the same on every machine. A target only other targets inherit, that no group lists and no
//! context names, is a template: no module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hcl::eval::{Context, Evaluate};
use hcl::{Body, Value};

use super::{
    Draft, DraftModule, INLINE_DOCKERFILE, add_args, context_edges, normalise, paths,
    set_dockerfile,
};
use crate::file::MeshError;

/// A target's keys once evaluated and with its parents merged in.
type Keys = BTreeMap<String, Value>;

/// Keys whose tables bake merges key by key along `inherits`.
const MERGED: &[&str] = &["args", "contexts", "labels"];

pub(super) fn read(file: &Path, dir: &Path, text: &str) -> Result<Draft, MeshError> {
    let body = hcl::parse(text).map_err(|e| parse_error(file, &e))?;
    let mut draft = Draft {
        mesh: normalise(
            &dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            "mesh",
        ),
        ..Draft::default()
    };
    let context = variables(&body, &mut draft.notes);
    let mut targets: Vec<(String, Keys, Vec<String>)> = Vec::new();
    let mut grouped: BTreeSet<String> = BTreeSet::new();
    for block in body.blocks() {
        let label = block
            .labels()
            .first()
            .map(|l| l.as_str().to_string())
            .unwrap_or_default();
        match block.identifier() {
            "target" => {
                let mut notes = Vec::new();
                let keys = evaluate(block.body(), &context, &mut notes);
                targets.push((label, keys, notes));
            }
            "group" => {
                let keys = evaluate(block.body(), &context, &mut draft.notes);
                grouped.extend(strings(keys.get("targets")));
            }
            "variable" => {}
            other => draft.notes.push(format!(
                "`{other} \"{label}\"`: not carried (meshtop reads targets, groups and variables)"
            )),
        }
    }
    let own: BTreeMap<String, Keys> = targets
        .iter()
        .map(|(name, keys, _)| (name.clone(), keys.clone()))
        .collect();
    let inherited: BTreeSet<String> = own
        .values()
        .flat_map(|keys| strings(keys.get("inherits")))
        .collect();
    let named: BTreeSet<String> = own
        .values()
        .flat_map(context_targets)
        .map(|(_, target)| target)
        .collect();
    for (name, _, notes) in targets {
        let template =
            inherited.contains(&name) && !grouped.contains(&name) && !named.contains(&name);
        if template {
            continue;
        }
        let keys = resolved(file, &own, &name, &mut Vec::new())?;
        let mut module = module(dir, &name, &keys);
        module.notes.splice(0..0, notes);
        draft.modules.push(module);
    }
    Ok(draft)
}

/// A file that does not parse, at its line and column.
fn parse_error(file: &Path, error: &hcl::Error) -> MeshError {
    let fix = "fix the syntax at this position (see the bake file reference)";
    match error {
        hcl::Error::Parse(parse) => MeshError::at(
            file,
            Some(parse.location().line()),
            Some(parse.location().column()),
            format!("not valid HCL: {}", parse.message()),
            fix,
        ),
        other => MeshError::at(file, None, None, format!("not valid HCL: {other}"), fix),
    }
}

/// Every `variable` at its default, in an evaluation context; a default naming another variable is
/// evaluated once that one is known.
fn variables(body: &Body, notes: &mut Vec<String>) -> Context<'static> {
    let mut pending: Vec<(String, hcl::Expression)> = body
        .blocks()
        .filter(|b| b.identifier() == "variable")
        .filter_map(|b| {
            let name = b.labels().first()?.as_str().to_string();
            let default = b
                .body()
                .attributes()
                .find(|a| a.key() == "default")
                .map(|a| a.expr().clone())
                .unwrap_or(hcl::Expression::String(String::new()));
            Some((name, default))
        })
        .collect();
    let mut context = Context::new();
    loop {
        let before = pending.len();
        pending.retain(|(name, expr)| match expr.evaluate(&context) {
            Ok(value) => {
                context.declare_var(name.clone(), value);
                false
            }
            Err(_) => true,
        });
        if pending.is_empty() || pending.len() == before {
            break;
        }
    }
    for (name, expr) in pending {
        if let Err(e) = expr.evaluate(&context) {
            notes.push(format!(
                "variable {name}: its default cannot be evaluated ({e})"
            ));
        }
    }
    context
}

/// A block's attributes evaluated; one that cannot be is noted and left out.
fn evaluate(body: &Body, context: &Context, notes: &mut Vec<String>) -> Keys {
    let mut keys = Keys::new();
    for attribute in body.attributes() {
        match attribute.expr().evaluate(context) {
            Ok(value) => {
                keys.insert(attribute.key().to_string(), value);
            }
            Err(e) => notes.push(format!(
                "`{}`: cannot be evaluated, not carried ({e})",
                attribute.key()
            )),
        }
    }
    keys
}

/// The strings of a list value (`inherits`, a group's `targets`).
fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

/// The `contexts` entries naming another target: (context name, target).
fn context_targets(keys: &Keys) -> Vec<(String, String)> {
    match keys.get("contexts") {
        Some(Value::Object(map)) => map
            .iter()
            .filter_map(|(name, v)| {
                Some((
                    name.clone(),
                    v.as_str()?.strip_prefix("target:")?.to_string(),
                ))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `name`'s keys with its parents' merged under them; a cycle of `inherits` is refused.
fn resolved(
    file: &Path,
    own: &BTreeMap<String, Keys>,
    name: &str,
    stack: &mut Vec<String>,
) -> Result<Keys, MeshError> {
    if stack.iter().any(|s| s == name) {
        stack.push(name.to_string());
        return Err(MeshError::at(
            file,
            None,
            None,
            format!("`inherits` goes round: {}", stack.join(" → ")),
            "remove one of these targets' `inherits`",
        ));
    }
    let Some(keys) = own.get(name) else {
        return Err(MeshError::at(
            file,
            None,
            None,
            format!("a target inherits {name}, which is no target of the file"),
            "name a target the file declares",
        ));
    };
    stack.push(name.to_string());
    let mut merged = Keys::new();
    for parent in strings(keys.get("inherits")) {
        let theirs = resolved(file, own, &parent, stack)?;
        merge(&mut merged, theirs);
    }
    stack.pop();
    merge(&mut merged, keys.clone());
    merged.remove("inherits");
    Ok(merged)
}

/// `over`'s keys over `into`'s; the tables of [`MERGED`] key by key.
fn merge(into: &mut Keys, over: Keys) {
    for (key, value) in over {
        match (into.get_mut(&key), value) {
            (Some(Value::Object(mine)), Value::Object(theirs))
                if MERGED.contains(&key.as_str()) =>
            {
                mine.extend(theirs);
            }
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// The module of a resolved target.
fn module(dir: &Path, name: &str, keys: &Keys) -> DraftModule {
    let mut module = DraftModule {
        source: name.to_string(),
        ..DraftModule::default()
    };
    let context = keys.get("context").and_then(Value::as_str).unwrap_or(".");
    if paths::is_remote(context) {
        module.skipped = Some(format!(
            "its context {context} is no directory here: meshtop builds from the repository's own files"
        ));
    }
    module.context = paths::join(dir, context);
    let mut edges = Vec::new();
    for (key, value) in keys {
        match key.as_str() {
            "context" => {}
            "dockerfile" => {
                set_dockerfile(&mut module, value.as_str().unwrap_or_default().to_string());
            }
            "dockerfile-inline" => {
                module.skipped = Some(INLINE_DOCKERFILE.into());
            }
            "target" => module.target = value.as_str().map(str::to_string),
            "args" => {
                if let Value::Object(map) = value {
                    add_args(&mut module, map.iter().map(|(k, v)| (k.clone(), scalar(v))));
                }
            }
            "contexts" => {
                let targets = context_targets(keys);
                if let Value::Object(map) = value {
                    for (ctx, v) in map {
                        if !targets.iter().any(|(n, _)| n == ctx) {
                            module.notes.push(format!(
                                "context {ctx} = {}: not another target, not carried",
                                v.as_str().unwrap_or("…")
                            ));
                        }
                    }
                }
                edges = targets;
            }
            "tags" => module
                .notes
                .push("`tags`: not carried (meshtop tags each build by its address)".into()),
            "platforms" => module.notes.push(format!(
                "`platforms` {}: not carried (set the module's `platforms` once its builders build them all)",
                strings(Some(value)).join(", ")
            )),
            other => module.notes.push(format!(
                "`{other}`: not carried (meshtop's build has no such setting)"
            )),
        }
    }
    context_edges(&mut module, edges);
    module
}

/// A bake value as meshtop's string: strings as written, numbers and booleans as HCL writes them.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn inherits_merge_args_and_let_the_target_win() {
        let text = r#"
variable "TAG" { default = "1" }
variable "FULL" { default = "v${TAG}" }
target "common" {
  args = { A = "common", B = "common" }
  dockerfile = "Common.Dockerfile"
}
target "app" {
  inherits = ["common"]
  args = { B = "${FULL}" }
}
"#;
        let body = hcl::parse(text).unwrap();
        let mut notes = Vec::new();
        let context = variables(&body, &mut notes);
        let own: BTreeMap<String, Keys> = body
            .blocks()
            .filter(|b| b.identifier() == "target")
            .map(|b| {
                (
                    b.labels()[0].as_str().to_string(),
                    evaluate(b.body(), &context, &mut notes),
                )
            })
            .collect();
        let keys = resolved(Path::new("f"), &own, "app", &mut Vec::new()).unwrap();
        let module = module(Path::new("/r"), "app", &keys);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(module.dockerfile.as_deref(), Some("Common.Dockerfile"));
        assert_eq!(
            module.args,
            BTreeMap::from([("A".into(), "common".into()), ("B".into(), "v1".into())])
        );
    }

    #[test]
    fn an_inherits_cycle_is_refused_naming_it() {
        let own = BTreeMap::from([
            (
                "a".to_string(),
                Keys::from([("inherits".into(), Value::from(vec!["b"]))]),
            ),
            (
                "b".to_string(),
                Keys::from([("inherits".into(), Value::from(vec!["a"]))]),
            ),
        ]);
        let e = resolved(Path::new("f"), &own, "a", &mut Vec::new()).unwrap_err();
        assert!(e.what.contains("a → b → a"), "{e}");
    }
}
