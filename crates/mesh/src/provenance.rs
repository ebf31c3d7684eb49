//! Build provenance that travels with an artifact, pure: a SLSA provenance v1 predicate
//! (slsa-framework/slsa `docs/spec/v1.0/provenance.md`) in an in-toto Statement v1
//! (in-toto/attestation `spec/v1/statement.md`), carried by a DSSE envelope whose signature is over
//! DSSE's pre-authentication encoding (secure-systems-lab/dsse `protocol.md`, `envelope.md`), stored
//! as cosign stores attestations (sigstore/cosign `specs/ATTESTATION_SPEC.md`: an OCI manifest under
//! the tag `sha256-<hex>.att`, one layer per envelope, media type
//! `application/vnd.dsse.envelope.v1+json`, annotated with its `predicateType`).
//!
//! What is read back is judged against what the ref being decided says: meshtop's build type, the
//! ref's module and input digest, and a builder the mesh trusts claimed by a key bound to it.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use serde::Serialize;
use serde_json::{Value, json};

use super::cosign::{self, FormatError, SignatureImage, SigningKey, TrustedKey};
use super::model::TrustedBuilder;

/// DSSE's payload type for an in-toto Statement (in-toto/attestation `spec/v1/envelope.md`:
/// "`payloadType` MUST be set to `application/vnd.in-toto+json`").
pub(crate) const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The layer media type of a DSSE envelope (cosign `specs/ATTESTATION_SPEC.md`; cosign
/// `pkg/types/media.go`, `DssePayloadType`).
pub(crate) const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// The layer annotation naming the predicate type (cosign `pkg/oci/static/options.go`,
/// `WithLayerMediaType`… and `pkg/cosign/attestation`: the `predicateType` annotation).
pub(crate) const PREDICATE_TYPE_ANNOTATION: &str = "predicateType";
/// in-toto Statement v1 (`spec/v1/statement.md`: `_type`).
pub(crate) const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// SLSA provenance v1 (`docs/spec/v1.0/provenance.md`: `predicateType`); cosign's
/// `verify-attestation --type slsaprovenance1` asks for this one (cosign
/// `pkg/cosign/attestation/attestation.go`, `PredicateSLSA1`/`options.PredicateTypeMap`).
pub(crate) const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";
/// What a meshtop build is (SLSA: `buildType` "a URI indicating what type of build was performed",
/// versioned so the meaning of `externalParameters` can change).
pub(crate) const BUILD_TYPE: &str = "https://meshtop.dev/provenance/build/v1";
/// meshtop's own run details (SLSA provenance v1, "Extension fields": implementations may add
/// fields; a URI-prefixed name keeps them apart from other producers').
pub(crate) const VENDOR_FIELD: &str = "https://meshtop.dev/provenance/v1#run";
/// The environment variable naming the builder (CI sets it), when the mesh names none.
pub const BUILDER_ID_ENV: &str = "MESHTOP_BUILDER_ID";
/// The builder id a machine names when neither the mesh (`builder_id = "…"`) nor the environment
/// (`MESHTOP_BUILDER_ID`) gives one: `meshtop://host/<hostname>`.
pub(crate) const DEFAULT_BUILDER_PREFIX: &str = "meshtop://host/";

/// The most envelopes an `.att` manifest may hold to be judged, as for signatures.
pub(crate) const MAX_ATTESTATION_LAYERS: usize = cosign::MAX_SIGNATURE_LAYERS;
/// The most bytes of one envelope: a meshtop provenance is 2-3 KiB; 256 KiB leaves room for
/// another producer's (BuildKit's lists every build step) while a registry cannot make a plan
/// read without end.
pub const MAX_ENVELOPE_BYTES: usize = 256 * 1024;

/// The builder id: the mesh's, else `MESHTOP_BUILDER_ID`'s, else [`DEFAULT_BUILDER_PREFIX`]+host.
pub fn builder_id(mesh: Option<&str>, env: Option<&str>, host: &str) -> String {
    mesh.or(env)
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("{DEFAULT_BUILDER_PREFIX}{host}"))
}

