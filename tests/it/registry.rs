//! The registry client against the real registry (scripts/start-registry.sh) and tiny auth servers,
//! push through the real daemon, and Docker's credentials.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use common::local_registry::{LOCAL, docker, registry, require_registry};
use meshtop::backends::credentials::{Credentials, from_config_dir};
use meshtop::backends::daemon::push::push_image;
use meshtop::backends::registry::{Published, RegistryClient, RegistryError};
use meshtop::mesh::model::Registry;

#[tokio::test]
async fn push_returns_the_digest_the_registry_then_answers() {
    require_registry().await;
    let dir = tempfile::tempdir().unwrap();
    let unique = uuid::Uuid::now_v7().to_string();
    std::fs::write(dir.path().join("hello"), &unique).unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM scratch\nCOPY hello /hello\n",
    )
    .unwrap();
    let tag = format!("t{}", &unique[unique.len() - 12..]);
    // A repository of this run's own: runs never meet in the registry, which keeps its storage.
    let repository = format!("{}/x", common::test_name("registry"));
    let reference = format!("{LOCAL}/{repository}:{tag}");
    docker(&[
        "build",
        "-q",
        "-t",
        &reference,
        dir.path().to_str().unwrap(),
    ]);

    let client = RegistryClient::new(&registry(LOCAL), None).unwrap();
    assert_eq!(
        client.manifest(&repository, &tag).await.unwrap(),
        Published::Absent
    );

    let daemon = bollard::Docker::connect_with_defaults().unwrap();
    let pushed = push_image(&daemon, &reference, None).await;
    docker(&["rmi", &reference]);
    let digest = pushed.unwrap();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert_eq!(
        client.manifest(&repository, &tag).await.unwrap(),
        Published::Present { digest }
    );
}

#[tokio::test]
async fn pushing_an_image_the_daemon_lacks_fails_with_its_message() {
    require_registry().await;
    let daemon = bollard::Docker::connect_with_defaults().unwrap();
    // A name no run ever tagged (a fixed one would meet an image another run left under it).
    let missing = format!("{LOCAL}/test/none:missing-{}", common::run_id());
    let err = push_image(&daemon, &missing, None).await.unwrap_err();
    assert!(matches!(err, RegistryError::Push { .. }), "{err}");
    assert!(err.to_string().contains("test/none"), "{err}");
}

/// What the fake registries saw.
#[derive(Default)]
struct Seen {
    token_queries: Vec<String>,
    accepts: Vec<String>,
    authorizations: Vec<String>,
}

/// A registry that wants a bearer token from its own realm (which wants basic credentials `u:p`).
async fn fake_registry(mode: &'static str) -> (String, Arc<Mutex<Seen>>) {
    fake_registry_on("127.0.0.1", mode).await
}

