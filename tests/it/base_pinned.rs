//! The base pinned during the build (issue 51, case 6), on the real daemon and registry: a
//! co-tenant of the builder's daemon (anyone who may `docker tag` there) moves the base's tag to a
//! look-alike while a dependent builds on BuildKit, and moves it back before meshtop looks again.
//! Where the daemon holds the base by digest (it pushed or pulled it), BuildKit is given that
//! digest reference and the build is FROM the base whatever the tag says; where it holds the base
//! by tag alone, the result's layers must begin with the base's, and a build FROM the look-alike
//! is refused. What the build used is read from the daemon's own image records (`docker image
//! inspect`), not meshtop's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use crate::common;

use common::daemon_proxy::{DOCKER_SOCKET, DaemonProxy};
use common::example::{ExampleMesh, builds, said};
use common::local_registry::{LOCAL, docker, require_registry};
use common::signing::LookAlike;

/// The layers (`RootFS.Layers`) of an image, as the daemon records them.
fn layers(image: &str) -> Vec<String> {
    let out = docker(&["image", "inspect", "-f", "{{json .RootFS.Layers}}", image]);
    serde_json::from_str(out.trim()).unwrap()
}

/// `docker tag SOURCE TARGET` on the daemon itself (never through the proxy).
fn tag(source: &str, target: &str) {
    let out = Command::new("docker")
        .args(["-H", &format!("unix://{DOCKER_SOCKET}")])
        .args(["tag", source, target])
        .output()
        .unwrap();
    assert!(out.status.success(), "docker tag: {}", said(&out));
}

/// A request line's target with `%2F` and `%3A` decoded, as the Docker client encodes a name.
fn decoded(head: &str) -> String {
    head.replace("%2F", "/").replace("%3A", ":")
}

/// A proxy in front of the daemon's socket that plays a co-tenant who may `docker tag`: when the
/// build of a ref of `module` arrives (`POST /v1.NN/build?…&t=<ref>`), a real `docker tag` puts
/// `look_alike` under every one of `base_tags` before the daemon takes the request (BuildKit
/// resolves the `FROM` name while it serves it: moby `builder/builder-next/builder.go` `Build`,
/// then the Dockerfile frontend's `ResolveImageConfig`); at the next request asking the daemon
/// about an image (`GET …/images/<name>/json`, what a client asks to look again), they are put
/// back on `base` first. So the tags name the base before the build and after it, and the
/// look-alike while BuildKit resolves `FROM`.
fn moving_proxy(
    socket: &Path,
    module: &str,
    base: &str,
    base_tags: &[String],
    look_alike: &str,
) -> DaemonProxy {
    let building = format!("/{module}:");
    let (base, look_alike) = (base.to_string(), look_alike.to_string());
    let base_tags = base_tags.to_vec();
    let moved = AtomicBool::new(false);
    let hook = Arc::new(move |head: &str| {
        let head = decoded(head);
        let is_build = head.starts_with("POST /") && head.contains("/build?");
        if is_build && head.contains(&building) && !moved.swap(true, Ordering::SeqCst) {
            for name in &base_tags {
                tag(&look_alike, name);
            }
        } else if head.contains("/images/")
            && head.ends_with("/json")
            && moved.load(Ordering::SeqCst)
        {
            for name in &base_tags {
                tag(&base, name);
            }
        }
    });
    DaemonProxy::start_with(socket, Path::new(DOCKER_SOCKET), Some(hook))
}

