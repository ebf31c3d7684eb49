//! A module's `secrets` and `ssh` keys: which secrets its build may mount and where their values
//! are read when it builds. The values themselves are never read here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use toml::Spanned;
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
        let id = secret_id(src, &secret, &module.label, &mut seen)?;
        let source = secret_source(src, &secret, id.get_ref(), &module.label)?;
        out.push(BuildSecret {
            id: id.into_inner(),
            source,
            line: src.line(&item.span()),
        });
    }
    Ok(out)
}

/// A secret's `id`: valid as a mount's id, and not declared twice in the module.
fn secret_id(
    src: &Source<'_>,
    secret: &Section<'_, '_>,
    label: &str,
    seen: &mut BTreeSet<String>,
) -> Result<Spanned<String>, MeshError> {
    let id = secret.required_string(src, "id", "\"npmrc\"")?;
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if id.get_ref().is_empty() || !id.get_ref().chars().all(valid) {
        return Err(src.err(
            &id.span(),
            format!(
                "secret id {} of {label} is not a valid id",
                show(id.get_ref())
            ),
            "use letters, digits, '_', '-' and '.', as in RUN --mount=type=secret,id=npmrc",
        ));
    }
    if !seen.insert(id.get_ref().clone()) {
        return Err(src.err(
            &id.span(),
            format!(
                "secret id {} is declared twice in {label}",
                show(id.get_ref())
            ),
            "remove the duplicate",
        ));
    }
    Ok(id)
}

/// Where secret `id`'s value is read when the module builds: a file (`src`) or an environment
/// variable (`env`), exactly one of the two.
fn secret_source(
    src: &Source<'_>,
    secret: &Section<'_, '_>,
    id: &str,
    label: &str,
) -> Result<SecretSource, MeshError> {
    let file = secret.string(src, "src", "\"~/.npmrc\"")?;
    let env = secret.string(src, "env", "\"NPM_TOKEN\"")?;
    match (file, env) {
        (Some(file), None) => {
            if file.get_ref().is_empty() {
                return Err(src.err(
                    &file.span(),
                    format!("secret {id} of {label} has an empty `src`"),
                    "name the file holding the secret, e.g. src = \"~/.npmrc\"",
                ));
            }
            let path = resolve(src.file, file.get_ref());
            if let Some(what) = guarded_file(&path) {
                return Err(src.err(
                    &file.span(),
                    format!(
                        "secret {id} of {label} names {what} ({}): a build may not be given it",
                        path.display()
                    ),
                    "give the build a credential of its own (a token scoped to what it fetches), never meshtop's or the registry login",
                ));
            }
            Ok(SecretSource::File {
                path,
                written: file.into_inner(),
            })
        }
        (None, Some(env)) => {
            if !is_arg_name(env.get_ref()) {
                return Err(src.err(
                    &env.span(),
                    format!(
                        "`env` {} of secret {id} is not an environment variable's name",
                        cut(env.get_ref())
                    ),
                    "use letters, digits and '_', not starting with a digit",
                ));
            }
            if GUARDED_ENV.contains(&env.get_ref().as_str()) {
                return Err(src.err(
                    &env.span(),
                    format!(
                        "secret {id} of {label} names {}, which unlocks meshtop's signing key: a build may not be given it",
                        env.get_ref()
                    ),
                    "give the build a credential of its own, never the signing key's password",
                ));
            }
            Ok(SecretSource::Env(env.into_inner()))
        }
        (Some(_), Some(env)) => Err(src.err(
            &env.span(),
            format!("secret {id} of {label} has both `src` and `env`"),
            "keep one: src = \"path\" reads a file, env = \"NAME\" an environment variable",
        )),
        (None, None) => Err(src.err(
            &secret.span,
            format!("secret {id} of {label} says neither `src` nor `env`"),
            "add src = \"~/.npmrc\" (a file) or env = \"NPM_TOKEN\" (an environment variable)",
        )),
    }
}

/// Environment variables a build's secret may not name: the password of meshtop's signing key.
const GUARDED_ENV: &[&str] = &["COSIGN_PASSWORD"];

/// What `path` is, when it is a file no build may be given: meshtop's signing key as
/// `MESHTOP_SIGNING_KEY` names it (the same file, links followed). The key given as `--sign-key`
/// and the registry logins are checked where they are known (`crate::secrets::refuse_naming`).
fn guarded_file(path: &Path) -> Option<&'static str> {
    let key = std::env::var_os("MESHTOP_SIGNING_KEY").filter(|k| !k.is_empty())?;
    crate::secrets::same_file(path, Path::new(&key))
        .then_some("meshtop's signing key (MESHTOP_SIGNING_KEY)")
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
