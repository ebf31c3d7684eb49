//! Upstream is an input (issue 52): a module `FROM` an image the mesh does not build, with the
//! real registry on 127.0.0.1:5000 playing the upstream's (Docker Hub's) part. The CVE-fix case:
//! the upstream's tag is pushed over with a fixed image; the lock holds the mesh where it was until
//! `meshtop update` moves it, and then the plan says the upstream moved, the ref moves, and a
//! converge runs the machine on the fixed upstream.

use std::path::Path;

use crate::common;
use crate::common::local_registry::{LOCAL, docker, require_registry};
use crate::common::mesh_file::write;
use crate::common::{ExampleMesh, read_in_image, said};

/// An upstream image `FROM scratch` holding a busybox and `/upstream-version`, pushed under `tag`;
/// the digest the registry holds it by.
fn push_upstream(dir: &Path, tag: &str, version: &str) -> String {
    let context = dir.join(format!("upstream-{version}"));
    std::fs::create_dir_all(&context).unwrap();
    std::fs::copy("/bin/busybox", context.join("busybox")).unwrap();
    write(&context, "version", &format!("{version}\n"));
    write(
        &context,
        "Dockerfile",
        "FROM scratch\nCOPY busybox /bin/busybox\nCOPY version /upstream-version\n",
    );
    docker(&[
        "build",
        "--no-cache",
        "-q",
        "-t",
        tag,
        &context.display().to_string(),
    ]);
    let pushed = docker(&["push", tag]);
    pushed
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("docker push {tag} said no digest: {pushed}"))
        .to_string()
}

/// A mesh of one module `app` FROM `upstream`, its machine `<name>-app-1`.
fn mesh_on(mesh: &ExampleMesh, upstream: &str) {
    let root = mesh.root();
    write(
        &root,
        "mesh.toml",
        &format!(
            "[mesh]\nname = \"{}\"\n\n[target]\nkind = \"docker\"\n\n[[module]]\nname = \"app\"\ncontext = \"app\"\npolicy = \"rollout\"\n\n[[machine]]\nname = \"{}-app-1\"\nmodule = \"app\"\n",
            mesh.name, mesh.name
        ),
    );
    write(
        &root,
        "app/Dockerfile",
        &format!(
            "# The upstream, as a team's Dockerfile names it.\nARG UPSTREAM={upstream}\nFROM ${{UPSTREAM}} AS run\nCOPY app.txt /app.txt\nCMD [\"/bin/busybox\", \"sleep\", \"3600\"]\n"
        ),
    );
    write(&root, "app/app.txt", "the app\n");
}

fn app_ref(mesh: &ExampleMesh, state: &Path) -> (String, serde_json::Value) {
    let plan = mesh.json_with_state(state, &["plan", "--json"]);
    let app = plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "app")
        .unwrap_or_else(|| panic!("no app in {plan}"))
        .clone();
    (app["ref"].as_str().unwrap().to_string(), app)
}

