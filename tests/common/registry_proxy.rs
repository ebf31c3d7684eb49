//! A registry that wants a login: the real registry on 127.0.0.1:5000 behind basic auth, as
//! distribution answers with an htpasswd realm (distribution `registry/auth/htpasswd/access.go`:
//! a request without valid credentials gets 401 and `WWW-Authenticate: Basic realm="…"`, on `/v2/`
//! and on every repository path). Everything else is forwarded as it is (method, path, query,
//! headers, body); an upload's `Location` names this proxy, so the client comes back here.
//! It counts the requests refused for want of credentials. Opened without a login
//! ([`RegistryProxy::open`]) it forwards everything and runs a hook before each manifest DELETE
//! reaches the registry (what a test does "while gc deletes").

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

/// The real registry it fronts.
pub const UPSTREAM: &str = "127.0.0.1:5000";
/// The login it wants: `u:p`, base64 `dTpw`.
pub const USER: &str = "u";
pub const PASSWORD: &str = "p";
const WANTED: &str = "Basic dTpw";

pub struct RegistryProxy {
    /// `127.0.0.1:<port>`: a registry host meshtop and the daemon reach over plain HTTP (loopback).
    pub host: String,
    pub refused: Arc<AtomicUsize>,
}

/// Run before a manifest DELETE is forwarded (it has the registry's answer wait for it).
pub type OnDelete = Arc<dyn Fn() + Send + Sync>;

/// How the proxy answers: the login it wants (or none), the hook on deletes.
#[derive(Clone)]
struct Rules {
    me: String,
    refused: Arc<AtomicUsize>,
    login: bool,
    on_delete: Option<OnDelete>,
}

impl RegistryProxy {
    /// The real registry behind a login.
    pub async fn start() -> RegistryProxy {
        RegistryProxy::serve(true, None).await
    }

    /// The real registry, open, with `on_delete` run before each manifest DELETE is forwarded.
    pub async fn open(on_delete: OnDelete) -> RegistryProxy {
        RegistryProxy::serve(false, Some(on_delete)).await
    }

    async fn serve(login: bool, on_delete: Option<OnDelete>) -> RegistryProxy {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let refused = Arc::new(AtomicUsize::new(0));
        let client = reqwest::Client::new();
        let rules = Rules {
            me: host.clone(),
            refused: refused.clone(),
            login,
            on_delete,
        };
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (client, rules) = (client.clone(), rules.clone());
                async move { forward(&client, &rules, method, uri, headers, body).await }
            },
        );
        let serve = axum::serve(listener, app);
        tokio::spawn(async move { serve.await.unwrap() });
        RegistryProxy { host, refused }
    }

    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
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
    if method == Method::DELETE
        && path.contains("/manifests/")
        && let Some(hook) = &rules.on_delete
    {
        let hook = hook.clone();
        tokio::task::spawn_blocking(move || hook()).await.unwrap();
    }
    let mut request = client.request(
        reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
        format!("http://{UPSTREAM}{path}"),
    );
    for (name, value) in &headers {
        if name != header::HOST && name != header::AUTHORIZATION && name != header::CONTENT_LENGTH {
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
