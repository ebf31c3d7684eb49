//! What the registry holds: a manifest's digest, the image under a ref (its labels, for the skip
//! decision), a repository's tags, the artifact a manifest digest names.

use reqwest::{Method, StatusCode};
use sha2::{Digest, Sha256};

use super::{Published, RegistryClient, RegistryError, RegistryImage};

/// The most bytes read of a manifest or an image config: containerd's bound
/// (`remotes/docker/resolver.go`, `MaxManifestSize`, 4 × 1048 × 1048).
pub(super) const MAX_MANIFEST_BYTES: usize = 4 * 1048 * 1048;
/// The most one page of a tag list may hold (distribution answers at most its `n`, 100 by
/// default, a few KiB).
pub(super) const MAX_TAG_PAGE_BYTES: usize = 1024 * 1024;
/// The most pages a tag list is followed for.
pub(super) const MAX_TAG_PAGES: usize = 1000;
/// The most of an error body kept for its message (the rest is never read).
pub(super) const MAX_ERROR_BYTES: usize = 4096;

/// `sha256:<hex>` of `bytes`.
fn sha256_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl RegistryClient {
    /// `HEAD /v2/<repository>/manifests/<tag>`: published (with its digest) or absent. The digest is
    /// the registry's claim (a HEAD has no bytes to hash), as containerd's resolver takes it
    /// (`remotes/docker/resolver.go`, `Resolve`): whatever is then read or run by that digest is
    /// checked against it ([`RegistryClient::artifact_of`], the daemon's and the kubelet's pulls).
    pub async fn manifest(&self, repository: &str, tag: &str) -> Result<Published, RegistryError> {
        let url = format!("/v2/{repository}/manifests/{tag}");
        let what = format!("{repository}:{tag}");
        let scope = format!("repository:{repository}:pull");
        let response = self.send(Method::HEAD, &url, &scope, &what).await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(Published::Absent),
            status if status.is_success() => {
                let header = response
                    .headers()
                    .get("docker-content-digest")
                    .and_then(|v| v.to_str().ok());
                if let Some(digest) = header.filter(|d| d.starts_with("sha256:")) {
                    return Ok(Published::Present {
                        digest: digest.to_string(),
                    });
                }
                // No digest header: the digest is the manifest's own bytes.
                match self.manifest_body(repository, tag, &what).await? {
                    Some((digest, _)) => Ok(Published::Present { digest }),
                    None => Ok(Published::Absent),
                }
            }
            status => Err(RegistryError::Status {
                host: self.host.clone(),
                what,
                status: status.as_u16(),
                message: status
                    .canonical_reason()
                    .unwrap_or("unexpected answer")
                    .into(),
            }),
        }
    }

    /// What the registry holds under `repository:tag`, for the skip decision: the manifest (GET, its
    /// digest the hash of its bytes) and its image config's labels (one blob GET, checked).
    /// A multi-platform index answers with its first platform's config (one more manifest GET) and
    /// the index's digest as the artifact, as a multi-platform build records it.
    pub async fn image(
        &self,
        repository: &str,
        tag: &str,
    ) -> Result<Option<RegistryImage>, RegistryError> {
        let what = format!("{repository}:{tag}");
        let Some((manifest, body)) = self.manifest_body(repository, tag, &what).await? else {
            return Ok(None);
        };
        let garbage = |message: String| RegistryError::Garbage {
            host: self.host.clone(),
            what: what.clone(),
            message,
        };
        let mut parsed: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| garbage(format!("its manifest is not JSON ({e})")))?;
        let mut artifact = None;
        if let Some(entries) = parsed.get("manifests").and_then(|m| m.as_array()) {
            // An index: buildx adds attestation manifests for platform `unknown/unknown`.
            let first = entries
                .iter()
                .find(|m| m.pointer("/platform/os").and_then(|o| o.as_str()) != Some("unknown"))
                .and_then(|m| m.get("digest").and_then(|d| d.as_str()))
                .ok_or_else(|| garbage("its index names no platform manifest".into()))?
                .to_string();
            let (_, body) = self
                .manifest_body(repository, &first, &what)
                .await?
                .ok_or_else(|| garbage(format!("its index names {first}, which it lacks")))?;
            parsed = serde_json::from_slice(&body)
                .map_err(|e| garbage(format!("manifest {first} is not JSON ({e})")))?;
            artifact = Some(manifest.clone());
        }
        let config = parsed
            .pointer("/config/digest")
            .and_then(|d| d.as_str())
            .filter(|d| d.starts_with("sha256:"))
            .ok_or_else(|| garbage("its manifest names no image config".into()))?
            .to_string();
        let config_what = format!("the image config {config} of {what}");
        let bytes = self
            .fetch_blob(repository, &config, &config_what, MAX_MANIFEST_BYTES)
            .await?
            .ok_or_else(|| garbage(format!("its image config {config} is not in the registry")))?;
        let image: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| garbage(format!("its image config {config} is not JSON ({e})")))?;
        let labels = image
            .pointer("/config/Labels")
            .and_then(|l| l.as_object())
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(RegistryImage {
            manifest,
            artifact: artifact.unwrap_or(config),
            labels,
        }))
    }

    /// `GET /v2/<repository>/manifests/<reference>`: its digest (the hash of its bytes) and bytes,
    /// or None (404). Fetched by digest, the bytes must hash to it; fetched by tag, a
    /// `Docker-Content-Digest` that names another digest is an error naming both (as the docker CLI
    /// and containerd hash what they read, never taking the registry's word).
    pub(super) async fn manifest_body(
        &self,
        repository: &str,
        reference: &str,
        what: &str,
    ) -> Result<Option<(String, bytes::Bytes)>, RegistryError> {
        let url = format!("/v2/{repository}/manifests/{reference}");
        let scope = format!("repository:{repository}:pull");
        let response = self.send(Method::GET, &url, &scope, what).await?;
        match response.status() {
            StatusCode::NOT_FOUND => return Ok(None),
            status if !status.is_success() => return Err(self.status_error(what, status)),
            _ => {}
        }
        let header = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = self
            .read_bounded(response, what, MAX_MANIFEST_BYTES)
            .await?;
        // A tag never holds ':' (distribution `reference/regexp.go`): a reference with one is a digest.
        if reference.contains(':') {
            let digest = self.checked(what, reference, &bytes)?;
            return Ok(Some((digest, bytes)));
        }
        let digest = sha256_of(&bytes);
        match header {
            // Another algorithm's digest cannot be compared with the sha256 of the bytes.
            Some(header) if header.starts_with("sha256:") && header != digest => {
                Err(RegistryError::HeaderMismatch {
                    host: self.host.clone(),
                    what: what.to_string(),
                    header,
                    body: digest,
                })
            }
            _ => Ok(Some((digest, bytes))),
        }
    }

    /// `GET /v2/<repository>/blobs/<digest>`: its bytes (at most `limit`), checked against `digest`;
    /// None (404).
    pub(super) async fn fetch_blob(
        &self,
        repository: &str,
        digest: &str,
        what: &str,
        limit: usize,
    ) -> Result<Option<bytes::Bytes>, RegistryError> {
        let scope = format!("repository:{repository}:pull");
        let path = format!("/v2/{repository}/blobs/{digest}");
        let response = self.send(Method::GET, &path, &scope, what).await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let bytes = self.read_bounded(response, what, limit).await?;
                self.checked(what, digest, &bytes)?;
                Ok(Some(bytes))
            }
            status => Err(self.status_error(what, status)),
        }
    }

    /// `bytes` when they hash to `expected` (a sha256 digest), else the error naming both.
    fn checked(&self, what: &str, expected: &str, bytes: &[u8]) -> Result<String, RegistryError> {
        let got = sha256_of(bytes);
        if !expected.starts_with("sha256:") {
            return Err(RegistryError::Garbage {
                host: self.host.clone(),
                what: what.to_string(),
                message: format!(
                    "{expected} is not a sha256 digest, the only kind meshtop checks content against"
                ),
            });
        }
        if got != expected {
            return Err(RegistryError::DigestMismatch {
                host: self.host.clone(),
                what: what.to_string(),
                expected: expected.to_string(),
                got,
            });
        }
        Ok(got)
    }

    /// At most [`MAX_ERROR_BYTES`] of an error answer's body, as text for its message (what is
    /// past the bound is never read).
    pub(super) async fn error_text(&self, mut response: reqwest::Response) -> String {
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(MAX_ERROR_BYTES);
        String::from_utf8_lossy(&body).into_owned()
    }

    /// The body of `response`, refused past `limit` bytes (announced or sent).
    pub(super) async fn read_bounded(
        &self,
        mut response: reqwest::Response,
        what: &str,
        limit: usize,
    ) -> Result<bytes::Bytes, RegistryError> {
        let too_large = || RegistryError::TooLarge {
            host: self.host.clone(),
            what: what.to_string(),
            limit,
        };
        if response
            .content_length()
            .is_some_and(|length| length > limit as u64)
        {
            return Err(too_large());
        }
        let mut body = bytes::BytesMut::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.http_error(what, e))?
        {
            if body.len() + chunk.len() > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    }

    /// `GET /v2/<repository>/tags/list`, following its `Link: <…>; rel="next"` pages: every tag
    /// the repository holds; none when the registry does not know the repository (404).
    pub async fn tags(&self, repository: &str) -> Result<Vec<String>, RegistryError> {
        let what = format!("the tags of {repository}");
        let scope = format!("repository:{repository}:pull");
        let mut next = Some(format!("/v2/{repository}/tags/list"));
        let mut tags = Vec::new();
        let mut pages = 0;
        while let Some(path) = next.take() {
            pages += 1;
            if pages > MAX_TAG_PAGES {
                return Err(RegistryError::Garbage {
                    host: self.host.clone(),
                    what,
                    message: format!("its tag list goes on past {MAX_TAG_PAGES} pages: refused"),
                });
            }
            let response = self.send(Method::GET, &path, &scope, &what).await?;
            let status = response.status();
            if status == StatusCode::NOT_FOUND {
                break;
            }
            if !status.is_success() {
                return Err(self.status_error(&what, status));
            }
            let link = response
                .headers()
                .get(reqwest::header::LINK)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            next = match link {
                Some(link) => next_page(&link, self.url_base().as_deref()).map_err(|LeavesRegistry(target)| {
                    RegistryError::Garbage {
                        host: self.host.clone(),
                        what: what.clone(),
                        message: format!(
                            "its Link header's next page {target} leaves the registry (another host, or no /v2/ path): refused, never followed"
                        ),
                    }
                })?,
                None => None,
            };
            let body = self
                .read_bounded(response, &what, MAX_TAG_PAGE_BYTES)
                .await?;
            let page: TagList =
                serde_json::from_slice(&body).map_err(|e| RegistryError::Garbage {
                    host: self.host.clone(),
                    what: what.clone(),
                    message: format!("its tag list is not JSON ({e})"),
                })?;
            tags.extend(page.tags.unwrap_or_default());
        }
        Ok(tags)
    }

    /// The artifact the manifest `digest` in `repository` names: an image manifest's config digest
    /// (the image id), or an index's own digest (a multi-platform artifact); None when absent.
    pub async fn artifact_of(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<Option<String>, RegistryError> {
        let what = format!("{repository}@{digest}");
        let Some((_, body)) = self.manifest_body(repository, digest, &what).await? else {
            return Ok(None);
        };
        let manifest: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Garbage {
                host: self.host.clone(),
                what: what.clone(),
                message: format!("its manifest is not JSON ({e})"),
            })?;
        if manifest.get("manifests").is_some() {
            return Ok(Some(digest.to_string()));
        }
        let config = manifest
            .pointer("/config/digest")
            .and_then(|d| d.as_str())
            .filter(|d| d.starts_with("sha256:"));
        match config {
            Some(config) => Ok(Some(config.to_string())),
            None => Err(RegistryError::Garbage {
                host: self.host.clone(),
                what,
                message: "the manifest names neither a config nor manifests".into(),
            }),
        }
    }
}

