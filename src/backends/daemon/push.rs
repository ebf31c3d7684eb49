//! Pushing a tagged image to its registry through the daemon.

use futures_util::StreamExt;

use crate::backends::credentials::Credentials;
use crate::backends::registry::{RegistryError, split_reference};

/// The digest in a push's final status (`<tag>: digest: sha256:… size: N`).
pub fn digest_in_status(status: &str) -> Option<String> {
    let at = status.find("digest: sha256:")?;
    let digest = status[at + "digest: ".len()..].split_whitespace().next()?;
    Some(digest.to_string())
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
}

/// Push a tagged image through the daemon; returns the manifest digest the registry stored.
pub async fn push_image(
    docker: &bollard::Docker,
    reference: &str,
    creds: Option<&Credentials>,
) -> Result<String, RegistryError> {
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
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| fail(e.to_string()))?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(fail(error));
        }
        if let Some(found) = info.status.as_deref().and_then(digest_in_status) {
            digest = Some(found);
        }
    }
    digest.ok_or_else(|| fail("the daemon finished the push without naming a digest".into()))
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
    }
}
