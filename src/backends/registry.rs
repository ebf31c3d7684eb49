//! An OCI registry over HTTP (reqwest + rustls): what it holds, and pushing through the daemon.
//! Long: one client of the distribution API with its auth flows (Basic, token, identity token) and transports (HTTPS, insecure, HTTP) in one place.

use std::collections::HashMap;
use std::sync::{Mutex, Once};

use futures_util::StreamExt;
use reqwest::header::{ACCEPT, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};
use sha2::{Digest, Sha256};

use crate::backends::credentials::Credentials;
pub use crate::mesh::decide::RegistryImage;
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
    #[error("registry {host} answered garbage for {what}: {message}")]
    Garbage {
        host: String,
        what: String,
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
    /// For https (verifying with the system's and `certs.d`'s CAs; not verifying for an insecure registry)
    /// and for token realms.
    https: reqwest::Client,
    /// For plain http (insecure registries only).
    plain: reqwest::Client,
    host: String,
    /// Where to try the registry, in order: `https://host` (then `http://host` for an insecure one).
    candidates: Vec<String>,
    /// The candidate that answered.
    base: Mutex<Option<String>>,
    creds: Option<Credentials>,
    /// Bearer tokens by scope, for this client's life.
    tokens: Mutex<HashMap<String, String>>,
    /// Each request's timeout ([`REQUEST_TIMEOUT`] unless [`RegistryClient::with_timeout`] set another).
    timeout: std::time::Duration,
}