/// The tag holding the attestations of manifest `digest` (`sha256:ab…` → `sha256-ab….att`).
pub fn attestation_tag(digest: &str) -> Option<String> {
    cosign::signature_tag(digest).map(|tag| tag.replace(".sig", ".att"))
}

/// What a meshtop build's provenance says: the statement's subject and predicate, as meshtop writes them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Provenance {
    /// The subject's name: `host/repository`, as cosign's `docker-reference`.
    pub subject: String,
    /// The artifact's manifest digest (`sha256:…`).
    pub manifest: String,
    pub module: String,
    /// The full input digest the ref abbreviates.
    pub inputs: String,
    pub platforms: Vec<String>,
    pub base: Option<BaseDependency>,
    /// The build args' names (never their values: they may hold what is not for everyone).
    pub build_args: Vec<String>,
    pub source: Option<SourceDependency>,
    /// Each upstream image the Dockerfile names → the digest it was built on (`mesh.lock`'s).
    pub upstreams: std::collections::BTreeMap<String, String>,
    /// Each named context → the artifact of the module it names.
    pub contexts: std::collections::BTreeMap<String, String>,
    pub builder_id: String,
    /// The operation's id.
    pub invocation_id: String,
    /// RFC 3339.
    pub started_on: Option<String>,
    pub finished_on: Option<String>,
    /// The machine that built it, the mesh, the operation's short number.
    pub host: Option<String>,
    pub mesh: String,
    pub operation: Option<i64>,
}

/// The base module's artifact a build was FROM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseDependency {
    pub module: String,
    /// Where it is (a ref), and its digest (a manifest digest where the build knew one).
    pub uri: String,
    pub digest: Option<String>,
}

/// The git commit a build context came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDependency {
    /// `git+<remote>` (or `git+file://<work tree>` without a remote).
    pub uri: String,
    pub commit: String,
    pub dirty: bool,
}

/// `{"sha256": "<hex>"}` of `sha256:<hex>` (in-toto `ResourceDescriptor.digest`), else `{"digest": d}`.
fn digest_set(digest: &str) -> Value {
    match digest.split_once(':') {
        Some((algorithm, hex)) => json!({ algorithm: hex }),
        None => json!({ "sha256": digest }),
    }
}

/// The in-toto Statement v1 of `provenance`, as bytes (the DSSE body).
pub fn statement(provenance: &Provenance) -> Vec<u8> {
    let mut dependencies = Vec::new();
    if let Some(base) = &provenance.base {
        let mut dependency = json!({ "name": format!("base:{}", base.module), "uri": base.uri });
        if let Some(digest) = &base.digest {
            dependency["digest"] = digest_set(digest);
        }
        dependencies.push(dependency);
    }
    for (image, digest) in &provenance.upstreams {
        dependencies.push(json!({
            "name": format!("upstream:{image}"),
            "uri": image,
            "digest": digest_set(digest),
        }));
    }
    for (name, artifact) in &provenance.contexts {
        dependencies
            .push(json!({ "name": format!("context:{name}"), "digest": digest_set(artifact) }));
    }
    if let Some(source) = &provenance.source {
        // in-toto `ResourceDescriptor`: a git commit is digest algorithm `gitCommit`.
        dependencies.push(json!({
            "uri": source.uri,
            "digest": { "gitCommit": source.commit },
            "annotations": { "dirty": source.dirty },
        }));
    }
    let mut metadata = json!({ "invocationId": provenance.invocation_id });
    if let Some(at) = &provenance.started_on {
        metadata["startedOn"] = json!(at);
    }
    if let Some(at) = &provenance.finished_on {
        metadata["finishedOn"] = json!(at);
    }
    let statement = json!({
        "_type": STATEMENT_TYPE,
        "subject": [{ "name": provenance.subject, "digest": digest_set(&provenance.manifest) }],
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "module": provenance.module,
                    "inputs": provenance.inputs,
                    "platforms": provenance.platforms,
                    "base": provenance.base.as_ref().map(|b| b.module.clone()),
                    "buildArgs": provenance.build_args,
                },
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": { "id": provenance.builder_id },
                "metadata": metadata,
            },
            VENDOR_FIELD: {
                "host": provenance.host,
                "mesh": provenance.mesh,
                "operation": provenance.operation,
            },
        },
    });
    serde_json::to_vec(&statement).unwrap_or_default()
}

