//! Every read of a registry answer is bounded, and a tag list's `Link` header that leaves the
//! registry is refused, never followed with the bearer token (issue 51, case 8). Against a
//! loopback stand-in that answers as distribution does: `registry/handlers/tags.go` (`GetTags`:
//! `{"name":…,"tags":[…]}`, and a `Link: <…>; rel="next"` header when more tags follow), behind a
//! token realm as `registry/auth/token/accesscontroller.go` challenges (401 with
//! `WWW-Authenticate: Bearer realm="…",service="…"`), its token server answering `{"token":…}`.
//! What it puts in the `Link` header and how much it sends are the test's to choose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::common::local_registry::registry;
use meshtop::backends::registry::{RegistryClient, RegistryError};

const TOKEN: &str = "stand-in-token";

/// What the stand-in answers: the next page's `Link` target (`{registry}` and `{elsewhere}` are
/// replaced by their `host:port`), and how many bytes of padding its tag page and token carry.
#[derive(Clone, Default)]
struct Answers {
    link: Option<String>,
    page_padding: usize,
    token_padding: usize,
}

struct StandIn {
    host: String,
    /// Requests that reached the other host, and the Authorization header of each.
    elsewhere: Arc<Mutex<Vec<String>>>,
    pages: Arc<AtomicUsize>,
}

async fn listen(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    host
}

async fn start(answers: Answers) -> StandIn {
    let elsewhere: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = elsewhere.clone();
    let other = listen(Router::new().fallback(move |headers: HeaderMap| {
        let seen = seen.clone();
        async move {
            let auth = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            seen.lock().unwrap().push(auth);
            (StatusCode::OK, "{\"tags\":[]}")
        }
    }))
    .await;
    let pages = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let (me, counted) = (host.clone(), pages.clone());
    let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
        let (answers, me, other, pages) =
            (answers.clone(), me.clone(), other.clone(), counted.clone());
        async move { answer(&answers, &me, &other, &pages, &uri, &headers) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    StandIn {
        host,
        elsewhere,
        pages,
    }
}

fn answer(
    answers: &Answers,
    me: &str,
    other: &str,
    pages: &AtomicUsize,
    uri: &Uri,
    headers: &HeaderMap,
) -> Response {
    if uri.path() == "/token" {
        let padding = "x".repeat(answers.token_padding);
        return (
            StatusCode::OK,
            format!("{{\"token\":\"{TOKEN}\",\"pad\":\"{padding}\"}}"),
        )
            .into_response();
    }
    let bearer = format!("Bearer {TOKEN}");
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(bearer.as_str())
    {
        let challenge = format!("Bearer realm=\"http://{me}/token\",service=\"stand-in\"");
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
            "",
        )
            .into_response();
    }
    if !uri.path().ends_with("/tags/list") {
        return (StatusCode::OK, "{}").into_response();
    }
    pages.fetch_add(1, Ordering::SeqCst);
    let padding = vec!["\"t\""; answers.page_padding / 4].join(",");
    let comma = if padding.is_empty() { "" } else { "," };
    let body = format!("{{\"name\":\"demo/app\",\"tags\":[\"a\"{comma}{padding}]}}");
    match (&answers.link, uri.query()) {
        (Some(link), None) => {
            let link = link.replace("{registry}", me).replace("{elsewhere}", other);
            let header = format!("<{link}>; rel=\"next\"");
            (StatusCode::OK, [(header::LINK, header)], body).into_response()
        }
        _ => (StatusCode::OK, body).into_response(),
    }
}

fn client(host: &str) -> RegistryClient {
    RegistryClient::new(&registry(host), None).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_that_leaves_the_registry_is_refused_and_never_followed() {
    for link in [
        // No /v2/: joined onto the registry's URL, the host after '@' is where it goes.
        "@{elsewhere}/tags?last=a",
        "@{elsewhere}/v2/demo/app/tags/list?last=a",
        "http://{elsewhere}/v2/demo/app/tags/list?last=a",
        "/elsewhere?last=a",
    ] {
        let stand_in = start(Answers {
            link: Some(link.into()),
            ..Answers::default()
        })
        .await;
        let refused = client(&stand_in.host).tags("demo/app").await;
        let seen = stand_in.elsewhere.lock().unwrap().clone();
        assert!(
            seen.is_empty(),
            "{link}: followed to the other host with {seen:?}"
        );
        let Err(RegistryError::Garbage { message, .. }) = &refused else {
            panic!("{link}: not refused: {refused:?}");
        };
        assert!(message.contains("leaves the registry"), "{link}: {message}");
        assert_eq!(stand_in.pages.load(Ordering::SeqCst), 1, "{link}");
    }
    // On the registry itself, the next page is followed.
    let stand_in = start(Answers {
        link: Some("http://{registry}/v2/demo/app/tags/list?last=a".into()),
        ..Answers::default()
    })
    .await;
    let tags = client(&stand_in.host).tags("demo/app").await.unwrap();
    assert_eq!(tags, ["a", "a"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tag_page_or_a_token_past_its_bound_is_refused() {
    let page = Answers {
        page_padding: 2 * 1024 * 1024,
        ..Answers::default()
    };
    let token = Answers {
        token_padding: 1024 * 1024,
        ..Answers::default()
    };
    for answers in [page, token] {
        let stand_in = start(answers).await;
        let refused = client(&stand_in.host).tags("demo/app").await;
        assert!(
            matches!(refused, Err(RegistryError::TooLarge { .. })),
            "{refused:?}"
        );
    }
}
