//! The cosign signature format, pure (sigstore/cosign `specs/SIGNATURE_SPEC.md`): the simple-signing
//! payload byte for byte as cosign writes it (sigstore `pkg/signature/payload/payload.go`: Go's
//! `json.Marshal` of `SimpleContainerImage`), the `.sig` image that carries signatures (tag-based
//! discovery, one layer per signature, the base64 signature in the layer's annotation), signing and
//! verifying with ECDSA P-256 over SHA-256, and the verdict a set of signatures gives for one digest.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{Signature as EcdsaSignature, SigningKey as EcdsaSigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey, LineEnding};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::sealed_key;

/// The media type of a simple-signing payload layer.
pub(crate) const SIMPLE_SIGNING_MEDIA_TYPE: &str =
    "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign payload.
pub(crate) const COSIGN_PAYLOAD_TYPE: &str = "cosign container image signature";
/// The signature image's manifest and config media types (what cosign writes).
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const OCI_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// The most layers a `.sig` manifest may hold to be judged (cosign bounds them too, at 1000:
/// `pkg/oci/remote/signatures.go`, `maxLayers`); each signer adds one, so 64 leaves room for many.
pub(crate) const MAX_SIGNATURE_LAYERS: usize = 64;
/// The most bytes of one signature payload: a simple-signing payload is a few hundred bytes, so
/// 64 KiB leaves room for any `optional` claims while a registry cannot make a plan read without end.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// What the signatures under an artifact's `.sig` tag say about its manifest digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SignatureVerdict {
    /// The mesh trusts no key: nothing was checked.
    Unverified,
    /// A trusted key signed this exact digest: `key` names it (its trust path).
    Trusted { key: String },
    /// No signature at all under the `.sig` tag.
    Unsigned,
    /// Signatures, none by a trusted key.
    UntrustedKey,
    /// A trusted key's signature, but its payload names `names`, not this digest (a signature
    /// copied from another artifact).
    OtherDigest { names: String },
    /// A trusted key signed it, but the provenance it signed is of another build type (`names`
    /// it) than meshtop's: its parameters do not mean what meshtop's do.
    OtherBuildType { names: String },
    /// A trusted key signed it, but the provenance it signed is another module's (`names` it).
    OtherModule { names: String },
    /// A trusted key signed it, but the provenance it signed says it was built from other inputs
    /// (`names` the provenance's input digest) than the ref's.
    OtherInputs { names: String },
    /// A trusted key signed it and its provenance names these inputs, but a builder the mesh does
    /// not list in `trusted_builders`.
    UntrustedBuilder { builder: String },
    /// Its provenance names a builder the mesh trusts, but signed by `key`, which
    /// `trusted_builders` does not bind to that builder.
    UnboundBuilder { builder: String, key: String },
    /// A trusted key signed it, but no provenance a trusted key signed is attached, where the
    /// target requires one (`require_provenance = true`).
    NoProvenance,
}

impl SignatureVerdict {
    /// Whether this lets the registry vouch.
    pub fn vouches(&self) -> bool {
        matches!(
            self,
            SignatureVerdict::Unverified | SignatureVerdict::Trusted { .. }
        )
    }

    /// The short words the screen and the plan show (`✗ unsigned`, …).
    pub fn words(&self) -> String {
        match self {
            SignatureVerdict::Unverified => "unverified".into(),
            SignatureVerdict::Trusted { key } => format!("✓ signed ({key})"),
            SignatureVerdict::Unsigned => "✗ unsigned".into(),
            SignatureVerdict::UntrustedKey => "✗ untrusted key".into(),
            SignatureVerdict::OtherDigest { .. } => "✗ signature names another digest".into(),
            SignatureVerdict::OtherBuildType { .. } => "✗ not a meshtop build".into(),
            SignatureVerdict::OtherModule { .. } => "✗ built as another module".into(),
            SignatureVerdict::OtherInputs { .. } => "✗ built from other inputs".into(),
            SignatureVerdict::UntrustedBuilder { .. } => "✗ untrusted builder".into(),
            SignatureVerdict::UnboundBuilder { .. } => "✗ builder claimed by another key".into(),
            SignatureVerdict::NoProvenance => "✗ no provenance".into(),
        }
    }
}

