//! The state database on real SQLite, one temporary directory per test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::history::{new_build, temp_db};
use meshtop::backends::state::{EventRow, NewEvent, SCHEMA_VERSION, SendRow, StateDb, StateError};
use meshtop::mesh::builds::BuildStatus;
use meshtop::mesh::model::{Record, RecordEntry};
use meshtop::mesh::progress::{Payload, Step};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[test]
fn migrates_from_empty_and_reopen_keeps_data() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    assert_eq!(h.path(), path);
    // Its converge holds the mesh: the row stays running across opens.
    h.lock_mesh(
        "demo",
        "default",
        &meshtop::backends::state::Holder::here("c1"),
    )
    .unwrap()
    .unwrap();
    h.start_build(&new_build("b1", Some("api"), 1_000)).unwrap();
    drop(h);

    let raw = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let journal: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
    drop(raw);

    let h = StateDb::open(&path).unwrap();
    let row = h.build("b1").unwrap().unwrap();
    assert_eq!(row.module.as_deref(), Some("api"));
    assert_eq!(row.status, BuildStatus::Running);
}

#[test]
fn file_mode_is_0600_and_looser_modes_are_tightened() {
    let (_dir, path) = temp_db();
    drop(StateDb::open(&path).unwrap());
    assert_eq!(mode(&path), 0o600);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(StateDb::open(&path).unwrap());
    assert_eq!(mode(&path), 0o600);
}

#[test]
fn newer_schema_is_refused_and_the_file_untouched() {
    let (_dir, path) = temp_db();
    drop(StateDb::open(&path).unwrap());
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.pragma_update(None, "user_version", SCHEMA_VERSION + 5)
        .unwrap();
    let _: String = raw
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .unwrap();
    drop(raw);
    let before = std::fs::read(&path).unwrap();

    let err = StateDb::open(&path).unwrap_err();
    assert!(
        matches!(err, StateError::TooNew { found, known, .. } if found == SCHEMA_VERSION + 5 && known == SCHEMA_VERSION),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("version {}", SCHEMA_VERSION + 5)),
        "{message}"
    );
    assert!(
        message.contains(&format!("({SCHEMA_VERSION})")),
        "{message}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the newer database was modified"
    );
    assert!(!Path::new(&format!("{}-wal", path.display())).exists());
}

#[test]
fn a_file_that_is_not_a_database_is_a_clear_error() {
    let (_dir, path) = temp_db();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text =
        "this is a text file, long enough to look like a header to anyone at all....\n".repeat(20);
    std::fs::write(&path, &text).unwrap();
    let err = StateDb::open(&path).unwrap_err();
    assert!(matches!(err, StateError::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
    assert!(err.to_string().contains("--state"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the file was modified"
    );
}

/// Issue 10: `--state mesh.toml` was refused but chmod'ed to 0600 anyway, also through a symlink.
#[test]
fn a_refused_file_keeps_its_mode_also_through_a_symlink() {
    let (dir, _) = temp_db();
    std::fs::create_dir_all(dir.path()).unwrap();
    let foreign = dir.path().join("mesh.toml");
    std::fs::write(&foreign, "[mesh]\nname = \"demo\"\n".repeat(40)).unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&foreign, &link).unwrap();
    for path in [&foreign, &link] {
        let err = StateDb::open(path).unwrap_err();
        assert!(matches!(err, StateError::NotADatabase { .. }), "{err:?}");
        assert_eq!(
            mode(&foreign),
            0o644,
            "opening {} changed the mode",
            path.display()
        );
    }
    // A database of ours, loose, is tightened once verified.
    let (_dir2, ours) = temp_db();
    drop(StateDb::open(&ours).unwrap());
    std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(StateDb::open(&ours).unwrap());
    assert_eq!(mode(&ours), 0o600);
}

#[test]
fn a_directory_in_place_of_the_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = StateDb::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("directory"), "{err}");
}

