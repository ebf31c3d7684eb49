//! A skaffold file (`skaffold.yaml`, `apiVersion: skaffold/v2…`, `v3…` or `v4…`; several
//! `---` documents read as one): one module per artifact of `build.artifacts` its Dockerfile
//! builds, named after the last part of its `image`. A `requires` entry whose `alias` the
//! Dockerfile builds `FROM ${ALIAS}` is the module's base (skaffold passes the required artifact
//! as that build arg, as meshtop passes a base as BASE).

use std::path::Path;

use serde_json::Value;

use super::{Draft, DraftModule, add_args, dockerfile, normalise, paths, scalar, set_dockerfile};
use crate::file::MeshError;

/// The key of an artifact's Dockerfile build in skaffold's schema (`docker:`): the format's word.
const BUILD_KEY: &str = "docker";

/// The build arg meshtop passes a base as.
const BASE_ARG: &str = "BASE";

/// The keys of an artifact read before its others: its name, its context and what it requires.
const READ_APART: &[&str] = &["image", "context", "requires"];

pub(super) fn read(file: &Path, dir: &Path, text: &str) -> Result<Draft, MeshError> {
    let documents = super::yaml_documents(file, text)?;
    let mut draft = Draft::default();
    let mut name = None;
    for (n, doc) in documents.iter().enumerate() {
        let version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let read = ["skaffold/v2", "skaffold/v3", "skaffold/v4"]
            .iter()
            .any(|v| version.starts_with(v));
        if !read {
            return Err(MeshError::at(
                file,
                None,
                None,
                format!(
                    "document {} has apiVersion {}, which init does not read",
                    n + 1,
                    if version.is_empty() {
                        "(none)"
                    } else {
                        version
                    }
                ),
                "give a skaffold file of apiVersion skaffold/v2…, v3… or v4… (`skaffold fix` upgrades older ones)",
            ));
        }
        if name.is_none() {
            name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        for key in [
            "requires",
            "profiles",
            "deploy",
            "manifests",
            "portForward",
            "test",
        ] {
            if doc.get(key).is_some() {
                draft.notes.push(format!(
                    "document {}: `{key}`: not carried (meshtop builds; it reads no other config, deploys nothing itself)",
                    n + 1
                ));
            }
        }
        let artifacts = doc.pointer("/build/artifacts").and_then(Value::as_array);
        for artifact in artifacts.into_iter().flatten() {
            if let Some(module) = artifact_module(dir, artifact) {
                draft.modules.push(module);
            }
        }
    }
    let fallback = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    draft.mesh = normalise(name.as_deref().unwrap_or(&fallback), "mesh");
    Ok(draft)
}

/// The last part of an image name, without tag or digest: `gcr.io/p/cartservice:1` → `cartservice`.
fn short_name(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split(':').next().unwrap_or(last)
}

/// One artifact as a module; `None` for one without an image.
fn artifact_module(dir: &Path, artifact: &Value) -> Option<DraftModule> {
    let image = artifact.get("image").and_then(Value::as_str)?;
    let mut module = DraftModule {
        source: short_name(image).to_string(),
        ..DraftModule::default()
    };
    let context = artifact
        .get("context")
        .and_then(Value::as_str)
        .unwrap_or(".");
    module.context = paths::join(dir, context);
    let Some(object) = artifact.as_object() else {
        return Some(module);
    };
    for (key, value) in object
        .iter()
        .filter(|(k, _)| !READ_APART.contains(&k.as_str()))
    {
        match key.as_str() {
            BUILD_KEY => build(&mut module, value),
            "jib" | "bazel" | "ko" | "buildpacks" | "custom" | "kaniko" => {
                module.skipped = Some(format!("it is built by {key}: meshtop builds Dockerfiles"));
            }
            other => module.notes.push(format!("`{other}`: not carried")),
        }
    }
    requires(&mut module, artifact.get("requires"));
    Some(module)
}

/// The artifact's Dockerfile build: `dockerfile`, `target`, `buildArgs`.
fn build(module: &mut DraftModule, value: &Value) {
    let Some(table) = value.as_object() else {
        return;
    };
    for (key, value) in table {
        match key.as_str() {
            "dockerfile" => {
                set_dockerfile(module, value.as_str().unwrap_or_default().to_string());
            }
            "target" => module.target = value.as_str().map(str::to_string),
            "buildArgs" => {
                let args = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| {
                        let v = scalar(v);
                        if let Some(template) = v.as_deref().filter(|v| v.contains("{{")) {
                            module.notes.push(format!(
                                "build arg {k}: not carried: {template} is a template skaffold fills when it builds"
                            ));
                            return None;
                        }
                        Some((k.clone(), v))
                    })
                    .collect::<Vec<_>>();
                add_args(module, args);
            }
            other => module.notes.push(format!("`{other}`: not carried")),
        }
    }
}

/// `requires`: each alias the Dockerfile builds `FROM ${ALIAS}` is an edge. `BASE` is the
/// module's base; another alias is a named context of the required module's name, with the build
/// arg set to that name (so `FROM ${ALIAS}` reads the context, and the Dockerfile stays as it is).
fn requires(module: &mut DraftModule, value: Option<&Value>) {
    let path = module
        .context
        .join(module.dockerfile.as_deref().unwrap_or("Dockerfile"));
    for required in value.and_then(Value::as_array).into_iter().flatten() {
        let image = required.get("image").and_then(Value::as_str).unwrap_or("?");
        let other = short_name(image).to_string();
        let Some(alias) = required.get("alias").and_then(Value::as_str) else {
            module.notes.push(format!(
                "requires {image} without an alias: only an order of builds, no edge"
            ));
            continue;
        };
        if !dockerfile::arg_use(&path, alias) {
            module.notes.push(format!(
                "requires {image} as {alias}: its Dockerfile builds no stage FROM ${{{alias}}}, so it is no edge"
            ));
        } else if alias == BASE_ARG {
            module.base = Some(other);
        } else {
            let context = normalise(&other, "required");
            module.args.insert(alias.to_string(), context.clone());
            module.contexts.insert(context, other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_named_by_its_last_part() {
        assert_eq!(short_name("gcr.io/p/cartservice:1.0"), "cartservice");
        assert_eq!(short_name("localhost:5000/base@sha256:ab"), "base");
        assert_eq!(short_name("frontend"), "frontend");
    }
}
