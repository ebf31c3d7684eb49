//! gc reads the keep set of every target of the mesh before taking anything (issue 24): an artifact
//! only another target's record names is kept, saying so; a target that cannot be read stops gc,
//! naming it. The real binary and daemon, a mesh with two docker targets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{ExampleMesh, said};
use serde_json::Value;

fn image_exists(id: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", id])
        .output()
        .unwrap()
        .status
        .success()
}

fn record_of(mesh: &ExampleMesh, target: &str, module: &str) -> String {
    let grid = mesh.json(&["status", "--all-targets", "--json"]);
    common::grid_cell(&grid, module, target)["artifact"]["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn gc_keeps_what_only_another_targets_record_names_and_stops_on_a_target_it_cannot_read() {
    let mesh = ExampleMesh::two_docker_targets("envgc");
    let ok = |args: &[&str]| {
        let out = mesh.meshtop(args);
        assert!(out.status.success(), "{args:?}: {}", said(&out));
    };
    ok(&["converge", "--target", "staging"]);
    let promoted = mesh.meshtop(&["promote", "web", "--to", "prod", "--yes"]);
    assert!(promoted.status.success(), "{}", said(&promoted));
    // Prod's declared machine did not exist: the promote created it, and says so (not "0/0 moved").
    let out = String::from_utf8_lossy(&promoted.stdout).into_owned();
    assert!(out.contains("; 1 machine(s) created"), "{out}");
    assert!(!out.contains("0/0"), "{out}");
    let v1 = record_of(&mesh, "prod", "web");
    // Staging moves on twice: v1 is no longer its record, its rollback target, nor a newest build.
    for version in ["v2", "v3"] {
        std::fs::write(mesh.root().join("web/version.txt"), version).unwrap();
        ok(&["converge", "--target", "staging", "web"]);
    }
    assert_ne!(record_of(&mesh, "staging", "web"), v1);
    // Prod's machine gone: only prod's record needs v1 now.
    let gone = std::process::Command::new("docker")
        .args(["rm", "-f", &format!("{}-prod-web-1", mesh.name)])
        .output()
        .unwrap();
    assert!(gone.status.success());

    let plan: Value = mesh.json(&[
        "gc",
        "--target",
        "staging",
        "--dry-run",
        "--keep",
        "1",
        "--grace",
        "0s",
        "--json",
    ]);
    let candidates = plan["candidates"].as_array().unwrap();
    assert!(
        candidates.iter().all(|c| c["artifact"] != v1.as_str()),
        "prod's record keeps v1: {plan}"
    );
    assert!(
        candidates.iter().any(|c| c["module"] == "web"),
        "staging's v2 (no root keeps it) is a candidate: {plan}"
    );
    ok(&[
        "gc", "--target", "staging", "--keep", "1", "--grace", "0s", "--yes",
    ]);
    assert!(image_exists(&v1), "v1 survived the sweep");

    // A third target that cannot be read: gc takes nothing, naming it.
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let qa = "\n[[target]]\nname = \"qa\"\nkind = \"kubernetes\"\ncontext = \"nowhere\"\n";
    let (head, machines) = text.split_once("[[machine]]").unwrap();
    std::fs::write(&file, format!("{head}{qa}\n[[machine]]{machines}")).unwrap();
    let kubeconfig = mesh.dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env("KUBECONFIG", &kubeconfig)
        .arg("--mesh")
        .arg(&file)
        .arg("--state")
        .arg(mesh.state())
        .args(["gc", "--target", "staging", "--grace", "0s", "--yes"])
        .output()
        .unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("gc took nothing: target qa cannot be read"),
        "{text}"
    );
}
