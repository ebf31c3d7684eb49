//! Attestations in the registry as cosign stores them (sigstore/cosign `specs/ATTESTATION_SPEC.md`):
//! the `.att` image beside an artifact, one DSSE envelope per layer. Reading them back and
//! appending one; the format (statement, envelope, verdict) is pure, in `mesh::provenance`.

use futures_util::{StreamExt, TryStreamExt};

use super::{RegistryClient, RegistryError};
use crate::mesh::cosign::TrustedKey;
use crate::mesh::provenance::{self, ReadProvenance};

/// How many envelopes are fetched at once (those the manifest does not embed).
const ENVELOPES_AT_ONCE: usize = 8;

impl RegistryClient {
    /// The DSSE envelopes under `digest`'s `.att` tag in `repository`; empty when there is none.
    /// One manifest GET when the layers embed their envelopes (meshtop's do); else one bounded blob
    /// GET per envelope, a few at once.
    pub async fn attestations(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<Vec<Vec<u8>>, RegistryError> {
        let Some(tag) = provenance::attestation_tag(digest) else {
            return Ok(Vec::new());
        };
        let what = format!("{repository}:{tag}");
        let Some((_, manifest)) = self.manifest_body(repository, &tag, &what).await? else {
            return Ok(Vec::new());
        };
        let layers = provenance::attestation_layers(&manifest).map_err(|source| {
            RegistryError::Signatures {
                host: self.host.clone(),
                what: what.clone(),
                source,
            }
        })?;
        let envelopes: Vec<Option<Vec<u8>>> = futures_util::stream::iter(layers)
            .map(|layer| async move {
                if let Some(embedded) = layer.embedded {
                    return Ok::<_, RegistryError>(Some(embedded));
                }
                let what = format!("the attestation {} of {repository}", layer.digest);
                let blob = self
                    .fetch_blob(
                        repository,
                        &layer.digest,
                        &what,
                        provenance::MAX_ENVELOPE_BYTES,
                    )
                    .await?;
                Ok(blob.map(|b| b.to_vec()))
            })
            .buffered(ENVELOPES_AT_ONCE)
            .try_collect()
            .await?;
        Ok(envelopes.into_iter().flatten().collect())
    }

    /// The SLSA v1 provenances of manifest `digest` a key of `trusted` signed.
    pub async fn provenance(
        &self,
        repository: &str,
        digest: &str,
        trusted: &[TrustedKey],
    ) -> Result<Vec<ReadProvenance>, RegistryError> {
        let envelopes = self.attestations(repository, digest).await?;
        Ok(provenance::verified_for(digest, &envelopes, trusted))
    }

    /// Attach `envelope` to manifest `digest` of `repository`: appended to the `.att` image's
    /// layers (others' are kept), the envelope uploaded as a blob too. Nothing is written when that
    /// very envelope is there already.
    pub async fn attest(
        &self,
        repository: &str,
        digest: &str,
        envelope: Vec<u8>,
    ) -> Result<(), RegistryError> {
        let what = format!("the provenance of {repository}@{digest}");
        let tag = provenance::attestation_tag(digest).ok_or_else(|| RegistryError::Garbage {
            host: self.host.clone(),
            what: what.clone(),
            message: format!("{digest} is not a sha256 digest"),
        })?;
        let layer = envelope.clone();
        self.append_and_put(repository, &tag, &what, layer, |existing| {
            provenance::append_attestation(existing, &envelope)
        })
        .await
    }
}