/// The example mesh converged once (`args` added); the base's artifact and its tags.
fn converged_once(mesh: &ExampleMesh, args: &[&str]) -> (String, Vec<String>) {
    let mut all = vec!["converge", "--json"];
    all.extend_from_slice(args);
    let first = mesh.json(&all);
    let base = first["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "base")
        .unwrap_or_else(|| panic!("base in {first}"));
    let artifact = base["digest"].as_str().unwrap().to_string();
    let out = docker(&["image", "inspect", "-f", "{{json .RepoTags}}", &artifact]);
    let tags: Vec<String> = serde_json::from_str(out.trim()).unwrap();
    assert!(!tags.is_empty(), "the base is tagged: {first}");
    (artifact, tags)
}

/// Converge `mesh` again (`args` added) through a proxy that moves the base's tags to a
/// look-alike while web builds (its context changed first): the converge's output, web's build
/// row, the look-alike. The base's tags are put back on it afterwards, whatever happened.
fn converge_while_the_base_moves(
    mesh: &ExampleMesh,
    args: &[&str],
    base: &str,
    base_tags: &[String],
) -> (
    std::process::Output,
    meshtop::mesh::builds::BuildRow,
    LookAlike,
) {
    let look_alike = LookAlike::make(mesh.dir.path());
    assert_ne!(layers(&look_alike.id), layers(base));
    std::fs::write(
        mesh.root().join("web/www/moved.html"),
        "while the base moved",
    )
    .unwrap();
    let proxy = moving_proxy(
        &mesh.dir.path().join("proxy.sock"),
        "web",
        base,
        base_tags,
        &look_alike.id,
    );
    let mut all = vec!["converge", "--json"];
    all.extend_from_slice(args);
    let output = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env("DOCKER_HOST", proxy.docker_host())
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(&all)
        .output()
        .unwrap();
    drop(proxy);
    for name in base_tags {
        tag(base, name);
    }
    let web = builds(mesh)
        .into_iter()
        .filter(|b| b.module.as_deref() == Some("web"))
        .max_by_key(|b| b.started_ms)
        .unwrap();
    (output, web, look_alike)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base_the_daemon_holds_by_digest_is_built_from_whatever_its_tag_names_meanwhile() {
    require_registry().await;
    let mesh = ExampleMesh::new("bppin");
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\nregistry = \"{LOCAL}\"\n", mesh.name),
        1,
    );
    std::fs::write(&file, text).unwrap();
    // Published: the daemon pushed the base, so it holds it by digest too.
    let (base, base_tags) = converged_once(&mesh, &["--publish"]);
    let digests = docker(&["image", "inspect", "-f", "{{json .RepoDigests}}", &base]);
    let digests: Vec<String> = serde_json::from_str(digests.trim()).unwrap();
    assert!(!digests.is_empty(), "the daemon holds the base by digest");

    let (output, web, look_alike) =
        converge_while_the_base_moves(&mesh, &["--publish"], &base, &base_tags);
    let text = said(&output);
    let built = web.digest.clone().expect("web's build made an image");
    let built_layers = layers(&built);
    assert!(
        !built_layers.starts_with(&layers(&look_alike.id)),
        "web {built} was built FROM the look-alike {}: {text}",
        look_alike.id
    );
    assert!(
        built_layers.starts_with(&layers(&base)),
        "web {built} is not FROM the base {base}: {built_layers:?}"
    );
    // BuildKit was given the base by the digest the daemon holds it by: its output, kept with
    // the operation's events, names it.
    let db = rusqlite::Connection::open(mesh.state()).unwrap();
    let said_web: Vec<String> = db
        .prepare("SELECT text FROM events WHERE mesh = ?1 AND module = 'web'")
        .unwrap()
        .query_map([&mesh.name], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let said_web = said_web.join("\n");
    assert!(
        digests
            .iter()
            .any(|pinned| said_web.contains(&format!("FROM {pinned}"))),
        "the build names the base by {digests:?}: {said_web}"
    );
    assert!(output.status.success(), "{text}");
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(summary.to_string().contains(&built), "{summary}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base_held_by_tag_alone_must_be_what_the_build_begins_with() {
    let mesh = ExampleMesh::new("bptag");
    // No registry: the daemon holds the base by its tags alone.
    let (base, base_tags) = converged_once(&mesh, &[]);
    let digests = docker(&["image", "inspect", "-f", "{{json .RepoDigests}}", &base]);
    assert_eq!(digests.trim(), "[]", "the base has no digest here");
    let recorded = |mesh: &ExampleMesh| -> String {
        let db = rusqlite::Connection::open(mesh.state()).unwrap();
        db.query_row(
            "SELECT digest FROM records WHERE mesh = ?1 AND module = 'web'",
            [&mesh.name],
            |r| r.get(0),
        )
        .unwrap()
    };
    let before = recorded(&mesh);

    let (output, web, look_alike) = converge_while_the_base_moves(&mesh, &[], &base, &base_tags);
    let text = said(&output);
    assert!(!output.status.success(), "the converge succeeded: {text}");
    let error = web.error.clone().unwrap_or_default();
    assert!(
        error.contains("does not begin with the layers") && error.contains(&base),
        "web's build: {error}\n{text}"
    );
    // What it built (FROM the look-alike) answers for nothing: the record keeps web's old artifact.
    assert_eq!(recorded(&mesh), before);
    drop(look_alike);
}
