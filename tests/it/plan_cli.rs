//! `meshtop plan` on the example mesh: tiers, decisions, and refs that move only with the inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;

use common::{ExampleMesh, said};
use serde_json::Value;

fn refs(plan: &Value) -> BTreeMap<String, Value> {
    plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_string(), m["ref"].clone()))
        .collect()
}

#[test]
fn plan_json_has_three_tiers_and_a_decision_for_every_module() {
    let mesh = ExampleMesh::new("plan");
    let plan = mesh.json(&["plan", "--json"]);
    assert_eq!(plan["mesh"], mesh.name.as_str());
    // The target by its name (the mesh file's single `[target]` is `default`) and its kind.
    assert_eq!(plan["target"], "default");
    assert_eq!(plan["target_kind"], "docker");
    assert_eq!(
        plan["tiers"],
        serde_json::json!([["base"], ["tools", "web"], ["api", "worker"]])
    );
    let modules = plan["modules"].as_array().unwrap();
    assert_eq!(modules.len(), 5);
    for module in modules {
        let decision = module["decision"].as_str().unwrap();
        assert!(
            ["record", "host", "build", "forced", "refused"].contains(&decision),
            "{module}"
        );
        assert!(
            module["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{module}"
        );
        assert!(module["why"].as_str().is_some(), "{module}");
    }
    // Nothing was built: the base's ref is known, its dependents wait for it.
    let base = &modules[0];
    assert_eq!(base["name"], "base");
    assert!(
        base["ref"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}/base:", mesh.name))
    );
    assert_eq!(base["why"], "new module");
    for dependent in &modules[1..] {
        assert!(dependent["ref"].is_null(), "{dependent}");
        assert_eq!(dependent["decision"], "build");
    }
    let forced = mesh.json(&["plan", "--json", "--force"]);
    assert_eq!(forced["modules"].as_array().unwrap().len(), 5, "{forced}");
    assert!(
        forced["modules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["decision"] == "forced"),
        "{forced}"
    );
}

#[test]
fn refs_move_with_content_only() {
    let mesh = ExampleMesh::new("refs");
    let before = refs(&mesh.json(&["plan", "--json"]));
    let base_ref = before["base"].as_str().unwrap().to_string();
    assert!(
        base_ref.ends_with("-amd64") || base_ref.ends_with("-arm64"),
        "{base_ref}"
    );

    // Touching mtimes changes nothing.
    let status = Command::new("find")
        .arg(mesh.root())
        .args(["-exec", "touch", "-d", "2001-01-01", "{}", "+"])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(refs(&mesh.json(&["plan", "--json"])), before);

    // Reordering the modules in the file changes nothing.
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let (head, rest) = text.split_once("[[module]]").unwrap();
    let mut blocks: Vec<String> = rest
        .split("[[module]]")
        .map(|b| format!("[[module]]{b}"))
        .collect();
    let machines_at = blocks.last().unwrap().find("[[machine]]").unwrap();
    let last = blocks.pop().unwrap();
    blocks.push(last[..machines_at].to_string());
    blocks.reverse();
    let reordered = format!("{head}{}\n{}", blocks.join("\n"), &last[machines_at..]);
    std::fs::write(&file, reordered).unwrap();
    assert_eq!(refs(&mesh.json(&["plan", "--json"])), before);

    // Copying the mesh elsewhere changes nothing.
    let elsewhere = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(mesh.root())
        .arg(elsewhere.path().join("copy"))
        .status()
        .unwrap();
    assert!(status.success());
    let output = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(elsewhere.path().join("copy/mesh.toml"))
        .arg("--state")
        .arg(elsewhere.path().join("state.db"))
        .args(["plan", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", said(&output));
    assert_eq!(
        refs(&serde_json::from_slice(&output.stdout).unwrap()),
        before
    );

    // One byte in the base's context moves the base's ref.
    std::fs::write(mesh.root().join("base/extra.txt"), "x").unwrap();
    let after = refs(&mesh.json(&["plan", "--json"]));
    assert_ne!(after["base"], before["base"]);
    // A file .dockerignore excludes moves nothing.
    std::fs::remove_file(mesh.root().join("base/extra.txt")).unwrap();
    std::fs::write(mesh.root().join("base/NOTES.md"), "ignored").unwrap();
    assert_eq!(refs(&mesh.json(&["plan", "--json"])), before);
}

#[test]
fn bad_input_exits_two_and_names_the_problem() {
    let mesh = ExampleMesh::new("bad");
    let unknown = mesh.meshtop(&["plan", "nosuch"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(said(&unknown).contains("nosuch"), "{}", said(&unknown));

    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("base = \"tools\"", "base = \"toolz\"")).unwrap();
    let output = mesh.meshtop(&["plan", "--json"]);
    assert_eq!(output.status.code(), Some(2), "{}", said(&output));
    let message = said(&output);
    assert!(
        message.contains("toolz") && message.contains("mesh.toml"),
        "{message}"
    );

    let missing = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .current_dir(mesh.dir.path())
        .args(["--state", "x.db", "plan"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2), "{}", said(&missing));
    assert!(said(&missing).contains("mesh.toml"), "{}", said(&missing));
}

#[test]
fn plan_runs_without_a_daemon_and_says_why_the_host_could_not_answer() {
    let mesh = ExampleMesh::new("nodaemon");
    let output = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(["plan", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", said(&output));
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    let base = &plan["modules"][0];
    assert_eq!(base["decision"], "build");
    assert!(
        base["reason"]
            .as_str()
            .unwrap()
            .contains("host could not answer"),
        "{base}"
    );
    assert!(
        plan["host_error"].as_str().unwrap().contains("nonexistent"),
        "{plan}"
    );
}

#[test]
fn converge_refuses_to_build_when_it_cannot_record() {
    let mesh = ExampleMesh::new("norecord");
    // A parent that is a regular file: nothing can be created there, not even by root.
    let blocker = mesh.dir.path().join("not-a-dir");
    std::fs::write(&blocker, "x").unwrap();
    let state = blocker.join("state.db");
    let output = mesh.meshtop_with_state(&state, &["converge"]);
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let message = said(&output);
    assert!(message.contains("refuses to build"), "{message}");
    assert!(message.contains(&state.display().to_string()), "{message}");
    let images = Command::new("docker")
        .args([
            "images",
            "-q",
            "--filter",
            &format!("label=jr2.dev/mesh={}", mesh.name),
        ])
        .output()
        .unwrap();
    assert!(images.stdout.is_empty(), "nothing was built");
}

/// Issue 28: `plan --target prod` names the target it planned, by name and kind, not the first
/// target's kind. The two targets differ in both: the first (never connected here) is a
/// namespace, the one planned is the host daemon.
#[test]
fn plan_names_the_target_it_planned() {
    let mesh = ExampleMesh::new("plantarget");
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "[target]\nkind = \"docker\"\n",
        "[[target]]\nname = \"staging\"\nkind = \"kubernetes\"\ncontext = \"nowhere\"\n\n\
         [[target]]\nname = \"prod\"\nkind = \"docker\"\n",
    );
    assert!(text.contains("name = \"prod\""), "{text}");
    std::fs::write(&file, text).unwrap();
    let plan = mesh.json(&["plan", "--json", "--target", "prod"]);
    assert_eq!(plan["target"], "prod", "{plan}");
    assert_eq!(plan["target_kind"], "docker", "{plan}");
    let output = mesh.meshtop(&["plan", "--target", "prod"]);
    let said_out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", said(&output));
    assert!(
        said_out.contains(&format!("mesh {} · target prod (docker)", mesh.name)),
        "{said_out}"
    );
}
