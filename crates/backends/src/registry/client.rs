//! The registry client: its transports (HTTPS verified with Docker's CAs, HTTPS unverified and
//! plain HTTP for an insecure registry) and the one way every request is sent.

use std::collections::HashMap;
use std::sync::{Mutex, Once};

use reqwest::header::ACCEPT;
use reqwest::{Method, StatusCode};

use super::{MANIFEST_ACCEPT, RegistryError};
use crate::credentials::Credentials;
use crate::mesh::model::Registry;

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
    pub(super) https: reqwest::Client,
    /// For plain http (insecure registries only).
    pub(super) plain: reqwest::Client,
    pub(super) host: String,
    /// Where to try the registry, in order: `https://host` (then `http://host` for an insecure one).
    pub(super) candidates: Vec<String>,
    /// The candidate that answered.
    pub(super) base: Mutex<Option<String>>,
    pub(super) creds: Option<Credentials>,
    /// Bearer tokens by scope, for this client's life.
    pub(super) tokens: Mutex<HashMap<String, String>>,
    /// Each request's timeout ([`REQUEST_TIMEOUT`] unless [`RegistryClient::with_timeout`] set another).
    pub(super) timeout: std::time::Duration,
}

/// What a request carries: its content type and bytes (cheap to clone for a retry).
pub(super) struct Body {
    pub content_type: &'static str,
    pub bytes: bytes::Bytes,
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

    /// The scheme and host this client reaches the registry at (`http://127.0.0.1:5000`), once a
    /// request went through.
    pub(super) fn url_base(&self) -> Option<String> {
        self.base.lock().ok().and_then(|b| b.clone())
    }

    /// The registry's `host[:port]`.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub(super) fn status_error(&self, what: &str, status: StatusCode) -> RegistryError {
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

    pub(super) fn http_error(&self, what: &str, source: reqwest::Error) -> RegistryError {
        RegistryError::Http {
            host: self.host.clone(),
            what: what.to_string(),
            source: source.without_url(),
        }
    }

    /// A request to `url`, with `body` when there is one (built again for an auth retry).
    pub(super) fn request_with(
        &self,
        method: &Method,
        url: &str,
        body: Option<&Body>,
    ) -> reqwest::RequestBuilder {
        let request = self.request(method, url);
        match body {
            Some(body) => request
                .header(reqwest::header::CONTENT_TYPE, body.content_type)
                .body(body.bytes.clone()),
            None => request,
        }
    }

    pub(super) fn request(&self, method: &Method, url: &str) -> reqwest::RequestBuilder {
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
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        scope: &str,
        what: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        self.send_body(method, path, scope, what, None).await
    }

    /// [`RegistryClient::send`] with a body (an upload, a manifest put).
    pub(super) async fn send_body(
        &self,
        method: Method,
        path: &str,
        scope: &str,
        what: &str,
        body: Option<&Body>,
    ) -> Result<reqwest::Response, RegistryError> {
        let known = self.base.lock().ok().and_then(|b| b.clone());
        let candidates = match known {
            Some(base) => vec![base],
            None => self.candidates.clone(),
        };
        let mut last = None;
        for base in candidates {
            let url = format!("{base}{path}");
            match self.send_at(method.clone(), &url, scope, what, body).await {
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
}
