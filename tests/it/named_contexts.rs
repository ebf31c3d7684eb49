//! Named contexts (issue 52): a Dockerfile writes `FROM base` and `COPY --from=lib`, naming mesh
//! modules as `docker buildx bake`'s `contexts = { base = "target:base", lib = "target:lib" }`
//! lets it. meshtop passes each module's artifact under that name (the Dockerfile it sends names the
//! artifact; the user's file is untouched), each is an input of the address and an edge of the
//! tiers. On the real daemon.

use crate::common::mesh_file::write;
use crate::common::{ExampleMesh, read_in_image, said};

/// `base` (a busybox and `/base.txt`), `lib` (`/lib.txt`), and `app` on both by name.
fn mesh_with_contexts(mesh: &ExampleMesh) {
    let root = mesh.root();
    write(
        &root,
        "mesh.toml",
        &format!(
            "[mesh]\nname = \"{}\"\n\n\
             [[module]]\nname = \"base\"\ncontext = \"base\"\n\n\
             [[module]]\nname = \"lib\"\ncontext = \"lib\"\n\n\
             [[module]]\nname = \"app\"\ncontext = \"app\"\ncontexts = {{ base = \"base\", shared = \"lib\" }}\n",
            mesh.name
        ),
    );
    write(
        &root,
        "base/Dockerfile",
        "FROM scratch\nCOPY busybox /bin/busybox\nCOPY base.txt /base.txt\n",
    );
    write(&root, "base/base.txt", "base 1\n");
    write(
        &root,
        "lib/Dockerfile",
        "FROM scratch\nCOPY lib.txt /lib.txt\n",
    );
    write(&root, "lib/lib.txt", "lib 1\n");
    // The shapes bake files feed: a stage FROM a named context, `COPY --from` of another, and
    // `--from` of a stage of the file's own.
    write(
        &root,
        "app/Dockerfile",
        "FROM base AS run\nCOPY --from=shared /lib.txt /lib.txt\nCOPY app.txt /app.txt\n\
         FROM run\nCOPY --from=run /app.txt /app-again.txt\n",
    );
    write(&root, "app/app.txt", "app 1\n");
}

fn planned(mesh: &ExampleMesh, module: &str) -> serde_json::Value {
    let plan = mesh.json(&["plan", "--json"]);
    plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap_or_else(|| panic!("no {module} in {plan}"))
        .clone()
}

#[test]
fn from_a_named_context_builds_on_that_modules_artifact_and_moves_with_it() {
    let mesh = ExampleMesh::new("nctx");
    mesh_with_contexts(&mesh);

    // An edge of the tiers: app waits for both.
    let plan = mesh.json(&["plan", "--json"]);
    assert_eq!(
        plan["tiers"],
        serde_json::json!([["base", "lib"], ["app"]]),
        "{plan}"
    );

    let converged = mesh.meshtop(&["converge"]);
    assert!(converged.status.success(), "{}", said(&converged));
    let app = planned(&mesh, "app");
    assert_eq!(app["decision"], "record", "{app}");
    let reference = app["ref"].as_str().unwrap().to_string();
    assert_eq!(read_in_image(&reference, "/base.txt"), "base 1");
    assert_eq!(read_in_image(&reference, "/lib.txt"), "lib 1");
    assert_eq!(read_in_image(&reference, "/app-again.txt"), "app 1");
    let lib = planned(&mesh, "lib");
    assert_eq!(
        app["contexts"]["shared"], lib["artifact"],
        "the address is computed on lib's artifact: {app}"
    );
    // The user's Dockerfile is untouched: only what the builder was sent names artifacts.
    let written = std::fs::read_to_string(mesh.root().join("app/Dockerfile")).unwrap();
    assert!(written.starts_with("FROM base AS run\n"), "{written}");

    // lib moves: app's address moves with it, and the why names the context.
    write(&mesh.root(), "lib/lib.txt", "lib 2\n");
    let app = planned(&mesh, "app");
    assert_eq!(app["decision"], "build", "{app}");
    assert_ne!(app["ref"].as_str(), Some(reference.as_str()), "{app}");
    // lib converged alone: app's plan then says why its address moved.
    let lib_only = mesh.meshtop(&["converge", "lib"]);
    assert!(lib_only.status.success(), "{}", said(&lib_only));
    let app = planned(&mesh, "app");
    assert_eq!(app["why"], "context shared moved", "{app}");
    let again = mesh.meshtop(&["converge"]);
    assert!(again.status.success(), "{}", said(&again));
    let app = planned(&mesh, "app");
    let moved = app["ref"].as_str().unwrap().to_string();
    assert_eq!(read_in_image(&moved, "/lib.txt"), "lib 2");
    assert_eq!(read_in_image(&moved, "/base.txt"), "base 1");
}

#[test]
fn a_named_context_that_is_no_module_is_refused_at_its_line() {
    let mesh = ExampleMesh::new("nctxbad");
    mesh_with_contexts(&mesh);
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("shared = \"lib\"", "shared = \"libb\"");
    std::fs::write(&file, text).unwrap();
    let out = mesh.meshtop(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let text = said(&out);
    assert!(
        text.contains(
            "mesh.toml:15: a named context of module \"app\" names \"libb\", which is not a module of this mesh — did you mean \"lib\"?"
        ),
        "{text}"
    );
}

/// On a builder that lacks them (the second daemon, forgotten everything), a module's named
/// contexts are fetched as its base is: pulled by the manifest digest this converge handed them
/// over as, never by a tag, and each must be its module's artifact.
#[test]
fn a_pool_builder_without_the_contexts_fetches_each_by_digest() {
    use crate::common::remove_from_daemon_at;
    use crate::common::second_daemon::{
        SECOND, SecondDaemonGuard, build_on_second_only, require_second_daemon,
    };
    require_second_daemon();
    let mesh = ExampleMesh::new("nctxpool");
    let _second = SecondDaemonGuard(mesh.name.clone());
    mesh_with_contexts(&mesh);
    build_on_second_only(&mesh);
    let first = mesh.meshtop(&["converge"]);
    assert_eq!(first.status.code(), Some(0), "{}", said(&first));

    let left = remove_from_daemon_at(Some(SECOND), &mesh.name);
    assert!(left.is_empty(), "the second daemon kept {left:?}");
    write(&mesh.root(), "app/app.txt", "app 2\n");
    let again = mesh.meshtop(&["converge"]);
    assert_eq!(again.status.code(), Some(0), "{}", said(&again));
    let text = said(&again);
    assert!(text.contains("✓ tier 1 app"), "{text}");
    let app = planned(&mesh, "app");
    let reference = app["ref"].as_str().unwrap();
    assert_eq!(read_in_image(reference, "/app.txt"), "app 2");
    assert_eq!(read_in_image(reference, "/lib.txt"), "lib 1");
    assert_eq!(read_in_image(reference, "/base.txt"), "base 1");
}