/// Why a key or a signature image could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "line {line}: an encrypted key ({label}) cannot be read by meshtop; give it an unencrypted PKCS#8 P-256 key instead: `openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out ci.key` and `openssl ec -in ci.key -pubout -out ci.pub` (cosign signs with the same key after `cosign import-key-pair --key ci.key`)"
    )]
    Encrypted { line: usize, label: String },
    #[error(
        "line {line}: a key sealed by cosign ({label}) opens with its password: set COSIGN_PASSWORD to it (as cosign reads it)"
    )]
    NeedsPassword { line: usize, label: String },
    #[error("line {line}: {message}")]
    Key { line: usize, message: String },
    /// The key's PEM or DER could not be decoded as `what` (`not a PKCS#8 P-256 private key`).
    #[error("line {line}: {what} ({source})")]
    KeyUndecoded {
        line: usize,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the signature image is malformed: {0}")]
    Image(#[from] Malformed),
    #[error("the .sig manifest has {count} layers, more than {MAX_SIGNATURE_LAYERS}")]
    TooManyLayers { count: usize },
    #[error(
        "the signature payload {digest} is {size} bytes, more than {MAX_PAYLOAD_BYTES} (64 KiB)"
    )]
    PayloadTooLarge { digest: String, size: u64 },
}

/// What is wrong with a signature (or attestation) image's manifest.
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    #[error("its manifest is not JSON ({0})")]
    NotJson(#[source] serde_json::Error),
    #[error("its manifest has no layers")]
    NoLayers,
    #[error("its manifest is not a JSON object")]
    NotAnObject,
    /// Its config or manifest could not be written as JSON.
    #[error(transparent)]
    Unwritable(serde_json::Error),
}

/// The tag that holds the signatures of manifest `digest` (`sha256:ab…` → `sha256-ab….sig`).
pub fn signature_tag(digest: &str) -> Option<String> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("sha256-{hex}.sig"))
}

/// The simple-signing payload cosign signs for `repository@digest`: the field order and spelling of
/// `SimpleContainerImage`, no annotations (`"optional":null`), no spaces.
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    // Go's encoder escapes <, > and & in strings; a repository name or digest holds none, and
    // serde_json escapes the rest as Go does.
    let text = |s: &str| Value::String(s.to_string()).to_string();
    format!(
        r#"{{"critical":{{"identity":{{"docker-reference":{}}},"image":{{"docker-manifest-digest":{}}},"type":{}}},"optional":null}}"#,
        text(repository),
        text(digest),
        text(COSIGN_PAYLOAD_TYPE)
    )
    .into_bytes()
}

/// The manifest digest a payload names, if it is a cosign payload. Keys are matched as Go's
/// decoder matches them (case-insensitively), so `Docker-manifest-digest` reads as cosign reads it.
pub(crate) fn payload_digest(payload: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(payload).ok()?;
    let critical = field(&value, "critical")?;
    (field(critical, "type")?.as_str()? == COSIGN_PAYLOAD_TYPE).then_some(())?;
    let digest = field(field(critical, "image")?, "docker-manifest-digest")?;
    Some(digest.as_str()?.to_string())
}

fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    let object = value.as_object()?;
    object.get(name).or_else(|| {
        object
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A private key that signs (ECDSA P-256).
#[derive(Clone)]
pub struct SigningKey(EcdsaSigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(P-256)")
    }
}

/// A public key the mesh trusts, named by where it was read (its trust path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    pub name: String,
    key: VerifyingKey,
}

/// The PEM block's label and the line its BEGIN is on (1-based), or why the text is no PEM.
fn pem_block(text: &str) -> Result<(String, usize), FormatError> {
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
        {
            return Ok((label.to_string(), index + 1));
        }
        if !line.is_empty() {
            return Err(FormatError::Key {
                line: index + 1,
                message: "not a PEM key (no `-----BEGIN …-----` line before this one)".into(),
            });
        }
    }
    Err(FormatError::Key {
        line: 1,
        message: "empty: no PEM key in it".into(),
    })
}

