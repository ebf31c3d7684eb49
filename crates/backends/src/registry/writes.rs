//! What meshtop changes in a registry: deleting a manifest (gc), and the OCI image index of a
//! multi-platform module, stitched from the manifests its platforms' builders pushed.

use bytes::Bytes;
use reqwest::{Method, StatusCode};
use sha2::{Digest, Sha256};

use super::{Deleted, RegistryClient, RegistryError};

impl RegistryClient {
    /// `DELETE /v2/<repository>/manifests/<digest>`: deleted, already absent, or refused because the
    /// registry does not allow deletes (405, or an `UNSUPPORTED` error code).
    pub async fn delete_manifest(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<Deleted, RegistryError> {
        let url = format!("/v2/{repository}/manifests/{digest}");
        let what = format!("{repository}@{digest}");
        let scope = format!("repository:{repository}:delete");
        let response = self.send(Method::DELETE, &url, &scope, &what).await?;
        let status = response.status();
        if status.is_success() {
            return Ok(Deleted::Deleted);
        }
        if status == StatusCode::NOT_FOUND {
            return Ok(Deleted::Absent);
        }
        let body = self.error_text(response).await;
        if status == StatusCode::METHOD_NOT_ALLOWED || body.contains("UNSUPPORTED") {
            return Ok(Deleted::Unsupported(format!(
                "registry {} does not allow deletes ({status}); enable them in its configuration (distribution: `storage: delete: enabled: true`)",
                self.host
            )));
        }
        Err(RegistryError::Status {
            host: self.host.clone(),
            what,
            status: status.as_u16(),
            message: body.trim().chars().take(200).collect(),
        })
    }
}

/// The OCI image index's media type (image-spec `image-index.md`).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The manifest a Docker engine pushes (distribution's `manifest/schema2`).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// One platform's manifest as an index names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub digest: String,
    pub size: u64,
    pub media_type: &'static str,
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

/// The bytes of an OCI image index naming `entries`, in their order (the same entries give the
/// same bytes, so the same digest).
pub fn index_bytes(entries: &[IndexEntry]) -> Vec<u8> {
    let manifests: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            let mut platform = serde_json::json!({"architecture": e.architecture, "os": e.os});
            if let Some(variant) = &e.variant {
                platform["variant"] = serde_json::Value::String(variant.clone());
            }
            serde_json::json!({
                "mediaType": e.media_type,
                "digest": e.digest,
                "size": e.size,
                "platform": platform,
            })
        })
        .collect();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": manifests,
    });
    // serde_json's `Value` keeps its keys sorted: one index, one byte sequence.
    serde_json::to_vec(&index).unwrap_or_default()
}

impl RegistryClient {
    /// Write the OCI image index naming `entries` under `repository:tag`; its digest (the
    /// multi-platform module's artifact). Every manifest it names must be in the repository
    /// already (the registry refuses an index naming one it lacks).
    pub async fn put_index(
        &self,
        repository: &str,
        tag: &str,
        entries: &[IndexEntry],
    ) -> Result<String, RegistryError> {
        let bytes = index_bytes(entries);
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        let what = format!("the image index {repository}:{tag}");
        self.put_manifest(repository, tag, Bytes::from(bytes), OCI_INDEX, &what)
            .await?;
        Ok(digest)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_index_names_each_platforms_manifest_and_is_the_same_bytes_each_time() {
        let entry = |arch: &str, digest: &str| IndexEntry {
            digest: digest.into(),
            size: 528,
            media_type: DOCKER_MANIFEST,
            os: "linux".into(),
            architecture: arch.into(),
            variant: None,
        };
        let entries = [entry("amd64", "sha256:aa"), entry("arm64", "sha256:bb")];
        let bytes = index_bytes(&entries);
        assert_eq!(bytes, index_bytes(&entries));
        let index: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(index["mediaType"], OCI_INDEX);
        assert_eq!(index["manifests"][1]["digest"], "sha256:bb");
        assert_eq!(index["manifests"][1]["platform"]["architecture"], "arm64");
        assert_eq!(index["manifests"][0]["size"], 528);
    }
}
