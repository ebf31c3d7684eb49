//! Images on the host daemon beyond the labelled listing: presence, tagging, and what gc needs
//! (the labelled images with their sizes, untagging, removal).

use bollard::query_parameters::{CreateImageOptions, RemoveImageOptions, TagImageOptions};
use futures_util::StreamExt;

use super::{Daemon, DaemonError};

pub use crate::mesh::gc::SizedImage;

fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

impl Daemon {
    /// Whether the daemon holds the image `id` (an image id or a ref).
    pub async fn has_image(&self, id: &str) -> Result<bool, DaemonError> {
        match self.docker.inspect_image(id).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(self.call_error("inspect an image")(e)),
        }
    }

    /// The manifest digests the daemon knows `image` by (its RepoDigests, `repository@sha256:…`):
    /// where an upstream resolves when no registry answers. Empty when the daemon holds no such
    /// image, or holds it without a digest (built or loaded here, never pulled or pushed).
    pub async fn repo_digests(&self, image: &str) -> Result<Vec<String>, DaemonError> {
        match self.docker.inspect_image(image).await {
            Ok(inspect) => Ok(inspect.repo_digests.unwrap_or_default()),
            Err(e) if is_not_found(&e) => Ok(Vec::new()),
            Err(e) => Err(self.call_error("inspect an image")(e)),
        }
    }

    /// Tag the image `id` as `reference` (`repository:tag`).
    pub async fn tag(&self, id: &str, reference: &str) -> Result<(), DaemonError> {
        let (repo, tag) = crate::registry::split_reference(reference);
        let options = TagImageOptions {
            repo: Some(repo.to_string()),
            tag: Some(tag.to_string()),
        };
        self.docker
            .tag_image(id, Some(options))
            .await
            .map_err(self.call_error("tag an image"))
    }

    /// Pull `repository@digest` (a manifest the registry vouched with) and return the image id (the
    /// config digest). Nothing is tagged: the caller tags it under a ref only once the id is the
    /// artifact it expects. `auth` is the registry's login.
    pub async fn pull_by_digest(
        &self,
        repository: &str,
        digest: &str,
        auth: Option<bollard::auth::DockerCredentials>,
    ) -> Result<String, DaemonError> {
        let pinned = format!("{repository}@{digest}");
        let options = CreateImageOptions {
            from_image: Some(pinned.clone()),
            ..Default::default()
        };
        let mut stream = self.docker.create_image(Some(options), None, auth);
        while let Some(item) = stream.next().await {
            let info = item.map_err(self.call_error("pull an image"))?;
            if let Some(message) = info.error_detail.and_then(|d| d.message) {
                return Err(DaemonError::Refused {
                    endpoint: self.endpoint.to_string(),
                    message: format!("pulling {pinned}: {message}"),
                });
            }
        }
        let id = self
            .docker
            .inspect_image(&pinned)
            .await
            .map_err(self.call_error("inspect a pulled image"))?
            .id
            .ok_or_else(|| DaemonError::Refused {
                endpoint: self.endpoint.to_string(),
                message: format!("the pulled image {pinned} has no id"),
            })?;
        Ok(id)
    }

    /// Every image carrying meshtop's module label, with its size, in one call.
    pub async fn sized_images(&self) -> Result<Vec<SizedImage>, DaemonError> {
        Ok(self
            .labelled_summaries(false)
            .await?
            .into_iter()
            .map(|summary| SizedImage {
                id: summary.id,
                tags: super::real_tags(summary.repo_tags),
                labels: summary.labels,
                size: summary.size,
                created_ms: summary.created.saturating_mul(1000),
            })
            .collect())
    }

    /// Remove one tag (the image stays while it has others) or an untagged image by id; never
    /// forced: an image a container uses is refused by the daemon, and that refusal is the error.
    pub async fn remove(&self, name: &str) -> Result<(), DaemonError> {
        let options = RemoveImageOptions {
            force: false,
            noprune: false,
            platforms: None,
        };
        self.docker
            .remove_image(name, Some(options), None)
            .await
            .map(|_| ())
            .map_err(self.call_error("remove an image"))
    }
}
