//! Content addresses: `[registry/]<mesh>/<module>:<hash12>-<arch[-arch…]>`.

use std::fmt;

use serde::Serialize;

use super::model::Platform;

/// How many hex digits of the inputs digest make the tag.
pub(crate) const HASH_LEN: usize = 12;

/// A module's content address. Same inputs ⇒ same ref, on any host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ImageRef {
    pub registry: Option<String>,
    pub mesh: String,
    pub module: String,
    pub hash: String,
    pub arches: Vec<String>,
}

impl ImageRef {
    /// `inputs_digest` is the full hex digest of the module's inputs; `platforms` must be resolved
    /// (never empty: the daemon's own platform stands in for "unset").
    pub fn new(
        registry: Option<&str>,
        mesh: &str,
        module: &str,
        inputs_digest: &str,
        platforms: &[Platform],
    ) -> ImageRef {
        ImageRef {
            registry: registry.map(str::to_string),
            mesh: mesh.to_string(),
            module: module.to_string(),
            hash: inputs_digest.chars().take(HASH_LEN).collect(),
            arches: arch_words(platforms),
        }
    }

    /// `[registry/]mesh/module`.
    pub fn repository(&self) -> String {
        match &self.registry {
            Some(registry) => format!("{registry}/{}/{}", self.mesh, self.module),
            None => format!("{}/{}", self.mesh, self.module),
        }
    }

    /// `<hash12>-<arch[-arch…]>`.
    pub(crate) fn tag(&self) -> String {
        format!("{}-{}", self.hash, self.arches.join("-"))
    }

    /// More than one platform: built by buildx and pushed, never held by the daemon.
    #[cfg(test)]
    pub(crate) fn is_multi_platform(&self) -> bool {
        self.arches.len() > 1
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.repository(), self.tag())
    }
}

/// The sorted, de-duplicated architecture words of a platform set (`arm` with variant `v7` → `armv7`).
pub(crate) fn arch_words(platforms: &[Platform]) -> Vec<String> {
    let mut words: Vec<String> = platforms
        .iter()
        .map(|p| match &p.variant {
            Some(variant) => format!("{}{variant}", p.arch),
            None => p.arch.clone(),
        })
        .collect();
    words.sort();
    words.dedup();
    words
}

/// The repository part of an image reference (`host:5000/a/b:tag@sha256:…` → `host:5000/a/b`).
pub fn repository_of(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    // A ':' after the last '/' starts the tag; one before it belongs to a registry port.
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// Split `registry/repo:tag` into (`registry/repo`, `tag`); a reference without a tag is `latest`.
pub fn split_reference(reference: &str) -> (&str, &str) {
    match reference.rfind(':') {
        Some(colon) if !reference[colon..].contains('/') => {
            (&reference[..colon], &reference[colon + 1..])
        }
        _ => (reference, "latest"),
    }
}

/// `host/demo/api:tag` → (`demo/api`, `tag`): the repository as the registry `host` names it.
pub fn repository_in<'a>(host: &str, reference: &'a str) -> (&'a str, &'a str) {
    let (repository, tag) = split_reference(reference);
    let path = repository
        .strip_prefix(host)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(repository);
    (path, tag)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn platform(text: &str) -> Platform {
        Platform::parse(text).expect("platform")
    }

    #[test]
    fn tag_takes_twelve_hex_and_sorted_arches() {
        let r = ImageRef::new(
            Some("localhost:5000"),
            "demo",
            "api",
            "9a8b7c6d5e4f00112233",
            &[platform("linux/arm64"), platform("linux/amd64")],
        );
        assert_eq!(
            r.to_string(),
            "localhost:5000/demo/api:9a8b7c6d5e4f-amd64-arm64"
        );
        assert!(r.is_multi_platform());
        let local = ImageRef::new(
            None,
            "demo",
            "base",
            "3f9c2a1b7d4e99",
            &[platform("linux/amd64")],
        );
        assert_eq!(local.to_string(), "demo/base:3f9c2a1b7d4e-amd64");
        assert!(!local.is_multi_platform());
    }

    #[test]
    fn variants_and_duplicates() {
        let words = arch_words(&[
            platform("linux/arm/v7"),
            platform("linux/amd64"),
            platform("linux/amd64"),
        ]);
        assert_eq!(words, vec!["amd64", "armv7"]);
    }

    #[test]
    fn repository_of_strips_tag_and_digest_but_not_port() {
        assert_eq!(
            repository_of("localhost:5000/demo/api:abc-amd64"),
            "localhost:5000/demo/api"
        );
        assert_eq!(
            repository_of("localhost:5000/demo/api@sha256:00"),
            "localhost:5000/demo/api"
        );
        assert_eq!(
            repository_of("localhost:5000/demo/api"),
            "localhost:5000/demo/api"
        );
        assert_eq!(repository_of("demo/api:t@sha256:00"), "demo/api");
    }
}