/// DSSE's pre-authentication encoding (`protocol.md`):
/// `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, LEN the ASCII decimal byte count.
pub(crate) fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The DSSE envelope (`envelope.md`) of `statement`, signed by `key` over its PAE. `keyid` is
/// empty, as cosign writes it for a key (it is an unauthenticated hint, `protocol.md`).
pub fn envelope(statement: &[u8], key: &SigningKey) -> Vec<u8> {
    let signature = key.sign(&pae(IN_TOTO_PAYLOAD_TYPE, statement));
    serde_json::to_vec(&json!({
        "payloadType": IN_TOTO_PAYLOAD_TYPE,
        "payload": STANDARD.encode(statement),
        "signatures": [{ "keyid": "", "sig": signature }],
    }))
    .unwrap_or_default()
}

/// The `.att` image holding the layers of `existing` (kept as they are) and one more envelope.
/// None when `existing` holds that very envelope already. The layer also carries the envelope
/// itself (OCI image-spec v1.1 descriptor `data`), so that a reader of meshtop needs the manifest
/// alone; the blob is uploaded beside it for every other reader (cosign fetches the blob).
pub fn append_attestation(
    existing: Option<&[u8]>,
    envelope: &[u8],
) -> Result<Option<SignatureImage>, FormatError> {
    let digest = cosign::sha256_digest(envelope);
    let layer = json!({
        "mediaType": DSSE_MEDIA_TYPE,
        "size": envelope.len(),
        "digest": digest,
        "data": STANDARD.encode(envelope),
        // cosign writes an empty signature annotation on attestation layers (`static.NewAttestation`).
        "annotations": {
            cosign::SIGNATURE_ANNOTATION: "",
            PREDICATE_TYPE_ANNOTATION: SLSA_PROVENANCE_V1,
        },
    });
    cosign::append_layer(existing, layer, &digest, MAX_ATTESTATION_LAYERS)
}

/// One envelope layer of an `.att` manifest: its blob digest and size, and the envelope when the
/// descriptor embeds it (checked against its digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestationLayer {
    pub digest: String,
    pub size: u64,
    pub embedded: Option<Vec<u8>>,
}

/// The DSSE layers of an `.att` manifest (others are skipped), bounded as signatures are.
pub fn attestation_layers(manifest: &[u8]) -> Result<Vec<AttestationLayer>, FormatError> {
    let value: Value = serde_json::from_slice(manifest).map_err(cosign::Malformed::NotJson)?;
    let layers = value
        .get("layers")
        .and_then(Value::as_array)
        .ok_or(cosign::Malformed::NoLayers)?;
    if layers.len() > MAX_ATTESTATION_LAYERS {
        return Err(FormatError::TooManyLayers {
            count: layers.len(),
        });
    }
    let mut found = Vec::new();
    for layer in layers {
        if layer.get("mediaType").and_then(Value::as_str) != Some(DSSE_MEDIA_TYPE) {
            continue;
        }
        let Some(digest) = layer.get("digest").and_then(Value::as_str) else {
            continue;
        };
        let size = layer.get("size").and_then(Value::as_u64).unwrap_or(0);
        if size > MAX_ENVELOPE_BYTES as u64 {
            return Err(FormatError::PayloadTooLarge {
                digest: digest.to_string(),
                size,
            });
        }
        let embedded = layer
            .get("data")
            .and_then(Value::as_str)
            .and_then(|d| STANDARD.decode(d).ok())
            .filter(|bytes| cosign::sha256_digest(bytes) == digest);
        found.push(AttestationLayer {
            digest: digest.to_string(),
            size,
            embedded,
        });
    }
    Ok(found)
}

/// What a verified provenance says, as read (from meshtop's or another producer's statement).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadProvenance {
    /// The trusted key that signed it (its trust path).
    pub key: String,
    pub subjects: Vec<String>,
    pub build_type: Option<String>,
    pub builder_id: Option<String>,
    pub module: Option<String>,
    pub inputs: Option<String>,
    pub commit: Option<String>,
    pub source: Option<String>,
    pub invocation_id: Option<String>,
    pub started_on: Option<String>,
    pub finished_on: Option<String>,
    pub host: Option<String>,
}