async fn fake_registry_on(ip: &str, mode: &'static str) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let (state, realm) = (seen.clone(), format!("http://{host}/token"));
    let app = Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: String| {
            let (seen, realm) = (state.clone(), realm.clone());
            async move {
                let auth = headers
                    .get(header::AUTHORIZATION)
                    .map(|v| v.to_str().unwrap().to_string())
                    .unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                // base64("u:p") = dTpw
                // distribution's OAuth token endpoint (`docs/spec/auth/oauth.md`): a POST of a form with a
                // refresh token; it answers `access_token`.
                if uri.path() == "/token" && method == Method::POST {
                    seen.token_queries.push(body.clone());
                    if !body.contains("grant_type=refresh_token")
                        || !body.contains("refresh_token=idt0k")
                    {
                        return StatusCode::UNAUTHORIZED.into_response();
                    }
                    return (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/json")],
                        r#"{"access_token":"t0k","expires_in":300}"#,
                    )
                        .into_response();
                }
                if uri.path() == "/token" {
                    seen.token_queries
                        .push(uri.query().unwrap_or("").to_string());
                    if auth != "Basic dTpw" {
                        return StatusCode::UNAUTHORIZED.into_response();
                    }
                    return (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/json")],
                        r#"{"token":"t0k"}"#,
                    )
                        .into_response();
                }
                seen.accepts.push(
                    headers
                        .get(header::ACCEPT)
                        .map(|v| v.to_str().unwrap().to_string())
                        .unwrap_or_default(),
                );
                seen.authorizations.push(auth.clone());
                let bearer =
                    format!(r#"Bearer realm="{realm}",service="fake",scope="repository:a/b:pull""#);
                let (wanted, challenges) = match mode {
                    "bearer" | "oauth" => ("Bearer t0k".to_string(), vec![bearer]),
                    // Two challenges, one header each (RFC 7235 allows several): basic first.
                    "both" => (
                        "Bearer t0k".to_string(),
                        vec![r#"Basic realm="fake""#.to_string(), bearer],
                    ),
                    _ => (
                        "Basic dTpw".to_string(),
                        vec![r#"Basic realm="fake""#.to_string()],
                    ),
                };
                if auth != wanted {
                    let mut response = StatusCode::UNAUTHORIZED.into_response();
                    for challenge in challenges {
                        response
                            .headers_mut()
                            .append(header::WWW_AUTHENTICATE, challenge.parse().unwrap());
                    }
                    return response;
                }
                let body = r#"{"schemaVersion":2}"#;
                let response: Response = match uri.path() {
                    "/v2/a/b/manifests/present" => (
                        StatusCode::OK,
                        [("docker-content-digest", "sha256:feed")],
                        body,
                    )
                        .into_response(),
                    // A registry that omits the digest header: the digest is the body's sha256.
                    "/v2/a/b/manifests/nodigest" if method == Method::GET => {
                        (StatusCode::OK, body).into_response()
                    }
                    "/v2/a/b/manifests/nodigest" => StatusCode::OK.into_response(),
                    _ => StatusCode::NOT_FOUND.into_response(),
                };
                response
            }
        },
    );
    let listener_task = axum::serve(listener, app);
    tokio::spawn(async move { listener_task.await.unwrap() });
    (host, seen)
}

fn basic() -> Credentials {
    Credentials::Basic {
        username: "u".into(),
        password: "p".into(),
    }
}

#[tokio::test]
async fn bearer_tokens_come_from_the_challenge_realm_and_are_reused() {
    let (host, seen) = fake_registry("bearer").await;
    let client = RegistryClient::new(&registry(&host), Some(basic())).unwrap();
    assert_eq!(
        client.manifest("a/b", "present").await.unwrap(),
        Published::Present {
            digest: "sha256:feed".into()
        }
    );
    assert_eq!(
        client.manifest("a/b", "gone").await.unwrap(),
        Published::Absent
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.token_queries,
        vec!["service=fake&scope=repository%3Aa%2Fb%3Apull".to_string()]
    );
    assert!(!seen.accepts.is_empty(), "the manifests were asked for");
    assert!(
        seen.accepts
            .iter()
            .all(|a| a.contains("application/vnd.oci.image.index.v1+json")
                && a.contains("application/vnd.docker.distribution.manifest.v2+json"))
    );
    // present: anonymous then token; gone: the cached token straight away.
    assert_eq!(seen.authorizations, vec!["", "Bearer t0k", "Bearer t0k"]);
}

#[tokio::test]
async fn bearer_without_accepted_credentials_says_to_log_in() {
    let (host, _) = fake_registry("bearer").await;
    let client = RegistryClient::new(&registry(&host), None).unwrap();
    let err = client.manifest("a/b", "present").await.unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("docker login {host}")),
        "{err}"
    );
}

