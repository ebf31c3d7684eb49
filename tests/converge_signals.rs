//! Ctrl-C during a converge: running builds are marked `cancelled`, nothing is stamped, the exit
//! code is 130 and the mesh's converge lock is released (issue 3, "Record every build").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{ExampleMesh, builds, said, wait_exit, wait_for_running_build};
use meshtop::backends::state::StateDb;
use meshtop::mesh::builds::{BuildRow, BuildStatus};

/// Make the base's build slow: a step that sleeps (the base has busybox by then).
pub fn slow_base(mesh: &ExampleMesh) -> String {
    let file = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!("{original}{}", common::fresh_run("sleep 30")),
    )
    .unwrap();
    original
}

#[test]
fn ctrl_c_cancels_running_builds_stamps_nothing_and_releases_the_mesh() {
    let mesh = ExampleMesh::new("sigint");
    let original = slow_base(&mesh);
    let log = mesh.dir.path().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[]);
    let running = wait_for_running_build(&mesh, &mut child, &log);
    assert_eq!(running.module.as_deref(), Some("base"));
    let operation_id = running.operation_id.clone().unwrap();

    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    // Well under the 30 s the step sleeps: the converge must not wait for the build to end.
    let status = wait_exit(&mut child, Duration::from_secs(20), "the signal");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");

    let history = StateDb::open(&mesh.state()).unwrap();
    let rows: Vec<BuildRow> = builds(&mesh)
        .into_iter()
        .filter(|b| b.operation_id.as_deref() == Some(operation_id.as_str()))
        .collect();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|b| b.status != BuildStatus::Running),
        "{rows:#?}"
    );
    let base = history.build(&running.id).unwrap().unwrap();
    assert_eq!(base.status, BuildStatus::Cancelled, "{base:#?}");
    assert!(base.ended_ms.is_some(), "{base:#?}");
    assert!(
        history.record(&mesh.name, "default").unwrap().is_empty(),
        "a cancelled converge stamps nothing"
    );
    let holder = history.mesh_holder(&mesh.name, "default").unwrap();
    assert!(holder.is_none(), "the lock is released: {holder:?}");

    // The mesh is free: plan and converge work (without the slow step, to keep the test short).
    std::fs::write(mesh.root().join("base/Dockerfile"), original).unwrap();
    let plan = mesh.meshtop(&["plan"]);
    assert!(plan.status.success(), "{}", said(&plan));
    let converge = mesh.meshtop(&["converge", "--json"]);
    assert!(converge.status.success(), "{}", said(&converge));
    let summary: serde_json::Value = serde_json::from_slice(&converge.stdout).unwrap();
    assert_eq!(summary["stamped"], true, "{summary}");
    assert_eq!(history.record(&mesh.name, "default").unwrap().len(), 5);
}
