//! The pool's base door (issue 36, case 3): a builder without a dependent's base gets it by a
//! manifest digest this machine verified or pushed, never by the base's tag, and the image it pulled
//! must be the base's artifact. A look-alike pushed over the base's ref in the real registry
//! (127.0.0.1:5000) never becomes what a dependent is built FROM. The builder is the second Docker
//! daemon (scripts/start-second-daemon.sh); the target is the machine's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::second_daemon::{SECOND, SecondDaemonGuard, require_second_daemon};

use common::local_registry::{LOCAL, docker};
use common::{ExampleMesh, builds, remove_from_daemon_at, said};
use meshtop::backends::state::StateDb;
use meshtop::mesh::builds::BuildStatus;

/// The image's layers (diff ids), bottom first, on the machine's daemon.
fn layers(image: &str) -> Vec<String> {
    let text = docker(&[
        "image",
        "inspect",
        "--format",
        "{{json .RootFS.Layers}}",
        image,
    ]);
    serde_json::from_str(text.trim()).unwrap()
}

/// The record builds a dependent on a builder that lacks its base while the base's ref in the
/// registry names a look-alike (the base plus one file, the same labels): the dependent is built
/// FROM the recorded base, pulled onto the builder by the manifest this machine pushed.
#[test]
fn a_look_alike_over_the_bases_ref_is_never_what_a_dependent_is_built_from() {
    require_second_daemon();
    let mesh = ExampleMesh::new("pbase");
    let _second = SecondDaemonGuard(mesh.name.clone());
    // One builder, not the target's daemon: every build crosses through the registry.
    common::second_daemon::build_on_second_only(&mesh);
    let first = mesh.meshtop(&["converge"]);
    assert_eq!(first.status.code(), Some(0), "{}", said(&first));
    let record = StateDb::open(&mesh.state())
        .unwrap()
        .record(&mesh.name, "default")
        .unwrap();
    let base = record["base"].clone();

    // The builder forgets everything; someone pushes a look-alike over the base's ref.
    let left = remove_from_daemon_at(Some(SECOND), &mesh.name);
    assert!(left.is_empty(), "the second daemon kept {left:?}");
    let look_alike_dir = mesh.dir.path().join("look-alike");
    std::fs::create_dir_all(&look_alike_dir).unwrap();
    std::fs::write(
        look_alike_dir.join("Dockerfile"),
        format!(
            "FROM {}\nRUN echo planted > /planted # {}\n",
            base.reference,
            common::run_id()
        ),
    )
    .unwrap();
    let look_alike_tag = format!("{LOCAL}/x{}/look-alike:1", mesh.name);
    docker(&[
        "build",
        "-q",
        "-t",
        &look_alike_tag,
        look_alike_dir.to_str().unwrap(),
    ]);
    let look_alike = docker(&["image", "inspect", "--format", "{{.Id}}", &look_alike_tag])
        .trim()
        .to_string();
    docker(&["tag", &look_alike, &base.reference]);
    docker(&["push", &base.reference]);
    // The host's own tag names the base's artifact again: only the registry holds the look-alike.
    docker(&["tag", &base.digest, &base.reference]);

    // web's inputs move: it builds, on the builder, FROM the recorded base.
    std::fs::write(
        mesh.root().join("web/www/moved.html"),
        format!("moved {}\n", common::run_id()),
    )
    .unwrap();
    let second = mesh.meshtop(&["converge", "--json"]);
    let text = said(&second);
    assert_eq!(second.status.code(), Some(0), "{text}");
    let summary: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    let decided = common::decisions(&summary);
    assert_eq!(decided["base"], "record", "{summary}");
    assert_eq!(decided["web"], "build", "{summary}");
    let rows = builds(&mesh);
    let web = rows
        .iter()
        .find(|r| r.module.as_deref() == Some("web"))
        .unwrap();
    assert_eq!(web.status, BuildStatus::Succeeded, "{web:#?}");
    assert_eq!(web.builder.as_deref(), Some("two"), "{web:#?}");
    let built = layers(web.digest.as_deref().unwrap());
    let (real, planted) = (layers(&base.digest), layers(&look_alike));
    assert!(
        built.starts_with(&real),
        "web is built FROM the recorded base {}: {built:?} / {real:?}",
        base.digest
    );
    assert!(
        !built.contains(planted.last().unwrap()),
        "web is built FROM the look-alike {look_alike}: {built:?}\n{text}"
    );
    // What the builder pulled is the base's artifact, by the manifest this machine pushed.
    let pushed = rows
        .iter()
        .find(|r| r.module.as_deref() == Some("base"))
        .and_then(|r| r.published_digest.clone())
        .unwrap();
    let repository = base.reference.rsplit_once(':').unwrap().0;
    let on_builder = std::process::Command::new("docker")
        .args(["-H", SECOND, "image", "inspect", "--format", "{{.Id}}"])
        .arg(format!("{repository}@{pushed}"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&on_builder.stdout).trim(),
        base.digest,
        "{}",
        said(&on_builder)
    );
}

