//! The host listing on the real daemon: one call, labelled images only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use meshtop::backends::daemon::Daemon;
use meshtop::mesh::model::MODULE_LABEL;

fn build(dir: &std::path::Path, tag: &str, label: Option<&str>) {
    let mut dockerfile = String::from("FROM scratch\nCOPY marker /marker\n");
    if let Some(label) = label {
        dockerfile.push_str(&format!("LABEL {label}\n"));
    }
    std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
    std::fs::write(dir.join("marker"), tag).unwrap();
    let run = || {
        Command::new("docker")
            .env("DOCKER_BUILDKIT", "0")
            .args(["build", "-q", "-t", tag])
            .arg(dir)
            .output()
            .unwrap()
    };
    // The legacy builder loses a step's image now and then while other tests remove theirs from
    // the same daemon ("unable to find image sha256:…", seen in a full run): that race is the
    // daemon's, not the listing's, so such a build is tried again (twice at most), as rollback_gc does.
    let mut output = run();
    for _ in 0..2 {
        let lost = String::from_utf8_lossy(&output.stderr).contains("unable to find image");
        if output.status.success() || !lost {
            break;
        }
        output = run();
    }
    assert!(
        output.status.success(),
        "docker build {tag}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn listing_sees_only_labelled_images() {
    common::require_docker();
    let dir = tempfile::tempdir().unwrap();
    let tag = common::test_name("listing");
    let _guard = common::DaemonGuard(tag.clone());
    let labelled = format!("{tag}/labelled:1");
    let unlabelled = format!("{tag}/unlabelled:1");
    build(
        dir.path(),
        &labelled,
        Some(&format!("{MODULE_LABEL}=labelled")),
    );
    build(dir.path(), &unlabelled, None);

    let daemon = Daemon::connect().await.unwrap();
    let images = daemon.labelled_images().await.unwrap();
    let tags: Vec<&String> = images.iter().flat_map(|i| &i.tags).collect();
    let seen_labelled = tags.iter().any(|t| **t == labelled);
    let seen_unlabelled = tags.iter().any(|t| **t == unlabelled);
    let label_ok = images.iter().all(|i| i.labels.contains_key(MODULE_LABEL));
    assert!(seen_labelled, "the labelled image is listed: {tags:?}");
    assert!(
        !seen_unlabelled,
        "an unlabelled image never answers: {tags:?}"
    );
    assert!(label_ok);
    assert!(!daemon.platform().await.unwrap().arch.is_empty());
}