/// Read a private key: PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1 (`BEGIN EC PRIVATE KEY`), P-256.
/// An encrypted key is refused with how to make one meshtop reads (a key cosign sealed too: it
/// needs its password, [`read_private_key_with`]).
#[cfg(test)]
pub(crate) fn read_private_key(text: &str) -> Result<SigningKey, FormatError> {
    read_private_key_with(text, None)
}

/// [`read_private_key`], and a key `cosign generate-key-pair` sealed, opened with `password`.
pub fn read_private_key_with(
    text: &str,
    password: Option<&[u8]>,
) -> Result<SigningKey, FormatError> {
    let (label, line) = pem_block(text)?;
    let bad = |message: String| FormatError::Key { line, message };
    let undecoded = |what: &'static str| {
        move |source: Box<dyn std::error::Error + Send + Sync>| FormatError::KeyUndecoded {
            line,
            what,
            source,
        }
    };
    let secret = match label.as_str() {
        label if sealed_key::SEALED_LABELS.contains(&label) => {
            let Some(password) = password else {
                return Err(FormatError::NeedsPassword {
                    line,
                    label: label.to_string(),
                });
            };
            let (_, body) = p256::pkcs8::der::pem::decode_vec(text.trim().as_bytes())
                .map_err(|e| bad(format!("not a PEM block ({e})")))?;
            let der = sealed_key::open(&body, password).map_err(|e| match e {
                sealed_key::OpenError::Malformed(what) => bad(format!("a key sealed by cosign, but {what}")),
                sealed_key::OpenError::WrongPassword => bad(
                    "COSIGN_PASSWORD does not open this key sealed by cosign (another password, or the file was changed)".into(),
                ),
            })?;
            p256::SecretKey::from_pkcs8_der(&der).map_err(|e| {
                undecoded("sealed by cosign, but not a PKCS#8 P-256 private key")(e.into())
            })?
        }
        "PRIVATE KEY" => p256::SecretKey::from_pkcs8_pem(text.trim())
            .map_err(|e| undecoded("not a PKCS#8 P-256 private key")(e.into()))?,
        "EC PRIVATE KEY" => p256::SecretKey::from_sec1_pem(text.trim())
            .map_err(|e| undecoded("not a SEC1 P-256 private key")(e.into()))?,
        label if label.contains("ENCRYPTED") => {
            return Err(FormatError::Encrypted {
                line,
                label: label.to_string(),
            });
        }
        "PUBLIC KEY" => {
            return Err(bad(
                "this is a public key; the signing key is the private one (`BEGIN PRIVATE KEY`)"
                    .into(),
            ));
        }
        other => {
            return Err(bad(format!(
                "a PEM `{other}`, not a private key (want `BEGIN PRIVATE KEY`, PKCS#8 P-256)"
            )));
        }
    };
    Ok(SigningKey(EcdsaSigningKey::from(secret)))
}

/// Read a trusted public key: PEM SubjectPublicKeyInfo (`BEGIN PUBLIC KEY`, as `cosign.pub`), P-256.
pub fn read_public_key(name: &str, text: &str) -> Result<TrustedKey, FormatError> {
    let (label, line) = pem_block(text)?;
    if label != "PUBLIC KEY" {
        return Err(FormatError::Key {
            line,
            message: format!(
                "a PEM `{label}`, not a public key (want `BEGIN PUBLIC KEY`, P-256, as cosign.pub)"
            ),
        });
    }
    let public = p256::PublicKey::from_public_key_pem(text.trim()).map_err(|e| {
        FormatError::KeyUndecoded {
            line,
            what: "not a P-256 public key",
            source: e.into(),
        }
    })?;
    Ok(TrustedKey {
        name: name.to_string(),
        key: VerifyingKey::from(&public),
    })
}

impl SigningKey {
    /// The base64 of the DER ECDSA signature of `payload` (SHA-256), as the annotation holds it.
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature: EcdsaSignature = self.0.sign(payload);
        STANDARD.encode(signature.to_der().as_bytes())
    }

    /// The public half, as a trusted key named `name`.
    #[cfg(test)]
    pub(crate) fn public(&self, name: &str) -> TrustedKey {
        TrustedKey {
            name: name.to_string(),
            key: *self.0.verifying_key(),
        }
    }
}