/// The envelope's statement, when one of `trusted` signed its PAE: (key name, statement bytes).
/// A DSSE payload may be standard or URL-safe base64 (`envelope.md`).
pub(crate) fn open_envelope(envelope: &[u8], trusted: &[TrustedKey]) -> Option<(String, Vec<u8>)> {
    let value: Value = serde_json::from_slice(envelope).ok()?;
    let payload_type = value.get("payloadType")?.as_str()?;
    if payload_type != IN_TOTO_PAYLOAD_TYPE {
        return None;
    }
    let encoded = value.get("payload")?.as_str()?;
    let body = STANDARD
        .decode(encoded)
        .or_else(|_| URL_SAFE.decode(encoded))
        .ok()?;
    let signed = pae(payload_type, &body);
    let signatures = value.get("signatures")?.as_array()?;
    signatures.iter().find_map(|signature| {
        let sig = signature.get("sig")?.as_str()?;
        let sig = STANDARD.encode(
            STANDARD
                .decode(sig)
                .or_else(|_| URL_SAFE.decode(sig))
                .ok()?,
        );
        let key = trusted.iter().find(|key| key.verifies(&signed, &sig))?;
        Some((key.name.clone(), body.clone()))
    })
}

/// A statement's SLSA v1 provenance, read; None when it is no Statement v1 of that predicate.
pub(crate) fn read_statement(key: &str, statement: &[u8]) -> Option<ReadProvenance> {
    let value: Value = serde_json::from_slice(statement).ok()?;
    (value.get("_type")?.as_str()? == STATEMENT_TYPE).then_some(())?;
    (value.get("predicateType")?.as_str()? == SLSA_PROVENANCE_V1).then_some(())?;
    let text = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let subjects = value
        .get("subject")?
        .as_array()?
        .iter()
        .filter_map(|s| {
            let sha = s.pointer("/digest/sha256")?.as_str()?;
            Some(format!("sha256:{sha}"))
        })
        .collect();
    let git = value
        .pointer("/predicate/buildDefinition/resolvedDependencies")
        .and_then(Value::as_array)
        .and_then(|deps| {
            deps.iter()
                .find(|d| d.pointer("/digest/gitCommit").is_some())
        });
    let vendor = format!("/predicate/{}", VENDOR_FIELD.replace('/', "~1"));
    Some(ReadProvenance {
        key: key.to_string(),
        subjects,
        build_type: text("/predicate/buildDefinition/buildType"),
        builder_id: text("/predicate/runDetails/builder/id"),
        module: text("/predicate/buildDefinition/externalParameters/module"),
        inputs: text("/predicate/buildDefinition/externalParameters/inputs"),
        commit: git
            .and_then(|d| d.pointer("/digest/gitCommit"))
            .and_then(Value::as_str)
            .map(str::to_string),
        source: git
            .and_then(|d| d.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_string),
        invocation_id: text("/predicate/runDetails/metadata/invocationId"),
        started_on: text("/predicate/runDetails/metadata/startedOn"),
        finished_on: text("/predicate/runDetails/metadata/finishedOn"),
        host: text(&format!("{vendor}/host")),
    })
}

/// The verified provenances of manifest `digest` among `envelopes` (as the registry served them):
/// signed by a trusted key, a SLSA v1 statement whose subject is this digest.
pub fn verified_for(
    digest: &str,
    envelopes: &[Vec<u8>],
    trusted: &[TrustedKey],
) -> Vec<ReadProvenance> {
    envelopes
        .iter()
        .filter_map(|envelope| open_envelope(envelope, trusted))
        .filter_map(|(key, statement)| read_statement(&key, &statement))
        .filter(|read| read.subjects.iter().any(|s| s == digest))
        .collect()
}

