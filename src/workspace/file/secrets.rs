//! A module's `secrets` and `ssh` keys: which secrets its build may mount and where their values
//! are read when it builds. The values themselves are never read here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use toml::de::DeValue;

use super::MeshError;
use super::names::is_arg_name;
use super::table::{Section, Source, cut, show};
use crate::mesh::model::{BuildSecret, SecretSource};

const SECRET_KEYS: &[&str] = &["id", "src", "env"];
const EXAMPLE: &str =
    "secrets = [{ id = \"npmrc\", src = \"~/.npmrc\" }, { id = \"token\", env = \"NPM_TOKEN\" }]";

/// The module's `secrets`, in file order.
pub(super) fn secrets(
    src: &Source<'_>,
    module: &Section<'_, '_>,
) -> Result<Vec<BuildSecret>, MeshError> {
    let Some(value) = module.get("secrets") else {
        return Ok(Vec::new());
    };
    let DeValue::Array(items) = value.get_ref() else {
        return Err(src.err(
            &value.span(),
            format!("`secrets` in {} must be an array of tables", module.label),
            format!("write it as {EXAMPLE}"),
        ));
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items.iter() {
        let secret = Section::of(
            src,
            item,
            format!("a secret of {}", module.label),
            SECRET_KEYS,
            &format!("write each secret as a table: {EXAMPLE}"),
        )?;
        secret.check_keys(src)?;
        let id = secret.required_string(src, "id", "\"npmrc\"")?;
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if id.get_ref().is_empty() || !id.get_ref().chars().all(valid) {
            return Err(src.err(
                &id.span(),
                format!(
                    "secret id {} of {} is not a valid id",
                    show(id.get_ref()),
                    module.label
                ),
                "use letters, digits, '_', '-' and '.', as in RUN --mount=type=secret,id=npmrc",
            ));
        }
        if !seen.insert(id.get_ref().clone()) {
            return Err(src.err(
                &id.span(),
                format!(
                    "secret id {} is declared twice in {}",
                    show(id.get_ref()),
                    module.label
                ),
                "remove the duplicate",
            ));
        }
        let file = secret.string(src, "src", "\"~/.npmrc\"")?;
        let env = secret.string(src, "env", "\"NPM_TOKEN\"")?;
        let source = match (file, env) {
            (Some(file), None) => {
                if file.get_ref().is_empty() {
                    return Err(src.err(
                        &file.span(),
                        format!(
                            "secret {} of {} has an empty `src`",
                            id.get_ref(),
                            module.label
                        ),
                        "name the file holding the secret, e.g. src = \"~/.npmrc\"",
                    ));
                }
                SecretSource::File {
                    path: resolve(src.file, file.get_ref()),
                    written: file.into_inner(),
                }
            }
            (None, Some(env)) => {
                if !is_arg_name(env.get_ref()) {
                    return Err(src.err(
                        &env.span(),
                        format!(
                            "`env` {} of secret {} is not an environment variable's name",
                            cut(env.get_ref()),
                            id.get_ref()
                        ),
                        "use letters, digits and '_', not starting with a digit",
                    ));
                }
                SecretSource::Env(env.into_inner())
            }
            (Some(_), Some(env)) => {
                return Err(src.err(
                    &env.span(),
                    format!(
                        "secret {} of {} has both `src` and `env`",
                        id.get_ref(),
                        module.label
                    ),
                    "keep one: src = \"path\" reads a file, env = \"NAME\" an environment variable",
                ));
            }
            (None, None) => {
                return Err(src.err(
                    &secret.span,
                    format!("secret {} of {} says neither `src` nor `env`", id.get_ref(), module.label),
                    "add src = \"~/.npmrc\" (a file) or env = \"NPM_TOKEN\" (an environment variable)",
                ));
            }
        };
        out.push(BuildSecret {
            id: id.into_inner(),
            source,
        });
    }
    Ok(out)
}

/// The module's `ssh` (default false).
pub(super) fn ssh(src: &Source<'_>, module: &Section<'_, '_>) -> Result<bool, MeshError> {
    Ok(module
        .boolean(src, "ssh")?
        .is_some_and(toml::Spanned::into_inner))
}

/// A secret file's path: `~/` is the home directory, a relative path starts at the mesh file's
/// directory.
fn resolve(mesh_file: &Path, written: &str) -> PathBuf {
    if let Some(rest) = written.strip_prefix("~/")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    let path = Path::new(written);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    mesh_file
        .parent()
        .map_or_else(|| path.to_path_buf(), |dir| dir.join(path))
}