impl TrustedKey {
    /// Whether `signature` (base64 of a DER ECDSA signature) is this key's over `payload`. A raw
    /// r‖s signature is refused, as cosign refuses it (sigstore `pkg/signature/ecdsa.go`: `VerifySignature`
    /// calls Go's `ecdsa.VerifyASN1`, which reads ASN.1 DER only).
    pub(crate) fn verifies(&self, payload: &[u8], signature: &str) -> bool {
        let Ok(bytes) = STANDARD.decode(signature.trim()) else {
            return false;
        };
        EcdsaSignature::from_der(&bytes).is_ok_and(|sig| self.key.verify(payload, &sig).is_ok())
    }

    /// The key as PEM (SubjectPublicKeyInfo).
    pub fn pem(&self) -> String {
        p256::PublicKey::from(&self.key)
            .to_public_key_pem(LineEnding::LF)
            .unwrap_or_default()
    }
}

/// One signature layer of a `.sig` image: the payload blob's digest and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLayer {
    pub digest: String,
    pub size: u64,
    pub signature: String,
}

/// The signature layers of a `.sig` manifest, all of them (layers of another media type, or
/// without the signature annotation, are not signatures and are skipped). Refused: a manifest of
/// more than [`MAX_SIGNATURE_LAYERS`] layers, a signature layer announcing a payload of more than
/// [`MAX_PAYLOAD_BYTES`].
pub fn signature_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, FormatError> {
    let layers = all_layers(manifest)?;
    if layers.len() > MAX_SIGNATURE_LAYERS {
        return Err(FormatError::TooManyLayers {
            count: layers.len(),
        });
    }
    let signatures = read_signature_layers(&layers);
    if let Some(large) = signatures
        .iter()
        .find(|l| l.size > MAX_PAYLOAD_BYTES as u64)
    {
        return Err(FormatError::PayloadTooLarge {
            digest: large.digest.clone(),
            size: large.size,
        });
    }
    Ok(signatures)
}

/// Every layer of a `.sig` manifest, as JSON.
fn all_layers(manifest: &[u8]) -> Result<Vec<Value>, FormatError> {
    let value: Value = serde_json::from_slice(manifest).map_err(Malformed::NotJson)?;
    value
        .get("layers")
        .and_then(Value::as_array)
        .cloned()
        .ok_or(FormatError::Image(Malformed::NoLayers))
}

/// The layers among `layers` that carry a signature.
fn read_signature_layers(layers: &[Value]) -> Vec<SignatureLayer> {
    layers
        .iter()
        .filter(|l| l.get("mediaType").and_then(Value::as_str) == Some(SIMPLE_SIGNING_MEDIA_TYPE))
        .filter_map(|l| {
            Some(SignatureLayer {
                digest: l.get("digest")?.as_str()?.to_string(),
                size: l.get("size").and_then(Value::as_u64).unwrap_or(0),
                signature: l
                    .pointer(&format!(
                        "/annotations/{}",
                        SIGNATURE_ANNOTATION.replace('/', "~1")
                    ))?
                    .as_str()?
                    .to_string(),
            })
        })
        .collect()
}

/// A `.sig` image to write: its config blob and its manifest (whose layers' payload blobs the
/// writer uploads beside them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureImage {
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
}

/// The `.sig` image holding the layers of `existing` (another signer's, kept as they are) and one
/// more: `payload` signed with `signature`. None when `existing` holds that very signature already.
pub fn append_signature(
    existing: Option<&[u8]>,
    payload: &[u8],
    signature: &str,
) -> Result<Option<SignatureImage>, FormatError> {
    let digest = sha256_digest(payload);
    if let Some(bytes) = existing {
        let layers = all_layers(bytes)?;
        if read_signature_layers(&layers)
            .iter()
            .any(|l| l.digest == digest && l.signature == signature)
        {
            return Ok(None);
        }
    }
    let layer = json!({
        "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
        "size": payload.len(),
        "digest": digest,
        "annotations": { SIGNATURE_ANNOTATION: signature },
    });
    append_layer(existing, layer, "", MAX_SIGNATURE_LAYERS)
}

