//! Cosign signatures in the registry (tag-based discovery, sigstore/cosign `specs/SIGNATURE_SPEC.md`):
//! reading the `.sig` image beside an artifact and its payloads, and appending a signature to it.
//! The format itself (payload, layers, verdict) is pure, in `mesh::cosign`.

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use reqwest::Method;

use super::client::Body;
use super::{RegistryClient, RegistryError};
use crate::mesh::cosign::{
    self, OCI_MANIFEST_MEDIA_TYPE, SignatureLayer, SignatureVerdict, SigningKey, TrustedKey,
};

/// How many signature payloads are fetched at once.
const PAYLOADS_AT_ONCE: usize = 8;

impl RegistryClient {
    /// The signature layers under `digest`'s `.sig` tag in `repository`, each with its payload
    /// (None when the registry has no such blob); empty when there is no `.sig` tag. The `.sig` is
    /// read whole (junk layers before a signature do not hide it), within cosign's bounds as
    /// meshtop sets them ([`cosign::MAX_SIGNATURE_LAYERS`], [`cosign::MAX_PAYLOAD_BYTES`]): past
    /// them, or a payload that is not the blob its layer names, is an error saying so.
    pub async fn signatures(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<Vec<(SignatureLayer, Option<Vec<u8>>)>, RegistryError> {
        let Some(tag) = cosign::signature_tag(digest) else {
            return Ok(Vec::new());
        };
        let what = format!("{repository}:{tag}");
        let Some((_, manifest)) = self.manifest_body(repository, &tag, &what).await? else {
            return Ok(Vec::new());
        };
        let layers =
            cosign::signature_layers(&manifest).map_err(|source| RegistryError::Signatures {
                host: self.host.clone(),
                what: what.clone(),
                source,
            })?;
        futures_util::stream::iter(layers)
            .map(|layer| async move {
                let what = format!("the signature payload {} of {repository}", layer.digest);
                let payload = self
                    .fetch_blob(repository, &layer.digest, &what, cosign::MAX_PAYLOAD_BYTES)
                    .await?;
                Ok::<_, RegistryError>((layer, payload.map(|b| b.to_vec())))
            })
            .buffered(PAYLOADS_AT_ONCE)
            .try_collect()
            .await
    }

    /// What the signatures of `digest` in `repository` say, judged against `trusted`.
    pub async fn signature_verdict(
        &self,
        repository: &str,
        digest: &str,
        trusted: &[TrustedKey],
    ) -> Result<SignatureVerdict, RegistryError> {
        if trusted.is_empty() {
            return Ok(SignatureVerdict::Unverified);
        }
        let signatures = self.signatures(repository, digest).await?;
        Ok(cosign::judge(digest, &signatures, trusted))
    }

    /// Sign manifest `digest` of `repository` with `key`: the payload names `host/repository`
    /// (as cosign's `docker-reference`), and the signature is appended to the `.sig` image's
    /// layers (another signer's are kept). Nothing is written when this signature is there already.
    pub async fn sign(
        &self,
        repository: &str,
        digest: &str,
        key: &SigningKey,
    ) -> Result<(), RegistryError> {
        let what = format!("the signature of {repository}@{digest}");
        let garbage = |message: String| RegistryError::Garbage {
            host: self.host.clone(),
            what: what.clone(),
            message,
        };
        let tag = cosign::signature_tag(digest)
            .ok_or_else(|| garbage(format!("{digest} is not a sha256 digest")))?;
        let payload = cosign::payload(&format!("{}/{repository}", self.host), digest);
        let signature = key.sign(&payload);
        let payload_copy = payload.clone();
        self.append_and_put(repository, &tag, &what, payload, |existing| {
            cosign::append_signature(existing, &payload_copy, &signature)
        })
        .await
    }

    /// Append one layer to the image under `tag` (a `.sig` or `.att` image: the layers already
    /// there are kept) and upload what changed: the layer's blob, the config, then the manifest.
    /// `append` makes the new image from the manifest there (None: the layer is there already).
    pub(super) async fn append_and_put(
        &self,
        repository: &str,
        tag: &str,
        what: &str,
        layer: Vec<u8>,
        append: impl FnOnce(
            Option<&[u8]>,
        ) -> Result<Option<cosign::SignatureImage>, cosign::FormatError>,
    ) -> Result<(), RegistryError> {
        let existing = self.manifest_body(repository, tag, what).await?;
        let image = append(existing.as_ref().map(|(_, m)| m.as_ref())).map_err(|source| {
            RegistryError::Signatures {
                host: self.host.clone(),
                what: format!("{repository}:{tag}"),
                source,
            }
        })?;
        let Some(image) = image else {
            return Ok(());
        };
        self.put_blob(repository, Bytes::from(layer), what).await?;
        self.put_blob(repository, Bytes::from(image.config), what)
            .await?;
        self.put_manifest(
            repository,
            tag,
            Bytes::from(image.manifest),
            OCI_MANIFEST_MEDIA_TYPE,
            what,
        )
        .await
    }

    /// `GET /v2/<repository>/blobs/<digest>`: its bytes (checked against `digest`), or None (404).
    pub async fn blob(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<Option<Bytes>, RegistryError> {
        let what = format!("{repository}@{digest}");
        self.fetch_blob(repository, digest, &what, usize::MAX).await
    }

    /// Upload `bytes` as a blob (a monolithic upload: POST, then PUT with its digest), unless the
    /// registry holds it already.
    pub(super) async fn put_blob(
        &self,
        repository: &str,
        bytes: Bytes,
        what: &str,
    ) -> Result<(), RegistryError> {
        let digest = cosign::sha256_digest(&bytes);
        let scope = format!("repository:{repository}:pull,push");
        let head = format!("/v2/{repository}/blobs/{digest}");
        if self
            .send(Method::HEAD, &head, &scope, what)
            .await?
            .status()
            .is_success()
        {
            return Ok(());
        }
        let start = format!("/v2/{repository}/blobs/uploads/");
        let response = self.send(Method::POST, &start, &scope, what).await?;
        if !response.status().is_success() {
            return Err(self.status_error(what, response.status()));
        }
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| RegistryError::Garbage {
                host: self.host.clone(),
                what: what.to_string(),
                message: "its upload answer has no Location".into(),
            })?;
        let path = upload_path(location, &digest);
        let body = Body {
            content_type: "application/octet-stream",
            bytes,
        };
        let response = self
            .send_body(Method::PUT, &path, &scope, what, Some(&body))
            .await?;
        if !response.status().is_success() {
            return Err(self.status_error(what, response.status()));
        }
        Ok(())
    }

    /// `PUT /v2/<repository>/manifests/<tag>` with `bytes` of `media_type`.
    pub(super) async fn put_manifest(
        &self,
        repository: &str,
        tag: &str,
        bytes: Bytes,
        media_type: &'static str,
        what: &str,
    ) -> Result<(), RegistryError> {
        let scope = format!("repository:{repository}:pull,push");
        let path = format!("/v2/{repository}/manifests/{tag}");
        let body = Body {
            content_type: media_type,
            bytes,
        };
        let response = self
            .send_body(Method::PUT, &path, &scope, what, Some(&body))
            .await?;
        if !response.status().is_success() {
            let status = response.status();
            let message = self.error_text(response).await;
            return Err(RegistryError::Status {
                host: self.host.clone(),
                what: what.to_string(),
                status: status.as_u16(),
                message: message.trim().chars().take(200).collect(),
            });
        }
        Ok(())
    }
}

/// The path to PUT an upload's bytes to: its `Location` (absolute or a path, with or without a
/// query) plus `digest=`.
fn upload_path(location: &str, digest: &str) -> String {
    let path = match location.find("/v2/") {
        Some(at) => &location[at..],
        None => location,
    };
    let joiner = if path.contains('?') { '&' } else { '?' };
    format!("{path}{joiner}digest={digest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_put_to_their_location_with_the_digest() {
        assert_eq!(
            upload_path("/v2/demo/api/blobs/uploads/u1?_state=x", "sha256:ab"),
            "/v2/demo/api/blobs/uploads/u1?_state=x&digest=sha256:ab"
        );
        assert_eq!(
            upload_path(
                "http://127.0.0.1:5000/v2/demo/api/blobs/uploads/u1",
                "sha256:ab"
            ),
            "/v2/demo/api/blobs/uploads/u1?digest=sha256:ab"
        );
    }
}
