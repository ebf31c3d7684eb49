//! A registry that wants a login: the real registry on 127.0.0.1:5000 behind basic auth, as
//! distribution answers with an htpasswd realm (distribution `registry/auth/htpasswd/access.go`:
//! a request without valid credentials gets 401 and `WWW-Authenticate: Basic realm="…"`, on `/v2/`
//! and on every repository path). Everything else is forwarded as it is (method, path, query,
//! headers, body); an upload's `Location` names this proxy, so the client comes back here.
//! It counts the requests refused for want of credentials, and the writes it forwards (a push's
//! blob uploads and manifest PUTs: POST, PUT, PATCH).
//!
//! [`StoppableRegistry`]: the same registry without a login, which stops after a number of
//! requests as a registry whose process ends: its listener closes (a new connection is refused)
//! and a connection still open gets 503, as distribution's http server answers while it shuts
//! down (`registry/registry.go`: the server drains, then exits).
//!
//! Opened without a login
//! ([`RegistryProxy::open`]) it forwards everything and runs a hook before each manifest DELETE
//! reaches the registry (what a test does "while gc deletes").
//!
//! [`RegistryProxy::stalling`]: open, but a manifest PUT whose path holds a given part is never
//! answered, as a registry whose storage driver hangs holds the request open (distribution
//! `registry/handlers/manifests.go`: `PutManifest` answers only once the store's `Put` returns, and
//! the http server sets no write timeout of its own).
//!
//! [`RegistryProxy::lying`]: open, and it tells the [`Lie`]s a test gives it, as a registry (or a
//! proxy in front of a plain-HTTP one) that is not honest could: a manifest answered with another
//! `Docker-Content-Digest` than its bytes' (distribution `registry/handlers/manifests.go`,
//! `GetManifest`, sets that header to the digest of the bytes it serves), other bytes served under
//! a digest, or 500 for a path, as distribution answers when its storage fails (`GetManifest` and
//! `registry/handlers/blob.go` `GetBlob` append `errcode.ErrorCodeUnknown`, whose status is 500 in
//! `registry/api/errcode/register.go`, body `{"errors":[{"code":"UNKNOWN",…}]}`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

/// The real registry it fronts.
pub const UPSTREAM: &str = "127.0.0.1:5000";
/// The login it wants: `u:p`, base64 `dTpw`.
const WANTED: &str = "Basic dTpw";

pub struct RegistryProxy {
    /// `127.0.0.1:<port>`: a registry host meshtop and the daemon reach over plain HTTP (loopback).
    pub host: String,
    pub refused: Arc<AtomicUsize>,
    /// Writes forwarded: POST, PUT and PATCH requests (what a push sends).
    pub writes: Arc<AtomicUsize>,
    /// The lies it tells now (none: it forwards as it is).
    lies: Arc<Mutex<Vec<Lie>>>,
}

/// A lie a [`RegistryProxy::lying`] tells, about one manifest or blob.
#[derive(Clone, Debug)]
pub enum Lie {
    /// A manifest GET or HEAD of `/manifests/<reference>` answered with `digest` as its
    /// `Docker-Content-Digest`, whatever its bytes.
    DigestHeader { reference: String, digest: String },
    /// A GET or HEAD of `/manifests/<asked>` or `/blobs/<asked>` answered with what the registry
    /// holds under `instead`, its `Docker-Content-Digest` naming `asked`.
    Serves { asked: String, instead: String },
    /// Every request whose path holds `part` answered 500 `UNKNOWN`.
    Fails { part: String },
}

/// Run before a manifest DELETE is forwarded (it has the registry's answer wait for it).
pub type OnDelete = Arc<dyn Fn() + Send + Sync>;

/// How the proxy answers: the login it wants (or none), the hook on deletes.
#[derive(Clone)]
struct Rules {
    me: String,
    refused: Arc<AtomicUsize>,
    writes: Arc<AtomicUsize>,
    login: bool,
    on_delete: Option<OnDelete>,
    /// A manifest PUT whose path holds this is held open, never answered.
    stall: Option<String>,
    lies: Arc<Mutex<Vec<Lie>>>,
}

impl RegistryProxy {
    /// The real registry behind a login.
    pub async fn start() -> RegistryProxy {
        RegistryProxy::serve(true, None, None).await
    }

