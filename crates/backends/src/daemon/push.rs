//! Pushing a tagged image to its registry through the daemon.

use futures_util::StreamExt;

use crate::credentials::Credentials;
use crate::registry::{RegistryError, split_reference};

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
    /// Push a tagged image through this daemon; returns the manifest digest the registry stored.
    pub async fn push(
        &self,
        reference: &str,
        creds: Option<&Credentials>,
    ) -> Result<String, RegistryError> {
        push_image(self.docker(), reference, creds).await
    }

    /// Push a tagged image through this daemon; the manifest digest and its size in bytes (what
    /// an image index names).
    pub async fn push_sized(
        &self,
        reference: &str,
        creds: Option<&Credentials>,
    ) -> Result<(String, u64), RegistryError> {
        push_image_sized(self.docker(), reference, creds).await
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
