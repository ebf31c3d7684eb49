//! The registry as the third voucher, end to end on the real registry (127.0.0.1:5000, or a
//! stoppable front of it) and the real daemon: CI publishes, a clean machine reuses; an image
//! without meshtop's proof never answers; a registry stopped mid-plan makes the modules build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::example::{ExampleMesh, builds, decisions, plan_reasons, said};
use common::local_registry::{LOCAL, docker, machine_images, require_registry};
use common::registry_proxy::StoppableRegistry;

/// The example mesh under a unique name, with `registry = "<host>"` in [mesh].
fn mesh_with_registry(tag: &str, host: &str) -> ExampleMesh {
    let mesh = ExampleMesh::new(tag);
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text.replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\nregistry = \"{host}\"\n", mesh.name),
        1,
    );
    std::fs::write(&file, text).unwrap();
    mesh
}

/// module → artifact of a converge summary.
fn artifacts(summary: &serde_json::Value) -> BTreeMap<String, String> {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["digest"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// [`ExampleMesh::json_with_state`] off the runtime's threads: the test's registry front answers meanwhile.
async fn meshtop_beside(mesh: &ExampleMesh, state: &Path, args: &[&str]) -> serde_json::Value {
    let (mesh_file, state) = (mesh.mesh_file(), state.to_path_buf());
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .arg("--mesh")
            .arg(mesh_file)
            .arg("--state")
            .arg(state)
            .args(&owned)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "meshtop {args:?} failed ({:?}):\n{}",
        output.status.code(),
        said(&output)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn ci_publishes_and_a_clean_machine_converges_with_zero_builds_on_the_same_artifacts() {
    require_registry().await;
    // The real registry through a front that counts what it is asked.
    let registry = StoppableRegistry::start().await;
    let mesh = mesh_with_registry("rvci", &registry.host);
    // CI: every module built and published.
    let ci = meshtop_beside(&mesh, &mesh.state(), &["converge", "--publish", "--json"]).await;
    assert_eq!(decisions(&ci).len(), 5, "{ci}");
    assert!(decisions(&ci).values().all(|d| d == "build"), "{ci}");
    let built = artifacts(&ci);
    let published: Vec<_> = builds(&mesh)
        .into_iter()
        .filter(|b| b.published_digest.is_some())
        .collect();
    assert_eq!(published.len(), built.len(), "every build published");
    let ci_machines = machine_images(&mesh.name);
    assert_eq!(ci_machines.len(), 3, "{ci_machines:?}");

    // A clean machine: none of the mesh's containers or images, a fresh state file.
    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    let plan = meshtop_beside(&mesh, &fresh, &["plan", "--json"]).await;
    let planned = plan_reasons(&plan);
    assert_eq!(planned.len(), 5, "{plan}");
    for (module, (decision, reason)) in planned {
        assert_eq!(decision, "registry", "{module}: {reason}");
        assert!(
            reason.contains(&format!(
                "registry {} holds manifest sha256:",
                registry.host
            )),
            "{module}: {reason}"
        );
    }
    let asked = registry.seen();
    let clean = meshtop_beside(&mesh, &fresh, &["converge", "--json"]).await;
    assert_eq!(decisions(&clean).len(), 5, "{clean}");
    assert!(
        decisions(&clean).values().all(|d| d == "registry"),
        "{clean}"
    );
    assert!(
        registry.seen() > asked,
        "the clean machine asked the registry (the count below can fail)"
    );
    assert_eq!(artifacts(&clean), built, "the artifacts CI built");
    let state = meshtop::backends::state::StateDb::open(&fresh).unwrap();
    let rows = state
        .builds(&meshtop::backends::state::BuildQuery {
            mesh: mesh.name.clone(),
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    assert!(
        rows.is_empty(),
        "zero builds on the clean machine: {rows:?}"
    );
    assert_eq!(
        machine_images(&mesh.name),
        ci_machines,
        "the same image ids"
    );
    // The next converge: the record answers, the registry is not asked (nothing to decide).
    let before = registry.seen();
    let again = meshtop_beside(&mesh, &fresh, &["converge", "--json"]).await;
    assert_eq!(decisions(&again).len(), 5, "{again}");
    assert!(decisions(&again).values().all(|d| d == "record"), "{again}");
    assert_eq!(
        registry.seen(),
        before,
        "the registry is not asked when the record answers"
    );
}

/// Push an image FROM scratch under `reference` with `labels` (docker build --label).
fn push_impostor(reference: &str, labels: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), uuid::Uuid::now_v7().to_string()).unwrap();
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\nCOPY f /f\n").unwrap();
    // No cache: a legacy build reusing another test's intermediate image fails when that test
    // removes its images (`unable to find image`), as seen once in the full suite.
    let mut args = vec!["build", "-q", "--no-cache", "-t", reference];
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for label in &labels {
        args.extend(["--label", label.as_str()]);
    }
    args.push(dir.path().to_str().unwrap());
    docker(&args);
    docker(&["push", reference]);
    docker(&["rmi", reference]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_under_the_ref_without_both_labels_or_with_other_inputs_never_answers() {
    require_registry().await;
    let mesh = mesh_with_registry("rvimp", LOCAL);
    let plan = mesh.json_with_state(&mesh.state(), &["plan", "--json", "base"]);
    let reference = plan["modules"][0]["ref"].as_str().unwrap().to_string();
    let base = || {
        let plan = mesh.json_with_state(&mesh.state(), &["plan", "--json", "base"]);
        plan_reasons(&plan).remove("base").unwrap()
    };
    let (decision, reason) = base();
    assert_eq!(decision, "build");
    assert!(
        reason.contains("holds no manifest under this ref"),
        "{reason}"
    );

    // The tag without meshtop's labels.
    push_impostor(&reference, &[]);
    let (decision, reason) = base();
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("without meshtop's labels"), "{reason}");
    // The module label without the inputs label.
    push_impostor(&reference, &[("jr2.dev/module", "base")]);
    let (decision, reason) = base();
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains("without the label jr2.dev/inputs"),
        "{reason}"
    );
    // Both labels, another input digest (the same 12 hex characters, different after them).
    let hash = reference
        .rsplit(':')
        .next()
        .unwrap()
        .split('-')
        .next()
        .unwrap();
    let other = format!("{hash}{}", "0".repeat(64 - hash.len()));
    push_impostor(
        &reference,
        &[("jr2.dev/module", "base"), ("jr2.dev/inputs", &other)],
    );
    let (decision, reason) = base();
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("built from other inputs"), "{reason}");
    // The converge builds it.
    let summary = mesh.json_with_state(&mesh.state(), &["converge", "--json", "base"]);
    assert_eq!(decisions(&summary)["base"], "build", "{summary}");
    assert_eq!(builds(&mesh).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_stopped_mid_plan_makes_the_modules_build_exit_0_with_the_warning() {
    require_registry().await;
    let registry = StoppableRegistry::start().await;
    let mesh = mesh_with_registry("rvstop", &registry.host);
    let ci = meshtop_beside(&mesh, &mesh.state(), &["converge", "--publish", "--json"]).await;
    assert_eq!(decisions(&ci).len(), 5, "{ci}");
    assert!(decisions(&ci).values().all(|d| d == "build"), "{ci}");
    // A steady converge the record answers makes zero registry calls.
    let before = registry.seen();
    let steady = {
        let (mesh_file, state) = (mesh.mesh_file(), mesh.state());
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_meshtop"))
                .arg("--mesh")
                .arg(mesh_file)
                .arg("--state")
                .arg(state)
                .args(["converge", "--json"])
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    assert!(steady.status.success(), "{}", said(&steady));
    let steady: serde_json::Value = serde_json::from_slice(&steady.stdout).unwrap();
    assert_eq!(decisions(&steady).len(), 5, "{steady}");
    assert!(
        decisions(&steady).values().all(|d| d == "record"),
        "{steady}"
    );
    assert_eq!(
        registry.seen(),
        before,
        "no registry call in a steady converge"
    );
    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    // The registry answers base's two questions (manifest, config), then stops.
    registry.stop_after(2);
    let seen = registry.seen();
    let output = {
        let (mesh_file, fresh) = (mesh.mesh_file(), fresh.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_meshtop"))
                .arg("--mesh")
                .arg(mesh_file)
                .arg("--state")
                .arg(fresh)
                .args(["converge", "--json"])
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    assert!(registry.seen() > seen + 2, "it was asked after it stopped");
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // Base: answered, then its pull failed (the registry had stopped): built instead.
    assert_eq!(decisions(&summary).len(), 5, "{summary}");
    for (module, decision) in decisions(&summary) {
        assert_eq!(decision, "build", "{module}: {summary}");
    }
    let warnings = summary["warnings"].to_string();
    assert!(
        warnings.contains(&format!("registry {} could not be asked", registry.host)),
        "{warnings}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.matches("could not be asked").count(),
        1,
        "the warning once:\n{stderr}"
    );
    assert!(
        stderr.contains("failed") && stderr.contains("built instead"),
        "base's failed pull falls back to a build:\n{stderr}"
    );
}

#[test]
fn publish_without_a_registry_is_bad_input() {
    let mesh = ExampleMesh::new("rvnoreg");
    let output = mesh.meshtop(&["converge", "--publish"]);
    assert_eq!(output.status.code(), Some(2), "{}", said(&output));
    assert!(
        said(&output).contains("names no registry to publish to"),
        "{}",
        said(&output)
    );
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text.replacen("[target]", "publish = true\n\n[target]", 1);
    std::fs::write(&file, text).unwrap();
    let output = mesh.meshtop(&["plan"]);
    assert_eq!(output.status.code(), Some(2), "{}", said(&output));
    assert!(
        said(&output).contains("`publish` in [mesh] is set but there is no `registry`"),
        "{}",
        said(&output)
    );
}