    /// The real registry, open, with `on_delete` run before each manifest DELETE is forwarded.
    pub async fn open(on_delete: OnDelete) -> RegistryProxy {
        RegistryProxy::serve(false, Some(on_delete), None).await
    }

    /// The real registry, open, holding every manifest PUT whose path holds `part` unanswered.
    pub async fn stalling(part: &str) -> RegistryProxy {
        RegistryProxy::serve(false, None, Some(part.to_string())).await
    }

    /// The real registry, open, honest until [`RegistryProxy::tell`] gives it lies.
    pub async fn lying() -> RegistryProxy {
        RegistryProxy::serve(false, None, None).await
    }

    /// Tell `lie` from now on (beside those told before).
    pub fn tell(&self, lie: Lie) {
        self.lies.lock().unwrap().push(lie);
    }

    /// Tell no lie from now on.
    pub fn honest(&self) {
        self.lies.lock().unwrap().clear();
    }

    async fn serve(
        login: bool,
        on_delete: Option<OnDelete>,
        stall: Option<String>,
    ) -> RegistryProxy {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let refused = Arc::new(AtomicUsize::new(0));
        let writes = Arc::new(AtomicUsize::new(0));
        meshtop_backends::registry::install_crypto_provider();
        let client = reqwest::Client::new();
        let lies: Arc<Mutex<Vec<Lie>>> = Arc::default();
        let rules = Rules {
            me: host.clone(),
            refused: refused.clone(),
            writes: writes.clone(),
            login,
            on_delete,
            stall,
            lies: lies.clone(),
        };
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (client, rules) = (client.clone(), rules.clone());
                async move { forward(&client, &rules, method, uri, headers, body).await }
            },
        );
        let serve = axum::serve(listener, app);
        tokio::spawn(async move { serve.await.unwrap() });
        RegistryProxy {
            host,
            refused,
            writes,
            lies,
        }
    }

    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// Writes forwarded so far (a push's uploads and manifest PUTs).
    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    /// A Docker config directory whose `config.json` holds this registry's login.
    pub fn docker_config(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let config = dir.join("docker-config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.json"),
            format!(r#"{{"auths": {{"{}": {{"auth": "dTpw"}}}}}}"#, self.host),
        )
        .unwrap();
        config
    }
}

/// The real registry without a login, that stops once it has answered `budget` requests.
pub struct StoppableRegistry {
    /// `127.0.0.1:<port>`.
    pub host: String,
    /// Requests it still answers; at 0 it stops.
    pub budget: Arc<AtomicUsize>,
    /// Requests that reached it (answered or not).
    pub seen: Arc<AtomicUsize>,
}

impl StoppableRegistry {
    pub async fn start() -> StoppableRegistry {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let budget = Arc::new(AtomicUsize::new(usize::MAX));
        let seen = Arc::new(AtomicUsize::new(0));
        meshtop_backends::registry::install_crypto_provider();
        let client = reqwest::Client::new();
        let server: Arc<std::sync::Mutex<Option<tokio::task::AbortHandle>>> = Arc::default();
        let rules = Rules {
            me: host.clone(),
            refused: Arc::new(AtomicUsize::new(0)),
            writes: Arc::new(AtomicUsize::new(0)),
            login: false,
            on_delete: None,
            stall: None,
            lies: Arc::default(),
        };
        let (left, counted, stop) = (budget.clone(), seen.clone(), server.clone());
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (client, rules, left, counted, stop) = (
                    client.clone(),
                    rules.clone(),
                    left.clone(),
                    counted.clone(),
                    stop.clone(),
                );
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let answers = left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if !answers {
                        if let Some(server) = stop.lock().unwrap().take() {
                            server.abort();
                        }
                        return (StatusCode::SERVICE_UNAVAILABLE, "stopped").into_response();
                    }
                    forward(&client, &rules, method, uri, headers, body).await
                }
            },
        );
        let serve = axum::serve(listener, app);
        let task = tokio::spawn(async move {
            let _ = serve.await;
        });
        *server.lock().unwrap() = Some(task.abort_handle());
        StoppableRegistry { host, budget, seen }
    }

    /// Answer `n` more requests, then stop.
    pub fn stop_after(&self, n: usize) {
        self.budget.store(n, Ordering::SeqCst);
    }

    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