/// Where Docker reads a registry's CAs: `/etc/docker/certs.d/<host>/*.crt`.
pub const DOCKER_CERTS_D: &str = "/etc/docker/certs.d";
/// Every registry request's timeout, and the connect timeout.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("host", &self.host)
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
    /// A client as Docker reaches the registry: a secure registry over HTTPS only, verified with the
    /// system's roots and the CAs of `/etc/docker/certs.d/<host>/`; an insecure one (marked so, or on
    /// loopback, which Docker treats as insecure) over HTTPS without verification first, then plain HTTP
    /// (`registry/service.go` `lookupV2Endpoints` in moby).
    pub fn new(
        registry: &Registry,
        creds: Option<Credentials>,
    ) -> Result<RegistryClient, RegistryError> {
        RegistryClient::with_certs_dir(registry, creds, std::path::Path::new(DOCKER_CERTS_D))
    }

    /// As [`RegistryClient::new`], reading CAs under `certs_dir` instead of `/etc/docker/certs.d`.
    pub fn with_certs_dir(
        registry: &Registry,
        creds: Option<Credentials>,
        certs_dir: &std::path::Path,
    ) -> Result<RegistryClient, RegistryError> {
        install_crypto_provider();
        let insecure = registry.insecure || is_loopback(&registry.host);
        let fail = |message: String| RegistryError::Client {
            host: registry.host.clone(),
            message,
        };
        let builder = || {
            reqwest::Client::builder()
                .tls_backend_rustls()
                .timeout(REQUEST_TIMEOUT)
                .connect_timeout(CONNECT_TIMEOUT)
                .user_agent(concat!("meshtop/", env!("CARGO_PKG_VERSION")))
        };
        let mut https = builder();
        if insecure {
            https = https.danger_accept_invalid_certs(true);
        } else {
            for ca in certs_d_cas(certs_dir, &registry.host) {
                let pem = std::fs::read(&ca)
                    .map_err(|e| fail(format!("cannot read {}: {e}", ca.display())))?;
                let certificate = reqwest::Certificate::from_pem(&pem)
                    .map_err(|e| fail(format!("{} is not a PEM certificate: {e}", ca.display())))?;
                https = https.add_root_certificate(certificate);
            }
        }
        let https = https.build().map_err(|e| fail(e.to_string()))?;
        let plain = builder().build().map_err(|e| fail(e.to_string()))?;
        let mut candidates = vec![format!("https://{}", registry.host)];
        if insecure {
            candidates.push(format!("http://{}", registry.host));
        }
        Ok(RegistryClient {
            https,
            plain,
            host: registry.host.clone(),
            candidates,
            base: Mutex::new(None),
            creds,
            tokens: Mutex::new(HashMap::new()),
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// The same client with another timeout per request (and connect): a question the skip decision
    /// asks must not hold a plan for the default 30 s.
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> RegistryClient {
        self.timeout = timeout;
        self
    }

    /// The registry's `host[:port]`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `HEAD /v2/<repository>/manifests/<tag>`: published (with its digest) or absent.
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

    /// What the registry holds under `repository:tag`, for the skip decision: the manifest (GET, its
    /// digest from `Docker-Content-Digest` or its bytes) and its image config's labels (one blob GET).
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
        let scope = format!("repository:{repository}:pull");
        let blob = format!("/v2/{repository}/blobs/{config}");
        let response = self.send(Method::GET, &blob, &scope, &what).await?;
        if !response.status().is_success() {
            return Err(self.status_error(&what, response.status()));
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.http_error(&what, e))?;
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

    /// `GET /v2/<repository>/manifests/<reference>`: its digest and bytes, or None (404).
    async fn manifest_body(
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
            .filter(|d| d.starts_with("sha256:"))
            .map(str::to_string);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.http_error(what, e))?;
        let digest =
            header.unwrap_or_else(|| format!("sha256:{}", hex::encode(Sha256::digest(&bytes))));
        Ok(Some((digest, bytes)))
    }

    /// `GET /v2/<repository>/tags/list`, following its `Link: <…>; rel="next"` pages: every tag
    /// the repository holds; none when the registry does not know the repository (404).
    pub async fn tags(&self, repository: &str) -> Result<Vec<String>, RegistryError> {
        let what = format!("the tags of {repository}");
        let scope = format!("repository:{repository}:pull");
        let mut next = Some(format!("/v2/{repository}/tags/list"));
        let mut tags = Vec::new();
        while let Some(path) = next.take() {
            let response = self.send(Method::GET, &path, &scope, &what).await?;
            let status = response.status();
            if status == StatusCode::NOT_FOUND {
                break;
            }
            if !status.is_success() {
                return Err(self.status_error(&what, status));
            }
            next = response
                .headers()
                .get(reqwest::header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_page);
            let page: TagList = response
                .json()
                .await
                .map_err(|e| self.http_error(&what, e))?;
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
        let url = format!("/v2/{repository}/manifests/{digest}");
        let what = format!("{repository}@{digest}");
        let scope = format!("repository:{repository}:pull");
        let response = self.send(Method::GET, &url, &scope, &what).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(self.status_error(&what, status));
        }
        let manifest: serde_json::Value = response
            .json()
            .await
            .map_err(|e| self.http_error(&what, e))?;
        if manifest.get("manifests").is_some() {
            return Ok(Some(digest.to_string()));
        }
        let config = manifest
            .pointer("/config/digest")
            .and_then(|d| d.as_str())
            .filter(|d| d.starts_with("sha256:"));
        match config {
            Some(config) => Ok(Some(config.to_string())),
            None => Err(RegistryError::Status {
                host: self.host.clone(),
                what,
                status: status.as_u16(),
                message: "the manifest names neither a config nor manifests".into(),
            }),
        }
    }

    fn status_error(&self, what: &str, status: StatusCode) -> RegistryError {
        RegistryError::Status {
            host: self.host.clone(),
            what: what.to_string(),
            status: status.as_u16(),
            message: status
                .canonical_reason()
                .unwrap_or("unexpected answer")
                .into(),
        }
    }

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
        let client = if url.starts_with("http://") {
            &self.plain
        } else {
            &self.https
        };
        client
            .request(method.clone(), url)
            .header(ACCEPT, accept)
            .timeout(self.timeout)
    }

    /// Send to the registry at `path`, trying each candidate base until one connects (then kept).
    async fn send(
        &self,
        method: Method,
        path: &str,
        scope: &str,
        what: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let known = self.base.lock().ok().and_then(|b| b.clone());
        let candidates = match known {
            Some(base) => vec![base],
            None => self.candidates.clone(),
        };
        let mut last = None;
        for base in candidates {
            let url = format!("{base}{path}");
            match self.send_at(method.clone(), &url, scope, what).await {
                Err(RegistryError::Http { source, .. }) if source.is_connect() => {
                    tracing::debug!("registry {}: {base} does not connect: {source}", self.host);
                    last = Some(source);
                }
                result => {
                    if result.is_ok()
                        && let Ok(mut chosen) = self.base.lock()
                    {
                        *chosen = Some(base);
                    }
                    return result;
                }
            }
        }
        match last {
            Some(source) => Err(self.http_error(what, source)),
            None => Err(RegistryError::Client {
                host: self.host.clone(),
                message: "no address to try".into(),
            }),
        }
    }

    /// Send, answering one authentication challenge (basic, or a bearer token from the challenge's realm).
    async fn send_at(
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
        // Every challenge the registry offers (one WWW-Authenticate header each); a token flow is
        // preferred over basic, as Docker's auth handlers are ordered.
        let challenges: Vec<Challenge> = response
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(parse_challenge)
            .collect();
        let challenge = challenges
            .iter()
            .position(|c| matches!(c, Challenge::Bearer { .. }))
            .or(if challenges.is_empty() { None } else { Some(0) })
            .map(|i| challenges.into_iter().nth(i));
        let challenge = challenge.flatten();
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
        if let Some(Credentials::IdentityToken(refresh)) = &self.creds {
            return self.oauth_token(url, refresh, service, scope, what).await;
        }
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        let mut request = self.https.get(url);
        if let Some(Credentials::Basic { username, password }) = &self.creds {
            request = request.basic_auth(username, Some(password));
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.http_error("its token service", e))?;
        self.token_answer(response, what, ["token", "access_token"], |status| {
            format!("its token service answered {status}")
        })
        .await
    }

    /// The token in a token service's answer (the first of `keys` it has), or why there is none.
    async fn token_answer(
        &self,
        response: reqwest::Response,
        what: &str,
        keys: [&str; 2],
        refused: impl FnOnce(reqwest::StatusCode) -> String,
    ) -> Result<String, RegistryError> {
        let unauthorized = |message: String| RegistryError::Unauthorized {
            host: self.host.clone(),
            what: what.to_string(),
            message,
        };
        let status = response.status();
        if !status.is_success() {
            return Err(unauthorized(refused(status)));
        }
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| self.http_error("its token service", e))?;
        keys.iter()
            .find_map(|key| body.get(*key).and_then(|t| t.as_str()))
            .map(str::to_string)
            .ok_or_else(|| {
                unauthorized(format!("its token service answered without `{}`", keys[0]))
            })
    }
}

