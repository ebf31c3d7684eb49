//! `trust = [...]` in [mesh]: the public keys whose signatures let the registry vouch, read at
//! load (paths relative to the mesh file), so a missing or malformed key is bad input at once.

use std::path::Path;

use toml::Spanned;

use super::MeshError;
use super::keys;
use super::table::{Source, show};
use crate::mesh::cosign::TrustedKey;
use crate::mesh::model::Environment;

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
