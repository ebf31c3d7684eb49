//! A module's `target` (issue 53): the Dockerfile stage to build, as compose's and bake's
//! `target`. Built on the real daemon by BuildKit and by the legacy builder; part of the address,
//! so changing it moves the ref and the plan's why names it; checked against the Dockerfile's
//! stages at its line.

use crate::common::mesh_file::{line_of, refused_in, repo, write};
use crate::common::{ExampleMesh, read_in_image, said};

/// Two stages `FROM scratch`, each with a busybox and `/stage` saying which it is.
const TWO_STAGES: &str = "FROM scratch AS first\nCOPY busybox /bin/busybox\nCOPY first.txt /stage\n\nFROM scratch AS last\nCOPY busybox /bin/busybox\nCOPY last.txt /stage\n";

fn mesh_with_target(mesh: &ExampleMesh, target: Option<&str>) {
    let root = mesh.root();
    let target = target.map_or(String::new(), |t| format!("target = \"{t}\"\n"));
    write(
        &root,
        "mesh.toml",
        &format!(
            "[mesh]\nname = \"{}\"\n\n[[module]]\nname = \"app\"\ncontext = \"app\"\n{target}",
            mesh.name
        ),
    );
    write(&root, "app/Dockerfile", TWO_STAGES);
    write(&root, "app/first.txt", "first\n");
    write(&root, "app/last.txt", "last\n");
    std::fs::copy("/bin/busybox", root.join("app/busybox")).unwrap();
}

fn app(mesh: &ExampleMesh) -> serde_json::Value {
    let plan = mesh.json(&["plan", "--json"]);
    plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "app")
        .unwrap_or_else(|| panic!("no app in {plan}"))
        .clone()
}

fn converge(mesh: &ExampleMesh, args: &[&str], env: &[(&str, &str)]) {
    let out = mesh.converge_with(args, env);
    assert!(
        out.status.success(),
        "converge {args:?} {env:?}: {}",
        said(&out)
    );
}

#[test]
fn the_named_stage_is_built_by_both_builders_and_a_new_target_moves_the_ref() {
    let mesh = ExampleMesh::new("tgt");
    mesh_with_target(&mesh, None);
    let last_ref = app(&mesh)["ref"].as_str().unwrap().to_string();

    mesh_with_target(&mesh, Some("first"));
    let planned = app(&mesh);
    let first_ref = planned["ref"].as_str().unwrap().to_string();
    assert_ne!(first_ref, last_ref, "naming a target moves the address");

    // BuildKit builds the named stage: the result has its file, not the last stage's.
    converge(&mesh, &[], &[]);
    assert_eq!(read_in_image(&first_ref, "/stage"), "first");
    // The legacy builder too (the same `/build` query parameter).
    converge(&mesh, &["--force"], &[("DOCKER_BUILDKIT", "0")]);
    assert_eq!(read_in_image(&first_ref, "/stage"), "first");

    // Another target: another ref, and the plan says why.
    mesh_with_target(&mesh, Some("last"));
    let moved = app(&mesh);
    let moved_ref = moved["ref"].as_str().unwrap();
    assert_ne!(moved_ref, first_ref);
    assert_eq!(moved["why"], "target first → last", "{moved}");
    let plan = mesh.meshtop(&["plan"]);
    assert!(
        said(&plan).contains("target first → last"),
        "{}",
        said(&plan)
    );
    converge(&mesh, &[], &[]);
    assert_eq!(read_in_image(moved_ref, "/stage"), "last");
}

#[test]
fn a_target_that_is_no_stage_is_refused_at_its_line() {
    let dir = repo();
    write(dir.path(), "app/Dockerfile", TWO_STAGES);
    let text = "[mesh]\nname = \"m\"\n\n[[module]]\nname = \"app\"\ncontext = \"app\"\ntarget = \"frist\"\n";
    let e = refused_in(
        dir.path(),
        text,
        line_of(text, "target ="),
        &[
            "module \"app\"",
            "`target` \"frist\"",
            "its stages: first, last",
        ],
    );
    assert!(e.fix.contains("FROM … AS <name>"), "{e}");
    let bad = "[mesh]\nname = \"m\"\n\n[[module]]\nname = \"app\"\ncontext = \"app\"\ntarget = \"no stage\"\n";
    refused_in(
        dir.path(),
        bad,
        line_of(bad, "target ="),
        &["`target` \"no stage\"", "is not a stage name"],
    );
}