impl RegistryClient {
    /// Exchange an identity token (what `docker login` keeps for registries that issue one) for an access
    /// token: a POST to the realm with `grant_type=refresh_token` (distribution's `docs/spec/auth/oauth.md`;
    /// Docker's `registry/client/auth/session.go` fetchTokenWithOAuth).
    async fn oauth_token(
        &self,
        mut url: Url,
        refresh: &str,
        service: Option<&str>,
        scope: &str,
        what: &str,
    ) -> Result<String, RegistryError> {
        url.set_query(None);
        let mut form = Url::parse("http://form.invalid/").map_err(|e| RegistryError::Client {
            host: self.host.clone(),
            message: e.to_string(),
        })?;
        {
            let mut pairs = form.query_pairs_mut();
            pairs.append_pair("grant_type", "refresh_token");
            pairs.append_pair("refresh_token", refresh);
            if let Some(service) = service {
                pairs.append_pair("service", service);
            }
            pairs.append_pair("scope", scope);
            pairs.append_pair("client_id", "meshtop");
        }
        let body = form.query().unwrap_or_default().to_string();
        let response = self
            .https
            .post(url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| self.http_error("its token service", e))?;
        self.token_answer(response, what, ["access_token", "token"], |status| {
            format!("its token service refused the identity token ({status})")
        })
        .await
    }
}

/// The CA files Docker reads for a registry: `<certs_dir>/<host>/*.crt` (`registry/config.go`,
/// `ReadCertsDirectory` in moby), sorted.
pub fn certs_d_cas(certs_dir: &std::path::Path, host: &str) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(certs_dir.join(host)) else {
        return Vec::new();
    };
    let mut cas: Vec<std::path::PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "crt"))
        .collect();
    cas.sort();
    cas
}

/// A tags listing page (`{"name": …, "tags": […]}`; distribution answers `null` for none).
#[derive(serde::Deserialize)]
struct TagList {
    tags: Option<Vec<String>>,
}

/// The path of the next page in a `Link` header (`</v2/x/tags/list?n=100&last=t>; rel="next"`).
fn next_page(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then_some(())?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        // An absolute URL names the same registry: keep its path and query.
        let path = match target.find("/v2/") {
            Some(at) => &target[at..],
            None => target,
        };
        Some(path.to_string())
    })
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
    fn tag_pages_follow_the_next_link() {
        assert_eq!(
            next_page(r#"</v2/demo/web/tags/list?n=100&last=b>; rel="next""#).as_deref(),
            Some("/v2/demo/web/tags/list?n=100&last=b")
        );
        assert_eq!(
            next_page(r#"<https://r.example/v2/demo/web/tags/list?last=b>; rel="next""#).as_deref(),
            Some("/v2/demo/web/tags/list?last=b")
        );
        assert_eq!(next_page(r#"</v2/x>; rel="prev""#), None);
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