/// Another machine (its own state file: no history of the base's push), whose host lacks the base,
/// converges a dependent on a builder without the base while the base's ref in the registry names
/// a look-alike. With a record from before manifests were kept there is no way around: the
/// dependent is refused, naming the look-alike's image and the base's artifact, and nothing is
/// built FROM the look-alike. With the record's manifest the builder pulls the genuine base by it.
/// Kubernetes: the record lives in the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_alike_no_way_around_is_refused_naming_both() {
    common::local_registry::require_registry().await;
    require_second_daemon();
    let api = common::kube_api::KubeApi::start().await;
    let pool = format!("\n[[builder]]\nname = \"two\"\nendpoint = \"{SECOND}\"\nmax_builds = 2\n");
    let k = common::kube_mesh::KubeMesh::new("pbasek", &api, true, "test-ctx", &pool);
    let _second = SecondDaemonGuard(k.name().to_string());
    let ci = k.run(&["converge"]).await;
    assert_eq!(ci.status.code(), Some(0), "{}", said(&ci));
    let record = k.annotation(&api);
    let (reference, artifact) = (
        record["base"]["ref"].as_str().unwrap().to_string(),
        record["base"]["digest"].as_str().unwrap().to_string(),
    );

    // The look-alike: the base plus one file, pushed over the base's ref; then neither the builder
    // nor this host holds anything of the mesh.
    docker(&["pull", "-q", &reference]);
    let dir = k.mesh.dir.path().join("look-alike");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Dockerfile"),
        format!(
            "FROM {reference}\nRUN echo planted > /planted # {}\n",
            common::run_id()
        ),
    )
    .unwrap();
    docker(&["build", "-q", "-t", &reference, dir.to_str().unwrap()]);
    let look_alike = docker(&["image", "inspect", "--format", "{{.Id}}", &reference])
        .trim()
        .to_string();
    assert_ne!(look_alike, artifact);
    docker(&["push", &reference]);
    for host in [None, Some(SECOND)] {
        let left = remove_from_daemon_at(host, k.name());
        assert!(left.is_empty(), "{host:?} kept {left:?}");
    }

    std::fs::write(
        k.mesh.root().join("web/www/moved.html"),
        format!("moved {}\n", common::run_id()),
    )
    .unwrap();
    // A record from before manifests were kept: only the base's tag is left to ask.
    let mut before = record.clone();
    for entry in before.as_object_mut().unwrap().values_mut() {
        entry.as_object_mut().unwrap().remove("manifest");
    }
    k.set_annotation(&api, &before.to_string());
    let teammate = k.mesh.dir.path().join("teammate.db");
    let output = k.run_with_state(&teammate, &["converge", "--json"]).await;
    let text = said(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(common::decisions(&summary)["base"], "record", "{summary}");
    let web = summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "web")
        .unwrap();
    let outcome = web["outcome"].as_str().unwrap();
    assert!(
        outcome.contains(&look_alike) && outcome.contains(&artifact) && outcome.contains("refused"),
        "web's refusal names the look-alike and the base's artifact: {outcome}"
    );
    let rows = StateDb::open(&teammate)
        .unwrap()
        .builds(&meshtop::backends::state::BuildQuery {
            mesh: k.name().to_string(),
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    let web_row = rows
        .iter()
        .find(|r| r.module.as_deref() == Some("web"))
        .unwrap();
    assert_eq!(web_row.status, BuildStatus::Failed, "{web_row:#?}");
    assert!(web_row.digest.is_none(), "nothing was built: {web_row:#?}");

    // The record as CI stamped it names the base's manifest: the builder pulls that, never the tag.
    k.set_annotation(&api, &record.to_string());
    let output = k.run_with_state(&teammate, &["converge", "--json"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let on_builder = std::process::Command::new("docker")
        .args([
            "-H", SECOND, "image", "inspect", "--format", "{{.Id}}", &reference,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&on_builder.stdout).trim(),
        artifact,
        "the base on the builder is the artifact: {}",
        said(&on_builder)
    );
}
