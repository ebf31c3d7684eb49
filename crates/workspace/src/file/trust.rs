//! `trust = [...]` in [mesh]: the public keys whose signatures let the registry vouch, read at
//! load (paths relative to the mesh file), so a missing or malformed key is bad input at once;
//! and `trusted_builders`, each builder id bound to the keys of `trust` that may claim it.

use std::path::Path;

use toml::Spanned;
use toml::de::DeValue;

use super::MeshError;
use super::keys;
use super::table::{Section, Source, show, type_name};
use crate::mesh::cosign::TrustedKey;
use crate::mesh::model::{Environment, TrustedBuilder};

/// Each trust path read as a P-256 public key, named as the mesh file writes it.
pub(super) fn trusted_keys(
    src: &Source<'_>,
    dir: &Path,
    paths: &[Spanned<String>],
) -> Result<Vec<TrustedKey>, MeshError> {
    let mut keys = Vec::with_capacity(paths.len());
    for path in paths {
        let file = dir.join(path.get_ref());
        if !file.is_file() {
            return Err(src.err(
                &path.span(),
                format!(
                    "trust key {} does not exist (looked at {})",
                    show(path.get_ref()),
                    file.display()
                ),
                "give the path of a PEM public key relative to the mesh file (`cosign.pub`, or `openssl ec -in ci.key -pubout`)",
            ));
        }
        let key = keys::read_public_key_file(&file, path.get_ref())?;
        if keys.iter().any(|k: &TrustedKey| k.pem() == key.pem()) {
            return Err(src.err(
                &path.span(),
                format!("trust key {} is listed twice", show(path.get_ref())),
                "remove the duplicate",
            ));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// A target that requires signed artifacts needs keys to trust: without any, nothing could be promoted.
pub(super) fn require_signed_has_trust(
    src: &Source<'_>,
    environments: &[Environment],
    trust: &[TrustedKey],
) -> Result<(), MeshError> {
    match environments
        .iter()
        .find(|e| e.require_signed || e.require_provenance)
    {
        Some(strict) if trust.is_empty() => Err(MeshError::at(
            src.file,
            Some(strict.line),
            None,
            format!(
                "target {} requires {}, but [mesh] trusts no key",
                strict.name,
                if strict.require_signed {
                    "signed artifacts (require_signed = true)"
                } else {
                    "a signed provenance (require_provenance = true)"
                }
            ),
            "add trust = [\"keys/ci.pub\"] under [mesh] (the public keys CI signs with), or remove require_signed / require_provenance",
        )),
        _ => Ok(()),
    }
}

/// `trusted_builders` in [mesh], each entry a builder id bound to the keys that may claim it:
/// `{ id = "https://ci.example/builder", keys = ["keys/ci.pub"] }` (keys as `trust` writes them),
/// or a plain `"id"`, which any key of `trust` may claim. Bad shapes are refused at their line.
/// None: the key is absent (any builder a trusted key attested vouches).
pub(super) fn trusted_builders(
    src: &Source<'_>,
    mesh: &Section<'_, '_>,
    trust: &[Spanned<String>],
) -> Result<Vec<TrustedBuilder>, MeshError> {
    const EXAMPLE: &str = "[{ id = \"https://ci.example/builder\", keys = [\"keys/ci.pub\"] }]";
    let Some(value) = mesh.get("trusted_builders") else {
        return Ok(Vec::new());
    };
    let DeValue::Array(items) = value.get_ref() else {
        return Err(src.err(
            &value.span(),
            format!(
                "`trusted_builders` in [mesh] must be an array, found {}",
                type_name(value.get_ref())
            ),
            format!("write it as trusted_builders = {EXAMPLE}"),
        ));
    };
    if items.is_empty() {
        return Err(src.err(
            &value.span(),
            "`trusted_builders` in [mesh] is empty: no provenance could ever vouch",
            "list the builder ids CI's provenance names (its builder_id or MESHTOP_BUILDER_ID) with the keys that may claim them, or remove the key to trust any builder",
        ));
    }
    if trust.is_empty() {
        return Err(src.err(
            &value.span(),
            "`trusted_builders` in [mesh] is set but `trust` is not: a provenance is only read when a trusted key signed it",
            "add trust = [\"keys/ci.pub\"] (the public keys CI signs with), or remove trusted_builders",
        ));
    }
    let mut builders: Vec<TrustedBuilder> = Vec::with_capacity(items.len());
    for item in items.iter() {
        let builder = trusted_builder(src, item, trust)?;
        if builders.iter().any(|b| b.id == builder.id) {
            return Err(src.err(
                &item.span(),
                format!(
                    "builder {} is listed twice in trusted_builders",
                    show(&builder.id)
                ),
                "list each builder id once, with every key that may claim it in its keys",
            ));
        }
        builders.push(builder);
    }
    Ok(builders)
}

/// One entry of `trusted_builders`: a plain id, or `{ id = "…", keys = [...] }` whose keys are
/// each one of `trust`.
fn trusted_builder(
    src: &Source<'_>,
    item: &Spanned<DeValue<'_>>,
    trust: &[Spanned<String>],
) -> Result<TrustedBuilder, MeshError> {
    let non_empty = |id: Spanned<String>| {
        if id.get_ref().trim().is_empty() {
            Err(src.err(
                &id.span(),
                "a builder id in trusted_builders is empty",
                "give the id CI's provenance names (its builder_id or MESHTOP_BUILDER_ID)",
            ))
        } else {
            Ok(id.into_inner())
        }
    };
    if let DeValue::String(id) = item.get_ref() {
        let id = non_empty(Spanned::new(item.span(), id.to_string()))?;
        return Ok(TrustedBuilder { id, keys: None });
    }
    let entry = Section::of(
        src,
        item,
        "an entry of trusted_builders",
        &["id", "keys"],
        "write each entry as a builder id, or { id = \"https://ci.example/builder\", keys = [\"keys/ci.pub\"] }",
    )?;
    entry.check_keys(src)?;
    let id = non_empty(entry.required_string(src, "id", "\"https://ci.example/builder\"")?)?;
    let Some(keys) = entry.string_list(src, "keys", "[\"keys/ci.pub\"]")? else {
        return Err(entry.missing(
            src,
            "keys",
            "[\"keys/ci.pub\"] (the keys of trust that may claim this builder)",
        ));
    };
    if keys.get_ref().is_empty() {
        return Err(src.err(
            &keys.span(),
            format!(
                "builder {} in trusted_builders has no keys: nothing could claim it",
                show(&id)
            ),
            "list the keys of trust that may claim it, e.g. keys = [\"keys/ci.pub\"]",
        ));
    }
    let mut bound = Vec::new();
    for key in keys.into_inner() {
        if !trust.iter().any(|t| t.get_ref() == key.get_ref()) {
            let listed: Vec<String> = trust.iter().map(|t| show(t.get_ref())).collect();
            return Err(src.err(
                &key.span(),
                format!(
                    "key {} of builder {} is not one of trust: a provenance is only read when a trusted key signed it",
                    show(key.get_ref()),
                    show(&id)
                ),
                format!("name a key as trust writes it ({}), or add it to trust", listed.join(", ")),
            ));
        }
        bound.push(key.into_inner());
    }
    Ok(TrustedBuilder {
        id,
        keys: Some(bound),
    })
}