#[test]
fn an_unwritable_location_names_the_path() {
    // Under /proc nothing can be created, not even by root.
    let path = Path::new("/proc/meshtop-no-such-dir/state.db");
    let err = StateDb::open(path).unwrap_err();
    assert!(matches!(err, StateError::Dir { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("/proc/meshtop-no-such-dir/state.db"),
        "{err}"
    );

    // A parent that is a regular file.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), b"x").unwrap();
    let path = dir.path().join("file").join("state.db");
    let err = StateDb::open(&path).unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_read_only_database_names_the_path() {
    if running_as_root() {
        // Permission bits do not bind root: run this same test again as nobody.
        let exe = std::env::current_exe().unwrap();
        let output = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(exe)
            .args([
                "--exact",
                "history::a_read_only_database_names_the_path",
                "--test-threads=1",
            ])
            .env("TMPDIR", "/tmp")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "as nobody: {said}");
        assert!(said.contains("1 passed"), "the test ran as nobody: {said}");
        return;
    }
    let (_dir, path) = temp_db();
    drop(StateDb::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    let err = StateDb::open(&path).unwrap_err();
    assert!(matches!(err, StateError::ReadOnly { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );

    // A read-only directory where the file does not exist yet.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
    let path = dir.path().join("state.db");
    let err = StateDb::open(&path).unwrap_err();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

/// The env var under which the read-only test runs its reading half as another user.
const READ_ONLY_DIRS: &str = "MESHTOP_TEST_READ_ONLY_DIRS";

/// Two state files in directories the reader cannot write, neither with a `-shm`: one whose log
/// was checkpointed away (read as it is), one whose `-wal` still holds the newest build (read from
/// a copy). Both answer, with every build; nothing is written beside them.
#[test]
fn a_state_file_in_a_read_only_directory_is_read_whole() {
    if let Ok(dirs) = std::env::var(READ_ONLY_DIRS) {
        for dir in dirs.split(':') {
            let path = Path::new(dir).join("state.db");
            let db = StateDb::open_for_reading(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(db.count_builds("demo", None).unwrap(), 2, "{dir}");
            drop(db);
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert!(
                !names.iter().any(|n| n.ends_with("-shm")),
                "{dir}: {names:?}"
            );
        }
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for (name, keep_log) in [("checkpointed", false), ("logged", true)] {
        let dir = top.path().join(name);
        let path = dir.join("state.db");
        let db = StateDb::open(&path).unwrap();
        db.start_build(&new_build("b1", Some("api"), 1_000))
            .unwrap();
        db.start_build(&new_build("b2", Some("api"), 2_000))
            .unwrap();
        drop(db);
        let wal = dir.join("state.db-wal");
        if !keep_log {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .unwrap();
            drop(conn);
            let _ = std::fs::remove_file(&wal);
        }
        assert_eq!(
            wal.exists(),
            keep_log,
            "{name}: the log is where the test needs it"
        );
        let _ = std::fs::remove_file(dir.join("state.db-shm"));
        for file in std::fs::read_dir(&dir).unwrap() {
            let file = file.unwrap().path();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        dirs.push(dir.display().to_string());
    }
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let joined = dirs.join(":");
    let exe = std::env::current_exe().unwrap();
    // Permission bits do not bind root: the reading half runs as nobody (as any user otherwise).
    let mut command = if running_as_root() {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe);
        c
    } else {
        std::process::Command::new(&exe)
    };
    let output = command
        .args([
            "--exact",
            "history::a_state_file_in_a_read_only_directory_is_read_whole",
            "--test-threads=1",
        ])
        .env(READ_ONLY_DIRS, &joined)
        .env("TMPDIR", "/tmp")
        .output()
        .unwrap();
    for dir in &dirs {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the reading half: {said}");
    assert!(said.contains("1 passed"), "the reading half ran: {said}");
}

#[test]
fn stamping_the_record_merges_and_clear_forgets() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    assert!(h.record("demo", "default").unwrap().is_empty());
    let entry = |r: &str, d: &str| RecordEntry::new(r.into(), d.into());
    let first: Record = [
        ("api".to_string(), entry("api:1", "sha256:a1")),
        ("web".to_string(), entry("web:1", "sha256:w1")),
    ]
    .into_iter()
    .collect();
    // Only the converge holding the mesh stamps.
    let err = h.stamp_record("demo", "default", "c1", &first).unwrap_err();
    assert!(matches!(err, StateError::LockLost { .. }), "{err:?}");
    assert!(h.record("demo", "default").unwrap().is_empty());
    let hold = |mesh: &str, id: &str| {
        h.lock_mesh(mesh, "default", &meshtop::backends::state::Holder::here(id))
            .unwrap()
            .unwrap();
    };
    hold("demo", "c1");
    h.stamp_record("demo", "default", "c1", &first).unwrap();
    h.unlock_mesh("demo", "default", "c1").unwrap();
    hold("demo", "c2");
    hold("other", "c3");
    let second: Record = [("api".to_string(), entry("api:2", "sha256:a2"))]
        .into_iter()
        .collect();
    h.stamp_record("demo", "default", "c2", &second).unwrap();
    h.stamp_record("other", "default", "c3", &second).unwrap();

    let record = h.record("demo", "default").unwrap();
    assert_eq!(record.len(), 2);
    assert_eq!(record["api"], entry("api:2", "sha256:a2"));
    assert_eq!(
        record["web"],
        entry("web:1", "sha256:w1"),
        "a module outside the converge is kept"
    );
    let stamps = h.record_stamps("demo", "default").unwrap();
    assert_eq!(stamps["api"].1, "c2");
    assert_eq!(stamps["web"].1, "c1");

    h.clear_record("demo", "default").unwrap();
    assert!(h.record("demo", "default").unwrap().is_empty());
    assert_eq!(h.record("other", "default").unwrap().len(), 1);
}

#[test]
fn manifests_per_mesh_module_and_ref() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    assert_eq!(h.latest_manifest("demo", "api").unwrap(), None);
    h.save_manifest("demo", "api", "r1", r#"{"a":"1"}"#)
        .unwrap();
    h.save_manifest("demo", "api", "r2", r#"{"a":"2"}"#)
        .unwrap();
    h.save_manifest("other", "api", "r9", r#"{"a":"9"}"#)
        .unwrap();
    assert_eq!(
        h.manifest("demo", "api", "r1").unwrap().as_deref(),
        Some(r#"{"a":"1"}"#)
    );
    assert_eq!(h.manifest("demo", "web", "r1").unwrap(), None);
    assert_eq!(
        h.latest_manifest("demo", "api").unwrap(),
        Some(("r2".into(), r#"{"a":"2"}"#.into()))
    );
    // Saving r1 again makes it the latest and replaces its text.
    h.save_manifest("demo", "api", "r1", r#"{"a":"1b"}"#)
        .unwrap();
    assert_eq!(
        h.latest_manifest("demo", "api").unwrap(),
        Some(("r1".into(), r#"{"a":"1b"}"#.into()))
    );
}

#[test]
fn events_are_read_in_order_after_a_cursor_from_another_handle() {
    let (_dir, path) = temp_db();
    let writer = StateDb::open(&path).unwrap();
    let reader = StateDb::open(&path).unwrap();
    assert_eq!(reader.latest_operation("demo").unwrap(), None);
    let event = |c: &str, kind: &str, text: &str| NewEvent {
        mesh: "demo".into(),
        operation_id: c.into(),
        kind: kind.into(),
        module: Some("api".into()),
        text: text.into(),
        payload: None,
    };
    let tier = Payload::Tier {
        tier: 0,
        modules: vec!["api".into()],
    };
    let first = writer
        .append_event(&NewEvent {
            payload: Some(tier.clone()),
            ..event("c1", "tier", "tier 0")
        })
        .unwrap();
    writer
        .append_event(&NewEvent {
            mesh: "other".into(),
            ..event("c9", "tier", "elsewhere")
        })
        .unwrap();
    let second = writer
        .append_event(&event("c1", "output", "step 1"))
        .unwrap();
    let third = writer
        .append_event(&event("c2", "a-step-from-a-newer-meshtop", "record"))
        .unwrap();
    assert!(first < second && second < third);

    let all: Vec<EventRow> = reader.events_after("demo", 0, 100).unwrap();
    let texts: Vec<_> = all.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(texts, ["tier 0", "step 1", "record"]);
    let after: Vec<_> = reader.events_after("demo", first, 1).unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, second);
    assert_eq!(after[0].step, Step::Output);
    // A step this meshtop does not know reads, it is not an error.
    assert_eq!(all[2].step, Step::Other);
    // Its data reads back as written, beside its text; a step without data has none.
    assert_eq!(all[0].payload, Some(tier));
    assert_eq!(all[1].payload, None);
    // Data of a shape this meshtop does not know (a newer one wrote it): the step still reads.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE events SET payload = '{\"step\":\"teleported\",\"to\":1}' WHERE id = ?1",
            [first],
        )
        .unwrap();
    let again = reader.events_after("demo", 0, 1).unwrap();
    assert_eq!(
        (again[0].text.as_str(), &again[0].payload),
        ("tier 0", &None)
    );
    assert_eq!(after[0].operation_id, "c1");
    assert!(reader.events_after("demo", third, 10).unwrap().is_empty());
    assert_eq!(
        reader.latest_operation("demo").unwrap().as_deref(),
        Some("c2")
    );
}

#[test]
fn sends_newest_first_per_module() {
    let (_dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    let send = |module: &str, machine: &str, at_ms: i64, outcome: &str| SendRow {
        mesh: "demo".into(),
        target: "default".into(),
        module: module.into(),
        machine: machine.into(),
        from_digest: "sha256:old".into(),
        to_ref: "api:2".into(),
        to_digest: "sha256:new".into(),
        outcome: outcome.into(),
        at_ms,
        operation_id: None,
    };
    h.record_send(&send("api", "api-1", 10, "moved")).unwrap();
    h.record_send(&send("api", "api-2", 20, "failed: port in use"))
        .unwrap();
    h.record_send(&send("web", "web-1", 15, "moved")).unwrap();
    let api = h.sends("demo", Some("api"), 10).unwrap();
    assert_eq!(
        api.iter().map(|s| s.machine.as_str()).collect::<Vec<_>>(),
        ["api-2", "api-1"]
    );
    assert_eq!(api[0].outcome, "failed: port in use");
    assert_eq!(api[0], send("api", "api-2", 20, "failed: port in use"));
    let all = h.sends("demo", None, 2).unwrap();
    assert_eq!(
        all.iter().map(|s| s.machine.as_str()).collect::<Vec<_>>(),
        ["api-2", "web-1"]
    );
    assert!(h.sends("other", None, 10).unwrap().is_empty());
}

/// Issue 10, item 7: a state the user cannot write still answers the commands that only read
/// (`builds`, `plan`, `status`), read-only; a converge still refuses, naming the file.
#[test]
fn read_commands_open_a_state_they_cannot_write_read_only() {
    if running_as_root() {
        let exe = std::env::current_exe().unwrap();
        let output = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(exe)
            .args([
                "--exact",
                "history::read_commands_open_a_state_they_cannot_write_read_only",
                "--test-threads=1",
            ])
            .env("TMPDIR", "/tmp")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "as nobody: {said}");
        assert!(said.contains("1 passed"), "the test ran as nobody: {said}");
        return;
    }
    let (dir, path) = temp_db();
    let h = StateDb::open(&path).unwrap();
    h.lock_mesh(
        "demo",
        "default",
        &meshtop::backends::state::Holder::here("c1"),
    )
    .unwrap()
    .unwrap();
    h.start_build(&new_build("b1", Some("api"), 1_000)).unwrap();
    drop(h);
    let bin = env!("CARGO_BIN_EXE_meshtop");
    let mesh = dir.path().join("mesh.toml");
    std::fs::write(
        &mesh,
        "[mesh]\nname = \"demo\"\n\n[target]\nkind = \"docker\"\n\n[[module]]\nname = \"api\"\ncontext = \"api\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("api")).unwrap();
    std::fs::write(dir.path().join("api/Dockerfile"), "FROM scratch\n").unwrap();
    // Shared for reading only: the file, its -wal/-shm, and its directory.
    for file in ["state.db", "state.db-wal", "state.db-shm"] {
        let file = path.parent().unwrap().join(file);
        if file.exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        }
    }
    std::fs::set_permissions(
        path.parent().unwrap(),
        std::fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .arg("--mesh")
            .arg(&mesh)
            .arg("--state")
            .arg(&path)
            .args(args)
            .output()
            .unwrap()
    };
    let builds = run(&["builds", "--json"]);
    let said = String::from_utf8_lossy(&builds.stderr).into_owned();
    assert!(builds.status.success(), "{said}");
    assert!(String::from_utf8_lossy(&builds.stdout).contains("\"b1\""));
    let converge = run(&["converge"]);
    assert!(!converge.status.success());
    let said = String::from_utf8_lossy(&converge.stderr).into_owned();
    assert!(said.contains(&path.display().to_string()), "{said}");
    std::fs::set_permissions(
        path.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}
