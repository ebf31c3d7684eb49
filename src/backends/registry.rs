//! An OCI registry over HTTP (reqwest + rustls): what it holds, and pushing through the daemon.

use std::collections::HashMap;
use std::sync::{Mutex, Once};

use futures_util::StreamExt;
use reqwest::header::{ACCEPT, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};
use sha2::{Digest, Sha256};

use crate::backends::credentials::Credentials;
use crate::mesh::model::Registry;

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
    #[error("pushing {reference} failed: {message}")]
    Push { reference: String, message: String },
}

/// Install rustls' ring provider once per process (reqwest is built without one).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first: that one serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Loopback registries may be spoken to in plain HTTP.
pub fn is_loopback(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name == "localhost"
        || name == "::1"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub struct RegistryClient {
    http: reqwest::Client,
    host: String,
    base: String,
    creds: Option<Credentials>,
    /// Bearer tokens by scope, for this client's life.
    tokens: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

fn parse_challenge(header: &str) -> Option<Challenge> {
    let (scheme, params) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut values: HashMap<String, String> = HashMap::new();
    let mut rest = params;
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_lowercase();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            (&quoted[..end], quoted.get(end + 1..).unwrap_or(""))
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        values.insert(key, value.to_string());
        rest = next;
    }
    Some(Challenge::Bearer {
        realm: values.remove("realm")?,
        service: values.remove("service"),
        scope: values.remove("scope"),
    })
}

impl RegistryClient {
    pub fn new(
        registry: &Registry,
        creds: Option<Credentials>,
    ) -> Result<RegistryClient, RegistryError> {
        install_crypto_provider();
        let plain = registry.insecure || is_loopback(&registry.host);
        let scheme = if plain { "http" } else { "https" };
        let http = reqwest::Client::builder()
            .tls_backend_rustls()
            .https_only(!plain)
            .user_agent(concat!("meshtop/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RegistryError::Client {
                host: registry.host.clone(),
                message: e.to_string(),
            })?;
        Ok(RegistryClient {
            http,
            host: registry.host.clone(),
            base: format!("{scheme}://{}", registry.host),
            creds,
            tokens: Mutex::new(HashMap::new()),
        })
    }

    /// `HEAD /v2/<repository>/manifests/<tag>`: published (with its digest) or absent.
    /// The registry's `host[:port]`.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub async fn manifest(&self, repository: &str, tag: &str) -> Result<Published, RegistryError> {
        let url = format!("{}/v2/{repository}/manifests/{tag}", self.base);
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
                let body = self.send(Method::GET, &url, &scope, &what).await?;
                let bytes = body.bytes().await.map_err(|e| self.http_error(&what, e))?;
                Ok(Published::Present {
                    digest: format!("sha256:{}", hex::encode(Sha256::digest(&bytes))),
                })
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

    /// `DELETE /v2/<repository>/manifests/<digest>`: deleted, already absent, or refused because the
    /// registry does not allow deletes (405, or an `UNSUPPORTED` error code).
    pub async fn delete_manifest(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<Deleted, RegistryError> {
        let url = format!("{}/v2/{repository}/manifests/{digest}", self.base);
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

    fn http_error(&self, what: &str, source: reqwest::Error) -> RegistryError {
        RegistryError::Http {
            host: self.host.clone(),
            what: what.to_string(),
            source: source.without_url(),
        }
    }

    fn request(&self, method: &Method, url: &str) -> reqwest::RequestBuilder {
        let accept = if *method == Method::HEAD || *method == Method::GET {
            MANIFEST_ACCEPT
        } else {
            "*/*"
        };
        self.http
            .request(method.clone(), url)
            .header(ACCEPT, accept)
    }

    /// Send, answering one authentication challenge (basic, or a bearer token from the challenge's realm).
    async fn send(
        &self,
        method: Method,
        url: &str,
        scope: &str,
        what: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let cached = self.tokens.lock().ok().and_then(|t| t.get(scope).cloned());
        let mut first = self.request(&method, url);
        if let Some(token) = &cached {
            first = first.bearer_auth(token);
        }
        let response = first.send().await.map_err(|e| self.http_error(what, e))?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_challenge);
        let unauthorized = |message: &str| RegistryError::Unauthorized {
            host: self.host.clone(),
            what: what.to_string(),
            message: message.to_string(),
        };
        let retry = match challenge {
            Some(Challenge::Basic) => match &self.creds {
                Some(Credentials::Basic { username, password }) => self
                    .request(&method, url)
                    .basic_auth(username, Some(password)),
                _ => {
                    return Err(unauthorized(
                        "it asks for a user name and password and none are configured",
                    ));
                }
            },
            Some(Challenge::Bearer {
                realm,
                service,
                scope: challenged,
            }) => {
                let scope_wanted = challenged.unwrap_or_else(|| scope.to_string());
                let token = self
                    .token(&realm, service.as_deref(), &scope_wanted, what)
                    .await?;
                if let Ok(mut tokens) = self.tokens.lock() {
                    tokens.insert(scope.to_string(), token.clone());
                }
                self.request(&method, url).bearer_auth(token)
            }
            None => {
                return Err(unauthorized(
                    "it answered 401 without a usable WWW-Authenticate challenge",
                ));
            }
        };
        let response = retry.send().await.map_err(|e| self.http_error(what, e))?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(unauthorized("the credentials were not accepted"));
        }
        Ok(response)
    }

    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        what: &str,
    ) -> Result<String, RegistryError> {
        let mut url = Url::parse(realm).map_err(|e| RegistryError::Unauthorized {
            host: self.host.clone(),
            what: what.to_string(),
            message: format!("its token realm {realm:?} is not a URL ({e})"),
        })?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        let mut request = self.http.get(url);
        if let Some(Credentials::Basic { username, password }) = &self.creds {
            request = request.basic_auth(username, Some(password));
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.http_error("its token service", e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(RegistryError::Unauthorized {
                host: self.host.clone(),
                what: what.to_string(),
                message: format!("its token service answered {status}"),
            });
        }
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| self.http_error("its token service", e))?;
        body.get("token")
            .or_else(|| body.get("access_token"))
            .and_then(|t| t.as_str())
            .map(str::to_string)
            .ok_or_else(|| RegistryError::Unauthorized {
                host: self.host.clone(),
                what: what.to_string(),
                message: "its token service answered without a token".into(),
            })
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

/// The digest in a push's final status (`<tag>: digest: sha256:… size: N`).
pub fn digest_in_status(status: &str) -> Option<String> {
    let at = status.find("digest: sha256:")?;
    let digest = status[at + "digest: ".len()..].split_whitespace().next()?;
    Some(digest.to_string())
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
        creds.map(|c| c.to_docker(server)),
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
    fn loopback_hosts() {
        for host in [
            "127.0.0.1:5000",
            "localhost:5000",
            "localhost",
            "[::1]:5000",
            "127.3.2.1",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "registry.example:5000",
            "10.0.0.1:5000",
            "localhost.example",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn references_and_push_status() {
        assert_eq!(
            split_reference("127.0.0.1:5000/test/x:tag"),
            ("127.0.0.1:5000/test/x", "tag")
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/test/x"),
            ("127.0.0.1:5000/test/x", "latest")
        );
        assert_eq!(
            digest_in_status("tag: digest: sha256:0123abcd size: 528").as_deref(),
            Some("sha256:0123abcd")
        );
        assert_eq!(digest_in_status("Pushed"), None);
    }

    #[test]
    fn bearer_challenges_parse() {
        let c = parse_challenge(
            r#"Bearer realm="http://127.0.0.1:1/token",service="reg",scope="repository:a/b:pull""#,
        );
        let Some(Challenge::Bearer {
            realm,
            service,
            scope,
        }) = c
        else {
            panic!("not bearer")
        };
        assert_eq!(realm, "http://127.0.0.1:1/token");
        assert_eq!(service.as_deref(), Some("reg"));
        assert_eq!(scope.as_deref(), Some("repository:a/b:pull"));
        assert!(matches!(
            parse_challenge("Basic realm=\"r\""),
            Some(Challenge::Basic)
        ));
    }
}