/// One platform's image in an OCI index (or Docker manifest list): the manifest the index names
/// for it and the image config that manifest names (the image id a daemon gives it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformImage {
    pub manifest: String,
    pub config: String,
}

/// What an index fetched by its digest holds for one platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InIndex {
    Found(PlatformImage),
    /// The registry holds no manifest under the index's digest.
    Absent,
    /// The manifest under that digest is an image, not an index.
    NotAnIndex,
    /// The index names no manifest for the platform: the platforms it names (`linux/arm64`).
    Lacks {
        platforms: Vec<String>,
    },
}

impl RegistryClient {
    /// The image the index `index` (a digest: its bytes must hash to it) names for the platform
    /// `os`/`arch`[/`variant`]: the manifest is found in that index only (never by a tag looked up
    /// again), fetched by its own digest (checked), and its config named. A variant is compared
    /// only when both say one (containerd's `platforms.Only` matcher is no stricter for these).
    pub async fn platform_in_index(
        &self,
        repository: &str,
        index: &str,
        os: &str,
        arch: &str,
        variant: Option<&str>,
    ) -> Result<InIndex, RegistryError> {
        let what = format!("{repository}@{index}");
        let Some((_, body)) = self.manifest_body(repository, index, &what).await? else {
            return Ok(InIndex::Absent);
        };
        let garbage = |what: &str, message: String| RegistryError::Garbage {
            host: self.host.clone(),
            what: what.to_string(),
            message,
        };
        let parsed: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| garbage(&what, format!("its manifest is not JSON ({e})")))?;
        let Some(entries) = parsed.get("manifests").and_then(|m| m.as_array()) else {
            return Ok(InIndex::NotAnIndex);
        };
        let field = |m: &serde_json::Value, key: &str| {
            m.pointer(&format!("/platform/{key}"))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let fits = |m: &&serde_json::Value| {
            field(m, "os").as_deref() == Some(os)
                && field(m, "architecture").as_deref() == Some(arch)
                && (variant.is_none()
                    || field(m, "variant").is_none()
                    || field(m, "variant").as_deref() == variant)
        };
        let Some(chosen) = entries.iter().find(fits) else {
            let platforms = entries
                .iter()
                .filter_map(|m| Some(format!("{}/{}", field(m, "os")?, field(m, "architecture")?)))
                .collect();
            return Ok(InIndex::Lacks { platforms });
        };
        let manifest = chosen
            .get("digest")
            .and_then(|d| d.as_str())
            .filter(|d| d.starts_with("sha256:"))
            .ok_or_else(|| garbage(&what, format!("its entry for {os}/{arch} names no digest")))?
            .to_string();
        let child = format!("{repository}@{manifest}");
        let (_, body) = self
            .manifest_body(repository, &manifest, &child)
            .await?
            .ok_or_else(|| {
                garbage(
                    &what,
                    format!("it names {manifest}, which the registry lacks"),
                )
            })?;
        let parsed: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| garbage(&child, format!("its manifest is not JSON ({e})")))?;
        let config = parsed
            .pointer("/config/digest")
            .and_then(|d| d.as_str())
            .filter(|d| d.starts_with("sha256:"))
            .ok_or_else(|| garbage(&child, "its manifest names no image config".into()))?
            .to_string();
        Ok(InIndex::Found(PlatformImage { manifest, config }))
    }
}

