//! Deleting manifests by digest: the real registry (scripts/start-registry.sh enables deletes) and
//! one that refuses them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use common::local_registry::{LOCAL, docker, registry, require_registry};
use meshtop::backends::daemon::push::push_image;
use meshtop::backends::registry::{Deleted, Published, RegistryClient};

#[tokio::test]
async fn a_pushed_manifest_is_deleted_by_digest_and_then_absent() {
    require_registry().await;
    let dir = tempfile::tempdir().unwrap();
    let unique = uuid::Uuid::now_v7().to_string();
    std::fs::write(dir.path().join("hello"), &unique).unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM scratch\nCOPY hello /hello\n",
    )
    .unwrap();
    let tag = format!("d{}", &unique[unique.len() - 12..]);
    // A repository of this run's own: runs never meet in the registry, which keeps its storage.
    let repository = format!("{}/gc", common::test_name("regdel"));
    let reference = format!("{LOCAL}/{repository}:{tag}");
    docker(&[
        "build",
        "-q",
        "-t",
        &reference,
        dir.path().to_str().unwrap(),
    ]);
    let daemon = bollard::Docker::connect_with_defaults().unwrap();
    let pushed = push_image(&daemon, &reference, None).await;
    docker(&["rmi", &reference]);
    let digest = pushed.unwrap();
    let client = RegistryClient::new(&registry(LOCAL), None).unwrap();
    assert_eq!(
        client.manifest(&repository, &tag).await.unwrap(),
        Published::Present {
            digest: digest.clone()
        }
    );
    assert_eq!(
        client.delete_manifest(&repository, &digest).await.unwrap(),
        Deleted::Deleted
    );
    assert_eq!(
        client.manifest(&repository, &tag).await.unwrap(),
        Published::Absent
    );
    assert_eq!(
        client.delete_manifest(&repository, &digest).await.unwrap(),
        Deleted::Absent
    );
}

#[tokio::test]
async fn a_registry_that_refuses_deletes_is_named_and_told_how_to_allow_them() {
    for (status, body) in [
        (StatusCode::METHOD_NOT_ALLOWED, ""),
        (
            StatusCode::BAD_REQUEST,
            r#"{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}"#,
        ),
    ] {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let app = Router::new().fallback(move || async move { (status, body).into_response() });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = RegistryClient::new(&registry(&host), None).unwrap();
        let answer = client
            .delete_manifest("demo/api", "sha256:00")
            .await
            .unwrap();
        let Deleted::Unsupported(message) = answer else {
            panic!("{status}: {answer:?}");
        };
        assert!(message.contains(&host), "{message}");
        assert!(message.contains("delete: enabled: true"), "{message}");
    }
}