async fn forward(
    client: &reqwest::Client,
    rules: &Rules,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if rules.login && auth != WANTED {
        rules.refused.fetch_add(1, Ordering::SeqCst);
        let mut response = (StatusCode::UNAUTHORIZED, "authentication required").into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Basic realm="meshtop-test""#),
        );
        return response;
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    if [Method::POST, Method::PUT, Method::PATCH].contains(&method) {
        rules.writes.fetch_add(1, Ordering::SeqCst);
    }
    if method == Method::PUT
        && path.contains("/manifests/")
        && rules
            .stall
            .as_ref()
            .is_some_and(|part| path.contains(part.as_str()))
    {
        std::future::pending::<()>().await;
    }
    if method == Method::DELETE
        && path.contains("/manifests/")
        && let Some(hook) = &rules.on_delete
    {
        let hook = hook.clone();
        tokio::task::spawn_blocking(move || hook()).await.unwrap();
    }
    let Some((path, named)) = told(rules, &method, &uri, path) else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            r#"{"errors":[{"code":"UNKNOWN","message":"unknown error","detail":{}}]}"#,
        )
            .into_response();
    };
    let mut request = client.request(
        reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
        format!("http://{UPSTREAM}{path}"),
    );
    for (name, value) in &headers {
        // The proxy's own login stays here; an open proxy passes the client's on.
        let login = rules.login && name == header::AUTHORIZATION;
        if name != header::HOST && !login && name != header::CONTENT_LENGTH {
            request = request.header(name.as_str(), value.as_bytes());
        }
    }
    let answer = match request.body(body).send().await {
        Ok(answer) => answer,
        Err(error) => {
            return (StatusCode::BAD_GATEWAY, format!("upstream: {error}")).into_response();
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
    let mut out = HeaderMap::new();
    for (name, value) in answer.headers() {
        let name = header::HeaderName::from_bytes(name.as_str().as_bytes()).unwrap();
        // A HEAD answer keeps the length it announces (a client reads a blob's size there).
        if (name == header::CONTENT_LENGTH && method != Method::HEAD)
            || name == header::TRANSFER_ENCODING
        {
            continue;
        }
        let mut value = HeaderValue::from_bytes(value.as_bytes()).unwrap();
        if let Some(digest) = &named
            && name.as_str() == "docker-content-digest"
        {
            value = HeaderValue::from_str(digest).unwrap();
        }
        if name == header::LOCATION {
            let text = value.to_str().unwrap().replace(UPSTREAM, &rules.me);
            value = HeaderValue::from_str(&text).unwrap();
        }
        out.append(name, value);
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    let mut response = (status, bytes).into_response();
    response.headers_mut().extend(out);
    response
}

/// What the lies make of a request for `path`: None when it fails (500); else the path to ask the
/// registry and the digest to name in the answer's `Docker-Content-Digest` (None: the registry's).
fn told(rules: &Rules, method: &Method, uri: &Uri, path: &str) -> Option<(String, Option<String>)> {
    let lies = rules.lies.lock().unwrap().clone();
    let plain_path = uri.path();
    if lies
        .iter()
        .any(|lie| matches!(lie, Lie::Fails { part } if plain_path.contains(part.as_str())))
    {
        return None;
    }
    let reads = method == Method::GET || method == Method::HEAD;
    let served = lies.iter().find_map(|lie| match lie {
        Lie::Serves { asked, instead } if reads && names(plain_path, asked) => Some((
            plain_path.replace(asked.as_str(), instead),
            Some(asked.clone()),
        )),
        _ => None,
    });
    if served.is_some() {
        return served;
    }
    let header = lies.iter().find_map(|lie| match lie {
        Lie::DigestHeader { reference, digest }
            if reads && plain_path.ends_with(&format!("/manifests/{reference}")) =>
        {
            Some(digest.clone())
        }
        _ => None,
    });
    Some((path.to_string(), header))
}

/// Whether `path` asks for the manifest or blob `reference` (its last segment, after `manifests/` or
/// `blobs/`).
fn names(path: &str, reference: &str) -> bool {
    path.ends_with(&format!("/manifests/{reference}"))
        || path.ends_with(&format!("/blobs/{reference}"))
}
