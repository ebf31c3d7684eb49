//! Ctrl-C during a converge: running builds are marked `cancelled`, nothing is stamped, the exit
//! code is 130 and the mesh's converge lock is released (issue 3, "Record every build").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{ExampleMesh, builds, processes_saying, said, wait_exit, wait_for_running_build};
use meshtop::backends::state::StateDb;
use meshtop::mesh::builds::{BuildRow, BuildStatus};

/// Make the base's build slow: a step that sleeps (the base has busybox by then). The step's shell
/// stays the sleep's parent (`; true` keeps it from exec'ing the sleep), so its command line, which
/// carries the returned run id, names the step's process on this machine. Returns the original
/// Dockerfile and the id.
fn slow_base(mesh: &ExampleMesh) -> (String, String) {
    let file = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&file).unwrap();
    let id = common::run_id();
    std::fs::write(&file, format!("{original}RUN sleep 30; true # step {id}\n")).unwrap();
    (original, id)
}

/// Wait until `ready` holds, checking every 100 ms; panics after `within`, saying `what`.
fn wait_until(what: &str, within: Duration, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ctrl_c_cancels_running_builds_stamps_nothing_and_releases_the_mesh() {
    let mesh = ExampleMesh::new("sigint");
    let (original, step) = slow_base(&mesh);
    let log = mesh.dir.path().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[]);
    let running = wait_for_running_build(&mesh, &mut child, &log);
    assert_eq!(running.module.as_deref(), Some("base"));
    let operation_id = running.operation_id.clone().unwrap();
    // The step really runs: its process is seen on this machine (so the probe below can fail).
    wait_until(
        "the slow step's process appears",
        Duration::from_secs(90),
        || !processes_saying(&step).is_empty(),
    );
    let step_seen = Instant::now();

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
    // BuildKit stopped the step: its process is gone well before its 30 s sleep would end it.
    let left = Duration::from_secs(25).saturating_sub(step_seen.elapsed());
    let deadline = Instant::now() + left;
    while !processes_saying(&step).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the step still runs after the converge ended: {:?}",
            processes_saying(&step)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

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
