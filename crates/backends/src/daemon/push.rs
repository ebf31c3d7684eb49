//! Pushing a tagged image to its registry through the daemon.

use futures_util::StreamExt;

use crate::credentials::Credentials;
use crate::mesh::model::Registry;
use crate::registry::{NotBuilt, RegistryClient, RegistryError, repository_in, split_reference};

/// The digest in a push's final status (`<tag>: digest: sha256:… size: N`).
pub fn digest_in_status(status: &str) -> Option<String> {
    let at = status.find("digest: sha256:")?;
    let digest = status[at + "digest: ".len()..].split_whitespace().next()?;
    Some(digest.to_string())
}

/// The manifest's size in a push's final status (`… size: N`).
pub fn size_in_status(status: &str) -> Option<u64> {
    let at = status.find("size: ")?;
    status[at + "size: ".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl super::Daemon {
    /// Push `built` (the image id a build produced) as `reference` through this daemon, then read
    /// the manifest back from `registry` and check that it is that image: the manifest digest and
    /// its size in bytes (what an image index names). The tag is set to `built` again just before
    /// the push, but any process that may `docker tag` on this daemon can move it between that and
    /// the daemon reading it, so the registry's manifest is what decides: a manifest whose config
    /// is another image is [`RegistryError::NotBuilt`], naming both ids and the daemon, and must
    /// not be signed, attested, recorded or put in an index.
    pub async fn push_built(
        &self,
        reference: &str,
        built: &str,
        registry: &Registry,
        creds: Option<&Credentials>,
    ) -> Result<(String, u64), RegistryError> {
        self.tag(built, reference)
            .await
            .map_err(|e| RegistryError::Push {
                reference: reference.to_string(),
                message: e.to_string(),
            })?;
        let (manifest, size) = push_image_sized(self.docker(), reference, creds).await?;
        let client = RegistryClient::new(registry, creds.cloned())?;
        let (repository, _) = repository_in(&registry.host, reference);
        let pushed = client.artifact_of(repository, &manifest).await?;
        // A daemon that keeps images in containerd names an image by its manifest's digest.
        if pushed.as_deref() == Some(built) || manifest == built {
            return Ok((manifest, size));
        }
        // Best effort: the daemon's tag names what was built again (the refusal is what matters).
        let _ = self.tag(built, reference).await;
        Err(RegistryError::NotBuilt(Box::new(NotBuilt {
            reference: reference.to_string(),
            host: registry.host.clone(),
            manifest,
            pushed: pushed.unwrap_or_else(|| "nothing".into()),
            built: built.to_string(),
            daemon: self.described(),
        })))
    }

    /// This daemon as a message names it: its endpoint (the local one with its `DOCKER_HOST`).
    fn described(&self) -> String {
        match (self.endpoint(), std::env::var("DOCKER_HOST")) {
            (crate::mesh::builders::Endpoint::Local, Ok(host)) if !host.is_empty() => {
                format!("the local daemon ({host})")
            }
            (crate::mesh::builders::Endpoint::Local, _) => "the local daemon".into(),
            (endpoint, _) => format!("the daemon at {endpoint}"),
        }
    }
}

/// Push a tagged image through the daemon; returns the manifest digest the registry stored.
pub async fn push_image(
    docker: &bollard::Docker,
    reference: &str,
    creds: Option<&Credentials>,
) -> Result<String, RegistryError> {
    push_image_sized(docker, reference, creds)
        .await
        .map(|(digest, _)| digest)
}

/// Push a tagged image through the daemon; the manifest digest the registry stored and its size
/// in bytes (as the daemon's last status line says them: what an image index names).
pub async fn push_image_sized(
    docker: &bollard::Docker,
    reference: &str,
    creds: Option<&Credentials>,
) -> Result<(String, u64), RegistryError> {
    let fail = |message: String| RegistryError::Push {
        reference: reference.to_string(),
        message,
    };
    if reference.contains('@') {
        return Err(fail(
            "a reference with a digest cannot be pushed: push its tag".into(),
        ));
    }
    let (repository, tag) = split_reference(reference);
    let server = repository.split('/').next().unwrap_or(repository);
    let options = bollard::query_parameters::PushImageOptionsBuilder::new()
        .tag(tag)
        .build();
    let mut stream = docker.push_image(
        repository,
        Some(options),
        creds.map(|c| c.for_daemon(server)),
    );
    let mut digest = None;
    let mut size = 0;
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| fail(e.to_string()))?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(fail(error));
        }
        if let Some(found) = info.status.as_deref().and_then(digest_in_status) {
            digest = Some(found);
            size = info.status.as_deref().and_then(size_in_status).unwrap_or(0);
        }
    }
    digest
        .map(|d| (d, size))
        .ok_or_else(|| fail("the daemon finished the push without naming a digest".into()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn push_status_names_the_digest() {
        assert_eq!(
            digest_in_status("tag: digest: sha256:0123abcd size: 528").as_deref(),
            Some("sha256:0123abcd")
        );
        assert_eq!(digest_in_status("Pushed"), None);
        assert_eq!(
            size_in_status("tag: digest: sha256:0123abcd size: 528"),
            Some(528)
        );
    }
}