#[tokio::test]
async fn a_moved_upstream_is_held_by_the_lock_until_update_moves_it() {
    require_registry().await;
    let mesh = ExampleMesh::new("upl");
    let upstream = format!("{LOCAL}/upstream/{}:1", common::test_name("up"));
    let dir = tempfile::tempdir().unwrap();
    let v1 = push_upstream(dir.path(), &upstream, "1");
    mesh_on(&mesh, &upstream);

    // The first plan locks the upstream from the registry and says so.
    let first = mesh.meshtop(&["plan"]);
    assert!(first.status.success(), "{}", said(&first));
    let text = said(&first);
    assert!(
        text.contains(&format!("upstream {upstream} locked at")),
        "{text}"
    );
    let lock = std::fs::read_to_string(mesh.root().join("mesh.lock")).unwrap();
    assert!(lock.contains(&format!("digest = \"{v1}\"")), "{lock}");
    assert!(lock.contains("from = \"registry\""), "{lock}");

    let converged = mesh.meshtop(&["converge"]);
    assert!(converged.status.success(), "{}", said(&converged));
    let (reference, _) = app_ref(&mesh, &mesh.state());
    assert_eq!(read_in_image(&reference, "/upstream-version"), "1");

    // The CVE fix: the same tag, pushed over. The lock holds: same ref, nothing to do.
    let v2 = push_upstream(dir.path(), &upstream, "2");
    assert_ne!(v1, v2);
    let (after_push, app) = app_ref(&mesh, &mesh.state());
    assert_eq!(after_push, reference, "the lock holds the address");
    assert_eq!(app["decision"], "record", "{app}");

    // A forced rebuild builds from the locked digest, whatever the tag names by now: never a
    // second artifact of another upstream under the same ref.
    let forced = mesh.meshtop(&["converge", "--force"]);
    assert!(forced.status.success(), "{}", said(&forced));
    assert_eq!(read_in_image(&reference, "/upstream-version"), "1");

    // A teammate with the committed lock (another state database) computes the same ref.
    let teammate = mesh.dir.path().join("teammate.db");
    assert_eq!(app_ref(&mesh, &teammate).0, reference);

    // `outdated` tells, without moving anything: exit 1, the new digest, who stands on it.
    let short = |d: &str| format!("sha256:{}…", &d["sha256:".len().."sha256:".len() + 12]);
    let told = mesh.meshtop(&["outdated"]);
    assert_eq!(told.status.code(), Some(1), "{}", said(&told));
    let line = format!(
        "{upstream}  locked {}  moved to {}  modules app  declared machines 1",
        short(&v1),
        short(&v2)
    );
    assert!(said(&told).contains(&line), "{}", said(&told));
    assert_eq!(
        app_ref(&mesh, &mesh.state()).0,
        reference,
        "outdated moved nothing"
    );

    // `update` moves the lock; the plan names the move and the ref moves.
    let updated = mesh.meshtop(&["update"]);
    assert!(updated.status.success(), "{}", said(&updated));
    let current = mesh.meshtop(&["outdated"]);
    assert!(current.status.success(), "{}", said(&current));
    assert!(said(&current).contains("  current  "), "{}", said(&current));
    let moved = format!("upstream {upstream} {} → {}", short(&v1), short(&v2));
    assert!(said(&updated).contains(&moved), "{}", said(&updated));
    let (moved_ref, app) = app_ref(&mesh, &mesh.state());
    assert_ne!(moved_ref, reference, "a moved lock moves the ref");
    assert!(
        app["why"].as_str().unwrap_or_default().contains(&moved),
        "the plan's why names the upstream's move: {app}"
    );
    let converged = mesh.meshtop(&["converge"]);
    assert!(converged.status.success(), "{}", said(&converged));
    assert_eq!(read_in_image(&moved_ref, "/upstream-version"), "2");
    let machine = format!("{}-app-1", mesh.name);
    let runs = docker(&["inspect", "-f", "{{.Image}}", &machine]);
    let built = docker(&["inspect", "-f", "{{.Id}}", &moved_ref]);
    assert_eq!(
        runs.trim(),
        built.trim(),
        "the machine runs the fixed upstream's build"
    );
    mesh.clean_daemon();
    let _ = std::process::Command::new("docker")
        .args(["rmi", &upstream])
        .output();
}

#[tokio::test]
async fn an_upstream_nobody_can_resolve_is_named_with_the_registrys_answer() {
    require_registry().await;
    let mesh = ExampleMesh::new("upn");
    let upstream = format!("{LOCAL}/upstream/{}:1", common::test_name("upm"));
    mesh_on(&mesh, &upstream);
    let out = mesh.meshtop(&["plan"]);
    assert!(
        !out.status.success(),
        "a plan cannot lock what nobody holds"
    );
    let text = said(&out);
    assert!(
        text.contains(&format!("upstream {upstream} cannot be locked"))
            && text.contains(&format!("the registry {LOCAL} holds no")),
        "{text}"
    );
    assert!(
        !mesh.root().join("mesh.lock").exists(),
        "nothing half-written"
    );
}

