//! A build whose process is gone (issue 14; what was left of issue 10): `meshtop builds` shows
//! `stopped (process gone)` as soon as the holder's heartbeat is stale — derived, the row still
//! says running (the holder may be frozen and wake up) — and once the process is certainly gone
//! (SIGKILL) the next open closes the row as `stopped`, saying why. The build's operation is
//! shown as its short id. Real daemon; the stale limit shortened through the test hook.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{ExampleMesh, said, wait_exit, wait_for_running_build};
use meshtop::backends::state::TEST_STALE_ENV;
use serde_json::Value;

const STALE_MS: &str = "1500";

fn meshtop(mesh: &ExampleMesh, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env(TEST_STALE_ENV, STALE_MS)
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(args)
        .output()
        .unwrap()
}

fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} {pid}");
}

/// The row of build `id` in `meshtop builds --json`.
fn json_row(mesh: &ExampleMesh, id: &str) -> Value {
    let out = meshtop(mesh, &["builds", "--json"]);
    assert!(out.status.success(), "{}", said(&out));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("build {id} not listed: {rows}"))
        .clone()
}

/// The line of build `module` in the `meshtop builds` table.
fn table_line(mesh: &ExampleMesh, module: &str) -> String {
    let out = meshtop(mesh, &["builds"]);
    assert!(out.status.success(), "{}", said(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("TIME") && text.contains(" OP "), "{text}");
    text.lines()
        .find(|l| l.contains(&format!(" {module} ")))
        .unwrap_or_else(|| panic!("no line for {module}: {text}"))
        .to_string()
}

#[test]
fn a_build_whose_process_is_gone_shows_stopped_process_gone_then_is_closed_as_stopped() {
    let mesh = ExampleMesh::new("stopped");
    let dockerfile = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(
        &dockerfile,
        format!("{original}{}", common::fresh_run("sleep 30")),
    )
    .unwrap();

    let log = mesh.dir.path().join("converge.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env(TEST_STALE_ENV, STALE_MS)
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .arg("converge")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let running = wait_for_running_build(&mesh, &mut child, &log);
    let id = running.id.clone();
    let operation = running
        .operation
        .expect("a converge's build has its short id");

    // Alive and beating: running, with its operation's short id.
    let row = json_row(&mesh, &id);
    assert_eq!(row["status"], "running", "{row}");
    assert_eq!(row["process_gone"], false, "{row}");
    assert_eq!(row["operation"], operation, "{row}");
    let line = table_line(&mesh, "base");
    assert!(line.contains("… running"), "{line}");
    assert!(line.contains(&format!("#{operation} ")), "{line}");

    // Frozen past the stale limit: shown stopped (process gone); the row is not rewritten.
    signal(child.id(), "STOP");
    let row = common::wait_for(
        "the frozen build shown as process gone once its heartbeat is stale",
        Duration::from_secs(30),
        || {
            let row = json_row(&mesh, &id);
            assert_eq!(row["status"], "running", "a read never rewrites it: {row}");
            if row["process_gone"] == true {
                Ok(row)
            } else {
                Err(row.to_string())
            }
        },
    );
    assert_eq!(row["status"], "running", "a read never rewrites it: {row}");
    let line = table_line(&mesh, "base");
    assert!(line.contains("stopped (process gone)"), "{line}");

    // Killed: certainly gone. The next open closes the row as stopped, saying why.
    signal(child.id(), "KILL");
    let status = wait_exit(&mut child, Duration::from_secs(30), "SIGKILL");
    assert!(!status.success());
    let row = json_row(&mesh, &id);
    assert_eq!(row["status"], "stopped", "{row}");
    assert_eq!(row["process_gone"], false, "{row}");
    assert!(
        row["error"].as_str().unwrap().contains("process gone"),
        "{row}"
    );
    assert!(row["ended_ms"].is_i64(), "{row}");
    let line = table_line(&mesh, "base");
    assert!(
        line.contains("■ stopped") && line.contains("process gone"),
        "{line}"
    );
    std::fs::write(&dockerfile, &original).unwrap();
}
