//! Key files from the disk: the private key a publishing converge signs with (`--sign-key`,
//! `MESHTOP_SIGNING_KEY`) and the public keys a mesh trusts. What is wrong names the file and line.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::MeshError;
use crate::mesh::cosign::{self, FormatError, SigningKey, TrustedKey};

fn key_error(file: &Path, error: FormatError, fix: &str) -> MeshError {
    let (line, what) = match &error {
        FormatError::Encrypted { line, .. }
        | FormatError::NeedsPassword { line, .. }
        | FormatError::Key { line, .. }
        | FormatError::KeyUndecoded { line, .. } => (Some(*line), error.to_string()),
        FormatError::Image(_)
        | FormatError::TooManyLayers { .. }
        | FormatError::PayloadTooLarge { .. } => (None, error.to_string()),
    };
    // The line is in the location already: say what is wrong without it.
    let what = what
        .split_once(": ")
        .filter(|(head, _)| head.starts_with("line "))
        .map_or(what.clone(), |(_, rest)| rest.to_string());
    MeshError::at(file, line, None, what, fix)
}

fn read_text(file: &Path, what: &str) -> Result<String, MeshError> {
    std::fs::read_to_string(file).map_err(|e| {
        MeshError::at(
            file,
            None,
            None,
            format!("cannot read the {what}: {e}"),
            "give the path of a readable PEM file",
        )
    })
}

/// The signing key at `file`: refused when others may read it (as ssh refuses), when it is not a
/// P-256 private key in PEM (PKCS#8 or SEC1, or sealed by `cosign generate-key-pair`: opened with
/// `COSIGN_PASSWORD`, as cosign reads it), or when it is encrypted otherwise.
pub fn read_signing_key(file: &Path) -> Result<SigningKey, MeshError> {
    let metadata = std::fs::metadata(file).map_err(|e| {
        MeshError::at(
            file,
            None,
            None,
            format!("cannot read the signing key: {e}"),
            "give --sign-key (or MESHTOP_SIGNING_KEY) the path of a PKCS#8 P-256 private key",
        )
    })?;
    let mode = metadata.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(MeshError::at(
            file,
            None,
            None,
            format!(
                "the signing key may be read by others (mode {:o}): a key others can read signs for them",
                mode & 0o777
            ),
            format!("run `chmod 600 {}`", file.display()),
        ));
    }
    let text = read_text(file, "signing key")?;
    let password = std::env::var_os("COSIGN_PASSWORD");
    let password = password.as_ref().map(|p| p.as_encoded_bytes());
    cosign::read_private_key_with(&text, password).map_err(|e| {
        key_error(
            file,
            e,
            "give a PKCS#8 P-256 private key (`openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out ci.key`)",
        )
    })
}

/// The public key at `file`, named `name` (its trust path as the mesh file writes it).
pub(super) fn read_public_key_file(file: &Path, name: &str) -> Result<TrustedKey, MeshError> {
    let text = read_text(file, "trust key")?;
    cosign::read_public_key(name, &text).map_err(|e| {
        key_error(
            file,
            e,
            "give a PEM P-256 public key (`BEGIN PUBLIC KEY`: cosign.pub, or `openssl ec -in ci.key -pubout`)",
        )
    })
}

/// The builder id a provenance names: the mesh's own word first, else CI's (`MESHTOP_BUILDER_ID`).
pub(super) fn builder_id(from_mesh: Option<String>) -> Option<String> {
    from_mesh.or_else(|| {
        std::env::var_os(crate::mesh::provenance::BUILDER_ID_ENV)
            .and_then(|id| id.into_string().ok())
            .filter(|id| !id.trim().is_empty())
    })
}