#[test]
fn a_lock_that_does_not_parse_names_its_line() {
    let mesh = ExampleMesh::new("upb");
    mesh_on(&mesh, "127.0.0.1:5000/none/base:1");
    write(
        &mesh.root(),
        "mesh.lock",
        "version = 1\n\n[[upstream]]\nimage = \"127.0.0.1:5000/none/base:1\"\ndigest = \"sha256:nope\"\nfrom = \"registry\"\n",
    );
    let out = mesh.meshtop(&["plan"]);
    assert!(!out.status.success());
    let text = said(&out);
    assert!(
        text.contains("mesh.lock line 5") && text.contains("not a sha256 digest"),
        "{text}"
    );
}

/// The CVE fix seen from the machines: after `plan --refresh` asked the registry, `status` says the
/// machine runs an artifact built on an upstream that has since moved (`behind upstream`, beside
/// `behind`), with both digests, until `update` and a converge move it.
#[tokio::test]
async fn status_says_which_machines_stand_on_a_moved_upstream_once_a_refresh_asked() {
    require_registry().await;
    let mesh = ExampleMesh::new("upst");
    let upstream = format!("{LOCAL}/upstream/{}:1", common::test_name("ups"));
    let dir = tempfile::tempdir().unwrap();
    let v1 = push_upstream(dir.path(), &upstream, "1");
    mesh_on(&mesh, &upstream);
    let converged = mesh.meshtop(&["converge"]);
    assert!(converged.status.success(), "{}", said(&converged));
    let machine = format!("{}-app-1", mesh.name);
    let short = |d: &str| format!("sha256:{}…", &d["sha256:".len().."sha256:".len() + 12]);

    let v2 = push_upstream(dir.path(), &upstream, "2");
    // Nothing asked the registry yet: status asks nothing itself, so it cannot know.
    let before = mesh.meshtop(&["status", "--exit-code"]);
    assert_eq!(before.status.code(), Some(0), "{}", said(&before));
    assert!(
        !said(&before).contains("behind upstream"),
        "{}",
        said(&before)
    );

    let refreshed = mesh.meshtop(&["plan", "--refresh"]);
    assert!(refreshed.status.success(), "{}", said(&refreshed));
    let text = said(&refreshed);
    assert!(
        text.contains("upstreams, asked now:")
            && text.contains(&format!(
                "{upstream}  locked {}  moved to {}  modules app  declared machines 1",
                short(&v1),
                short(&v2)
            ))
            && text.contains(&format!("`meshtop update {upstream}` moves the lock")),
        "{text}"
    );

    let status = mesh.meshtop(&["status", "--exit-code"]);
    assert_eq!(status.status.code(), Some(1), "{}", said(&status));
    let text = said(&status);
    assert!(
        text.contains(&format!(
            "behind upstream: {machine} runs an artifact built on {upstream} {}, which its registry has since moved to {}",
            short(&v1),
            short(&v2)
        )) && text.contains("1 machine(s), 0 behind, 1 behind upstream, 0 missing"),
        "{text}"
    );
    let json = mesh.json(&["status", "--json"]);
    assert_eq!(json[0]["behind_upstream"][0]["now"], v2.as_str(), "{json}");

    let updated = mesh.meshtop(&["update"]);
    assert!(updated.status.success(), "{}", said(&updated));
    let converged = mesh.meshtop(&["converge"]);
    assert!(converged.status.success(), "{}", said(&converged));
    let after = mesh.meshtop(&["status", "--exit-code"]);
    assert_eq!(after.status.code(), Some(0), "{}", said(&after));
    assert!(
        !said(&after).contains("behind upstream"),
        "{}",
        said(&after)
    );
    mesh.clean_daemon();
    let _ = std::process::Command::new("docker")
        .args(["rmi", &upstream])
        .output();
}

