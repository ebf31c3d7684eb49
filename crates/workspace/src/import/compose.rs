//! A compose file (`compose.yaml`, `docker-compose.yml`): one module per service with `build:`,
//! every service a machine of the compose project (with its module when one builds it).
//!
//! Values are interpolated as compose does (`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `$$`),
//! from the `.env` file beside the compose file and the defaults written in it; the environment
//! of the `init` process is not read, so the mesh file is the same on every machine.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{
    Draft, DraftMachine, DraftModule, INLINE_DOCKERFILE, add_args, context_edges, normalise, paths,
    scalar, set_dockerfile,
};
use crate::file::MeshError;

/// What the reader of one compose file knows besides a service.
struct Compose<'a> {
    dir: &'a Path,
    env: BTreeMap<String, String>,
    project: String,
}

/// The keys of a service the mesh file carries; compose keeps every other one.
const CARRIED: &[&str] = &["build", "image"];

/// A `${VAR}` that neither `.env` nor a default answers.
#[derive(Debug)]
struct Unset(String);

pub(super) fn read(file: &Path, dir: &Path, text: &str) -> Result<Draft, MeshError> {
    let doc = super::yaml_documents(file, text)?
        .into_iter()
        .next()
        .unwrap_or(Value::Null);
    let Some(services) = doc.get("services").and_then(Value::as_object) else {
        return Err(MeshError::at(
            file,
            None,
            None,
            "holds no `services` table",
            "give a compose file with `services:`",
        ));
    };
    let env = dot_env(&dir.join(".env"));
    let project = match doc.get("name").and_then(Value::as_str) {
        Some(name) => name.to_string(),
        None => project_name(dir),
    };
    let compose = Compose { dir, env, project };
    let mut draft = Draft {
        mesh: normalise(&compose.project, "mesh"),
        ..Draft::default()
    };
    if let Some(top) = doc.as_object() {
        for key in top.keys() {
            let why = match key.as_str() {
                "services" | "name" | "version" => continue,
                "include" => "the files it includes are not read: run init on each",
                k if k.starts_with("x-") => "an extension: compose's own",
                _ => "compose's own: compose keeps creating them (meshtop never runs `compose up`)",
            };
            draft.notes.push(format!("top-level `{key}`: {why}"));
        }
    }
    for (name, spec) in services {
        compose.service(&mut draft, name, spec);
    }
    Ok(draft)
}

/// Compose's project name of a directory: its name in lower case, keeping only `a-z0-9_-`, not
/// starting with `_` or `-`.
fn project_name(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    name.chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'))
        .collect::<String>()
        .trim_start_matches(['_', '-'])
        .to_string()
}

/// `KEY=value` lines of a `.env` file (comments and blank lines skipped, quotes dropped).
fn dot_env(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let unquoted = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            (k.trim().to_string(), unquoted.to_string())
        })
        .collect()
}