/// The image (a `.sig` or an `.att`: one OCI manifest, one layer per signature or envelope) holding
/// the layers of `existing` and `layer`, with the config cosign writes for it. None when a layer
/// of `existing` has the digest `same` already (an empty `same` never matches). Refused when one
/// more layer would make more than `max` (no reader of meshtop would judge it).
pub(crate) fn append_layer(
    existing: Option<&[u8]>,
    layer: Value,
    same: &str,
    max: usize,
) -> Result<Option<SignatureImage>, FormatError> {
    let mut manifest = match existing {
        Some(bytes) => serde_json::from_slice::<Value>(bytes).map_err(Malformed::NotJson)?,
        None => json!({ "schemaVersion": 2, "mediaType": OCI_MANIFEST_MEDIA_TYPE }),
    };
    if let Some(bytes) = existing {
        let layers = all_layers(bytes)?;
        if !same.is_empty()
            && layers
                .iter()
                .any(|l| l.get("digest").and_then(Value::as_str) == Some(same))
        {
            return Ok(None);
        }
        if layers.len() >= max {
            return Err(FormatError::TooManyLayers {
                count: layers.len() + 1,
            });
        }
    }
    let mut layers = manifest
        .get("layers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    layers.push(layer);
    let diff_ids: Vec<Value> = layers
        .iter()
        .filter_map(|l| l.get("digest").cloned())
        .collect();
    let history: Vec<Value> = diff_ids
        .iter()
        .map(|_| json!({ "created": "0001-01-01T00:00:00Z" }))
        .collect();
    let config = serde_json::to_vec(&json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": history,
        "os": "",
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
        "config": {},
    }))
    .map_err(Malformed::Unwritable)?;
    let object = manifest.as_object_mut().ok_or(Malformed::NotAnObject)?;
    object.insert("mediaType".into(), json!(OCI_MANIFEST_MEDIA_TYPE));
    object.insert(
        "config".into(),
        json!({
            "mediaType": OCI_CONFIG_MEDIA_TYPE,
            "size": config.len(),
            "digest": sha256_digest(&config),
        }),
    );
    object.insert("layers".into(), Value::Array(layers));
    let manifest = serde_json::to_vec(&manifest).map_err(Malformed::Unwritable)?;
    Ok(Some(SignatureImage { config, manifest }))
}

/// The verdict for manifest `digest` given its signature layers, each with its payload as the
/// registry served it (None: the blob could not be read). A trusted key's signature naming this
/// digest vouches; else one naming another digest is said first, then "untrusted key", then
/// "unsigned" (no signature layer at all).
pub fn judge(
    digest: &str,
    signatures: &[(SignatureLayer, Option<Vec<u8>>)],
    trusted: &[TrustedKey],
) -> SignatureVerdict {
    if signatures.is_empty() {
        return SignatureVerdict::Unsigned;
    }
    let mut other: BTreeMap<String, ()> = BTreeMap::new();
    for (layer, payload) in signatures {
        // The payload must be the blob the layer names: a registry serving other bytes proves nothing.
        let Some(payload) = payload
            .as_deref()
            .filter(|p| sha256_digest(p) == layer.digest)
        else {
            continue;
        };
        let Some(key) = trusted
            .iter()
            .find(|key| key.verifies(payload, &layer.signature))
        else {
            continue;
        };
        match payload_digest(payload) {
            Some(named) if named == digest => {
                return SignatureVerdict::Trusted {
                    key: key.name.clone(),
                };
            }
            Some(named) => {
                other.insert(named, ());
            }
            None => {
                other.insert("no digest (not a cosign payload)".into(), ());
            }
        }
    }
    match other.into_keys().next() {
        Some(names) => SignatureVerdict::OtherDigest { names },
        None => SignatureVerdict::UntrustedKey,
    }
}

#[cfg(test)]
#[path = "cosign_tests.rs"]
mod tests;