#[tokio::test]
async fn basic_auth_and_a_missing_digest_header() {
    let (host, _) = fake_registry("basic").await;
    let anonymous = RegistryClient::new(&registry(&host), None).unwrap();
    let err = anonymous.manifest("a/b", "present").await.unwrap_err();
    assert!(err.to_string().contains("user name and password"), "{err}");

    let client = RegistryClient::new(&registry(&host), Some(basic())).unwrap();
    assert_eq!(
        client.manifest("a/b", "present").await.unwrap(),
        Published::Present {
            digest: "sha256:feed".into()
        }
    );
    let expected = {
        use sha2::Digest;
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(br#"{"schemaVersion":2}"#))
        )
    };
    assert_eq!(
        client.manifest("a/b", "nodigest").await.unwrap(),
        Published::Present { digest: expected }
    );
}

/// This machine's address on its default route (not loopback).
fn outward_ip() -> String {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("192.0.2.255:9")
        .or_else(|_| socket.connect("8.8.8.8:53"))
        .expect("a non-loopback route");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "no non-loopback address on this machine");
    ip.to_string()
}

#[tokio::test]
async fn a_remote_registry_is_https_only_unless_marked_insecure() {
    // The fake registry speaks plain HTTP on a non-loopback address.
    let (host, seen) = fake_registry_on(&outward_ip(), "basic").await;
    let client = RegistryClient::new(&registry(&host), Some(basic())).unwrap();
    let err = client.manifest("a/b", "present").await.unwrap_err();
    assert!(matches!(err, RegistryError::Http { .. }), "{err}");
    assert!(
        seen.lock().unwrap().accepts.is_empty(),
        "a plain HTTP request reached it"
    );

    let insecure = Registry {
        host: host.clone(),
        insecure: true,
    };
    let client = RegistryClient::new(&insecure, Some(basic())).unwrap();
    assert_eq!(
        client.manifest("a/b", "present").await.unwrap(),
        Published::Present {
            digest: "sha256:feed".into()
        }
    );
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn credentials_from_auths_helpers_and_stores() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // A helper that records what it was asked on stdin, and answers.
    let helper = bin.join("docker-credential-fake");
    write(
        &helper,
        &format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 3\ncat > {}/asked\necho '{{\"ServerURL\":\"x\",\"Username\":\"hu\",\"Secret\":\"hs\"}}'\n",
            dir.path().display()
        ),
    );
    let store = bin.join("docker-credential-empty");
    write(
        &store,
        "#!/bin/sh\necho 'credentials not found in native keychain'\nexit 1\n",
    );
    for f in [&helper, &store] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    write(
        &dir.path().join("config.json"),
        r#"{
        "auths": {"http://reg.example:5000": {"auth": "dTpw"}, "https://index.docker.io/v1/": {"identitytoken": "idt"}},
        "credHelpers": {"helped.example": "fake"},
        "credsStore": "empty"
    }"#,
    );
    let path = Some(bin.as_os_str());

    let creds = from_config_dir(dir.path(), "helped.example", path)
        .await
        .unwrap();
    assert_eq!(
        creds,
        Some(Credentials::Basic {
            username: "hu".into(),
            password: "hs".into()
        })
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("asked")).unwrap(),
        "helped.example"
    );

    // The store has nothing: the inline auth answers.
    let creds = from_config_dir(dir.path(), "reg.example:5000", path)
        .await
        .unwrap();
    assert_eq!(creds, Some(basic()));
    let creds = from_config_dir(dir.path(), "docker.io", path)
        .await
        .unwrap();
    assert_eq!(creds, Some(Credentials::IdentityToken("idt".into())));
    assert_eq!(
        from_config_dir(dir.path(), "other.example", path)
            .await
            .unwrap(),
        None
    );

    // A missing config is no credentials; a broken one is an error naming the file.
    assert_eq!(
        from_config_dir(&dir.path().join("none"), "x", path)
            .await
            .unwrap(),
        None
    );
    write(&dir.path().join("config.json"), "{broken");
    let err = from_config_dir(dir.path(), "x", path).await.unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
}

