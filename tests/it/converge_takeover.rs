//! A converge frozen (SIGSTOP) past the lock's stale limit is taken over; when it wakes it must not
//! stamp over the newer record, and it exits non-zero naming who took the mesh (issue 10, item 1).
//! The stale limit is shortened through the test hook `MESHTOP_TEST_LOCK_STALE_MS`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{ExampleMesh, said, wait_exit, wait_for_running_build};
use meshtop::backends::state::{StateDb, TEST_STALE_ENV};

const STALE_MS: &str = "1500";

fn meshtop(mesh: &ExampleMesh) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_meshtop"));
    command
        .env(TEST_STALE_ENV, STALE_MS)
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state());
    command
}

fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} {pid}");
}

#[test]
fn a_frozen_converge_that_was_taken_over_never_stamps_over_the_new_record() {
    let mesh = ExampleMesh::new("frozen");
    let dockerfile = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(
        &dockerfile,
        format!("{original}{}", common::fresh_run("sleep 4")),
    )
    .unwrap();

    // A: starts building base (the slow one), then freezes.
    let log = mesh.dir.path().join("a.log");
    let mut a = meshtop(&mesh)
        .arg("converge")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let running = wait_for_running_build(&mesh, &mut a, &log);
    let a_id = running.operation_id.clone().unwrap();
    signal(a.id(), "STOP");
    // Frozen until its lock is stale: its last heartbeat older than the stale limit.
    let stale_ms: i64 = STALE_MS.parse().unwrap();
    common::wait_for(
        "the frozen converge's heartbeat going stale",
        Duration::from_secs(30),
        || {
            let holder = StateDb::open(&mesh.state())
                .unwrap()
                .mesh_holder(&mesh.name, "default")
                .unwrap()
                .ok_or("nobody holds the mesh")?;
            let age = meshtop::timefmt::now_ms() - holder.heartbeat_ms;
            if age > stale_ms {
                Ok(())
            } else {
                Err(format!("{holder:?}, its heartbeat {age} ms old"))
            }
        },
    );

    // B: newer inputs (the base without the slow step), takes the mesh over, builds and stamps.
    std::fs::write(&dockerfile, &original).unwrap();
    let b = meshtop(&mesh)
        .args(["converge", "--json"])
        .output()
        .unwrap();
    if !b.status.success() {
        signal(a.id(), "KILL");
        panic!("the second converge failed: {}", said(&b));
    }
    let b_summary: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
    let b_id = b_summary["operation_id"].as_str().unwrap().to_string();
    let b_err = String::from_utf8_lossy(&b.stderr);
    assert!(
        b_err.contains("over from converge #") && b_err.contains(&format!("({a_id})")),
        "the take-over is printed: {b_err}"
    );
    let history = StateDb::open(&mesh.state()).unwrap();
    let stamped = history.record(&mesh.name, "default").unwrap();
    assert_eq!(stamped.len(), 5, "{stamped:?}");

    // A wakes: it must stop, stamp nothing, and say who took the mesh.
    signal(a.id(), "CONT");
    let status = wait_exit(&mut a, Duration::from_secs(60), "SIGCONT");
    let a_err = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "A must fail: {a_err}");
    assert!(
        a_err.contains(&b_id) && a_err.contains("took it over"),
        "A names the converge that took over: {a_err}"
    );
    assert!(!a_err.contains("record stamped"), "{a_err}");
    assert_eq!(
        history.record(&mesh.name, "default").unwrap(),
        stamped,
        "the record never goes back"
    );
    assert!(
        common::builds(&mesh)
            .iter()
            .all(|b| b.status != meshtop::mesh::builds::BuildStatus::Running),
        "no build row is left running"
    );
    // A's build was taken over: `stopped` (not `failed`: it never failed), saying by whom.
    let a_build = common::builds(&mesh)
        .into_iter()
        .find(|b| b.id == running.id)
        .unwrap();
    assert_eq!(
        a_build.status,
        meshtop::mesh::builds::BuildStatus::Stopped,
        "{a_build:?}"
    );
    assert!(
        a_build
            .error
            .as_deref()
            .unwrap_or("")
            .contains("taken over"),
        "{a_build:?}"
    );
}