/// `text` with compose's interpolation done from `env`.
fn interpolate(text: &str, env: &BTreeMap<String, String>) -> Result<String, Unset> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or_else(|| Unset(after.to_string()))?;
            let inner = &braced[..end];
            let (name, default) = match inner.find([':', '-', '?', '+']) {
                Some(i) => (&inner[..i], Some(&inner[i..])),
                None => (inner, None),
            };
            let value = env.get(name).filter(|v| !v.is_empty());
            let set = env.get(name);
            let got = match default {
                None => set.cloned(),
                Some(d) if d.starts_with(":-") => value.cloned().or(Some(d[2..].to_string())),
                Some(d) if d.starts_with('-') => set.cloned().or(Some(d[1..].to_string())),
                Some(d) if d.starts_with(":+") => {
                    Some(value.map_or(String::new(), |_| d[2..].to_string()))
                }
                Some(d) if d.starts_with('+') => {
                    Some(set.map_or(String::new(), |_| d[1..].to_string()))
                }
                Some(_) => set.cloned(),
            };
            out.push_str(&got.ok_or_else(|| Unset(name.to_string()))?);
            rest = &braced[end + 1..];
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let name = &after[..len];
            out.push_str(env.get(name).ok_or_else(|| Unset(name.to_string()))?);
            rest = &after[len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

impl Compose<'_> {
    /// One service: its module when it builds, and its machine.
    fn service(&self, draft: &mut Draft, name: &str, spec: &Value) {
        let mut machine = DraftMachine {
            service: name.to_string(),
            project: self.project.clone(),
            ..DraftMachine::default()
        };
        let Some(spec) = spec.as_object() else {
            draft
                .notes
                .push(format!("service {name}: not a table, not carried"));
            return;
        };
        let image = spec
            .get("image")
            .and_then(Value::as_str)
            .map(|i| interpolate(i, &self.env).unwrap_or_else(|_| i.to_string()));
        if let Some(build) = spec.get("build") {
            let mut module = self.module(name, build);
            if let Some(image) = &image {
                module.notes.push(format!(
                    "image {image}: not carried: compose tags its build so; meshtop tags each build by its address"
                ));
            }
            machine.module = Some(name.to_string());
            draft.modules.push(module);
        } else {
            machine.image = image;
        }
        let kept: Vec<&str> = spec
            .keys()
            .map(String::as_str)
            .filter(|k| !CARRIED.contains(k))
            .collect();
        if !kept.is_empty() {
            machine.notes.push(format!(
                "kept by compose, not written here: {} (compose makes the container with them; a send keeps them)",
                kept.join(", ")
            ));
        }
        draft.machines.push(machine);
    }

    /// The module of a service's `build:` (a context path, or a table).
    fn module(&self, name: &str, build: &Value) -> DraftModule {
        let mut module = DraftModule {
            source: name.to_string(),
            ..DraftModule::default()
        };
        let empty = serde_json::Map::new();
        let (context, table) = match build {
            Value::String(context) => (Some(context.as_str()), &empty),
            Value::Object(table) => (table.get("context").and_then(Value::as_str), table),
            _ => {
                module.skipped = Some("its `build` is neither a path nor a table".into());
                return module;
            }
        };
        let context = self.text(context.unwrap_or("."), &mut module, "context");
        if paths::is_remote(&context) {
            module.skipped = Some(format!(
                "its context {context} is no directory here: meshtop builds from the repository's own files"
            ));
        }
        module.context = paths::join(self.dir, &context);
        for (key, value) in table {
            self.build_key(&mut module, key, value);
        }
        module
    }

    /// One key of a `build:` table.
    fn build_key(&self, module: &mut DraftModule, key: &str, value: &Value) {
        match key {
            "context" => {}
            "dockerfile" => {
                let dockerfile = self.text(value.as_str().unwrap_or_default(), module, key);
                set_dockerfile(module, dockerfile);
            }
            "dockerfile_inline" => {
                module.skipped = Some(INLINE_DOCKERFILE.into());
            }
            "target" => {
                module.target = Some(self.text(value.as_str().unwrap_or_default(), module, key))
            }
            "args" => {
                let args = pairs(value)
                    .into_iter()
                    .map(|(k, v)| {
                        let v = v.and_then(|v| interpolate(&v, &self.env).ok());
                        (k, v)
                    })
                    .collect::<Vec<_>>();
                add_args(module, args);
            }
            "additional_contexts" => {
                let mut edges = Vec::new();
                for (name, value) in pairs(value) {
                    match value.as_deref().and_then(|v| v.strip_prefix("service:")) {
                        Some(service) => edges.push((name, service.to_string())),
                        None => module.notes.push(format!(
                            "additional context {name}: not another service's image, not carried"
                        )),
                    }
                }
                context_edges(module, edges);
            }
            other => module.notes.push(format!(
                "build `{other}`: not carried (meshtop's build has no such setting)"
            )),
        }
    }

    /// A string of the file, interpolated; what cannot be is noted and left as written.
    fn text(&self, text: &str, module: &mut DraftModule, key: &str) -> String {
        interpolate(text, &self.env).unwrap_or_else(|Unset(var)| {
            module.notes.push(format!(
                "{key} {text}: ${{{var}}} is set nowhere init reads (.env beside the file, a default): left as written"
            ));
            text.to_string()
        })
    }
}

/// A map (`KEY: value`) or a list (`- KEY=value`, `- KEY`) as (name, value) pairs.
fn pairs(value: &Value) -> Vec<(String, Option<String>)> {
    match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), scalar(v))).collect(),
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|item| match item.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (item.to_string(), None),
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_reads_env_and_defaults() {
        let env = BTreeMap::from([
            ("A".to_string(), "1".to_string()),
            ("E".to_string(), String::new()),
        ]);
        assert_eq!(interpolate("x${A}y$A$$", &env).unwrap(), "x1y1$");
        assert_eq!(interpolate("${B:-two}", &env).unwrap(), "two");
        assert_eq!(interpolate("${E:-d}|${E-d}", &env).unwrap(), "d|");
        assert_eq!(interpolate("${A:+on}", &env).unwrap(), "on");
        assert!(matches!(interpolate("${B}", &env), Err(Unset(v)) if v == "B"));
    }

    #[test]
    fn the_project_is_named_as_compose_names_it() {
        assert_eq!(project_name(Path::new("/w/My Shop.v2")), "myshopv2");
        assert_eq!(project_name(Path::new("/w/_x-1")), "x-1");
    }
}
