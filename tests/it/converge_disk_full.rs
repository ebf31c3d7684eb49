//! The state database's disk fills while a build runs (issue 10, item 3): the build's end cannot be
//! written, so the converge says exactly what happened — "built X; its record could not be
//! written: … disk full …; nothing stamped" — and fails; nothing is stamped; and the next open of
//! the state (once there is room) closes the row as `stopped`, saying why, instead of leaving it
//! `running` under a lock whose process is gone. Real daemon; the state on a small tmpfs (we run
//! as root: the test fails loudly when it cannot mount one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{ExampleMesh, said, wait_exit};
use meshtop::backends::state::{BuildQuery, StateDb};
use meshtop::mesh::builds::{BuildRow, BuildStatus};

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}; this test needs root and mount(8)"));
        assert!(
            out.status.success(),
            "cannot mount a tmpfs (this test needs root, or CAP_SYS_ADMIN): {}",
            said(&out)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Write zeros into `file` until the filesystem refuses (ENOSPC); panics on any other error.
fn fill(file: &Path) {
    let mut out = std::fs::File::create(file).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        match out.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling {}: {e}", file.display()),
        }
    }
    let _ = out.sync_all();
}

fn meshtop(mesh: &ExampleMesh, state: &Path, args: &[&str]) -> Output {
    mesh.meshtop_with_state(state, args)
}

fn rows(state: &Path, mesh: &str) -> Vec<BuildRow> {
    StateDb::open(state)
        .unwrap()
        .builds(&BuildQuery {
            mesh: mesh.to_string(),
            limit: 50,
            ..BuildQuery::default()
        })
        .unwrap()
}

#[test]
fn a_full_disk_at_the_end_of_a_build_stamps_nothing_and_the_next_open_closes_the_row_as_stopped() {
    let mesh = ExampleMesh::new("diskfull");
    let fs = Tmpfs::mount("4m");
    let state: PathBuf = fs.path().join("state.db");
    let dockerfile = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(
        &dockerfile,
        format!("{original}{}", common::fresh_run("sleep 3")),
    )
    .unwrap();

    // The log beside the mesh, not on the tmpfs that fills.
    let log = mesh.dir.path().join("converge.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(&state)
        .args(["converge", "base"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // The build's start is written; then the disk fills while it runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        if state.exists()
            && let Some(row) = rows(&state, &mesh.name)
                .into_iter()
                .find(|b| b.status == BuildStatus::Running)
        {
            break row.id;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the converge ended before its build ran: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "no build started within a minute"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let filler = fs.path().join("filler");
    fill(&filler);

    let status = wait_exit(&mut child, Duration::from_secs(120), "the full disk");
    let said_err = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "the converge must fail: {said_err}");
    assert!(
        said_err.contains("built ")
            && said_err.contains("its record could not be written")
            && said_err.contains("disk full")
            && said_err.contains("nothing stamped"),
        "says exactly what happened: {said_err}"
    );
    assert!(!said_err.contains("refuses to build"), "{said_err}");
    assert!(!said_err.contains("record stamped"), "{said_err}");

    // Room again: the next open (any command) closes the row as stopped, saying why.
    std::fs::remove_file(&filler).unwrap();
    let listed = meshtop(&mesh, &state, &["builds", "--json"]);
    assert!(listed.status.success(), "{}", said(&listed));
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap_or_else(|| panic!("build {id} not listed: {listed}"))
        .clone();
    assert_eq!(row["status"], "stopped", "{row}");
    assert!(
        row["error"]
            .as_str()
            .unwrap()
            .contains("its record could not be written"),
        "{row}"
    );
    let history = StateDb::open(&state).unwrap();
    assert!(
        history.record(&mesh.name, "default").unwrap().is_empty(),
        "nothing stamped"
    );
    std::fs::write(&dockerfile, &original).unwrap();
}