/// A tags listing page (`{"name": …, "tags": […]}`; distribution answers `null` for none).
#[derive(serde::Deserialize)]
struct TagList {
    tags: Option<Vec<String>>,
}

/// The path of the next page in a `Link` header (`</v2/x/tags/list?n=100&last=t>; rel="next"`).
/// The path (and query) of a `Link` header's `rel="next"` page, on the registry at `base`
/// (`http[s]://host[:port]`, the one the client talks to): a path under `/v2/`, or an absolute URL
/// that starts with `base` then `/v2/`. Err: the target, when it leaves the registry (another
/// host, another scheme, no `/v2/` path); it is never followed (the bearer token would go with it).
fn next_page(link: &str, base: Option<&str>) -> Result<Option<String>, LeavesRegistry> {
    let Some(target) = link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then_some(())?;
        target.trim().strip_prefix('<')?.strip_suffix('>')
    }) else {
        return Ok(None);
    };
    let path = match base.and_then(|base| target.strip_prefix(base)) {
        Some(path) => path,
        None => target,
    };
    let safe = |c: char| c.is_ascii_alphanumeric() || "/-._~?&=%+:,".contains(c);
    let route = path.split('?').next().unwrap_or(path);
    let dots = route.split('/').any(|part| part == ".." || part == ".");
    if path.starts_with("/v2/") && !path.contains("//") && !dots && path.chars().all(safe) {
        return Ok(Some(path.to_string()));
    }
    Err(LeavesRegistry(target.to_string()))
}

/// A `Link` header's next page that leaves the registry: its target as the header wrote it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct LeavesRegistry(String);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tag_pages_follow_the_next_link_only_on_the_registry() {
        let base = Some("https://r.example");
        assert_eq!(
            next_page(r#"</v2/demo/web/tags/list?n=100&last=b>; rel="next""#, base),
            Ok(Some("/v2/demo/web/tags/list?n=100&last=b".into()))
        );
        assert_eq!(
            next_page(
                r#"<https://r.example/v2/demo/web/tags/list?last=b>; rel="next""#,
                base
            ),
            Ok(Some("/v2/demo/web/tags/list?last=b".into()))
        );
        assert_eq!(next_page(r#"</v2/x>; rel="prev""#, base), Ok(None));
        for away in [
            "https://elsewhere.example/v2/demo/web/tags/list?last=b",
            "http://r.example/v2/x",
            "@elsewhere.example/v2/x",
            "//elsewhere.example/v2/x",
            "/tags/list?last=b",
            "/v2/../steal",
        ] {
            let link = format!("<{away}>; rel=\"next\"");
            assert!(next_page(&link, base).is_err(), "{away} followed");
        }
    }
}