#[tokio::test]
async fn an_identity_token_is_exchanged_for_an_access_token() {
    // Item 9: what `docker login` keeps for registries that issue identity tokens.
    let (host, seen) = fake_registry("oauth").await;
    let client = RegistryClient::new(
        &registry(&host),
        Some(Credentials::IdentityToken("idt0k".into())),
    )
    .unwrap();
    assert_eq!(
        client.manifest("a/b", "present").await.unwrap(),
        Published::Present {
            digest: "sha256:feed".into()
        }
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.token_queries.len(), 1);
    let form = &seen.token_queries[0];
    for part in [
        "grant_type=refresh_token",
        "refresh_token=idt0k",
        "service=fake",
        "scope=repository%3Aa%2Fb%3Apull",
        "client_id=meshtop",
    ] {
        assert!(form.contains(part), "{form}");
    }
}

#[tokio::test]
async fn of_several_challenges_the_token_flow_is_taken() {
    // Item 9: a registry offering Basic and Bearer in two WWW-Authenticate headers wants the token.
    let (host, seen) = fake_registry("both").await;
    let client = RegistryClient::new(&registry(&host), Some(basic())).unwrap();
    assert_eq!(
        client.manifest("a/b", "present").await.unwrap(),
        Published::Present {
            digest: "sha256:feed".into()
        }
    );
    assert_eq!(seen.lock().unwrap().authorizations, vec!["", "Bearer t0k"]);
}

/// The TLS registry scripts/start-registry.sh starts: its host:port (a name /etc/hosts maps to
/// 127.0.0.1, not a loopback literal, so it reads as a secure registry) and its CA.
fn tls_registry() -> (String, std::path::PathBuf) {
    let dir = std::path::PathBuf::from("/tmp/meshtop-registry-tls");
    let host = std::fs::read_to_string(dir.join("host")).unwrap_or_else(|_| {
        panic!(
            "no TLS registry set up: run scripts/start-registry.sh (it writes {}/host)",
            dir.display()
        )
    });
    (host.trim().to_string(), dir.join("ca.crt"))
}

#[tokio::test]
async fn an_insecure_registry_is_tried_over_https_without_verification_first() {
    // Item 9: as Docker does for an insecure (or loopback) registry; plain HTTP to this port would be
    // answered 400 by its TLS server.
    let (host, _) = tls_registry();
    let port = host.rsplit_once(':').unwrap().1;
    let loopback = RegistryClient::new(&registry(&format!("127.0.0.1:{port}")), None).unwrap();
    assert_eq!(
        loopback.manifest("none/here", "t").await.unwrap(),
        Published::Absent
    );
    let insecure = Registry {
        host: host.clone(),
        insecure: true,
    };
    let client = RegistryClient::new(&insecure, None).unwrap();
    assert_eq!(
        client.manifest("none/here", "t").await.unwrap(),
        Published::Absent
    );
    // And the plain registry, insecure too, still answers over HTTP after the HTTPS attempt fails.
    let plain = RegistryClient::new(&registry(LOCAL), None).unwrap();
    require_registry().await;
    assert_eq!(
        plain.manifest("none/here", "t").await.unwrap(),
        Published::Absent
    );
}

#[tokio::test]
async fn a_secure_registry_is_verified_with_the_ca_in_certs_d() {
    // Item 9: `/etc/docker/certs.d/<host>/ca.crt`, here under a directory of the test's own.
    let (host, ca) = tls_registry();
    let certs = tempfile::tempdir().unwrap();
    let unknown = RegistryClient::with_certs_dir(&registry(&host), None, certs.path()).unwrap();
    let err = unknown.manifest("none/here", "t").await.unwrap_err();
    assert!(matches!(err, RegistryError::Http { .. }), "{err}");

    std::fs::create_dir_all(certs.path().join(&host)).unwrap();
    std::fs::copy(&ca, certs.path().join(&host).join("ca.crt")).unwrap();
    let client = RegistryClient::with_certs_dir(&registry(&host), None, certs.path()).unwrap();
    assert_eq!(
        client.manifest("none/here", "t").await.unwrap(),
        Published::Absent
    );
}