/// An upstream that is an index (the shape of `python:3.12-slim`): the lock holds the index's
/// digest and, per platform the modules build, the manifest it names for it; a module that builds
/// for a platform the index lacks stops the plan, naming the platforms it has.
#[tokio::test]
async fn an_index_upstream_is_locked_per_platform_and_a_missing_platform_stops_the_plan() {
    require_registry().await;
    let dir = tempfile::tempdir().unwrap();
    let repository = format!("{LOCAL}/upstream/{}", common::test_name("upi"));
    let mut entries = Vec::new();
    for arch in ["amd64", "arm64"] {
        let context = dir.path().join(arch);
        std::fs::create_dir_all(&context).unwrap();
        write(&context, "arch", &format!("{arch}\n"));
        write(&context, "Dockerfile", "FROM scratch\nCOPY arch /arch\n");
        let tag = format!("{repository}:{arch}");
        let built = std::process::Command::new("docker")
            .args([
                "build",
                "-q",
                // No cache: the legacy builder shares an intermediate image of the same steps
                // with other tests and runs, whose clean-up may remove it mid-build ("unable to
                // find image").
                "--no-cache",
                "--platform",
                &format!("linux/{arch}"),
                "-t",
                &tag,
            ])
            .arg(&context)
            .env("DOCKER_BUILDKIT", "0")
            .output()
            .unwrap();
        assert!(built.status.success(), "{}", said(&built));
        let pushed = docker(&["push", &tag]);
        let field = |key: &str| {
            pushed
                .split(key)
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("docker push {tag} said no {key}: {pushed}"))
                .to_string()
        };
        entries.push(serde_json::json!({
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "digest": field("digest: "),
            "size": field("size: ").parse::<u64>().unwrap(),
            "platform": { "os": "linux", "architecture": arch },
        }));
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    });
    let path = repository.strip_prefix(&format!("{LOCAL}/")).unwrap();
    let put = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/vnd.oci.image.index.v1+json",
        ])
        .arg("--data-binary")
        .arg(index.to_string())
        .arg(format!("http://{LOCAL}/v2/{path}/manifests/1"))
        .output()
        .unwrap();
    assert!(put.status.success(), "{}", said(&put));
    let upstream = format!("{repository}:1");

    let mesh = ExampleMesh::new("upi");
    mesh_on(&mesh, &upstream);
    let pinned_to = |platforms: &str| {
        let file = mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap();
        let text = match text.find("platforms = ") {
            Some(_) => text
                .lines()
                .map(|l| {
                    if l.starts_with("platforms = ") {
                        format!("platforms = {platforms}")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None => text.replace(
                "policy = \"rollout\"\n",
                &format!("policy = \"rollout\"\nplatforms = {platforms}\n"),
            ),
        };
        std::fs::write(&file, text).unwrap();
        let _ = std::fs::remove_file(mesh.root().join("mesh.lock"));
    };

    pinned_to("[\"linux/amd64\"]");
    let planned = mesh.meshtop(&["plan"]);
    assert!(planned.status.success(), "{}", said(&planned));
    let lock = std::fs::read_to_string(mesh.root().join("mesh.lock")).unwrap();
    let amd64 = entries[0]["digest"].as_str().unwrap();
    assert!(
        lock.contains(&format!("\"linux/amd64\" = \"{amd64}\"")),
        "the platform's manifest is locked beside the index: {lock}"
    );

    pinned_to("[\"linux/s390x\"]");
    let refused = mesh.meshtop(&["plan"]);
    assert!(!refused.status.success(), "{}", said(&refused));
    assert!(
        said(&refused).contains("names no linux/s390x image (it names linux/amd64, linux/arm64)"),
        "{}",
        said(&refused)
    );
    for arch in ["amd64", "arm64"] {
        let _ = std::process::Command::new("docker")
            .args(["rmi", &format!("{repository}:{arch}")])
            .output();
    }
}
