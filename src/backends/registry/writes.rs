//! What meshtop changes in a registry: deleting a manifest (gc).

use reqwest::{Method, StatusCode};

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
        let body = response.text().await.unwrap_or_default();
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
