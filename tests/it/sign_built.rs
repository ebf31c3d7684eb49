//! The key signs only what was built (issue 51, case 1), on the real daemon and registry: a
//! co-tenant of the builder's daemon moves the module's tag to a look-alike when the push request
//! arrives; the converge fails that module naming both image ids and the daemon, and the registry
//! holds no signature or attestation for the look-alike's manifest. Signatures are looked for and
//! verified with curl and openssl (`common::signing`), not meshtop's code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use crate::common;

use common::daemon_proxy::{DOCKER_SOCKET, DaemonProxy};
use common::example::{ExampleMesh, builds, said};
use common::local_registry::{LOCAL, require_registry};
use common::signing::*;
use meshtop::backends::registry::repository_in;

/// The image name and tag a push request (`POST /v1.NN/images/<name>/push?tag=<tag>`) names.
fn pushed_by(head: &str) -> Option<(String, String)> {
    let target = head.strip_prefix("POST /")?;
    let (path, query) = target.split_once('?')?;
    let name = path.split_once("images/")?.1.strip_suffix("/push")?;
    let tag = query.split('&').find_map(|p| p.strip_prefix("tag="))?;
    let name = name.replace("%2F", "/").replace("%3A", ":");
    Some((name, tag.to_string()))
}

/// A proxy in front of the daemon's socket that plays a co-tenant who may `docker tag`: when the
/// push of a name ending `/<module>` arrives, a real `docker tag LOOKALIKE <name>:<tag>` runs on
/// the daemon before the request goes on. The daemon reads the tag only when it serves the push
/// (moby `distribution/push_v2.go`: `pushV2Repository` looks the tag up in the reference store
/// then, after `api/server/router/image/image_routes.go` `postImagesPush` took the request), so
/// what it pushes is the look-alike.
fn swapping_proxy(socket: &Path, module: &str, look_alike: &str) -> DaemonProxy {
    let (suffix, look_alike) = (format!("/{module}"), look_alike.to_string());
    let swap = Arc::new(move |head: &str| {
        let Some((name, tag)) = pushed_by(head) else {
            return;
        };
        if name.ends_with(&suffix) {
            let out = Command::new("docker")
                .args(["-H", &format!("unix://{DOCKER_SOCKET}")])
                .args(["tag", &look_alike, &format!("{name}:{tag}")])
                .output()
                .unwrap();
            assert!(out.status.success(), "docker tag: {}", said(&out));
        }
    });
    DaemonProxy::start_with(socket, Path::new(DOCKER_SOCKET), Some(swap))
}

#[test]
fn a_tag_moved_between_the_build_and_the_push_is_refused_and_never_signed() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(require_registry());
    let _entered = runtime.enter();
    let mesh = ExampleMesh::new("sbswap");
    let (ci_key, ci_pub) = trust_ci_key(&mesh);
    let look_alike = LookAlike::make(mesh.dir.path());
    let proxy = swapping_proxy(
        &mesh.dir.path().join("proxy.sock"),
        "worker",
        &look_alike.id,
    );

    let ci = meshtop_env(
        &mesh,
        &mesh.state(),
        &[
            ("MESHTOP_SIGNING_KEY", ci_key.to_str().unwrap()),
            ("DOCKER_HOST", &proxy.docker_host()),
        ],
        &["converge", "--publish"],
    );
    let text = said(&ci);
    assert!(!ci.status.success(), "the converge succeeded: {text}");

    let rows = builds(&mesh);
    let worker = rows
        .iter()
        .find(|b| b.module.as_deref() == Some("worker"))
        .expect("worker was built");
    let built = worker.digest.clone().expect("worker's build made an image");
    assert_ne!(built, look_alike.id);
    let line = text
        .lines()
        .find(|l| l.contains(&look_alike.id) && l.contains(&built))
        .unwrap_or_else(|| panic!("no line names both {built} and {}: {text}", look_alike.id));
    assert!(
        line.contains("worker") && line.contains(&proxy.docker_host()),
        "the line names neither the module nor the daemon: {line}"
    );
    assert_eq!(worker.published_digest, None, "recorded as published");

    // The registry holds the look-alike under worker's ref (the daemon pushed it), unsigned.
    let reference = worker.reference.clone().unwrap();
    let (repository, tag) = repository_in(LOCAL, &reference);
    let (repository, tag) = (repository.to_string(), tag.to_string());
    let pushed = resolve(&repository, &tag);
    let manifest: serde_json::Value = serde_json::from_slice(
        &get(
            &format!("/v2/{repository}/manifests/{pushed}"),
            "application/vnd.docker.distribution.manifest.v2+json",
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["config"]["digest"], look_alike.id.as_str());
    assert!(
        !spec_verifies(mesh.dir.path(), &repository, &pushed, &ci_pub),
        "CI's key signed the look-alike's manifest {pushed}"
    );
    for suffix in ["sig", "att"] {
        let under = format!("{}.{suffix}", pushed.replace(':', "-"));
        assert!(
            get(&format!("/v2/{repository}/manifests/{under}"), OCI_MANIFEST).is_none(),
            "the registry holds {repository}:{under} for the look-alike"
        );
    }
    // The other modules were built, pushed and signed as they are.
    let web = rows
        .iter()
        .find(|b| b.module.as_deref() == Some("web"))
        .unwrap();
    let (web_repo, _) = repository_in(LOCAL, web.published_ref.as_deref().unwrap());
    let web_manifest = web.published_digest.clone().unwrap();
    assert!(spec_verifies(
        mesh.dir.path(),
        web_repo,
        &web_manifest,
        &ci_pub
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_provenance_says_the_builds_own_commit_and_inputs_never_the_images_labels() {
    require_registry().await;
    let signed = signed_mesh("sbprov");
    // The image claims another source of itself in its own labels.
    let dockerfile = signed.mesh.root().join("worker/Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    let fake = "0123456789abcdef0123456789abcdef01234567";
    std::fs::write(
        &dockerfile,
        format!(
            "{text}LABEL org.opencontainers.image.revision={fake} org.opencontainers.image.source=https://elsewhere.invalid/other.git\n"
        ),
    )
    .unwrap();
    let commit = common::provenance::commit_all(&signed.mesh.root());
    ci_publishes_signed_with(&signed, &signed.ci_key, &[]);
    let published = published(&signed.mesh);
    let (repository, digest) = &published["worker"];
    let statements = common::provenance::spec_attestations(repository, digest, &signed.ci_pub);
    assert_eq!(statements.len(), 1, "{statements:?}");
    let definition = &statements[0]["predicate"]["buildDefinition"];
    let dependencies = definition["resolvedDependencies"].as_array().unwrap();
    let sources: Vec<_> = dependencies
        .iter()
        .filter(|d| d["digest"]["gitCommit"].is_string())
        .collect();
    assert_eq!(sources.len(), 1, "{definition}");
    assert_eq!(sources[0]["digest"]["gitCommit"], commit.as_str());
    assert!(
        !definition.to_string().contains("elsewhere.invalid")
            && !definition.to_string().contains(fake),
        "the provenance repeats what the image's labels claim: {definition}"
    );
    // The inputs are the ref's (what the plan computed; the ref's tag abbreviates them).
    let worker = builds(&signed.mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some("worker"))
        .unwrap();
    let tag = worker
        .reference
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let inputs = definition["externalParameters"]["inputs"].as_str().unwrap();
    let hash = tag.split('-').next().unwrap();
    assert!(
        inputs.starts_with(hash),
        "inputs {inputs} are not ref {tag}'s"
    );
}
