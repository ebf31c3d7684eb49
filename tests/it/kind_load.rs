//! `kind load docker-image` as a process with arguments, with a fake `kind` first on PATH.
//! Its own test binary: it changes PATH for the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use meshtop::backends::cluster::{ClusterError, kind_load};

#[tokio::test]
async fn kind_load_runs_kind_with_its_arguments_and_reports_failure() {
    let dir = tempfile::tempdir().unwrap();
    let argv = dir.path().join("argv");
    let kind = dir.path().join("kind");
    // Records each argument on its own line; fails for the cluster named "broken".
    std::fs::write(
        &kind,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n[ \"$4\" = broken ] && {{ echo 'ERROR: no nodes found for cluster \"broken\"' >&2; exit 1; }}\nexit 0\n",
            argv.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&kind, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(
        std::iter::once(dir.path().to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    // SAFETY: this test binary has a single test and no other thread reads the environment now.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("PATH", &path)
    };

    kind_load("dev", "demo/api:0123456789ab-amd64 ; rm -rf /")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&argv).unwrap(),
        "load\ndocker-image\n--name\ndev\ndemo/api:0123456789ab-amd64 ; rm -rf /\n"
    );

    let err = kind_load("broken", "demo/api:x").await.unwrap_err();
    assert!(matches!(err, ClusterError::KindLoad { .. }), "{err}");
    assert!(err.to_string().contains("no nodes found"), "{err}");

    std::fs::remove_file(&kind).unwrap();
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("PATH", dir.path())
    };
    let err = kind_load("dev", "demo/api:x").await.unwrap_err();
    assert!(err.to_string().contains("not on PATH"), "{err}");
}
