//! An OCI registry over HTTP (reqwest + rustls): what it holds (`reads`), what meshtop writes or
//! deletes there (`writes`), the client and its transports (`client`), its auth flows (`auth`).
//! The push of an image through the daemon is the daemon's (`backends::daemon::push`).

mod attestations;
mod auth;
mod client;
mod reads;
mod signatures;
mod writes;

pub use reads::{InIndex, PlatformImage};
pub use writes::{DOCKER_MANIFEST, IndexEntry, OCI_INDEX, index_bytes};

pub use crate::mesh::decide::RegistryImage;
pub use client::{
    DOCKER_CERTS_D, REQUEST_TIMEOUT, RegistryClient, certs_d_cas, install_crypto_provider,
    is_loopback,
};

/// The manifest media types meshtop accepts: OCI index and manifest, Docker v2 manifest and list.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.docker.distribution.manifest.v2+json";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Present { digest: String },
    Absent,
}

/// What a registry answered to a manifest delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    /// Nothing there (deleted before).
    Absent,
    /// The registry does not allow deletes: the message says so and how to enable them.
    Unsupported(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot set up the HTTP client for registry {host}: {message}")]
    Client { host: String, message: String },
    #[error("registry {host} did not answer ({what}): {source}")]
    Http {
        host: String,
        what: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "registry {host} refused access to {what}: {message}; log in with `docker login {host}`"
    )]
    Unauthorized {
        host: String,
        what: String,
        message: String,
    },
    #[error("registry {host} answered {status} to {what}: {message}")]
    Status {
        host: String,
        what: String,
        status: u16,
        message: String,
    },
    #[error("registry {host} answered garbage for {what}: {message}")]
    Garbage {
        host: String,
        what: String,
        message: String,
    },
    #[error("pushing {reference} failed: {message}")]
    Push { reference: String, message: String },
    /// The manifest a push left in the registry is not the image the build produced.
    #[error(transparent)]
    NotBuilt(Box<NotBuilt>),
    /// A body fetched by digest hashes to another digest: the registry (or whatever stands in front
    /// of it) served other bytes under the digest asked for.
    #[error(
        "registry {host}'s digest did not match for {what}: asked for {expected}, got bytes whose digest is {got}"
    )]
    DigestMismatch {
        host: String,
        what: String,
        expected: String,
        got: String,
    },
    /// A manifest fetched by tag whose `Docker-Content-Digest` names another digest than its bytes.
    #[error(
        "registry {host}'s digest did not match for {what}: its Docker-Content-Digest says {header}, the manifest it sent is {body}"
    )]
    HeaderMismatch {
        host: String,
        what: String,
        header: String,
        body: String,
    },
    /// A body past the bound meshtop reads (a registry cannot make a plan read without end).
    #[error("registry {host} sent more than {limit} bytes for {what}: refused")]
    TooLarge {
        host: String,
        what: String,
        limit: usize,
    },
    /// A `.sig` image meshtop refuses to judge (past its bounds, or malformed).
    #[error("registry {host}: the signatures under {what} are refused: {source}")]
    Signatures {
        host: String,
        what: String,
        #[source]
        source: crate::mesh::cosign::FormatError,
    },
}

/// The manifest a push left in the registry is not the image the build produced: another process
/// moved the tag on the daemon between the build and the push.
#[derive(Debug, thiserror::Error)]
#[error(
    "{daemon} pushed {reference} to registry {host} as {manifest}, whose image is {pushed}, not {built}, the image the build produced: something moved the tag on that daemon between the build and the push; nothing of it is signed, attested or recorded"
)]
pub struct NotBuilt {
    pub reference: String,
    pub host: String,
    pub manifest: String,
    pub pushed: String,
    pub built: String,
    pub daemon: String,
}

pub use crate::mesh::refs::{repository_in, split_reference};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn references_split() {
        assert_eq!(
            split_reference("127.0.0.1:5000/test/x:tag"),
            ("127.0.0.1:5000/test/x", "tag")
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/test/x"),
            ("127.0.0.1:5000/test/x", "latest")
        );
        assert_eq!(
            repository_in("127.0.0.1:5000", "127.0.0.1:5000/demo/api:t"),
            ("demo/api", "t")
        );
    }
}