/// What the trusted provenance of an artifact says against what its ref says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ProvenanceVerdict {
    /// No provenance a trusted key signed for this digest.
    Absent,
    /// Built from the ref's inputs by a trusted builder.
    Matches { builder: String },
    /// Not a meshtop build (`names` its `buildType`): its parameters mean something else.
    OtherBuildType { names: String },
    /// Built as another module (`names` it) than the ref's.
    OtherModule { names: String },
    /// Built from other inputs (`names` the provenance's input digest).
    OtherInputs { names: String },
    /// Built from these inputs by a builder the mesh does not trust.
    UntrustedBuilder { builder: String },
    /// A builder the mesh trusts, claimed by `key`, which `trusted_builders` does not bind to it.
    UnboundBuilder { builder: String, key: String },
}

/// What a provenance must say to answer for one ref: meshtop's build type, the ref's module, and
/// the inputs the ref's tag abbreviates (the full digest, where the caller knows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub module: String,
    /// The ref's hex characters (`<hash12>` of `<hash12>-<arch>`).
    pub hash: String,
    /// The full input digest, when known.
    pub inputs: Option<String>,
}

impl Wanted {
    /// What `module`'s ref `reference` (`[registry/]mesh/module:<hash12>-<arch>`) asks of a
    /// provenance; `inputs` the full digest it abbreviates, when known.
    pub fn of_ref(module: &str, reference: &str, inputs: Option<&str>) -> Wanted {
        let tagged = reference.split('@').next().unwrap_or(reference);
        let (_, tag) = super::refs::split_reference(tagged);
        Wanted {
            module: module.to_string(),
            hash: tag.split('-').next().unwrap_or_default().to_string(),
            inputs: inputs.map(str::to_string),
        }
    }

    /// Whether `named` (a provenance's input digest) is the ref's: it starts with the tag's hash
    /// and is the full digest where that is known.
    fn inputs_match(&self, named: &str) -> bool {
        named.len() > self.hash.len()
            && named.starts_with(&self.hash)
            && self.inputs.as_deref().is_none_or(|full| full == named)
    }
}

/// Judge the verified provenances of an artifact against what the ref being decided says
/// (`wanted`) and `trusted_builders` (empty: any builder; each id only from the keys bound to
/// it). One that matches vouches; else the first refusal in this order is said: another build
/// type, another module, other inputs, an untrusted builder, a builder claimed by an unbound key.
pub fn judge(
    provenances: &[ReadProvenance],
    wanted: &Wanted,
    trusted_builders: &[TrustedBuilder],
) -> ProvenanceVerdict {
    let mut refusals: BTreeMap<u8, ProvenanceVerdict> = BTreeMap::new();
    let said = |text: &Option<String>| text.clone().unwrap_or_else(|| "none".into());
    for read in provenances {
        let builder = read.builder_id.clone().unwrap_or_default();
        let trusted: Vec<&TrustedBuilder> = trusted_builders
            .iter()
            .filter(|b| b.id == builder)
            .collect();
        let (rank, refusal) = if read.build_type.as_deref() != Some(BUILD_TYPE) {
            let names = said(&read.build_type);
            (0, ProvenanceVerdict::OtherBuildType { names })
        } else if read.module.as_deref() != Some(wanted.module.as_str()) {
            let names = said(&read.module);
            (1, ProvenanceVerdict::OtherModule { names })
        } else if !read
            .inputs
            .as_deref()
            .is_some_and(|i| wanted.inputs_match(i))
        {
            let names = said(&read.inputs);
            (2, ProvenanceVerdict::OtherInputs { names })
        } else if trusted_builders.is_empty() {
            return ProvenanceVerdict::Matches { builder };
        } else if trusted.is_empty() {
            (3, ProvenanceVerdict::UntrustedBuilder { builder })
        } else if !trusted.iter().any(|b| b.claimable_by(&read.key)) {
            let key = read.key.clone();
            (4, ProvenanceVerdict::UnboundBuilder { builder, key })
        } else {
            return ProvenanceVerdict::Matches { builder };
        };
        refusals.entry(rank).or_insert(refusal);
    }
    refusals
        .into_values()
        .next()
        .unwrap_or(ProvenanceVerdict::Absent)
}

#[cfg(test)]
#[path = "provenance_tests.rs"]
mod tests;
