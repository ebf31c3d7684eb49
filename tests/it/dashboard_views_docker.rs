//! The dashboard's gc and stats views on the real daemon, read through the session as the loop
//! reads them: the same answers as `meshtop gc --dry-run --json` and `meshtop stats --json`, and the
//! sweep confirmed in the view takes what it listed and says the bytes it freed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::sync::Arc;

use common::{ExampleMesh, said};
use meshtop::app::msg::ActionRequest;
use meshtop::app::views::{GC_KEEP_NEWEST, ViewData, ViewRequest};
use meshtop::converge::targets::Overrides;
use meshtop::sources::{Session, actions, views};

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_views_answer_as_the_commands_and_the_sweep_takes_what_the_view_listed() {
    let mesh = ExampleMesh::new("dv");
    let converge = mesh.meshtop(&["converge", "--json"]);
    assert!(converge.status.success(), "{}", said(&converge));
    // An image of this mesh nothing needs: labelled as meshtop labels, made by no build.
    let context = mesh.dir.path().join("stray");
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(context.join("stray.txt"), &mesh.name).unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        "FROM scratch\nCOPY stray.txt /stray.txt\n",
    )
    .unwrap();
    let tag = format!("{}/web:0000deadbeef-amd64", mesh.name);
    let mesh_label = format!("jr2.dev/mesh={}", mesh.name);
    let built = docker(&[
        "build",
        "-q",
        "--label",
        &mesh_label,
        "--label",
        "jr2.dev/module=web",
        "-t",
        &tag,
        context.to_str().unwrap(),
    ]);
    assert!(built.status.success(), "{}", said(&built));
    let stray = String::from_utf8_lossy(&built.stdout).trim().to_string();

    let loaded = meshtop::workspace::file::load(&mesh.mesh_file()).unwrap();
    let session = Session::new(Arc::new(loaded), mesh.state(), Overrides::default());

    // gc: the view's dry run is the command's, field for field. Without a grace: the stray was
    // built a moment ago (the grace is gc_team.rs's).
    let ViewData::Gc(report) = views::read(
        session.clone(),
        ViewRequest::Gc {
            keep_newest: GC_KEEP_NEWEST,
            grace_ms: 0,
            target: None,
        },
    )
    .await
    .unwrap() else {
        panic!("the gc view was answered with something else");
    };
    let dry = mesh.meshtop(&["gc", "--dry-run", "--grace", "0s", "--json"]);
    assert!(dry.status.success(), "{}", said(&dry));
    let command: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(serde_json::to_value(&*report).unwrap(), command);
    assert_eq!(report.candidates.len(), 1, "{report:#?}");
    assert_eq!(report.candidates[0].name, stray);
    assert!(report.candidates[0].bytes > 0, "{report:#?}");
    assert!(report.kept > 0 && report.kept_bytes > 0, "{report:#?}");
    assert!(report.kept_by["record"] >= 5, "{report:#?}");

    // stats: the view's numbers are the command's.
    let ViewData::Stats(stats) =
        views::read(session.clone(), ViewRequest::Stats { since_ms: None })
            .await
            .unwrap()
    else {
        panic!("the stats view was answered with something else");
    };
    let out = mesh.meshtop(&["stats", "--json"]);
    assert!(out.status.success(), "{}", said(&out));
    let command: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(serde_json::to_value(&*stats).unwrap(), command);
    assert_eq!(stats.modules["web"].builds, 1, "{stats:#?}");

    // The sweep the view confirms: exactly what it listed, the bytes freed said.
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let done = actions::run(
        session.clone(),
        ActionRequest::Gc {
            keep_newest: GC_KEEP_NEWEST,
            grace_ms: 0,
            confirmed: report.candidates.clone(),
        },
        None,
        tx,
        tokio::sync::watch::channel(false).1,
    )
    .await
    .unwrap();
    assert_eq!(
        done,
        format!(
            "took 1 of 1 confirmed, {} bytes freed",
            report.candidates[0].bytes
        )
    );
    assert!(!docker(&["image", "inspect", &stray]).status.success());
    let after = mesh.meshtop(&["gc", "--dry-run", "--grace", "0s", "--json"]);
    let after: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(after["candidates"], serde_json::json!([]), "{after}");
}
